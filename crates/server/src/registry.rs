//! All sessions of a server: creating, resuming, detaching and expiring them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tether_engine::ProcessTableConfig;
use tether_protocol::JsonRpcError;
use tether_protocol::error::SESSION_ALREADY_ATTACHED;
use tokio::time::Instant;
use tracing::{debug, info};

use crate::rpc_error::invalid_request;
use crate::session::{Attachment, Session, log_tag};
use crate::transport::{ConnectionId, Outbound};

pub(crate) struct SessionRegistry {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    detached_ttl: Duration,
    process_config: ProcessTableConfig,
}

impl SessionRegistry {
    pub(crate) fn new(detached_ttl: Duration, process_config: ProcessTableConfig) -> Arc<Self> {
        Arc::new(Self { sessions: Mutex::new(HashMap::new()), detached_ttl, process_config })
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A fresh session attached to `connection`.
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

    /// A new session, unless the server already holds `max_sessions` (attached or waiting for
    /// a resume).
    pub(crate) fn create(
        &self,
        connection: ConnectionId,
        outbound: Outbound,
        max_sessions: usize,
    ) -> Result<Arc<Session>, JsonRpcError> {
        let mut sessions = self.sessions();
        if sessions.len() >= max_sessions {
            return Err(invalid_request(format!(
                "too many sessions on this server: the limit is {max_sessions} (--max-sessions), detached ones included until they expire; resume an existing session or try again later"
            )));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let ttl = self.detached_ttl;
        let session =
            Session::new(id.clone(), self.process_config.clone(), connection, outbound, ttl);
        sessions.insert(id.clone(), session.clone());
        info!(session = %log_tag(&id), connection = connection.0, "session created");
        debug!(session = %log_tag(&id), session_id = %id, "session id");
        Ok(session)
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
            *attachment = Attachment::Detached { connection, expires_at };
        }
        info!(session = %log_tag(&session.id), connection = connection.0, ttl_s = ttl.as_secs_f64(), "session detached");
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
            info!(session = %log_tag(id), "detached session expired; its processes are killed");
            session.processes.shutdown();
        }
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
