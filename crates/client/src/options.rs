//! How a client connects, waits and recovers: [`ClientOptions`] and the defaults it starts
//! from.

use std::time::Duration;

use crate::flow::DEFAULT_FULL_HANDLE_PAUSE;

/// Largest message (and frame: servers send a message as one) accepted from a server by
/// default ([`ClientOptions::max_message_bytes`]): an
/// `fs/readFile` answer for the biggest file a server reads whole (512 MiB, 683 MiB as base64),
/// with room for the envelope. The library's default, 64 MiB, would fail any file over 48 MiB.
pub const MAX_INCOMING_MESSAGE_BYTES: usize = 720 * 1024 * 1024;

/// Most bytes one read of the WebSocket asks for. The WebSocket library zero-fills that much
/// of its buffer before every read, the read that finds nothing included: at its default
/// (128 KiB) every small answer cost clearing up to 256 KiB (measured: 3–4 µs of a 19 µs call).
/// 32 KiB holds any small answer whole and keeps a big one (a buffered HTTP body of tens of MB)
/// as fast as before; 16 KiB made that 15% slower.
pub const WEBSOCKET_READ_BYTES: usize = 32 * 1024;

/// How long a connection attempt may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server may take to answer `initialize`.
pub const DEFAULT_INITIALIZE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long recovery tries before the session is given up.
///
/// It must stay well inside the server's detached-session retention (80 s for 0.169 and for
/// Tether by default), since both sides start their clocks independently.
pub const DEFAULT_RECOVERY_TIMEOUT: Duration = Duration::from_secs(25);
/// Pause between reconnect attempts: short, because an outage usually ends abruptly and every
/// millisecond after that is latency the user sees.
pub const DEFAULT_RECOVERY_RETRY_INTERVAL: Duration = Duration::from_millis(100);
/// Pings while connected: cheap, and what lets a dead connection be noticed.
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Three missed pings: long enough for a busy server, short beside the recovery deadline.
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(15);
/// How long recovery tries after the server said it is going away (Close 1001), instead of
/// the whole recovery deadline: a proxy in front of a live server that restarts comes back in
/// this time and the session resumes; a server that stopped does not, and its client need
/// not spend 25 s saying so.
pub const GOING_AWAY_RECOVERY: Duration = Duration::from_secs(3);

#[derive(Clone)]
pub struct ClientOptions {
    pub client_name: String,
    /// Sent as `Authorization: Bearer …` on every connection's upgrade, for a server started
    /// with `--ws-auth` (a capability token, or a signed JWT).
    pub bearer_token: Option<String>,
    /// Asked for the bearer token before every connection, the first and each one recovery
    /// makes, in place of `bearer_token`: for a token renewed while the client runs (a file a
    /// sidecar rewrites, a short-lived signed token). A server that refuses the token (401)
    /// during recovery is tried again only if the source then gives another one.
    pub token_source: Option<TokenSource>,
    /// For `wss://`: trust only this CA (PEM) instead of the system's roots — for a server
    /// whose certificate a private CA signed, or a self-signed one pinned.
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// For `wss://`: trust exactly the certificate with this SHA-256 (what `tether serve
    /// --tls-self-signed` prints), whoever issued it — as ssh pins a host key. Takes precedence
    /// over `tls_ca_file`.
    pub tls_fingerprint: Option<crate::tls::TlsFingerprint>,
    pub connect_timeout: Duration,
    pub initialize_timeout: Duration,
    pub recovery_timeout: Duration,
    pub recovery_retry_interval: Duration,
    /// How often to ping the server when connected (`None`: never). Any frame from the server
    /// (a pong, output, an answer) shows the connection is alive.
    pub keepalive_interval: Option<Duration>,
    /// Silence after which a connection is presumed dead and the session recovered on a new
    /// one, instead of waiting for TCP to notice.
    pub keepalive_timeout: Duration,
    /// Largest message accepted from the server. One that is larger breaks the connection (the
    /// session recovers) and fails the calls waiting on it, which are not sent again.
    pub max_message_bytes: usize,
    /// How long a process handle whose caller has not read [`crate::HANDLE_BUFFER_BYTES`] of
    /// it may pause the connection (every handle and answer waits; the server holds the
    /// process back, losing nothing) before it falls behind instead, to catch up later from
    /// what the server retained. `None`: pause as long as it takes (one stream into a slow
    /// consumer); zero: fall behind at once. See [`crate::flow`].
    pub full_handle_pause: Option<Duration>,
    /// Ask the server to keep the session this long once its connection is gone, instead of
    /// its default (Tether's `sessionTtl`; the server grants at most its maximum, and the
    /// reference ignores the request): for commands left running on purpose. `None`: the
    /// server's default.
    pub detached_ttl: Option<Duration>,
}

/// Gives the bearer token to send now (`None`: none), or a line saying why it cannot.
pub type TokenSource = std::sync::Arc<dyn Fn() -> Result<Option<String>, String> + Send + Sync>;

impl ClientOptions {
    /// The token to send on the connection about to be made.
    pub(crate) fn token_now(&self) -> Result<Option<String>, crate::error::ConnectError> {
        match &self.token_source {
            Some(source) => source().map_err(|why| {
                crate::error::ConnectError::new(crate::error::ConnectErrorKind::InvalidToken, why)
            }),
            None => Ok(self.bearer_token.clone()),
        }
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            client_name: "tether".into(),
            bearer_token: None,
            token_source: None,
            tls_ca_file: None,
            tls_fingerprint: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            initialize_timeout: DEFAULT_INITIALIZE_TIMEOUT,
            recovery_timeout: DEFAULT_RECOVERY_TIMEOUT,
            recovery_retry_interval: DEFAULT_RECOVERY_RETRY_INTERVAL,
            max_message_bytes: MAX_INCOMING_MESSAGE_BYTES,
            keepalive_interval: Some(DEFAULT_KEEPALIVE_INTERVAL),
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            full_handle_pause: Some(DEFAULT_FULL_HANDLE_PAUSE),
            detached_ttl: None,
        }
    }
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("client_name", &self.client_name)
            .field("has_bearer_token", &self.bearer_token.is_some())
            .field("has_token_source", &self.token_source.is_some())
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_fingerprint", &self.tls_fingerprint)
            .field("connect_timeout", &self.connect_timeout)
            .field("initialize_timeout", &self.initialize_timeout)
            .field("recovery_timeout", &self.recovery_timeout)
            .field("recovery_retry_interval", &self.recovery_retry_interval)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("keepalive_timeout", &self.keepalive_timeout)
            .field("full_handle_pause", &self.full_handle_pause)
            .field("detached_ttl", &self.detached_ttl)
            .finish()
    }
}
