//! `tether serve`: run the exec-server. It takes every flag of `codex exec-server` (0.171):
//! what means something on an executor is honoured, Codex's configuration is read and
//! ignored ([`codex_settings`]), the managed-network settings are kept for when a managed
//! network runs here ([`managed_network`]), and the registration with OpenAI's environment
//! registry is refused ([`registration`]).

mod codex_settings;
mod config;
mod managed_network;
mod registration;
mod stdin_close;
mod ws_auth;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use clap::Args;
use tether_engine::ProcessTableConfig;
use tether_engine::process::{DEFAULT_MAX_RETAINED_OUTPUT_BYTES, DEFAULT_SPILL_BYTES_PER_PROCESS};
use tether_engine::process_table::{DEFAULT_CLOSED_OUTPUT_BUDGET, DEFAULT_MAX_PROCESSES};
use tether_engine::sandbox::{PidNamespace, Sandboxing};
use tether_server::config::{
    DEFAULT_CONCURRENT_REQUESTS, DEFAULT_DETACHED_SESSION_TTL, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_DETACHED_SESSION_TTL, DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SESSIONS_PER_CLIENT,
    DEFAULT_PING_INTERVAL, DEFAULT_PONG_TIMEOUT, DEFAULT_REQUEST_HEAD_DEADLINE,
    DEFAULT_SHUTDOWN_GRACE,
};
use tether_server::descriptors::{self, BudgetError, DescriptorBudget};
use tether_server::transport::kept_certificate::Kept;
use tether_server::{DEFAULT_LISTEN, ListenAddress, Server, ServerConfig, StopSignals};

use config::{Descriptors, SandboxPlan, TlsSource};

pub use registration::RegistrationRefused;

#[derive(Args)]
pub struct ServeArgs {
    /// Where to listen: `ws://HOST:PORT`, `wss://HOST:PORT` (with --tls-self-signed or
    /// --tls-cert/--tls-key) or `stdio`. Port 0 picks a free port; the bound URL is printed as
    /// the first line of stdout.
    #[arg(long, default_value = DEFAULT_LISTEN)]
    listen: String,

    /// Requests per connection that may wait at once (long-polling reads). Other requests are
    /// answered while they wait. The reference's default is 1 (one request at a time, so a
    /// long-poll holds up the rest); Tether's is 64.
    #[arg(long, value_name = "COUNT", default_value_t = DEFAULT_CONCURRENT_REQUESTS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    concurrent_requests: u64,

    /// Seconds a session keeps running after its connection drops, waiting to be resumed.
    #[arg(long, default_value_t = DEFAULT_DETACHED_SESSION_TTL.as_secs())]
    session_ttl_secs: u64,

    /// The longest a client may ask its session to wait (`tether exec --detach`).
    #[arg(long, default_value_t = DEFAULT_MAX_DETACHED_SESSION_TTL.as_secs())]
    max_session_ttl_secs: u64,

    /// Output bytes retained in memory per process for replays after a reconnect (the
    /// newest; older output is dropped, or spilled with `--spill-output-dir`).
    #[arg(long, alias = "retain-output", default_value_t = ProcessTableConfig::default().retained_output_bytes)]
    retain_output_bytes: usize,

    /// Output bytes all processes of all sessions together retain in memory. Past it, the
    /// processes holding the most let go of their oldest output first (dropped, or spilled
    /// with `--spill-output-dir`); a reader sees where output resumes in `oldestRetainedSeq`.
    #[arg(long, default_value_t = DEFAULT_MAX_RETAINED_OUTPUT_BYTES)]
    max_retained_output_bytes: usize,

    /// Keep the output memory lets go of in this directory instead of dropping it, so that a
    /// client away for minutes still catches up on every byte. The files are unnamed: they
    /// never show up in the directory and vanish with their process.
    #[arg(long, value_name = "DIR")]
    spill_output_dir: Option<PathBuf>,

    /// Disk bytes per process for `--spill-output-dir` (the oldest spilled output is dropped
    /// past it); a session's closed processes share one more such allowance.
    #[arg(long, default_value_t = DEFAULT_SPILL_BYTES_PER_PROCESS, requires = "spill_output_dir")]
    spill_output_bytes: u64,

    /// Seconds a closed process stays readable; by default, for the session's lifetime.
    #[arg(long)]
    closed_process_retention_secs: Option<u64>,

    /// Seconds of silence from a WebSocket client (no frame, not even a pong) before its
    /// connection is closed and its session detached, ready to be resumed.
    #[arg(long, default_value_t = DEFAULT_PONG_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pong_timeout_secs: u64,

    /// Processes per session not yet finished at once; a start past it is refused.
    #[arg(long, default_value_t = DEFAULT_MAX_PROCESSES)]
    max_processes_per_session: usize,

    /// Output bytes a session's closed processes may go on retaining together; past it, those
    /// that closed first are forgotten.
    #[arg(long, default_value_t = DEFAULT_CLOSED_OUTPUT_BUDGET)]
    closed_output_budget_bytes: usize,

    /// Sessions held at once (attached, or detached until they expire). When full, the
    /// session detached longest ago is ended (its processes killed) to make room for a new
    /// one; only a server whose sessions are all attached refuses.
    #[arg(long, default_value_t = DEFAULT_MAX_SESSIONS)]
    max_sessions: usize,

    /// Sessions one client holds at once: with --ws-auth, per credential (a signed token's
    /// subject); without, per IP address. When full, the client's own session detached
    /// longest ago is ended to make room; a client whose sessions are all attached is refused.
    #[arg(long, default_value_t = DEFAULT_MAX_SESSIONS_PER_CLIENT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_sessions_per_client: usize,

    /// WebSocket connections open at once; more get HTTP 503. The server raises its
    /// file-descriptor limit to hold them and its processes; under a lower hard limit the
    /// default is lowered to what fits, and a value given here is refused only if it leaves no
    /// room for the rest. [default: 1024]
    #[arg(long)]
    max_connections: Option<usize>,

    /// File bytes `fs/readFile` calls may hold at once, server-wide (read, then answered until
    /// written); more wait their turn. Below 512 MiB, bigger files are refused with a message
    /// to read them in blocks.
    #[arg(long, default_value_t = tether_engine::fs::DEFAULT_WHOLE_READ_BUDGET_BYTES, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1024..=u32::MAX as u64))]
    file_read_budget_bytes: usize,

    /// Seconds a connection has to send its whole request head (after the TLS handshake);
    /// one that sends nothing or trickles is closed.
    #[arg(long, default_value_t = DEFAULT_REQUEST_HEAD_DEADLINE.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    request_head_timeout_secs: u64,

    /// Seconds between WebSocket pings.
    #[arg(long, default_value_t = DEFAULT_PING_INTERVAL.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    ping_interval_secs: u64,

    #[command(flatten)]
    ws_auth: ws_auth::WsAuthArgs,

    /// Serve `wss://`: the server's certificate chain (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_key", conflicts_with = "tls_self_signed")]
    tls_cert: Option<PathBuf>,

    /// Serve `wss://` with a certificate made at startup, in memory only. Its fingerprint is
    /// printed on the line after the URL (`fingerprint SHA256:…`); clients trust it with
    /// `--tls-fingerprint`, or remember it on first use, as ssh trusts a host key. A new one is
    /// made at every start (--tls-self-signed-dir keeps one).
    #[arg(long)]
    tls_self_signed: bool,

    /// As --tls-self-signed, with the certificate kept in DIR (`cert.pem`, `key.pem`): made
    /// and written there at the first start, served again at every later one, so its
    /// fingerprint stays the same. DIR is made 0700 if missing; one open to group or others,
    /// or a key that is, is refused.
    #[arg(long, value_name = "DIR", conflicts_with = "tls_cert")]
    tls_self_signed_dir: Option<PathBuf>,

    /// The private key (PEM) for --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,

    /// The bubblewrap binary that confines sandboxed commands and file writes; by default the
    /// first `bwrap` on `PATH`. Without one, sandboxed work fails with a message saying so,
    /// and never runs unconfined.
    #[arg(long, value_name = "PATH")]
    bwrap: Option<PathBuf>,

    /// Seconds a SIGTERM (or SIGINT) lets running processes finish before they are killed:
    /// meanwhile `/readyz` answers 503, new sessions are refused and resumes still work; the
    /// server exits as soon as every process has closed. A second signal stops at once. At
    /// most 3600; 0 stops at once.
    #[arg(long, default_value_t = DEFAULT_SHUTDOWN_GRACE.as_secs())]
    shutdown_grace_secs: u64,

    /// Also serve `GET /metrics` (and `/readyz`) on this address, over plain HTTP and without
    /// a credential, for a scraper that holds none (the main port's `/metrics` asks for the
    /// same credential as a WebSocket). Counters only: nothing there runs or reads anything.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<std::net::SocketAddr>,

    /// Listen on an address other than loopback without authentication. Anyone who reaches
    /// the port can run commands: only for networks where that is true of everyone anyway.
    #[arg(long)]
    insecure_no_auth: bool,

    /// End when standard input closes (the parent that started the server exited, or closed
    /// it), as SIGTERM ends it: a drain first with --shutdown-grace-secs, then every session's
    /// processes killed. With --listen stdio the server ends with its input anyway.
    #[arg(long, env = "CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE")]
    exit_on_stdin_close: bool,

    /// The pid namespace of sandboxed commands: `isolate`, their own (they see and signal
    /// only what they started), or `inherit`, the host's (they may signal other processes of
    /// this user: only for an environment provisioned for that). Either way what a command
    /// leaves behind dies with it, and its own confinement is beyond its reach.
    #[arg(long, value_enum, value_name = "MODE", default_value = "isolate")]
    linux_sandbox_pid_namespace: PidNamespaceMode,

    #[command(flatten)]
    codex_settings: codex_settings::CodexSettingsArgs,

    #[command(flatten)]
    managed_network: managed_network::ManagedNetworkArgs,

    #[command(flatten)]
    registration: registration::RegistrationArgs,

    #[command(subcommand)]
    command: Option<registration::ServeCommand>,
}

impl ServeArgs {
    /// Refuses a registration with OpenAI's environment registry, before anything starts.
    pub fn refuse_registration(&self) -> Result<(), RegistrationRefused> {
        self.registration.refuse(self.command.as_ref())
    }
}

/// `--linux-sandbox-pid-namespace`, in the reference's words.
#[derive(Clone, Copy, clap::ValueEnum)]
enum PidNamespaceMode {
    Isolate,
    Inherit,
}

impl From<PidNamespaceMode> for PidNamespace {
    fn from(mode: PidNamespaceMode) -> Self {
        match mode {
            PidNamespaceMode::Isolate => PidNamespace::Isolate,
            PidNamespaceMode::Inherit => PidNamespace::Inherit,
        }
    }
}

/// The names a self-signed certificate carries: the listen address, and loopback's names —
/// for clients that check names; a pinned fingerprint ignores them. A kept one
/// (`--tls-self-signed-dir`) carries those of the start that made it.
fn certificate_names(listen: &ListenAddress) -> Vec<String> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    if let ListenAddress::WebSocket { addr, .. } = listen
        && !addr.ip().is_unspecified()
        && !addr.ip().is_loopback()
    {
        names.push(addr.ip().to_string());
    }
    let host = rustix::system::uname().nodename().to_string_lossy().into_owned();
    if !host.is_empty() && host != "localhost" {
        names.push(host);
    }
    names
}

/// The descriptor limit fitted to `--max-connections` by the server's own policy
/// ([`descriptors::fit_connections`]), a refusal saying what to do about it.
fn fit_connections(requested: Option<usize>) -> anyhow::Result<DescriptorBudget> {
    descriptors::fit_connections(requested).map_err(|error| match error {
        BudgetError::LimitTooLow { .. } => anyhow::anyhow!("{error}; raise it (`ulimit -n`)"),
        BudgetError::ConnectionsDoNotFit { fits, .. } => anyhow::anyhow!(
            "{error} (`ulimit -Hn`); use --max-connections {fits} or fewer, or raise the limit"
        ),
    })
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    // Before anything can say the server is up, and loudly: a server whose stop signals could
    // not be handled (the guardian's death arrives as one) would serve on with nobody to stop
    // it, and a stop that comes as it starts takes the clean way out.
    let stop_signals = StopSignals::install().context("cannot handle SIGTERM and SIGINT")?;
    let listen: ListenAddress = args.listen.parse()?;
    let plan = config::plan(&args, &listen)?;
    let mut config = plan.config;
    config.ws_auth = plan.ws_auth.load()?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    plan.codex_settings.apply(&cwd)?;
    for flag in plan.ignored_registration_flags {
        tracing::warn!(
            "{flag} names a registration with OpenAI's environment registry, which is made only \
             with --remote (refused by Tether); ignored"
        );
    }
    let fingerprint = load_tls(plan.tls, &listen, &mut config)?;
    let descriptor_budget = match plan.descriptors {
        Descriptors::Fit { requested } => fit_connections(requested)?,
        Descriptors::Stdio => DescriptorBudget::full(DEFAULT_MAX_CONNECTIONS),
    };
    config.max_connections = descriptor_budget.max_connections;
    config.max_pending_connections = descriptor_budget.max_pending_connections;
    set_up_sandboxing(plan.sandbox)?;
    tether_server::hardening::harden_process();
    if let Some(spill) = plan.spill {
        spill.validate().map_err(|e| {
            anyhow::anyhow!(
                "--spill-output-dir: {e}; give a directory that exists and this user can write to"
            )
        })?;
        config.processes.spill = Some(Arc::new(spill));
    }
    let stdin_closed = match plan.watch_stdin {
        true => Some(stdin_close::closed().context("cannot watch standard input")?),
        false => None,
    };
    let server = Server::bind(&listen, config).await.map_err(|error| {
        let hint = bind_hint(&error);
        anyhow::anyhow!("cannot listen on {listen}: {error}{hint}")
    })?;
    if let Some(url) = server.url() {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{url}")?;
        if let Some(fingerprint) = &fingerprint {
            writeln!(stdout, "fingerprint {fingerprint}")?;
        }
        stdout.flush()?;
        tracing::info!(%url, "listening");
    }
    if let Some(metrics) = server.metrics_addr() {
        tracing::info!(url = %format!("http://{metrics}/metrics"), "serving metrics");
    }
    // With --exit-on-stdin-close the end of standard input is a SIGTERM.
    let stdin_closed = async move {
        match stdin_closed {
            Some(closed) => {
                let _ = closed.await;
                tracing::info!("standard input closed");
            }
            None => std::future::pending().await,
        }
    };
    server.run_until_signalled(stop_signals, stdin_closed).await?;
    tracing::info!("stopped; every process was terminated");
    Ok(())
}

/// Sets the TLS settings the flags name, read or made; returns the fingerprint to print of a
/// certificate made here (one of the operator's own is theirs to know).
fn load_tls(
    source: TlsSource,
    listen: &ListenAddress,
    config: &mut ServerConfig,
) -> anyhow::Result<Option<String>> {
    let (tls, fingerprint) = match source {
        TlsSource::None => (None, None),
        TlsSource::Files { cert, key } => {
            let config = tether_server::transport::tls::load_server_config(&cert, &key).map_err(
                |error| {
                    anyhow::anyhow!(
                        "{error}; give --tls-cert the certificate chain and --tls-key its \
                         private key, both PEM files this user can read, or use \
                         --tls-self-signed"
                    )
                },
            )?;
            (Some(config), None)
        }
        TlsSource::Kept(dir) => {
            let (made, kept) = tether_server::transport::kept_certificate::kept_self_signed(
                &dir,
                certificate_names(listen),
            )
            .map_err(|error| anyhow::anyhow!("--tls-self-signed-dir: {error}"))?;
            match kept {
                Kept::Made => {
                    tracing::info!(dir = %dir.display(), "made a self-signed certificate, kept there for later starts")
                }
                Kept::Loaded => {
                    tracing::info!(dir = %dir.display(), "serving the self-signed certificate kept there")
                }
            }
            (Some(made.config), Some(made.fingerprint))
        }
        TlsSource::SelfSigned => {
            let made = tether_server::transport::tls::self_signed(certificate_names(listen))
                .map_err(anyhow::Error::msg)?;
            (Some(made.config), Some(made.fingerprint))
        }
    };
    config.tls = tls;
    Ok(fingerprint)
}

/// What a person can do about an address the system would not listen on, by its reason. The
/// server's own refusals (no certificate, no authentication) say it themselves.
fn bind_hint(error: &std::io::Error) -> &'static str {
    use std::io::ErrorKind;
    if error.raw_os_error().is_none() {
        return "";
    }
    match error.kind() {
        ErrorKind::AddrInUse => {
            "; another program listens on that port: pick another, or port 0 for a free one"
        }
        ErrorKind::PermissionDenied => {
            "; ports below 1024 need privileges this user lacks: pick a higher port"
        }
        ErrorKind::AddrNotAvailable => {
            "; this machine has no such address: listen on one of its own, or on 0.0.0.0 for all"
        }
        _ => "",
    }
}

/// Finds bubblewrap and names this binary as the sandbox's inner stage, and says in the log
/// whether sandboxed work can run here (and if not, what to install), and when sandboxed
/// commands share the host's pid namespace.
fn set_up_sandboxing(plan: SandboxPlan) -> anyhow::Result<()> {
    let SandboxPlan { bwrap, private, pid_namespace } = plan;
    if let Some(path) = &bwrap
        && !path.is_file()
    {
        bail!("--bwrap {}: no such file; install bubblewrap or name its binary", path.display());
    }
    let helper = std::env::current_exe().ok();
    let sandboxing = Sandboxing::detect(bwrap, helper)
        .hiding(private)
        .with_pid_namespace(pid_namespace)
        .install();
    if pid_namespace == PidNamespace::Inherit {
        tracing::warn!(
            "sandboxed commands share the host's pid namespace: they see every process and may \
             signal those of this user (--linux-sandbox-pid-namespace inherit)"
        );
    }
    match (sandboxing.unavailable(), &sandboxing.bwrap) {
        (None, Some(bwrap)) => match tether_engine::sandbox::probe(bwrap) {
            Ok(()) => tracing::info!(bwrap = %bwrap.display(), "sandboxing available"),
            Err(why) => {
                tracing::warn!(bwrap = %bwrap.display(), "sandboxing unavailable: {why}; sandboxed commands will fail, never run unconfined")
            }
        },
        (why, _) => tracing::warn!(
            "sandboxing unavailable: {}; sandboxed commands will fail, never run unconfined",
            why.unwrap_or_default()
        ),
    }
    Ok(())
}
