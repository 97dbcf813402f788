//! The client's failures as Python exceptions: Python's own where one fits
//! (`FileNotFoundError`, `PermissionError`, `TimeoutError` through `tether.TimeoutExpired`,
//! `ConnectionError` through `tether.ConnectError` and `tether.SessionLost`), the classes of
//! `tether._errors` otherwise. Decided on kinds and codes, never on the message.

use pyo3::exceptions::{PyFileNotFoundError, PyPermissionError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tether_client::error::{ConnectErrorKind, DisconnectKind};
use tether_client::{ClientError, ProcessFailure, ProcessFailureKind};
use tether_engine::fs::{FsError, FsErrorKind};
use tether_engine::http::HttpError;
use tether_mcp::McpError;
use tether_protocol::process::SpawnFailureKind;
use tether_tree_copy::CopyError;

/// `ENOENT`, `EACCES`, `ENOTDIR` and `EISDIR`: the errno Python's own exceptions carry for
/// these failures.
const ENOENT: i32 = 2;
const EACCES: i32 = 13;
const ENOTDIR: i32 = 20;
const EISDIR: i32 = 21;

/// Why a native call failed, kept as data until the GIL is held to raise it.
#[derive(Debug)]
pub(crate) enum NativeError {
    Client(ClientError),
    /// A file operation failed; the path it was about, for the exception's `filename`.
    Fs {
        error: FsError,
        path: String,
    },
    /// An `http/request` failed: its parameters, the connection to the origin, its body.
    Http(HttpError),
    /// `process/start` could not run the program: the program named, for the exception.
    Spawn {
        error: ClientError,
        program: String,
    },
    /// `run(timeout=…)` expired; the command was terminated. What it wrote until then.
    Timeout {
        argv: Vec<String>,
        timeout: f64,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    },
    /// The process can no longer be followed (the session was lost, or its output was), of
    /// the kind the client decided where it happened.
    ProcessLost(ProcessFailure),
    /// The caller asked for something this server cannot do.
    Unsupported(String),
    /// An argument Python passed is not acceptable.
    InvalidArgument(String),
    /// An MCP session could not be opened, or a request in it failed.
    Mcp(McpError),
    /// An `upload` or `download` failed (or refused to start), of the copier's kind.
    Copy(CopyError),
    /// The call was cancelled before it ended.
    Cancelled,
}

impl From<ClientError> for NativeError {
    fn from(error: ClientError) -> Self {
        NativeError::Client(error)
    }
}

impl NativeError {
    pub(crate) fn into_pyerr(self, py: Python<'_>) -> PyErr {
        match self.raise(py) {
            Ok(error) | Err(error) => error,
        }
    }

    fn raise(self, py: Python<'_>) -> PyResult<PyErr> {
        let errors = py.import("tether._errors")?;
        let made = |class: &str, message: String| -> PyResult<PyErr> {
            Ok(PyErr::from_value(errors.getattr(class)?.call1((message,))?))
        };
        match self {
            NativeError::Client(error) => client_error(py, &errors, error),
            NativeError::Spawn { error, program } => {
                // Python's own words frame it (`[Errno 2] …: 'prog'`): the server's message
                // alone, not the client's "rejected the request" around it.
                let message = match &error {
                    ClientError::Server { message, .. } => message.clone(),
                    other => other.to_string(),
                };
                match error.spawn_failure() {
                    Some(SpawnFailureKind::SpawnNotFound) => {
                        Ok(PyFileNotFoundError::new_err((ENOENT, message, program)))
                    }
                    Some(SpawnFailureKind::SpawnPermissionDenied) => {
                        Ok(PyPermissionError::new_err((EACCES, message, program)))
                    }
                    _ => client_error(py, &errors, error),
                }
            }
            NativeError::Fs { error, path } => match error.kind {
                FsErrorKind::NotFound => {
                    Ok(PyFileNotFoundError::new_err((ENOENT, error.message, path)))
                }
                FsErrorKind::PermissionDenied => {
                    Ok(PyPermissionError::new_err((EACCES, error.message, path)))
                }
                FsErrorKind::Unsupported => made("UnsupportedError", error.message),
                FsErrorKind::InvalidInput | FsErrorKind::Other => {
                    made("FileSystemError", error.message)
                }
            },
            NativeError::Timeout { argv, timeout, stdout, stderr } => {
                let class = errors.getattr("TimeoutExpired")?;
                let kwargs = pyo3::types::PyDict::new(py);
                kwargs.set_item("output", PyBytes::new(py, &stdout))?;
                kwargs.set_item("stderr", PyBytes::new(py, &stderr))?;
                Ok(PyErr::from_value(class.call((argv, timeout), Some(&kwargs))?))
            }
            NativeError::Http(error) => {
                let kind = match &error {
                    HttpError::Invalid(_) => "invalid",
                    HttpError::Failed(_) => "failed",
                    HttpError::Body(_) => "body",
                    HttpError::Remote(_) => "remote",
                };
                Ok(PyErr::from_value(
                    errors.getattr("HttpRequestError")?.call1((error.to_string(), kind))?,
                ))
            }
            NativeError::ProcessLost(failure) => {
                let (kind, server_went_away) = failure_kind(failure.kind);
                let class = errors.getattr("ProcessLost")?;
                Ok(PyErr::from_value(class.call1((failure.message, kind, server_went_away))?))
            }
            NativeError::Mcp(error) => mcp_error(py, &errors, error),
            NativeError::Copy(error) => copy_error(py, &errors, error),
            NativeError::Unsupported(message) => made("UnsupportedError", message),
            NativeError::InvalidArgument(message) => {
                Ok(pyo3::exceptions::PyValueError::new_err(message))
            }
            NativeError::Cancelled => Ok(pyo3::exceptions::PyRuntimeError::new_err(
                "the call was cancelled before it ended",
            )),
        }
    }
}

/// A copy's failure: Python's own exception where one fits (a missing source or directory,
/// permission, a directory where a file goes or the reverse), with the path it is about as
/// its `filename`; a side's own failure as any file operation's; `tether.CopyError` with its
/// `kind` otherwise.
fn copy_error(py: Python<'_>, errors: &Bound<'_, PyModule>, error: CopyError) -> PyResult<PyErr> {
    use pyo3::exceptions::{PyIsADirectoryError, PyNotADirectoryError};
    let message = error.to_string();
    let path = |shown: &tether_tree_copy::Shown| shown.path.display().to_string();
    Ok(match &error {
        CopyError::NotFound(shown)
        | CopyError::NoSuchDirectory(shown)
        | CopyError::SlashOntoNothing(shown) => {
            PyFileNotFoundError::new_err((ENOENT, message, path(shown)))
        }
        CopyError::Denied(shown) => PyPermissionError::new_err((EACCES, message, path(shown))),
        CopyError::IsADirectory(shown)
        | CopyError::LinkToDirectory(shown)
        | CopyError::DirectoryToWriter(shown, _)
        | CopyError::ReaderIntoDirectory(shown, _) => {
            PyIsADirectoryError::new_err((EISDIR, message, path(shown)))
        }
        CopyError::NotADirectoryForSeveral(shown)
        | CopyError::SlashOntoFile(shown)
        | CopyError::ParentNotADirectory(shown)
        | CopyError::DirectoryOntoFile { to: shown, .. } => {
            PyNotADirectoryError::new_err((ENOTDIR, message, path(shown)))
        }
        CopyError::Fs { shown, source } => {
            let error = FsError { kind: source.kind, message };
            return NativeError::Fs { error, path: path(shown) }.raise(py);
        }
        _ => {
            let kind = match &error {
                CopyError::TooManyEntries(_) => "too_many_entries",
                CopyError::TooDeep(_) => "too_deep",
                CopyError::ThroughLink(_) => "through_link",
                CopyError::FileWhereDirectory(_) => "file_where_directory",
                CopyError::NotAFileName { .. } => "not_a_file_name",
                CopyError::DanglingLink(_) => "dangling_link",
                CopyError::Special(_) => "special",
                CopyError::NoName(_) => "no_name",
                _ => "other",
            };
            PyErr::from_value(errors.getattr("CopyError")?.call1((message, kind))?)
        }
    })
}

fn client_error(
    py: Python<'_>,
    errors: &Bound<'_, PyModule>,
    error: ClientError,
) -> PyResult<PyErr> {
    let message = error.to_string();
    let exception = match &error {
        ClientError::Connect(connect) => {
            let (kind, status) = connect_kind(connect.kind);
            errors.getattr("ConnectError")?.call1((message, kind, status))?
        }
        ClientError::Disconnected(end) => {
            let kind = match end.kind {
                DisconnectKind::Closed => "closed",
                DisconnectKind::GoingAway => "going_away",
                DisconnectKind::Silent => "silent",
                DisconnectKind::Transport => "transport",
            };
            errors.getattr("Disconnected")?.call1((message, kind))?
        }
        ClientError::Failed(lost) => {
            errors.getattr("SessionLost")?.call1((message, lost.server_went_away))?
        }
        ClientError::Server { code, data, .. } => {
            let data = match data {
                Some(data) => json_to_python(py, data)?,
                None => py.None().into_bound(py),
            };
            errors.getattr("ServerError")?.call1((message, *code, data))?
        }
        ClientError::Unsupported(_) => errors.getattr("UnsupportedError")?.call1((message,))?,
        ClientError::Protocol(_) => errors.getattr("ProtocolError")?.call1((message,))?,
    };
    Ok(PyErr::from_value(exception))
}

/// An MCP failure as the exception a program decides on: a server program that is not there
/// (or may not be run) is `FileNotFoundError` (`PermissionError`), as for `spawn`; a server
/// that cannot be started otherwise or that wants credentials is a `ConnectError` (kind
/// `"launch"` or `"unauthorized"`), a
/// JSON-RPC refusal a `ServerError` with its code and data, a lost server or stream
/// `Disconnected` (a tool call that got no answer may have run), an expired bound Python's
/// `TimeoutError`, an answer that is not MCP a `ProtocolError`.
fn mcp_error(py: Python<'_>, errors: &Bound<'_, PyModule>, error: McpError) -> PyResult<PyErr> {
    let message = error.to_string();
    let exception = match error {
        McpError::InvalidConfig(_) => return Ok(pyo3::exceptions::PyValueError::new_err(message)),
        McpError::Timeout(_) => return Ok(pyo3::exceptions::PyTimeoutError::new_err(message)),
        // A program that is not there, or may not be run, is Python's own error, as for
        // `spawn`; any other failure to start is the session's failure to connect.
        McpError::Launch {
            spawn_failure: Some(SpawnFailureKind::SpawnNotFound), program, ..
        } => {
            return Ok(PyFileNotFoundError::new_err((ENOENT, message, program)));
        }
        McpError::Launch {
            spawn_failure: Some(SpawnFailureKind::SpawnPermissionDenied),
            program,
            ..
        } => {
            return Ok(PyPermissionError::new_err((EACCES, message, program)));
        }
        McpError::Launch { .. } => {
            errors.getattr("ConnectError")?.call1((message, "launch", py.None()))?
        }
        McpError::Unauthorized { .. } => {
            errors.getattr("ConnectError")?.call1((message, "unauthorized", py.None()))?
        }
        McpError::Server(data) => {
            let details = match &data.data {
                Some(details) => json_to_python(py, details)?,
                None => py.None().into_bound(py),
            };
            errors.getattr("ServerError")?.call1((message, data.code.0, details))?
        }
        McpError::Transport { .. } => {
            errors.getattr("Disconnected")?.call1((message, "transport"))?
        }
        McpError::Initialize(_) | McpError::Unexpected(_) => {
            errors.getattr("ProtocolError")?.call1((message,))?
        }
    };
    Ok(PyErr::from_value(exception))
}

/// A connection failure's kind as `ConnectError.kind`, and the HTTP status when refused.
fn connect_kind(kind: ConnectErrorKind) -> (&'static str, Option<u16>) {
    match kind {
        ConnectErrorKind::InvalidUrl => ("invalid_url", None),
        ConnectErrorKind::InvalidToken => ("invalid_token", None),
        ConnectErrorKind::TlsSetup => ("tls_setup", None),
        ConnectErrorKind::Timeout => ("timeout", None),
        ConnectErrorKind::Refused { status } => ("refused", Some(status)),
        ConnectErrorKind::UntrustedCertificate => ("untrusted_certificate", None),
        ConnectErrorKind::WrongFingerprint => ("wrong_fingerprint", None),
        ConnectErrorKind::NotTls => ("not_tls", None),
        ConnectErrorKind::NotHttp => ("not_http", None),
        ConnectErrorKind::Tls => ("tls", None),
        ConnectErrorKind::Network => ("network", None),
        ConnectErrorKind::Handshake => ("handshake", None),
        _ => ("other", None),
    }
}

/// A process failure's kind as `ProcessLost.kind`, and whether the server had said it was
/// going away (`ProcessLost.server_went_away`: it stopped, and the process with it).
fn failure_kind(kind: ProcessFailureKind) -> (&'static str, bool) {
    match kind {
        ProcessFailureKind::FellBehind => ("fell_behind", false),
        ProcessFailureKind::OutputLost => ("output_lost", false),
        ProcessFailureKind::SessionLost { server_went_away } => ("session_lost", server_went_away),
        ProcessFailureKind::StartUncertain => ("start_uncertain", false),
        ProcessFailureKind::Server => ("server", false),
        ProcessFailureKind::Protocol => ("protocol", false),
        _ => ("other", false),
    }
}

/// A JSON value (an error's `data`) as Python data, through Python's own `json`.
fn json_to_python<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (value.to_string(),))
}
