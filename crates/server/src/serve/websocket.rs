//! The WebSocket transport: one axum router serving the upgrade on `/` and `GET /readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::{Extension, Router};
use futures_util::stream::SplitStream;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, info_span};

use crate::auth::ClientId;
use crate::config::{MAX_FRAME_BYTES, MAX_MESSAGE_BYTES, WEBSOCKET_READ_BYTES};
use crate::metrics::UpgradeRefusal;
use crate::processor::{Ending, Inbound, InboundFrame, serve_connection};
use crate::state::ServerState;
use crate::transport::accept;
use crate::transport::direct::{SharedSocket, Sink, forget_writer};
use crate::transport::liveness::{Gone, SocketClock};
use crate::transport::upgrade::{Refusal, Socket, Upgrade};
use crate::transport::{ConnectionId, Outbound, Outgoing, Payload, TransportKind};

/// Most queued messages written before one flush.
const WRITE_BATCH_MESSAGES: usize = 64;

/// How often a connection's socket clock is checked, per pong timeout, and at most how long
/// between two checks: a gone peer is let go within a quarter of the timeout, and never more
/// than a quarter second, after it runs out. A check reads two atomics.
const SILENCE_CHECKS_PER_TIMEOUT: u32 = 4;
const SILENCE_CHECK_MAX_INTERVAL: Duration = Duration::from_millis(250);

/// How long a stopping server waits for its connections to write what they have queued and
/// their Close frames (1001), so clients learn the server went away rather than broke.
const SHUTDOWN_GOODBYE: Duration = Duration::from_secs(2);

#[derive(Clone)]
struct AppState {
    server: Arc<ServerState>,
    shutdown: CancellationToken,
    /// The upgraded connections, which shutdown waits for.
    connections: TaskTracker,
}

pub(crate) async fn serve(
    listener: TcpListener,
    server: Arc<ServerState>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let rules = accept::AcceptRules {
        tls: server.config.tls.clone(),
        request_head_deadline: server.config.request_head_deadline,
        max_pending_connections: server.config.max_pending_connections,
    };
    let metrics = server.metrics.clone();
    let connections = TaskTracker::new();
    let app = Router::new()
        .route("/", any(upgrade))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AppState {
            server,
            shutdown: shutdown.clone(),
            connections: connections.clone(),
        });
    let served = accept::serve(listener, app, rules, metrics, shutdown).await;
    connections.close();
    let _ = tokio::time::timeout(SHUTDOWN_GOODBYE, connections.wait()).await;
    served
}

/// The metrics listener (`--metrics-listen`): `GET /metrics` without a credential, and
/// `GET /readyz`, nothing else, until `shutdown`.
pub(crate) async fn serve_metrics(
    listener: TcpListener,
    server: Arc<ServerState>,
    shutdown: CancellationToken,
) {
    let app = Router::new()
        .route("/metrics", get(open_metrics_text))
        .route("/readyz", get(readyz))
        .with_state(AppState {
            server,
            shutdown: shutdown.clone(),
            connections: TaskTracker::new(),
        });
    let _ = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
}

/// `GET /metrics` on the metrics listener: counters only, so no credential is asked.
async fn open_metrics_text(State(app): State<AppState>) -> Response {
    let text = app.server.metrics.render(&app.server.sessions.snapshot());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

async fn upgrade(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Extension(clock): Extension<Arc<SocketClock>>,
    headers: HeaderMap,
    upgrade: Result<Upgrade, Refusal>,
) -> Response {
    // Browsers always send Origin and never let a page omit it: refusing it keeps any web page
    // from driving a local executor.
    if headers.contains_key(header::ORIGIN) {
        app.server.metrics.upgrade_refused(UpgradeRefusal::Origin);
        return (StatusCode::FORBIDDEN, "browser-originated connections are not accepted")
            .into_response();
    }
    if let Err(refusal) = app.server.config.ws_auth.check(&headers) {
        debug!(%peer, reason = refusal.0, "websocket upgrade refused");
        app.server.metrics.upgrade_refused(UpgradeRefusal::Unauthorized);
        return (StatusCode::UNAUTHORIZED, refusal.0).into_response();
    }
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => {
            app.server.metrics.upgrade_refused(UpgradeRefusal::NotWebSocket);
            return rejection.into_response();
        }
    };
    let Ok(permit) = app.server.connections.clone().try_acquire_owned() else {
        let limit = app.server.config.max_connections;
        app.server.metrics.upgrade_refused(UpgradeRefusal::TooManyConnections);
        debug!(%peer, limit, "websocket upgrade refused: too many connections");
        let message = format!(
            "too many connections to this server: the limit is {limit} (--max-connections); try again later"
        );
        return (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
    };
    let client = app.server.config.ws_auth.client_id(&headers, peer);
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES))
        .read_buffer_size(WEBSOCKET_READ_BYTES);
    upgrade.accept(config, move |socket| async move {
        run_connection(socket, peer, client, app, clock).await;
        drop(permit);
    })
}

/// `GET /readyz`: 200 while the server takes new sessions, 503 once it drains (see
/// [`crate::drain`]), so that a load balancer sends new work elsewhere while resumes still
/// reach this server.
async fn readyz(State(app): State<AppState>) -> Response {
    if app.server.drain.is_draining() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining: shutting down").into_response();
    }
    StatusCode::OK.into_response()
}

/// `GET /metrics` (Prometheus text). With `--ws-auth`, it asks for the same credential as a
/// WebSocket: what runs on a server is no one else's business.
async fn metrics_text(State(app): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(refusal) = app.server.config.ws_auth.check(&headers) {
        return (StatusCode::UNAUTHORIZED, refusal.0).into_response();
    }
    let text = app.server.metrics.render(&app.server.sessions.snapshot());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

async fn run_connection(
    socket: Socket,
    peer: SocketAddr,
    client: ClientId,
    app: AppState,
    clock: Arc<SocketClock>,
) {
    let connection = ConnectionId::next();
    let span =
        info_span!("connection", connection = connection.0, %peer, session = tracing::field::Empty);
    async move {
        // Shutdown waits (a little) for this connection to say goodbye.
        let _running = app.connections.token();
        debug!("websocket connected");
        let (sink, stream) = socket.split();
        // The peer is gone (see `liveness`): both halves stop at once.
        let gone = CancellationToken::new();
        let sink = Arc::new(SharedSocket::new(sink, gone.clone()));
        let (outbound, queue) =
            Outbound::with_socket(app.server.metrics.clone(), Some(sink.clone()));
        let pong_timeout = app.server.config.pong_timeout;
        let watchdog = tokio::spawn(watch(clock, pong_timeout, gone.clone()));
        let (close_with, close_frame) = tokio::sync::oneshot::channel();
        let ping_interval = app.server.config.ping_interval.min(pong_timeout / 2);
        let writer = tokio::spawn(write(sink, queue, ping_interval, close_frame, gone.clone()));
        let broken = Arc::new(std::sync::Mutex::new(None));
        let inbound = socket_frames(stream, gone.clone(), broken.clone());
        let ending = serve_connection(
            app.server,
            connection,
            TransportKind::WebSocket { peer, client },
            inbound,
            outbound,
            app.shutdown,
        )
        .await;
        let broken = broken.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let frame = broken.or(match ending {
            Ending::InputEnded => None,
            Ending::Shutdown => Some(close(CloseCode::Away, "server is shutting down")),
            Ending::Violation(why) => Some(close(CloseCode::Policy, why)),
            Ending::Superseded => {
                Some(close(CloseCode::Policy, "session resumed by another connection"))
            }
        });
        // The writer flushes what is queued, says why (if there is a reason to give) and
        // closes; a peer that stopped reading is let go by the watchdog meanwhile.
        let _ = close_with.send(frame);
        let _ = writer.await;
        watchdog.abort();
        debug!("websocket disconnected");
    }
    .instrument(span)
    .await
}

fn close(code: CloseCode, reason: &'static str) -> CloseFrame {
    CloseFrame { code, reason: reason.into() }
}

/// Ends the connection (`gone`) once its socket says the peer is gone.
async fn watch(clock: Arc<SocketClock>, timeout: Duration, gone: CancellationToken) {
    let every = (timeout / SILENCE_CHECKS_PER_TIMEOUT).min(SILENCE_CHECK_MAX_INTERVAL);
    let mut check = tokio::time::interval(every);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        check.tick().await;
        if let Some(verdict) = clock.verdict(timeout) {
            match verdict {
                Gone::Silent { ms } => debug!(silent_ms = ms, "peer silent; closing"),
                Gone::NotReading { ms } => debug!(blocked_ms = ms, "peer not reading; closing"),
            }
            gone.cancel();
            return;
        }
    }
}

/// The socket's messages, read by the connection's processor itself: a request is read,
/// answered and queued for the writer on one thread, with no hand-over to a reading task in
/// between (each hand-over can wake another thread, which on a small machine costs more than
/// the request). Nothing is read ahead: while the processor works on one request, the next
/// waits in the socket and TCP pushes back on the client. That time is the server's backlog,
/// not the client's silence: the socket is not being read, so its clock does not count it.
///
/// Text and binary messages both carry one JSON document (a binary one with a NUL in it also
/// carries attached bytes, Tether's `binaryBlocks`); pings are answered by the WebSocket
/// layer. The stream ends with the client's close, when the peer is `gone`, or on a WebSocket
/// protocol error, whose Close frame it leaves in `broken` for the writer to send.
fn socket_frames(
    stream: SplitStream<Socket>,
    gone: CancellationToken,
    broken: Arc<std::sync::Mutex<Option<CloseFrame>>>,
) -> Inbound {
    // The read in progress lives in the stream, not in the caller's `next()`: a processor
    // that stops waiting for a frame (to serve a signal) loses nothing.
    Box::pin(futures_util::stream::unfold(stream, move |mut stream| {
        let (gone, broken) = (gone.clone(), broken.clone());
        async move {
            loop {
                let message = tokio::select! {
                    message = stream.next() => message,
                    () = gone.cancelled() => return None,
                };
                let frame = match message {
                    None | Some(Ok(Message::Close(_))) => return None,
                    Some(Ok(Message::Text(text))) => InboundFrame::json(text.into()),
                    Some(Ok(Message::Binary(bytes))) => InboundFrame::binary(bytes),
                    // Fragments come reassembled: a lone frame is never read.
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                    Some(Err(error)) => {
                        let frame = close_for(&error);
                        *broken.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = frame;
                        return None;
                    }
                };
                return Some((frame, stream));
            }
        }
    }))
}

/// The Close frame for a WebSocket protocol error of the client's, as RFC 6455 numbers them.
fn close_for(error: &WsError) -> Option<CloseFrame> {
    use tokio_tungstenite::tungstenite::error::CapacityError;
    let frame = match error {
        WsError::Capacity(CapacityError::MessageTooLong { .. }) => {
            close(CloseCode::Size, "message too big: at most 64 MiB, in frames of 16 MiB")
        }
        WsError::Capacity(_) => close(CloseCode::Size, "message too big"),
        WsError::Utf8(_) => close(CloseCode::Invalid, "text frame is not UTF-8"),
        WsError::Protocol(_) => close(CloseCode::Protocol, "websocket protocol error"),
        _ => return None,
    };
    debug!(code = u16::from(frame.code), reason = %frame.reason, "closing on a protocol error");
    Some(frame)
}

/// Writes the outbound queue to the socket and pings the client. Writes what is already
/// queued with the first message and flushes once: a burst of output costs one socket write,
/// not one per notification (output permits are held until the flush, so the in-flight budget
/// counts what is really unsent). The socket is shared with the processor, which writes its
/// own answers when nothing is queued (`direct`); the writer takes it for each batch. When
/// the connection ends (`close_frame`), it writes what is still queued, then the Close frame
/// if there is one, and closes.
async fn write(
    socket: Arc<SharedSocket>,
    mut queue: mpsc::Receiver<Outgoing>,
    ping_interval: Duration,
    mut close_frame: tokio::sync::oneshot::Receiver<Option<CloseFrame>>,
    gone: CancellationToken,
) {
    let mut ping =
        tokio::time::interval_at(tokio::time::Instant::now() + ping_interval, ping_interval);
    let work = async {
        let frame = loop {
            let mut batch = Vec::with_capacity(WRITE_BATCH_MESSAGES);
            tokio::select! {
                biased;
                frame = &mut close_frame => break frame.ok().flatten(),
                outgoing = queue.recv() => match outgoing {
                    Some(outgoing) => batch.push(outgoing),
                    None => break close_frame.await.ok().flatten(),
                },
                _ = ping.tick() => {
                    let mut sink = socket.lock().await;
                    if sink.send(Message::Ping(Default::default())).await.is_err() {
                        return;
                    }
                    forget_writer(&mut sink);
                    continue;
                }
            }
            if write_batch(&mut *socket.lock().await, &mut queue, batch).await.is_err() {
                return;
            }
        };
        // The connection is over: what was queued before the end still goes out, all of it
        // (a batch takes at most `WRITE_BATCH_MESSAGES`; the queue holds more).
        let mut sink = socket.lock().await;
        while !queue.is_empty() {
            if write_batch(&mut sink, &mut queue, Vec::new()).await.is_err() {
                return;
            }
        }
        if let Some(frame) = frame {
            let _ = sink.send(Message::Close(Some(frame))).await;
        }
        let _ = sink.close().await;
    };
    tokio::select! {
        () = work => {}
        // Nothing more can reach a peer that is gone.
        () = gone.cancelled() => {}
    }
}

/// Writes `batch` and whatever else is queued (up to [`WRITE_BATCH_MESSAGES`]), then flushes.
async fn write_batch(
    sink: &mut Sink,
    queue: &mut mpsc::Receiver<Outgoing>,
    mut batch: Vec<Outgoing>,
) -> Result<(), WsError> {
    while batch.len() < WRITE_BATCH_MESSAGES {
        match queue.try_recv() {
            Ok(outgoing) => batch.push(outgoing),
            Err(_) => break,
        }
    }
    for outgoing in &mut batch {
        let payload = std::mem::replace(&mut outgoing.payload, Payload::Text(String::new()));
        payload.feed_into(sink).await?;
    }
    let flushed = sink.flush().await;
    if flushed.is_ok() {
        forget_writer(sink);
    }
    // Only now, the socket still held by the caller, do the batch's tickets go: its messages
    // count as unwritten until they are flushed, so no direct answer overtakes them.
    drop(batch);
    flushed
}
