//! [`ExecServerClient`]: one logical session with an exec-server, over as many connections as
//! it takes.
//!
//! The client is a state machine ([`ConnectionState`]):
//!
//! - `Connected`: calls go over the current connection; process events are published in order.
//! - `Recovering`: the connection dropped. New calls wait; process handles stay open. The client
//!   reconnects to the same URL and resumes the session (`initialize {resumeSessionId}`,
//!   retrying while the server still holds the old connection: `-32010`), catches every process
//!   up with a `process/read` from the last sequence it published, and only then installs the
//!   new connection. A process whose missing output the server no longer holds fails alone.
//! - `Failed`: recovery ran out of time (or the session is gone). Every waiting and later call
//!   gets the same error, and every process handle a terminal failure: nothing waits forever.
//!
//! A drop is only acted on if it came from the current connection: a late "closed" from an
//! older generation changes nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tether_engine::ProcessEvent;
use tether_protocol::error::{SESSION_ALREADY_ATTACHED, TRANSPORT_CLOSED};
use tether_protocol::method::{
    HTTP_REQUEST_BODY_DELTA, INITIALIZED, PROCESS_CLOSED, PROCESS_EXITED, PROCESS_OUTPUT,
};
use tether_protocol::process::{
    ExecParams, ExecResponse, ListResponse, ProcessClosedNotification, ProcessExitedNotification,
    ProcessOutputNotification, ProcessSummary, ReadParams, ReadResponse,
};
use tether_protocol::session::{
    EnvironmentInfo, InitializeParams, InitializeResponse, TetherExtensions,
};
use tether_protocol::{Notification, ProcessId};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::catch_up::{CatchUp, catch_up, lose, refill, run_claimed};
use crate::connection::{Connection, ConnectionEvent};
use crate::error::{ClientError, ConnectError, ConnectErrorKind};
use crate::flow::{CONNECTION_EVENT_QUEUE, DEFAULT_FULL_HANDLE_PAUSE, PauseGate};
use crate::process::RemoteProcess;
use crate::registration::{Finished, Registration};
use crate::remote_http::HttpStreams;

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
    /// For `wss://`: trust only this CA (PEM) instead of the system's roots — for a server
    /// whose certificate a private CA signed, or a self-signed one pinned.
    pub tls_ca_file: Option<std::path::PathBuf>,
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
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            client_name: "tether".into(),
            bearer_token: None,
            tls_ca_file: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            initialize_timeout: DEFAULT_INITIALIZE_TIMEOUT,
            recovery_timeout: DEFAULT_RECOVERY_TIMEOUT,
            recovery_retry_interval: DEFAULT_RECOVERY_RETRY_INTERVAL,
            max_message_bytes: crate::connection::MAX_INCOMING_MESSAGE_BYTES,
            keepalive_interval: Some(DEFAULT_KEEPALIVE_INTERVAL),
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            full_handle_pause: Some(DEFAULT_FULL_HANDLE_PAUSE),
        }
    }
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("client_name", &self.client_name)
            .field("has_bearer_token", &self.bearer_token.is_some())
            .field("tls_ca_file", &self.tls_ca_file)
            .field("connect_timeout", &self.connect_timeout)
            .field("initialize_timeout", &self.initialize_timeout)
            .field("recovery_timeout", &self.recovery_timeout)
            .field("recovery_retry_interval", &self.recovery_retry_interval)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("keepalive_timeout", &self.keepalive_timeout)
            .field("full_handle_pause", &self.full_handle_pause)
            .finish()
    }
}

/// Where the client's session stands.
#[derive(Clone)]
pub(crate) enum ConnectionState {
    Connected(Arc<Connection>),
    Recovering,
    Failed(String),
}

/// Where the client's session stands, as a caller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionStatus {
    Connected,
    /// The connection dropped; the client is resuming the session. Calls wait.
    Recovering,
    /// The session is lost, for the reason given. Calls fail.
    Failed(String),
}

/// Whether a call may be sent again after its connection dropped mid-flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Reading, or idempotent on the server (a write with the same `writeId`, a terminate).
    Safe,
    /// It may have taken effect; the caller decides.
    Never,
}

/// A handle to one exec-server session. Cheap to clone; every clone is the same session.
#[derive(Clone)]
pub struct ExecServerClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    url: String,
    options: ClientOptions,
    session_id: String,
    environment_info: Option<EnvironmentInfo>,
    state: watch::Sender<ConnectionState>,
    registrations: Mutex<HashMap<ProcessId, Arc<Registration>>>,
    events: mpsc::Sender<ConnectionEvent>,
    /// Which full handles pause the connection (see [`crate::flow`]).
    gate: Arc<PauseGate>,
    generations: AtomicU64,
    /// `process/start` calls in flight; recovery waits for them to settle so it never catches
    /// up a half-registered process.
    starts_in_flight: AtomicUsize,
    starts_settled: Notify,
    /// Streamed `http/request` bodies in progress. They cannot survive their connection, so
    /// they end with it, recovery or not.
    pub(crate) http_streams: HttpStreams,
    /// Set when the session was lost after the server said it was going away.
    server_went_away: AtomicBool,
}

impl ExecServerClient {
    /// Connects to `url` (`ws://…`) and starts a new session.
    pub async fn connect(url: &str, options: ClientOptions) -> Result<Self, ClientError> {
        Self::open(url, options, None).await
    }

    /// Reattaches to an existing session — one this program started before it restarted, say.
    /// The server refuses (`-32010`) while another connection still holds the session.
    pub async fn resume(
        url: &str,
        session_id: &str,
        options: ClientOptions,
    ) -> Result<Self, ClientError> {
        Self::open(url, options, Some(session_id)).await
    }

    async fn open(
        url: &str,
        options: ClientOptions,
        resume: Option<&str>,
    ) -> Result<Self, ClientError> {
        let (events, receiver) = mpsc::channel(CONNECTION_EVENT_QUEUE);
        let gate = Arc::new(PauseGate::new(options.full_handle_pause));
        let connection =
            Connection::open(url, 1, &options, events.clone(), gate.clone(), true).await?;
        let response = initialize(&connection, &options, resume).await?;
        let inner = Arc::new(Inner {
            url: url.to_owned(),
            session_id: response.session_id,
            environment_info: response.environment_info,
            state: watch::channel(ConnectionState::Connected(connection)).0,
            options,
            registrations: Mutex::new(HashMap::new()),
            events,
            gate,
            generations: AtomicU64::new(1),
            starts_in_flight: AtomicUsize::new(0),
            starts_settled: Notify::new(),
            http_streams: HttpStreams::default(),
            server_went_away: AtomicBool::new(false),
        });
        let router = tokio::spawn(route_events(Arc::downgrade(&inner), receiver));
        tokio::spawn(supervise_router(Arc::downgrade(&inner), router));
        // The session id is enough to take a detached session over: not above DEBUG.
        debug!(session_id = %inner.session_id, "exec-server session started");
        info!("exec-server session started");
        Ok(Self { inner })
    }

    pub fn session_id(&self) -> &str {
        &self.inner.session_id
    }

    /// What the server reported about its environment when the session started.
    pub fn environment_info(&self) -> Option<&EnvironmentInfo> {
        self.inner.environment_info.as_ref()
    }

    /// The Tether extensions the server serves; none (all flags off) for the reference.
    pub fn tether_extensions(&self) -> TetherExtensions {
        self.environment_info()
            .and_then(|info| info.capabilities.as_ref())
            .and_then(|capabilities| capabilities.tether_extensions.clone())
            .unwrap_or_default()
    }

    /// Where the session stands now.
    pub fn status(&self) -> ConnectionStatus {
        match &*self.inner.state.borrow() {
            ConnectionState::Connected(_) => ConnectionStatus::Connected,
            ConnectionState::Recovering => ConnectionStatus::Recovering,
            ConnectionState::Failed(message) => ConnectionStatus::Failed(message.clone()),
        }
    }

    /// Whether the session was lost because the server said it was going away (it stopped, or
    /// a proxy in front of it did) and did not come back within [`GOING_AWAY_RECOVERY`]. A
    /// stopping server ends its sessions' processes.
    pub fn server_went_away(&self) -> bool {
        self.inner.server_went_away.load(Ordering::Acquire)
    }

    /// Waits until the session is connected (through a recovery), or fails with why it is lost.
    pub async fn wait_connected(&self) -> Result<(), ClientError> {
        self.connected().await.map(|_| ())
    }

    /// Drops the current connection as if the network had (for tests and for "reconnect now").
    pub fn disconnect(&self) {
        if let ConnectionState::Connected(connection) = &*self.inner.state.borrow() {
            connection.close();
        }
    }

    /// Starts a process and returns its handle. If the connection drops before the server
    /// answers, the start is ambiguous: the call fails, and the process — if it did start — is
    /// terminated once the session is back, never silently adopted. The same happens if the
    /// caller stops waiting (drops this future) once the request may have been sent.
    pub async fn start(&self, params: ExecParams) -> Result<RemoteProcess, ClientError> {
        let process_id = params.process_id.clone();
        let (registration, updates) = self.register(&process_id)?;
        let mut start = PendingStart::new(self, registration.clone());
        let connection = self.connected().await?;
        start.sending();
        match connection.call::<_, ExecResponse>("process/start", &params).await {
            Ok(_) => {
                registration.mark_started();
                start.settle();
                Ok(RemoteProcess::new(self.clone(), registration, updates))
            }
            Err(ClientError::Disconnected(end)) => {
                let end = end.context(format_args!(
                    "process/start for {process_id} may or may not have run; it is being terminated"
                ));
                start.abandon(end.to_string());
                Err(ClientError::Disconnected(end))
            }
            Err(error) => {
                self.unregister(&registration);
                start.settle();
                Err(error)
            }
        }
    }

    /// The session's processes (`process/list`, a Tether extension: check
    /// `tetherExtensions.processList`; the reference answers `-32601`).
    pub async fn list_processes(&self) -> Result<Vec<ProcessSummary>, ClientError> {
        let list: ListResponse = self.call("process/list", &json!({}), Retry::Safe).await?;
        Ok(list.processes)
    }

    /// Chosen keys of the executor's own Codex configuration (`environmentConfig/read`), for
    /// servers that advertise `environmentConfigRead`. Read-only, so retried across a drop.
    pub async fn read_environment_config(
        &self,
        params: &tether_protocol::environment_config::EnvironmentConfigReadParams,
    ) -> Result<tether_protocol::environment_config::EnvironmentConfigReadResponse, ClientError>
    {
        self.call("environmentConfig/read", params, Retry::Safe).await
    }

    /// The skills and plugins installed on the executor (`capabilities/discoverV2`), for servers
    /// that advertise `capabilityDiscoveryV2`. Read-only, so retried across a drop.
    pub async fn discover_capabilities(
        &self,
        params: &tether_protocol::capabilities::DiscoverV2Params,
    ) -> Result<tether_protocol::capabilities::DiscoverV2Response, ClientError> {
        self.call("capabilities/discoverV2", params, Retry::Safe).await
    }

    /// The capability files under each of `params.roots` (`capabilityRoots/discoverV1`).
    /// Read-only, so retried across a drop.
    pub async fn discover_capability_roots(
        &self,
        params: &tether_protocol::capabilities::DiscoverRootsParams,
    ) -> Result<tether_protocol::capabilities::DiscoverRootsResponse, ClientError> {
        self.call("capabilityRoots/discoverV1", params, Retry::Safe).await
    }

    /// Follows a process already running (or finished) in this session, from the oldest output
    /// the server still holds. Also says whether earlier output was no longer retained.
    pub async fn attach(
        &self,
        process_id: impl Into<ProcessId>,
    ) -> Result<(RemoteProcess, bool), ClientError> {
        let process_id = process_id.into();
        let (registration, updates) = self.register(&process_id)?;
        registration.mark_started();
        // Live events arriving before the backlog is read wait for it.
        registration.begin_catch_up();
        registration.claim_catch_up();
        // Where the retained output starts: the first chunk the server still holds.
        let first = ReadParams {
            process_id: process_id.clone(),
            after_seq: Some(0),
            max_bytes: Some(1),
            wait_ms: Some(0),
        };
        let first: ReadResponse = match self.call("process/read", &first, Retry::Safe).await {
            Ok(read) => read,
            Err(error) => {
                self.unregister(&registration);
                return Err(error);
            }
        };
        let oldest = first.chunks.first().map_or(1, |chunk| chunk.seq);
        if oldest > 1 {
            registration.skip_to(oldest - 1);
        }
        if let Err(error) = run_claimed(self, &registration).await {
            self.unregister(&registration);
            return Err(ClientError::Protocol(format!(
                "cannot follow process {process_id}: {error}"
            )));
        }
        Ok((RemoteProcess::new(self.clone(), registration, updates), oldest > 1))
    }

    fn register(
        &self,
        process_id: &ProcessId,
    ) -> Result<(Arc<Registration>, mpsc::UnboundedReceiver<crate::ProcessUpdate>), ClientError>
    {
        if let ConnectionState::Failed(message) = self.current_state() {
            return Err(ClientError::Failed(message));
        }
        let mut registrations = self.inner.registrations.lock().unwrap();
        // A process that closed is done: its registration is on its way out and no longer holds
        // the id. A failed one may still be being terminated (an ambiguous start), so it does.
        if registrations.get(process_id).is_some_and(|r| r.finished() != Some(Finished::Closed)) {
            return Err(ClientError::Protocol(format!(
                "a handle for process {process_id} is already open in this client"
            )));
        }
        // A pause of zero: a full handle falls behind at once, pausing nothing.
        let gate = match self.inner.options.full_handle_pause {
            Some(pause) if pause.is_zero() => None,
            _ => Some(self.inner.gate.clone()),
        };
        let (registration, updates) = Registration::new(process_id.clone(), gate);
        let registration = Arc::new(registration);
        registrations.insert(process_id.clone(), registration.clone());
        Ok((registration, updates))
    }

    /// Forgets a registration, if it is still the one registered under its id.
    pub(crate) fn unregister(&self, registration: &Arc<Registration>) {
        let mut registrations = self.inner.registrations.lock().unwrap();
        if registrations.get(&registration.process_id).is_some_and(|r| Arc::ptr_eq(r, registration))
        {
            registrations.remove(&registration.process_id);
        }
    }

    fn current_state(&self) -> ConnectionState {
        self.inner.state.borrow().clone()
    }

    /// The current connection, waiting through a recovery.
    pub(crate) async fn connected(&self) -> Result<Arc<Connection>, ClientError> {
        let mut state = self.inner.state.subscribe();
        loop {
            match &*state.borrow_and_update() {
                ConnectionState::Connected(connection) if !connection.is_closed() => {
                    return Ok(connection.clone());
                }
                ConnectionState::Failed(message) => {
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
        loop {
            let connection = self.connected().await?;
            match connection.call(method, params).await {
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
}

/// A `process/start` whose outcome is not known yet.
///
/// While its request may be on a connection, it counts as in flight: recovery waits for it to
/// settle, so a start that succeeded is caught up like any other process. A start still waiting
/// for a connection does not count — it waits for the recovery, not the other way round.
///
/// Dropped unsettled (the caller stopped waiting), it cleans up as an ambiguous start does.
struct PendingStart<'a> {
    client: &'a ExecServerClient,
    registration: Arc<Registration>,
    stage: StartStage,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum StartStage {
    /// Waiting for a connection: nothing was sent.
    Waiting,
    /// The request may have reached the server.
    InFlight,
    Settled,
}

impl<'a> PendingStart<'a> {
    fn new(client: &'a ExecServerClient, registration: Arc<Registration>) -> Self {
        Self { client, registration, stage: StartStage::Waiting }
    }

    /// The request is about to go out.
    fn sending(&mut self) {
        self.client.inner.starts_in_flight.fetch_add(1, Ordering::AcqRel);
        self.stage = StartStage::InFlight;
    }

    /// The outcome is known and acted on.
    fn settle(&mut self) {
        if self.stage == StartStage::InFlight {
            let inner = &self.client.inner;
            if inner.starts_in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
                inner.starts_settled.notify_waiters();
            }
        }
        self.stage = StartStage::Settled;
    }

    /// The process may be running and nobody will follow it: fail the registration, terminate
    /// whatever runs under its id (waiting through a recovery), then release the id.
    fn abandon(&mut self, message: String) {
        self.registration.fail(message);
        let client = self.client.clone();
        let registration = self.registration.clone();
        let terminate = async move {
            let params = json!({"processId": registration.process_id});
            // Idempotent, so it rides through recoveries; it fails only with the session.
            let _ = client
                .call::<_, serde_json::Value>("process/terminate", &params, Retry::Safe)
                .await;
            client.unregister(&registration);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(terminate)),
            // No runtime left to ask the server with: the session ends with it anyway.
            Err(_) => self.client.unregister(&self.registration),
        }
        self.settle();
    }
}

impl Drop for PendingStart<'_> {
    fn drop(&mut self) {
        match self.stage {
            StartStage::Waiting => self.client.unregister(&self.registration),
            StartStage::InFlight => {
                let message = format!(
                    "the caller stopped waiting for process/start for {}; it is being terminated",
                    self.registration.process_id
                );
                self.abandon(message);
            }
            StartStage::Settled => {}
        }
    }
}

async fn initialize(
    connection: &Connection,
    options: &ClientOptions,
    resume: Option<&str>,
) -> Result<InitializeResponse, ClientError> {
    let params = InitializeParams {
        client_name: options.client_name.clone(),
        resume_session_id: resume.map(String::from),
    };
    let call = connection.call::<_, InitializeResponse>("initialize", &params);
    let response =
        tokio::time::timeout(options.initialize_timeout, call).await.map_err(|_| {
            ClientError::Connect(ConnectError::new(
                ConnectErrorKind::Timeout,
                "the server did not answer `initialize` in time",
            ))
        })??;
    if let Some(expected) = resume
        && response.session_id != expected
    {
        return Err(ClientError::Protocol(format!(
            "exec-server initialized an unexpected session {}",
            response.session_id
        )));
    }
    connection.notify(INITIALIZED, &json!({}))?;
    Ok(response)
}

/// Routes what connections report: process notifications to their registrations, drops of the
/// current connection to recovery. Notifications are consumed as they come, so a resume never
/// stalls on notifications the server sends before its `initialize` answer.
async fn route_events(inner: Weak<Inner>, mut events: mpsc::Receiver<ConnectionEvent>) {
    while let Some(event) = events.recv().await {
        let Some(inner) = inner.upgrade() else { return };
        match event {
            ConnectionEvent::Output(n) => route_event(
                &inner,
                ProcessEvent::Output {
                    process_id: n.process_id,
                    seq: n.seq,
                    stream: n.stream,
                    chunk: n.chunk.0,
                },
            ),
            ConnectionEvent::Notification(notification) => route_notification(&inner, notification),
            ConnectionEvent::Closed { generation, reason, going_away } => {
                inner.http_streams.connection_closed(generation, &reason);
                connection_lost(&inner, generation, reason, going_away);
            }
        }
    }
}

/// Watches the router: if it ever stops while the client lives (a bug that panicked it), no
/// event would reach any handle again, so the session fails, and every handle with it, with
/// the reason, instead of leaving them all waiting.
async fn supervise_router(inner: Weak<Inner>, router: tokio::task::JoinHandle<()>) {
    let outcome = router.await;
    let Some(inner) = inner.upgrade() else { return };
    let reason = match outcome {
        Err(error) if error.is_panic() => "the client's event router panicked",
        _ => "the client's event router stopped",
    };
    give_up(&inner, format!("{reason}; connect again"));
}

/// Starts a recovery if `generation` is the current connection's; a drop reported for any other
/// connection (an older one, or a resume attempt not installed yet) changes nothing. The check
/// and the change are one step, so two reports of one drop start one recovery.
fn connection_lost(inner: &Arc<Inner>, generation: u64, reason: String, going_away: bool) {
    let current = inner.state.send_if_modified(|state| {
        let current = matches!(state, ConnectionState::Connected(c) if c.generation == generation);
        if current {
            *state = ConnectionState::Recovering;
        }
        current
    });
    if current {
        warn!(generation, %reason, "exec-server connection lost; recovering the session");
        tokio::spawn(recover(inner.clone(), reason, going_away));
    }
}

/// Makes a resumed connection the current one. Its drop may already have been reported — and
/// ignored, as it was not current yet — so a connection that is closed by now goes straight
/// back to recovery instead of leaving every call waiting on a dead connection.
fn install(inner: &Arc<Inner>, connection: Arc<Connection>) {
    let generation = connection.generation;
    connection.apply_gate();
    inner.state.send_replace(ConnectionState::Connected(connection.clone()));
    if connection.is_closed() {
        connection_lost(inner, generation, "the connection closed as it was resumed".into(), false);
    }
}

fn route_notification(inner: &Arc<Inner>, notification: Notification) {
    let params = notification.params.unwrap_or_default();
    if notification.method == HTTP_REQUEST_BODY_DELTA {
        if let Err(violation) = inner.http_streams.deliver(params) {
            warn!(%violation, "exec-server broke the protocol; dropping the connection to recover");
            ExecServerClient { inner: inner.clone() }.disconnect();
        }
        return;
    }
    let event = match notification.method.as_str() {
        PROCESS_OUTPUT => serde_json::from_value::<ProcessOutputNotification>(params).map(|n| {
            ProcessEvent::Output {
                process_id: n.process_id,
                seq: n.seq,
                stream: n.stream,
                chunk: n.chunk.0,
            }
        }),
        PROCESS_EXITED => serde_json::from_value::<ProcessExitedNotification>(params).map(|n| {
            ProcessEvent::Exited {
                process_id: n.process_id,
                seq: n.seq,
                exit_code: n.exit_code,
                sandbox_denied: n.sandbox_denied,
            }
        }),
        PROCESS_CLOSED => serde_json::from_value::<ProcessClosedNotification>(params)
            .map(|n| ProcessEvent::Closed { process_id: n.process_id, seq: n.seq }),
        other => {
            debug!(method = other, "notification not handled by this client");
            return;
        }
    };
    let Ok(event) = event else {
        warn!(method = %notification.method, "malformed notification ignored");
        return;
    };
    route_event(inner, event);
}

/// Hands a process's event to its handle, if one follows it.
fn route_event(inner: &Arc<Inner>, event: ProcessEvent) {
    let registration = inner.registrations.lock().unwrap().get(event.process_id()).cloned();
    if let Some(registration) = registration {
        registration.push(event);
        if registration.finished().is_some() {
            ExecServerClient { inner: inner.clone() }.unregister(&registration);
        }
    }
}

async fn recover(inner: Arc<Inner>, reason: String, going_away: bool) {
    let started = Instant::now();
    let patience = match going_away {
        true => inner.options.recovery_timeout.min(GOING_AWAY_RECOVERY),
        false => inner.options.recovery_timeout,
    };
    let deadline = started + patience;
    // Starts in flight settle first (their connection is gone, so they fail fast).
    while inner.starts_in_flight.load(Ordering::Acquire) > 0 {
        let settled = inner.starts_settled.notified();
        if inner.starts_in_flight.load(Ordering::Acquire) == 0 {
            break;
        }
        if tokio::time::timeout_at(deadline, settled).await.is_err() {
            break;
        }
    }
    let mut last_error = reason.clone();
    loop {
        if Instant::now() >= deadline {
            let message = format!(
                "{reason}; failed to resume exec-server session {}: {last_error}; gave up after {patience:?}",
                inner.session_id
            );
            inner.server_went_away.store(going_away, Ordering::Release);
            return give_up(&inner, message);
        }
        // The deadline bounds an attempt too: one that hangs (a network that swallows packets
        // after the connect, a catch-up read never answered) must not outlive it.
        let Ok(attempt) = tokio::time::timeout_at(deadline, resume(&inner)).await else {
            last_error = "the last attempt was still unanswered".into();
            continue;
        };
        match attempt {
            Ok(connection) => {
                info!(
                    generation = connection.generation,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "exec-server session resumed"
                );
                install(&inner, connection);
                return;
            }
            Err(error) if is_retryable(&error) => {
                debug!(%error, "resume attempt failed; retrying");
                last_error = error.to_string();
                tokio::time::sleep(inner.options.recovery_retry_interval).await;
            }
            Err(error) => {
                let message = format!(
                    "{reason}; failed to resume exec-server session {}: {error}",
                    inner.session_id
                );
                inner.server_went_away.store(going_away, Ordering::Release);
                return give_up(&inner, message);
            }
        }
    }
}

/// One resume attempt: reconnect, reattach, catch every process up.
async fn resume(inner: &Arc<Inner>) -> Result<Arc<Connection>, ClientError> {
    let registrations: Vec<Arc<Registration>> =
        inner.registrations.lock().unwrap().values().filter(|r| r.is_started()).cloned().collect();
    // Live events from the new connection can arrive before the catch-up reads are answered.
    for registration in &registrations {
        registration.begin_catch_up();
    }
    let generation = inner.generations.fetch_add(1, Ordering::AcqRel) + 1;
    let events = inner.events.clone();
    let connection =
        Connection::open(&inner.url, generation, &inner.options, events, inner.gate.clone(), false)
            .await?;
    initialize(&connection, &inner.options, Some(&inner.session_id)).await?;
    let client = ExecServerClient { inner: inner.clone() };
    // A process whose catch-up another task runs (a handle that fell behind) is left to it: it
    // reads on over this connection once it is installed.
    let claimed: Vec<_> = registrations.iter().filter(|r| r.claim_catch_up()).collect();
    let catch_ups = claimed.iter().map(|registration| catch_up(&connection, registration));
    let outcomes = futures_util::future::join_all(catch_ups).await;
    let mut transport_error = None;
    for (registration, outcome) in claimed.into_iter().zip(outcomes) {
        match outcome {
            // A transport problem ends this attempt; the next reads on from what was published.
            Err(error) => {
                registration.release_catch_up();
                transport_error = Some(error);
            }
            Ok(CatchUp::Lost(error)) => {
                registration.release_catch_up();
                let message =
                    format!("failed to recover process {}: {error}", registration.process_id);
                lose(&client, registration, message);
            }
            // Caught up, or waiting for its caller to make room: the handle resumes it then,
            // unless it has room already.
            Ok(CatchUp::Done | CatchUp::HandleFull) => {
                if registration.end_catch_up() {
                    tokio::spawn(refill(client.clone(), registration.clone()));
                }
            }
        }
        if registration.finished().is_some() {
            client.unregister(registration);
        }
    }
    match transport_error {
        Some(error) => Err(error),
        None => Ok(connection),
    }
}

fn is_retryable(error: &ClientError) -> bool {
    match error {
        ClientError::Connect(_) | ClientError::Disconnected(_) => true,
        // The old connection is still attached (the server has not noticed the drop yet), or
        // a server said its transport closed (the code clients treat as a drop).
        ClientError::Server { code, .. } => {
            *code == SESSION_ALREADY_ATTACHED || *code == TRANSPORT_CLOSED
        }
        ClientError::Failed(_) | ClientError::Protocol(_) | ClientError::Unsupported(_) => false,
    }
}

fn give_up(inner: &Arc<Inner>, message: String) {
    warn!(%message, "exec-server session lost");
    inner.state.send_replace(ConnectionState::Failed(message.clone()));
    let registrations: Vec<_> =
        inner.registrations.lock().unwrap().drain().map(|(_, r)| r).collect();
    for registration in registrations {
        registration.fail(format!("process {}: {message}", registration.process_id));
    }
}

#[cfg(test)]
mod tests {
    //! The route and install steps of recovery, driven with events constructed by hand: the
    //! races they guard against are too narrow to provoke over the wire on demand. The client,
    //! the server and the connections are real.

    use tether_protocol::ByteChunk;
    use tether_protocol::PathUri;
    use tether_protocol::process::{ExecOutputStream, ProcessOutputNotification};
    use tether_testkit::{ServerProcess, Target};

    use super::*;
    use crate::ProcessUpdate;

    fn generation(client: &ExecServerClient) -> Option<u64> {
        match &*client.inner.state.borrow() {
            ConnectionState::Connected(connection) => Some(connection.generation),
            _ => None,
        }
    }

    async fn wait_for_generation_after(client: &ExecServerClient, after: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(generation) = generation(client).filter(|g| *g > after) {
                return generation;
            }
            assert!(Instant::now() < deadline, "no connection after generation {after}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A close reported for an older connection after a newer one is installed (a late report,
    /// or one from a resume attempt that was abandoned) starts no recovery.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_close_reported_for_an_older_connection_changes_nothing() {
        // Setup: a real recovery, so that generation 1 is an old connection.
        let server = ServerProcess::start(Target::Tether).await.unwrap();
        let client =
            ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
        client.disconnect();
        let current = wait_for_generation_after(&client, 1).await;
        let sleeper = ExecParams::new(
            "quiet",
            vec!["/bin/sleep".into(), "30".into()],
            PathUri::parse("file:///tmp").unwrap(),
        );
        let mut process = client.start(sleeper).await.unwrap();

        // Exercise: generation 1's close, then a marker the route handles after it.
        let events = &client.inner.events;
        let late =
            ConnectionEvent::Closed { generation: 1, reason: "late".into(), going_away: false };
        events.send(late).await.unwrap();
        let marker = ProcessOutputNotification {
            process_id: "quiet".into(),
            seq: 1,
            stream: ExecOutputStream::Stdout,
            chunk: ByteChunk::from(b"marker".to_vec()),
        };
        let marker = Notification {
            method: PROCESS_OUTPUT.into(),
            params: Some(serde_json::to_value(marker).unwrap()),
        };
        events.send(ConnectionEvent::Notification(marker)).await.unwrap();

        // Assert: once the marker is through, the session is still on the same connection.
        let update = tokio::time::timeout(Duration::from_secs(10), process.next_update()).await;
        assert!(
            matches!(&update, Ok(Some(ProcessUpdate::Event(ProcessEvent::Output { chunk, .. })))
                if &chunk[..] == b"marker"),
            "{update:?}"
        );
        assert_eq!(client.status(), ConnectionStatus::Connected);
        assert_eq!(generation(&client), Some(current));
    }

    /// A sequence number no server would send (`u64::MAX`, as a hostile or broken one might)
    /// fails that process alone, saying why; the router goes on serving the others.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_senseless_sequence_fails_its_process_alone() {
        let server = ServerProcess::start(Target::Tether).await.unwrap();
        let client =
            ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
        let sleeper = |id: &str| {
            ExecParams::new(
                id,
                vec!["/bin/sh".into(), "-c".into(), "read line; echo $line".into()],
                PathUri::parse("file:///tmp").unwrap(),
            )
        };
        let quiet = ExecParams::new(
            "victim",
            vec!["/bin/sleep".into(), "30".into()],
            PathUri::parse("file:///tmp").unwrap(),
        );
        let mut victim = client.start(quiet).await.unwrap();
        let mut params = sleeper("bystander");
        params.pipe_stdin = true;
        let mut bystander = client.start(params).await.unwrap();

        let senseless = ProcessOutputNotification {
            process_id: "victim".into(),
            seq: u64::MAX,
            stream: ExecOutputStream::Stdout,
            chunk: ByteChunk::from(b"x".to_vec()),
        };
        client.inner.events.send(ConnectionEvent::Output(senseless)).await.unwrap();

        let update = tokio::time::timeout(Duration::from_secs(10), victim.next_update()).await;
        assert!(
            matches!(&update, Ok(Some(ProcessUpdate::Failed(message))) if message.contains("out of range")),
            "{update:?}"
        );
        bystander.write(b"still-here\n".to_vec()).await.unwrap();
        let update = tokio::time::timeout(Duration::from_secs(10), bystander.next_update()).await;
        assert!(
            matches!(&update, Ok(Some(ProcessUpdate::Event(ProcessEvent::Output { chunk, .. })))
                if &chunk[..] == b"still-here\n"),
            "{update:?}"
        );
    }

    /// A body delta larger than any server may send breaks the protocol: the connection that
    /// carried it is dropped and the session recovered on a new one, its processes intact.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_oversized_body_delta_drops_the_connection_and_the_session_recovers() {
        let server = ServerProcess::start(Target::Tether).await.unwrap();
        let client =
            ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
        let sleeper = ExecParams::new(
            "survivor",
            vec!["/bin/sh".into(), "-c".into(), "sleep 0.5; echo still-here".into()],
            PathUri::parse("file:///tmp").unwrap(),
        );
        let mut process = client.start(sleeper).await.unwrap();
        let before = generation(&client).unwrap();

        let oversized = Notification {
            method: HTTP_REQUEST_BODY_DELTA.into(),
            params: Some(json!({
                "requestId": "http-1",
                "seq": 1,
                "deltaBase64": "A".repeat(2 * 1024 * 1024),
                "done": false,
            })),
        };
        client.inner.events.send(ConnectionEvent::Notification(oversized)).await.unwrap();

        wait_for_generation_after(&client, before).await;
        let update = tokio::time::timeout(Duration::from_secs(10), process.next_update()).await;
        assert!(
            matches!(&update, Ok(Some(ProcessUpdate::Event(ProcessEvent::Output { chunk, .. })))
                if &chunk[..] == b"still-here\n"),
            "{update:?}"
        );
    }

    /// A resumed connection can drop between the end of the resume and its installation; its
    /// close, reported while it was not yet current, was ignored. Installing it must start a
    /// new recovery rather than leave every call waiting on a dead connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_that_closed_before_it_was_installed_is_recovered() {
        // Setup: the session's connection is gone and the client is recovering.
        let server = ServerProcess::start(Target::Tether).await.unwrap();
        let client =
            ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
        let inner = &client.inner;
        let first = client.connected().await.unwrap();
        inner.state.send_replace(ConnectionState::Recovering);
        first.close();

        // A new connection that closes before it is installed; its close goes nowhere (as when
        // the route saw it during the recovery and ignored it).
        let resumed_generation = inner.generations.fetch_add(1, Ordering::AcqRel) + 1;
        let (unheard, _) = mpsc::channel(1);
        let options = &inner.options;
        let gate = inner.gate.clone();
        let resumed =
            Connection::open(&server.url, resumed_generation, options, unheard, gate, false)
                .await
                .unwrap();
        resumed.close();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !resumed.is_closed() {
            assert!(Instant::now() < deadline, "the connection did not close");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }

        // Exercise.
        install(inner, resumed);

        // Assert: a recovery ran and installed a live connection.
        tokio::time::timeout(Duration::from_secs(20), client.wait_connected())
            .await
            .expect("the client never recovered")
            .unwrap();
        assert!(generation(&client).is_some_and(|g| g > resumed_generation));
    }
}
