//! How the engine's typed errors become JSON-RPC errors.

use tether_engine::ProcessError;
use tether_engine::http::{HttpError, HttpSendError};
use tether_protocol::JsonRpcError;
use tether_protocol::error::{INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST};

pub(crate) fn invalid_request(message: impl Into<String>) -> JsonRpcError {
    JsonRpcError::new(INVALID_REQUEST, message)
}

pub(crate) fn invalid_params(message: impl Into<String>) -> JsonRpcError {
    JsonRpcError::new(INVALID_PARAMS, message)
}

pub(crate) fn from_process_error(error: ProcessError) -> JsonRpcError {
    let code = match &error {
        ProcessError::InvalidParams(_) => INVALID_PARAMS,
        ProcessError::AlreadyExists(_)
        | ProcessError::UnknownProcess(_)
        | ProcessError::TooManyProcesses(_) => INVALID_REQUEST,
        ProcessError::Spawn(_)
        | ProcessError::StdinClosed
        | ProcessError::StdinQueueFull(..)
        | ProcessError::Signal(_) => INTERNAL_ERROR,
    };
    JsonRpcError::new(code, error.to_string())
}

/// Refused params are `-32602`; a request that was sent and failed, `-32603`. A network
/// failure also says, in `data.sendFailure`, whether it was the connection or the deadline
/// (the message, the reference's, reads the same for both) and its causes without the URL:
/// an addition a client that does not look for it never notices.
pub(crate) fn from_http_error(error: HttpError) -> JsonRpcError {
    let code = match &error {
        HttpError::Invalid(_) => INVALID_PARAMS,
        HttpError::Failed(_) | HttpError::Body(_) => INTERNAL_ERROR,
    };
    let data = match &error {
        HttpError::Failed(HttpSendError::Transport(failure)) => Some(serde_json::json!({
            "sendFailure": {"cause": failure.cause.as_str(), "detail": failure.detail},
        })),
        HttpError::Failed(HttpSendError::Timeout) => {
            Some(serde_json::json!({"sendFailure": {"cause": "timeout", "detail": null}}))
        }
        _ => None,
    };
    JsonRpcError { data, ..JsonRpcError::new(code, error.to_string()) }
}
