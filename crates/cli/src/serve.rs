//! `tether serve`: run the exec-server.

use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use tether_engine::ProcessTableConfig;
use tether_server::config::{
    DEFAULT_CONCURRENT_REQUESTS, DEFAULT_DETACHED_SESSION_TTL, DEFAULT_PING_INTERVAL,
};
use tether_server::{DEFAULT_LISTEN, ListenAddress, Server, ServerConfig};
use tokio_util::sync::CancellationToken;

#[derive(Args)]
pub struct ServeArgs {
    /// Where to listen: `ws://IP:PORT` (port 0 picks a free port; the bound URL is printed as
    /// the first line of stdout) or `stdio`.
    #[arg(long, default_value = DEFAULT_LISTEN)]
    listen: String,

    /// Requests per connection that may wait at once (long-polling reads). Other requests are
    /// answered while they wait.
    #[arg(long, default_value_t = DEFAULT_CONCURRENT_REQUESTS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    concurrent_requests: u64,

    /// Seconds a session keeps running after its connection drops, waiting to be resumed.
    #[arg(long, default_value_t = DEFAULT_DETACHED_SESSION_TTL.as_secs())]
    session_ttl_secs: u64,

    /// Output bytes retained per process for replays after a reconnect.
    #[arg(long, default_value_t = ProcessTableConfig::default().retained_output_bytes)]
    retain_output_bytes: usize,

    /// Seconds a closed process stays readable; by default, for the session's lifetime.
    #[arg(long)]
    closed_process_retention_secs: Option<u64>,

    /// Seconds between WebSocket pings.
    #[arg(long, default_value_t = DEFAULT_PING_INTERVAL.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    ping_interval_secs: u64,
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let listen: ListenAddress = args.listen.parse()?;
    let config = ServerConfig {
        detached_session_ttl: Duration::from_secs(args.session_ttl_secs),
        ping_interval: Duration::from_secs(args.ping_interval_secs),
        concurrent_requests: args.concurrent_requests as usize,
        processes: ProcessTableConfig {
            retained_output_bytes: args.retain_output_bytes,
            closed_process_retention: args.closed_process_retention_secs.map(Duration::from_secs),
        },
    };
    let server = Server::bind(&listen, config)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    if let Some(url) = server.url() {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{url}")?;
        stdout.flush()?;
        tracing::info!(%url, "listening");
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    server.serve(shutdown).await?;
    tracing::info!("stopped; every process was terminated");
    Ok(())
}

/// SIGTERM or SIGINT starts a clean shutdown: connections close and every session's processes
/// are killed before the server exits.
async fn cancel_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tracing::info!("shutting down");
    shutdown.cancel();
}
