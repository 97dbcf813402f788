//! `tether exec`: run one command on an exec-server as if it ran here — its stdout and stderr
//! stream to ours, our stdin goes to it, and we exit with its exit code. The connection may
//! drop and come back meanwhile; the output arrives whole, once, in order.

mod attach;
mod follow;
mod input;
mod list;
mod start;
mod terminal;

use std::time::Duration;

use anyhow::bail;
use clap::Args;
use tether_client::ClientOptions;

use crate::executors::Executor;
use crate::start_failure;

/// The exit code for failures of `tether exec` itself (not of the command), as ssh uses.
pub const TETHER_FAILURE: i32 = 255;

/// How long `--detach` asks the server to keep a detached command's session by default: a
/// day, the longest a Tether server grants unless told otherwise (`--max-session-ttl-secs`).
const DEFAULT_DETACH_TTL_SECS: u64 = 24 * 60 * 60;

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

/// Runs the command; returns the exit code to exit with.
pub async fn exec(args: ExecArgs) -> anyhow::Result<i32> {
    exec_as("tether exec", args).await
}

/// Runs the command, its failure said as `name`'s.
pub(crate) async fn exec_as(name: &str, args: ExecArgs) -> anyhow::Result<i32> {
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

/// What `tether exec` is asked to do, as its flags choose it.
enum Mode<'a> {
    /// `--resume SESSION --list`: the session's processes.
    List { session: &'a str },
    /// `--resume SESSION --process ID`: follow a process already running.
    Attach { session: &'a str, process_id: &'a str },
    /// Start the command (a login shell if none), then follow it, or leave it with `--detach`.
    Start,
}

impl<'a> Mode<'a> {
    fn of(args: &'a ExecArgs) -> Self {
        match (&args.resume, &args.process, args.list) {
            (Some(session), _, true) => Mode::List { session },
            (Some(session), Some(process_id), false) => Mode::Attach { session, process_id },
            _ => Mode::Start,
        }
    }
}

/// Checks the flags, reaches the executor and does what the mode says.
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
    let executor = resolve(&args)?;
    let options = client_options(&args, &executor)?;
    let url = executor.url.as_str();
    match Mode::of(&args) {
        Mode::List { session } => list::list(&executor, session, options, args.json).await,
        Mode::Attach { session, process_id } => {
            let again = again(&args);
            let (client, process) =
                attach::attach(&executor, session, process_id, options, &again).await?;
            follow::follow(&args, url, client, process).await
        }
        Mode::Start => {
            let (client, process) = start::start(&executor, options, &args).await?;
            if args.detach {
                return start::detach(&client, process, &again(&args), args.tty, args.json).await;
            }
            follow::follow(&args, url, client, process).await
        }
    }
}

/// The executor `--url` names, with the connection flags over its config entry.
fn resolve(args: &ExecArgs) -> anyhow::Result<Executor> {
    Ok(crate::executors::resolve(&args.url)?.with_flags(
        args.connection.token_file.clone(),
        args.connection.tls_ca_file.clone(),
        args.connection.tls_fingerprint,
        args.connection.accept_new_fingerprint,
    ))
}

/// The client's options for `args`: keepalive and recovery from the flags, `--detach`'s TTL,
/// the rest from the executor.
fn client_options(args: &ExecArgs, executor: &Executor) -> anyhow::Result<ClientOptions> {
    Ok(ClientOptions {
        keepalive_interval: (args.connection.keepalive_timeout_secs > 0)
            .then(|| Duration::from_secs(args.connection.keepalive_timeout_secs) / 3),
        keepalive_timeout: Duration::from_secs(args.connection.keepalive_timeout_secs.max(1)),
        recovery_timeout: Duration::from_secs(args.connection.recovery_timeout_secs),
        // One stream into whatever reads our stdout: when that stops, the command is held back
        // on the server (as under ssh) for as long as it takes, never buffered here.
        full_handle_pause: None,
        detached_ttl: args.detach.then(|| Duration::from_secs(args.detach_ttl_secs)),
        ..executor.client_options("tether-exec")?
    })
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
