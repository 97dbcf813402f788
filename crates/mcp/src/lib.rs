//! An MCP client whose servers run where an [`Environment`](tether_client::Environment) puts
//! them: a stdio server as a process on the executor, a Streamable HTTP server reached from the
//! executor's network — or both here, in-process, with the same code.
//!
//! Built on the official SDK (`rmcp`): MCP sessions, re-initialization and SSE handling are
//! its; this crate supplies the two transports that place the server, and the client that
//! wires them up with narrow retries and clear errors.
//!
//! - [`client`]: [`McpClient`], connect / list tools / call a tool / notifications.
//! - [`stdio_transport`]: a stdio server as an executor process.
//! - [`http_adapter`]: rmcp's Streamable HTTP client trait over Tether's `HttpClient`.
//! - `sse_limit`, `line_buffer`: framing with bounds; `send_failure`: the one log line of a
//!   failed HTTP send, with nothing secret in it.

pub mod client;
pub mod error;
pub mod http_adapter;
mod line_buffer;
pub mod notifications;
mod send_failure;
mod sse_limit;
pub mod stdio_transport;

pub use client::{HttpServerConfig, McpClient, McpClientOptions, McpServerConfig};
pub use error::McpError;
pub use http_adapter::{HttpClientAdapter, HttpTransportError};
pub use notifications::McpNotification;
pub use rmcp;
pub use stdio_transport::{ExecutorStdioTransport, StdioServerCommand};
