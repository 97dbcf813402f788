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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tether_engine::ProcessEvent;
use tether_protocol::error::SESSION_ALREADY_ATTACHED;
use tether_protocol::method::{INITIALIZED, PROCESS_CLOSED, PROCESS_EXITED, PROCESS_OUTPUT};
use tether_protocol::process::{
    ExecParams, ExecResponse, ProcessClosedNotification, ProcessExitedNotification,
    ProcessOutputNotification, ReadResponse,
};
use tether_protocol::session::{EnvironmentInfo, InitializeParams, InitializeResponse};
use tether_protocol::{Notification, ProcessId};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::connection::{Connection, ConnectionEvent};
use crate::error::ClientError;
use crate::process::RemoteProcess;
use crate::registration::Registration;

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

#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub client_name: String,
    pub connect_timeout: Duration,
    pub initialize_timeout: Duration,
    pub recovery_timeout: Duration,
    pub recovery_retry_interval: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            client_name: "tether".into(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            initialize_timeout: DEFAULT_INITIALIZE_TIMEOUT,
            recovery_timeout: DEFAULT_RECOVERY_TIMEOUT,
            recovery_retry_interval: DEFAULT_RECOVERY_RETRY_INTERVAL,
        }
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
    events: mpsc::UnboundedSender<ConnectionEvent>,
    generations: AtomicU64,
    /// `process/start` calls in flight; recovery waits for them to settle so it never catches
    /// up a half-registered process.
    starts_in_flight: AtomicUsize,
    starts_settled: Notify,
}

impl ExecServerClient {
    /// Connects to `url` (`ws://…`) and starts a new session.
    pub async fn connect(url: &str, options: ClientOptions) -> Result<Self, ClientError> {
        let (events, receiver) = mpsc::unbounded_channel();
        let connection = Connection::open(url, 1, options.connect_timeout, events.clone()).await?;
        let response = initialize(&connection, &options, None).await?;
        let inner = Arc::new(Inner {
            url: url.to_owned(),
            session_id: response.session_id,
            environment_info: response.environment_info,
            state: watch::channel(ConnectionState::Connected(connection)).0,
            options,
            registrations: Mutex::new(HashMap::new()),
            events,
            generations: AtomicU64::new(1),
            starts_in_flight: AtomicUsize::new(0),
            starts_settled: Notify::new(),
        });
        tokio::spawn(route_events(Arc::downgrade(&inner), receiver));
        info!(session_id = %inner.session_id, "exec-server session started");
        Ok(Self { inner })
    }

    pub fn session_id(&self) -> &str {
        &self.inner.session_id
    }

    /// What the server reported about its environment when the session started.
    pub fn environment_info(&self) -> Option<&EnvironmentInfo> {
        self.inner.environment_info.as_ref()
    }

    /// Where the session stands now.
    pub fn status(&self) -> ConnectionStatus {
        match &*self.inner.state.borrow() {
            ConnectionState::Connected(_) => ConnectionStatus::Connected,
            ConnectionState::Recovering => ConnectionStatus::Recovering,
            ConnectionState::Failed(message) => ConnectionStatus::Failed(message.clone()),
        }
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
    /// terminated once the session is back, never silently adopted.
    pub async fn start(&self, params: ExecParams) -> Result<RemoteProcess, ClientError> {
        let process_id = params.process_id.clone();
        let (registration, updates) = self.register(&process_id)?;
        let _in_flight = StartInFlight::new(&self.inner);
        let outcome = match self.connected().await {
            Ok(connection) => connection.call::<_, ExecResponse>("process/start", &params).await,
            Err(error) => Err(error),
        };
        match outcome {
            Ok(_) => {
                registration.mark_started();
                Ok(RemoteProcess::new(self.clone(), registration, updates))
            }
            Err(ClientError::Disconnected(reason)) => {
                let message = format!(
                    "process/start for {process_id} may or may not have run ({reason}); it is being terminated"
                );
                registration.fail(message.clone());
                let client = self.clone();
                tokio::spawn(async move {
                    // Terminate whatever may be running under that id, then let the id go.
                    let params = json!({"processId": process_id});
                    while !matches!(client.current_state(), ConnectionState::Failed(_)) {
                        let terminate = client.call::<_, serde_json::Value>(
                            "process/terminate",
                            &params,
                            Retry::Safe,
                        );
                        if terminate.await.is_ok() {
                            break;
                        }
                    }
                    client.unregister(&registration);
                });
                Err(ClientError::Disconnected(message))
            }
            Err(error) => {
                self.unregister(&registration);
                Err(error)
            }
        }
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
        if registrations.contains_key(process_id) {
            return Err(ClientError::Protocol(format!(
                "a handle for process {process_id} is already open in this client"
            )));
        }
        let (registration, updates) = Registration::new(process_id.clone());
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
                Err(ClientError::Disconnected(_)) if retry == Retry::Safe => continue,
                Err(ClientError::Disconnected(reason)) => {
                    return Err(ClientError::Disconnected(format!(
                        "`{method}` may or may not have taken effect: {reason}"
                    )));
                }
                other => return other,
            }
        }
    }
}

/// Counts a start in flight while alive.
struct StartInFlight<'a>(&'a Inner);

impl<'a> StartInFlight<'a> {
    fn new(inner: &'a Inner) -> Self {
        inner.starts_in_flight.fetch_add(1, Ordering::AcqRel);
        Self(inner)
    }
}

impl Drop for StartInFlight<'_> {
    fn drop(&mut self) {
        if self.0.starts_in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.starts_settled.notify_waiters();
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
            ClientError::Connect("the server did not answer `initialize` in time".into())
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
async fn route_events(inner: Weak<Inner>, mut events: mpsc::UnboundedReceiver<ConnectionEvent>) {
    while let Some(event) = events.recv().await {
        let Some(inner) = inner.upgrade() else { return };
        match event {
            ConnectionEvent::Notification(notification) => route_notification(&inner, notification),
            ConnectionEvent::Closed { generation, reason } => {
                let current = matches!(
                    &*inner.state.borrow(),
                    ConnectionState::Connected(c) if c.generation == generation
                );
                if current {
                    warn!(generation, %reason, "exec-server connection lost; recovering the session");
                    inner.state.send_replace(ConnectionState::Recovering);
                    tokio::spawn(recover(inner.clone(), reason));
                }
            }
        }
    }
}

fn route_notification(inner: &Arc<Inner>, notification: Notification) {
    let params = notification.params.unwrap_or_default();
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
            ProcessEvent::Exited { process_id: n.process_id, seq: n.seq, exit_code: n.exit_code }
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
    let registration = inner.registrations.lock().unwrap().get(event.process_id()).cloned();
    if let Some(registration) = registration {
        registration.push(event);
        if registration.finished().is_some() {
            ExecServerClient { inner: inner.clone() }.unregister(&registration);
        }
    }
}

async fn recover(inner: Arc<Inner>, reason: String) {
    let started = Instant::now();
    let deadline = started + inner.options.recovery_timeout;
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
                "{reason}; failed to resume exec-server session {}: {last_error}; gave up after {:?}",
                inner.session_id, inner.options.recovery_timeout
            );
            return give_up(&inner, message);
        }
        match resume(&inner).await {
            Ok(connection) => {
                info!(
                    generation = connection.generation,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "exec-server session resumed"
                );
                inner.state.send_replace(ConnectionState::Connected(connection));
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
    let connection = Connection::open(
        &inner.url,
        generation,
        inner.options.connect_timeout,
        inner.events.clone(),
    )
    .await?;
    initialize(&connection, &inner.options, Some(&inner.session_id)).await?;
    let client = ExecServerClient { inner: inner.clone() };
    for registration in registrations {
        let params = json!({
            "processId": registration.process_id,
            "afterSeq": registration.last_published(),
            "maxBytes": null,
            "waitMs": 0,
        });
        let read = match connection.call::<_, ReadResponse>("process/read", &params).await {
            Ok(read) => Ok(read),
            // A transport problem ends this attempt; anything else is this process's problem.
            Err(error @ ClientError::Disconnected(_)) => return Err(error),
            Err(error) => Err(error.to_string()),
        };
        let caught_up =
            read.and_then(|read| registration.catch_up(&read).map_err(|e| e.to_string()));
        if let Err(error) = caught_up {
            let message = format!("failed to recover process {}: {error}", registration.process_id);
            warn!(process_id = %registration.process_id, %error, "process lost in recovery; terminating it");
            registration.fail(message);
            let terminate = json!({"processId": registration.process_id});
            let connection = connection.clone();
            tokio::spawn(async move {
                let _ =
                    connection.call::<_, serde_json::Value>("process/terminate", &terminate).await;
            });
        }
        if registration.finished().is_some() {
            client.unregister(&registration);
        }
    }
    Ok(connection)
}

fn is_retryable(error: &ClientError) -> bool {
    match error {
        ClientError::Connect(_) | ClientError::Disconnected(_) => true,
        ClientError::Server { code, message } => {
            *code == SESSION_ALREADY_ATTACHED || message == "JSON-RPC transport closed"
        }
        ClientError::Failed(_) | ClientError::Protocol(_) => false,
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
