//! Why a process's handle stopped short of its close: [`ProcessFailure`], the last update a
//! handle gives when it can no longer follow its process.
//!
//! The kind is decided where the failure happens — the local router, the client's catch-up,
//! its recovery, its start — and travels as a type to whoever explains it (`tether exec`, the
//! MCP transport, the Python package), so none of them has to read the message to know what
//! happened. The message is for a person, and names the process.

/// Why a process can no longer be followed. The process itself may still be running: what
/// failed is following it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProcessFailure {
    pub kind: ProcessFailureKind,
    pub message: String,
}

impl ProcessFailure {
    pub fn new(kind: ProcessFailureKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

/// What ended a process's stream early, for a caller to act on. Non-exhaustive: a caller
/// explains the kinds it knows and shows the message for the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProcessFailureKind {
    /// The handle's reader fell behind, and the output it missed is no longer retained: read
    /// sooner, or have the executor retain more.
    FellBehind,
    /// After a reconnect, output the handle had not received was no longer retained (or the
    /// server refused to read it back), so the stream cannot go on without a gap.
    OutputLost,
    /// The session is gone: the client gave up recovering it, and the process may still be
    /// running under it. `server_went_away`: the server said it was going away (WebSocket
    /// close 1001) before the session was lost — a stopping server ends its processes, so
    /// there is nothing left to reattach to.
    SessionLost { server_went_away: bool },
    /// Whether the process started is unknown (the connection dropped before the server
    /// answered the start, or its caller stopped waiting for the answer): the client is
    /// terminating whatever runs under its id rather than follow it.
    StartUncertain,
    /// The server said the process can no longer be followed (a read's `failure`).
    Server,
    /// The server's events for the process made no sense: a sequence out of range, too many
    /// ahead of a gap, a chunk past the process's end, a close that contradicts its output.
    Protocol,
}
