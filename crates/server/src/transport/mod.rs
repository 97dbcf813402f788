//! Transports: how frames reach a connection and leave it. Both carry one JSON-RPC message per
//! frame; everything above them is transport-independent ([`crate::processor`]).
//!
//! - [`accept`]: TCP (and TLS) connections before their upgrade: deadlines and a cap, so
//!   unauthenticated peers cannot exhaust descriptors.
//! - `liveness`: whether a WebSocket peer is still there, judged from its socket's reads and
//!   writes, whatever the connection's tasks are doing.
//! - [`websocket`]: axum's WebSocket upgrade on `/`, `GET /readyz`, pings, size caps.
//! - [`stdio`]: newline-delimited JSON on stdin/stdout, one connection per server.

pub mod accept;
mod liveness;
pub(crate) mod stdio;
pub mod tls;
pub(crate) mod websocket;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use tether_protocol::envelope::encode_error;
use tether_protocol::{JsonRpcError, RequestId};

use crate::config::{OUTBOUND_QUEUE_MESSAGES, OUTPUT_IN_FLIGHT_BYTES};
use crate::metrics::Metrics;

/// The sending side of one connection's outbound queue: serialised messages, bounded by
/// [`OUTBOUND_QUEUE_MESSAGES`], and — for process output — by [`OUTPUT_IN_FLIGHT_BYTES`].
#[derive(Clone)]
pub(crate) struct Outbound {
    queue: mpsc::Sender<Outgoing>,
    output_budget: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

/// A message on its way out. Its permit, if any, returns its bytes to the output budget once
/// the message has been written to the socket.
pub(crate) struct Outgoing {
    pub payload: Payload,
    _permit: Option<OwnedSemaphorePermit>,
}

/// What a message is made of: JSON text, or — Tether's `binaryBlocks`, over WebSocket only —
/// JSON with bytes attached ([`tether_protocol::attached`]).
pub(crate) enum Payload {
    Text(String),
    Binary(Vec<u8>),
}

/// The connection is gone; the message went nowhere.
#[derive(Debug)]
pub(crate) struct Closed;

impl Outbound {
    /// A new queue and its receiving end (the transport's writer).
    pub(crate) fn channel(metrics: Arc<Metrics>) -> (Self, mpsc::Receiver<Outgoing>) {
        let (queue, receiver) = mpsc::channel(OUTBOUND_QUEUE_MESSAGES);
        let output_budget = Arc::new(Semaphore::new(OUTPUT_IN_FLIGHT_BYTES));
        (Self { queue, output_budget, metrics }, receiver)
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
        self.queue.send(Outgoing { payload, _permit: permit }).await.map_err(|_| Closed)
    }

    /// Queues process output (or a streamed HTTP body), waiting also while too many output bytes are written but not yet
    /// flushed to the socket. Output in flight is what a dropped connection loses, and a
    /// resuming client can only get it back from what the server retained: keeping it well
    /// under the retained-output size is what makes a reconnect lossless.
    pub(crate) async fn send_output(&self, text: String) -> Result<(), Closed> {
        self.metrics.output_sent(text.len());
        let bytes = text.len().clamp(1, OUTPUT_IN_FLIGHT_BYTES) as u32;
        let permit =
            self.output_budget.clone().acquire_many_owned(bytes).await.map_err(|_| Closed)?;
        self.send_payload(Payload::Text(text), Some(permit)).await
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
    WebSocket { peer: std::net::SocketAddr },
    Stdio,
}

impl TransportKind {
    /// The prefix of a parse error, as the reference words it.
    pub(crate) fn parse_error_prefix(&self) -> String {
        match self {
            TransportKind::WebSocket { peer } => {
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
