//! The `tether serve` flags as the server's configuration, in one pure step, as ripgrep turns
//! its parsed flags into its configuration: nothing here reads a file, changes a limit, logs
//! or looks at the process. What the flags ask of the system (a secret or a certificate to
//! read, the descriptor limit to fit, bubblewrap to find, the spill directory to check) is
//! named in the [`Plan`] and done by `serve` after, so that every mistake of the command line
//! itself is refused before anything is touched, and each is tested without a process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tether_engine::ProcessTableConfig;
use tether_engine::process::{OutputBudget, SpillConfig};
use tether_engine::sandbox::PidNamespace;
use tether_server::config::MAX_SHUTDOWN_GRACE;
use tether_server::{ListenAddress, ServerConfig};

use super::ServeArgs;
use super::codex_settings::{CodexFlagError, CodexSettings};
use super::ws_auth::{WsAuthFlagError, WsAuthSource};

/// Why the flags cannot make a configuration, each naming the flag to change. One line each,
/// as every refusal of `tether serve` is.
#[derive(Debug, thiserror::Error)]
pub enum FlagError {
    #[error(
        "--shutdown-grace-secs {asked} is more than the most a drain may last, {max} (an hour); \
         give {max} or less"
    )]
    ShutdownGraceTooLong { asked: u64, max: u64 },
    #[error(transparent)]
    WsAuth(#[from] WsAuthFlagError),
    /// Checked after the auth flags themselves, as the reference checks it.
    #[error(
        "WebSocket auth requires a WebSocket listener, not stdio; listen on ws://HOST:PORT, or \
         leave out --ws-auth"
    )]
    WsAuthOnStdio,
    #[error(transparent)]
    CodexSettings(#[from] CodexFlagError),
    #[error("TLS requires a WebSocket listener, not stdio; use --listen wss://HOST:PORT")]
    TlsOnStdio,
    #[error(
        "--listen {listen} needs a certificate: add --tls-self-signed, or --tls-cert and --tls-key"
    )]
    NoCertificate { listen: String },
}

/// What the flags make of the server, and what is still to be read from the system for it.
pub struct Plan {
    /// The configuration as far as the flags decide it. `ws_auth`, `tls`, `max_connections`,
    /// `max_pending_connections` and `processes.spill` are left at their defaults: they are
    /// what [`Self::ws_auth`], [`Self::tls`], [`Self::descriptors`] and [`Self::spill`] give
    /// once read.
    pub config: ServerConfig,
    /// Who may open a WebSocket, once its secret is read.
    pub ws_auth: WsAuthSource,
    /// Where the TLS certificate comes from.
    pub tls: TlsSource,
    /// How the descriptor limit is shared out.
    pub descriptors: Descriptors,
    /// Where output memory lets go of is kept, once the directory is found usable.
    pub spill: Option<SpillConfig>,
    /// How sandboxed work is confined.
    pub sandbox: SandboxPlan,
    /// Codex's settings, read and ignored.
    pub codex_settings: CodexSettings,
    /// Whether the end of standard input stops the server. Never on stdio, where the input is
    /// the connection, whose end ends the server anyway.
    pub watch_stdin: bool,
    /// The registration flags given that name a registration none is made for, for a warning.
    pub ignored_registration_flags: Vec<&'static str>,
}

/// Where the TLS certificate comes from (`--tls-cert`/`--tls-key`, `--tls-self-signed-dir`,
/// `--tls-self-signed`), or plain WebSocket and stdio.
#[derive(Debug, PartialEq, Eq)]
pub enum TlsSource {
    None,
    Files {
        cert: PathBuf,
        key: PathBuf,
    },
    /// Made at the first start and kept in this directory.
    Kept(PathBuf),
    /// Made at every start, in memory only.
    SelfSigned,
}

/// How the file-descriptor limit is shared out (see `tether_server::descriptors`).
#[derive(Debug, PartialEq, Eq)]
pub enum Descriptors {
    /// A WebSocket listener: the limit raised for `--max-connections` (`requested`, or the
    /// default), and the shares fitted to a lower hard limit.
    Fit { requested: Option<usize> },
    /// Stdio holds one connection: nothing to fit.
    Stdio,
}

/// What the sandbox is set up with.
#[derive(Debug, PartialEq, Eq)]
pub struct SandboxPlan {
    /// `--bwrap`, or the first `bwrap` on `PATH`.
    pub bwrap: Option<PathBuf>,
    /// The server's own files, which no sandbox may read or write: the credentials that let a
    /// client in, the TLS key (or the directory a self-signed one is kept in), and the output
    /// spilled for every session.
    pub private: Vec<PathBuf>,
    pub pid_namespace: PidNamespace,
}

/// The flags as the server's configuration, given where it listens (resolved before: a host
/// name is looked up). Refuses the first mistake in the reference's order where the reference
/// has one: the auth flags, then auth on stdio, then Codex's settings.
pub fn plan(args: &ServeArgs, listen: &ListenAddress) -> Result<Plan, FlagError> {
    if args.shutdown_grace_secs > MAX_SHUTDOWN_GRACE.as_secs() {
        return Err(FlagError::ShutdownGraceTooLong {
            asked: args.shutdown_grace_secs,
            max: MAX_SHUTDOWN_GRACE.as_secs(),
        });
    }
    let ws_auth = args.ws_auth.source()?;
    let stdio = matches!(listen, ListenAddress::Stdio);
    if ws_auth.is_enabled() && stdio {
        return Err(FlagError::WsAuthOnStdio);
    }
    let codex_settings = args.codex_settings.settings()?;
    let tls = tls_source(args, listen)?;
    let descriptors = match listen {
        ListenAddress::WebSocket { .. } => Descriptors::Fit { requested: args.max_connections },
        ListenAddress::Stdio => Descriptors::Stdio,
    };
    let spill = args
        .spill_output_dir
        .as_ref()
        .map(|dir| SpillConfig { dir: dir.clone(), bytes_per_process: args.spill_output_bytes });
    let sandbox = SandboxPlan {
        bwrap: args.bwrap.clone(),
        private: private_files(args),
        pid_namespace: args.linux_sandbox_pid_namespace.into(),
    };
    let managed_network = args.managed_network.settings();
    let config = ServerConfig {
        detached_session_ttl: Duration::from_secs(args.session_ttl_secs),
        max_detached_session_ttl: Duration::from_secs(args.max_session_ttl_secs),
        ping_interval: Duration::from_secs(args.ping_interval_secs),
        pong_timeout: Duration::from_secs(args.pong_timeout_secs),
        concurrent_requests: args.concurrent_requests as usize,
        processes: ProcessTableConfig {
            retained_output_bytes: args.retain_output_bytes,
            output_budget: Arc::new(OutputBudget::new(args.max_retained_output_bytes)),
            closed_process_retention: args.closed_process_retention_secs.map(Duration::from_secs),
            max_processes: args.max_processes_per_session,
            closed_output_budget: args.closed_output_budget_bytes,
            spill: None,
            transparent_tcp: managed_network.transparent_tcp,
            upstream_routing: managed_network.upstream_routing(),
        },
        max_sessions: args.max_sessions,
        max_sessions_per_client: args.max_sessions_per_client,
        insecure_no_auth: args.insecure_no_auth,
        request_head_deadline: Duration::from_secs(args.request_head_timeout_secs),
        whole_read_budget_bytes: args.file_read_budget_bytes,
        shutdown_grace: Duration::from_secs(args.shutdown_grace_secs),
        managed_network,
        metrics_listen: args.metrics_listen,
        ..ServerConfig::default()
    };
    Ok(Plan {
        config,
        ws_auth,
        tls,
        descriptors,
        spill,
        sandbox,
        codex_settings,
        watch_stdin: args.exit_on_stdin_close && !stdio,
        ignored_registration_flags: args.registration.ignored().collect(),
    })
}

/// The certificate the TLS flags name, refused where the listener cannot use it or needs one.
fn tls_source(args: &ServeArgs, listen: &ListenAddress) -> Result<TlsSource, FlagError> {
    let tls_flags =
        args.tls_cert.is_some() || args.tls_self_signed || args.tls_self_signed_dir.is_some();
    match listen {
        ListenAddress::Stdio if tls_flags => return Err(FlagError::TlsOnStdio),
        ListenAddress::WebSocket { tls: true, .. } if !tls_flags => {
            return Err(FlagError::NoCertificate { listen: args.listen.clone() });
        }
        _ => {}
    }
    // clap has made --tls-cert and --tls-key come together, and keeps either from
    // --tls-self-signed and --tls-self-signed-dir.
    Ok(match (&args.tls_cert, &args.tls_key, &args.tls_self_signed_dir) {
        (Some(cert), Some(key), _) => TlsSource::Files { cert: cert.clone(), key: key.clone() },
        (_, _, Some(dir)) => TlsSource::Kept(dir.clone()),
        _ if args.tls_self_signed => TlsSource::SelfSigned,
        _ => TlsSource::None,
    })
}

fn private_files(args: &ServeArgs) -> Vec<PathBuf> {
    let others =
        [&args.tls_key, &args.tls_self_signed_dir, &args.spill_output_dir].into_iter().flatten();
    args.ws_auth.secret_files().chain(others).cloned().collect()
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
