//! How the engine's typed errors become JSON-RPC errors.

use serde_json::json;
use tether_engine::ProcessError;
use tether_engine::http::{HttpError, HttpSendError};
use tether_protocol::JsonRpcError;
use tether_protocol::error::{INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST};
use tether_protocol::process::SpawnFailure;

pub(crate) fn invalid_request(message: impl Into<String>) -> JsonRpcError {
    JsonRpcError::new(INVALID_REQUEST, message)
}

/// An `initialize` that would start a session on a draining server. `-32600`, as the server's
/// other refusals at `initialize` (too many sessions, an unknown session id); `data` says
/// `{"draining": true}`, so a client (or a router in front of many executors) decides to go
/// elsewhere on that, not on the words.
pub(crate) fn draining() -> JsonRpcError {
    JsonRpcError {
        data: Some(serde_json::json!({"draining": true})),
        ..invalid_request(
            "this server is draining (shutting down): start the session on another executor; resuming a session still works",
        )
    }
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
        | ProcessError::SandboxUnavailable(_)
        | ProcessError::StdinClosed
        | ProcessError::StdinQueueFull(..)
        | ProcessError::Signal(_)
        | ProcessError::Connect(_) => INTERNAL_ERROR,
    };
    let data = error.spawn_failure().map(|kind| json!(SpawnFailure { kind }));
    JsonRpcError { data, ..JsonRpcError::new(code, error.to_string()) }
}

/// Refused params are `-32602`; a request that was sent and failed, `-32603`. The message is
/// the reference's; `data` adds what kind of failure it was, so a client decides on that, not
/// on the words: `sendFailure` (no response: whether it was the connection or the deadline,
/// its causes without the URL, and the reason without the message's prefix) or
/// `bodyFailure` (the head came, the body broke off). A client that does not look for them
/// never notices.
pub(crate) fn from_http_error(error: HttpError) -> JsonRpcError {
    let code = match &error {
        HttpError::Invalid(_) => INVALID_PARAMS,
        HttpError::Failed(_) | HttpError::Body(_) | HttpError::Remote(_) => INTERNAL_ERROR,
    };
    let data = match &error {
        HttpError::Failed(failure) => {
            let (cause, detail) = match failure {
                HttpSendError::Transport(transport) => {
                    (transport.cause.as_str(), transport.detail.clone())
                }
                HttpSendError::Timeout => ("timeout", None),
                HttpSendError::TooManyRedirects | HttpSendError::RedirectScheme(_) => {
                    ("other", None)
                }
            };
            Some(serde_json::json!({
                "sendFailure": {"cause": cause, "detail": detail, "reason": failure.to_string()},
            }))
        }
        HttpError::Body(body) => Some(serde_json::json!({"bodyFailure": {"reason": body.0}})),
        HttpError::Invalid(_) | HttpError::Remote(_) => None,
    };
    JsonRpcError { data, ..JsonRpcError::new(code, error.to_string()) }
}
