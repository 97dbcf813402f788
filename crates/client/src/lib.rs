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
//! - `registration`: the client's record of one process — its reorder buffer, what was
//!   published, where its handle listens.
//! - `connection`: one WebSocket and the calls in flight on it (one "generation").
//! - `client`: [`ExecServerClient`], the session's state machine
//!   (`Connected → Recovering → Connected | Failed`) and the recovery itself.
//! - `process`: [`RemoteProcess`], the handle a caller holds.
//!
//! `reorder` and `reconcile` are pure (no I/O, no clocks), so every reorder, duplicate and gap
//! case is tested deterministically.

pub mod reconcile;
pub mod reorder;

mod client;
mod connection;
mod error;
mod process;
mod registration;

pub use client::{
    ClientOptions, ConnectionStatus, DEFAULT_CONNECT_TIMEOUT, DEFAULT_INITIALIZE_TIMEOUT,
    DEFAULT_RECOVERY_RETRY_INTERVAL, DEFAULT_RECOVERY_TIMEOUT, ExecServerClient,
};
pub use error::ClientError;
pub use process::RemoteProcess;
pub use registration::ProcessUpdate;
