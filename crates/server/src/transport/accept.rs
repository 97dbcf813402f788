//! Accepting TCP connections until they are WebSockets (or have had their plain HTTP answer):
//! the part of a connection's life before anyone has authenticated, where every peer is a
//! stranger and may be hostile.
//!
//! Three rules keep strangers from starving the server of file descriptors, which would break
//! the sessions already running (their process starts and file reads need descriptors too):
//!
//! - **Deadlines.** A TLS handshake must finish within [`HANDSHAKE_TIMEOUT`], and then a request
//!   head must arrive whole within the request-head deadline
//!   ([`crate::config::DEFAULT_REQUEST_HEAD_DEADLINE`], `--request-head-timeout-secs`) — counted from when the server starts waiting, not from the
//!   first byte, so a connection that sends nothing, or a byte at a time, is closed all the same.
//! - **A cap on strangers.** At most [`crate::config::DEFAULT_MAX_PENDING_CONNECTIONS`]
//!   connections (fewer under a small descriptor limit) are held before their upgrade. Past
//!   it, the *oldest* is closed to make room: a real client finishes its head in
//!   milliseconds, so an attacker would have to open hundreds of connections in that time to
//!   keep one out, while refusing newcomers would let a slow trickle of idle sockets lock
//!   everyone out.
//! - Upgraded connections leave this module and count against `--max-connections` instead
//!   (see [`crate::descriptors`] for how both fit the descriptor limit).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tether_engine::sandbox::peers;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::liveness::{ClockedIo, SocketClock};
use super::tls::HANDSHAKE_TIMEOUT;
use crate::metrics::{EarlyClose, Metrics};

/// How long the accept loop waits after `accept` fails (out of descriptors, say) before it
/// tries again: long enough not to spin, short enough that a freed descriptor is soon used.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// How connections are taken in before their upgrade.
pub(crate) struct AcceptRules {
    /// Serve `wss://` with these settings.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// See [`crate::config::DEFAULT_REQUEST_HEAD_DEADLINE`].
    pub request_head_deadline: Duration,
    /// Connections held before their upgrade; past it the oldest is closed.
    pub max_pending_connections: usize,
}

/// Serves `app` on `listener` until `shutdown`, applying the rules in the module
/// documentation. Upgraded connections run on in their own tasks.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    rules: AcceptRules,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let tls = rules.tls.map(TlsAcceptor::from);
    let deadline = rules.request_head_deadline;
    let pending = Arc::new(Pending::new(rules.max_pending_connections));
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    debug!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        // Notifications are small and latency matters more than packet count: no Nagle.
        let _ = tcp.set_nodelay(true);
        let (id, cancel) = pending.admit(&shutdown, &metrics);
        let (app, tls, pending, metrics) =
            (app.clone(), tls.clone(), pending.clone(), metrics.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = serve_one(tcp, peer, app, tls, deadline, &metrics) => {}
                // Evicted, or the server is stopping: the socket closes with this task.
                () = cancel.cancelled() => {}
            }
            pending.release(id);
        });
    }
    Ok(())
}

/// One connection until its upgrade or its end: the TLS handshake, then HTTP/1.1 with
/// upgrades, the request-head deadline on every request.
async fn serve_one(
    tcp: TcpStream,
    peer: SocketAddr,
    app: Router,
    tls: Option<TlsAcceptor>,
    deadline: Duration,
    metrics: &Metrics,
) {
    if from_a_sandbox(&tcp, peer).await {
        metrics.closed_early(EarlyClose::SandboxedPeer);
        warn!(%peer, "refused a connection from inside one of this server's sandboxes");
        return;
    }
    match tls {
        None => serve_http(tcp, peer, app, deadline, metrics).await,
        Some(acceptor) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
        {
            Ok(Ok(tls)) => serve_http(tls, peer, app, deadline, metrics).await,
            Ok(Err(error)) => {
                metrics.closed_early(EarlyClose::TlsHandshakeFailed);
                debug!(%peer, %error, "TLS handshake failed");
            }
            Err(_) => {
                metrics.closed_early(EarlyClose::Deadline);
                debug!(%peer, "TLS handshake timed out");
            }
        },
    }
}

/// Whether a loopback connection comes from a command in one of this server's sandboxes (see
/// `tether_engine::sandbox::peers`): such a command must not drive the server that confines
/// it. Asked only while a sandbox runs; the look through `/proc` runs on the blocking pool.
async fn from_a_sandbox(tcp: &TcpStream, peer: SocketAddr) -> bool {
    if !peers::any_live() {
        return false;
    }
    let Ok(local) = tcp.local_addr() else { return false };
    tokio::task::spawn_blocking(move || peers::is_sandboxed_peer(local, peer)).await.unwrap_or(true)
}

async fn serve_http<Io>(
    io: Io,
    peer: SocketAddr,
    app: Router,
    deadline: Duration,
    metrics: &Metrics,
) where
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // The socket keeps its own clock, which the WebSocket connection it may become watches.
    let clock = SocketClock::new();
    let io = ClockedIo::new(io, clock.clone());
    let app = app.layer(axum::Extension(ConnectInfo(peer))).layer(axum::Extension(clock));
    let service = TowerToHyperService::new(app);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(deadline);
    // `with_upgrades` hands the socket to the WebSocket task and ends this future.
    let connection = http.serve_connection(TokioIo::new(io), service).with_upgrades();
    match connection.await {
        Ok(()) => {}
        Err(error) if error.is_timeout() => {
            metrics.closed_early(EarlyClose::Deadline);
            debug!(%peer, "no complete request head in time; closing");
        }
        Err(error) => debug!(%peer, %error, "HTTP connection ended with an error"),
    }
}

/// The connections not yet upgraded, oldest first, each with the token that closes it.
struct Pending {
    inner: Mutex<PendingInner>,
    /// The most held at once.
    cap: usize,
}

#[derive(Default)]
struct PendingInner {
    next_id: u64,
    connections: BTreeMap<u64, CancellationToken>,
}

impl Pending {
    fn new(cap: usize) -> Self {
        Self { inner: Mutex::default(), cap }
    }

    /// Registers a new connection, closing the oldest one if the cap is reached.
    fn admit(&self, shutdown: &CancellationToken, metrics: &Metrics) -> (u64, CancellationToken) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.connections.len() >= self.cap
            && let Some((_, oldest)) = inner.connections.pop_first()
        {
            oldest.cancel();
            metrics.closed_early(EarlyClose::Evicted);
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let cancel = shutdown.child_token();
        inner.connections.insert(id, cancel.clone());
        (id, cancel)
    }

    fn release(&self, id: u64) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).connections.remove(&id);
    }
}
