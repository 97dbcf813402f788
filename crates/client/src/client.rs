//! [`ExecServerClient`]: one logical session with an exec-server, over as many connections as
//! it takes — the handle a caller holds.
//!
//! The session is a state machine (`crate::session::ConnectionState`):
//!
//! - `Connected`: calls go over the current connection; process events are published in order.
//! - `Recovering`: the connection dropped. New calls wait; process handles stay open. The
//!   client reconnects and resumes the session (`crate::recovery`), catches every process up,
//!   and only then installs the new connection. A process whose missing output the server no
//!   longer holds fails alone.
//! - `Failed`: recovery ran out of time (or the session is gone). Every waiting and later call
//!   gets the same error, and every process handle a terminal failure: nothing waits forever.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tether_engine::ProcessFailureKind;
use tether_protocol::ProcessId;
use tether_protocol::error::SESSION_ALREADY_ATTACHED;
use tether_protocol::process::{
    ConnectParams, ConnectResponse, ExecParams, ExecResponse, ListParams, ListResponse,
    ProcessSummary, ReadParams, ReadResponse,
};
use tether_protocol::session::{EnvironmentInfo, TetherExtensions};
use tokio::sync::mpsc;
use tracing::{debug, info};

use crate::catch_up::run_claimed;
use crate::connection::Connection;
use crate::error::{ClientError, SessionLost};
use crate::flow::{CONNECTION_EVENT_QUEUE, PauseGate};
use crate::options::ClientOptions;
use crate::process::RemoteProcess;
use crate::recovery::initialize;
use crate::router::{route_events, supervise_router};
use crate::session::{ConnectionState, Retry, Session};
use crate::starts::PendingStart;

/// Where the client's session stands, as a caller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionStatus {
    Connected,
    /// The connection dropped; the client is resuming the session. Calls wait.
    Recovering,
    /// The session is lost, for the reason given. Calls fail.
    Failed(SessionLost),
}

/// See [`ExecServerClient::status_changes`].
pub struct StatusChanges(tokio::sync::watch::Receiver<crate::session::ConnectionState>);

impl StatusChanges {
    /// Waits for the next change and returns the status then; `None` once the session is
    /// gone.
    pub async fn next(&mut self) -> Option<ConnectionStatus> {
        self.0.changed().await.ok()?;
        Some(match &*self.0.borrow_and_update() {
            crate::session::ConnectionState::Connected(_) => ConnectionStatus::Connected,
            crate::session::ConnectionState::Recovering => ConnectionStatus::Recovering,
            crate::session::ConnectionState::Failed(lost) => ConnectionStatus::Failed(lost.clone()),
        })
    }
}

/// A handle to one exec-server session. Cheap to clone; every clone is the same session.
///
/// Answers are read by a task on the runtime. A call made from a task takes its answer on
/// the same worker thread. A call made from the thread that runs `Runtime::block_on` (the
/// body of `#[tokio::main]`) waits for that thread to be woken for each answer: on a 2-CPU
/// machine, an empty `process/read` took ~19 µs that way against ~12 µs from a task. For many
/// small calls in a row, make them from a spawned task.
#[derive(Clone)]
pub struct ExecServerClient {
    pub(crate) session: Arc<Session>,
}

impl ExecServerClient {
    /// Connects to `url` (`ws://…`) and starts a new session.
    pub async fn connect(url: &str, options: ClientOptions) -> Result<Self, ClientError> {
        Self::open(url, options, None).await
    }

    /// Reattaches to an existing session — one this program started before it restarted, say.
    /// The server refuses (`-32010`) while another connection still holds the session: a
    /// client that has just died holds it until the server sees its connection go (at once for
    /// a closed socket, within the keepalive for a lost network), so that refusal is asked
    /// again, every `recovery_retry_interval`, until `recovery_timeout` has passed, as a
    /// recovery asks.
    pub async fn resume(
        url: &str,
        session_id: &str,
        options: ClientOptions,
    ) -> Result<Self, ClientError> {
        let deadline = tokio::time::Instant::now() + options.recovery_timeout;
        loop {
            match Self::open(url, options.clone(), Some(session_id)).await {
                Err(ClientError::Server { code, .. })
                    if code == SESSION_ALREADY_ATTACHED
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(options.recovery_retry_interval).await;
                }
                other => return other,
            }
        }
    }

    async fn open(
        url: &str,
        options: ClientOptions,
        resume: Option<&str>,
    ) -> Result<Self, ClientError> {
        let (events, receiver) = mpsc::channel(CONNECTION_EVENT_QUEUE);
        let gate = Arc::new(PauseGate::new(options.full_handle_pause));
        let token = options.token_now()?;
        let connection = Connection::open(
            url,
            1,
            &options,
            token.as_deref(),
            events.clone(),
            gate.clone(),
            true,
        )
        .await?;
        let response = initialize(&connection, &options, resume).await?;
        let session = Arc::new(Session::new(url, options, response, connection, events, gate));
        let router = tokio::spawn(route_events(Arc::downgrade(&session), receiver));
        tokio::spawn(supervise_router(Arc::downgrade(&session), router));
        // The session id is enough to take a detached session over: not above DEBUG.
        debug!(session_id = %session.id(), "exec-server session started");
        info!("exec-server session started");
        Ok(Self { session })
    }

    pub fn session_id(&self) -> &str {
        self.session.id()
    }

    /// What the server reported about its environment when the session started.
    /// How long the server keeps this session once its connection is gone, as granted for
    /// [`ClientOptions::detached_ttl`]; `None` if it was not asked for or the server does not
    /// say (the reference).
    pub fn detached_ttl(&self) -> Option<Duration> {
        self.session.detached_ttl()
    }

    pub fn environment_info(&self) -> Option<&EnvironmentInfo> {
        self.session.environment_info()
    }

    /// Asks the server for its environment now (`environment/info`), as Codex does once per
    /// connection: the shell, the working directory and the platform as they are at this moment,
    /// not as they were when the session started. Read-only, so retried across a drop.
    pub async fn request_environment_info(&self) -> Result<EnvironmentInfo, ClientError> {
        self.call("environment/info", &(), Retry::Safe).await
    }

    /// The Tether extensions the server serves; none (all flags off) for the reference.
    pub fn tether_extensions(&self) -> TetherExtensions {
        self.session.tether_extensions()
    }

    /// The status's changes from now on, for a caller that tells a person the link is down
    /// (and back). None is missed between two waits: each wait returns the latest.
    pub fn status_changes(&self) -> StatusChanges {
        StatusChanges(self.session.state_changes())
    }

    /// Where the session stands now.
    pub fn status(&self) -> ConnectionStatus {
        match self.session.current_state() {
            ConnectionState::Connected(_) => ConnectionStatus::Connected,
            ConnectionState::Recovering => ConnectionStatus::Recovering,
            ConnectionState::Failed(lost) => ConnectionStatus::Failed(lost),
        }
    }

    /// Waits until the session is connected (through a recovery), or fails with why it is lost.
    pub async fn wait_connected(&self) -> Result<(), ClientError> {
        self.connected().await.map(|_| ())
    }

    /// Drops the current connection as if the network had (for tests and for "reconnect now").
    pub fn disconnect(&self) {
        self.session.disconnect();
    }

    /// Starts a process and returns its handle. If the connection drops before the server
    /// answers, the start is sent again once the session is back: a process id is never
    /// reused, so the server runs it only if the first request never reached it. If it
    /// refuses (the first one may have run), the start is ambiguous: the call fails, and the
    /// process — if it did start — is terminated, never silently adopted. The same happens if
    /// the caller stops waiting (drops this future) once the request may have been sent.
    pub async fn start(&self, params: ExecParams) -> Result<RemoteProcess, ClientError> {
        let process_id = params.process_id.clone();
        self.start_with::<_, ExecResponse>("process/start", &process_id, &params).await
    }

    /// Opens a TCP connection from the executor to `127.0.0.1:port` (or `[::1]:port`, with
    /// `host`) on its own loopback, as a process (`process/connect`, the `portForward`
    /// extension): its stdout is what the peer sends, [`ProcessControl::write`](crate::ProcessControl::write)
    /// goes to the peer, [`close_stdin`](crate::ProcessControl::close_stdin) half-closes the
    /// connection, and it exits 0 when the peer has finished sending
    /// ([`tether_engine::process::BROKEN_EXIT_CODE`] when it broke). Being a process, it
    /// survives network drops as any does. A server without the extension is refused here,
    /// unsent, with [`ClientError::Unsupported`]; a port nothing listens on fails with the
    /// kind [`SpawnFailureKind::ConnectRefused`](tether_protocol::process::SpawnFailureKind)
    /// (see [`ClientError::spawn_failure`]). An ambiguous connect is handled as [`start`](Self::start)'s.
    pub async fn connect_port(&self, params: ConnectParams) -> Result<RemoteProcess, ClientError> {
        if !self.tether_extensions().port_forward {
            return Err(ClientError::Unsupported(
                "this exec-server cannot forward ports (the portForward extension)".into(),
            ));
        }
        let process_id = params.process_id.clone();
        self.start_with::<_, ConnectResponse>("process/connect", &process_id, &params).await
    }

    /// A start by `method` (`process/start`, `process/connect`) and its handle.
    async fn start_with<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        process_id: &ProcessId,
        params: &P,
    ) -> Result<RemoteProcess, ClientError> {
        let process_id = process_id.clone();
        let (registration, updates) = self.session.register(&process_id)?;
        let mut start = PendingStart::new(&self.session, registration.clone());
        let connection = self.connected().await?;
        start.sending();
        let mut answer = connection.call::<_, R>(method, params).await.map(drop);
        if let Err(ClientError::Disconnected(_)) = &answer {
            // Lost with its connection: once the session is back, asked again. Refused there
            // (its id already exists: the first one reached the server), or lost again, it is
            // ambiguous as it was.
            start.lost();
            if let Ok(connection) = self.connected().await {
                start.sending();
                match connection.call::<_, R>(method, params).await {
                    Ok(_) => answer = Ok(()),
                    Err(_) => start.lost(),
                }
            }
        }
        match answer {
            Ok(_) => {
                registration.mark_started();
                start.settle();
                Ok(RemoteProcess::new(self.session.clone(), registration, updates))
            }
            Err(ClientError::Disconnected(end)) => {
                let end = end.context(format_args!(
                    "{method} for {process_id} may or may not have run; it is being terminated"
                ));
                start.abandon(end.to_string());
                Err(ClientError::Disconnected(end))
            }
            Err(error) => {
                self.session.unregister(&registration);
                start.settle();
                Err(error)
            }
        }
    }

    /// The session's processes (`process/list`, a Tether extension: check
    /// `tetherExtensions.processList`; the reference answers `-32601`).
    pub async fn list_processes(&self) -> Result<Vec<ProcessSummary>, ClientError> {
        let list: ListResponse =
            self.call("process/list", &ListParams::default(), Retry::Safe).await?;
        Ok(list.processes)
    }

    /// The sessions of this client's own — its token's subject, or its address on a server
    /// without authentication — this one among them, on a server that advertises
    /// `tetherExtensions.sessions`. Read-only, so retried across a drop.
    pub async fn list_sessions(
        &self,
    ) -> Result<Vec<tether_protocol::session::SessionSummary>, ClientError> {
        let listed: tether_protocol::session::SessionListResponse =
            self.call("session/list", &serde_json::json!({}), Retry::Safe).await?;
        Ok(listed.sessions)
    }

    /// Ends a detached session of this client's own now, its processes killed, as its expiry
    /// would. Ending one twice finds it gone, so it is retried across a drop.
    pub async fn end_session(&self, session_id: &str) -> Result<(), ClientError> {
        let params =
            tether_protocol::session::SessionEndParams { session_id: session_id.to_owned() };
        let _: serde_json::Value = self.call("session/end", &params, Retry::Safe).await?;
        Ok(())
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
        let (registration, updates) = self.session.register(&process_id)?;
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
                self.session.unregister(&registration);
                return Err(error);
            }
        };
        let oldest = first.chunks.first().map_or(1, |chunk| chunk.seq);
        if oldest > 1 {
            registration.skip_to(oldest - 1);
        }
        if let Err(failure) = run_claimed(&self.session, &registration).await {
            self.session.unregister(&registration);
            // A session lost meanwhile fails the attach as it fails every other call.
            if let (ProcessFailureKind::SessionLost { .. }, ConnectionState::Failed(lost)) =
                (failure.kind, self.session.current_state())
            {
                return Err(ClientError::Failed(lost));
            }
            return Err(ClientError::Protocol(format!(
                "cannot follow process {process_id}: {failure}"
            )));
        }
        Ok((RemoteProcess::new(self.session.clone(), registration, updates), oldest > 1))
    }

    /// The current connection, waiting through a recovery.
    pub(crate) async fn connected(&self) -> Result<Arc<Connection>, ClientError> {
        self.session.connected().await
    }

    /// A call that rides through recoveries as `retry` allows.
    pub(crate) async fn call<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
        retry: Retry,
    ) -> Result<R, ClientError> {
        self.session.call(method, params, retry).await
    }
}
