//! One connection's message loop: the handshake, request dispatch and the end of the
//! connection. Transport-independent: frames come in as bytes and go out as text.
//!
//! Requests are answered in arrival order, except long-polling `process/read`s, which wait in
//! their own tasks so that they never hold up the requests behind them (the reference blocks
//! the whole connection on them by default). Everything that changes state — starts, writes,
//! signals — runs inline, so pipelined writes to one process are applied in the order sent.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use tether_protocol::envelope::encode_response;
use tether_protocol::error::METHOD_NOT_FOUND;
use tether_protocol::http::HttpRequestParams;
use tether_protocol::method::{INITIALIZED, not_implemented_message};
use tether_protocol::process::ReadParams;
use tether_protocol::session::{
    EnvironmentInfo, EnvironmentState, EnvironmentStatus, InitializeParams, InitializeResponse,
};
use tether_protocol::{JsonRpcError, Message, Method, Notification, Request, RequestId};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::asks::Answered;
use crate::contained::contained;
use crate::handlers::fs::{FsCall, FsConnection, Reply};
use crate::handlers::http::HttpConnection;
use crate::handlers::process::ProcessCall;
use crate::handlers::{self, Call};
use crate::metrics::SessionRefusal;
use crate::registry::SessionLimits;
use crate::rpc_error::{self, from_process_error, invalid_request};
use crate::session::Session;
use crate::state::ServerState;
use crate::transport::{ConnectionId, Outbound, Payload, TransportKind};

pub(crate) type Inbound = Pin<Box<dyn Stream<Item = InboundFrame> + Send>>;

/// One inbound message: its JSON, and the bytes attached to it — Tether's `binaryBlocks`, a
/// binary WebSocket message split at its first NUL ([`tether_protocol::attached`]).
pub(crate) struct InboundFrame {
    json: Bytes,
    attached: Option<Bytes>,
}

impl InboundFrame {
    /// A message of JSON alone (a text frame, a stdio line).
    pub(crate) fn json(json: Bytes) -> Self {
        Self { json, attached: None }
    }

    /// A binary message: JSON alone, or JSON, a NUL and attached bytes. Split where it lies.
    pub(crate) fn binary(message: Bytes) -> Self {
        match tether_protocol::attached::split(&message) {
            Some((json, _)) => {
                let at = json.len();
                Self { json: message.slice(..at), attached: Some(message.slice(at + 1..)) }
            }
            None => Self::json(message),
        }
    }
}

/// Where a connection is in the handshake.
enum Phase {
    /// Nothing but `initialize` is served.
    AwaitingInitialize,
    /// `initialize` succeeded; the client must send `initialized` before anything else.
    AwaitingInitialized(Arc<Session>),
    Ready(Arc<Session>),
}

/// Whether the connection goes on after a message.
#[derive(PartialEq, Eq)]
enum Flow {
    Continue,
    Close(Ending),
}

/// Why a connection's message loop ended, which decides what the transport tells the client
/// as it closes (a WebSocket Close frame's code and reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The client's messages ended: it closed, or the transport broke or gave up on it.
    InputEnded,
    /// The server is stopping.
    Shutdown,
    /// The client broke the JSON-RPC protocol; the text says how, briefly, and is safe to send.
    Violation(&'static str),
    /// Another connection resumed this connection's session.
    Superseded,
}

struct Processor {
    state: Arc<ServerState>,
    connection: ConnectionId,
    transport: TransportKind,
    outbound: Outbound,
    phase: Phase,
    /// Long-polls in flight; aborted when the connection ends, so a resume never waits on them.
    waiting: JoinSet<()>,
    /// Bounds `waiting` (`--concurrent-requests`).
    permits: Arc<Semaphore>,
    /// The connection's open files and missing-path watch.
    fs: FsConnection,
    /// The connection's HTTP streams.
    http: Arc<HttpConnection>,
}

pub(crate) async fn serve_connection(
    state: Arc<ServerState>,
    connection: ConnectionId,
    transport: TransportKind,
    mut inbound: Inbound,
    outbound: Outbound,
    shutdown: CancellationToken,
) -> Ending {
    let metrics = state.metrics.clone();
    metrics.connection_opened();
    let permits = Arc::new(Semaphore::new(state.config.concurrent_requests.max(1)));
    let http = Arc::new(HttpConnection::new(state.http.clone(), transport.carries_binary()));
    let fs = FsConnection::new(outbound.clone(), transport.carries_binary());
    let mut processor = Processor {
        state,
        connection,
        transport,
        fs,
        http,
        outbound,
        phase: Phase::AwaitingInitialize,
        waiting: JoinSet::new(),
        permits,
    };
    let ending = loop {
        let frame = tokio::select! {
            frame = inbound.next() => frame,
            () = shutdown.cancelled() => break Ending::Shutdown,
            Some(_) = processor.waiting.join_next(), if !processor.waiting.is_empty() => continue,
        };
        let Some(frame) = frame else { break Ending::InputEnded };
        if let Flow::Close(ending) = processor.handle_frame(frame).await {
            break ending;
        }
    };
    processor.finish();
    metrics.connection_closed();
    ending
}

impl Processor {
    async fn handle_frame(&mut self, frame: InboundFrame) -> Flow {
        if let Some(session) = self.session()
            && !session.is_attached_to(self.connection)
        {
            debug!("session was resumed by another connection; closing this one");
            return Flow::Close(Ending::Superseded);
        }
        match Message::decode(&frame.json) {
            Err(error) => {
                let message = format!("{}: {error}", self.transport.parse_error_prefix());
                debug!(%error, "unparseable message");
                self.reply_error(&RequestId::UNKNOWN, invalid_request(message)).await;
                Flow::Continue
            }
            Ok(Message::Request(request)) => {
                self.handle_request(request, frame.attached).await;
                Flow::Continue
            }
            Ok(Message::Notification(notification)) => self.handle_notification(notification),
            // The one request a server sends is a managed proxy's question; a response to
            // anything else is a protocol violation.
            Ok(Message::Response(response)) => {
                self.handle_answer(&response.id, Ok(&response.result))
            }
            Ok(Message::Error(error)) => self.handle_answer(&error.id, Err(&error.error)),
        }
    }

    /// A response to one of the session's `network/policyRequest`s.
    fn handle_answer(
        &mut self,
        id: &RequestId,
        result: Result<&serde_json::Value, &JsonRpcError>,
    ) -> Flow {
        let answered = self.session().map(|session| session.answer(id, result));
        if answered == Some(Answered::Delivered) {
            return Flow::Continue;
        }
        warn!("client sent a response to a request the server never made; closing");
        Flow::Close(Ending::Violation("unexpected response from the client"))
    }

    fn handle_notification(&mut self, notification: Notification) -> Flow {
        if notification.method != INITIALIZED {
            warn!(method = %notification.method, "unknown notification; closing the connection");
            return Flow::Close(Ending::Violation("unknown notification"));
        }
        match std::mem::replace(&mut self.phase, Phase::AwaitingInitialize) {
            Phase::AwaitingInitialize => {
                warn!("`initialized` before `initialize`; closing the connection");
                Flow::Close(Ending::Violation("initialized before initialize"))
            }
            Phase::AwaitingInitialized(session) | Phase::Ready(session) => {
                self.phase = Phase::Ready(session);
                Flow::Continue
            }
        }
    }

    /// Handles one request; a panic in it answers it `-32603` ([`contained`]).
    async fn handle_request(&mut self, request: Request, attached: Option<Bytes>) {
        let (id, method) = (request.id.clone(), request.method.clone());
        if let Err(error) = contained(&method, self.dispatch(request, attached)).await {
            self.reply_error(&id, error).await;
        }
    }

    async fn dispatch(&mut self, request: Request, attached: Option<Bytes>) {
        debug!(method = %request.method, id = %request.id, "request");
        let id = request.id;
        let Some(method) = Method::from_name(&request.method) else {
            info!(method = %request.method, "unknown method");
            let error =
                JsonRpcError::new(METHOD_NOT_FOUND, not_implemented_message(&request.method));
            return self.reply_error(&id, error).await;
        };
        if method == Method::Initialize {
            return match self.initialize(&id, request.params) {
                Ok(text) => self.send(text).await,
                Err(error) => self.reply_error(&id, error).await,
            };
        }
        // Params first, then the handshake, as the reference checks them.
        let call = match attached {
            None => Call::decode(method, request.params),
            Some(chunk) => handlers::fs::decode_attached(method, request.params, chunk)
                .map(|call| Call::Fs(Box::new(call))),
        };
        let call = match call {
            Ok(call) => call,
            Err(error) => return self.reply_error(&id, error).await,
        };
        let session = match self.ready(method) {
            Ok(session) => session,
            Err(error) => return self.reply_error(&id, error).await,
        };
        let result = match call {
            Call::EnvironmentInfo => Ok(encode_response(&id, &self.environment_info())),
            Call::EnvironmentStatus => {
                Ok(encode_response(&id, &EnvironmentStatus { status: EnvironmentState::Ready }))
            }
            Call::Process(ProcessCall::Read(params)) => {
                return self.read(id, session, params).await;
            }
            Call::Process(ProcessCall::Start(params)) if params.shell_snapshot.is_some() => {
                // Capturing the user's shell state may run its startup (once per scope): the
                // start waits for it, as the reference's does, and keeps its place in order.
                match self.state.snapshots.prepare(&session.processes, *params).await {
                    Ok(params) => {
                        handlers::process::run(&id, ProcessCall::Start(Box::new(params)), &session)
                    }
                    Err(error) => Err(from_process_error(error)),
                }
            }
            Call::Process(ProcessCall::Connect(params)) => {
                handlers::process::connect(&id, params, &session).await
            }
            Call::Process(call) => handlers::process::run(&id, call, &session),
            Call::Fs(call) => return self.fs(id, *call).await,
            Call::Http(params) => return self.http(id, *params).await,
            Call::EnvironmentConfigRead(params) => {
                handlers::environment_config::run(&id, *params).await
            }
            Call::Discovery(call) => return self.discover(id, *call).await,
            Call::Sessions(call) => {
                let registry = &self.state.sessions;
                match call {
                    handlers::sessions::SessionsCall::List => {
                        let sessions = registry.list_for(&session.client, &session.id);
                        let listed = tether_protocol::session::SessionListResponse { sessions };
                        Ok(encode_response(&id, &listed))
                    }
                    handlers::sessions::SessionsCall::End(params) => registry
                        .end_for(&session.client, &session.id, &params.session_id)
                        .map(|()| encode_response(&id, &serde_json::json!({})))
                        .map_err(|why| handlers::sessions::refusal(why, &params.session_id)),
                }
            }
        };
        match result {
            Ok(text) => self.send(text).await,
            Err(error) => self.reply_error(&id, error).await,
        }
    }

    /// Filesystem calls run inline, in order. A whole-file read waits its turn for the
    /// server's read budget (the connection's other requests wait behind it, as behind any
    /// state-changing call), and its answer holds its share until written.
    async fn fs(&mut self, id: RequestId, call: FsCall) {
        match handlers::fs::run(&id, call, &self.state.fs, &mut self.fs).await {
            Ok(Reply { payload, hold }) => {
                let permit = hold.map(|grant| grant.into_permit());
                let _ = self.outbound.answer(payload, permit).await;
            }
            Err(error) => self.reply_error(&id, error).await,
        }
    }

    /// HTTP requests wait on a remote peer, so each runs in its own task.
    async fn http(&mut self, id: RequestId, params: HttpRequestParams) {
        let Ok(permit) = self.permits.clone().acquire_owned().await else { return };
        let http = self.http.clone();
        let outbound = self.outbound.clone();
        self.waiting.spawn(async move {
            let handling = http.run(id.clone(), params, outbound.clone());
            if let Err(error) = contained(Method::HttpRequest.name(), handling).await {
                let _ = outbound.send_error(&id, &error).await;
            }
            drop(permit);
        });
    }

    fn initialize(
        &mut self,
        id: &RequestId,
        params: Option<Value>,
    ) -> Result<String, JsonRpcError> {
        let params: InitializeParams = handlers::params_of(params)?;
        if !matches!(self.phase, Phase::AwaitingInitialize) {
            return Err(invalid_request("initialize may only be sent once per connection"));
        }
        // Each connection says for itself how it reads output (`attachedOutput`); the
        // session's events reach it through the outbound handed over below.
        let attached_output = params.attach_output && self.transport.carries_binary();
        self.outbound.set_attached_output(attached_output);
        let sessions = &self.state.sessions;
        // A failed attach leaves the phase alone: the client may try again on this connection.
        let session = match &params.resume_session_id {
            Some(id) => {
                let session = sessions.resume(id, self.connection, self.outbound.clone())?;
                self.state.metrics.session_resumed();
                session
            }
            // A draining server takes no new work; resumes (above) go on, so a client that
            // dropped can come back for what its processes said.
            None if self.state.drain.is_draining() => {
                self.state.metrics.session_refused(SessionRefusal::Draining);
                debug!(client_name = %params.client_name, "new session refused: draining");
                return Err(rpc_error::draining());
            }
            None => {
                let limits = SessionLimits {
                    max_sessions: self.state.config.max_sessions,
                    max_per_client: self.state.config.max_sessions_per_client,
                };
                let client = self.transport.client();
                let created = sessions
                    .create(self.connection, self.outbound.clone(), client, limits)
                    .map_err(|refused| {
                        self.state.metrics.session_refused(refused.reason);
                        refused.error
                    })?;
                for eviction in created.evicted {
                    self.state.metrics.session_evicted(eviction);
                }
                self.state.metrics.session_created();
                created.session
            }
        };
        // A session's own wait for a resume (`sessionTtl`), within the server's maximum; over
        // stdio there is nothing to wait for.
        let granted = params.detached_ttl_secs.map(|asked| {
            let ttl = Duration::from_secs(asked).min(self.state.config.max_detached_session_ttl);
            session.set_detached_ttl(ttl);
            match self.transport.sessions_outlive_connection() {
                true => ttl.as_secs(),
                false => 0,
            }
        });
        tracing::Span::current().record("session", crate::session::log_tag(&session.id).as_str());
        debug!(client_name = %params.client_name, resumed = params.resume_session_id.is_some(), "initialized");
        let response = InitializeResponse {
            session_id: session.id.clone(),
            environment_info: Some(self.environment_info().into_owned()),
            detached_ttl_secs: granted,
            attached_output,
        };
        self.phase = Phase::AwaitingInitialized(session);
        Ok(encode_response(id, &response))
    }

    /// Discovery reads many files, so each call runs in its own task: the connection's other
    /// requests go on meanwhile, and the work stops (at its next root) when the connection
    /// ends. An answer already at hand is sent at once.
    async fn discover(&mut self, id: RequestId, call: handlers::capabilities::DiscoveryCall) {
        // A kept inventory is answered here and now: the task, the blocking pool and the
        // writer would be most of its time.
        if let Some(text) = handlers::capabilities::answer_now(&id, &call, &self.state.inventory) {
            return self.send(text).await;
        }
        let Ok(permit) = self.permits.clone().acquire_owned().await else { return };
        let outbound = self.outbound.clone();
        let cache = self.state.inventory.clone();
        let method = match &call {
            handlers::capabilities::DiscoveryCall::Installed(_) => Method::CapabilitiesDiscoverV2,
            handlers::capabilities::DiscoveryCall::Roots(_) => Method::CapabilityRootsDiscoverV1,
        };
        self.waiting.spawn(async move {
            let handling = async {
                let _ = match handlers::capabilities::run(&id, call, &cache).await {
                    Ok(text) => outbound.send(text).await,
                    Err(error) => outbound.send_error(&id, &error).await,
                };
            };
            if let Err(error) = contained(method.name(), handling).await {
                let _ = outbound.send_error(&id, &error).await;
            }
            drop(permit);
        });
    }

    /// Answers a read at once when it need not wait; otherwise waits in its own task.
    async fn read(&mut self, id: RequestId, session: Arc<Session>, params: ReadParams) {
        let known = session.processes.get(&params.process_id).is_some();
        if params.wait_ms.unwrap_or(0) == 0 || !known {
            return match session.processes.read(params).await {
                Ok(response) => self.send(encode_response(&id, &response)).await,
                Err(error) => self.reply_error(&id, from_process_error(error)).await,
            };
        }
        // Past the bound, stop reading new requests until a waiting read finishes.
        let Ok(permit) = self.permits.clone().acquire_owned().await else { return };
        let outbound = self.outbound.clone();
        let connection = self.connection;
        self.waiting.spawn(async move {
            let handling = async {
                let result = session.processes.read(params).await;
                let _ = if !session.is_attached_to(connection) {
                    let error = invalid_request("session has been resumed by another connection");
                    outbound.send_error(&id, &error).await
                } else {
                    match result {
                        Ok(response) => outbound.send(encode_response(&id, &response)).await,
                        Err(error) => outbound.send_error(&id, &from_process_error(error)).await,
                    }
                };
            };
            if let Err(error) = contained(Method::ProcessRead.name(), handling).await {
                let _ = outbound.send_error(&id, &error).await;
            }
            drop(permit);
        });
    }

    /// What `environment/info` says on this connection: the server's, without
    /// `binaryBlocks`, `attachedHttpBodies` and `attachedOutput` where the transport has no
    /// binary messages.
    fn environment_info(&self) -> std::borrow::Cow<'_, EnvironmentInfo> {
        let info = &self.state.environment_info;
        if self.transport.carries_binary() {
            return std::borrow::Cow::Borrowed(info);
        }
        let mut info = info.clone();
        if let Some(extensions) =
            info.capabilities.as_mut().and_then(|c| c.tether_extensions.as_mut())
        {
            extensions.binary_blocks = false;
            extensions.attached_http_bodies = false;
            extensions.attached_output = false;
        }
        std::borrow::Cow::Owned(info)
    }

    fn session(&self) -> Option<&Arc<Session>> {
        match &self.phase {
            Phase::AwaitingInitialize => None,
            Phase::AwaitingInitialized(session) | Phase::Ready(session) => Some(session),
        }
    }

    /// The session, if the handshake is complete; the reference's errors otherwise.
    fn ready(&self, method: Method) -> Result<Arc<Session>, JsonRpcError> {
        match &self.phase {
            Phase::Ready(session) => Ok(session.clone()),
            Phase::AwaitingInitialize => Err(invalid_request(format!(
                "client must call initialize before using {} methods",
                method.family()
            ))),
            Phase::AwaitingInitialized(_) => Err(invalid_request(format!(
                "client must send initialized before using {} methods",
                method.family()
            ))),
        }
    }

    /// Answers a request: written at once when nothing queued is ahead of it (see
    /// `transport::direct`), queued otherwise.
    async fn send(&self, text: String) {
        // A closed connection is going away; the answer has nowhere to go.
        let _ = self.outbound.answer(Payload::Text(text), None).await;
    }

    async fn reply_error(&self, id: &RequestId, error: JsonRpcError) {
        let _ = self.outbound.answer_error(id, &error).await;
    }

    /// The connection is over: abandon its long-polls and let go of its session.
    fn finish(mut self) {
        self.waiting.abort_all();
        let phase = std::mem::replace(&mut self.phase, Phase::AwaitingInitialize);
        if let Phase::AwaitingInitialized(session) | Phase::Ready(session) = phase {
            if self.transport.sessions_outlive_connection() {
                self.state.sessions.detach(&session, self.connection);
            } else {
                self.state.sessions.end(&session.id);
            }
        }
    }
}
