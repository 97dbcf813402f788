//! Starting a child: pipes or a PTY, its own process group, the exact environment.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::process::Child;

use crate::environment::find_in;

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
}

pub(crate) fn spawn(request: SpawnRequest<'_>) -> std::io::Result<Spawned> {
    let program = resolve_program(&request.argv[0], &request.env);
    if request.tty { spawn_pty(&request, &program) } else { spawn_pipes(&request, &program) }
}

/// A bare program name is looked up on the child's `PATH` when it has one, else on the
/// executor's, so `["bash", …]` works with an empty `env` in both pipe and PTY mode.
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

fn spawn_pipes(request: &SpawnRequest<'_>, program: &Path) -> std::io::Result<Spawned> {
    let mut command = tokio::process::Command::new(program);
    command
        .args(&request.argv[1..])
        .current_dir(&request.cwd)
        .env_clear()
        .envs(&request.env)
        .stdin(if request.pipe_stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so the group can be signalled as a whole.
        .process_group(0)
        .kill_on_drop(true);
    command.arg0(request.arg0.unwrap_or(&request.argv[0]));
    let mut child = command.spawn()?;
    let pid = child_pid(&child)?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let stdin = child.stdin.take().map(|s| Box::new(s) as Writer);
    Ok(Spawned {
        child,
        pid,
        primary: Box::new(stdout),
        secondary: Some(Box::new(stderr)),
        stdin,
        terminal: None,
    })
}

fn spawn_pty(request: &SpawnRequest<'_>, program: &Path) -> std::io::Result<Spawned> {
    // A terminal session gets a SHELL even from an empty environment, as the reference's PTY
    // layer gives it: programs that open a subshell look there.
    let login_shell;
    let shell = match request.env.contains_key("SHELL") {
        true => None,
        false => {
            login_shell = crate::environment::login_shell().path;
            Some(("SHELL", login_shell.as_str()))
        }
    };
    let (pty, pts) = pty_process::open().map_err(pty_error)?;
    let (cols, rows) = request.pty_size;
    pty.resize(pty_process::Size::new(rows, cols)).map_err(pty_error)?;
    let terminal = std::os::fd::AsFd::as_fd(&pty).try_clone_to_owned()?;
    let command = pty_process::Command::new(program)
        .args(&request.argv[1..])
        .current_dir(&request.cwd)
        .env_clear()
        .envs(&request.env)
        .envs(shell)
        .kill_on_drop(true)
        .arg0(request.arg0.unwrap_or(&request.argv[0]));
    // The child becomes a session leader with the PTY as its controlling terminal. `pts` is
    // consumed: once the child exits, reads on the master report EIO (end of output) unless a
    // grandchild still holds the terminal.
    let child = command.spawn(pts).map_err(pty_error)?;
    let pid = child_pid(&child)?;
    let (reader, writer) = pty.into_split();
    Ok(Spawned {
        child,
        pid,
        primary: Box::new(reader),
        secondary: None,
        stdin: Some(Box::new(writer)),
        terminal: Some(terminal),
    })
}

fn child_pid(child: &Child) -> std::io::Result<rustix::process::Pid> {
    child
        .id()
        .and_then(|id| rustix::process::Pid::from_raw(id as i32))
        .ok_or_else(|| std::io::Error::other("child exited before its pid could be read"))
}

fn pty_error(error: pty_process::Error) -> std::io::Error {
    match error {
        pty_process::Error::Io(e) => e,
        pty_process::Error::Rustix(e) => e.into(),
        other => std::io::Error::other(other.to_string()),
    }
}
