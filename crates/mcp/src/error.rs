//! What can go wrong talking to an MCP server, in words a user can act on.

use rmcp::ServiceError;
use rmcp::service::ClientInitializeError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

use crate::http_adapter::HttpTransportError;

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The server description cannot be used as given.
    #[error("invalid MCP server configuration: {0}")]
    InvalidConfig(String),
    /// The stdio server's process could not be started on the executor; `spawn_failure`
    /// says why when its program could not be run (not found, not allowed to run).
    #[error("cannot start the MCP server {program}: {message}")]
    Launch {
        program: String,
        message: String,
        spawn_failure: Option<tether_protocol::process::SpawnFailureKind>,
    },
    /// The server answered the handshake with a refusal, or not in MCP.
    #[error("the MCP server refused to initialize: {0}")]
    Initialize(String),
    /// The server's HTTP endpoint wants credentials (401) or more scope (403).
    #[error(
        "the MCP server requires authorization ({challenge}); pass a bearer token, or one with the scope it asks for"
    )]
    Unauthorized { challenge: String },
    /// The server answered the call with a JSON-RPC error.
    #[error("the MCP server answered with an error: {0}")]
    Server(rmcp::ErrorData),
    /// The connection to the server is gone or failed; `detail` says how.
    #[error("the MCP server cannot be reached: {detail}")]
    Transport { detail: String, no_response: bool },
    #[error("the MCP call did not finish within {0:?}")]
    Timeout(std::time::Duration),
    #[error("unexpected answer from the MCP server: {0}")]
    Unexpected(String),
}

impl McpError {
    /// Whether the request got no response at all, so a request that changes nothing may be
    /// sent again. A server that answered, even with 5xx, is not retried here.
    pub fn is_no_response(&self) -> bool {
        matches!(self, McpError::Transport { no_response: true, .. })
    }

    pub(crate) fn from_service(error: ServiceError, end: Option<String>) -> Self {
        match error {
            ServiceError::McpError(error) => McpError::Server(error),
            ServiceError::Timeout { timeout } => McpError::Timeout(timeout),
            ServiceError::TransportSend(error) => from_transport(error.error.as_ref(), end),
            // The stream that was to carry the answer closed first. With a stdio server that
            // ended (`end` says how) there is nobody left to ask again; over HTTP it is one
            // request's stream (its answer lost in a drop, say), and the session goes on.
            ServiceError::TransportClosed => match end {
                Some(end) => McpError::Transport { detail: end, no_response: false },
                None => McpError::Transport {
                    detail: "the connection to it closed before the response came".into(),
                    no_response: true,
                },
            },
            other => McpError::Unexpected(other.to_string()),
        }
    }

    pub(crate) fn from_initialize(error: ClientInitializeError, end: Option<String>) -> Self {
        match error {
            ClientInitializeError::TransportError { error, .. } => {
                from_transport(error.error.as_ref(), end)
            }
            ClientInitializeError::ConnectionClosed(detail) => {
                McpError::Transport { detail: end.unwrap_or(detail), no_response: false }
            }
            ClientInitializeError::JsonRpcError(error) => {
                McpError::Initialize(error.message.into())
            }
            other => McpError::Initialize(other.to_string()),
        }
    }
}

/// Reads what the transport said: the HTTP adapter's errors, rmcp's, or a stdio pipe's.
fn from_transport(error: &(dyn std::error::Error + 'static), end: Option<String>) -> McpError {
    if let Some(error) = error.downcast_ref::<StreamableHttpError<HttpTransportError>>() {
        return match error {
            StreamableHttpError::AuthRequired(auth) => {
                McpError::Unauthorized { challenge: auth.www_authenticate_header.clone() }
            }
            StreamableHttpError::InsufficientScope(scope) => {
                McpError::Unauthorized { challenge: scope.www_authenticate_header.clone() }
            }
            StreamableHttpError::Client(HttpTransportError::NoResponse(detail)) => {
                McpError::Transport { detail: detail.clone(), no_response: true }
            }
            StreamableHttpError::HttpStatus(status) => {
                McpError::Transport { detail: status.to_string(), no_response: false }
            }
            other => McpError::Transport { detail: other.to_string(), no_response: false },
        };
    }
    let detail = end.unwrap_or_else(|| error.to_string());
    McpError::Transport { detail, no_response: false }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_stream_is_no_response_unless_the_server_process_ended() {
        // rmcp's word for a request whose response stream closed before the response.
        let error = McpError::from_service(ServiceError::TransportClosed, None);
        assert!(error.is_no_response(), "{error:?}");
        assert_eq!(
            error.to_string(),
            "the MCP server cannot be reached: the connection to it closed before the response came"
        );

        let ended = "the MCP server process exited with code 1".to_owned();
        let error = McpError::from_service(ServiceError::TransportClosed, Some(ended));
        assert!(!error.is_no_response(), "{error:?}");
    }
}
