//! `fs/putFile`: a whole file put in place at once, as a copy wants it.
//!
//! The bytes go to a new file under a temporary name in the destination's directory, which
//! gets its mode and modification time there, and is then renamed onto the destination: a
//! reader sees the old file or the new one, never a part of either, and a failure at any step
//! removes the temporary file and leaves the destination as it was. Everything happens
//! relative to one descriptor of the directory, so a directory swapped meanwhile cannot send
//! the rename somewhere the temporary file is not.
//!
//! The temporary file is a stage (see [`super::stage`]): held locked until it is renamed, so
//! a server killed in the middle leaves one that the next stage made in its directory sweeps
//! away, which this one does first.

use std::io;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags, Timespec, Timestamps, UTIME_OMIT};

use super::metadata::PERMISSION_BITS;
use super::piecewise;
use super::set_metadata::timespec_of_ms;
use super::stage::{self, Stage};

/// Temporary names tried before giving up: another writer holding the name just drawn is
/// next to impossible (the names carry the process id and a counter), so a few tries only
/// cover leftovers of a process that had the same id before.
const NAME_ATTEMPTS: u32 = 8;

/// Writes `data` to `path` whole, with `mode` (permission bits; absent: a new file's, `0o666`
/// less the umask) and `modified_at_ms` (Unix ms; absent: now). An existing file or link at
/// `path` is replaced, not written through; an existing directory is an error. The parent
/// is reached following links, as `fs/writeFile` reaches it.
pub(crate) fn put(
    path: &Path,
    data: &[u8],
    mode: Option<u32>,
    modified_at_ms: Option<i64>,
) -> io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{}` names no file to put", path.display()),
        ));
    };
    // Readable, so that it can be swept; a directory this user may only pass through is
    // written in without a sweep.
    let directory = match stage::open_directory(parent) {
        Ok(directory) => {
            stage::sweep(directory.as_fd());
            directory
        }
        Err(_) => rustix::fs::open(
            parent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?,
    };
    let mut attempt = 1;
    let (file, staged, held) = loop {
        let (file, staged) = create_staged(&directory, name)?;
        match Stage::hold(directory.try_clone()?, &staged, &file)? {
            Some(held) => break (file, staged, held),
            // Swept between its making and its lock (or locked by another): made again under
            // a new name.
            None if attempt < stage::STAGE_ATTEMPTS => attempt += 1,
            None => {
                let _ = rustix::fs::unlinkat(&directory, &staged, AtFlags::empty());
                return Err(io::Error::other(format!(
                    "the temporary file for `{}` was removed, or locked by another process, \
                     as it was made; put the file again",
                    path.display()
                )));
            }
        }
    };
    let written = fill(file, data, mode, modified_at_ms)
        .and_then(|()| Ok(rustix::fs::renameat(&directory, &staged, &directory, name)?));
    if written.is_err() {
        let _ = rustix::fs::unlinkat(&directory, &staged, AtFlags::empty());
    }
    drop(held);
    written
}

/// A new, empty file beside the destination, and its name. Made owner-only: its bytes are
/// not for anyone else until it has its own mode.
fn create_staged(
    directory: &OwnedFd,
    name: &std::ffi::OsStr,
) -> io::Result<(std::fs::File, std::ffi::OsString)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut attempt = 0;
    loop {
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        let staged = stage::put_staged_name(name, std::process::id(), unique);
        match rustix::fs::openat(directory, &staged, flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => return Ok((std::fs::File::from(fd), staged)),
            Err(rustix::io::Errno::EXIST) if attempt + 1 < NAME_ATTEMPTS => attempt += 1,
            Err(error) => return Err(error.into()),
        }
    }
}

/// The bytes, then the mode and the time (after the bytes, which would move the time).
fn fill(
    file: std::fs::File,
    data: &[u8],
    mode: Option<u32>,
    modified_at_ms: Option<i64>,
) -> io::Result<()> {
    piecewise::write_all(&file, data)?;
    let mode = match mode {
        Some(mode) => mode & PERMISSION_BITS,
        None => 0o666 & !current_umask()?,
    };
    rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
    if let Some(ms) = modified_at_ms {
        let times = Timestamps {
            last_access: Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT },
            last_modification: timespec_of_ms(ms),
        };
        rustix::fs::futimens(&file, &times)?;
    }
    Ok(())
}

/// The process's umask, read from `/proc` (setting it to read it back would race with every
/// other thread creating files).
fn current_umask() -> io::Result<u32> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Umask:"))
        .and_then(|value| u32::from_str_radix(value.trim(), 8).ok())
        .ok_or_else(|| io::Error::other("/proc/self/status names no umask"))
}
