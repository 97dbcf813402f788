//! A sandboxed `fs/writeFile` made here, where the sandbox would show its path as the host has
//! it ([`host_view`]): the same write, the same answer, without starting bubblewrap (some 4 ms
//! a write on a 2-core machine; the write itself takes microseconds).
//!
//! What the words of the path cannot show, the write itself refuses, and the sandbox answers
//! instead:
//! - a link or a mount anywhere below the root: the file is opened below the root's descriptor
//!   with `openat2` (`RESOLVE_BENEATH`, no links, no mount crossings), so what is written is
//!   the file the sandbox's helper would write, even while a sandboxed command changes the tree;
//! - privilege: the helper's capabilities count only on files of the server's own user (those
//!   of its user namespace), so a server running as root writes here with its effective
//!   capabilities off ([`Unprivileged`]); a write only they would allow goes to the sandbox;
//! - anything but a regular file: a device node is opened by nothing here (the sandbox's binds
//!   have no devices), a FIFO or a socket goes to the sandbox.
//!
//! Only two answers are given here: the write made, and `ENOENT` for a missing parent (the
//! answer apply_patch waits for before it makes the directory). Every other failure is left to
//! the sandbox, whose words are the reference's. And nothing is answered here until a sandbox
//! has been built in this process ([`prove`]): on a host whose bubblewrap cannot build one (no
//! user namespaces), every sandboxed write fails as the reference's does.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{CWD, FileType, Mode, OFlags, ResolveFlags};
use rustix::thread::{CapabilitySet, CapabilitySets};

use super::op::{FileOp, Outcome};
use crate::fs::{FsError, piecewise};
use crate::sandbox::host_view::{self, InPlace};
use crate::sandbox::mounts::resolved;
use crate::sandbox::policy::FullPolicy;
use crate::sandbox::socket_dir;

/// Set once bubblewrap has built a sandbox for a file operation in this process: this host can
/// sandbox, so what is written here is what a sandbox would have let through.
static PROVEN: AtomicBool = AtomicBool::new(false);

/// Notes that a sandbox was built (its helper answered).
pub(super) fn prove() {
    PROVEN.store(true, Ordering::Relaxed);
}

/// What became of an operation offered here.
pub(super) enum Tried {
    /// Answered here.
    Answered(Result<Outcome, FsError>),
    /// For the sandbox, given back whole.
    Sandbox(FileOp),
}

/// Makes `op` here if it is a write the sandbox `policy` describes would make as the host would.
pub(super) async fn try_write(policy: &FullPolicy, op: FileOp) -> Tried {
    if !PROVEN.load(Ordering::Relaxed) || !matches!(op, FileOp::WriteFile { .. }) {
        return Tried::Sandbox(op);
    }
    let policy = policy.clone();
    let attempt = tokio::task::spawn_blocking(move || {
        let FileOp::WriteFile { path, data, .. } = &op else { unreachable!("checked above") };
        let written = where_in_place(&policy, path)
            .map(|place| write_below(&place.root, &place.rest, &data.0));
        (op, written)
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
    let uid = rustix::process::geteuid().as_raw();
    let socket_dir: Option<PathBuf> =
        socket_dir::prepare(&socket_dir::path(), uid).ok()?.map(|dir| resolved(&dir));
    host_view::writable_in_place(policy, path, socket_dir.as_deref())
}

/// Creates or truncates `rest` below `root` and writes `bytes` to it, as the helper would: in
/// place (an existing file keeps its inode and mode), never through a link or across a mount,
/// without capabilities, and only into a regular file.
fn write_below(root: &Path, rest: &Path, bytes: &[u8]) -> io::Result<()> {
    let _unprivileged = Unprivileged::enter()?;
    let no_links = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let dir = rustix::fs::openat2(
        CWD,
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        no_links,
    )
    .map_err(|_| not_here())?;
    let below = no_links | ResolveFlags::BENEATH | ResolveFlags::NO_XDEV;
    // What is there already is looked at before it is opened: opening a device does things.
    match rustix::fs::openat2(&dir, rest, OFlags::PATH | OFlags::CLOEXEC, Mode::empty(), below) {
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
    let file = rustix::fs::openat2(&dir, rest, flags, Mode::from_raw_mode(0o666), below)?;
    if !is_regular(&file)? {
        return Err(not_here());
    }
    piecewise::write_all(&std::fs::File::from(file), bytes)
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
