//! One logical session with an exec-server, shared by every clone of its client and by its
//! process handles: where it stands ([`ConnectionState`]), which processes it follows, and
//! calls that ride through recoveries. The tasks that keep it (the router, the recovery) and
//! the public handle ([`crate::ExecServerClient`]) sit above it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tether_engine::ProcessFailureKind;
use tether_protocol::ProcessId;
use tether_protocol::session::{EnvironmentInfo, InitializeResponse, TetherExtensions};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use crate::connection::Connection;
use crate::error::{ClientError, SessionLost};
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
    /// Given up, with why, and whether the server had said it was going away, which its
    /// processes' failures carry ([`ProcessFailureKind::SessionLost`]).
    Failed(SessionLost),
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
    url: String,
    options: ClientOptions,
    session_id: String,
    environment_info: Option<EnvironmentInfo>,
    /// What the server granted of [`ClientOptions::detached_ttl`], when it was asked for and
    /// the server knows `sessionTtl`.
    detached_ttl: Option<Duration>,
    state: watch::Sender<ConnectionState>,
    registrations: Mutex<HashMap<ProcessId, Arc<Registration>>>,
    /// Where every connection of this session reports, to its one router.
    events: mpsc::Sender<ConnectionEvent>,
    /// Which full handles pause the connection (see [`crate::flow`]).
    gate: Arc<PauseGate>,
    /// The last connection's generation: each new one is numbered past it, so a drop reported
    /// by an older one is told apart.
    generations: AtomicU64,
    /// `process/start` calls in flight; recovery waits for them to settle so it never catches
    /// up a half-registered process.
    starts_in_flight: AtomicUsize,
    starts_settled: Notify,
    /// Streamed `http/request` bodies in progress. They cannot survive their connection, so
    /// they end with it, recovery or not.
    http_streams: HttpStreams,
}

impl Session {
    /// The session `initialized` started (or resumed) over `connection`, generation 1, whose
    /// reader reports to `events` and pauses at `gate`.
    pub(crate) fn new(
        url: &str,
        options: ClientOptions,
        initialized: InitializeResponse,
        connection: Arc<Connection>,
        events: mpsc::Sender<ConnectionEvent>,
        gate: Arc<PauseGate>,
    ) -> Self {
        Self {
            url: url.to_owned(),
            options,
            session_id: initialized.session_id,
            environment_info: initialized.environment_info,
            detached_ttl: initialized.detached_ttl_secs.map(Duration::from_secs),
            state: watch::channel(ConnectionState::Connected(connection)).0,
            registrations: Mutex::new(HashMap::new()),
            events,
            gate,
            generations: AtomicU64::new(1),
            starts_in_flight: AtomicUsize::new(0),
            starts_settled: Notify::new(),
            http_streams: HttpStreams::default(),
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.session_id
    }

    pub(crate) fn options(&self) -> &ClientOptions {
        &self.options
    }

    /// What the server reported about its environment when the session started.
    pub(crate) fn environment_info(&self) -> Option<&EnvironmentInfo> {
        self.environment_info.as_ref()
    }

    /// What the server granted of [`ClientOptions::detached_ttl`].
    pub(crate) fn detached_ttl(&self) -> Option<Duration> {
        self.detached_ttl
    }

    /// Streamed `http/request` bodies, to deliver to and to start.
    pub(crate) fn http_streams(&self) -> &HttpStreams {
        &self.http_streams
    }

    pub(crate) fn register(
        &self,
        process_id: &ProcessId,
    ) -> Result<(Arc<Registration>, mpsc::UnboundedReceiver<crate::ProcessUpdate>), ClientError>
    {
        if let ConnectionState::Failed(lost) = self.current_state() {
            return Err(ClientError::Failed(lost));
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

    /// The registration that follows `process_id`, if any.
    pub(crate) fn registration(&self, process_id: &ProcessId) -> Option<Arc<Registration>> {
        self.registrations.lock().unwrap().get(process_id).cloned()
    }

    /// The processes a resumed connection catches up: those started and not finished.
    pub(crate) fn running_registrations(&self) -> Vec<Arc<Registration>> {
        let registrations = self.registrations.lock().unwrap();
        registrations.values().filter(|r| r.is_running()).cloned().collect()
    }

    pub(crate) fn current_state(&self) -> ConnectionState {
        self.state.borrow().clone()
    }

    /// Where the session stands from now on, each change as it happens.
    pub(crate) fn state_changes(&self) -> watch::Receiver<ConnectionState> {
        self.state.subscribe()
    }

    /// The connection of `generation` dropped: if it is the current one, the session is
    /// recovering from now on, and the caller recovers it (true). The check and the change are
    /// one step, so two reports of one drop start one recovery.
    pub(crate) fn begin_recovery(&self, generation: u64) -> bool {
        self.state.send_if_modified(|state| {
            let current =
                matches!(state, ConnectionState::Connected(c) if c.generation == generation);
            if current {
                *state = ConnectionState::Recovering;
            }
            current
        })
    }

    /// `connection` is the current one from now on.
    pub(crate) fn set_connected(&self, connection: Arc<Connection>) {
        self.state.send_replace(ConnectionState::Connected(connection));
    }

    /// Gives the session up with `message`: calls fail from now on. Returns every
    /// registration, each to be failed, none followed any more.
    pub(crate) fn fail(&self, message: String, server_went_away: bool) -> Vec<Arc<Registration>> {
        self.state.send_replace(ConnectionState::Failed(SessionLost {
            reason: message,
            server_went_away,
        }));
        self.registrations.lock().unwrap().drain().map(|(_, r)| r).collect()
    }

    /// A new connection to the session's server, numbered past every earlier one, reporting
    /// to the session's router; not read under the pause gate until it is installed
    /// (`Connection::apply_gate`). Not initialized yet.
    pub(crate) async fn open_connection(
        &self,
        token: Option<&str>,
    ) -> Result<Arc<Connection>, ClientError> {
        self.open_connection_reporting_to(self.events.clone(), token).await
    }

    async fn open_connection_reporting_to(
        &self,
        events: mpsc::Sender<ConnectionEvent>,
        token: Option<&str>,
    ) -> Result<Arc<Connection>, ClientError> {
        let generation = self.generations.fetch_add(1, Ordering::AcqRel) + 1;
        let gate = self.gate.clone();
        Connection::open(&self.url, generation, &self.options, token, events, gate, false).await
    }

    /// A connection as [`Self::open_connection`] makes, whose drop nobody hears of: for a test
    /// of what happens when a drop was reported before its connection was current.
    #[cfg(test)]
    pub(crate) async fn open_unreported_connection(
        &self,
        token: Option<&str>,
    ) -> Result<Arc<Connection>, ClientError> {
        let (unheard, _) = mpsc::channel(1);
        self.open_connection_reporting_to(unheard, token).await
    }

    /// Reports `event` to the router as a connection would: for tests of what the router does
    /// with events no server sends on demand.
    #[cfg(test)]
    pub(crate) async fn report(&self, event: ConnectionEvent) {
        self.events.send(event).await.unwrap();
    }

    /// A start's request is about to go out: until [`Self::start_settled`], recovery waits
    /// for it.
    pub(crate) fn start_sending(&self) {
        self.starts_in_flight.fetch_add(1, Ordering::AcqRel);
    }

    /// A start whose request went out has its outcome, and it was acted on.
    pub(crate) fn start_settled(&self) {
        if self.starts_in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.starts_settled.notify_waiters();
        }
    }

    /// Waits until no start is in flight, or until `deadline`.
    pub(crate) async fn starts_settled_by(&self, deadline: Instant) {
        while self.starts_in_flight.load(Ordering::Acquire) > 0 {
            let settled = self.starts_settled.notified();
            if self.starts_in_flight.load(Ordering::Acquire) == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, settled).await.is_err() {
                break;
            }
        }
    }

    /// What a process fails with for a session that is lost: whether the server had said it
    /// was going away is the recovery's to know, and the process's failure carries it.
    pub(crate) fn lost_kind(&self) -> ProcessFailureKind {
        let server_went_away = matches!(
            &*self.state.borrow(),
            ConnectionState::Failed(SessionLost { server_went_away: true, .. })
        );
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
                ConnectionState::Failed(lost) => return Err(ClientError::Failed(lost.clone())),
                _ => {}
            }
            if state.changed().await.is_err() {
                return Err(ClientError::Failed(SessionLost::here("client shut down")));
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
