//! `tether exec --resume SESSION --list`: the processes a session holds, as a table for a
//! person or as JSON for a script.

use anyhow::bail;
use tether_client::ClientOptions;

use super::attach::resume;
use crate::executors::Executor;

/// Lists `session`'s processes on stdout, `json` or as a table; returns the exit code.
pub(super) async fn list(
    executor: &Executor,
    session: &str,
    options: ClientOptions,
    json: bool,
) -> anyhow::Result<i32> {
    let client = resume(executor, session, options).await?;
    if !client.tether_extensions().process_list {
        bail!("this server cannot list a session's processes (it does not serve process/list)");
    }
    let processes = client.list_processes().await?;
    if json {
        crate::stdout::line(serde_json::to_string(&processes)?)?;
        client.disconnect();
        return Ok(0);
    }
    crate::stdout::line("PROCESS\tSTATE\tEXIT\tNEXT_SEQ\tCOMMAND")?;
    for process in processes {
        let exit = process.exit_code.map_or("-".to_owned(), |code| code.to_string());
        let state = format!("{:?}", process.state).to_lowercase();
        crate::stdout::line(format_args!(
            "{}\t{state}\t{exit}\t{}\t{}",
            process.process_id,
            process.next_seq,
            process.argv.join(" ")
        ))?;
    }
    client.disconnect();
    Ok(0)
}
