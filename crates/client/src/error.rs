//! What can go wrong for a client, in terms a caller can act on: every failure has a kind to
//! decide on (never its words), and the error that caused it, when there is one, as its
//! [`std::error::Error::source`].

use std::sync::Arc;

use tether_protocol::JsonRpcError;
use tether_protocol::process::{SpawnFailure, SpawnFailureKind};

/// What caused a failure, shared so that one dropped connection can fail many calls.
pub type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// Why a client gave its session up: the reason, to show a person, and whether the server
/// had said it was going away (it was draining or shutting down) rather than becoming
/// unreachable or forgetting the session, to decide on. Its processes fail with the same fact
/// ([`crate::ProcessFailureKind::SessionLost`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct SessionLost {
    pub reason: String,
    pub server_went_away: bool,
}

impl SessionLost {
    /// A session given up on this side, the server never having said it was going away.
    pub fn here(reason: impl Into<String>) -> Self {
        Self { reason: reason.into(), server_went_away: false }
    }
}

/// A client call's failure.
#[derive(Debug, Clone, thiserror::Error)]
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
    Disconnected(#[source] Disconnect),
    /// The client gave up on its session: the server is unreachable or the session is gone.
    /// Every later call fails with the same message.
    #[error("exec-server session is lost: {0}")]
    Failed(SessionLost),
    /// Could not connect or complete the handshake.
    #[error("cannot connect to the exec-server: {0}")]
    Connect(#[source] ConnectError),
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

    /// Why a `process/start` failed to spawn, as the server classified it (`error.data.kind`,
    /// Codex 0.171 and Tether): `None` from a server that does not say, or for any other
    /// failure.
    pub fn spawn_failure(&self) -> Option<SpawnFailureKind> {
        let ClientError::Server { data: Some(data), .. } = self else { return None };
        serde_json::from_value::<SpawnFailure>(data.clone()).ok().map(|failure| failure.kind)
    }
}

/// Why a connection could not be made, or its handshake failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ConnectError {
    pub kind: ConnectErrorKind,
    message: String,
    #[source]
    source: Option<Cause>,
    /// The SHA-256 of the certificate the server presented, for a certificate refused
    /// (`UntrustedCertificate`, `WrongFingerprint`); read as a fingerprint in `tls`, which
    /// imports this module.
    pub(crate) presented: Option<[u8; 32]>,
}

/// What kind of thing kept the connection from being made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectErrorKind {
    /// The URL is not a `ws://` or `wss://` URL.
    InvalidUrl,
    /// The bearer token cannot be sent in a header.
    InvalidToken,
    /// The certificates to trust could not be had (the CA file, the system's roots).
    TlsSetup,
    /// No connection, or no answer to the handshake, within its timeout.
    Timeout,
    /// The server answered the upgrade with this HTTP status instead (401: the credential).
    Refused { status: u16 },
    /// The server's certificate is not trusted: an unknown issuer (no CA file given, or
    /// another CA), another name, expired.
    UntrustedCertificate,
    /// The server's certificate is not the pinned one (a server restarted with a new
    /// self-signed certificate, or another server answering).
    WrongFingerprint,
    /// A `wss://` URL, but the server does not speak TLS (its answer was plain HTTP).
    NotTls,
    /// The server's answer to the upgrade was not HTTP — a TLS server reached with `ws://`,
    /// or something that is not a web server at all.
    NotHttp,
    /// TLS failed otherwise (no common protocol version or cipher, a broken handshake).
    Tls,
    /// The network: nobody listening, unreachable, reset.
    Network,
    /// The WebSocket or session handshake went wrong otherwise.
    Handshake,
}

impl ConnectError {
    pub(crate) fn new(kind: ConnectErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), source: None, presented: None }
    }

    /// The same error, for a certificate refused whose SHA-256 was `presented`.
    pub(crate) fn presenting(mut self, presented: Option<[u8; 32]>) -> Self {
        self.presented = presented;
        self
    }

    pub(crate) fn caused_by(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        self.source = Some(Arc::new(source));
        self
    }
}

impl From<ConnectError> for ClientError {
    fn from(error: ConnectError) -> Self {
        ClientError::Connect(error)
    }
}

/// Why a connection ended under a call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Disconnect {
    pub kind: DisconnectKind,
    message: String,
    #[source]
    source: Option<Cause>,
}

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisconnectKind {
    /// It was closed, by either side, without a reason to act on.
    Closed,
    /// The server said it is going away (Close 1001): it is stopping, or a proxy in front of
    /// it is.
    GoingAway,
    /// Nothing was heard from the server within the keepalive deadline.
    Silent,
    /// Reading or writing the socket failed.
    Transport,
}

impl Disconnect {
    pub(crate) fn new(kind: DisconnectKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), source: None }
    }

    pub(crate) fn caused_by(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The same end, said with more context first (what the call was, what became of it).
    pub(crate) fn context(mut self, context: impl std::fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// A connection that is simply gone.
    pub(crate) fn closed() -> Self {
        Self::new(DisconnectKind::Closed, "connection closed")
    }
}

impl From<Disconnect> for ClientError {
    fn from(error: Disconnect) -> Self {
        ClientError::Disconnected(error)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn server(data: Option<serde_json::Value>) -> ClientError {
        ClientError::Server { code: -32603, message: "m".into(), data }
    }

    /// The kind a server gives a failed spawn, and none where it gives none or another shape.
    #[test]
    fn a_spawn_failure_is_read_from_the_errors_data() {
        let found = server(Some(json!({"kind": "spawnPermissionDenied"}))).spawn_failure();
        assert_eq!(found, Some(SpawnFailureKind::SpawnPermissionDenied));
        assert_eq!(server(None).spawn_failure(), None);
        assert_eq!(server(Some(json!({"kind": "somethingNew"}))).spawn_failure(), None);
        assert_eq!(server(Some(json!({"sendFailure": {}}))).spawn_failure(), None);
    }
}
