//! The Codex app-server's socket directory, `/tmp/codex-daemon-<uid>`, hidden from every full
//! sandbox.
//!
//! A Codex daemon running as the server's user listens on sockets in that directory, and it
//! runs what it is asked to, unconfined. A sandboxed command that may use the network could
//! reach it (a Unix socket needs no network namespace), so the directory is masked in every
//! full sandbox with an empty, unreadable, read-only one, as the reference masks it. What the
//! mask stands on must be right:
//!
//! - missing, the directory is made (`0700`, as the daemon makes it), so that the mask always
//!   has its place and a daemon started later finds its directory where the mask covers it;
//! - present, it must be a directory, not a link, owned by the server's user, with mode `0700`:
//!   anything else is someone else's, or a daemon's setup gone wrong, and the sandbox is not
//!   built ([`SocketDirRefused`], in the reference's words);
//! - where it cannot be made (no `/tmp`, a read-only one), nothing can be there to hide, and
//!   nothing is masked.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode the directory must have: its owner's alone.
const PRIVATE_MODE: u32 = 0o700;

/// The socket directory is there but not as the daemon makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("app-server socket directory must be a user-owned directory with mode 0700")]
pub struct SocketDirRefused;

/// The socket directory of the server's user.
pub fn path() -> PathBuf {
    PathBuf::from(format!("/tmp/codex-daemon-{}", rustix::process::geteuid().as_raw()))
}

/// The directory at `path` to mask for `uid`, made if missing: `None` when it is not there and
/// cannot be made.
pub fn prepare(path: &Path, uid: u32) -> Result<Option<PathBuf>, SocketDirRefused> {
    match std::fs::DirBuilder::new().mode(PRIVATE_MODE).create(path) {
        Ok(()) => return Ok(Some(path.to_path_buf())),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => return Ok(None),
    }
    let metadata = std::fs::symlink_metadata(path).map_err(|_| SocketDirRefused)?;
    let private = metadata.permissions().mode() & 0o7777 == PRIVATE_MODE;
    match metadata.is_dir() && metadata.uid() == uid && private {
        true => Ok(Some(path.to_path_buf())),
        false => Err(SocketDirRefused),
    }
}

#[cfg(test)]
mod tests {
    use tether_testkit::scratch::Scratch;

    use super::*;

    fn uid() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    #[test]
    fn a_missing_directory_is_made_private_and_an_existing_private_one_is_kept() {
        let scratch = Scratch::new("made");
        let base = scratch.path("");
        let dir = base.join("codex-daemon");
        assert_eq!(prepare(&dir, uid()), Ok(Some(dir.clone())));
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        std::fs::write(dir.join("daemon.sock"), "").unwrap();
        assert_eq!(prepare(&dir, uid()), Ok(Some(dir.clone())));
        assert!(dir.join("daemon.sock").exists(), "what is in it is left alone");
    }

    #[test]
    fn anything_but_a_private_directory_of_the_user_is_refused() {
        let scratch = Scratch::new("refused");
        let base = scratch.path("");
        let open = base.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = base.join("file");
        std::fs::write(&file, "").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o700)).unwrap();
        let private = base.join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&private, &link).unwrap();
        for path in [&open, &file, &link] {
            assert_eq!(prepare(path, uid()), Err(SocketDirRefused), "{}", path.display());
        }
        // Someone else's, however private.
        assert_eq!(prepare(&private, uid() + 1), Err(SocketDirRefused));
        assert_eq!(
            SocketDirRefused.to_string(),
            "app-server socket directory must be a user-owned directory with mode 0700"
        );
    }

    #[test]
    fn where_it_cannot_be_made_nothing_is_masked() {
        let scratch = Scratch::new("unmakeable");
        let base = scratch.path("");
        assert_eq!(prepare(&base.join("no/such/parent/codex-daemon"), uid()), Ok(None));
    }
}
