//! What every request passes before the filesystem is touched: its sandbox intent, then its
//! path.

use std::path::{Path, PathBuf};

use tether_protocol::PathUri;
use tether_protocol::sandbox::SandboxContext;

use super::FsError;
use super::blocking::blocking;
use super::sandboxed::{self, FromOutcome, HelperOp};
use crate::sandbox::policy::{self, Confinement, Context, FullPolicy, PolicyError};

/// Where a request's work may run.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Here, directly: no intent, or one that does not restrict this work.
    InProcess,
    /// In a helper inside the sandbox the policy describes.
    Sandboxed(Box<FullPolicy>),
}

impl Admission {
    /// Runs `op` where the admission says, and answers what it yields.
    pub(crate) async fn perform<Op: HelperOp, T: FromOutcome + Send + 'static>(
        self,
        op: Op,
    ) -> Result<T, FsError> {
        match self {
            Admission::InProcess => T::expect(blocking(move || op.apply()).await?),
            Admission::Sandboxed(policy) => sandboxed::run(&policy, op).await,
        }
    }
}

/// What the work does, which decides whether a restriction applies to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    Read,
    Write,
}

/// Decides where the work runs under `sandbox`. Reads need the sandbox only where the intent
/// hides something or does not make `/` readable; writes wherever the filesystem is
/// restricted. A `useLegacyLandlock` restriction is refused as the reference refuses it.
pub(crate) fn admit(sandbox: Option<&SandboxContext>, work: Work) -> Result<Admission, FsError> {
    let Some(intent) = sandbox else { return Ok(Admission::InProcess) };
    let tmpdir = std::env::var("TMPDIR").ok();
    let context = Context {
        request_cwd: Path::new("/"),
        tmpdir: tmpdir.as_deref(),
        slash_tmp_is_dir: Path::new("/tmp").is_dir(),
    };
    let confinement = policy::resolve(intent, context).map_err(|error| {
        FsError::invalid_input(match error {
            PolicyError::InvalidPath(uri) => {
                format!("invalid sandbox permission path URI: '{uri}' is invalid on 'linux'")
            }
            PolicyError::MxcUnavailable => {
                format!("failed to prepare fs sandbox: failed to prepare MXC sandbox: {error}")
            }
        })
    })?;
    match confinement {
        Confinement::Unconfined | Confinement::NetworkFilter => Ok(Admission::InProcess),
        Confinement::LegacyLandlock => Err(FsError::other(
            "fs sandbox helper failed with status exit status: 101: filesystem-restricted \
             execution requires bubblewrap; `useLegacyLandlock` (Landlock alone) cannot confine \
             it as asked: send the intent without it",
        )),
        Confinement::Full(full) if work == Work::Read && full.reads_everything() => {
            Ok(Admission::InProcess)
        }
        Confinement::Full(full) => Ok(Admission::Sandboxed(Box::new(full))),
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

    fn intent(value: serde_json::Value) -> SandboxContext {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn restricted_writes_go_to_the_sandbox_and_reads_of_everything_stay_here() {
        assert!(matches!(admit(None, Work::Write), Ok(Admission::InProcess)));
        let disabled = intent(json!({"permissions": {"type": "disabled"},
            "windowsSandboxLevel": "disabled"}));
        assert!(matches!(admit(Some(&disabled), Work::Write), Ok(Admission::InProcess)));
        let read_only = intent(json!({"permissions": {"type": "managed", "network": "restricted",
            "file_system": {"type": "restricted", "entries": [
                {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}]}},
            "windowsSandboxLevel": "disabled"}));
        assert!(matches!(admit(Some(&read_only), Work::Read), Ok(Admission::InProcess)));
        assert!(matches!(admit(Some(&read_only), Work::Write), Ok(Admission::Sandboxed(_))));
    }
}
