//! Opening files for `fs/readFile`, `fs/writeFile` and `fs/open`.
//!
//! Reads take regular files only, and check that before opening: opening a FIFO for reading
//! waits for a writer (a request that never answers, holding its connection), and opening a
//! device can have effects of its own. Every open is non-blocking as well, so a path swapped
//! for a FIFO between the check and the open cannot hang either.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use super::no_follow;
use super::piecewise;

/// Opens the regular file at `path` for reading, as `fs/readFile` does.
pub(crate) fn open_for_reading(path: &Path, follow_symlinks: bool) -> io::Result<File> {
    if follow_symlinks { open_for_read(path) } else { open_for_read_no_follow(path) }
}

/// Opens a regular file for reading, following links; anything else is ``path `<p>` is not a
/// file``.
pub(crate) fn open_for_read(path: &Path) -> io::Result<File> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(not_a_file(path));
    }
    let file =
        OpenOptions::new().read(true).custom_flags(libc_flags(OFlags::NONBLOCK)).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(not_a_file(path));
    }
    Ok(file)
}

/// Opens a regular file for reading without following links: a link as the last component is
/// `ELOOP` (as `O_NOFOLLOW` reports it), anything but a regular file is `path is not a regular
/// file` (the reference's words for this mode).
fn open_for_read_no_follow(path: &Path) -> io::Result<File> {
    let beneath = no_follow::parent_of(path)?;
    match no_follow::file_type(&beneath.stat()?) {
        FileType::RegularFile => {}
        FileType::Symlink => return Err(Errno::LOOP.into()),
        _ => return Err(not_a_regular_file()),
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = File::from(rustix::fs::openat(&beneath.dir, &beneath.name, flags, Mode::empty())?);
    if !file.metadata()?.is_file() {
        return Err(not_a_regular_file());
    }
    Ok(file)
}

/// Replaces the contents of `path` with `bytes`, creating it if needed (see
/// [`open_for_write`]).
pub(crate) fn write_whole(path: &Path, bytes: &[u8], follow_symlinks: bool) -> io::Result<()> {
    piecewise::write_all(&open_for_write(path, follow_symlinks)?, bytes)
}

/// Creates or truncates `path` for writing, in place: an existing file keeps its inode, its
/// mode and its other hard links, and a link is written through (a dangling one creates its
/// target). Without following, a link as the last component is `ELOOP`.
///
/// A FIFO without a reader is `No such device or address` rather than a request that waits
/// forever for one; with a reader, writes block as they would for any writer.
pub(crate) fn open_for_write(path: &Path, follow_symlinks: bool) -> io::Result<File> {
    let file = if follow_symlinks {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc_flags(OFlags::NONBLOCK))
            .open(path)?
    } else {
        let beneath = no_follow::parent_of(path)?;
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::TRUNC
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(0o666);
        File::from(rustix::fs::openat(&beneath.dir, &beneath.name, flags, mode)?)
    };
    let flags = rustix::fs::fcntl_getfl(&file)?;
    rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK)?;
    Ok(file)
}

/// [`open_for_write`] following links, of `name` in `directory`.
pub(crate) fn open_for_write_at(directory: BorrowedFd<'_>, name: &OsStr) -> io::Result<File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NONBLOCK;
    let file = File::from(rustix::fs::openat(
        directory,
        name,
        flags | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o666),
    )?);
    let flags = rustix::fs::fcntl_getfl(&file)?;
    rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK)?;
    Ok(file)
}

fn not_a_file(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("path `{}` is not a file", path.display()))
}

fn not_a_regular_file() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "path is not a regular file")
}

/// `OpenOptionsExt::custom_flags` takes the C type.
fn libc_flags(flags: OFlags) -> i32 {
    flags.bits() as i32
}
