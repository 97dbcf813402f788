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
    /// The stdio server's process could not be started on the executor.
    #[error("cannot start the MCP server {program}: {message}")]
    Launch { program: String, message: String },
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
            // Not the server's answer: rmcp's own word that the stream carrying the answer
            // closed before it came (the connection dropped, and what the server sent was
            // lost with it).
            ServiceError::McpError(error) if is_transport_closed(&error) => {
                McpError::Transport { detail: error.message.into_owned(), no_response: true }
            }
            ServiceError::McpError(error) => McpError::Server(error),
            ServiceError::Timeout { timeout } => McpError::Timeout(timeout),
            ServiceError::TransportSend(error) => from_transport(error.error.as_ref(), end),
            ServiceError::TransportClosed => McpError::Transport {
                detail: end.unwrap_or_else(|| "the connection to it closed".into()),
                no_response: false,
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

/// The key rmcp puts in the data of the error it answers a request with when the stream that
/// was to carry the response closed first (it is rmcp's, not a server's).
const TRANSPORT_CLOSED_MARKER: &str = "io.modelcontextprotocol/transportClosed";

/// Whether `error` is rmcp's own "the response stream closed before the response".
fn is_transport_closed(error: &rmcp::ErrorData) -> bool {
    error.data.as_ref().is_some_and(|data| data.get(TRANSPORT_CLOSED_MARKER).is_some())
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
    use rmcp::ErrorData;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_response_stream_closed_before_its_response_is_no_response_and_a_server_error_is_not() {
        let closed = ErrorData::internal_error(
            "streamable HTTP response stream closed before its final response",
            Some(json!({TRANSPORT_CLOSED_MARKER: 1})),
        );
        let error = McpError::from_service(ServiceError::McpError(closed), None);
        assert!(error.is_no_response(), "{error:?}");
        assert_eq!(
            error.to_string(),
            "the MCP server cannot be reached: streamable HTTP response stream closed before its \
             final response"
        );

        let answered = ErrorData::internal_error("the tool failed", Some(json!({"why": "x"})));
        let error = McpError::from_service(ServiceError::McpError(answered), None);
        assert!(matches!(error, McpError::Server(_)), "{error:?}");
    }
}
