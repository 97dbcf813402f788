//! Transports: how frames reach a connection and leave it. Both carry one JSON-RPC message per
//! frame; everything above them is transport-independent ([`crate::processor`]).
//!
//! - [`websocket`]: axum's WebSocket upgrade on `/`, `GET /readyz`, pings, size caps.
//! - [`stdio`]: newline-delimited JSON on stdin/stdout, one connection per server.

pub(crate) mod stdio;
pub(crate) mod websocket;

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

/// Serialised messages waiting to be written to one connection, bounded by
/// [`crate::config::OUTBOUND_QUEUE_MESSAGES`].
pub(crate) type Outbound = mpsc::Sender<String>;

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

    /// Stdio sessions end with their connection: nobody can reconnect to a pipe.
    pub(crate) fn sessions_outlive_connection(&self) -> bool {
        matches!(self, TransportKind::WebSocket { .. })
    }
}
