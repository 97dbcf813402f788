//! All sessions of a server: creating, resuming, detaching and expiring them.
//!
//! The table is bounded twice: `--max-sessions` in all, `--max-sessions-per-client` for each
//! client ([`ClientId`]). A detached session waits for a resume for as long as its client
//! asked (up to a day), so a table full of them would refuse every new client for that long;
//! when a bound is reached, the oldest detached session under it (the client's own, for the
//! client's bound) is ended instead, as if its time had run out — its processes killed, a
//! resume of it answered as an expired one's. Only a table whose sessions are all attached
//! refuses.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tether_engine::ProcessTableConfig;
use tether_protocol::JsonRpcError;
use tether_protocol::error::SESSION_ALREADY_ATTACHED;
use tokio::time::Instant;
use tracing::{debug, info};

use crate::auth::ClientId;
use crate::metrics::{SessionEviction, SessionRefusal};
use crate::rpc_error::invalid_request;
use crate::session::{Attachment, Session, log_tag};
use crate::transport::{ConnectionId, Outbound};

pub(crate) struct SessionRegistry {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    detached_ttl: Duration,
    process_config: ProcessTableConfig,
    /// Numbers detaches, so the oldest detached session is known ([`Attachment::Detached`]).
    next_detach: AtomicU64,
}

/// How many sessions [`SessionRegistry::create`] lets exist.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionLimits {
    /// In all (`--max-sessions`).
    pub max_sessions: usize,
    /// For one client (`--max-sessions-per-client`).
    pub max_per_client: usize,
}

/// A new session, and the detached sessions ended to make room for it.
pub(crate) struct Created {
    pub session: Arc<Session>,
    pub evicted: Vec<SessionEviction>,
}

/// A new session refused: why (for the metrics), and what the client is told.
#[derive(Debug)]
pub(crate) struct Refused {
    pub reason: SessionRefusal,
    pub error: JsonRpcError,
}

impl SessionRegistry {
    pub(crate) fn new(detached_ttl: Duration, process_config: ProcessTableConfig) -> Arc<Self> {
        Arc::new(Self {
            sessions: Mutex::new(HashMap::new()),
            detached_ttl,
            process_config,
            next_detach: AtomicU64::new(0),
        })
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What exists now, for the metrics.
    pub(crate) fn snapshot(&self) -> crate::metrics::Snapshot {
        let sessions: Vec<Arc<Session>> = self.sessions().values().cloned().collect();
        let mut snapshot = crate::metrics::Snapshot {
            sessions_attached: 0,
            sessions_detached: 0,
            processes_running: 0,
            processes_exited: 0,
            retained_output_bytes: 0,
            spilled_output_bytes: 0,
            retained_output_shed_bytes: self.process_config.output_budget.shed_bytes(),
        };
        for session in sessions {
            match &*session.attachment() {
                crate::session::Attachment::Attached { .. } => snapshot.sessions_attached += 1,
                crate::session::Attachment::Detached { .. } => snapshot.sessions_detached += 1,
            }
            for process in session.processes.list() {
                snapshot.retained_output_bytes += process.retained_bytes();
                snapshot.spilled_output_bytes += process.spilled_bytes();
                if process.has_exited() {
                    snapshot.processes_exited += 1;
                } else {
                    snapshot.processes_running += 1;
                }
            }
        }
        snapshot
    }

    /// A new session for `client`, attached to `connection`. Where a bound of `limits` is
    /// reached, the oldest detached session under it is ended to make room; where every
    /// session under it is attached, the new one is refused.
    pub(crate) fn create(
        &self,
        connection: ConnectionId,
        outbound: Outbound,
        client: ClientId,
        limits: SessionLimits,
    ) -> Result<Created, Refused> {
        let mut sessions = self.sessions();
        let mut ended = Vec::new();
        let mut evicted = Vec::new();
        let of_client = sessions.values().filter(|s| s.client == client).count();
        if of_client >= limits.max_per_client {
            let Some(oldest) = oldest_detached(&sessions, Some(&client)) else {
                return Err(Refused {
                    reason: SessionRefusal::TooManySessionsForClient,
                    error: too_many_sessions(
                        "client",
                        format!(
                            "too many sessions for this client ({client}): the limit is {} per client (--max-sessions-per-client) and each is attached to a connection; close one of this client's connections, or try again later",
                            limits.max_per_client
                        ),
                    ),
                });
            };
            ended.extend(sessions.remove(&oldest));
            evicted.push(SessionEviction::ClientFull);
        }
        // A session ended for the client's bound leaves room under the server's: this refuses
        // only when nothing was ended above.
        if sessions.len() >= limits.max_sessions {
            let Some(oldest) = oldest_detached(&sessions, None) else {
                drop(sessions);
                end_evicted(ended);
                return Err(Refused {
                    reason: SessionRefusal::TooManySessions,
                    error: too_many_sessions(
                        "server",
                        format!(
                            "too many sessions on this server: the limit is {} (--max-sessions) and each is attached to a connection; try again later, or on another executor",
                            limits.max_sessions
                        ),
                    ),
                });
            };
            ended.extend(sessions.remove(&oldest));
            evicted.push(SessionEviction::ServerFull);
        }
        let id = uuid::Uuid::new_v4().to_string();
        let ttl = self.detached_ttl;
        let session = Session::new(
            id.clone(),
            client,
            self.process_config.clone(),
            connection,
            outbound,
            ttl,
        );
        sessions.insert(id.clone(), session.clone());
        drop(sessions);
        end_evicted(ended);
        info!(session = %log_tag(&id), connection = connection.0, "session created");
        debug!(session = %log_tag(&id), session_id = %id, "session id");
        Ok(Created { session, evicted })
    }

    /// Reattaches a detached session to `connection`.
    pub(crate) fn resume(
        &self,
        id: &str,
        connection: ConnectionId,
        outbound: Outbound,
    ) -> Result<Arc<Session>, JsonRpcError> {
        let unknown = || invalid_request(format!("unknown session id {id}"));
        let mut sessions = self.sessions();
        let session = sessions.get(id).cloned().ok_or_else(unknown)?;
        let mut attachment = session.attachment();
        match &*attachment {
            Attachment::Attached { .. } => Err(JsonRpcError::new(
                SESSION_ALREADY_ATTACHED,
                format!("session {id} is already attached to another connection"),
            )),
            Attachment::Detached { expires_at, .. } if Instant::now() >= *expires_at => {
                // Expired, and its timer has not run yet: end it now.
                drop(attachment);
                sessions.remove(id);
                drop(sessions);
                session.processes.shutdown();
                Err(unknown())
            }
            Attachment::Detached { .. } => {
                *attachment = Attachment::Attached { connection, outbound };
                drop(attachment);
                info!(session = %log_tag(id), connection = connection.0, "session resumed");
                Ok(session)
            }
        }
    }

    /// The connection went away: the session keeps running for its detach TTL, then ends
    /// unless resumed.
    pub(crate) fn detach(self: &Arc<Self>, session: &Arc<Session>, connection: ConnectionId) {
        let ttl = session.detached_ttl();
        let expires_at = Instant::now() + ttl;
        {
            let mut attachment = session.attachment();
            if !matches!(&*attachment, Attachment::Attached { connection: c, .. } if *c == connection)
            {
                return;
            }
            let order = self.next_detach.fetch_add(1, Ordering::Relaxed);
            *attachment = Attachment::Detached { connection, expires_at, order };
        }
        session.forget_asks();
        // A client that leaves with nothing running has ended its work; one that leaves
        // commands running may come back for them.
        match session.processes.unfinished() {
            0 => {
                info!(session = %log_tag(&session.id), connection = connection.0, "session ended by its client, nothing running")
            }
            running => {
                info!(session = %log_tag(&session.id), connection = connection.0, running, ttl_s = ttl.as_secs_f64(), "session detached with commands running; kept for a resume")
            }
        }
        let registry = Arc::downgrade(self);
        let session_id = session.id.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(expires_at).await;
            if let Some(registry) = registry.upgrade() {
                registry.expire(&session_id, connection);
            }
        });
    }

    /// Ends a session still detached by `connection` (a resume in between makes this a no-op).
    fn expire(&self, id: &str, connection: ConnectionId) {
        let mut sessions = self.sessions();
        let Some(session) = sessions.get(id).cloned() else { return };
        let still_detached = matches!(
            &*session.attachment(),
            Attachment::Detached { connection: c, .. } if *c == connection
        );
        if still_detached {
            sessions.remove(id);
            drop(sessions);
            match session.processes.unfinished() {
                0 => debug!(session = %log_tag(id), "detached session expired"),
                running => {
                    info!(session = %log_tag(id), running, "detached session expired; its processes are killed")
                }
            }
            session.processes.shutdown();
        }
    }

    /// The sessions of `client`, `current` marked: what `session/list` answers.
    pub(crate) fn list_for(
        &self,
        client: &ClientId,
        current: &str,
    ) -> Vec<tether_protocol::session::SessionSummary> {
        let now = tokio::time::Instant::now();
        let mut listed: Vec<_> = self
            .sessions()
            .values()
            .filter(|session| &session.client == client)
            .map(|session| {
                let expires_in_ms = match &*session.attachment() {
                    Attachment::Attached { .. } => None,
                    Attachment::Detached { expires_at, .. } => {
                        Some(expires_at.saturating_duration_since(now).as_millis() as u64)
                    }
                };
                tether_protocol::session::SessionSummary {
                    session_id: session.id.clone(),
                    current: session.id == current,
                    attached: expires_in_ms.is_none(),
                    processes: session.processes.summaries().len(),
                    running: session.processes.unfinished(),
                    expires_in_ms,
                }
            })
            .collect();
        listed.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        listed
    }

    /// Ends `id`, a detached session of `client` other than `current`, as its expiry would.
    pub(crate) fn end_for(
        &self,
        client: &ClientId,
        current: &str,
        id: &str,
    ) -> Result<(), EndRefusal> {
        let mut sessions = self.sessions();
        let Some(session) = sessions.get(id).filter(|session| &session.client == client) else {
            return Err(EndRefusal::NotFound);
        };
        if id == current {
            return Err(EndRefusal::Own);
        }
        if matches!(&*session.attachment(), Attachment::Attached { .. }) {
            return Err(EndRefusal::Attached);
        }
        let session = sessions.remove(id).expect("found above");
        drop(sessions);
        info!(session = %log_tag(id), running = session.processes.unfinished(), "session ended by its client from another connection");
        session.processes.shutdown();
        Ok(())
    }

    /// Ends one session at once (a stdio connection's session cannot be resumed).
    pub(crate) fn end(&self, id: &str) {
        if let Some(session) = self.sessions().remove(id) {
            session.processes.shutdown();
        }
    }

    /// Processes started and not yet closed, in every session (what a drain waits for).
    pub(crate) fn unfinished_processes(&self) -> usize {
        self.sessions().values().map(|session| session.processes.unfinished()).sum()
    }

    /// Returns once every session has handed its clients each process event published so far
    /// (see [`Session::caught_up`]).
    pub(crate) async fn caught_up(&self) {
        let sessions: Vec<Arc<Session>> = self.sessions().values().cloned().collect();
        for session in sessions {
            session.caught_up().await;
        }
    }

    /// Ends every session: the server is shutting down.
    pub(crate) fn shutdown(&self) {
        let sessions: Vec<_> = self.sessions().drain().map(|(_, s)| s).collect();
        for session in sessions {
            session.processes.shutdown();
        }
    }
}

/// Why a `session/end` did not end a session.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum EndRefusal {
    /// No session of this client has that id (another client's is not told apart).
    NotFound,
    /// The caller's own session: closing its connection ends it.
    Own,
    /// Attached to another connection: ended there.
    Attached,
}

/// The id of the session detached longest ago, of `client` if given.
fn oldest_detached(
    sessions: &HashMap<String, Arc<Session>>,
    client: Option<&ClientId>,
) -> Option<String> {
    sessions
        .values()
        .filter(|session| client.is_none_or(|client| session.client == *client))
        .filter_map(|session| match &*session.attachment() {
            Attachment::Detached { order, .. } => Some((*order, session.id.clone())),
            Attachment::Attached { .. } => None,
        })
        .min()
        .map(|(_, id)| id)
}

/// Ends sessions taken out of the table to make room, as an expiry ends one: their processes
/// are killed. Called with the table's lock released.
fn end_evicted(sessions: Vec<Arc<Session>>) {
    for session in sessions {
        info!(session = %log_tag(&session.id), client = %session.client, "detached session ended to make room for a new one; its processes are killed");
        session.processes.shutdown();
    }
}

/// A refusal at a session bound: `-32600`, as the server's other refusals at `initialize`;
/// `data.sessionLimit` says which bound (`server` or `client`), for a client to decide on.
fn too_many_sessions(limit: &str, message: String) -> JsonRpcError {
    JsonRpcError {
        data: Some(serde_json::json!({"sessionLimit": limit})),
        ..invalid_request(message)
    }
}
