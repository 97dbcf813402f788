//! A connection's reading half: every message the server sends, taken in order. Answers go to
//! the calls waiting for them; output and body deltas, most of what arrives, are read straight
//! from their frames; other notifications go to the router as they are. Meanwhile it pings the
//! server, ends a connection that has been silent too long, and stops reading while the
//! session's pause gate is closed. When the connection ends it says why, to the calls still
//! waiting and to the router.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use tether_protocol::envelope::encode_error;
use tether_protocol::error::METHOD_NOT_FOUND;
use tether_protocol::http::{HTTP_BODY_DELTA_MAX_BYTES, HttpRequestBodyDeltaNotification};
use tether_protocol::method::{HTTP_REQUEST_BODY_DELTA, PROCESS_OUTPUT};
use tether_protocol::process::ProcessOutputNotification;
use tether_protocol::{Incoming, JsonRpcError, Message, Notification, RequestId};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, Interval};
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tracing::debug;

use crate::calls::{Answer, Calls};
use crate::error::{ClientError, Disconnect, DisconnectKind};
use crate::flow::{PauseGate, Queued};
use crate::options::ClientOptions;

/// How a Tether server begins a body delta's JSON, with or without attached bytes.
const BODY_DELTA_PREFIX: &[u8] = br#"{"method":"http/request/bodyDelta","#;
/// How `process/output` begins as both servers write it.
const OUTPUT_PREFIX: &[u8] = br#"{"method":"process/output","#;
/// How an answer begins as both servers write it.
const ANSWER_PREFIX: &[u8] = br#"{"id":"#;

/// How often a paused reader probes its connection with a ping, to notice that it ended:
/// while the server's side is gone, nothing holds the process back, so the output the server
/// retains is all the time the client has to come back.
const PAUSED_PROBE_INTERVAL: Duration = Duration::from_millis(200);

/// What a connection reports to its client, in the order it happened.
#[derive(Debug)]
pub(crate) enum ConnectionEvent {
    /// A `process/output` notification, read by the fast path, with its bytes' room in the
    /// queue to the router.
    Output(ProcessOutputNotification, Queued),
    /// An `http/request/bodyDelta` notification, read by the fast path, with its bytes' room.
    BodyDelta(HttpRequestBodyDeltaNotification, Queued),
    Notification(Notification),
    Closed {
        generation: u64,
        reason: String,
        /// The server said it is going away (Close 1001): it is stopping, or a proxy in front
        /// of it is. Recovery then tries briefly instead of for its whole deadline.
        going_away: bool,
    },
}

/// The socket's receiving half.
pub(crate) type Stream = futures_util::stream::SplitStream<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
>;

/// How a connection's reader ended.
enum End {
    /// The connection is gone; calls in flight may be sent again on the next one.
    Dropped(Disconnect),
    /// The server broke the protocol: the calls waiting fail for good instead of being sent
    /// again on the next connection, where the same answer would break that one too.
    Broken(String),
}

/// A data message as it came: its bytes, where its JSON ends, and the bytes after its JSON
/// (a binary message's: `binaryBlocks`, `attachedHttpBodies`, `attachedOutput`), split where
/// the frame lies — an answer can be hundreds of MB.
struct Received {
    message: Bytes,
    json_len: usize,
    attached: Option<Bytes>,
}

/// A notification that carries a process's output or a streamed HTTP body: read apart from
/// every other message, since it is most of what arrives.
enum Bulk {
    Output(ProcessOutputNotification),
    BodyDelta(HttpRequestBodyDeltaNotification),
}

/// What the parts of one connection share with its reader.
pub(crate) struct Shared {
    pub generation: u64,
    pub calls: Arc<Calls>,
    /// Frames to send without waiting for the socket (pings, answers to the server's
    /// requests): the reader never waits on a write.
    pub control: mpsc::Sender<Frame>,
    /// Why a write failed: the connection is over.
    pub writer_gone: mpsc::Receiver<Disconnect>,
    pub events: mpsc::Sender<ConnectionEvent>,
    pub gate: Arc<PauseGate>,
    /// Whether `gate` applies to this connection yet (see `Connection::apply_gate`).
    pub gated: Arc<AtomicBool>,
}

/// One connection's reader, run as a task of its own ([`Reader::run`]).
pub(crate) struct Reader {
    stream: Stream,
    shared: Shared,
    /// How long a silence means the connection is dead; `None`: no pings, no deadline.
    keepalive: Option<Duration>,
    /// When to ping next.
    ping: Interval,
    /// When the server was last heard from (or the reader last stopped waiting for room).
    heard: Instant,
    /// How many handles are full: the gate is closed while any is.
    full_handles: watch::Receiver<usize>,
    /// Since when reading is paused.
    paused_since: Option<Instant>,
}

impl Reader {
    /// A reader of `stream`, pinging as `options` say (`keepalive_interval`, and
    /// `keepalive_timeout` for the silence that ends a connection).
    pub(crate) fn new(stream: Stream, shared: Shared, options: &ClientOptions) -> Self {
        let heard = Instant::now();
        // Without keep-alive the timer is never looked at.
        let interval = options.keepalive_interval.unwrap_or(Duration::from_secs(3600));
        let keepalive = options.keepalive_interval.map(|_| options.keepalive_timeout);
        let full_handles = shared.gate.subscribe();
        Self {
            stream,
            shared,
            keepalive,
            ping: tokio::time::interval_at(heard + interval, interval),
            heard,
            full_handles,
            paused_since: None,
        }
    }

    /// Reads until the connection ends, then tells the calls waiting and the router.
    pub(crate) async fn run(mut self) {
        let end = self.read().await;
        let (disconnect, failure) = match end {
            End::Dropped(disconnect) => (disconnect.clone(), ClientError::Disconnected(disconnect)),
            End::Broken(message) => (
                Disconnect::new(DisconnectKind::Closed, message.clone()),
                ClientError::Protocol(message),
            ),
        };
        let reason = disconnect.to_string();
        let going_away = disconnect.kind == DisconnectKind::GoingAway;
        let generation = self.shared.generation;
        debug!(generation, %reason, "connection ended");
        self.shared.calls.end(disconnect, &failure);
        let closed = ConnectionEvent::Closed { generation, reason, going_away };
        let _ = self.shared.events.send(closed).await;
    }

    /// Takes message after message until the connection ends, and says why it did.
    async fn read(&mut self) -> End {
        loop {
            let received = match self.next_frame().await.and_then(received) {
                Ok(Some(received)) => received,
                Ok(None) => continue,
                Err(end) => return end,
            };
            if let Err(end) = self.take(received).await {
                return end;
            }
        }
    }

    /// The next frame, read only while the pause gate is open; meanwhile the server is
    /// pinged, and a connection silent past the keep-alive deadline, or one a write failed on,
    /// ends.
    async fn next_frame(&mut self) -> Result<Frame, End> {
        loop {
            // Paused while a full handle says so (see `crate::flow`). Time paused is not the
            // server's silence, and pings go on meanwhile, so the server hears us.
            let shared = &self.shared;
            let paused =
                shared.gated.load(Ordering::Acquire) && *self.full_handles.borrow_and_update() > 0;
            match (paused, self.paused_since) {
                (true, None) => self.paused_since = Some(Instant::now()),
                (false, Some(_)) => {
                    self.paused_since = None;
                    self.heard = Instant::now();
                }
                _ => {}
            }
            let give_up_at =
                self.paused_since.zip(shared.gate.patience()).map(|(since, p)| since + p);
            let next = tokio::select! {
                next = self.stream.next(), if !paused => next,
                _ = self.full_handles.changed(), if paused => continue,
                () = sleep_until_or_never(give_up_at), if paused => {
                    self.shared.gate.give_up_pause();
                    continue;
                }
                // Not reading, the reader cannot see the connection end; a write to a socket
                // the peer closed fails (the second at the latest), which ends it here: the
                // session recovers, and the server holds nothing back for a connection that is
                // gone.
                () = tokio::time::sleep(PAUSED_PROBE_INTERVAL), if paused => {
                    let _ = self.shared.control.try_send(Frame::Ping(Default::default()));
                    continue;
                }
                Some(end) = self.shared.writer_gone.recv() => return Err(End::Dropped(end)),
                _ = self.ping.tick(), if self.keepalive.is_some() => {
                    // Silence past the deadline is a dead connection (a peer gone without a
                    // word, a network that swallows packets): recover now rather than when TCP
                    // gives up, minutes later.
                    if let Some(timeout) = self.keepalive
                        && !paused
                        && self.heard.elapsed() > timeout
                    {
                        let message = format!("no answer from the exec-server within {timeout:?}");
                        return Err(End::Dropped(Disconnect::new(DisconnectKind::Silent, message)));
                    }
                    let _ = self.shared.control.try_send(Frame::Ping(Default::default()));
                    continue;
                }
            };
            self.heard = Instant::now();
            return match next {
                Some(Ok(frame)) => Ok(frame),
                Some(Err(tungstenite::Error::Capacity(error))) => Err(End::Broken(format!(
                    "a message from the exec-server is too large: {error}"
                ))),
                Some(Err(error)) => {
                    let message = format!("transport error: {error}");
                    let end = Disconnect::new(DisconnectKind::Transport, message).caused_by(error);
                    Err(End::Dropped(end))
                }
                None => Err(End::Dropped(Disconnect::closed())),
            };
        }
    }

    /// Takes one message: an answer to its call, output or a body delta into its event, any
    /// other notification to the router as it is, a request from the server refused.
    async fn take(&mut self, received: Received) -> Result<(), End> {
        let Received { message, json_len, attached } = received;
        let json = &message[..json_len];
        let bulk = match &attached {
            None => ProcessOutputNotification::from_frame(json)
                .map(Bulk::Output)
                .or_else(|| HttpRequestBodyDeltaNotification::from_frame(json).map(Bulk::BodyDelta))
                .map(Ok),
            // With their bytes attached (`attachedOutput`, `attachedHttpBodies`), taken
            // without a copy.
            Some(bytes) => attached_bulk(json, bytes),
        };
        if let Some(bulk) = bulk {
            let gate = &self.shared.gate;
            let event = match bulk.map_err(End::Broken)? {
                Bulk::Output(output) => {
                    let queued = gate.queue(output.chunk.len()).await;
                    ConnectionEvent::Output(output, queued)
                }
                Bulk::BodyDelta(delta) => {
                    let queued = gate.queue(delta.delta_base64.len()).await;
                    ConnectionEvent::BodyDelta(delta, queued)
                }
            };
            let _ = self.shared.events.send(event).await;
            // Waiting for the router is not the server's silence.
            self.heard = Instant::now();
            return Ok(());
        }
        let calls = &self.shared.calls;
        match Incoming::decode(json) {
            Ok(Incoming::Answer { id, result }) => {
                let answer = Answer { result: message.slice(result), attached };
                calls.complete(&RequestId::Integer(id), Ok(answer));
            }
            Ok(Incoming::Other(Message::Response(response))) => {
                // A `null` result, or an id that is not this client's: rare, so made text
                // again.
                let result = Bytes::from(response.result.to_string());
                calls.complete(&response.id, Ok(Answer { result, attached }));
            }
            Ok(Incoming::Other(Message::Error(error))) => {
                calls.complete(&error.id, Err(ClientError::from_rpc(error.error)));
            }
            Ok(Incoming::Other(Message::Notification(notification))) if attached.is_some() => {
                // Only output and a body delta carry bytes, and only in the forms read above:
                // read here, its bytes would be lost without a word.
                return Err(End::Broken(format!(
                    "{} notification with attached bytes the client cannot read",
                    notification.method
                )));
            }
            Ok(Incoming::Other(Message::Notification(notification))) => {
                let _ = self.shared.events.send(ConnectionEvent::Notification(notification)).await;
                self.heard = Instant::now();
            }
            Ok(Incoming::Other(Message::Request(request))) => {
                // The server asks something of us (network policy decisions); this client
                // makes none, and says so.
                let error = JsonRpcError::new(
                    METHOD_NOT_FOUND,
                    format!("exec-server client does not implement `{}` yet", request.method),
                );
                let refusal = Frame::text(encode_error(&request.id, &error));
                if self.shared.control.try_send(refusal).is_err() {
                    debug!(method = %request.method, "server request left unanswered: control queue full");
                }
            }
            Err(error) => {
                return Err(End::Broken(format!("malformed message from the server: {error}")));
            }
        }
        Ok(())
    }
}

/// A data frame's message; `None` for a control frame, the end for a close.
fn received(frame: Frame) -> Result<Option<Received>, End> {
    Ok(Some(match frame {
        Frame::Text(text) => {
            let message = Bytes::from(text);
            Received { json_len: message.len(), message, attached: None }
        }
        Frame::Binary(message) => match tether_protocol::attached::split(&message) {
            Some((json, _)) => {
                let json_len = json.len();
                let attached = Some(message.slice(json_len + 1..));
                Received { message, json_len, attached }
            }
            None => Received { json_len: message.len(), message, attached: None },
        },
        Frame::Close(Some(close)) if close.code == CloseCode::Away => {
            let message = format!("the exec-server is going away: {}", close.reason);
            return Err(End::Dropped(Disconnect::new(DisconnectKind::GoingAway, message)));
        }
        Frame::Close(Some(close)) => {
            let code = u16::from(close.code);
            let message =
                format!("the exec-server closed the connection ({code}: {})", close.reason);
            return Err(End::Dropped(Disconnect::new(DisconnectKind::Closed, message)));
        }
        Frame::Close(None) => {
            let message = "server closed the connection";
            return Err(End::Dropped(Disconnect::new(DisconnectKind::Closed, message)));
        }
        _ => return Ok(None),
    }))
}

/// The bulk notification a binary message with `bytes` after its JSON carries, or why it is
/// malformed; `None` if it carries none (an answer with a block's bytes, or a notification
/// the reader refuses). Both servers write `method` first; a message that does not is read
/// all the same, the slower way.
fn attached_bulk(json: &[u8], bytes: &Bytes) -> Option<Result<Bulk, String>> {
    let method: std::borrow::Cow<'_, str> = if json.starts_with(OUTPUT_PREFIX) {
        PROCESS_OUTPUT.into()
    } else if json.starts_with(BODY_DELTA_PREFIX) {
        HTTP_REQUEST_BODY_DELTA.into()
    } else if json.starts_with(ANSWER_PREFIX) {
        // An answer with a block's bytes, as both servers write it: no second parse.
        return None;
    } else {
        notification_method(json)?.into()
    };
    match &*method {
        PROCESS_OUTPUT => Some(
            ProcessOutputNotification::from_attached(json, bytes.clone())
                .map(Bulk::Output)
                .ok_or_else(|| {
                    "malformed process/output with attached bytes from the server (its JSON's \
                     chunk must be empty)"
                        .to_string()
                }),
        ),
        HTTP_REQUEST_BODY_DELTA => Some(
            HttpRequestBodyDeltaNotification::from_attached(json, bytes.clone())
                .map(Bulk::BodyDelta)
                .ok_or_else(|| {
                    format!(
                        "malformed http/request/bodyDelta with attached bytes from the server \
                         (at most {HTTP_BODY_DELTA_MAX_BYTES} bytes, after JSON whose \
                         deltaBase64 is empty)"
                    )
                }),
        ),
        _ => None,
    }
}

/// The `method` of a message whose members come in another order than the servers write
/// them; `None` for an answer, or for JSON that is not an object.
fn notification_method(json: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct MethodOnly {
        method: Option<String>,
    }
    serde_json::from_slice::<MethodOnly>(json).ok()?.method
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_or_never(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
