//! `tether exec`: run one command on an exec-server as if it ran here — its stdout and stderr
//! stream to ours, our stdin goes to it, and we exit with its exit code. The connection may
//! drop and come back meanwhile; the output arrives whole, once, in order.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use tether_client::{
    ClientOptions, ConnectionStatus, ExecServerClient, ProcessControl, ProcessFailureKind,
    ProcessUpdate, RemoteProcess,
};
use tether_engine::ProcessEvent;
use tether_protocol::PathUri;
use tether_protocol::error::{INVALID_REQUEST, NOT_FOUND, SESSION_ALREADY_ATTACHED};

use crate::start_failure;
use tether_protocol::process::{
    EnvInherit, EnvPolicy, ExecOutputStream, ExecParams, ProcessSignal, PtySize,
};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

/// The exit code for failures of `tether exec` itself (not of the command), as ssh uses.
pub const TETHER_FAILURE: i32 = 255;

/// How long `--detach` asks the server to keep a detached command's session by default: a
/// day, the longest a Tether server grants unless told otherwise (`--max-session-ttl-secs`).
const DEFAULT_DETACH_TTL_SECS: u64 = 24 * 60 * 60;

/// How long a command whose output nobody reads any more (our stdout closed: `| head`) is
/// given to end after it is told to, before `tether exec` leaves anyway; the server kills it
/// meanwhile either way.
const ABANDONED_COMMAND_GRACE: Duration = Duration::from_secs(2);

const EXEC_HELP: &str = "\
Examples:
  tether exec --url ws://127.0.0.1:4500                                a login shell, as ssh host
  tether exec --url ws://127.0.0.1:4500 -- uname -a
  tether exec --url wss://build-box:8443 --tls-fingerprint SHA256:… -t -w /src -- cargo build
  echo hello | tether exec --url ws://127.0.0.1:4500 -- tr a-z A-Z
  tether exec --url ws://127.0.0.1:4500 --resume SESSION --list
  tether exec --url ws://127.0.0.1:4500 --detach -- ./long-job.sh      prints session=… process=…
  tether exec --url ws://127.0.0.1:4500 --resume SESSION --process ID  follows it to its end

Exit codes: the command's own; 128+N if signal N killed it; 127 the command is not there,
126 it cannot be run; 255 tether exec itself failed, or its command line is wrong (one line on
stderr says why and what to do).
Writing into a closed pipe (`| head`) stops the command and exits quietly, as ssh does.

TLS: a wss:// certificate nothing vouches for is shown and asked about at a terminal, then
remembered (known_fingerprints, beside the config file) and pinned, as ssh remembers host keys;
--accept-new-fingerprint accepts it without asking; one that changed is refused (255).

Ctrl-C: the first interrupts the command, a second kills it. SIGTERM, SIGHUP, SIGQUIT,
SIGUSR1 and SIGUSR2 go to the command (on a Tether server).

Environment: the command inherits the executor's, less names that look like credentials
(*KEY*, *SECRET*, *TOKEN*, *PASS*, *CREDENTIAL*, *AUTH_*, *_AUTH, *COOKIE*, DATABASE_URL,
*_DATABASE_URL, in any case: DB_PASSWORD and SSH_PRIVATE_KEY stay behind); --env adds to it,
--clean-env starts from nothing.
The token comes from --token-file or TETHER_TOKEN, never the command line.";

#[derive(Args)]
#[command(after_help = EXEC_HELP)]
pub struct ExecArgs {
    /// The exec-server to run on: `ws://HOST:PORT`, `wss://HOST:PORT`, or the name of an
    /// executor in the config file (`tether executors` lists them).
    #[arg(long, env = "TETHER_URL", value_name = "URL|NAME")]
    url: String,

    #[command(flatten)]
    connection: ConnectionFlags,

    /// Run the command on a pseudo-terminal (one merged output stream); `TERM` is passed on.
    #[arg(short, long)]
    tty: bool,

    /// Working directory on the executor (absolute); by default, the executor user's home
    /// (as ssh), or the server's where the server does not say where that is.
    #[arg(short = 'w', long, value_name = "DIR")]
    cwd: Option<String>,

    /// Set an environment variable for the command (repeatable).
    #[arg(short, long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,

    /// Start from an empty environment instead of the executor's own.
    #[arg(long)]
    clean_env: bool,

    /// Do not forward stdin.
    #[arg(long)]
    no_stdin: bool,

    /// Print `session=<id> process=<id>` to stderr first, for a later `--resume`.
    #[arg(long)]
    print_ids: bool,

    /// Start the command, print `session=<id> process=<id>` on stdout and return, leaving it
    /// running with no input; `--resume SESSION --process ID` follows it later.
    #[arg(short, long, conflicts_with = "resume")]
    detach: bool,

    /// With `--list` or `--detach`: print JSON for a script (`--list`: an array of the
    /// session's processes; `--detach`: `{"sessionId", "processId"}`).
    #[arg(long)]
    json: bool,

    /// With `--detach`: seconds the server is to keep the session once this command has
    /// returned (a Tether server grants at most its `--max-session-ttl-secs`, a day by default).
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_DETACH_TTL_SECS, requires = "detach")]
    detach_ttl_secs: u64,

    /// Reattach to a process started earlier in this session (by a `tether exec` that died,
    /// say) instead of starting a command: its retained output is replayed, then it is followed
    /// to its exit.
    #[arg(long, value_name = "SESSION", conflicts_with = "command")]
    resume: Option<String>,

    /// The process to reattach to, with `--resume`.
    #[arg(long, value_name = "ID", requires = "resume")]
    process: Option<String>,

    /// With `--resume`: list the session's processes (to find the one to reattach to) and exit.
    #[arg(long, requires = "resume", conflicts_with_all = ["process", "command"])]
    list: bool,

    /// The command and its arguments; none: a login shell, on a terminal when this is one
    /// (as `ssh host`).
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// How `tether exec` and `tether shell` reach an executor and hold on to it: its credential,
/// how its certificate is trusted, and how a drop is noticed and recovered.
#[derive(Args)]
pub struct ConnectionFlags {
    /// Read the exec-server's bearer token from this file (default: the TETHER_TOKEN
    /// environment variable), for a server started with `--ws-auth`.
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<std::path::PathBuf>,

    /// For `wss://`: trust only this CA certificate (PEM) instead of the system's roots — or
    /// the server's own self-signed certificate.
    #[arg(long, value_name = "PEM", env = "TETHER_TLS_CA_FILE")]
    pub(crate) tls_ca_file: Option<std::path::PathBuf>,

    /// For `wss://`: trust exactly the certificate with this fingerprint (`SHA256:<hex>`, as
    /// `tether serve --tls-self-signed` prints it; case and colons do not matter).
    #[arg(long, value_name = "SHA256:HEX", env = "TETHER_TLS_FINGERPRINT")]
    pub(crate) tls_fingerprint: Option<tether_client::TlsFingerprint>,

    /// For `wss://`: trust a certificate nothing vouches for, not yet known for this executor,
    /// without asking, and remember it (known_fingerprints, beside the config file), as ssh's
    /// StrictHostKeyChecking=accept-new; without it, tether asks at a terminal and refuses
    /// elsewhere. A changed one is refused either way.
    #[arg(long)]
    pub(crate) accept_new_fingerprint: bool,

    /// Seconds of silence from the server (pings go out every third of it) before the
    /// connection is presumed dead and the session resumed on a new one; 0: no pings, wait for
    /// TCP to notice.
    #[arg(long, default_value_t = tether_client::DEFAULT_KEEPALIVE_TIMEOUT.as_secs())]
    pub(crate) keepalive_timeout_secs: u64,

    /// Seconds to go on trying to resume the session after a drop before giving up (the
    /// command keeps running on the executor; `--resume` can reattach later).
    #[arg(long, default_value_t = tether_client::DEFAULT_RECOVERY_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) recovery_timeout_secs: u64,
}

impl ExecArgs {
    /// `tether shell`'s `tether exec`: no command (a login shell, on a terminal when this is
    /// one), on `url` with `connection`, every other flag as its default leaves it.
    pub(crate) fn login_shell(url: String, connection: ConnectionFlags) -> Self {
        ExecArgs {
            url,
            connection,
            tty: false,
            cwd: None,
            env: Vec::new(),
            clean_env: false,
            no_stdin: false,
            print_ids: false,
            detach: false,
            json: false,
            detach_ttl_secs: DEFAULT_DETACH_TTL_SECS,
            resume: None,
            process: None,
            list: false,
            command: Vec::new(),
        }
    }
}

/// `tether shell`: the login shell `args` names; returns the exit code to exit with.
pub async fn exec_shell(args: crate::shell::ShellArgs) -> anyhow::Result<i32> {
    match args.into_exec() {
        Ok(args) => exec_as("tether shell", args).await,
        Err(error) => {
            eprintln!("tether shell: {}", crate::report::one_line(&error));
            Ok(TETHER_FAILURE)
        }
    }
}

/// Runs the command; returns the exit code to exit with.
pub async fn exec(args: ExecArgs) -> anyhow::Result<i32> {
    exec_as("tether exec", args).await
}

/// Runs the command, its failure said as `name`'s.
async fn exec_as(name: &str, args: ExecArgs) -> anyhow::Result<i32> {
    match run(args).await {
        Ok(code) => Ok(code),
        Err(error) if crate::stdout::is_closed(&error) => Ok(crate::stdout::CLOSED_STDOUT_EXIT),
        Err(error) => {
            eprintln!("{name}: {}", crate::report::one_line(&error));
            Ok(error
                .downcast_ref::<start_failure::ExitWith>()
                .map_or(TETHER_FAILURE, |exit| exit.code))
        }
    }
}

async fn run(mut args: ExecArgs) -> anyhow::Result<i32> {
    if args.command.is_empty() && args.resume.is_none() {
        if args.detach {
            bail!("--detach needs a command to leave running: tether exec --detach -- COMMAND");
        }
        // A shell gets a terminal when there is one here, as `ssh host` gives it; without
        // one it reads its commands from our stdin.
        args.tty |= std::io::IsTerminal::is_terminal(&std::io::stdin());
    }
    if args.resume.is_some() && args.process.is_none() && !args.list {
        bail!(
            "--resume needs --process ID to reattach to, or --list to see the session's processes"
        );
    }
    let executor = crate::executors::resolve(&args.url)?.with_flags(
        args.connection.token_file.clone(),
        args.connection.tls_ca_file.clone(),
        args.connection.tls_fingerprint,
        args.connection.accept_new_fingerprint,
    );
    let url = executor.url.as_str();
    let options = ClientOptions {
        keepalive_interval: (args.connection.keepalive_timeout_secs > 0)
            .then(|| Duration::from_secs(args.connection.keepalive_timeout_secs) / 3),
        keepalive_timeout: Duration::from_secs(args.connection.keepalive_timeout_secs.max(1)),
        recovery_timeout: Duration::from_secs(args.connection.recovery_timeout_secs),
        // One stream into whatever reads our stdout: when that stops, the command is held back
        // on the server (as under ssh) for as long as it takes, never buffered here.
        full_handle_pause: None,
        detached_ttl: args.detach.then(|| Duration::from_secs(args.detach_ttl_secs)),
        ..executor.client_options("tether-exec")?
    };
    if let (Some(session), true) = (&args.resume, args.list) {
        let client = resume(&executor, session, options).await?;
        if !client.tether_extensions().process_list {
            bail!("this server cannot list a session's processes (it does not serve process/list)");
        }
        let processes = client.list_processes().await?;
        if args.json {
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
        return Ok(0);
    }
    let (client, mut process) = match (&args.resume, &args.process) {
        (Some(session), Some(process_id)) => {
            let client = resume(&executor, session, options).await?;
            let (process, truncated) = client.attach(process_id.as_str()).await.map_err(|e| {
                match e.code() {
                    Some(NOT_FOUND) | Some(INVALID_REQUEST) => anyhow::anyhow!(
                        "session {session} has no process {process_id}; `{} --resume {session} --list` shows the ones it has",
                        again(&args)
                    ),
                    _ => e.into(),
                }
            })?;
            if truncated {
                eprintln!(
                    "tether exec: earlier output of {process_id} is no longer retained; showing the rest"
                );
            }
            (client, process)
        }
        _ => {
            let client = crate::report::connect(&executor, options).await?;
            let params = start_params(&args, &client)?;
            let process = match client.start(params.clone()).await {
                Ok(process) => process,
                Err(error) => return Err(start_failure::explain(&client, &params, error).await),
            };
            if args.print_ids {
                eprintln!("session={} process={}", client.session_id(), process.process_id());
            }
            if args.detach {
                return detach(&client, process, &again(&args), args.tty, args.json).await;
            }
            (client, process)
        }
    };
    let extensions = client.tether_extensions();
    let resizable = extensions.pty_size;
    let input_end = match (args.tty, std::io::IsTerminal::is_terminal(&std::io::stdin())) {
        (true, false) => InputEnd::TerminalEof,
        (true, true) => InputEnd::Nothing,
        (false, _) if extensions.close_stdin => InputEnd::Close,
        (false, _) => InputEnd::Nothing,
    };

    // On a PTY the remote terminal echoes and interprets keys; ours must pass them through.
    let mut raw = if args.tty { RawTerminal::enable() } else { None };
    // And it follows our window's size, where the server can.
    let mut window_changes = match args.tty && resizable {
        true => tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok(),
        false => None,
    };
    // Signals sent to us go to the command, where the server can deliver them.
    let mut forwarded = forward_signals(&extensions.signals);
    // Calls on the process run in tasks of their own, never in this loop: while our stdout
    // is stalled the connection is paused, and an answer waited for here would never come.
    let (failed_calls, mut call_failures) = mpsc::unbounded_channel::<anyhow::Error>();
    let control = process.control();
    if !args.no_stdin {
        spawn_call(&failed_calls, forward_stdin(control.clone(), input_end));
    }
    let mut exit_code = None;
    let mut interrupted = false;
    // At a terminal, a link that goes down (and comes back) is said, as mosh says it: the
    // screen would otherwise just freeze. Scripts' stderr is left alone.
    let tell_link = args.tty && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut link = client.status_changes();
    loop {
        tokio::select! {
            Some(status) = link.next(), if tell_link => match status {
                ConnectionStatus::Recovering => {
                    eprint!("\r\n[tether: the connection to {url} dropped; reconnecting…]\r\n");
                }
                ConnectionStatus::Connected => eprint!("\r\n[tether: reconnected]\r\n"),
                ConnectionStatus::Failed(_) => {}
            },
            update = process.next_update() => match update {
                Some(ProcessUpdate::Event(event)) => match event {
                    ProcessEvent::Output { stream, chunk, .. } => match write_out(stream, &chunk) {
                        Ok(()) => {}
                        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                            // Dying of SIGPIPE skips destructors: give the terminal back first.
                            drop(raw.take());
                            return Ok(abandon(control.clone(), &mut process).await);
                        }
                        Err(error) => {
                            return Err(anyhow::Error::new(error).context("cannot write the command's output here"));
                        }
                    },
                    ProcessEvent::Exited { exit_code: code, .. } => exit_code = Some(code),
                    ProcessEvent::Closed { .. } => return Ok(exit_code.unwrap_or(TETHER_FAILURE)),
                },
                Some(ProcessUpdate::Failed(failure)) => match failure.kind {
                    ProcessFailureKind::SessionLost { server_went_away: true } => bail!(
                        "the server at {url} shut down, and the command was stopped with it; run it again once the server is back"
                    ),
                    ProcessFailureKind::SessionLost { server_went_away: false } => {
                        // The session's reason, without the process's name in front of it.
                        let why = match client.status() {
                            ConnectionStatus::Failed(why) => why,
                            _ => failure.message,
                        };
                        bail!(
                            "lost the connection: {why}. The command may still be running; reattach with: {} --resume {} --process {}",
                            again(&args),
                            client.session_id(),
                            process.process_id()
                        )
                    }
                    _ => bail!("{failure}"),
                },
                None => bail!("the process's stream ended without a close"),
            },
            Some(error) = call_failures.recv() => return Err(error),
            Some(()) = next_window_change(&mut window_changes) => {
                if let Some(size) = local_terminal_size() {
                    let control = control.clone();
                    // A resize that fails (the process just ended) changes nothing worth a word.
                    tokio::spawn(async move { control.resize(size.cols, size.rows).await });
                }
            }
            Some(signal) = forwarded.recv() => {
                let control = control.clone();
                spawn_call(&failed_calls, async move { Ok(control.signal(signal).await?) });
            }
            _ = tokio::signal::ctrl_c() => {
                let control = control.clone();
                if interrupted {
                    spawn_call(&failed_calls, async move { Ok(control.terminate().await.map(drop)?) });
                } else {
                    // First Ctrl-C goes to the command, as it would at a local terminal.
                    interrupted = true;
                    spawn_call(&failed_calls, async move { Ok(control.interrupt().await?) });
                }
            }
        }
    }
}

/// `tether exec` reaching the executor this run reached, as a person pastes it: the executor
/// as it was named (a name keeps its config entry's credentials), and the token file, CA file
/// and fingerprint given on the command line.
fn again(args: &ExecArgs) -> String {
    let mut command = format!("tether exec --url {}", shell_word(&args.url));
    if let Some(file) = &args.connection.token_file {
        command.push_str(&format!(" --token-file {}", shell_word(&file.to_string_lossy())));
    }
    if let Some(file) = &args.connection.tls_ca_file {
        command.push_str(&format!(" --tls-ca-file {}", shell_word(&file.to_string_lossy())));
    }
    if let Some(fingerprint) = &args.connection.tls_fingerprint {
        command.push_str(&format!(" --tls-fingerprint {fingerprint}"));
    }
    command
}

/// `word` as one word for a POSIX shell: as it is when nothing in it is special, else in
/// single quotes.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// Leaves a started command running and says how to find it again: its ids on stdout (for a
/// script), and on stderr how long the server keeps it and the command that follows it.
async fn detach(
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

/// Resumes `session` (trusting the executor's certificate on first use: [`crate::trust`]); a
/// refusal says what became of it.
async fn resume(
    executor: &crate::executors::Executor,
    session: &str,
    options: ClientOptions,
) -> anyhow::Result<ExecServerClient> {
    let url = executor.url.as_str();
    let with_token = options.bearer_token.is_some();
    // A client that just died still holds the session for a moment: the client asks again.
    let attempt =
        async |options: ClientOptions| ExecServerClient::resume(url, session, options).await;
    crate::trust::connect(executor, options, attempt, |error| {
        match error.code() {
            Some(INVALID_REQUEST) => anyhow::anyhow!(
                "{url} has no session {session}: it ended, it expired while no client held it (the server's --session-ttl-secs), or the server restarted"
            ),
            Some(SESSION_ALREADY_ATTACHED) => anyhow::anyhow!(
                "session {session} is held by another client that is still connected; end that one, or wait until it detaches"
            ),
            _ => crate::report::connect_failure(url, error, with_token),
        }
    })
    .await
}

/// Our stdout is closed (`tether exec … | head`): nobody reads the command's output any more.
/// As ssh does, end the command (terminate it, not leave it burning CPU on the executor), then
/// die of SIGPIPE quietly, so a shell pipeline sees what it would of a local command.
async fn abandon(control: ProcessControl, process: &mut RemoteProcess) -> i32 {
    let ended = async {
        let _ = control.terminate().await;
        // Its remaining output goes nowhere; wait for the server to say it is gone.
        while let Some(ProcessUpdate::Event(event)) = process.next_update().await {
            if matches!(event, ProcessEvent::Closed { .. }) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(ABANDONED_COMMAND_GRACE, ended).await;
    // SAFETY: restoring a signal's default disposition and raising it are async-signal-safe
    // and touch no memory of ours; the process ends here.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // Only if SIGPIPE is blocked: exit as a shell reports death by it.
    128 + libc::SIGPIPE
}

/// Runs a call on the process in a task of its own; its failure, if any, goes to `failed`,
/// which ends `tether exec` with it.
fn spawn_call(
    failed: &mpsc::UnboundedSender<anyhow::Error>,
    call: impl std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
) {
    let failed = failed.clone();
    tokio::spawn(async move {
        if let Err(error) = call.await {
            let _ = failed.send(error);
        }
    });
}

/// How the end of our input reaches the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputEnd {
    /// Its stdin is closed (a pipe process, where the server can close it).
    Close,
    /// Its terminal is sent end-of-file, Ctrl-D (`echo x | tether exec -t -- cat`): our input
    /// is not a terminal, so no one will type the key that ends it.
    TerminalEof,
    /// Nothing more: our input is a terminal, whose Ctrl-D is forwarded like any key, or the
    /// server cannot close the command's stdin.
    Nothing,
}

/// The key a terminal reads as end of input at the start of a line (VEOF, Ctrl-D).
const TERMINAL_EOF: u8 = 0x04;

/// Copies our stdin to the command's, in order, each write answered before the next; at the
/// end of our input, ends the command's as `end` says.
async fn forward_stdin(control: ProcessControl, end: InputEnd) -> anyhow::Result<()> {
    let mut stdin = tokio::io::stdin();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut last = None;
    loop {
        match stdin.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                last = buffer[..n].last().copied();
                control.write(buffer[..n].to_vec()).await?;
            }
        }
    }
    match end {
        InputEnd::Close => control.close_stdin().await?,
        InputEnd::TerminalEof => {
            // Mid-line, a first Ctrl-D only hands the partial line over; a second, at the
            // start of the (now empty) line, is the end of input.
            let keys = match last {
                None | Some(b'\n') => vec![TERMINAL_EOF],
                Some(_) => vec![TERMINAL_EOF, TERMINAL_EOF],
            };
            control.write(keys).await?;
        }
        InputEnd::Nothing => {}
    }
    Ok(())
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

/// The size of the terminal on our stdout (or stdin), if either is one.
fn local_terminal_size() -> Option<PtySize> {
    use std::os::fd::AsFd as _;
    let (stdout, stdin) = (std::io::stdout(), std::io::stdin());
    [stdout.as_fd(), stdin.as_fd()].into_iter().find_map(|fd| {
        let size = rustix::termios::tcgetwinsize(fd).ok()?;
        (size.ws_col > 0 && size.ws_row > 0)
            .then_some(PtySize { cols: size.ws_col, rows: size.ws_row })
    })
}

/// Forwards SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to `tether exec` to the
/// command, for those the server delivers (`tetherExtensions.signals`); the others keep their
/// default action here, which ends `tether exec` and leaves the command running, as before.
/// (SIGINT has its own handling: the first goes to the command, the second terminates it.)
fn forward_signals(delivered: &[ProcessSignal]) -> mpsc::UnboundedReceiver<ProcessSignal> {
    use tokio::signal::unix::{SignalKind, signal};
    let (sender, receiver) = mpsc::unbounded_channel();
    let kinds = [
        (ProcessSignal::Terminate, SignalKind::terminate()),
        (ProcessSignal::Hangup, SignalKind::hangup()),
        (ProcessSignal::Quit, SignalKind::quit()),
        (ProcessSignal::User1, SignalKind::user_defined1()),
        (ProcessSignal::User2, SignalKind::user_defined2()),
    ];
    for (name, kind) in kinds {
        if !delivered.contains(&name) {
            continue;
        }
        let Ok(mut arrivals) = signal(kind) else { continue };
        let sender = sender.clone();
        tokio::spawn(async move {
            while arrivals.recv().await.is_some() {
                if sender.send(name).is_err() {
                    break;
                }
            }
        });
    }
    receiver
}

/// The next SIGWINCH, or never without a listener.
async fn next_window_change(changes: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match changes {
        Some(changes) => changes.recv().await,
        None => std::future::pending().await,
    }
}

fn write_out(stream: ExecOutputStream, bytes: &[u8]) -> std::io::Result<()> {
    match stream {
        ExecOutputStream::Stderr => {
            let mut stderr = std::io::stderr().lock();
            stderr.write_all(bytes)?;
            stderr.flush()?;
        }
        ExecOutputStream::Stdout | ExecOutputStream::Pty => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(bytes)?;
            stdout.flush()?;
        }
    }
    Ok(())
}

/// The local terminal in raw mode for as long as this lives: keys (Ctrl-C included) go to the
/// remote terminal as typed, and only the remote side echoes. Restored when dropped.
struct RawTerminal {
    original: rustix::termios::Termios,
}

impl RawTerminal {
    /// `None` when stdin is not a terminal (nothing to do) or cannot be switched.
    fn enable() -> Option<Self> {
        let stdin = std::io::stdin();
        if !rustix::termios::isatty(&stdin) {
            return None;
        }
        let original = rustix::termios::tcgetattr(&stdin).ok()?;
        let mut raw = original.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &raw).ok()?;
        Some(Self { original })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let stdin = std::io::stdin();
        let _ = rustix::termios::tcsetattr(
            &stdin,
            rustix::termios::OptionalActions::Now,
            &self.original,
        );
    }
}

/// A number unlikely to repeat across runs, for process ids.
fn unique() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}
