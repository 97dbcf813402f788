//! One logical session with an exec-server, shared by every clone of its client and by its
//! process handles: where it stands ([`ConnectionState`]), which processes it follows, and
//! calls that ride through recoveries. The tasks that keep it (the router, the recovery) and
//! the public handle ([`crate::ExecServerClient`]) sit above it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tether_engine::ProcessFailureKind;
use tether_protocol::ProcessId;
use tether_protocol::session::{EnvironmentInfo, TetherExtensions};
use tokio::sync::{Notify, mpsc, watch};

use crate::connection::Connection;
use crate::error::ClientError;
use crate::flow::PauseGate;
use crate::http_streams::HttpStreams;
use crate::options::ClientOptions;
use crate::reader::ConnectionEvent;
use crate::registration::{Finished, Registration};

/// Where the client's session stands.
#[derive(Clone)]
pub(crate) enum ConnectionState {
    Connected(Arc<Connection>),
    Recovering,
    /// Given up, with why; `server_went_away`: the server had said it was going away, which
    /// its processes' failures carry ([`ProcessFailureKind::SessionLost`]).
    Failed {
        message: String,
        server_went_away: bool,
    },
}

/// Whether a call may be sent again after its connection dropped mid-flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Reading, or idempotent on the server (a write with the same `writeId`, a terminate).
    Safe,
    /// It may have taken effect; the caller decides.
    Never,
}

/// The session itself.
pub(crate) struct Session {
    pub(crate) url: String,
    pub(crate) options: ClientOptions,
    pub(crate) session_id: String,
    pub(crate) environment_info: Option<EnvironmentInfo>,
    /// What the server granted of [`ClientOptions::detached_ttl`], when it was asked for and
    /// the server knows `sessionTtl`.
    pub(crate) detached_ttl: Option<Duration>,
    pub(crate) state: watch::Sender<ConnectionState>,
    pub(crate) registrations: Mutex<HashMap<ProcessId, Arc<Registration>>>,
    pub(crate) events: mpsc::Sender<ConnectionEvent>,
    /// Which full handles pause the connection (see [`crate::flow`]).
    pub(crate) gate: Arc<PauseGate>,
    pub(crate) generations: AtomicU64,
    /// `process/start` calls in flight; recovery waits for them to settle so it never catches
    /// up a half-registered process.
    pub(crate) starts_in_flight: AtomicUsize,
    pub(crate) starts_settled: Notify,
    /// Streamed `http/request` bodies in progress. They cannot survive their connection, so
    /// they end with it, recovery or not.
    pub(crate) http_streams: HttpStreams,
}

impl Session {
    pub(crate) fn register(
        &self,
        process_id: &ProcessId,
    ) -> Result<(Arc<Registration>, mpsc::UnboundedReceiver<crate::ProcessUpdate>), ClientError>
    {
        if let ConnectionState::Failed { message, .. } = self.current_state() {
            return Err(ClientError::Failed(message));
        }
        let mut registrations = self.registrations.lock().unwrap();
        // A process that closed is done: its registration is on its way out and no longer holds
        // the id. A failed one may still be being terminated (an ambiguous start), so it does.
        if registrations.get(process_id).is_some_and(|r| r.finished() != Some(Finished::Closed)) {
            return Err(ClientError::Protocol(format!(
                "a handle for process {process_id} is already open in this client"
            )));
        }
        // A pause of zero: a full handle falls behind at once, pausing nothing.
        let gate = match self.options.full_handle_pause {
            Some(pause) if pause.is_zero() => None,
            _ => Some(self.gate.clone()),
        };
        let (registration, updates) = Registration::new(process_id.clone(), gate);
        let registration = Arc::new(registration);
        registrations.insert(process_id.clone(), registration.clone());
        Ok((registration, updates))
    }

    /// Forgets a registration, if it is still the one registered under its id.
    pub(crate) fn unregister(&self, registration: &Arc<Registration>) {
        let mut registrations = self.registrations.lock().unwrap();
        if registrations.get(&registration.process_id).is_some_and(|r| Arc::ptr_eq(r, registration))
        {
            registrations.remove(&registration.process_id);
        }
    }

    pub(crate) fn current_state(&self) -> ConnectionState {
        self.state.borrow().clone()
    }

    /// What a process fails with for a session that is lost: whether the server had said it
    /// was going away is the recovery's to know, and the process's failure carries it.
    pub(crate) fn lost_kind(&self) -> ProcessFailureKind {
        let server_went_away =
            matches!(&*self.state.borrow(), ConnectionState::Failed { server_went_away: true, .. });
        ProcessFailureKind::SessionLost { server_went_away }
    }

    /// The current connection, waiting through a recovery.
    pub(crate) async fn connected(&self) -> Result<Arc<Connection>, ClientError> {
        let mut state = self.state.subscribe();
        loop {
            match &*state.borrow_and_update() {
                ConnectionState::Connected(connection) if !connection.is_closed() => {
                    return Ok(connection.clone());
                }
                ConnectionState::Failed { message, .. } => {
                    return Err(ClientError::Failed(message.clone()));
                }
                _ => {}
            }
            if state.changed().await.is_err() {
                return Err(ClientError::Failed("client shut down".into()));
            }
        }
    }

    /// A call that rides through recoveries as `retry` allows.
    pub(crate) async fn call<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
        retry: Retry,
    ) -> Result<R, ClientError> {
        self.retrying(
            method,
            retry,
            |connection| async move { connection.call(method, params).await },
        )
        .await
    }

    /// A call whose answer comes with attached bytes (`binaryBlocks`, `attachedHttpBodies`),
    /// riding through recoveries as `retry` allows.
    pub(crate) async fn call_for_attached<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
        retry: Retry,
    ) -> Result<(R, bytes::Bytes), ClientError> {
        self.retrying(method, retry, |connection| async move {
            connection.call_for_attached(method, params).await
        })
        .await
    }

    /// Makes `attempt` on the current connection; after a drop, again on the next one if
    /// `retry` is [`Retry::Safe`], otherwise fails saying the call may have taken effect.
    async fn retrying<T, Attempt: Future<Output = Result<T, ClientError>>>(
        &self,
        method: &str,
        retry: Retry,
        attempt: impl Fn(Arc<Connection>) -> Attempt,
    ) -> Result<T, ClientError> {
        loop {
            let connection = self.connected().await?;
            match attempt(connection).await {
                Err(ClientError::Disconnected(_)) if retry == Retry::Safe => {
                    // Let the connection's tasks run and report the drop before trying again.
                    tokio::task::yield_now().await;
                    continue;
                }
                Err(ClientError::Disconnected(end)) => {
                    let end =
                        end.context(format_args!("`{method}` may or may not have taken effect"));
                    return Err(ClientError::Disconnected(end));
                }
                other => return other,
            }
        }
    }

    /// Drops the current connection as if the network had.
    pub(crate) fn disconnect(&self) {
        if let ConnectionState::Connected(connection) = &*self.state.borrow() {
            connection.close();
        }
    }

    /// The Tether extensions the server serves; none (all flags off) for the reference.
    pub(crate) fn tether_extensions(&self) -> TetherExtensions {
        self.environment_info
            .as_ref()
            .and_then(|info| info.capabilities.as_ref())
            .and_then(|capabilities| capabilities.tether_extensions.clone())
            .unwrap_or_default()
    }
}
