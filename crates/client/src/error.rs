//! What can go wrong for a client, in terms a caller can act on.

use tether_protocol::JsonRpcError;

/// A client call's failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a JSON-RPC error.
    #[error("exec-server rejected the request: {message} (code {code})")]
    Server {
        code: i64,
        message: String,
        /// The error's `data`, when the server sent one.
        data: Option<serde_json::Value>,
    },
    /// The connection dropped while the call was in flight, and the call is not one that can be
    /// retried safely (it may or may not have taken effect).
    #[error("exec-server connection dropped before the answer arrived: {0}")]
    Disconnected(String),
    /// The client gave up on its session: the server is unreachable or the session is gone.
    /// Every later call fails with the same message.
    #[error("exec-server session is lost: {0}")]
    Failed(String),
    /// Could not connect or complete the handshake.
    #[error("cannot connect to the exec-server: {0}")]
    Connect(String),
    /// The server does not serve what was asked (a Tether extension the reference lacks); the
    /// request was not sent.
    #[error("exec-server does not support this: {0}")]
    Unsupported(String),
    /// The server sent something this client cannot understand.
    #[error("exec-server protocol error: {0}")]
    Protocol(String),
}

impl ClientError {
    pub(crate) fn from_rpc(error: JsonRpcError) -> Self {
        ClientError::Server { code: error.code, message: error.message, data: error.data }
    }

    /// The server's error code, if the server answered with one.
    pub fn code(&self) -> Option<i64> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }
}
