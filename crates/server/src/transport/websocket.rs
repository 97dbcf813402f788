//! The WebSocket transport: one axum router serving the upgrade on `/` and `GET /readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::ws::{
    Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection,
};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span};

use super::accept;
use super::{ConnectionId, Outbound, TransportKind};
use crate::config::{MAX_FRAME_BYTES, MAX_MESSAGE_BYTES};
use crate::metrics::UpgradeRefusal;
use crate::processor::serve_connection;
use crate::state::ServerState;

/// Most queued messages written before one flush.
const WRITE_BATCH_MESSAGES: usize = 64;

#[derive(Clone)]
struct AppState {
    server: Arc<ServerState>,
    shutdown: CancellationToken,
}

pub(crate) async fn serve(
    listener: TcpListener,
    server: Arc<ServerState>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let rules = accept::AcceptRules {
        tls: server.config.tls.clone(),
        request_head_deadline: server.config.request_head_deadline,
    };
    let metrics = server.metrics.clone();
    let app = Router::new()
        .route("/", any(upgrade))
        .route("/readyz", get(|| async { StatusCode::OK }))
        .route("/metrics", get(metrics_text))
        .with_state(AppState { server, shutdown: shutdown.clone() });
    accept::serve(listener, app, rules, metrics, shutdown).await
}

async fn upgrade(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
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
    upgrade
        .max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| async move {
            run_connection(socket, peer, app).await;
            drop(permit);
        })
        .into_response()
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

async fn run_connection(socket: WebSocket, peer: SocketAddr, app: AppState) {
    let connection = ConnectionId::next();
    let span =
        info_span!("connection", connection = connection.0, %peer, session = tracing::field::Empty);
    async move {
        debug!("websocket connected");
        let (mut sink, stream) = socket.split();
        let (outbound, mut queue) = Outbound::channel(app.server.metrics.clone());
        let ping_interval = app.server.config.ping_interval;
        let pong_timeout = app.server.config.pong_timeout;
        // When the client was last heard from (any frame, a pong included), in ms since `start`.
        let start = tokio::time::Instant::now();
        let heard = Arc::new(AtomicU64::new(0));
        let heard_by_reader = heard.clone();
        let (dead, dead_signal) = tokio::sync::oneshot::channel::<()>();
        let writer = tokio::spawn(async move {
            let mut dead = Some(dead);
            let mut ping = tokio::time::interval_at(
                tokio::time::Instant::now() + ping_interval,
                ping_interval,
            );
            loop {
                // Write what is already queued with the first message and flush once: a burst of
                // output costs one socket write, not one per notification. Output permits are
                // held until the flush, so the in-flight budget counts what is really unsent.
                let mut batch = Vec::with_capacity(WRITE_BATCH_MESSAGES);
                tokio::select! {
                    outgoing = queue.recv() => match outgoing {
                        Some(outgoing) => batch.push(outgoing),
                        None => break,
                    },
                    _ = ping.tick() => {
                        // A client that answers nothing, not even pings, is gone (or stuck):
                        // end the connection so its session detaches and can be resumed.
                        let silent_ms = (start.elapsed().as_millis() as u64)
                            .saturating_sub(heard.load(Ordering::Relaxed));
                        if silent_ms > pong_timeout.as_millis() as u64 {
                            debug!(silent_ms, "no answer to pings; closing the connection");
                            if let Some(dead) = dead.take() {
                                let _ = dead.send(());
                            }
                            break;
                        }
                        if sink.send(Message::Ping(Default::default())).await.is_err() {
                            break;
                        }
                        continue;
                    }
                }
                while batch.len() < WRITE_BATCH_MESSAGES {
                    match queue.try_recv() {
                        Ok(outgoing) => batch.push(outgoing),
                        Err(_) => break,
                    }
                }
                let mut failed = false;
                for outgoing in &mut batch {
                    let text = std::mem::take(&mut outgoing.text);
                    if sink.feed(Message::text(text)).await.is_err() {
                        failed = true;
                        break;
                    }
                }
                if failed || sink.flush().await.is_err() {
                    break;
                }
            }
            let _ = sink.close().await;
        });
        // Text and binary frames both carry one JSON document; pings are answered by the
        // WebSocket layer; a close frame, an error or a protocol violation ends the connection.
        let inbound = stream
            .take_until(dead_signal)
            .inspect(move |_| {
                heard_by_reader.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
            })
            .take_while(|m| {
                std::future::ready(matches!(m, Ok(m) if !matches!(m, Message::Close(_))))
            })
            .filter_map(|m| {
                std::future::ready(match m {
                    Ok(Message::Text(text)) => Some(Vec::from(text.as_bytes())),
                    Ok(Message::Binary(bytes)) => Some(Vec::from(bytes)),
                    _ => None,
                })
            });
        serve_connection(
            app.server,
            connection,
            TransportKind::WebSocket { peer },
            Box::pin(inbound),
            outbound,
            app.shutdown,
        )
        .await;
        // The processor dropped its outbound sender; the writer flushes what is queued and ends
        // once every other sender (the session's forwarder) let go. Do not wait on it.
        writer.abort();
        debug!("websocket disconnected");
    }
    .instrument(span)
    .await
}
