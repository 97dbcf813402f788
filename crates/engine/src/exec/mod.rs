//! Processes as a harness uses them: start one, follow its events, write to it, signal it.
//!
//! [`ExecBackend`] starts processes and [`ExecProcess`] is the handle to one. [`LocalExecBackend`]
//! implements them here, over a [`crate::ProcessTable`] in this process; a remote implementation
//! over the client implements them the same way, so one test suite covers both and a harness
//! switches placement without changing a line.
//!
//! A handle's updates come strictly in sequence order and end with `Closed` or `Failed`; what
//! a remote handle needs to get there (reordering, catching up after a reconnect) is the
//! client's business, and in-process there is nothing to reorder.

mod buffer;
mod failure;
mod local;

use async_trait::async_trait;
use bytes::Bytes;
use tether_protocol::ProcessId;
use tether_protocol::process::{
    ExecParams, ProcessSignal, ReadResponse, SpawnFailureKind, WriteStatus,
};

pub use buffer::{HANDLE_BUFFER_BYTES, RESUME_BELOW_BYTES, UPDATE_OVERHEAD_BYTES, update_cost};
pub use failure::{ProcessFailure, ProcessFailureKind};
pub use local::LocalExecBackend;

use crate::ProcessEvent;
use crate::process::ProcessError;

/// Starts processes on an executor.
#[async_trait]
pub trait ExecBackend: Send + Sync {
    /// Starts a process; its handle follows it from its first event.
    async fn start(&self, params: ExecParams) -> Result<Box<dyn ExecProcess>, ExecError>;
}

/// One started process. Dropping the handle stops following the process; it does not kill it.
#[async_trait]
pub trait ExecProcess: Send + Sync {
    fn process_id(&self) -> &ProcessId;

    /// Bytes of updates the handle holds that its caller has not taken yet: at most about
    /// [`HANDLE_BUFFER_BYTES`], whatever the caller does.
    fn buffered_bytes(&self) -> usize;

    /// The next update, in sequence order; `None` once the stream has ended (after `Closed`
    /// or `Failed`).
    async fn next_update(&mut self) -> Option<ProcessUpdate>;

    /// Queues bytes for the process's stdin. Each call is applied once, however often a
    /// remote implementation has to resend it.
    async fn write(&self, bytes: Bytes) -> Result<WriteStatus, ExecError>;

    /// Sends `signal` to the process group. A finished process is left alone. Signals other
    /// than `Interrupt` are a Tether extension: a remote executor that does not list them in
    /// `tetherExtensions.signals` refuses them.
    async fn signal(&self, signal: ProcessSignal) -> Result<(), ExecError>;

    /// SIGINT to the process group, as Ctrl-C at a terminal.
    async fn interrupt(&self) -> Result<(), ExecError> {
        self.signal(ProcessSignal::Interrupt).await
    }

    /// Kills the process group; returns whether the process was still running.
    async fn terminate(&self) -> Result<bool, ExecError>;

    /// Sets a `tty` process's terminal size (a Tether extension: a remote executor that does
    /// not advertise `tetherExtensions.ptySize` refuses it).
    async fn resize(&self, cols: u16, rows: u16) -> Result<(), ExecError>;

    /// Ends a pipe process's input after what was written (a Tether extension, like
    /// [`resize`](Self::resize): `tetherExtensions.closeStdin`).
    async fn close_stdin(&self) -> Result<(), ExecError>;

    /// Retained output after `after_seq` (a re-sync, or for a caller that polls); with
    /// `wait_ms`, waits that long for something new.
    async fn read(
        &self,
        after_seq: u64,
        max_bytes: Option<usize>,
        wait_ms: Option<u64>,
    ) -> Result<ReadResponse, ExecError>;
}

/// What a process handle receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessUpdate {
    /// The next event, in sequence order.
    Event(ProcessEvent),
    /// The process can no longer be followed; no more updates come. The failure says why: a
    /// kind for the caller to decide on, and words to show a person.
    Failed(ProcessFailure),
}

/// Why an exec operation failed: a kind a caller can act on, and the executor's own message
/// (word for word, wherever the process ran).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ExecError {
    pub kind: ExecErrorKind,
    pub message: String,
    /// For a start that could not run its program: why, as `error.data.kind` says it on the
    /// wire (a missing program, one that may not be run, a sandbox that cannot be had), so a
    /// caller can tell "not found" from any other failure without reading the message.
    pub spawn_failure: Option<SpawnFailureKind>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecErrorKind {
    /// The request cannot be served as asked: bad argv or cwd, an unsupported intent
    /// (`-32602` on the wire).
    InvalidParams,
    /// The request does not fit the executor's state: a process id already taken, an unknown
    /// process (`-32600`).
    InvalidRequest,
    /// The executor tried and failed: spawning, writing to stdin, signalling (`-32603`).
    Internal,
    /// The executor could not be reached, or the connection dropped before the answer and the
    /// call may or may not have taken effect. Remote implementations only.
    Unreachable,
}

impl ExecError {
    pub fn new(kind: ExecErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), spawn_failure: None }
    }

    /// This error, saying why its start could not run its program.
    pub fn with_spawn_failure(self, spawn_failure: Option<SpawnFailureKind>) -> Self {
        Self { spawn_failure, ..self }
    }
}

impl From<ProcessError> for ExecError {
    fn from(error: ProcessError) -> Self {
        let kind = match &error {
            ProcessError::InvalidParams(_) => ExecErrorKind::InvalidParams,
            ProcessError::AlreadyExists(_)
            | ProcessError::UnknownProcess(_)
            | ProcessError::TooManyProcesses(_) => ExecErrorKind::InvalidRequest,
            ProcessError::Spawn(_)
            | ProcessError::SandboxUnavailable(_)
            | ProcessError::StdinClosed
            | ProcessError::StdinQueueFull(..)
            | ProcessError::Signal(_)
            | ProcessError::Connect(_) => ExecErrorKind::Internal,
        };
        let spawn_failure = error.spawn_failure();
        Self::new(kind, error.to_string()).with_spawn_failure(spawn_failure)
    }
}
