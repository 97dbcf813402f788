//! This side's files written by a copy down, every one relative to a directory held open: a
//! directory is made and opened without following a link, a file or link is made under its
//! temporary name in that directory, given its mode and time through its own descriptor and
//! renamed into place there. A link already in the target is replaced by what is copied to
//! its name, and is never gone through: where a directory of the copy has a link in its place,
//! the copy stops and says so.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use anyhow::{Context as _, bail};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps, UTIME_OMIT};
use rustix::io::Errno;

/// Flags of every directory a copy opens to write into: never a link, never inherited.
const DIRECTORY: OFlags =
    OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// Opens the directory a copy lands in, as the person named it: links on the way are theirs
/// to name, and followed.
pub(super) fn open_named_directory(path: &Path) -> anyhow::Result<OwnedFd> {
    let path = if path.as_os_str().is_empty() { Path::new(".") } else { path };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    rustix::fs::openat(rustix::fs::CWD, path, flags, Mode::empty())
        .map_err(std::io::Error::from)
        .with_context(|| format!("cannot open the directory {}", path.display()))
}

/// Makes the directory `name` in `parent` (shown as `shown`) unless it is there, and opens it
/// without following a link: a link in its place is refused, since what the copy puts in the
/// directory would land wherever the link points.
pub(super) fn make_directory(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    shown: &Path,
) -> anyhow::Result<OwnedFd> {
    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o777)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(error) => {
            return Err(std::io::Error::from(error))
                .with_context(|| format!("cannot make the directory {}", shown.display()));
        }
    }
    match rustix::fs::openat(parent, name, DIRECTORY, Mode::empty()) {
        Ok(directory) => Ok(directory),
        // With `O_DIRECTORY`, a link is refused as not a directory; which it is only chooses
        // the words.
        Err(Errno::LOOP | Errno::NOTDIR) if is_link(parent, name) => bail!(
            "{} is a symbolic link here, and the copy would write through it; nothing more \
             copied; remove the link, or copy into another directory",
            shown.display()
        ),
        Err(Errno::NOTDIR) => bail!(
            "{} is a file here, where the copy has a directory; remove it, or copy into another \
             directory",
            shown.display()
        ),
        Err(error) => Err(std::io::Error::from(error))
            .with_context(|| format!("cannot open the directory {}", shown.display())),
    }
}

/// Whether `name` in `directory` is a symbolic link.
fn is_link(directory: BorrowedFd<'_>, name: &OsStr) -> bool {
    rustix::fs::statat(directory, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|found| FileType::from_raw_mode(found.st_mode) == FileType::Symlink)
}

/// Makes the file `staged` in `directory`, new (never an existing one, never through a link).
pub(super) fn create_staged(directory: BorrowedFd<'_>, staged: &OsStr) -> std::io::Result<File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = rustix::fs::openat(directory, staged, flags, Mode::from_raw_mode(0o666))?;
    Ok(File::from(file))
}

/// Makes the link `staged` in `directory`, pointing at `target`.
pub(super) fn create_staged_link(
    directory: BorrowedFd<'_>,
    staged: &OsStr,
    target: &str,
) -> std::io::Result<()> {
    Ok(rustix::fs::symlinkat(target, directory, staged)?)
}

/// What a staged entry is, for [`place_staged`]: a file is given its mode and time through its
/// own descriptor, a link its time alone (a link's mode is not its own).
pub(super) enum Staged {
    File(File),
    Link,
}

/// Puts `staged` in `directory` (`written` says whether it was written whole) in place as
/// `name`, shown as `shown`, with `mode` and `modified_ms`; removes it if any of that fails.
/// The rename replaces whatever `name` is, a link included, and goes through none.
pub(super) fn place_staged(
    directory: BorrowedFd<'_>,
    (staged, name, shown): (&OsStr, &OsStr, &Path),
    written: anyhow::Result<Staged>,
    (mode, modified_ms): (Option<u32>, Option<i64>),
) -> anyhow::Result<()> {
    let context = || format!("cannot set the mode and time of {}", shown.display());
    let placed = written
        .and_then(|staged_as| {
            match staged_as {
                Staged::File(file) => set_metadata(file.as_fd(), mode, modified_ms),
                Staged::Link => set_link_time(directory, staged, modified_ms),
            }
            .with_context(context)
        })
        .and_then(|()| {
            rustix::fs::renameat(directory, staged, directory, name)
                .map_err(std::io::Error::from)
                .with_context(|| format!("cannot write {}", shown.display()))
        });
    if placed.is_err() {
        let _ = rustix::fs::unlinkat(directory, staged, AtFlags::empty());
    }
    placed
}

/// Gives a directory made here the mode and time it had there, through its descriptor.
pub(super) fn set_directory_metadata(
    directory: BorrowedFd<'_>,
    (mode, modified_ms): (Option<u32>, Option<i64>),
    shown: &Path,
) -> anyhow::Result<()> {
    set_metadata(directory, mode, modified_ms)
        .with_context(|| format!("cannot set the mode and time of {}", shown.display()))
}

fn set_metadata(
    fd: BorrowedFd<'_>,
    mode: Option<u32>,
    modified_ms: Option<i64>,
) -> std::io::Result<()> {
    if let Some(mode) = mode {
        rustix::fs::fchmod(fd, Mode::from_raw_mode(mode & 0o7777))?;
    }
    if let Some(ms) = modified_ms {
        rustix::fs::futimens(fd, &modified(ms))?;
    }
    Ok(())
}

fn set_link_time(
    directory: BorrowedFd<'_>,
    link: &OsStr,
    modified_ms: Option<i64>,
) -> std::io::Result<()> {
    let Some(ms) = modified_ms else { return Ok(()) };
    Ok(rustix::fs::utimensat(directory, link, &modified(ms), AtFlags::SYMLINK_NOFOLLOW)?)
}

/// A modification time of `ms` milliseconds since 1970 (negative: before), the access time
/// left as it is.
fn modified(ms: i64) -> Timestamps {
    Timestamps {
        last_access: Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT },
        last_modification: Timespec {
            tv_sec: ms.div_euclid(1000),
            tv_nsec: (ms.rem_euclid(1000) * 1_000_000) as _,
        },
    }
}

/// Refuses a new file here whose directory is not there, in those words rather than as the
/// failed write of its temporary name.
pub(super) fn check_local_parent(path: &Path) -> anyhow::Result<()> {
    let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) else {
        return Ok(());
    };
    match std::fs::metadata(parent) {
        Ok(found) if found.is_dir() => Ok(()),
        Ok(_) => bail!("{} is not a directory", parent.display()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => bail!(
            "{}: no such directory; make it first, or copy into a directory that exists",
            parent.display()
        ),
        Err(error) => Err(error).with_context(|| format!("cannot look at {}", parent.display())),
    }
}
