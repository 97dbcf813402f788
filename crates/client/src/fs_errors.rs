//! A filesystem call's failure as the engine's [`FsError`], decided on the server's error
//! code, with the server's words.

use tether_engine::fs::{FsError, FsErrorKind};
use tether_protocol::error::{INVALID_REQUEST, METHOD_NOT_FOUND, NOT_FOUND};
use tether_protocol::fs::{FsFailure, FsFailureKind};

use crate::error::ClientError;

/// The server's message with the kind its code stands for (`-32004` not found, `-32600`
/// invalid input — or permission denied where Tether's `error.data` says so; the reference
/// answers a refusal with the same code and no data — `-32601` unsupported, anything else
/// other); what the client itself reports (a drop, a lost session) is other, in its words.
pub(crate) fn fs_error(error: ClientError) -> FsError {
    match error {
        ClientError::Server { code: NOT_FOUND, message, .. } => FsError::not_found(message),
        ClientError::Server { code: INVALID_REQUEST, message, data: Some(data) }
            if <FsFailure as serde::Deserialize>::deserialize(&data)
                .is_ok_and(|failure| failure.kind == FsFailureKind::PermissionDenied) =>
        {
            FsError::new(FsErrorKind::PermissionDenied, message)
        }
        ClientError::Server { code: INVALID_REQUEST, message, .. } => {
            FsError::invalid_input(message)
        }
        ClientError::Server { code: METHOD_NOT_FOUND, message, .. } => {
            FsError::unsupported(message)
        }
        ClientError::Server { message, .. } => FsError::other(message),
        error => FsError::other(error.to_string()),
    }
}

/// Which way a stream goes, for its errors.
#[derive(Debug, Clone, Copy)]
pub(crate) enum StreamOf {
    Read,
    Write,
}

/// As [`fs_error`], saying why a dropped connection ends the stream for good.
pub(crate) fn stream_error(error: ClientError, of: StreamOf) -> FsError {
    let what = match of {
        StreamOf::Read => "read",
        StreamOf::Write => "write",
    };
    match error {
        ClientError::Disconnected(reason) => FsError::other(format!(
            "exec-server connection dropped during a streamed file {what} ({reason}); its file handle went with the connection, so the {what} cannot be resumed"
        )),
        error => fs_error(error),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn invalid_request(data: Option<serde_json::Value>) -> ClientError {
        ClientError::Server { code: INVALID_REQUEST, message: "m".into(), data }
    }

    /// `-32600` is a refusal where Tether's data says so, and invalid input otherwise (the
    /// reference's, which gives no data, and any data this client does not know).
    #[test]
    fn a_refusal_is_told_from_invalid_input_by_its_data() {
        let denied = fs_error(invalid_request(Some(json!({"kind": "permissionDenied"}))));
        assert_eq!((denied.kind, denied.message.as_str()), (FsErrorKind::PermissionDenied, "m"));
        for data in [None, Some(json!({"kind": "somethingNew"})), Some(json!("text"))] {
            assert_eq!(fs_error(invalid_request(data)).kind, FsErrorKind::InvalidInput);
        }
    }
}
