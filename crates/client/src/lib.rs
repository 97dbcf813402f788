//! The Tether client: process handles that survive network drops.
//!
//! A short WebSocket interruption must not end a process handle, lose a byte or repeat one.
//! The pieces, bottom up:
//!
//! - [`reorder`]: per process, events are published strictly in sequence order; early ones wait
//!   in a bounded buffer, duplicates are dropped.
//! - [`reconcile`]: after a reconnect, what a `process/read` from the last published sequence
//!   says is merged into the published stream — retained chunks in their places, the exit and
//!   close in theirs — or the process is declared lost when the server no longer holds the
//!   output needed to fill the gap.
//!
//! - [`flow`]: how much a handle holds for a caller that has not read it (a bounded window
//!   of the server's retained output), and what happens when it is full: the connection
//!   pauses for a moment, then the handle falls behind and catches up later.
//! - `registration`: the client's record of one process — its reorder buffer, what was
//!   published, what its handle holds, where its handle listens — as small state machines,
//!   each a type; it holds the process's events within [`HANDLE_MEMORY_BYTES`].
//! - `catch_up`: `process/read` pages that bring a handle up to date after a reconnect, after
//!   it fell behind, or when it is attached.
//! - `connection`: one WebSocket and the calls in flight on it (one "generation"); `tls`, the
//!   certificates it trusts for `wss://`.
//! - `client`: [`ExecServerClient`], the session's state machine
//!   (`Connected → Recovering → Connected | Failed`) and the recovery itself.
//! - `process`: [`RemoteProcess`], the handle a caller holds.
//! - `remote_exec`, `remote_fs`, `remote_http`: the engine's three surfaces over a session —
//!   [`ExecServerClient`] is an `ExecBackend`, a `FileSystem` and an `HttpClient`, and
//!   [`RemoteProcess`] an `ExecProcess` — so one test suite runs on the engine and on a server.
//!   `remote_write_stream` is a streamed file write's blocks, a few in flight.
//! - `environment`: [`Environment`], the three surfaces as one value, local or remote.
//! - `port_forward`: [`PortForward`], a local listener whose connections reach a port on the
//!   executor's loopback, each a forwarded connection ([`ExecServerClient::connect_port`]).
//!
//! `reorder` and `reconcile` are pure (no I/O, no clocks), so every reorder, duplicate and gap
//! case is tested deterministically.

pub mod error;
pub mod flow;
pub mod reconcile;
pub mod reorder;

mod calls;
mod catch_up;
mod client;
mod connection;
mod environment;
mod fs_errors;
mod http_streams;
mod options;
mod port_forward;
mod process;
mod reader;
mod recovery;
mod registration;
mod remote_exec;
mod remote_fs;
mod remote_http;
mod remote_write_stream;
mod router;
mod session;
mod starts;
pub mod tls;

pub use client::{ConnectionStatus, ExecServerClient, StatusChanges};
pub use environment::Environment;
pub use error::{ClientError, SessionLost};
pub use flow::{DEFAULT_FULL_HANDLE_PAUSE, HANDLE_BUFFER_BYTES, HANDLE_MEMORY_BYTES};
pub use http_streams::{MAX_QUEUED_BODY_DELTAS, MAX_QUEUED_HTTP_BODY_BYTES};
pub use options::{
    ClientOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_INITIALIZE_TIMEOUT, DEFAULT_KEEPALIVE_INTERVAL,
    DEFAULT_KEEPALIVE_TIMEOUT, DEFAULT_RECOVERY_RETRY_INTERVAL, DEFAULT_RECOVERY_TIMEOUT,
    GOING_AWAY_RECOVERY, TokenSource,
};
pub use port_forward::{ForwardNote, MAX_FORWARDED_CONNECTIONS, PortForward, STOP_GRACE};
pub use process::{ProcessControl, RemoteProcess};
pub use remote_fs::READ_BLOCKS_AHEAD;
pub use remote_write_stream::WRITE_BLOCKS_IN_FLIGHT;
pub use tether_engine::{ProcessFailure, ProcessFailureKind, ProcessUpdate};
pub use tls::TlsFingerprint;
