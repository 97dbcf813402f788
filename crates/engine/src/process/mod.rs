//! One child process: its output history, its stdin, its signals.
//!
//! A [`LocalProcess`] is created by [`crate::ProcessTable::start`]. Its output is produced by
//! one pump task ([`pump`]) that reads every stream and waits for the exit, so output, exit and
//! close are numbered and published strictly in sequence order — a client never has to reorder
//! what one Tether process sends.
//!
//! A forwarded connection (`process/connect`, [`connection`]) is a process too: a TCP
//! connection to the executor's loopback instead of a child, the same numbered, retained and
//! resumable stream.

mod child;
mod connection;
mod output_budget;
mod posix_spawn;
mod pty_io;
mod pty_program;
mod pump;
mod retained;
mod spawn;
mod spill;
mod stdin;
mod terminal;

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tether_protocol::ProcessId;
use tether_protocol::process::SpawnFailureKind;
use tether_protocol::process::{
    ExecOutputStream, ProcessOutputChunk, ProcessSignal, ProcessState as RunState, ProcessSummary,
    ReadResponse, WriteStatus,
};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::debug;

use crate::proc_stat;

pub use connection::{BROKEN_EXIT_CODE, CONNECT_TIMEOUT, ConnectFailure, STOPPED_EXIT_CODE};
pub(crate) use connection::{connect, destination, run_connection_pump};
pub use output_budget::{DEFAULT_MAX_RETAINED_OUTPUT_BYTES, OutputBudget};
pub use retained::{DEFAULT_RETAINED_OUTPUT_BYTES, RETAINED_OUTPUT_CHUNKS, ReadWindow};
pub use spawn::{PTY_COLS, PTY_ROWS};
pub(crate) use spawn::{SpawnRequest, Spawned, program_for, spawn};
pub use spill::{
    DEFAULT_SPILL_BYTES_PER_PROCESS, MIN_SPILL_BYTES_PER_PROCESS, SPILLED_CHUNKS_PER_PROCESS,
    SpillConfig,
};

pub(crate) use retained::RetainedOutput;
use spill::DiskRead;
use stdin::StdinQueue;

/// Largest chunk of output read at once: what the pump reads from a pipe, and what a PTY's
/// reader ([`pty_io`]) hands over without lingering. A pipe holds 64 KiB, so one read can take
/// all of it: fewer, larger chunks mean fewer notifications and less framing per byte.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// How many `writeId`s each process remembers, so a retried write is applied once.
///
/// A client retries only the writes whose answers it lost in a reconnect, which is a handful;
/// 4,096 is the reference's figure and costs a few hundred KiB at worst.
pub const REMEMBERED_WRITE_IDS: usize = 4096;

/// What a process publishes, in sequence order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEvent {
    Output {
        process_id: ProcessId,
        seq: u64,
        stream: ExecOutputStream,
        chunk: Bytes,
    },
    /// `sandbox_denied`: the exit looks like the sandbox's refusal (always false unsandboxed).
    Exited {
        process_id: ProcessId,
        seq: u64,
        exit_code: i32,
        sandbox_denied: bool,
    },
    Closed {
        process_id: ProcessId,
        seq: u64,
    },
}

impl ProcessEvent {
    pub fn process_id(&self) -> &ProcessId {
        match self {
            ProcessEvent::Output { process_id, .. }
            | ProcessEvent::Exited { process_id, .. }
            | ProcessEvent::Closed { process_id, .. } => process_id,
        }
    }

    pub fn seq(&self) -> u64 {
        match self {
            ProcessEvent::Output { seq, .. }
            | ProcessEvent::Exited { seq, .. }
            | ProcessEvent::Closed { seq, .. } => *seq,
        }
    }
}

/// Why a process operation failed. The server maps each kind to a JSON-RPC code; the messages
/// are the reference's, so clients that match on them keep working.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The request cannot be served as asked (bad argv, cwd, unsupported intent).
    #[error("{0}")]
    InvalidParams(String),
    #[error("process {0} already exists")]
    AlreadyExists(ProcessId),
    #[error("unknown process id {0}")]
    UnknownProcess(ProcessId),
    /// The OS refused to start the program; the message is the OS error.
    #[error("{0}")]
    Spawn(std::io::Error),
    /// The start asks for a sandbox this executor cannot build (no working bubblewrap): it is
    /// refused, never run unconfined. Carries why, and what to install.
    #[error("{0}")]
    SandboxUnavailable(String),
    #[error("failed to write to process stdin")]
    StdinClosed,
    #[error(
        "process {0} has {1} bytes of stdin queued that it has not read; wait for it to read its input before writing more"
    )]
    StdinQueueFull(ProcessId, usize),
    #[error("failed to signal process: {0}")]
    Signal(std::io::Error),
    /// A forwarded connection could not be made (`process/connect`).
    #[error(transparent)]
    Connect(#[from] ConnectFailure),
    /// The session already runs as many processes as it may.
    #[error(
        "too many processes in this session: the limit is {0} not yet finished (--max-processes-per-session); wait for some to finish, or terminate them"
    )]
    TooManyProcesses(usize),
}

impl ProcessError {
    /// What kind of failure to start a program this is (`error.data.kind` on the wire), by the
    /// OS's error: `None` for every other error.
    pub fn spawn_failure(&self) -> Option<SpawnFailureKind> {
        let error = match self {
            ProcessError::Spawn(error) => error,
            ProcessError::SandboxUnavailable(_) => {
                return Some(SpawnFailureKind::SandboxUnavailable);
            }
            ProcessError::Connect(failure) => return Some(failure.kind()),
            _ => return None,
        };
        Some(match error.kind() {
            std::io::ErrorKind::NotFound => SpawnFailureKind::SpawnNotFound,
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::IsADirectory => {
                SpawnFailureKind::SpawnPermissionDenied
            }
            _ => SpawnFailureKind::SpawnFailed,
        })
    }
}

/// What runs behind a process: a child, or a forwarded connection.
pub(crate) enum Runner {
    Child {
        /// The child's pid, which is also its process group id: every child leads its own
        /// group, so a signal to the group reaches the grandchildren a shell started.
        pgid: rustix::process::Pid,
        /// When the leader started (`/proc/<pid>/stat`, in clock ticks after boot), to tell
        /// its group from another that later took the same id: see
        /// [`LocalProcess::kill_leftovers`].
        leader_started: Option<u64>,
    },
    /// A TCP connection to the executor's loopback ([`connection`]).
    Connection {
        destination: std::net::SocketAddr,
        /// Cancelled to end the connection (terminate, a signal, the session's end): its pump
        /// stops reading and drops its half; the write half goes with stdin.
        stop: tokio_util::sync::CancellationToken,
    },
}

impl Runner {
    /// A child's runner, read while the child cannot have been reaped yet (nothing has waited
    /// for it).
    pub(crate) fn child(pgid: rustix::process::Pid) -> Self {
        let leader_started = proc_stat::read(pgid.as_raw_nonzero().get()).map(|s| s.start_time);
        Runner::Child { pgid, leader_started }
    }
}

/// One running or finished child process, or forwarded connection.
pub struct LocalProcess {
    id: ProcessId,
    runner: Runner,
    state: Mutex<ProcessState>,
    /// Woken whenever the retained output, the exit or the close changes: long-polling readers
    /// wait on it.
    changed: Notify,
    /// `None` when stdin was closed at start (a pipe process without `pipeStdin`).
    stdin: Option<StdinQueue>,
    /// A PTY process's terminal, for resizing; let go once the process has closed.
    terminal: Mutex<Option<std::os::fd::OwnedFd>>,
    /// As started, for `process/list`.
    argv: Vec<String>,
    tty: bool,
    /// Started with a sandbox intent: `sandboxDenied` is worked out at exit.
    sandboxed: bool,
    /// A full sandbox's inner stage (PID 1 inside it), as this host numbers it: signals go
    /// there, to be forwarded to the command. Unset until bubblewrap has said it, and for
    /// processes without one.
    inner_pid: std::sync::OnceLock<rustix::process::Pid>,
}

struct ProcessState {
    output: RetainedOutput,
    write_ids: WriteIds,
    sandbox_denied: bool,
}

impl LocalProcess {
    pub fn id(&self) -> &ProcessId {
        &self.id
    }

    /// The OS process id of the child (and of its process group); `None` for a connection.
    pub fn pid(&self) -> Option<i32> {
        match &self.runner {
            Runner::Child { pgid, .. } => Some(pgid.as_raw_nonzero().get()),
            Runner::Connection { .. } => None,
        }
    }

    /// Ends a forwarded connection: its pump stops reading, and its stdin closes (after what
    /// is queued), which drops the write half. Nothing for a child.
    fn stop_connection(&self) {
        if let Runner::Connection { stop, .. } = &self.runner {
            stop.cancel();
            if let Some(stdin) = &self.stdin {
                stdin.close();
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, ProcessState> {
        // A panic while holding this lock leaves plain data behind, still consistent enough to
        // read; keep serving rather than poisoning every later request.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn has_exited(&self) -> bool {
        self.state().output.exit().is_some()
    }

    /// What `process/list` says of this process.
    pub fn summary(&self) -> ProcessSummary {
        let state = self.state();
        let output = &state.output;
        let exit_code = output.exit().map(|(_, code)| code);
        ProcessSummary {
            process_id: self.id.clone(),
            argv: self.argv.clone(),
            tty: self.tty,
            state: match (output.is_closed(), exit_code) {
                (true, _) => RunState::Closed,
                (false, Some(_)) => RunState::Exited,
                (false, None) => RunState::Running,
            },
            exit_code,
            next_seq: output.next_seq(),
            oldest_retained_seq: output.oldest_readable_seq(),
            connect: match &self.runner {
                Runner::Connection { destination, .. } => Some(*destination),
                Runner::Child { .. } => None,
            },
        }
    }

    pub fn is_closed(&self) -> bool {
        self.state().output.is_closed()
    }

    /// Sets a PTY process's terminal size; the kernel signals `SIGWINCH` to its foreground
    /// process group.
    pub fn resize(&self, cols: u16, rows: u16) -> Result<(), ProcessError> {
        if cols == 0 || rows == 0 {
            return Err(ProcessError::InvalidParams(format!(
                "a terminal must be at least 1×1, got {cols}×{rows}"
            )));
        }
        let terminal = self.terminal.lock().unwrap_or_else(|p| p.into_inner());
        let Some(terminal) = terminal.as_ref() else {
            return Err(ProcessError::InvalidParams(format!(
                "process {} has no terminal to resize: it was started without `tty`, or has closed",
                self.id
            )));
        };
        let size =
            rustix::termios::Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        rustix::termios::tcsetwinsize(terminal, size)
            .map_err(|e| ProcessError::Signal(std::io::Error::from(e)))
    }

    /// Lets go of the terminal (the process has closed; its descriptor must not linger).
    pub(crate) fn release_terminal(&self) {
        self.terminal.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// Output bytes retained in memory for replays now.
    pub fn retained_bytes(&self) -> usize {
        self.state().output.bytes()
    }

    /// Output bytes spilled to disk for replays now.
    pub fn spilled_bytes(&self) -> u64 {
        self.state().output.spilled_bytes()
    }

    /// Gives up the output spilled to disk (its file is freed); reads then say it is gone.
    pub(crate) fn discard_spill(&self) {
        self.state().output.discard_spill();
    }

    /// The next sequence number this process will allocate.
    pub fn next_seq(&self) -> u64 {
        self.state().output.next_seq()
    }

    /// The oldest sequence number still retained, if any output is.
    pub fn oldest_retained_seq(&self) -> Option<u64> {
        self.state().output.oldest_retained_seq()
    }

    /// Retained output after `after_seq`. With a `wait`, returns as soon as there is a chunk, the
    /// exit or the close past `after_seq`, or when the wait runs out.
    pub async fn read(
        &self,
        after_seq: u64,
        max_bytes: Option<usize>,
        wait: Option<Duration>,
    ) -> ReadResponse {
        let deadline = wait.filter(|w| !w.is_zero()).map(deadline_after);
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let disk = {
                let state = self.state();
                let news = state.output.has_news_after(after_seq);
                if news || deadline.is_none_or(|d| Instant::now() >= d) {
                    Some(state.output.plan_read(after_seq, max_bytes))
                } else {
                    None
                }
            };
            if let Some(disk) = disk {
                // Spilled output is read on the blocking pool, with the state lock released.
                let disk = match disk {
                    Some(read) => Some(read_spilled(read).await),
                    None => None,
                };
                let mut state = self.state();
                let denied = state.sandbox_denied;
                match state.output.finish_read(after_seq, max_bytes, disk) {
                    Some(window) => return to_response(window, denied),
                    // What was read from the disk was dropped meanwhile: read again.
                    None => continue,
                }
            }
            match deadline {
                Some(deadline) => {
                    tokio::select! {
                        () = &mut changed => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    /// The events after `after_seq` as they were published — output chunks (about
    /// `max_bytes` of them, at least one), the exit and the close in their places — for a
    /// handle catching up on what it let pass. `Err` with the oldest sequence still readable
    /// when what follows `after_seq` is no longer retained — in memory: it never waits for the
    /// disk, so output only a spill file holds counts as gone here.
    pub fn events_after(
        &self,
        after_seq: u64,
        max_bytes: usize,
    ) -> Result<Vec<ProcessEvent>, EventsLost> {
        let mut state = self.state();
        let sandbox_denied = state.sandbox_denied;
        let exit = state.output.exit();
        let closed_seq = state.output.is_closed().then(|| state.output.next_seq() - 1);
        let window = state.output.read(after_seq, Some(max_bytes));
        // A budgeted window ends after its last chunk, or at the process's next sequence.
        let end = window.next_seq;
        let id = &self.id;
        let mut events: Vec<ProcessEvent> = window
            .chunks
            .into_iter()
            .map(|chunk| ProcessEvent::Output {
                process_id: id.clone(),
                seq: chunk.seq,
                stream: chunk.stream,
                chunk: chunk.chunk.0,
            })
            .collect();
        if let Some((seq, exit_code)) = exit.filter(|&(seq, _)| seq > after_seq && seq < end) {
            events.push(ProcessEvent::Exited {
                process_id: id.clone(),
                seq,
                exit_code,
                sandbox_denied,
            });
        }
        if let Some(seq) = closed_seq.filter(|&seq| seq > after_seq && seq < end) {
            events.push(ProcessEvent::Closed { process_id: id.clone(), seq });
        }
        events.sort_by_key(ProcessEvent::seq);
        let contiguous = events.iter().zip(after_seq + 1..).all(|(event, seq)| event.seq() == seq);
        // Nothing to return though sequences passed: all of them were output, and dropped.
        let all_dropped = events.is_empty() && end > after_seq.saturating_add(1);
        if !contiguous || all_dropped {
            return Err(EventsLost { after_seq, oldest_readable_seq: window.oldest_readable_seq });
        }
        Ok(events)
    }

    /// Queues bytes for the child's stdin. A `write_id` seen before is acknowledged without
    /// writing again; the id is recorded in the same critical section that queues the bytes, so
    /// a retried write can never be applied twice.
    pub fn write(&self, chunk: Bytes, write_id: &str) -> Result<WriteStatus, ProcessError> {
        let Some(stdin) = &self.stdin else {
            return Ok(WriteStatus::StdinClosed);
        };
        let mut state = self.state();
        if state.write_ids.contains(write_id) {
            return Ok(WriteStatus::Accepted);
        }
        if !stdin.push(&self.id, chunk)? {
            return Ok(WriteStatus::StdinClosed);
        }
        state.write_ids.remember(write_id);
        Ok(WriteStatus::Accepted)
    }

    /// Ends a pipe process's input after what was written (the child reads end of file);
    /// later writes answer `stdinClosed`. A terminal has no input to close: its end of input
    /// is a Ctrl-D typed on it, which a client writes like any other key.
    pub fn close_stdin(&self) -> Result<(), ProcessError> {
        if self.tty {
            return Err(ProcessError::InvalidParams(format!(
                "process {} runs on a terminal, whose input cannot be closed: write byte 0x04 (Ctrl-D) to signal end of input",
                self.id
            )));
        }
        if let Some(stdin) = &self.stdin {
            stdin.close();
        }
        Ok(())
    }

    /// Sends `signal` to the process group, so that the grandchildren a shell started get it
    /// too, as they would from a terminal. A process that already exited is left alone.
    /// A connection ends on any signal, as a process ends on each of these signals' default
    /// action.
    pub fn signal(&self, signal: ProcessSignal) -> Result<(), ProcessError> {
        if self.has_exited() {
            return Ok(());
        }
        let pgid = match &self.runner {
            Runner::Child { pgid, .. } => *pgid,
            Runner::Connection { .. } => {
                self.stop_connection();
                return Ok(());
            }
        };
        use rustix::process::Signal;
        let number = match signal {
            ProcessSignal::Interrupt => Signal::INT,
            ProcessSignal::Terminate => Signal::TERM,
            ProcessSignal::Kill => Signal::KILL,
            ProcessSignal::Hangup => Signal::HUP,
            ProcessSignal::Quit => Signal::QUIT,
            ProcessSignal::User1 => Signal::USR1,
            ProcessSignal::User2 => Signal::USR2,
        };
        // A sandboxed command is reached through its inner stage, which forwards the signal
        // to the command's group; until its pid is known, or for SIGKILL, the launcher's group
        // is signalled, and the sandbox ends with it.
        let sent = match self.inner_pid.get() {
            Some(inner) if number != Signal::KILL => rustix::process::kill_process(*inner, number),
            _ => rustix::process::kill_process_group(pgid, number),
        };
        match sent {
            Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
            Err(e) => Err(ProcessError::Signal(e.into())),
        }
    }

    /// Records the inner stage's pid once bubblewrap has said it.
    pub(crate) fn set_inner_pid(&self, pid: rustix::process::Pid) {
        let _ = self.inner_pid.set(pid);
    }

    /// Kills the process group with SIGKILL if the process is still running; returns whether it
    /// was. A process that already exited is not touched, whatever it left behind.
    ///
    /// A connection's stdin is closed whether or not the peer has finished sending: its write
    /// half is let go either way.
    pub fn terminate(&self) -> bool {
        let running = !self.has_exited();
        match &self.runner {
            Runner::Connection { .. } => self.stop_connection(),
            Runner::Child { .. } if running => self.kill_group(),
            Runner::Child { .. } => {}
        }
        running
    }

    /// SIGKILL to the whole group, whether or not the leader is still there: used when a session
    /// ends, so that nothing it started outlives it.
    pub(crate) fn kill_group(&self) {
        match &self.runner {
            Runner::Child { pgid, .. } => {
                let _ = rustix::process::kill_process_group(*pgid, rustix::process::Signal::KILL);
            }
            Runner::Connection { .. } => self.stop_connection(),
        }
    }

    /// SIGKILL to the group of a process that has closed, for what it left behind: a command
    /// such as `sleep 1000 >/dev/null &` outlives the shell that started it, in its group.
    /// The group's id is the leader's pid, which the kernel does not hand out again while the
    /// group has members; so the group is still this process's unless a process with that pid
    /// exists and started at another time (the group emptied and the pid was reused), and then
    /// it is left alone.
    pub(crate) fn kill_leftovers(&self) {
        let (pgid, ours) = match &self.runner {
            Runner::Child { pgid, leader_started: Some(ours) } => (*pgid, *ours),
            Runner::Child { leader_started: None, .. } => return,
            Runner::Connection { .. } => return self.stop_connection(),
        };
        match proc_stat::read(pgid.as_raw_nonzero().get()).map(|s| s.start_time) {
            Some(now) if now != ours => {}
            _ => self.kill_group(),
        }
    }
}

/// The server-wide budget sheds a process's oldest output under its own lock, one process at
/// a time.
impl output_budget::Holder for LocalProcess {
    fn held(&self) -> usize {
        self.retained_bytes()
    }

    fn shed_to(self: Arc<Self>, level: usize) {
        let (shed, spills) = {
            let mut state = self.state();
            (state.output.shed_to(level), state.output.spills())
        };
        if shed == 0 {
            return;
        }
        debug!(process_id = %self.id, shed, level, "retained output shed for the server-wide budget");
        // What went to the spill waits in memory until written; a process that prints nothing
        // more would never have its pump write it.
        if spills {
            tokio::spawn(async move { pump::settle_spill(&self).await });
        }
    }
}

impl std::fmt::Debug for LocalProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalProcess").field("id", &self.id).field("pid", &self.pid()).finish()
    }
}

fn to_response(window: ReadWindow, sandbox_denied: bool) -> ReadResponse {
    ReadResponse {
        chunks: window.chunks,
        next_seq: window.next_seq,
        exited: window.exited,
        exit_code: window.exit_code,
        closed: window.closed,
        failure: None,
        sandbox_denied: sandbox_denied && window.exited,
        oldest_retained_seq: Some(window.oldest_readable_seq),
    }
}

/// What [`LocalProcess::events_after`] could not return: the output after `after_seq` was
/// dropped to stay within the retention limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the output after sequence {after_seq} is no longer retained (the oldest still held is {oldest_readable_seq})"
)]
pub struct EventsLost {
    pub after_seq: u64,
    pub oldest_readable_seq: u64,
}

/// Reads spilled output on the blocking pool. A read that never finished (the runtime is
/// going away) is an I/O error, which gives the spill up.
async fn read_spilled(read: DiskRead) -> (DiskRead, std::io::Result<Vec<ProcessOutputChunk>>) {
    let reading = read.clone();
    match tokio::task::spawn_blocking(move || reading.run()).await {
        Ok(chunks) => (read, chunks),
        Err(error) => (read, Err(std::io::Error::other(error.to_string()))),
    }
}

/// `now + wait`, saturating: a client may ask to wait `u64::MAX` milliseconds.
fn deadline_after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait).unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// The most recent write ids, oldest forgotten first.
struct WriteIds {
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl WriteIds {
    fn new() -> Self {
        Self { order: VecDeque::new(), set: HashSet::new() }
    }

    fn contains(&self, id: &str) -> bool {
        self.set.contains(id)
    }

    fn remember(&mut self, id: &str) {
        if self.order.len() == REMEMBERED_WRITE_IDS
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        self.order.push_back(id.to_owned());
        self.set.insert(id.to_owned());
    }
}

/// What a started process is made of, for [`new_process`].
pub(crate) struct NewProcess {
    pub id: ProcessId,
    pub runner: Runner,
    pub output: RetainedOutput,
    pub stdin: Option<StdinQueue>,
    pub terminal: Option<std::os::fd::OwnedFd>,
    pub argv: Vec<String>,
    pub tty: bool,
    pub sandboxed: bool,
}

/// A started process, counted by `budget` (the one its retained output accounts to).
pub(crate) fn new_process(parts: NewProcess, budget: &Arc<OutputBudget>) -> Arc<LocalProcess> {
    let NewProcess { id, runner, output, stdin, terminal, argv, tty, sandboxed } = parts;
    let process = Arc::new(LocalProcess {
        id,
        runner,
        state: Mutex::new(ProcessState {
            output,
            write_ids: WriteIds::new(),
            sandbox_denied: false,
        }),
        changed: Notify::new(),
        stdin,
        terminal: Mutex::new(terminal),
        argv,
        tty,
        sandboxed,
        inner_pid: std::sync::OnceLock::new(),
    });
    let holder: Arc<dyn output_budget::Holder> = process.clone();
    budget.register(Arc::downgrade(&holder));
    process
}

/// Reads bubblewrap's `--info-fd` until it has named the inner stage, and records its pid.
/// Bounded: the message is a few dozen bytes; anything past 4 KiB is not it.
pub(crate) async fn learn_inner_pid(process: Arc<LocalProcess>, info: std::os::fd::OwnedFd) {
    use tokio::io::AsyncReadExt;
    const INFO_LIMIT: usize = 4096;
    let Ok(mut pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(info) else { return };
    let mut text = Vec::new();
    let mut buffer = [0u8; 512];
    while text.len() < INFO_LIMIT {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => text.extend_from_slice(&buffer[..n]),
        }
        if text.contains(&b'}') {
            break;
        }
    }
    if let Some(pid) =
        crate::sandbox::launch::child_pid_from_info(&text).and_then(rustix::process::Pid::from_raw)
    {
        process.set_inner_pid(pid);
    }
}

pub(crate) use pump::run_pump;
pub(crate) use stdin::{start_stdin_writer, start_stdin_writer_until};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_ids_forget_the_oldest() {
        let mut ids = WriteIds::new();
        for n in 0..REMEMBERED_WRITE_IDS + 1 {
            ids.remember(&n.to_string());
        }
        assert!(!ids.contains("0"));
        assert!(ids.contains("1"));
        assert!(ids.contains(&REMEMBERED_WRITE_IDS.to_string()));
    }
}
