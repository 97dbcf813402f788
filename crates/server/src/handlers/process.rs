//! `process/*`: thin wrappers over the session's [`tether_engine::ProcessTable`].

use serde_json::Value;
use tether_protocol::envelope::encode_response;
use tether_protocol::process::{
    CloseStdinParams, ConnectParams, ExecParams, ListResponse, PROCESS_ID_MAX_BYTES, ProcessId,
    ReadParams, ResizeParams, SignalParams, SignalResponse, TerminateParams, TerminateResponse,
    WRITE_ID_MAX_BYTES, WriteParams, WriteResponse,
};
use tether_protocol::{JsonRpcError, Method, RequestId};

use super::params_of;
use crate::rpc_error::{from_process_error, invalid_params};
use crate::session::Session;

pub(crate) enum ProcessCall {
    Start(Box<ExecParams>),
    Read(ReadParams),
    Write(WriteParams),
    Signal(SignalParams),
    Terminate(TerminateParams),
    /// Tether extension.
    Resize(ResizeParams),
    /// Tether extension.
    CloseStdin(CloseStdinParams),
    /// Tether extension.
    List,
    /// Tether extension (`portForward`): awaited in order by the processor ([`connect`]).
    Connect(ConnectParams),
}

impl ProcessCall {
    /// `None` when `method` is not a process method.
    pub(crate) fn decode(
        method: Method,
        params: Option<Value>,
    ) -> Result<Option<ProcessCall>, JsonRpcError> {
        let call = match method {
            Method::ProcessStart => ProcessCall::Start(Box::new(params_of(params)?)),
            Method::ProcessRead => ProcessCall::Read(params_of(params)?),
            Method::ProcessWrite => {
                let params: WriteParams = params_of(params)?;
                if params.write_id.is_empty() {
                    return Err(invalid_params("writeId must not be empty"));
                }
                if params.write_id.len() > WRITE_ID_MAX_BYTES {
                    return Err(invalid_params(format!(
                        "writeId must be at most {WRITE_ID_MAX_BYTES} bytes; send a shorter \
                         idempotency key"
                    )));
                }
                ProcessCall::Write(params)
            }
            Method::ProcessSignal => ProcessCall::Signal(params_of(params)?),
            Method::ProcessTerminate => ProcessCall::Terminate(params_of(params)?),
            Method::ProcessResize => ProcessCall::Resize(params_of(params)?),
            Method::ProcessCloseStdin => ProcessCall::CloseStdin(params_of(params)?),
            Method::ProcessList => {
                super::unit_params(params)?;
                ProcessCall::List
            }
            Method::ProcessConnect => ProcessCall::Connect(params_of(params)?),
            _ => return Ok(None),
        };
        if let Some(process_id) = call.process_id() {
            check_process_id(process_id)?;
        }
        Ok(Some(call))
    }

    /// The process the call names; `None` for a listing.
    fn process_id(&self) -> Option<&ProcessId> {
        match self {
            ProcessCall::Start(params) => Some(&params.process_id),
            ProcessCall::Read(params) => Some(&params.process_id),
            ProcessCall::Write(params) => Some(&params.process_id),
            ProcessCall::Signal(params) => Some(&params.process_id),
            ProcessCall::Terminate(params) => Some(&params.process_id),
            ProcessCall::Resize(params) => Some(&params.process_id),
            ProcessCall::CloseStdin(params) => Some(&params.process_id),
            ProcessCall::Connect(params) => Some(&params.process_id),
            ProcessCall::List => None,
        }
    }
}

/// Refuses an id longer than [`PROCESS_ID_MAX_BYTES`] on every method, not only on a start: an
/// id no start can have names no process, and refusing it the same way everywhere tells the
/// client which of its ids is at fault.
fn check_process_id(process_id: &ProcessId) -> Result<(), JsonRpcError> {
    if process_id.as_str().len() > PROCESS_ID_MAX_BYTES {
        return Err(invalid_params(format!(
            "processId must be at most {PROCESS_ID_MAX_BYTES} bytes; send a shorter id"
        )));
    }
    Ok(())
}

/// Runs every process call but a read (which may wait, and is the processor's to schedule).
pub(crate) fn run(
    id: &RequestId,
    call: ProcessCall,
    session: &Session,
) -> Result<String, JsonRpcError> {
    let processes = &session.processes;
    match call {
        ProcessCall::Start(params) => {
            // The audit trail: who started what, where, confined or not (never its
            // environment's values, which may hold secrets).
            let (argv, cwd) = (params.argv.clone(), params.cwd.clone());
            let (process_id, sandboxed) = (params.process_id.clone(), params.sandbox.is_some());
            let started = processes.start(*params).map_err(from_process_error)?;
            tracing::info!(
                target: "tether::audit",
                process_id = %process_id,
                client = %session.client,
                ?argv,
                cwd = %cwd,
                sandboxed,
                "process started"
            );
            Ok(encode_response(id, &started))
        }
        ProcessCall::Write(params) => {
            let status = processes
                .write(&params.process_id, params.chunk, &params.write_id)
                .map_err(from_process_error)?;
            Ok(encode_response(id, &WriteResponse { status }))
        }
        ProcessCall::Signal(params) => {
            processes.signal(&params.process_id, params.signal).map_err(from_process_error)?;
            Ok(encode_response(id, &SignalResponse {}))
        }
        ProcessCall::Terminate(params) => {
            let running = processes.terminate(&params.process_id);
            Ok(encode_response(id, &TerminateResponse { running }))
        }
        ProcessCall::Resize(params) => {
            processes
                .resize(&params.process_id, params.cols, params.rows)
                .map_err(from_process_error)?;
            Ok(encode_response(id, &serde_json::json!({})))
        }
        ProcessCall::CloseStdin(params) => {
            processes.close_stdin(&params.process_id).map_err(from_process_error)?;
            Ok(encode_response(id, &serde_json::json!({})))
        }
        ProcessCall::List => {
            Ok(encode_response(id, &ListResponse { processes: processes.summaries() }))
        }
        ProcessCall::Read(_) => unreachable!("reads are scheduled by the processor"),
        ProcessCall::Connect(_) => unreachable!("connects are awaited by the processor"),
    }
}

/// `process/connect`: a forwarded connection to the executor's loopback. The connect is
/// awaited in the request's place (on loopback it is answered at once), so writes pipelined
/// behind it find the process.
pub(crate) async fn connect(
    id: &RequestId,
    params: ConnectParams,
    session: &Session,
) -> Result<String, JsonRpcError> {
    let (process_id, port, host) = (params.process_id.clone(), params.port, params.host.clone());
    let connected = session.processes.connect(params).await.map_err(from_process_error)?;
    tracing::info!(
        target: "tether::audit",
        process_id = %process_id,
        client = %session.client,
        port,
        host = host.as_deref().unwrap_or("127.0.0.1"),
        "connection forwarded"
    );
    Ok(encode_response(id, &connected))
}
