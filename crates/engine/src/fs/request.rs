//! What every request passes before the filesystem is touched: its sandbox intent, then its
//! path.

use std::path::PathBuf;

use serde_json::Value;
use tether_protocol::PathUri;

use super::FsError;
use crate::sandbox;

/// Refuses a sandbox intent Tether cannot honour (`-32600`), before anything is read or
/// written: a client that asked for confinement must not get an unconfined operation. `null` or
/// absent asks for nothing.
pub(crate) fn admit(sandbox: Option<&Value>) -> Result<(), FsError> {
    match sandbox {
        Some(intent) => sandbox::check_intent(intent).map_err(FsError::invalid_input),
        None => Ok(()),
    }
}

/// The native path a `file:` URI names on this host.
///
/// A URI with another host is invalid input (`'file://otherhost/x' is invalid on 'linux'`, as
/// the reference words it). The path is rebuilt from its components, so a trailing slash or an
/// inner `.` or `//` does not change which file it names: the reference reads `file:///f/` as
/// the file `/f`, where the OS would refuse it as not a directory.
pub(crate) fn native_path(uri: &PathUri) -> Result<PathBuf, FsError> {
    let path = uri.to_path().map_err(|error| FsError::invalid_input(error.to_string()))?;
    Ok(path.components().collect())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fs::FsErrorKind;

    #[test]
    fn trailing_slashes_and_dots_do_not_change_the_path() {
        for text in
            ["file:///tmp/a/", "file:///tmp/./a", "file:///tmp//a", "file://localhost/tmp/a"]
        {
            let uri = PathUri::parse(text).unwrap();
            assert_eq!(native_path(&uri).unwrap(), PathBuf::from("/tmp/a"), "{text}");
        }
        assert_eq!(native_path(&PathUri::parse("file:///").unwrap()).unwrap(), PathBuf::from("/"));
    }

    #[test]
    fn other_hosts_are_invalid_input() {
        let error = native_path(&PathUri::parse("file://otherhost/tmp/a").unwrap()).unwrap_err();
        assert_eq!(error.kind, FsErrorKind::InvalidInput);
        assert!(error.message.starts_with("'file://otherhost/tmp/a' is invalid on '"), "{error}");
    }

    #[test]
    fn restrictive_sandboxes_are_refused_and_null_is_no_sandbox() {
        admit(None).unwrap();
        admit(Some(&Value::Null)).unwrap();
        admit(Some(&json!({"permissions": {"type": "disabled"}}))).unwrap();
        let read_only = json!({"permissions": {"type": "managed",
            "file_system": {"type": "restricted", "entries": []}, "network": "restricted"}});
        let error = admit(Some(&read_only)).unwrap_err();
        assert_eq!(error.kind, FsErrorKind::InvalidInput);
        assert!(error.message.starts_with(sandbox::CANNOT_ENFORCE), "{error}");
    }
}
