//! `tether sessions` and `tether kill`: the sessions a person's client has on an executor —
//! detached commands among them — found and ended by id (Tether's `sessions` extension). A
//! session belongs to the client that made it (its token's subject, or its address on a
//! server without authentication); no one is shown another's.

use anyhow::bail;
use clap::Args;
use tether_client::ExecServerClient;

const SESSIONS_HELP: &str = "\
Examples:
  tether sessions --url ws://127.0.0.1:4500
  tether sessions --url build --json
  tether kill --url ws://127.0.0.1:4500 SESSION

A session with nothing in it (one a finished `tether sessions` left) is not shown; --all shows
it. `tether exec --resume SESSION --list` shows a session's processes, `--process ID` follows
one.

Exit codes: 0 done; 1 the executor could not be reached, or has no such session of yours (one
line on stderr says why).";

/// How `sessions`, `kill` and `port-forward` reach the executor.
#[derive(Args)]
pub struct Reach {
    /// The executor: `ws://HOST:PORT`, `wss://HOST:PORT`, or a name from the config file.
    #[arg(long, env = "TETHER_URL", value_name = "URL|NAME")]
    pub url: String,

    #[command(flatten)]
    pub trust: crate::executors::TrustFlags,
}

#[derive(Args)]
#[command(after_help = SESSIONS_HELP)]
pub struct SessionsArgs {
    #[command(flatten)]
    reach: Reach,

    /// Print a JSON array of the sessions for a script.
    #[arg(long)]
    json: bool,

    /// Show sessions with nothing in them too.
    #[arg(long)]
    all: bool,
}

#[derive(Args)]
#[command(after_help = SESSIONS_HELP)]
pub struct KillArgs {
    #[command(flatten)]
    reach: Reach,

    /// The session to end (as `tether sessions` lists it): its processes are killed.
    #[arg(value_name = "SESSION")]
    session: String,
}

async fn connect(reach: &Reach) -> anyhow::Result<ExecServerClient> {
    let executor = reach.trust.over(crate::executors::resolve(&reach.url)?);
    let client =
        crate::report::connect(&executor, executor.client_options("tether-sessions")?).await?;
    if !client.tether_extensions().sessions {
        client.disconnect();
        bail!(
            "this server cannot list or end sessions (Tether's sessions extension; the reference has none)"
        );
    }
    Ok(client)
}

/// `tether sessions`: one line per session (`SESSION<TAB>STATE<TAB>RUNNING<TAB>PROCESSES<TAB>EXPIRES`).
pub async fn sessions(args: SessionsArgs) -> anyhow::Result<()> {
    let client = connect(&args.reach).await?;
    let listed = client.list_sessions().await;
    client.disconnect();
    let shown: Vec<_> = listed?
        .into_iter()
        .filter(|session| !session.current && (args.all || session.processes > 0))
        .collect();
    if args.json {
        return Ok(crate::stdout::line(serde_json::to_string(&shown)?)?);
    }
    crate::stdout::line("SESSION\tSTATE\tRUNNING\tPROCESSES\tEXPIRES")?;
    for session in shown {
        let (state, expires) = match session.expires_in_ms {
            None => ("attached", "-".to_owned()),
            Some(ms) => ("detached", format!("in {} s", ms.div_ceil(1000))),
        };
        crate::stdout::line(format_args!(
            "{}\t{state}\t{}\t{}\t{expires}",
            session.session_id, session.running, session.processes
        ))?;
    }
    Ok(())
}

/// `tether kill SESSION`: ends a detached session of the person's own.
pub async fn kill(args: KillArgs) -> anyhow::Result<()> {
    let client = connect(&args.reach).await?;
    let ended = client.end_session(&args.session).await;
    client.disconnect();
    ended.map_err(|error| match error.code() {
        Some(tether_protocol::error::NOT_FOUND) => anyhow::anyhow!(
            "no session {} of yours on this executor; `tether sessions --url {}` lists yours",
            args.session,
            args.reach.url
        ),
        _ => anyhow::anyhow!("session {}: {error}", args.session),
    })
}
