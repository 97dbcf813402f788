//! The local execution engine: what actually runs on the executor.
//!
//! Everything here works in-process, without any server: a harness that runs its tools locally
//! uses these types directly, and the server's handlers are thin wrappers around the same code.
//!
//! - [`process`]: one child process (pipes or a PTY) — spawning, the output pump that gives every
//!   chunk, the exit and the close one sequence number, the retained-output buffer, idempotent
//!   stdin writes, signals.
//! - [`process_table`]: the processes of one session, keyed by the client's process ids, with
//!   the start/terminate races settled in one place.
//! - [`exec`]: the process surface a harness uses ([`exec::ExecBackend`] starts,
//!   [`exec::ExecProcess`] follows one process's updates in order) and its local
//!   implementation over a process table.
//! - [`fs`]: the filesystem surface ([`fs::FileSystem`]) and its local implementation, open
//!   file handles and the missing-path watch.
//! - [`http`]: the HTTP surface ([`http::HttpClient`]) and its local implementation: requests
//!   made from the executor's network position, buffered or with the body streamed.
//! - [`network`]: managed network for sandboxed commands — the proxy a `networkProxy` launch
//!   starts for its process, its domain policy, and where it sends what it lets through.
//! - [`env_policy`]: how a child's environment is built from the executor's own.
//! - [`proc_stat`]: a process's parent, group and start time from `/proc`, for whoever must
//!   tell processes apart (killing a group, a sandbox's descendants, the guardian).
//! - [`sandbox`]: confining a sandboxed start or file write (bubblewrap, seccomp, the inner
//!   stage), and what an intent means here.
//! - [`exec_setup`]: what a child is handed at exec (arguments, environment, the descriptors a
//!   process keeps from its children), shared by every way a child is started.
//! - [`helper`]: the entry point of the `tether` binary's helper modes.
//! - [`allocator`]: the allocator tuning a streaming process wants (freed heap kept for reuse).
//! - [`environment`]: what this executor is (shell, home, temp dirs, version), as
//!   `environment/info` reports it.
//! - [`codex_config`]: the executor's own Codex configuration, layer by layer, as
//!   `environmentConfig/read` reports it.
//!
//! Architecture invariant: this crate knows the protocol's data types but nothing of JSON-RPC,
//! connections or sessions. Errors are typed ([`ProcessError`]); the server maps them to codes.

// The module docs are maps for readers of the code, private modules included: they resolve
// under `cargo doc --document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

pub mod allocator;
pub mod capabilities;
pub mod codex_config;
pub mod env_policy;
pub mod environment;
pub mod exec;
pub mod exec_setup;
pub mod fs;
pub mod helper;
pub mod http;
pub mod network;
pub mod proc_stat;
pub mod process;
pub mod process_table;
pub mod sandbox;
pub mod shell_snapshot;
mod wildcard;

pub use exec::{ProcessFailure, ProcessFailureKind, ProcessUpdate};
pub use process::{ProcessError, ProcessEvent};
pub use process_table::{ProcessTable, ProcessTableConfig};
