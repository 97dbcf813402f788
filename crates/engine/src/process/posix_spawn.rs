//! Starting a child with `posix_spawn`, so the server's memory is never copied.
//!
//! `fork` copies the page tables of everything the server has mapped, and the runtime thread
//! that calls it waits meanwhile. The server's memory is mostly retained output, which grows
//! with the processes it serves: with 650 MB retained, each start spent about 5 ms copying page
//! tables and unmapping them again, and a soak of many short commands ran at a quarter of its
//! speed. glibc's `posix_spawn` starts the child in the parent's memory
//! (`clone(CLONE_VM | CLONE_VFORK)`: the calling thread waits only until the child's exec, and
//! nothing is copied) and does everything a child needs before its exec: its
//! own session (`POSIX_SPAWN_SETSID`, as the reference's `setsid`), its working directory, its
//! standard descriptors (pipes, or a terminal opened once the session is made, which makes it
//! the session's controlling terminal), the descriptors a sandbox wrapper reads kept open, and
//! signals as `std::process` leaves them (none blocked, `SIGPIPE` at its default). The child's
//! exit is awaited on a pidfd ([`super::child::SpawnedChild`]).
//!
//! Unlike `fork`'s `execvp`, it does not run an executable without a `#!` line with `/bin/sh`:
//! the start fails with `ENOEXEC`, as the reference's does. A network filter, which must be
//! installed in the child, still goes through `fork`; so does everything where the kernel has
//! no pidfds (before 5.3).

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

use tokio::net::unix::pipe;

use super::child::SpawnedChild;
use crate::exec_setup::{c_string, env_strings, null_terminated};

/// A child to start.
pub(crate) struct Start<'a> {
    pub program: &'a Path,
    /// What the program sees as `argv[0]`.
    pub arg0: &'a OsStr,
    pub args: &'a [std::ffi::OsString],
    pub cwd: &'a Path,
    /// The child's whole environment.
    pub env: &'a BTreeMap<String, String>,
    pub stdio: Stdio<'a>,
    /// Descriptors the child keeps at the same numbers (a sandbox wrapper's data and info).
    pub inherited: &'a [RawFd],
}

/// What the child's standard descriptors are.
pub(crate) enum Stdio<'a> {
    /// Pipes for stdout and stderr; for stdin too if `stdin`, else `/dev/null`.
    Pipes { stdin: bool },
    /// The terminal at this path (a PTY's), which becomes the child's controlling terminal.
    Terminal(&'a std::ffi::CStr),
}

pub(crate) struct Started {
    pub child: SpawnedChild,
    /// The server's ends, for [`Stdio::Pipes`].
    pub pipes: Option<Pipes>,
}

pub(crate) struct Pipes {
    pub stdin: Option<pipe::Sender>,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
}

/// Whether the kernel gives pidfds, which [`SpawnedChild`] waits on. Asked once.
pub(crate) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        rustix::process::pidfd_open(rustix::process::getpid(), rustix::process::PidfdFlags::empty())
            .is_ok()
    })
}

/// Starts `start`. An exec that fails (no such program, no permission, a bad working
/// directory) fails here with its `errno`, as `std::process` reports it.
pub(crate) fn spawn(start: &Start<'_>) -> std::io::Result<Started> {
    let program = c_string(start.program.as_os_str())?;
    let mut argv = vec![c_string(start.arg0)?];
    for arg in start.args {
        argv.push(c_string(arg)?);
    }
    let envp = env_strings(start.env)?;
    let cwd = c_string(start.cwd.as_os_str())?;

    let mut actions = FileActions::new()?;
    // (the child's end, the server's end) of each pipe; the child's ends close once it has
    // its copies, so the server's see end of file when the child's are gone.
    let mut pipes = None;
    match start.stdio {
        Stdio::Pipes { stdin } => {
            let stdin = match stdin {
                true => Some(cloexec_pipe()?),
                false => None,
            };
            let (stdout, stderr) = (cloexec_pipe()?, cloexec_pipe()?);
            match &stdin {
                Some((read, _)) => actions.dup2(read.as_raw_fd(), 0)?,
                None => actions.open(0, c"/dev/null", libc::O_RDONLY)?,
            }
            actions.dup2(stdout.1.as_raw_fd(), 1)?;
            actions.dup2(stderr.1.as_raw_fd(), 2)?;
            pipes = Some((stdin, stdout, stderr));
        }
        Stdio::Terminal(path) => {
            // Opened after the new session is made and without O_NOCTTY: the session leader's
            // first terminal becomes its controlling terminal.
            actions.open(0, path, libc::O_RDWR)?;
            actions.dup2(0, 1)?;
            actions.dup2(0, 2)?;
        }
    }
    for &fd in start.inherited {
        // The same number on both sides clears close-on-exec (glibc 2.29 and later).
        actions.dup2(fd, fd)?;
    }
    actions.chdir(&cwd)?;
    let attributes = Attributes::new()?;

    let argv_pointers = null_terminated(&argv);
    let envp_pointers = null_terminated(&envp);
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is to a NUL-terminated string or a null-terminated array of them,
    // all alive for the call; the attributes and actions were initialised above.
    let error = unsafe {
        let spawn_fn = match start.program.as_os_str().as_bytes().contains(&b'/') {
            true => libc::posix_spawn,
            // Not found on any PATH (see `resolve_program`): looked up again on the server's,
            // so the error is the one a lookup gives.
            false => libc::posix_spawnp,
        };
        spawn_fn(
            &mut pid,
            program.as_ptr(),
            &actions.0,
            &attributes.0,
            argv_pointers.as_ptr() as *const *mut libc::c_char,
            envp_pointers.as_ptr() as *const *mut libc::c_char,
        )
    };
    if error != 0 {
        return Err(std::io::Error::from_raw_os_error(error));
    }
    let pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| std::io::Error::other("posix_spawn gave no pid"))?;
    let child = match SpawnedChild::new(pid) {
        Ok(child) => child,
        Err(error) => {
            // No descriptor left for the pidfd: a child nothing could wait for is not left
            // running; SIGKILL is delivered at once, so the wait is short.
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
            return Err(error);
        }
    };
    let pipes = match pipes {
        None => None,
        Some((stdin, stdout, stderr)) => Some(Pipes {
            stdin: stdin.map(|(_, write)| pipe::Sender::from_owned_fd(write)).transpose()?,
            stdout: pipe::Receiver::from_owned_fd(stdout.0)?,
            stderr: pipe::Receiver::from_owned_fd(stderr.0)?,
        }),
    };
    Ok(Started { child, pipes })
}

fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// `posix_spawn_file_actions_t`, destroyed when dropped.
struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new() -> std::io::Result<Self> {
        // SAFETY: zeroed storage is what `_init` expects to initialise.
        let mut actions = Self(unsafe { std::mem::zeroed() });
        // SAFETY: initialises the storage above.
        check(unsafe { libc::posix_spawn_file_actions_init(&mut actions.0) })?;
        Ok(actions)
    }

    fn dup2(&mut self, fd: RawFd, target: RawFd) -> std::io::Result<()> {
        // SAFETY: initialised actions; the call copies the numbers.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, fd, target) })
    }

    fn open(&mut self, target: RawFd, path: &std::ffi::CStr, flags: i32) -> std::io::Result<()> {
        // SAFETY: initialised actions; the path is copied by the call.
        check(unsafe {
            libc::posix_spawn_file_actions_addopen(&mut self.0, target, path.as_ptr(), flags, 0)
        })
    }

    fn chdir(&mut self, path: &CString) -> std::io::Result<()> {
        // SAFETY: initialised actions; the path is copied by the call.
        check(unsafe { libc::posix_spawn_file_actions_addchdir_np(&mut self.0, path.as_ptr()) })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

/// `posix_spawnattr_t` for a child that leads its own session with `std::process`'s signals.
struct Attributes(libc::posix_spawnattr_t);

impl Attributes {
    fn new() -> std::io::Result<Self> {
        // SAFETY: zeroed storage is what `_init` expects to initialise.
        let mut attributes = Self(unsafe { std::mem::zeroed() });
        // SAFETY: every call below works on the initialised attributes and local sets.
        unsafe {
            check(libc::posix_spawnattr_init(&mut attributes.0))?;
            let mut signals: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut signals);
            check(libc::posix_spawnattr_setsigmask(&mut attributes.0, &signals))?;
            libc::sigaddset(&mut signals, libc::SIGPIPE);
            check(libc::posix_spawnattr_setsigdefault(&mut attributes.0, &signals))?;
            let flags = libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
            let flags = libc::POSIX_SPAWN_SETSID | flags as libc::c_short;
            check(libc::posix_spawnattr_setflags(&mut attributes.0, flags))?;
        }
        Ok(attributes)
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

/// The `posix_spawn` family returns its error rather than setting `errno`.
fn check(result: i32) -> std::io::Result<()> {
    match result {
        0 => Ok(()),
        error => Err(std::io::Error::from_raw_os_error(error)),
    }
}
