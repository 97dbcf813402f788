//! Transports: how frames reach a connection and leave it. Both carry one JSON-RPC message per
//! frame; everything above them is transport-independent ([`crate::processor`]), and
//! [`crate::serve`] joins the two.
//!
//! - [`accept`]: TCP (and TLS) connections before their upgrade: deadlines and a cap, so
//!   unauthenticated peers cannot exhaust descriptors.
//! - `liveness`: whether a WebSocket peer is still there, judged from its socket's reads and
//!   writes, whatever the connection's tasks are doing.
//! - `upgrade`: the WebSocket handshake itself, which leaves the connection its own
//!   `tokio_tungstenite` stream.
//! - `direct`: a connection's own answers, and its output, written to its WebSocket where they
//!   are made, when nothing queued is waiting to go out ahead of them; big messages cut into
//!   frames.
//! - [`tls`]: the certificate and key, or a self-signed certificate made at startup.
//! - [`kept_certificate`]: a self-signed certificate kept in a directory across restarts.
//! - Here: a connection's outbound queue ([`Outbound`]), its id, and what each transport can
//!   carry ([`TransportKind`]).

pub mod accept;
pub(crate) mod direct;
pub mod kept_certificate;
pub(crate) mod liveness;
pub mod tls;
pub(crate) mod upgrade;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use tether_protocol::envelope::encode_error;
use tether_protocol::{JsonRpcError, RequestId};

use self::direct::{DIRECT_ANSWER_MAX_BYTES, FRAGMENT_BYTES, SharedSocket, Ticket, Unwritten};
use crate::auth::ClientId;
use crate::config::{OUTBOUND_QUEUE_MESSAGES, OUTPUT_IN_FLIGHT_BYTES};
use crate::metrics::Metrics;

/// The sending side of one connection's outbound queue: serialised messages, bounded by
/// [`OUTBOUND_QUEUE_MESSAGES`], and — for process output — by [`OUTPUT_IN_FLIGHT_BYTES`].
/// Over WebSocket, the processor's own answers may skip the queue ([`Outbound::answer`]).
#[derive(Clone)]
pub(crate) struct Outbound {
    queue: mpsc::Sender<Outgoing>,
    output_budget: Arc<Semaphore>,
    metrics: Arc<Metrics>,
    /// Messages handed to the queue and not yet written.
    unwritten: Unwritten,
    /// The socket itself, where the transport lets answers be written where they are made.
    direct: Option<Arc<SharedSocket>>,
    /// Whether the connection asked for `process/output` with its chunk attached
    /// (`attachedOutput`), set at `initialize` before the session takes its copy.
    attached_output: bool,
}

/// A message on its way out. Its permit, if any, returns its bytes to the output budget once
/// the message has been written to the socket; its ticket, its place among the unwritten.
pub(crate) struct Outgoing {
    pub payload: Payload,
    _permit: Option<OwnedSemaphorePermit>,
    _ticket: Ticket,
}

/// What a message is made of: JSON text, or — Tether's `binaryBlocks`, over WebSocket only —
/// JSON with bytes attached ([`tether_protocol::attached`]).
pub(crate) enum Payload {
    Text(String),
    Binary(Vec<u8>),
}

impl Payload {
    /// Its size in bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Payload::Text(text) => text.len(),
            Payload::Binary(bytes) => bytes.len(),
        }
    }
}

/// The connection is gone; the message went nowhere.
#[derive(Debug)]
pub(crate) struct Closed;

impl Outbound {
    /// A new queue and its receiving end (the transport's writer).
    pub(crate) fn channel(metrics: Arc<Metrics>) -> (Self, mpsc::Receiver<Outgoing>) {
        Self::with_socket(metrics, None)
    }

    /// A new queue, whose answers may also be written straight to `direct`, the socket the
    /// writer writes the queue to.
    pub(crate) fn with_socket(
        metrics: Arc<Metrics>,
        direct: Option<Arc<SharedSocket>>,
    ) -> (Self, mpsc::Receiver<Outgoing>) {
        let (queue, receiver) = mpsc::channel(OUTBOUND_QUEUE_MESSAGES);
        let output_budget = Arc::new(Semaphore::new(OUTPUT_IN_FLIGHT_BYTES));
        let unwritten = Unwritten::default();
        let attached_output = false;
        (Self { queue, output_budget, metrics, unwritten, direct, attached_output }, receiver)
    }

    /// Whether `process/output` to this connection goes as a binary message with its chunk
    /// attached ([`tether_protocol::attached`]) rather than as text.
    pub(crate) fn attached_output(&self) -> bool {
        self.attached_output
    }

    /// Records what the connection asked at `initialize` (and its transport allows).
    pub(crate) fn set_attached_output(&mut self, attached: bool) {
        self.attached_output = attached;
    }

    /// The connection's processor's answer to a request: written to the socket at once where
    /// the transport allows it and nothing queued is still unwritten (see `direct`), queued
    /// otherwise. `permit` is held until it has been written, as with [`Self::send_payload`].
    pub(crate) async fn answer(
        &self,
        payload: Payload,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<(), Closed> {
        self.write_or_queue(payload, DIRECT_ANSWER_MAX_BYTES, permit).await
    }

    /// Writes `payload` to the socket at once where the transport allows it, it is at most
    /// `max_bytes` and nothing queued is still unwritten (see `direct`); queues it otherwise,
    /// holding `permit` until it has been written.
    async fn write_or_queue(
        &self,
        payload: Payload,
        max_bytes: usize,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<(), Closed> {
        let payload = match &self.direct {
            Some(socket) => match socket.try_write(&self.unwritten, payload, max_bytes).await {
                Ok(written) => return written,
                Err(payload) => payload,
            },
            None => payload,
        };
        self.send_payload(payload, permit).await
    }

    /// [`Self::answer`] with an error response (counted by code in the metrics).
    pub(crate) async fn answer_error(
        &self,
        id: &RequestId,
        error: &JsonRpcError,
    ) -> Result<(), Closed> {
        self.metrics.error_sent(error.code);
        self.answer(Payload::Text(encode_error(id, error)), None).await
    }

    /// Queues an error response (counted by code in the metrics).
    pub(crate) async fn send_error(
        &self,
        id: &RequestId,
        error: &JsonRpcError,
    ) -> Result<(), Closed> {
        self.metrics.error_sent(error.code);
        self.send(encode_error(id, error)).await
    }

    /// Queues a response or notification, waiting while the queue is full.
    pub(crate) async fn send(&self, text: String) -> Result<(), Closed> {
        self.send_payload(Payload::Text(text), None).await
    }

    /// Queues a message of either kind, holding `permit` (if any; of a budget other than the
    /// output's, a whole-file read's share of the read budget, say) until it has been written
    /// to the socket.
    pub(crate) async fn send_payload(
        &self,
        payload: Payload,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<(), Closed> {
        let outgoing = Outgoing { payload, _permit: permit, _ticket: self.unwritten.ticket() };
        self.queue.send(outgoing).await.map_err(|_| Closed)
    }

    /// Sends process output (or a streamed HTTP body), waiting also while too many output
    /// bytes are written but not yet flushed to the socket. Output in flight is what a dropped
    /// connection loses, and a resuming client can only get it back from what the server
    /// retained: keeping it well under the retained-output size is what makes a reconnect
    /// lossless. Written where it is made when the socket is free and nothing queued is
    /// unwritten (see `direct`).
    pub(crate) async fn send_output_payload(&self, payload: Payload) -> Result<(), Closed> {
        let len = payload.len();
        self.metrics.output_sent(len);
        let bytes = len.clamp(1, OUTPUT_IN_FLIGHT_BYTES) as u32;
        let permit =
            self.output_budget.clone().acquire_many_owned(bytes).await.map_err(|_| Closed)?;
        self.write_or_queue(payload, FRAGMENT_BYTES, Some(permit)).await
    }
}

/// Identifies one connection for the life of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ConnectionId(pub u64);

impl ConnectionId {
    pub(crate) fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// Which transport a connection came through, which decides how it names itself in parse
/// errors and whether its session survives it.
#[derive(Debug, Clone)]
pub(crate) enum TransportKind {
    /// `client`: who the peer is for the per-client bounds ([`ClientId`]).
    WebSocket {
        peer: std::net::SocketAddr,
        client: ClientId,
    },
    Stdio,
}

impl TransportKind {
    /// Who the connection is, for the per-client bounds.
    pub(crate) fn client(&self) -> ClientId {
        match self {
            TransportKind::WebSocket { client, .. } => client.clone(),
            TransportKind::Stdio => ClientId::Stdio,
        }
    }

    /// The prefix of a parse error, as the reference words it.
    pub(crate) fn parse_error_prefix(&self) -> String {
        match self {
            TransportKind::WebSocket { peer, .. } => {
                format!(
                    "failed to parse websocket JSON-RPC message from exec-server websocket {peer}"
                )
            }
            TransportKind::Stdio => {
                "failed to parse JSON-RPC message from exec-server stdio".into()
            }
        }
    }

    /// Whether messages may carry attached bytes (`binaryBlocks`): WebSocket has binary
    /// messages; stdio carries lines of text.
    pub(crate) fn carries_binary(&self) -> bool {
        matches!(self, TransportKind::WebSocket { .. })
    }

    /// Stdio sessions end with their connection: nobody can reconnect to a pipe.
    pub(crate) fn sessions_outlive_connection(&self) -> bool {
        matches!(self, TransportKind::WebSocket { .. })
    }
}
