//! Everything that shapes the server's behaviour, with the defaults and why they are what they
//! are.

use std::time::Duration;

use tether_engine::ProcessTableConfig;

use crate::auth::WsAuth;
use crate::managed_network::ManagedNetwork;

/// How long a session whose connection went away keeps running, waiting to be resumed.
///
/// 0.169 keeps detached sessions 80 s (measured). Clients give up recovering after 25 s, and
/// both sides start their clocks independently, so the server's window must be comfortably
/// longer than any client's recovery deadline.
pub const DEFAULT_DETACHED_SESSION_TTL: Duration = Duration::from_secs(80);

/// The longest a client may ask its session to wait for a resume (`initialize
/// {detachedTtlSecs}`, Tether's `sessionTtl`): a day, so a command left running overnight
/// (`tether exec --detach`) can be read in the morning, while a session nobody comes back for
/// still ends — with its processes and retained output — within a day. `--max-sessions`
/// bounds how many such sessions one client can leave.
pub const DEFAULT_MAX_DETACHED_SESSION_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// How often the server pings each WebSocket client, as the reference does. Pings keep NATs
/// and proxies from dropping an idle connection and surface a dead one on the next write.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(30);

/// Silence from a WebSocket client (no frame at all, not even a pong) after which its
/// connection is closed and its session detached: two missed pings at the default interval.
pub const DEFAULT_PONG_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest WebSocket message (after reassembly) and stdio line accepted: the reference's
/// ceiling. A bigger message ends that connection, not the server.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Largest single WebSocket frame; bigger messages must be fragmented (tungstenite's default,
/// which the reference uses).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Most bytes one read of a WebSocket asks for. The WebSocket library zero-fills that much of
/// its buffer before every read, the read that finds nothing included: at its default
/// (128 KiB) a small request paid for clearing up to 256 KiB (with the client's share, 3–4 µs
/// of a 19 µs call). 16 KiB holds any small request whole; what a server receives big (a
/// block being written) takes more reads, each a large copy anyway.
pub const WEBSOCKET_READ_BYTES: usize = 16 * 1024;

/// Messages queued for one connection before producers wait.
///
/// This is the backpressure point: a client that stops reading stalls its own session's
/// process output (and so those processes' pipes), never the server's memory or other
/// sessions.
pub const OUTBOUND_QUEUE_MESSAGES: usize = 128;

/// Process output bytes a connection may have queued or being written at once.
///
/// Output sent but not yet received is lost when the connection drops; the client gets it back
/// from the process's retained output. This bound (plus what the kernel's socket buffer holds)
/// must stay below the retained size, which is why retention defaults to 8 MiB and this to
/// 1 MiB. It still lets a fast process stream at full speed on any link.
pub const OUTPUT_IN_FLIGHT_BYTES: usize = 1024 * 1024;

/// Longest from the moment the server starts waiting for a request head (just after the TCP
/// accept, or the TLS handshake) until the head is complete. Any client on any network sends
/// its few hundred bytes of upgrade request at once; 10 s is generous for a congested mobile
/// link and still turns over an attacker's sockets quickly.
pub const DEFAULT_REQUEST_HEAD_DEADLINE: Duration = Duration::from_secs(10);

/// Connections held before their upgrade, TLS handshakes included. Each costs one descriptor
/// and a few KiB; 256 is far more than legitimate clients ever have in flight at once (each
/// is here for a round trip), and small beside the descriptor headroom the server keeps. A
/// small descriptor limit lowers it (see [`crate::descriptors`]).
pub const DEFAULT_MAX_PENDING_CONNECTIONS: usize = 256;

/// Requests per connection that may wait at once (long-poll `process/read`s). Tether answers
/// other requests while they wait; past this many, the connection stops reading new requests
/// until one finishes.
///
/// The reference's `--concurrent-requests` defaults to 1: one request at a time per
/// connection, so a long-poll holds up every request behind it. Codex opens one connection per
/// executor and long-polls on it, so 64 lets a session's reads wait side by side while its
/// other calls are answered, and still bounds what one connection holds.
pub const DEFAULT_CONCURRENT_REQUESTS: usize = 64;

/// Sessions a server holds at once, attached or detached: each can hold processes and
/// retained output, so one client opening sessions in a loop must run into a wall.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;

/// Sessions one client ([`crate::auth::ClientId`]: its credential, or its address without
/// authentication) holds at once, attached or detached. A quarter of the default table: no
/// single client can take more than that from the others, while an agent with dozens of
/// sub-agents and `tether exec --detach` jobs is far from it. Past it, the client's own oldest
/// detached session makes room, and a client whose sessions are all attached is refused.
pub const DEFAULT_MAX_SESSIONS_PER_CLIENT: usize = 256;

/// WebSocket connections open at once. Past it, upgrades get `503`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How long a stopping server lets running processes finish (see [`crate::drain`]): none by
/// default, so a stop is what it always was — connections close and processes are killed at
/// once — unless the operator chooses a drain.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::ZERO;

/// The longest drain an operator may ask for: an hour covers a long build or test run, and a
/// value past it is more likely a typo (milliseconds for seconds) than a wish to keep a
/// stopping server alive for days. Supervisors have their own ceiling too (Kubernetes'
/// `terminationGracePeriodSeconds`), which should be set a little above this server's.
pub const MAX_SHUTDOWN_GRACE: Duration = Duration::from_secs(60 * 60);

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub detached_session_ttl: Duration,
    /// See [`DEFAULT_MAX_DETACHED_SESSION_TTL`].
    pub max_detached_session_ttl: Duration,
    pub ping_interval: Duration,
    /// See [`DEFAULT_PONG_TIMEOUT`].
    pub pong_timeout: Duration,
    pub concurrent_requests: usize,
    pub processes: ProcessTableConfig,
    /// Sessions held at once ([`DEFAULT_MAX_SESSIONS`]). When full, the oldest detached
    /// session is ended to make room for a new one.
    pub max_sessions: usize,
    /// Sessions one client holds at once ([`DEFAULT_MAX_SESSIONS_PER_CLIENT`]).
    pub max_sessions_per_client: usize,
    /// WebSocket connections open at once ([`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// Connections held before their upgrade ([`DEFAULT_MAX_PENDING_CONNECTIONS`]); past it
    /// the oldest is closed.
    pub max_pending_connections: usize,
    /// Who may open a WebSocket.
    pub ws_auth: WsAuth,
    /// Listen beyond loopback without authentication.
    pub insecure_no_auth: bool,
    /// Serve `wss://` with these TLS settings (see [`crate::transport::tls`]).
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// See [`DEFAULT_REQUEST_HEAD_DEADLINE`].
    pub request_head_deadline: Duration,
    /// File bytes whole-file reads may hold at once, server-wide
    /// ([`tether_engine::fs::DEFAULT_WHOLE_READ_BUDGET_BYTES`]).
    pub whole_read_budget_bytes: usize,
    /// How long a drain lets processes finish ([`DEFAULT_SHUTDOWN_GRACE`], at most
    /// [`MAX_SHUTDOWN_GRACE`]).
    pub shutdown_grace: Duration,
    /// The managed-network flags as the operator gave them. What they mean is in
    /// [`Self::processes`] (`transparent_tcp`, `upstream_routing`), which the managed proxies
    /// read; this is the record of what was asked.
    pub managed_network: ManagedNetwork,
    /// A second, plain-HTTP listener serving only `GET /metrics` and `GET /readyz`, without
    /// authentication, for a scraper that holds no token (`--metrics-listen`). Counters and
    /// readiness only: nothing there runs or reads anything.
    pub metrics_listen: Option<std::net::SocketAddr>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            detached_session_ttl: DEFAULT_DETACHED_SESSION_TTL,
            max_detached_session_ttl: DEFAULT_MAX_DETACHED_SESSION_TTL,
            ping_interval: DEFAULT_PING_INTERVAL,
            pong_timeout: DEFAULT_PONG_TIMEOUT,
            concurrent_requests: DEFAULT_CONCURRENT_REQUESTS,
            processes: ProcessTableConfig::default(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_sessions_per_client: DEFAULT_MAX_SESSIONS_PER_CLIENT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_pending_connections: DEFAULT_MAX_PENDING_CONNECTIONS,
            ws_auth: WsAuth::None,
            insecure_no_auth: false,
            tls: None,
            request_head_deadline: DEFAULT_REQUEST_HEAD_DEADLINE,
            whole_read_budget_bytes: tether_engine::fs::DEFAULT_WHOLE_READ_BUDGET_BYTES,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            managed_network: ManagedNetwork::default(),
            metrics_listen: None,
        }
    }
}
