//! JSON-RPC error codes used by the exec-server protocol.
//!
//! The standard codes keep their JSON-RPC meaning. Two are specific to the exec-server: a
//! filesystem "not found" that Codex's `apply_patch` relies on to create parent directories, and
//! the "session already attached" code that resuming clients treat as retryable.

/// The request is not allowed in this state: handshake violations, duplicate process ids,
/// unknown processes or sessions, malformed frames (answered with id `-1`).
pub const INVALID_REQUEST: i64 = -32600;
/// No such method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// The params did not decode or failed validation.
pub const INVALID_PARAMS: i64 = -32602;
/// The executor failed to do what was asked (spawn failure, I/O error).
pub const INTERNAL_ERROR: i64 = -32603;
/// A filesystem path or file handle does not exist.
pub const NOT_FOUND: i64 = -32004;
/// `initialize {resumeSessionId}` named a session that another connection still holds. Clients
/// retry: the server may not have noticed yet that the old connection died.
pub const SESSION_ALREADY_ATTACHED: i64 = -32010;
/// "JSON-RPC transport closed": no server sends it on purpose, but clients (the reference's
/// and Tether's) treat an error with this code as the connection dropping, not as an answer.
pub const TRANSPORT_CLOSED: i64 = -32000;
