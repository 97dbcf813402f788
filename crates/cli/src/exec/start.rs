//! Starting the command `tether exec` names (a login shell if none), and `--detach`, which
//! leaves it running.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tether_client::{ClientOptions, ExecServerClient, RemoteProcess};
use tether_protocol::PathUri;
use tether_protocol::process::{EnvInherit, EnvPolicy, ExecParams};

use super::ExecArgs;
use super::terminal::local_terminal_size;
use crate::executors::Executor;
use crate::start_failure;

/// Connects and starts the command `args` names; a start refused is explained as the shell
/// would (127, 126) where the failure says why. With `--print-ids` its ids go to stderr.
pub(super) async fn start(
    executor: &Executor,
    options: ClientOptions,
    args: &ExecArgs,
) -> anyhow::Result<(ExecServerClient, RemoteProcess)> {
    let client = crate::report::connect(executor, options).await?;
    let params = start_params(args, &client)?;
    let process = match client.start(params.clone()).await {
        Ok(process) => process,
        Err(error) => return Err(start_failure::explain(&client, &params, error).await),
    };
    if args.print_ids {
        eprintln!("session={} process={}", client.session_id(), process.process_id());
    }
    Ok((client, process))
}

/// Leaves a started command running and says how to find it again: its ids on stdout (for a
/// script), and on stderr how long the server keeps it and the command that follows it.
pub(super) async fn detach(
    client: &ExecServerClient,
    process: RemoteProcess,
    again: &str,
    tty: bool,
    json: bool,
) -> anyhow::Result<i32> {
    let (session, process_id) = (client.session_id().to_owned(), process.process_id().to_owned());
    // Nothing will write to it: a command that reads its input sees the end of it, not a
    // wait that lasts as long as the session (a terminal has no end of input to give).
    if client.tether_extensions().close_stdin && !tty {
        process.control().close_stdin().await?;
    }
    match json {
        true => {
            crate::stdout::line(serde_json::json!({"sessionId": session, "processId": process_id}))?
        }
        false => crate::stdout::line(format_args!("session={session} process={process_id}"))?,
    }
    let kept = match client.detached_ttl() {
        Some(ttl) => format!("keeps it {}", humanize(ttl)),
        None => "did not say how long it keeps it (it does not serve Tether's sessionTtl; the reference keeps a session 80 s)".to_owned(),
    };
    eprintln!(
        "tether exec: left running; the server {kept}. Follow it with: {again} --resume {session} --process {process_id}"
    );
    drop(process);
    client.disconnect();
    Ok(0)
}

/// `24 h`, `90 s`: what a person reads at a glance.
fn humanize(ttl: Duration) -> String {
    let secs = ttl.as_secs();
    match secs {
        s if s >= 3600 && s % 3600 == 0 => format!("{} h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// What to start for `args`: the command (a login shell if none), in `--cwd` (or the user's
/// home), with the executor's environment plus `--env` (or only `--env` with `--clean-env`).
fn start_params(args: &ExecArgs, client: &ExecServerClient) -> anyhow::Result<ExecParams> {
    let info = client.environment_info();
    let cwd = match &args.cwd {
        Some(dir) => PathUri::from_path(std::path::Path::new(dir))
            .with_context(|| format!("--cwd {dir}: give an absolute path on the executor"))?,
        None => info
            .and_then(|info| info.user_home_dir.clone().or_else(|| info.cwd.clone()))
            .unwrap_or_else(|| PathUri::parse("file:///").expect("a valid URI")),
    };
    // No command: the executor user's shell as a login shell, as `ssh host` gives it.
    let command = match args.command.is_empty() {
        false => args.command.clone(),
        true => {
            let shell = info.map(|info| info.shell.path.as_str()).filter(|path| !path.is_empty());
            vec![shell.unwrap_or("/bin/sh").to_owned(), "-l".to_owned()]
        }
    };
    let mut env = BTreeMap::new();
    for pair in &args.env {
        let Some((name, value)) = pair.split_once('=') else {
            bail!("--env {pair} must be NAME=VALUE");
        };
        env.insert(name.to_owned(), value.to_owned());
    }
    let env_policy = (!args.clean_env).then(|| EnvPolicy {
        inherit: EnvInherit::All,
        ignore_default_excludes: false,
        exclude: Vec::new(),
        set: BTreeMap::new(),
        include_only: Vec::new(),
    });
    let process_id = format!("tether-exec-{}-{}", std::process::id(), unique());
    // A terminal program on the executor draws for our terminal, so it needs our TERM (ssh
    // passes it on the same way); `--env TERM=…` still wins.
    if args.tty
        && !env.contains_key("TERM")
        && let Ok(term) = std::env::var("TERM")
    {
        env.insert("TERM".to_owned(), term);
    }
    let mut params = ExecParams::new(process_id, command, cwd);
    params.env = env;
    params.env_policy = env_policy;
    params.tty = args.tty;
    params.pipe_stdin = !args.no_stdin;
    if args.tty && client.tether_extensions().pty_size {
        params.pty_size = local_terminal_size();
    }
    Ok(params)
}

/// A number unlikely to repeat across runs, for process ids.
fn unique() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}
