//! Mount targets made on the host for paths that do not exist.
//!
//! A writable root's missing `.git` (or `.agents`, `.codex`, `.aws`) is covered inside the
//! sandbox by an empty read-only directory, so the command cannot create one; a missing path
//! the intent hides (`none`) is covered by an empty read-only file, for the same reason. A
//! mount needs a target, and the target lies on the host, so an empty directory or file
//! appears there while the command runs. Tether removes it when the last sandbox using it has
//! ended.
//!
//! The count is what keeps this safe: removing the target while another sandbox still has
//! something mounted on it would detach that mount, and that command could then create the
//! name it must not. So each path is counted across the server, and removed at zero — only
//! if it is still the empty directory or file Tether made.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags};

/// What a target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Directory,
    File,
}

/// Paths Tether made, with what each is and how many live sandboxes use it.
type Targets = HashMap<PathBuf, (Kind, usize)>;

static IN_USE: Mutex<Option<Targets>> = Mutex::new(None);

fn in_use() -> MutexGuard<'static, Option<Targets>> {
    IN_USE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The targets one sandbox holds; dropping it lets them go.
#[derive(Debug, Default)]
pub struct SyntheticTargets {
    held: Vec<PathBuf>,
}

impl SyntheticTargets {
    /// Makes `path` an empty directory or file for the sandbox about to start, if it does not
    /// exist, and holds it; one a sandbox still running made is held too. A path that already
    /// exists and was not made here is not held (it is the user's, and stays): `false`.
    /// Deciding and holding happen under the lock that removes targets, so a target found
    /// made here cannot be removed before this sandbox lets it go.
    pub fn make(&mut self, path: &Path, kind: Kind) -> std::io::Result<bool> {
        let mut guard = in_use();
        let targets = guard.get_or_insert_with(HashMap::new);
        if let Some((_, count)) = targets.get_mut(path) {
            *count += 1;
        } else {
            let made = make_beneath(path, kind);
            match made {
                Ok(()) => {}
                // Somebody else's: mounted over all the same, never removed.
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                    return Ok(false);
                }
                Err(error) => return Err(error),
            }
            targets.insert(path.to_path_buf(), (kind, 1));
        }
        self.held.push(path.to_path_buf());
        Ok(true)
    }

    /// Holds `path` for this sandbox too if a sandbox still running made it (its kind), under
    /// the same lock; `None` if it was not made here.
    pub fn hold_if_made(&mut self, path: &Path) -> Option<Kind> {
        let mut guard = in_use();
        let (kind, count) = guard.as_mut()?.get_mut(path)?;
        *count += 1;
        let kind = *kind;
        drop(guard);
        self.held.push(path.to_path_buf());
        Some(kind)
    }
}

impl Drop for SyntheticTargets {
    fn drop(&mut self) {
        let mut guard = in_use();
        let Some(targets) = guard.as_mut() else { return };
        for path in self.held.drain(..) {
            let Some((kind, count)) = targets.get_mut(&path) else { continue };
            *count -= 1;
            if *count == 0 {
                let kind = *kind;
                targets.remove(&path);
                // Only what is still empty goes; anything put there since stays.
                let _ = remove_if_empty(&path, kind);
            }
        }
    }
}

/// The directory `path` lies in, reached without following a link anywhere on the way: a
/// sandboxed command that swapped a link in since the path was checked cannot have the server
/// make or remove anything where the link leads.
fn parent_beneath(path: &Path) -> std::io::Result<(OwnedFd, &OsStr)> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::ErrorKind::InvalidInput.into());
    };
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let no_links = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    Ok((rustix::fs::openat2(CWD, parent, flags, Mode::empty(), no_links)?, name))
}

/// An empty directory, or an empty file of mode `0600`, made at `path`.
fn make_beneath(path: &Path, kind: Kind) -> std::io::Result<()> {
    let (parent, name) = parent_beneath(path)?;
    match kind {
        Kind::Directory => rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o777))?,
        Kind::File => {
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
            drop(rustix::fs::openat(
                &parent,
                name,
                flags | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )?)
        }
    }
    Ok(())
}

/// Removes what was made at `path` if it is still the empty directory or file made there.
fn remove_if_empty(path: &Path, kind: Kind) -> std::io::Result<()> {
    let (parent, name) = parent_beneath(path)?;
    match kind {
        // Refused by the kernel unless empty.
        Kind::Directory => rustix::fs::unlinkat(&parent, name, AtFlags::REMOVEDIR)?,
        Kind::File => {
            let stat = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
            if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile && stat.st_size == 0 {
                rustix::fs::unlinkat(&parent, name, AtFlags::empty())?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_holder_removes_what_was_made_and_the_users_own_stays() {
        let dir = std::env::temp_dir().join(format!("tether-synthetic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let made = dir.join(".git");
        let (mut first, mut second) = (SyntheticTargets::default(), SyntheticTargets::default());
        first.make(&made, Kind::Directory).unwrap();
        second.make(&made, Kind::Directory).unwrap();
        assert!(made.is_dir());
        drop(first);
        assert!(made.is_dir(), "still used by the second sandbox");
        drop(second);
        assert!(!made.exists());

        // A sandbox that starts while another's target exists holds it too, however it
        // finds it, so the first to end does not remove what the other still mounts on.
        let (mut first, mut second, mut third) =
            (SyntheticTargets::default(), SyntheticTargets::default(), SyntheticTargets::default());
        assert!(first.make(&made, Kind::Directory).unwrap());
        assert!(second.make(&made, Kind::Directory).unwrap(), "made here: held");
        assert_eq!(third.hold_if_made(&made), Some(Kind::Directory));
        drop(first);
        drop(second);
        assert!(made.is_dir(), "still used by the third sandbox");
        drop(third);
        assert!(!made.exists());

        let users = dir.join(".codex");
        std::fs::create_dir(&users).unwrap();
        let mut held = SyntheticTargets::default();
        assert!(!held.make(&users, Kind::Directory).unwrap(), "the user's: not held");
        assert_eq!(held.hold_if_made(&users), None);
        drop(held);
        assert!(users.is_dir(), "not made here, so not removed");

        let file = dir.join("absent");
        let mut held = SyntheticTargets::default();
        held.make(&file, Kind::File).unwrap();
        assert!(file.is_file());
        drop(held);
        assert!(!file.exists());
        let mut held = SyntheticTargets::default();
        held.make(&file, Kind::File).unwrap();
        std::fs::write(&file, "written meanwhile").unwrap();
        drop(held);
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "written meanwhile",
            "not empty, so kept"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
