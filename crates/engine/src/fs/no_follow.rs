//! Reaching a path without following any symbolic link: `followSymlinks: false`.
//!
//! A client that turns following off wants the operation to act on exactly the path it named,
//! never on wherever a link would redirect it. Resolving the path by hand is not enough: a
//! component checked to be a directory could be swapped for a link before it is used. So every
//! directory on the way is opened relative to the one before it with `O_NOFOLLOW |
//! O_DIRECTORY`, and the operation then acts on the last component relative to its parent's
//! descriptor. A link as a directory component fails with `Not a directory (os error 20)`,
//! which is also what the reference reports.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, Statx, StatxFlags};
use rustix::io::Errno;

/// A path's parent directory, reached without following links, and its last component.
pub(crate) struct Beneath {
    pub dir: OwnedFd,
    /// The last component; `.` for `/`, so the root itself can be examined the same way.
    pub name: OsString,
}

impl Beneath {
    /// What the last component is, the component itself and not a link's target.
    pub fn stat(&self) -> io::Result<Statx> {
        let mask = StatxFlags::BASIC_STATS | StatxFlags::BTIME;
        Ok(rustix::fs::statx(&self.dir, &self.name, AtFlags::SYMLINK_NOFOLLOW, mask)?)
    }
}

/// The file type a `statx` reported.
pub(crate) fn file_type(stat: &Statx) -> FileType {
    FileType::from_raw_mode(stat.stx_mode.into())
}

/// Opens the directories leading to `path`'s last component. A missing one is not found, a
/// file or a link among them is `Not a directory`.
pub(crate) fn parent_of(path: &Path) -> io::Result<Beneath> {
    let mut names = names(path);
    let name = names.pop().map_or_else(|| OsString::from("."), OsStr::to_os_string);
    let mut dir = root()?;
    for directory in names {
        dir = open_directory(&dir, directory)?;
    }
    Ok(Beneath { dir, name })
}

/// `mkdir -p` that creates each missing directory beneath its parent's descriptor and never
/// passes through a link: an existing component that is a link or a file is `Not a
/// directory`, an existing directory is reused.
pub(crate) fn create_dir_all(path: &Path) -> io::Result<()> {
    let mut dir = root()?;
    for name in names(path) {
        dir = match open_directory(&dir, name) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
                    // Someone else created it meanwhile: use theirs, if it is a directory.
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(error) => return Err(error.into()),
                }
                open_directory(&dir, name)?
            }
            opened => opened?,
        };
    }
    Ok(())
}

/// The components after `/`. Request paths are absolute and rebuilt from their components, so
/// only names (and, in principle, `..`, which is never a link) remain.
fn names(path: &Path) -> Vec<&OsStr> {
    path.components()
        .filter_map(|component| match component {
            Component::Normal(name) => Some(name),
            Component::ParentDir => Some(OsStr::new("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

fn root() -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(CWD, "/", directory_flags(), Mode::empty())?)
}

/// `O_PATH` needs only search permission on the directory, as following the path would.
fn open_directory(parent: &impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(parent, name, directory_flags() | OFlags::NOFOLLOW, Mode::empty())?)
}

fn directory_flags() -> OFlags {
    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_is_its_own_parent() {
        let beneath = parent_of(Path::new("/")).unwrap();
        assert_eq!(beneath.name, ".");
        assert_eq!(file_type(&beneath.stat().unwrap()), FileType::Directory);
    }

    #[test]
    fn links_on_the_way_are_not_directories() {
        let dir = std::env::temp_dir().join(format!("tether-no-follow-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("real")).unwrap();
        let _ = std::fs::remove_file(dir.join("link"));
        std::os::unix::fs::symlink("real", dir.join("link")).unwrap();

        let error = parent_of(&dir.join("link/x")).err().unwrap();
        assert_eq!(error.raw_os_error(), Some(20), "{error}");
        let beneath = parent_of(&dir.join("link")).unwrap();
        assert_eq!(file_type(&beneath.stat().unwrap()), FileType::Symlink);
        assert_eq!(create_dir_all(&dir.join("link/y")).unwrap_err().raw_os_error(), Some(20));
        create_dir_all(&dir.join("real/a/b")).unwrap();
        assert!(dir.join("real/a/b").is_dir());

        std::fs::remove_dir_all(&dir).unwrap();
    }
}
