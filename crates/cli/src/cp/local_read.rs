//! This side's files read by a copy up, every one relative to a directory held open and none
//! through a link: an entry is looked at without following it, opened without following it
//! (a link put in its place meanwhile is refused), and what is copied — its bytes, mode and
//! time, a directory's listing — comes from the descriptor that was opened, never from its path
//! again. A link is copied as a link, never as what it points to.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use anyhow::{Context as _, bail};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::limits::Budget;
use super::{Entry, Kind};

/// An entry here, opened to be copied.
pub(super) enum Opened {
    /// Its listing is read from this descriptor, and what it holds relative to it.
    Directory(OwnedFd),
    /// Its bytes are read from this file.
    File(File),
    /// Where it points.
    Link(String),
}

/// Opens `name` in `directory` (`CWD` for a root, where `name` is the path as the person
/// wrote it: links on its way are theirs) without following it, shown as `shown`.
pub(super) fn open_entry(
    directory: BorrowedFd<'_>,
    name: &OsStr,
    shown: &Path,
) -> anyhow::Result<(Entry, Opened)> {
    let cannot_read = || format!("cannot read {}", shown.display());
    let found = match rustix::fs::statat(directory, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(found) => found,
        Err(Errno::NOENT) => bail!("{}: no such file or directory", shown.display()),
        Err(error) => return Err(std::io::Error::from(error)).with_context(cannot_read),
    };
    let kind = FileType::from_raw_mode(found.st_mode);
    let opened = match kind {
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(directory, name, Vec::new())
                .map_err(std::io::Error::from)
                .with_context(cannot_read)?;
            let target = target
                .into_string()
                .ok()
                .with_context(|| format!("{}: its link target is not UTF-8", shown.display()))?;
            return Ok((entry(name, Kind::Link, &found), Opened::Link(target)));
        }
        FileType::Directory => OFlags::DIRECTORY,
        // Never blocks on a FIFO put in its place meanwhile; no effect on a file's reads.
        FileType::RegularFile => OFlags::NONBLOCK,
        _ => return Err(SpecialFile(shown.to_owned()).into()),
    };
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | opened;
    let fd = match rustix::fs::openat(directory, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::LOOP | Errno::NOTDIR) => changed(shown)?,
        Err(Errno::ACCESS | Errno::PERM) => return Err(Denied(shown.to_owned()).into()),
        Err(error) => return Err(std::io::Error::from(error)).with_context(cannot_read),
    };
    let found = rustix::fs::fstat(&fd).map_err(std::io::Error::from).with_context(cannot_read)?;
    match FileType::from_raw_mode(found.st_mode) {
        FileType::Directory if kind == FileType::Directory => {
            Ok((entry(name, Kind::Directory, &found), Opened::Directory(fd)))
        }
        FileType::RegularFile if kind == FileType::RegularFile => {
            let size = found.st_size as u64;
            Ok((entry(name, Kind::File { size }, &found), Opened::File(File::from(fd))))
        }
        _ => changed(shown),
    }
}

/// The file a link named on the command line leads to, opened through it (as `cp` copies such
/// a link without `-r`), under the link's own name.
pub(super) fn open_followed(path: &Path) -> anyhow::Result<(Entry, Opened)> {
    let cannot_read = || format!("cannot read {}", path.display());
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            bail!("{}: a link to nothing (its target is not there)", path.display())
        }
        Err(error) => return Err(error).with_context(cannot_read),
    };
    let found = rustix::fs::fstat(&file).map_err(std::io::Error::from).with_context(cannot_read)?;
    let name = path.file_name().unwrap_or(path.as_os_str());
    match FileType::from_raw_mode(found.st_mode) {
        FileType::RegularFile => {
            let size = found.st_size as u64;
            Ok((entry(name, Kind::File { size }, &found), Opened::File(file)))
        }
        FileType::Directory => bail!("{} leads to a directory; copy it with -r", path.display()),
        _ => Err(SpecialFile(path.to_owned()).into()),
    }
}

/// A FIFO, socket or device: nothing a copy can carry. Named on the command line it is an
/// error; met in a tree it is skipped, and counted.
#[derive(Debug, thiserror::Error)]
#[error("{} is neither a file, a directory nor a link", .0.display())]
pub(super) struct SpecialFile(pub(super) std::path::PathBuf);

/// A file or directory this side may not read: named on the command line it is the copy's
/// error, as cp's; met in a tree it is said, skipped, and counted, and the copy goes on.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: permission denied", .0.display())]
pub(super) struct Denied(pub(super) std::path::PathBuf);

fn changed<T>(shown: &Path) -> anyhow::Result<T> {
    bail!("{} changed while it was being copied; copy it again", shown.display())
}

fn entry(name: &OsStr, kind: Kind, found: &Stat) -> Entry {
    let modified_ms = found.st_mtime * 1000 + found.st_mtime_nsec as i64 / 1_000_000;
    Entry {
        name: name.to_owned(),
        kind,
        mode: Some(found.st_mode & 0o7777),
        modified_ms: Some(modified_ms),
    }
}

/// The names in `directory` (shown as `shown`), sorted, counted against the copy's budget.
pub(super) fn list(
    directory: BorrowedFd<'_>,
    shown: &Path,
    budget: &mut Budget,
) -> anyhow::Result<Vec<OsString>> {
    let cannot_list = || format!("cannot list {}", shown.display());
    let listing = rustix::fs::Dir::read_from(directory)
        .map_err(std::io::Error::from)
        .with_context(cannot_list)?;
    let mut names = Vec::new();
    for found in listing {
        let found = found.map_err(std::io::Error::from).with_context(cannot_list)?;
        let name = found.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(name).to_owned());
            budget.listed(1, shown.display())?;
        }
    }
    names.sort();
    Ok(names)
}
