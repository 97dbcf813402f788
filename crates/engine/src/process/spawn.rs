//! Starting a child: pipes or a PTY, its own process group, the exact environment.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Stdio;

use tokio::io::{AsyncRead, AsyncWrite};

use super::child::Child;
use super::posix_spawn::{self, Start, Stdio as SpawnStdio};
use super::pty_program;
use super::terminal::Terminal;

use crate::environment::find_in;
use crate::sandbox::Launch;
use crate::sandbox::exec::PreparedExec;
use crate::sandbox::launch::Wrapped;
use crate::sandbox::peers::{self, LiveSandbox};
use crate::sandbox::synthetic::SyntheticTargets;

/// The terminal size of a PTY process. The protocol has no way to choose or change it, so it is
/// the classic 24×80 the reference uses.
pub const PTY_ROWS: u16 = 24;
pub const PTY_COLS: u16 = 80;

/// A validated start request, in native terms.
pub(crate) struct SpawnRequest<'a> {
    pub argv: &'a [String],
    pub arg0: Option<&'a str>,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
    pub tty: bool,
    pub pipe_stdin: bool,
    /// (cols, rows) of a PTY.
    pub pty_size: (u16, u16),
    /// How the sandbox, if any, wraps the command.
    pub launch: Launch,
    /// The start came with a sandbox intent, `disabled` included: a command that cannot be
    /// executed is then a child that says why and exits, as the reference's helper is.
    pub sandboxed: bool,
}

pub(crate) type Reader = Box<dyn AsyncRead + Unpin + Send>;
pub(crate) type Writer = Box<dyn AsyncWrite + Unpin + Send>;

pub(crate) struct Spawned {
    pub child: Child,
    pub pid: rustix::process::Pid,
    /// `stdout` then `stderr` for pipes; the PTY master alone for a PTY.
    pub primary: Reader,
    pub secondary: Option<Reader>,
    pub stdin: Option<Writer>,
    /// A second handle on a PTY's master, to resize the terminal later.
    pub terminal: Option<std::os::fd::OwnedFd>,
    /// Makes a PTY's reader hand over what it has without lingering, once the process exited.
    pub pty_eager: Option<super::pty_io::PtyEager>,
    /// What a full sandbox holds until the process closes, and where its inner stage's pid
    /// comes from.
    pub sandbox: Option<SandboxHold>,
    /// The process's managed proxy, which ends (every connection through it) when the process
    /// closes; set by the table after the spawn.
    pub proxy: Option<crate::network::proxy::RunningProxy>,
}

/// What a sandboxed process keeps while it runs.
pub(crate) struct SandboxHold {
    /// Mount targets made on the host; removed when this is dropped.
    pub _synthetic: SyntheticTargets,
    /// bubblewrap's `--info-fd`, read once to learn the inner stage's pid.
    pub info: Option<std::os::fd::OwnedFd>,
    /// The sandbox known to run, so that a loopback connection from inside it is refused.
    pub _live: Option<LiveSandbox>,
}

/// The program and arguments actually executed, and what the child must inherit.
struct CommandLine {
    program: PathBuf,
    args: Vec<std::ffi::OsString>,
    /// `Some` when the program sees the request's own `argv[0]` (not when wrapped: the inner
    /// stage sets it for the command).
    arg0: Option<String>,
    filter: Option<std::sync::Arc<seccompiler::BpfProgram>>,
    inherited: Vec<std::os::fd::OwnedFd>,
    hold: Option<SandboxHold>,
}

impl CommandLine {
    /// What the program sees as `argv[0]`.
    fn argv0(&self) -> &OsStr {
        self.arg0.as_deref().map_or(self.program.as_os_str(), OsStr::new)
    }

    /// The numbers of the descriptors the child must inherit.
    fn inherited_fds(&self) -> Vec<i32> {
        self.inherited.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect()
    }
}

fn command_line(request: &mut SpawnRequest<'_>, program: PathBuf) -> CommandLine {
    let direct = |filter| CommandLine {
        program: program.clone(),
        args: request.argv[1..].iter().map(Into::into).collect(),
        arg0: Some(request.arg0.unwrap_or(&request.argv[0]).to_owned()),
        filter,
        inherited: Vec::new(),
        hold: None,
    };
    match std::mem::replace(&mut request.launch, Launch::Direct) {
        Launch::Direct => direct(None),
        Launch::Filtered(program) => direct(Some(std::sync::Arc::new(program))),
        Launch::Wrapped(Wrapped { program, args, inherited, synthetic, info, .. }) => CommandLine {
            program,
            args,
            arg0: None,
            filter: None,
            inherited,
            hold: Some(SandboxHold { _synthetic: synthetic, info, _live: None }),
        },
    }
}

/// What runs between fork and exec: the network filter, or the descriptors a wrapper must
/// inherit made inheritable. Async-signal-safe: system calls only.
fn pre_exec_hook(
    line: &CommandLine,
) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
    let filter = line.filter.clone();
    let inherited = line.inherited_fds();
    move || {
        crate::sandbox::launch::keep_across_exec(&inherited)?;
        match &filter {
            Some(program) => crate::sandbox::seccomp::install(program),
            None => Ok(()),
        }
    }
}

pub(crate) fn spawn(mut request: SpawnRequest<'_>) -> std::io::Result<Spawned> {
    if request.argv[0].is_empty() && !request.sandboxed {
        // The reference's words; under an intent its helper reports it (`ENOENT`, exit 101).
        let kind = if request.tty { "PTY" } else { "pipe" };
        let message = format!("missing program for {kind} spawn");
        return Err(std::io::Error::new(std::io::ErrorKind::NotFound, message));
    }
    // Refused in `std::process::Command`'s words, as the reference refuses it in every mode
    // (an argument with a NUL gets `exec_setup::c_string`'s).
    let nul = |text: &String| text.contains('\0');
    if request.env.iter().any(|(key, value)| nul(key) || nul(value)) {
        let message = crate::exec_setup::COMMAND_ENV_NUL;
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, message));
    }
    let program = if request.tty && !request.sandboxed {
        // A terminal start finds its program as the reference's terminal layer does.
        pty_program::program(&request.argv[0], &request.cwd, &request.env)?
    } else {
        resolve_program(&request.argv[0], &request.env)
    };
    let mut line = command_line(&mut request, program);
    let mut spawned = match start(&request, &line) {
        // Under any intent the reference starts its sandbox helper, which then fails to
        // execute the command: the start succeeds, and the child reports it and exits 101. A
        // wrapped start's inner stage does that itself; the others are made to here. A missing
        // working directory fails the start for both.
        Err(error)
            if request.sandboxed
                && line.hold.is_none()
                && cannot_execute(&error)
                && request.cwd.is_dir() =>
        {
            let name = request.arg0.unwrap_or(&request.argv[0]);
            request.launch = crate::sandbox::launch::failed_exec(OsStr::new(name), &error);
            line = command_line(&mut request, PathBuf::new());
            start(&request, &line)?
        }
        started => started?,
    };
    // The child has its copies; the launcher's are closed here (`line.inherited` drops).
    spawned.sandbox = line
        .hold
        .map(|hold| SandboxHold { _live: spawned.child.id().map(peers::register), ..hold });
    Ok(spawned)
}

fn start(request: &SpawnRequest<'_>, line: &CommandLine) -> std::io::Result<Spawned> {
    if request.tty { spawn_pty(request, line) } else { spawn_pipes(request, line) }
}

/// Whether a start failed because the program could not be executed (`execve`'s own
/// failures), rather than for want of a resource.
fn cannot_execute(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(
            libc::ENOENT
                | libc::ENOTDIR
                | libc::EACCES
                | libc::EPERM
                | libc::ENOEXEC
                | libc::ELOOP
                | libc::ENAMETOOLONG
                | libc::ETXTBSY
                | libc::EISDIR
                | libc::ELIBBAD
        )
    )
}

/// The program a start names: resolved on `PATH` as [`spawn`] resolves it.
pub(crate) fn program_for(argv0: &str, env: &BTreeMap<String, String>) -> PathBuf {
    resolve_program(argv0, env)
}

/// A bare program name is looked up on the child's `PATH` when it has one, else on the
/// executor's, so `["bash", …]` works with an empty `env` (a pipe start, or any start under an
/// intent; an unconfined PTY start looks only on the child's, see `pty_program`).
fn resolve_program(program: &str, env: &BTreeMap<String, String>) -> PathBuf {
    if program.contains('/') {
        return PathBuf::from(program);
    }
    let found = env
        .get("PATH")
        .and_then(|path| find_in(program, OsStr::new(path)))
        .or_else(|| std::env::var_os("PATH").and_then(|path| find_in(program, &path)));
    // Not found: let exec fail on the bare name, which reports ENOENT like the reference.
    found.unwrap_or_else(|| PathBuf::from(program))
}

/// Whether `line` can start without `fork` ([`posix_spawn`]): all but a network filter,
/// which must be installed in the child, where the kernel has pidfds.
fn spawns_without_fork(line: &CommandLine) -> bool {
    line.filter.is_none() && posix_spawn::available()
}

/// Starts `line` with `posix_spawn`. An executable without a `#!` line fails with ENOEXEC, as
/// the reference's does (`fork`'s `execvp` would run it with `/bin/sh`).
fn spawn_without_fork(
    request: &SpawnRequest<'_>,
    line: &CommandLine,
    env: &BTreeMap<String, String>,
    stdio: SpawnStdio<'_>,
) -> std::io::Result<posix_spawn::Started> {
    let inherited = line.inherited_fds();
    posix_spawn::spawn(&Start {
        program: &line.program,
        arg0: line.argv0(),
        args: &line.args,
        cwd: &request.cwd,
        env,
        stdio,
        inherited: &inherited,
    })
}

fn spawn_pipes(request: &SpawnRequest<'_>, line: &CommandLine) -> std::io::Result<Spawned> {
    if !spawns_without_fork(line) {
        return spawn_forked_pipes(request, line);
    }
    let stdio = SpawnStdio::Pipes { stdin: request.pipe_stdin };
    let started = spawn_without_fork(request, line, &request.env, stdio)?;
    let pipes = started.pipes.expect("a pipe start has pipes");
    let child = Child::Spawned(started.child);
    Ok(Spawned {
        proxy: None,
        pid: child_pid(&child)?,
        child,
        primary: Box::new(pipes.stdout),
        secondary: Some(Box::new(pipes.stderr)),
        stdin: pipes.stdin.map(|s| Box::new(s) as Writer),
        terminal: None,
        pty_eager: None,
        sandbox: None,
    })
}

/// A pipe child started by `fork` and exec ([`spawn_forked`]).
fn spawn_forked_pipes(request: &SpawnRequest<'_>, line: &CommandLine) -> std::io::Result<Spawned> {
    let stdin = if request.pipe_stdin { Stdio::piped() } else { Stdio::null() };
    let stdio = [stdin, Stdio::piped(), Stdio::piped()];
    let mut child = spawn_forked(request, line, &request.env, stdio, false)?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let stdin = child.stdin.take().map(|s| Box::new(s) as Writer);
    let child = Child::Forked(child);
    Ok(Spawned {
        proxy: None,
        pid: child_pid(&child)?,
        child,
        primary: Box::new(stdout),
        secondary: Some(Box::new(stderr)),
        stdin,
        terminal: None,
        pty_eager: None,
        sandbox: None,
    })
}

fn spawn_pty(request: &SpawnRequest<'_>, line: &CommandLine) -> std::io::Result<Spawned> {
    let (cols, rows) = request.pty_size;
    let Terminal { master, path } = super::terminal::open(cols, rows)?;
    // Held open until the child has the terminal: a master with no terminal side open reads
    // as ended (EIO), and the reader starts reading it at once. From then on the terminal
    // ends when the child and its descendants let it go.
    let side = super::terminal::open_side(&path)?;
    // The master leaves the runtime: its output is read by a thread of its own (`pty_io`).
    let resizer = master.try_clone()?;
    let (reader, writer) = super::pty_io::split(master, super::READ_CHUNK_BYTES)?;
    let pty_eager = reader.eager_handle();
    // A terminal session gets a SHELL even from an empty environment, as the reference's PTY
    // layer gives it: programs that open a subshell look there.
    let mut env = request.env.clone();
    env.entry("SHELL".to_owned()).or_insert_with(|| crate::environment::login_shell().path);
    let child = match spawns_without_fork(line) {
        true => {
            let stdio = SpawnStdio::Terminal(&path);
            Child::Spawned(spawn_without_fork(request, line, &env, stdio)?.child)
        }
        false => {
            let stdio =
                [Stdio::from(side.try_clone()?), Stdio::from(side.try_clone()?), side.into()];
            Child::Forked(spawn_forked(request, line, &env, stdio, true)?)
        }
    };
    let pid = child_pid(&child)?;
    Ok(Spawned {
        proxy: None,
        child,
        pid,
        primary: Box::new(reader),
        secondary: None,
        stdin: Some(Box::new(writer)),
        terminal: Some(resizer),
        pty_eager: Some(pty_eager),
        sandbox: None,
    })
}

/// A child started by `fork` and exec with `stdio` as its stdin, stdout and stderr, where the
/// child makes itself a session leader and runs `pre_exec_hook` between the two. The session
/// is the child's own, as the reference's are: its group (the session's) can be signalled as a
/// whole, and its only controlling terminal is its PTY (`terminal`: stdin, made the session's),
/// so `/dev/tty` is never the server's.
fn spawn_forked(
    request: &SpawnRequest<'_>,
    line: &CommandLine,
    env: &BTreeMap<String, String>,
    stdio: [Stdio; 3],
    terminal: bool,
) -> std::io::Result<tokio::process::Child> {
    let [stdin, stdout, stderr] = stdio;
    let mut command = tokio::process::Command::new(&line.program);
    command
        .args(&line.args)
        .current_dir(&request.cwd)
        .env_clear()
        .envs(env)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(true);
    if let Some(arg0) = &line.arg0 {
        command.arg0(arg0);
    }
    // A filtered command is executed by the hook, as the reference's helper executes it
    // (no `/bin/sh` for a file without `#!`): std's own exec would be glibc's `execvp`.
    let exec = match &line.filter {
        Some(_) => Some(PreparedExec::new(
            line.program.as_os_str(),
            line.argv0(),
            &line.args,
            Some(env),
            env.get("PATH").map(OsStr::new),
        )?),
        None => None,
    };
    let mut hook = pre_exec_hook(line);
    let become_session_leader = move || {
        rustix::process::setsid()?;
        if terminal {
            // SAFETY: descriptor 0 is open: std made it the terminal before this runs.
            let stdin = unsafe { std::os::fd::BorrowedFd::borrow_raw(0) };
            rustix::process::ioctl_tiocsctty(stdin)?;
        }
        hook()?;
        match &exec {
            Some(exec) => Err(exec.exec()),
            None => Ok(()),
        }
    };
    // SAFETY: system calls only (see `pre_exec_hook`).
    unsafe { command.pre_exec(become_session_leader) };
    command.spawn()
}

fn child_pid(child: &Child) -> std::io::Result<rustix::process::Pid> {
    child
        .id()
        .and_then(|id| rustix::process::Pid::from_raw(id as i32))
        .ok_or_else(|| std::io::Error::other("child exited before its pid could be read"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(argv: &[String], tty: bool, launch: Launch) -> SpawnRequest<'_> {
        SpawnRequest {
            argv,
            arg0: None,
            cwd: PathBuf::from("/"),
            env: BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
            tty,
            pipe_stdin: false,
            pty_size: (PTY_COLS, PTY_ROWS),
            launch,
            sandboxed: false,
        }
    }

    /// Exits 0 when the shell leads its own session and `/dev/tty` opens exactly when its
    /// stdin is a terminal (its controlling one).
    const SESSION_CHECK: &str = "[ \"$(cut -d' ' -f6 /proc/$$/stat)\" = $$ ] || exit 3; \
        if (: > /dev/tty) 2>/dev/null; then [ -t 0 ] || exit 4; else [ ! -t 0 ] || exit 5; fi";

    /// Pipe and terminal children start without `fork` (whose cost grows with the server's
    /// memory), and still lead their own session; a terminal child has its terminal as its
    /// controlling terminal.
    #[tokio::test]
    async fn pipe_and_terminal_children_start_without_fork() {
        assert!(posix_spawn::available(), "this kernel has pidfds");
        let argv: Vec<String> = ["sh", "-c", SESSION_CHECK].map(String::from).to_vec();
        for tty in [false, true] {
            let mut spawned = spawn(request(&argv, tty, Launch::Direct)).unwrap();
            assert!(matches!(spawned.child, Child::Spawned(_)), "tty {tty}");
            let status = spawned.child.wait().await.unwrap();
            assert_eq!(status.code(), Some(0), "tty {tty}");
        }
    }

    /// A network filter has to be installed in the child before its exec: that start forks,
    /// and its child is set up as the others are.
    #[tokio::test]
    async fn a_filtered_child_is_forked() {
        use crate::sandbox::seccomp::{NetworkRule, program};
        let argv: Vec<String> = ["sh", "-c", SESSION_CHECK].map(String::from).to_vec();
        for tty in [false, true] {
            let launch = Launch::Filtered(program(NetworkRule::Restricted));
            let mut spawned = spawn(request(&argv, tty, launch)).unwrap();
            assert!(matches!(spawned.child, Child::Forked(_)), "tty {tty}");
            let status = spawned.child.wait().await.unwrap();
            assert_eq!(status.code(), Some(0), "tty {tty}");
        }
    }
}
