//! One connection's message loop: the handshake, request dispatch and the end of the
//! connection. Transport-independent: frames come in as bytes and go out as text.
//!
//! Requests are answered in arrival order, except long-polling `process/read`s, which wait in
//! their own tasks so that they never hold up the requests behind them (the reference blocks
//! the whole connection on them by default). Everything that changes state — starts, writes,
//! signals — runs inline, so pipelined writes to one process are applied in the order sent.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tether_protocol::envelope::{decode_params, encode_error, encode_response};
use tether_protocol::error::METHOD_NOT_FOUND;
use tether_protocol::method::{INITIALIZED, not_implemented_message};
use tether_protocol::process::{
    ExecParams, ReadParams, SignalParams, SignalResponse, TerminateParams, TerminateResponse,
    WriteParams, WriteResponse,
};
use tether_protocol::session::{
    EnvironmentState, EnvironmentStatus, InitializeParams, InitializeResponse,
};
use tether_protocol::{JsonRpcError, Message, Method, Notification, Request, RequestId};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::rpc_error::{from_process_error, invalid_params, invalid_request};
use crate::session::Session;
use crate::state::ServerState;
use crate::transport::{ConnectionId, Outbound, TransportKind};

pub(crate) type Inbound = Pin<Box<dyn Stream<Item = Vec<u8>> + Send>>;

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
    Close,
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
}

pub(crate) async fn serve_connection(
    state: Arc<ServerState>,
    connection: ConnectionId,
    transport: TransportKind,
    mut inbound: Inbound,
    outbound: Outbound,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(state.config.concurrent_requests.max(1)));
    let mut processor = Processor {
        state,
        connection,
        transport,
        outbound,
        phase: Phase::AwaitingInitialize,
        waiting: JoinSet::new(),
        permits,
    };
    loop {
        let frame = tokio::select! {
            frame = inbound.next() => frame,
            () = shutdown.cancelled() => None,
            Some(_) = processor.waiting.join_next(), if !processor.waiting.is_empty() => continue,
        };
        let Some(frame) = frame else { break };
        if processor.handle_frame(&frame).await == Flow::Close {
            break;
        }
    }
    processor.finish();
}

impl Processor {
    async fn handle_frame(&mut self, frame: &[u8]) -> Flow {
        if let Some(session) = self.session()
            && !session.is_attached_to(self.connection)
        {
            debug!("session was resumed by another connection; closing this one");
            return Flow::Close;
        }
        match Message::decode(frame) {
            Err(error) => {
                let message = format!("{}: {error}", self.transport.parse_error_prefix());
                debug!(%error, "unparseable message");
                self.reply_error(&RequestId::UNKNOWN, invalid_request(message)).await;
                Flow::Continue
            }
            Ok(Message::Request(request)) => {
                self.handle_request(request).await;
                Flow::Continue
            }
            Ok(Message::Notification(notification)) => self.handle_notification(notification),
            // The server never sends requests, so a response from the client is a protocol
            // violation.
            Ok(Message::Response(_) | Message::Error(_)) => {
                warn!("client sent a response to a request the server never made; closing");
                Flow::Close
            }
        }
    }

    fn handle_notification(&mut self, notification: Notification) -> Flow {
        if notification.method != INITIALIZED {
            warn!(method = %notification.method, "unknown notification; closing the connection");
            return Flow::Close;
        }
        match std::mem::replace(&mut self.phase, Phase::AwaitingInitialize) {
            Phase::AwaitingInitialize => {
                warn!("`initialized` before `initialize`; closing the connection");
                Flow::Close
            }
            Phase::AwaitingInitialized(session) | Phase::Ready(session) => {
                self.phase = Phase::Ready(session);
                Flow::Continue
            }
        }
    }

    async fn handle_request(&mut self, request: Request) {
        let Some(method) = Method::from_name(&request.method) else {
            let error =
                JsonRpcError::new(METHOD_NOT_FOUND, not_implemented_message(&request.method));
            return self.reply_error(&request.id, error).await;
        };
        let id = request.id.clone();
        let result = match method {
            Method::Initialize => self.initialize(&id, request.params),
            Method::EnvironmentInfo => self
                .unit_params(request.params)
                .and_then(|()| self.ready(method))
                .and_then(|_| ok(&id, &self.state.environment_info)),
            Method::EnvironmentStatus => self
                .unit_params(request.params)
                .and_then(|()| self.ready(method))
                .and_then(|_| ok(&id, &EnvironmentStatus { status: EnvironmentState::Ready })),
            Method::ProcessStart => self.params::<ExecParams>(request.params).and_then(|params| {
                let session = self.ready(method)?;
                let started = session.processes.start(params).map_err(from_process_error)?;
                ok(&id, &started)
            }),
            Method::ProcessRead => match self.params::<ReadParams>(request.params) {
                Ok(params) => match self.ready(method) {
                    Ok(session) => return self.read(id, session, params).await,
                    Err(error) => Err(error),
                },
                Err(error) => Err(error),
            },
            Method::ProcessWrite => self.params::<WriteParams>(request.params).and_then(|params| {
                if params.write_id.is_empty() {
                    return Err(invalid_params("writeId must not be empty"));
                }
                let session = self.ready(method)?;
                let status = session
                    .processes
                    .write(&params.process_id, params.chunk, &params.write_id)
                    .map_err(from_process_error)?;
                ok(&id, &WriteResponse { status })
            }),
            Method::ProcessSignal => {
                self.params::<SignalParams>(request.params).and_then(|params| {
                    let session = self.ready(method)?;
                    session.processes.interrupt(&params.process_id).map_err(from_process_error)?;
                    ok(&id, &SignalResponse {})
                })
            }
            Method::ProcessTerminate => {
                self.params::<TerminateParams>(request.params).and_then(|params| {
                    let session = self.ready(method)?;
                    let running = session.processes.terminate(&params.process_id);
                    ok(&id, &TerminateResponse { running })
                })
            }
            // Served by the filesystem and HTTP layers, which this server does not have yet.
            _ => {
                info!(method = method.name(), "method not served yet");
                Err(JsonRpcError::new(METHOD_NOT_FOUND, not_implemented_message(method.name())))
            }
        };
        match result {
            Ok(text) => self.send(text).await,
            Err(error) => self.reply_error(&id, error).await,
        }
    }

    fn initialize(
        &mut self,
        id: &RequestId,
        params: Option<Value>,
    ) -> Result<String, JsonRpcError> {
        let params: InitializeParams = self.params(params)?;
        if !matches!(self.phase, Phase::AwaitingInitialize) {
            return Err(invalid_request("initialize may only be sent once per connection"));
        }
        let sessions = &self.state.sessions;
        // A failed attach leaves the phase alone: the client may try again on this connection.
        let session = match &params.resume_session_id {
            Some(id) => sessions.resume(id, self.connection, self.outbound.clone())?,
            None => sessions.create(self.connection, self.outbound.clone()),
        };
        tracing::Span::current().record("session_id", session.id.as_str());
        debug!(client_name = %params.client_name, resumed = params.resume_session_id.is_some(), "initialized");
        let response = InitializeResponse {
            session_id: session.id.clone(),
            environment_info: Some(self.state.environment_info.clone()),
        };
        self.phase = Phase::AwaitingInitialized(session);
        ok(id, &response)
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
            let result = session.processes.read(params).await;
            let text = if !session.is_attached_to(connection) {
                encode_error(
                    &id,
                    &invalid_request("session has been resumed by another connection"),
                )
            } else {
                match result {
                    Ok(response) => encode_response(&id, &response),
                    Err(error) => encode_error(&id, &from_process_error(error)),
                }
            };
            let _ = outbound.send(text).await;
            drop(permit);
        });
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

    fn params<T: DeserializeOwned>(&self, params: Option<Value>) -> Result<T, JsonRpcError> {
        decode_params(params).map_err(|e| invalid_params(e.to_string()))
    }

    /// Methods without params accept absent params, `null`, or `{}`.
    fn unit_params(&self, params: Option<Value>) -> Result<(), JsonRpcError> {
        let params = params.filter(|p| !matches!(p, Value::Object(map) if map.is_empty()));
        self.params(params)
    }

    async fn send(&self, text: String) {
        // A closed queue means the connection is going away; the reply has nowhere to go.
        let _ = self.outbound.send(text).await;
    }

    async fn reply_error(&self, id: &RequestId, error: JsonRpcError) {
        let _ = self.outbound.send(encode_error(id, &error)).await;
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

/// A success reply, serialised straight from the result type so members keep their wire order.
fn ok<T: Serialize>(id: &RequestId, result: &T) -> Result<String, JsonRpcError> {
    Ok(encode_response(id, result))
}
