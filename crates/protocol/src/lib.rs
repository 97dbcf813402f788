//! Wire types of the exec-server protocol, as Codex CLI 0.171 speaks it (a superset of 0.169's).
//!
//! This crate owns every byte that crosses the wire and nothing else: no sockets, no processes,
//! no clocks. The server, the engine and the client all speak through these types, so a reader
//! can learn the whole protocol from this crate alone.
//!
//! - [`envelope`]: the JSON-RPC 2.0 dialect without a `"jsonrpc"` member, and how one inbound
//!   frame is classified into a request, notification, response or error.
//! - [`decode`]: the hardened JSON reader every inbound frame goes through (bounded value count,
//!   no duplicate keys), so a hostile frame costs bounded memory.
//! - [`error`]: the error codes both sides agree on.
//! - [`method`]: every method name and the handshake family it belongs to.
//! - [`session`]: `initialize`, `environment/info` and `environment/status`.
//! - [`environment_config`]: `environmentConfig/read`, the executor's own Codex configuration.
//! - [`capabilities`]: `capabilities/discoverV2` and `capabilityRoots/discoverV1`, the skills
//!   and plugins installed on the executor.
//! - [`process`]: `process/*` requests, results and notifications.
//! - [`network_proxy`]: the managed network proxy a `process/start` asks the executor to launch;
//!   [`network`]: its decisions, and the requests it sends the client to decide.
//! - [`fs`] and [`http`]: the filesystem methods and `http/request`.
//! - [`sandbox`]: the confinement a `process/start` or `fs/*` call asks for.
//! - [`bytes`] and [`path_uri`]: the two value encodings every family shares — base64 byte
//!   chunks and `file:` URIs.
//! - [`attached`]: Tether's `binaryBlocks` extension, file blocks as raw bytes beside their
//!   JSON in binary WebSocket messages.
//! - [`fragments`]: a WebSocket message too big for one frame, as the frames it goes out in.
//! - [`time`]: instants as RFC 3339 text.

pub mod attached;
pub mod bytes;
pub mod capabilities;
pub mod decode;
pub mod envelope;
pub mod environment_config;
pub mod error;
#[cfg(test)]
#[macro_use]
mod fixtures;
pub mod fragments;
pub mod fs;
pub mod http;
pub mod method;
pub mod network;
pub mod network_proxy;
pub mod path_uri;
pub mod process;
pub mod sandbox;
pub mod session;
pub mod time;

pub use bytes::ByteChunk;
pub use envelope::{
    ErrorResponse, Incoming, JsonRpcError, Message, Notification, Request, RequestId, Response,
};
pub use method::Method;
pub use path_uri::PathUri;
pub use process::ProcessId;
