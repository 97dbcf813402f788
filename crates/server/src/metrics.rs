//! `GET /metrics`: the server's counters in Prometheus text format, for an operator's dashboard
//! and alerts — connections, sessions, processes, bytes streamed, resumes, refusals and errors.
//!
//! Counters are plain atomics bumped where things happen; gauges of what exists now (sessions,
//! processes) are read from the registry when scraped, so they can never drift.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// What the registry holds at the moment of a scrape.
pub(crate) struct Snapshot {
    pub sessions_attached: usize,
    pub sessions_detached: usize,
    pub processes_running: usize,
    pub processes_exited: usize,
    /// Output held for catch-up reads, in memory and spilled to disk.
    pub retained_output_bytes: usize,
    pub spilled_output_bytes: u64,
    /// Output let go of for the server-wide budget (`--max-retained-output-bytes`) so far.
    pub retained_output_shed_bytes: u64,
}

/// Why a WebSocket upgrade was refused, for `tether_upgrades_refused_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpgradeRefusal {
    /// 401: no credential, or a wrong one.
    Unauthorized,
    /// 403: a browser's request (it sent `Origin`).
    Origin,
    /// 503: `--max-connections` reached.
    TooManyConnections,
    /// 4xx: not a valid WebSocket upgrade request.
    NotWebSocket,
}

impl UpgradeRefusal {
    const ALL: [UpgradeRefusal; 4] = [
        UpgradeRefusal::Unauthorized,
        UpgradeRefusal::Origin,
        UpgradeRefusal::TooManyConnections,
        UpgradeRefusal::NotWebSocket,
    ];

    fn label(self) -> &'static str {
        match self {
            UpgradeRefusal::Unauthorized => r#"{reason="unauthorized"}"#,
            UpgradeRefusal::Origin => r#"{reason="origin"}"#,
            UpgradeRefusal::TooManyConnections => r#"{reason="too_many_connections"}"#,
            UpgradeRefusal::NotWebSocket => r#"{reason="not_websocket"}"#,
        }
    }
}

/// Why an `initialize` that would have started a session was refused, for
/// `tether_sessions_refused_total{reason}`. (The refusal comes after the upgrade: a session id
/// only arrives in `initialize`, so the upgrade cannot tell a new session from a resume.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionRefusal {
    /// `--max-sessions` reached, every session attached.
    TooManySessions,
    /// The server is draining (see [`crate::drain`]).
    Draining,
    /// `--max-sessions-per-client` reached by this client, every one of its sessions attached.
    TooManySessionsForClient,
}

impl SessionRefusal {
    const ALL: [SessionRefusal; 3] = [
        SessionRefusal::TooManySessions,
        SessionRefusal::Draining,
        SessionRefusal::TooManySessionsForClient,
    ];

    fn label(self) -> &'static str {
        match self {
            SessionRefusal::TooManySessions => r#"{reason="too_many_sessions"}"#,
            SessionRefusal::Draining => r#"{reason="draining"}"#,
            SessionRefusal::TooManySessionsForClient => {
                r#"{reason="too_many_sessions_for_client"}"#
            }
        }
    }
}

/// Why a detached session was ended before its time to make room for a new one, for
/// `tether_sessions_evicted_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionEviction {
    /// The server held `--max-sessions`: its oldest detached session went.
    ServerFull,
    /// The client held `--max-sessions-per-client`: its own oldest detached session went.
    ClientFull,
}

impl SessionEviction {
    const ALL: [SessionEviction; 2] = [SessionEviction::ServerFull, SessionEviction::ClientFull];

    fn label(self) -> &'static str {
        match self {
            SessionEviction::ServerFull => r#"{reason="server_full"}"#,
            SessionEviction::ClientFull => r#"{reason="client_full"}"#,
        }
    }
}

/// Why a connection was closed before its upgrade, for
/// `tether_connections_closed_before_upgrade_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EarlyClose {
    /// Its TLS handshake or request head did not arrive in time.
    Deadline,
    /// The oldest of too many connections waiting for their upgrade.
    Evicted,
    /// Its TLS handshake failed.
    TlsHandshakeFailed,
    /// It came from inside one of this server's sandboxes.
    SandboxedPeer,
}

impl EarlyClose {
    const ALL: [EarlyClose; 4] = [
        EarlyClose::Deadline,
        EarlyClose::Evicted,
        EarlyClose::TlsHandshakeFailed,
        EarlyClose::SandboxedPeer,
    ];

    fn label(self) -> &'static str {
        match self {
            EarlyClose::Deadline => r#"{reason="deadline"}"#,
            EarlyClose::Evicted => r#"{reason="evicted"}"#,
            EarlyClose::TlsHandshakeFailed => r#"{reason="tls_handshake"}"#,
            EarlyClose::SandboxedPeer => r#"{reason="sandboxed_peer"}"#,
        }
    }
}

#[derive(Default)]
pub(crate) struct Metrics {
    connections_open: AtomicI64,
    connections_total: AtomicU64,
    /// Indexed by [`UpgradeRefusal`] (its declaration order, which `UpgradeRefusal::ALL` keeps).
    upgrades_refused: [AtomicU64; 4],
    /// Indexed by [`EarlyClose`], as above.
    closed_early: [AtomicU64; 4],
    /// Indexed by [`SessionRefusal`], as above.
    sessions_refused: [AtomicU64; 3],
    /// Indexed by [`SessionEviction`], as above.
    sessions_evicted: [AtomicU64; 2],
    output_bytes: AtomicU64,
    sessions_created: AtomicU64,
    sessions_resumed: AtomicU64,
    /// JSON-RPC error responses sent, by code.
    errors: Mutex<BTreeMap<i64, u64>>,
}

impl Metrics {
    pub(crate) fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        self.connections_total.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn upgrade_refused(&self, why: UpgradeRefusal) {
        self.upgrades_refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn closed_early(&self, why: EarlyClose) {
        self.closed_early[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn session_refused(&self, why: SessionRefusal) {
        self.sessions_refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn session_evicted(&self, why: SessionEviction) {
        self.sessions_evicted[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn output_sent(&self, bytes: usize) {
        self.output_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn session_created(&self) {
        self.sessions_created.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn session_resumed(&self) {
        self.sessions_resumed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn error_sent(&self, code: i64) {
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        *errors.entry(code).or_default() += 1;
    }

    /// The exposition text.
    pub(crate) fn render(&self, now: &Snapshot) -> String {
        let mut text = String::with_capacity(2048);
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, f64)]| {
            let _ = writeln!(text, "# HELP {name} {help}");
            let _ = writeln!(text, "# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(text, "{name}{labels} {value}");
            }
        };
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as f64;
        metric(
            "tether_connections",
            "gauge",
            "Connections open now (WebSocket and stdio).",
            &[("", self.connections_open.load(Ordering::Relaxed) as f64)],
        );
        metric(
            "tether_connections_total",
            "counter",
            "Connections accepted since start.",
            &[("", load(&self.connections_total))],
        );
        let refused =
            by_reason(&UpgradeRefusal::ALL, &self.upgrades_refused, UpgradeRefusal::label);
        metric(
            "tether_upgrades_refused_total",
            "counter",
            "WebSocket upgrades refused, by reason: a missing or wrong credential, a browser's \
             Origin, the connection limit, not a WebSocket request.",
            &refused,
        );
        let closed_early = by_reason(&EarlyClose::ALL, &self.closed_early, EarlyClose::label);
        metric(
            "tether_connections_closed_before_upgrade_total",
            "counter",
            "Connections closed before their WebSocket upgrade, by reason: no TLS handshake or \
             request head in time, the oldest of too many waiting, a failed TLS handshake, a \
             peer inside one of this server's sandboxes.",
            &closed_early,
        );
        metric(
            "tether_sessions",
            "gauge",
            "Sessions held now, attached to a connection or waiting for a resume.",
            &[
                (r#"{state="attached"}"#, now.sessions_attached as f64),
                (r#"{state="detached"}"#, now.sessions_detached as f64),
            ],
        );
        metric(
            "tether_sessions_created_total",
            "counter",
            "Sessions created since start.",
            &[("", load(&self.sessions_created))],
        );
        let sessions_refused =
            by_reason(&SessionRefusal::ALL, &self.sessions_refused, SessionRefusal::label);
        metric(
            "tether_sessions_refused_total",
            "counter",
            "New sessions refused at initialize, by reason: the session limit, a draining server, \
             the per-client session limit.",
            &sessions_refused,
        );
        let sessions_evicted =
            by_reason(&SessionEviction::ALL, &self.sessions_evicted, SessionEviction::label);
        metric(
            "tether_sessions_evicted_total",
            "counter",
            "Detached sessions ended before their time to make room for a new session, their \
             processes killed, by reason: the server's session limit, the client's.",
            &sessions_evicted,
        );
        metric(
            "tether_session_resumes_total",
            "counter",
            "Sessions resumed by a new connection since start (client recoveries).",
            &[("", load(&self.sessions_resumed))],
        );
        metric(
            "tether_processes",
            "gauge",
            "Processes held now: still running, or exited and still readable.",
            &[
                (r#"{state="running"}"#, now.processes_running as f64),
                (r#"{state="exited"}"#, now.processes_exited as f64),
            ],
        );
        metric(
            "tether_retained_output_bytes",
            "gauge",
            "Process output held for catch-up reads now, in memory and spilled to disk.",
            &[
                (r#"{where="memory"}"#, now.retained_output_bytes as f64),
                (r#"{where="disk"}"#, now.spilled_output_bytes as f64),
            ],
        );
        metric(
            "tether_retained_output_shed_bytes_total",
            "counter",
            "Retained output let go of, oldest first and from the largest holders, to keep \
             what all processes hold in memory within --max-retained-output-bytes (dropped, or \
             moved to disk with --spill-output-dir).",
            &[("", now.retained_output_shed_bytes as f64)],
        );
        metric(
            "tether_output_bytes_total",
            "counter",
            "Process output and HTTP body bytes sent to clients, as encoded in messages.",
            &[("", load(&self.output_bytes))],
        );
        let errors: Vec<(String, f64)> = self
            .errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(code, count)| (format!(r#"{{code="{code}"}}"#), *count as f64))
            .collect();
        let errors: Vec<(&str, f64)> = errors.iter().map(|(l, v)| (l.as_str(), *v)).collect();
        metric(
            "tether_rpc_errors_total",
            "counter",
            "JSON-RPC error responses sent, by code.",
            &errors,
        );
        text
    }
}

/// A counter's samples by reason: each reason's label with its count (the counts are indexed
/// as `all` lists the reasons).
fn by_reason<R: Copy>(
    all: &[R],
    counts: &[AtomicU64],
    label: fn(R) -> &'static str,
) -> Vec<(&'static str, f64)> {
    all.iter()
        .zip(counts)
        .map(|(reason, count)| (label(*reason), count.load(Ordering::Relaxed) as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_reasons_index_their_counters_in_order() {
        for (at, reason) in UpgradeRefusal::ALL.into_iter().enumerate() {
            assert_eq!(reason as usize, at, "{reason:?}");
        }
        for (at, reason) in SessionRefusal::ALL.into_iter().enumerate() {
            assert_eq!(reason as usize, at, "{reason:?}");
        }
        for (at, reason) in SessionEviction::ALL.into_iter().enumerate() {
            assert_eq!(reason as usize, at, "{reason:?}");
        }
    }

    #[test]
    fn renders_prometheus_text() {
        let metrics = Metrics::default();
        metrics.connection_opened();
        metrics.connection_opened();
        metrics.connection_closed();
        metrics.error_sent(-32600);
        metrics.error_sent(-32600);
        metrics.error_sent(-32601);
        metrics.output_sent(10);
        metrics.session_refused(SessionRefusal::Draining);
        let now = Snapshot {
            sessions_attached: 1,
            sessions_detached: 2,
            processes_running: 3,
            processes_exited: 4,
            retained_output_bytes: 5,
            spilled_output_bytes: 6,
            retained_output_shed_bytes: 7,
        };
        metrics.session_evicted(SessionEviction::ClientFull);
        let text = metrics.render(&now);
        for line in [
            "# TYPE tether_connections gauge",
            "tether_connections 1",
            "tether_connections_total 2",
            r#"tether_sessions{state="detached"} 2"#,
            r#"tether_processes{state="running"} 3"#,
            "tether_output_bytes_total 10",
            r#"tether_sessions_refused_total{reason="draining"} 1"#,
            r#"tether_sessions_refused_total{reason="too_many_sessions"} 0"#,
            r#"tether_retained_output_bytes{where="disk"} 6"#,
            "tether_retained_output_shed_bytes_total 7",
            r#"tether_sessions_evicted_total{reason="client_full"} 1"#,
            r#"tether_sessions_evicted_total{reason="server_full"} 0"#,
            r#"tether_rpc_errors_total{code="-32600"} 2"#,
            r#"tether_rpc_errors_total{code="-32601"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
        }
    }
}
