//! Staged files: a copy writes each file under a temporary name beside its final one
//! (`.NAME.tether-PID-N` from `tether cp`, `.NAME.tether-put-PID-N` from `fs/putFile`) and
//! renames it into place once whole. A writer that dies first leaves its stage behind; this
//! module is how the server removes the stages whose writer is provably gone, and never one
//! whose writer is not.
//!
//! The proof is a lock, not the name. Whoever writes a stage holds a shared `flock` on it for
//! as long as it may still place it: this server from the moment it makes or opens one (an
//! `fs/open` in `replace` mode of a staged name, or `fs/putFile`'s own stage) until the file
//! has left its name, been removed, or its writer has gone. The kernel drops the lock with
//! the last descriptor, so a writer that is killed, or a server that is killed or restarted,
//! leaves its stages unlocked. A stage nobody holds, under a staged name, is therefore dead.
//!
//! It lives on the server, not in the client's next copy, because only the server can know:
//! a stage streamed by `tether cp` belongs to the connection whose handle wrote it (handles
//! die with their connection, so a copy cannot go on after a drop), and a client on another
//! machine can prove nothing about a writer it cannot see.
//!
//! Two triggers, by who went away:
//! - **The writer's connection ended** (a killed `tether cp`): that connection's stages are
//!   removed as it ends ([`ConnectionStages`], held by [`super::FileHandles`]). Each is known
//!   by the descriptor the connection holds, and removed only while its name still leads to
//!   that file.
//! - **The server went away** (killed, restarted, or another server on the same files): its
//!   stages are found by the next stage made in the same directory, which sweeps it first
//!   ([`sweep`]), at most once per directory every [`SWEEP_INTERVAL`].
//!
//! What a sweep removes must be, when checked through one descriptor of the directory, a
//! regular file under a staged name, owned by this server's user, with no other link (so a
//! hard link to something else loses nothing), never reached through a symbolic link
//! (`O_NOFOLLOW`), held by no stage of this process, and lockable exclusively without waiting
//! (so held by no other process). It is unlinked while that exclusive lock is held, after its
//! name is seen to lead to the locked file still. A writer making a stage takes its lock and
//! then checks that its name still leads to its file, so a sweep that got there between the
//! two is seen and the stage made again. What someone with write access to the directory
//! could still swap in between the last check and the unlink is a file they could remove
//! themselves (or, in a sticky directory, their own).
//!
//! A stage opened in a sandbox helper is held as any other where the server's own path to it
//! leads to the same file, but sweeps nothing: the sandbox's confinement would not apply to a
//! sweep made here. A staged symbolic link (which cannot be locked) is left to its writer:
//! what cannot be checked is not removed.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};

/// How often one directory is swept: a sweep lists the whole directory, and a tree copied
/// into a directory of many big files makes a stage there for each; once a minute keeps that
/// to one listing per minute of copying, while a stage left by a server that went away is
/// found by the first copy into its directory after a minute at most.
pub(crate) const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Tries at making a stage: a sweep that removes the new file between its making and its
/// lock runs at most once per directory per [`SWEEP_INTERVAL`], so the second try meets none
/// but another server's.
pub(crate) const STAGE_ATTEMPTS: u32 = 2;

/// Tries at a new stage's lock, [`LOCK_PAUSE`] apart, while another holds it exclusively: a
/// sweep holds a stage's lock for a stat and an unlink, microseconds, and ten tries a
/// millisecond apart cover a loaded machine's scheduling. A holder that keeps it longer is no
/// sweep; the stage is then made again, or left unheld (and unswept, as that holder's lock
/// keeps every sweep off it) rather than waited on.
const LOCK_TRIES: u32 = 10;

/// The pause between two of [`LOCK_TRIES`].
const LOCK_PAUSE: Duration = Duration::from_millis(1);

/// Directories whose last sweep is remembered: enough for every directory a busy server
/// copies into within [`SWEEP_INTERVAL`]; past it, the ones swept longest ago are forgotten
/// (and swept again sooner, which costs a listing, never a stage).
const REMEMBERED_DIRECTORIES: usize = 4096;

/// The name `tether cp` stages a copy of `name` under: `.NAME.tether-WRITER-N`, `WRITER`
/// the writing process's id and `N` a number it draws once per stage.
pub fn staged_name(name: &OsStr, writer: u32, unique: u64) -> OsString {
    named(name, "", writer, unique)
}

/// `fs/putFile`'s stage of `name`: `.NAME.tether-put-WRITER-N`.
pub(crate) fn put_staged_name(name: &OsStr, writer: u32, unique: u64) -> OsString {
    named(name, "put-", writer, unique)
}

fn named(name: &OsStr, kind: &str, writer: u32, unique: u64) -> OsString {
    let mut staged = OsString::from(".");
    staged.push(name);
    staged.push(format!(".tether-{kind}{writer}-{unique}"));
    staged
}

/// Whether `name` is one that [`staged_name`] or [`put_staged_name`] makes.
pub fn is_staged_name(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    let Some(rest) = bytes.strip_prefix(b".") else { return false };
    let Some(at) = rest.windows(8).rposition(|w| w == b".tether-") else { return false };
    if at == 0 {
        return false;
    }
    let tail = &rest[at + 8..];
    let tail = tail.strip_prefix(b"put-").unwrap_or(tail);
    let digits = |part: &[u8]| !part.is_empty() && part.iter().all(u8::is_ascii_digit);
    match tail.iter().position(|&b| b == b'-') {
        Some(dash) => digits(&tail[..dash]) && digits(&tail[dash + 1..]),
        None => false,
    }
}

/// A file by its device and inode.
type Identity = (u64, u64);

/// The stages this process holds, by identity, with how many holds each has. Checked by a
/// sweep before it tries a lock, because where `flock` is carried out as a POSIX lock (NFS)
/// two descriptors of one process never conflict; and locked across a sweep's check, lock
/// and unlink of a stage, so that a stage registered meanwhile waits for the unlink's outcome.
static HELD: Mutex<Option<HashMap<Identity, usize>>> = Mutex::new(None);

fn held() -> MutexGuard<'static, Option<HashMap<Identity, usize>>> {
    HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One stage this process writes, locked for as long as this lives.
#[derive(Debug)]
pub(crate) struct Stage {
    directory: OwnedFd,
    name: OsString,
    /// Its own descriptor, holding the shared lock: the caller's may close before the file is
    /// placed.
    locked: File,
    identity: Identity,
}

impl Stage {
    /// Holds `file`, just made or opened as `name` in `directory`: registered, then locked,
    /// then checked to be there still under its name. `None` if a sweep removed it between
    /// its making and its lock (the caller makes it again), or another holds it locked.
    pub(crate) fn hold(directory: OwnedFd, name: &OsStr, file: &File) -> io::Result<Option<Stage>> {
        let locked = file.try_clone()?;
        let identity = identity_of(&locked)?;
        *held().get_or_insert_default().entry(identity).or_default() += 1;
        let stage = Stage { directory, name: name.to_owned(), locked, identity };
        // Waits briefly while a sweep holds it exclusively: that sweep then has removed it,
        // which the check below sees. Never longer: whoever else can open the file could
        // hold a lock on it for ever, and a thread of the blocking pool with it.
        for _ in 0..LOCK_TRIES {
            match rustix::fs::flock(&stage.locked, FlockOperation::NonBlockingLockShared) {
                Ok(()) => return Ok(stage.in_place().then_some(stage)),
                Err(rustix::io::Errno::WOULDBLOCK) => std::thread::sleep(LOCK_PAUSE),
                Err(error) => return Err(error.into()),
            }
        }
        Ok(None)
    }

    /// Whether its name still leads to it (not renamed, removed or replaced since).
    pub(crate) fn in_place(&self) -> bool {
        let found = rustix::fs::statat(&self.directory, &self.name, AtFlags::SYMLINK_NOFOLLOW);
        found.is_ok_and(|stat| (stat.st_dev, stat.st_ino) == self.identity)
    }

    /// Removes it if its name still leads to it: its writer has given it up.
    pub(crate) fn remove(self) {
        if self.in_place() {
            let _ = rustix::fs::unlinkat(&self.directory, &self.name, AtFlags::empty());
        }
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let mut held = held();
        if let Some(holds) = held.as_mut().and_then(|map| map.get_mut(&self.identity)) {
            *holds -= 1;
            if *holds == 0 {
                held.as_mut().expect("found above").remove(&self.identity);
            }
        }
    }
}

fn identity_of(fd: impl AsFd) -> io::Result<Identity> {
    let stat = rustix::fs::fstat(fd)?;
    Ok((stat.st_dev, stat.st_ino))
}

/// The directory `path`'s stage goes in, reached as the stage's own open reaches it
/// (following links): readable, so that it can be swept too.
pub(crate) fn open_directory(parent: &std::path::Path) -> io::Result<OwnedFd> {
    let parent = if parent.as_os_str().is_empty() { std::path::Path::new(".") } else { parent };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(rustix::fs::open(parent, flags, Mode::empty())?)
}

/// The stages one connection made with `fs/open`, kept past their handles' close until each
/// leaves its name; those still in place when the connection ends are removed with it.
#[derive(Debug, Default)]
pub(crate) struct ConnectionStages {
    stages: Vec<Stage>,
}

impl ConnectionStages {
    pub(crate) fn len(&self) -> usize {
        self.stages.len()
    }

    pub(crate) fn push(&mut self, stage: Stage) {
        self.stages.push(stage);
    }

    /// Lets go of the stages that have left their names (placed or removed by the client).
    pub(crate) fn take_all(&mut self) -> Vec<Stage> {
        std::mem::take(&mut self.stages)
    }

    pub(crate) fn restore(&mut self, stages: Vec<Stage>) {
        self.stages.extend(stages);
    }
}

impl Drop for ConnectionStages {
    fn drop(&mut self) {
        let stages = std::mem::take(&mut self.stages);
        if stages.is_empty() {
            return;
        }
        let remove = move || stages.into_iter().for_each(Stage::remove);
        // Off the connection's thread where there is a runtime: a directory may be slow.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}

/// When each directory was last swept, by identity.
static SWEPT: Mutex<Option<HashMap<Identity, Instant>>> = Mutex::new(None);

/// Removes the dead stages in `directory` (see the module's doc), unless it was swept within
/// [`SWEEP_INTERVAL`]. What cannot be read or checked is left as it is.
pub(crate) fn sweep(directory: BorrowedFd<'_>) {
    let Ok(identity) = identity_of(directory) else { return };
    if !due(identity, Instant::now()) {
        return;
    }
    let Ok(mut entries) = rustix::fs::Dir::read_from(directory) else { return };
    let owner = rustix::process::geteuid().as_raw();
    while let Some(Ok(entry)) = entries.read() {
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if is_staged_name(name) {
            remove_if_dead(directory, name, owner);
        }
    }
}

/// Whether a directory last swept (if ever) as `SWEPT` says is due at `now`; if so, noted
/// as swept now.
fn due(directory: Identity, now: Instant) -> bool {
    let mut swept = SWEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let swept = swept.get_or_insert_default();
    if swept.get(&directory).is_some_and(|&at| now.duration_since(at) < SWEEP_INTERVAL) {
        return false;
    }
    if swept.len() >= REMEMBERED_DIRECTORIES {
        swept.retain(|_, at| now.duration_since(*at) < SWEEP_INTERVAL);
    }
    if swept.len() >= REMEMBERED_DIRECTORIES {
        swept.clear();
    }
    swept.insert(directory, now);
    true
}

/// Removes `name` in `directory` if it is a stage nobody holds, owned by `owner`.
fn remove_if_dead(directory: BorrowedFd<'_>, name: &OsStr, owner: u32) {
    let Ok(seen) = rustix::fs::statat(directory, name, AtFlags::SYMLINK_NOFOLLOW) else { return };
    let regular = rustix::fs::FileType::from_raw_mode(seen.st_mode).is_file();
    if !regular || seen.st_uid != owner || seen.st_nlink != 1 {
        return;
    }
    let identity = (seen.st_dev, seen.st_ino);
    // Non-blocking, so a FIFO swapped in meanwhile cannot hold the sweep; without a
    // controlling terminal, whatever it is.
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    let Ok(file) = rustix::fs::openat(directory, name, flags | OFlags::CLOEXEC, Mode::empty())
    else {
        return;
    };
    if identity_of(&file).ok() != Some(identity) {
        return;
    }
    let held = held();
    if held.as_ref().is_some_and(|map| map.contains_key(&identity)) {
        return;
    }
    if rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        return;
    }
    let still = rustix::fs::statat(directory, name, AtFlags::SYMLINK_NOFOLLOW);
    if still.is_ok_and(|stat| (stat.st_dev, stat.st_ino) == identity) {
        let _ = rustix::fs::unlinkat(directory, name, AtFlags::empty());
    }
    drop(held);
}

#[cfg(test)]
#[path = "stage_tests.rs"]
mod tests;
