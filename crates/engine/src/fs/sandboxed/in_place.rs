//! Sandboxed writes made here — `fs/writeFile`, `fs/createDirectory` and `fs/remove` of a
//! file — where the sandbox would show their path as the host has it ([`host_view`]): the same
//! change, the same answer, without starting bubblewrap (some 4 ms a call on a 2-core machine;
//! the change itself takes microseconds). These are the calls Codex's apply_patch makes.
//!
//! What the words of the path cannot show, the call itself refuses, and the sandbox answers
//! instead:
//! - a link or a mount anywhere below the root: every directory on the way is opened below the
//!   root's descriptor with `openat2` (`RESOLVE_BENEATH`, no links, no mount crossings), so what
//!   is changed is what the sandbox's helper would change, even while a sandboxed command
//!   changes the tree;
//! - privilege: the helper has no capabilities, so a server running as root works here with
//!   the thread's effective capabilities off ([`Unprivileged`]); a change only they would allow
//!   goes to the sandbox;
//! - anything but a regular file or a directory: a device node is opened by nothing here (the
//!   sandbox's binds have no devices), a FIFO, a socket or a link goes to the sandbox.
//!
//! Only the answers that mean the same wherever they are made are given here: the change
//! made, and `ENOENT` for a path or a parent that is not there (the answer apply_patch waits
//! for before it makes the directory). Every other failure is left to the sandbox, whose words
//! are the reference's. And nothing is made here until a sandbox has been built in this
//! process ([`prove`]): on a host whose bubblewrap cannot build one (no user namespaces), every
//! sandboxed write fails as the reference's does.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags};
use rustix::thread::{CapabilitySet, CapabilitySets};

use super::op::{FileOp, Outcome, Tried};
use crate::fs::{FsError, piecewise};
use crate::sandbox::host_view::{self, InPlace};
use crate::sandbox::policy::FullPolicy;
use crate::sandbox::walk::resolved;
use crate::sandbox::{Sandboxing, socket_dir};

/// Set once bubblewrap has built a sandbox for a file operation in this process: this host can
/// sandbox, so what is written here is what a sandbox would have let through.
static PROVEN: AtomicBool = AtomicBool::new(false);

/// Notes that a sandbox was built (its helper answered).
pub(super) fn prove() {
    PROVEN.store(true, Ordering::Relaxed);
}

/// Makes `op` here if it is a change the sandbox `policy` describes would make as the host
/// would.
pub(super) async fn try_here(policy: &FullPolicy, op: FileOp) -> Tried<FileOp> {
    let offered = matches!(
        op,
        FileOp::WriteFile { .. } | FileOp::CreateDirectory { .. } | FileOp::Remove { .. }
    );
    if !PROVEN.load(Ordering::Relaxed) || !offered {
        return Tried::Sandbox(op);
    }
    let policy = policy.clone();
    let attempt = tokio::task::spawn_blocking(move || {
        let made = match &op {
            FileOp::WriteFile { path, data, .. } => {
                where_in_place(&policy, path).map(|at| write_below(&at, &data.0))
            }
            FileOp::CreateDirectory { path, recursive, .. } => {
                where_in_place(&policy, path).map(|at| create_below(&at, *recursive))
            }
            // Without following, a recursive removal is refused whatever the path (see
            // `remove`): the sandbox says so.
            FileOp::Remove { recursive: true, follow: false, .. } => None,
            FileOp::Remove { path, force, .. } => {
                where_in_place(&policy, path).map(|at| remove_below(&at, *force))
            }
            _ => None,
        };
        (op, made)
    });
    match attempt.await {
        Ok((_, Some(Ok(())))) => Tried::Answered(Ok(Outcome::Done)),
        Ok((_, Some(Err(error)))) if error.kind() == io::ErrorKind::NotFound => {
            Tried::Answered(Err(FsError::from(error)))
        }
        Ok((op, _)) => Tried::Sandbox(op),
        Err(failed) => {
            Tried::Answered(Err(FsError::other(format!("filesystem task failed: {failed}"))))
        }
    }
}

/// Where `path` is written in place, if it is; the socket directory prepared as the sandbox
/// would prepare it (one the sandbox would refuse to be built over leaves the write to it).
fn where_in_place(policy: &FullPolicy, path: &Path) -> Option<InPlace> {
    // The server's own files are masked in every sandbox: the sandbox refuses.
    if Sandboxing::current().private.iter().any(|private| path.starts_with(private)) {
        return None;
    }
    let uid = rustix::process::geteuid().as_raw();
    let socket_dir: Option<PathBuf> =
        socket_dir::prepare(&socket_dir::path(), uid).ok()?.map(|dir| resolved(&dir));
    host_view::writable_in_place(policy, path, socket_dir.as_deref())
}

/// Link-free, beneath the directory, within its mount.
const BELOW: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// Creates or truncates the file and writes `bytes` to it, as the helper would: in place (an
/// existing file keeps its inode and mode), only into a regular file.
fn write_below(at: &InPlace, bytes: &[u8]) -> io::Result<()> {
    let _unprivileged = Unprivileged::enter()?;
    let dir = open_root(&at.root)?;
    // What is there already is looked at before it is opened: opening a device does things.
    match rustix::fs::openat2(&dir, &at.rest, OFlags::PATH | OFlags::CLOEXEC, Mode::empty(), BELOW)
    {
        Ok(existing) if !is_regular(&existing)? => return Err(not_here()),
        Ok(_) | Err(rustix::io::Errno::NOENT) => {}
        Err(errno) => return Err(errno.into()),
    }
    // Non-blocking, so that a FIFO made since opens (or fails) at once.
    let flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::TRUNC
        | OFlags::NONBLOCK
        | OFlags::NOCTTY
        | OFlags::CLOEXEC;
    let file = rustix::fs::openat2(&dir, &at.rest, flags, Mode::from_raw_mode(0o666), BELOW)?;
    if !is_regular(&file)? {
        return Err(not_here());
    }
    piecewise::write_all(&std::fs::File::from(file), bytes)
}

/// Makes the directory, and with `recursive` each missing one on the way (an existing
/// directory is success then), as the helper would.
fn create_below(at: &InPlace, recursive: bool) -> io::Result<()> {
    let _unprivileged = Unprivileged::enter()?;
    let mut dir = open_root(&at.root)?;
    let names: Vec<&std::ffi::OsStr> = at.rest.iter().collect();
    let (last, on_the_way) = names.split_last().expect("a path below the root names something");
    for name in on_the_way {
        if recursive {
            make_directory(&dir, name)?;
        }
        dir = open_directory(&dir, *name)?;
    }
    match make_directory(&dir, last) {
        // Made, or there as a directory where that is success.
        Ok(true) => Ok(()),
        Ok(false) if recursive => open_directory(&dir, *last).map(drop),
        // Already there: the sandbox words it.
        Ok(false) => Err(not_here()),
        Err(error) => Err(error),
    }
}

/// Removes a regular file (`force`: a missing one is success), as the helper would; anything
/// else is the sandbox's to remove.
fn remove_below(at: &InPlace, force: bool) -> io::Result<()> {
    let _unprivileged = Unprivileged::enter()?;
    let removed = (|| {
        let dir = open_root(&at.root)?;
        let parent = match at.rest.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) => open_directory(&dir, parent)?,
            None => dir,
        };
        let name = at.rest.file_name().expect("a path below the root has a name");
        let stat = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(not_here());
        }
        // A directory swapped in since is refused by this call (`EISDIR`), and goes to the
        // sandbox; another file swapped in is removed, as the helper's removal by name would.
        Ok(rustix::fs::unlinkat(&parent, name, AtFlags::empty())?)
    })();
    match removed {
        Err(error) if force && error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The writable root, opened as it was resolved: a link swapped in since is not followed.
fn open_root(root: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let no_links = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    rustix::fs::openat2(CWD, root, flags, Mode::empty(), no_links).map_err(|_| not_here())
}

/// The directory `below` names in `dir` (no link on the way, nor it), opened to go on from.
fn open_directory(dir: &OwnedFd, below: impl rustix::path::Arg) -> io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(rustix::fs::openat2(dir, below, flags, Mode::empty(), BELOW)?)
}

/// Makes `name` in `dir` (`false`: something is there already).
fn make_directory(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<bool> {
    match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o777)) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::EXIST) => Ok(false),
        Err(errno) => Err(errno.into()),
    }
}

fn is_regular(fd: &impl std::os::fd::AsFd) -> io::Result<bool> {
    Ok(FileType::from_raw_mode(rustix::fs::fstat(fd)?.st_mode) == FileType::RegularFile)
}

/// A failure that only says "not here": the sandbox answers.
fn not_here() -> io::Error {
    io::Error::from(io::ErrorKind::Unsupported)
}

/// This thread without its effective capabilities, for as long as it is held. Capabilities are
/// a thread's own: the rest of the server keeps them.
struct Unprivileged {
    before: Option<CapabilitySets>,
}

impl Unprivileged {
    fn enter() -> io::Result<Self> {
        let before = rustix::thread::capabilities(None)?;
        if before.effective.is_empty() {
            return Ok(Self { before: None });
        }
        let without = CapabilitySets { effective: CapabilitySet::empty(), ..before };
        rustix::thread::set_capabilities(None, without)?;
        Ok(Self { before: Some(before) })
    }
}

impl Drop for Unprivileged {
    fn drop(&mut self) {
        let Some(before) = self.before else { return };
        // Raising the effective set within the permitted one, which was kept, cannot be refused;
        // a pool thread left without them would fail later work in ways nobody could explain.
        if rustix::thread::set_capabilities(None, before).is_err() {
            tracing::error!("could not restore a thread's capabilities; stopping");
            std::process::abort();
        }
    }
}
