//! The output pump: one task per process that reads every output stream, waits for the exit,
//! and numbers and publishes everything in one order.
//!
//! Doing all of it in one task is what makes Tether's events arrive in sequence order (the
//! reference reads each stream in its own task, so its notifications can overtake each other).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tether_protocol::process::ExecOutputStream;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, trace};

use super::retained::SpillStep;
use super::spawn::{Reader, Spawned};
use super::spill::SpillFile;
use super::{LocalProcess, ProcessEvent, READ_CHUNK_BYTES};

/// After a PTY process exits, how long the terminal may stay quiet before it is considered
/// finished. A background job may keep the terminal open forever; the exited process's own
/// last output is already in the terminal and arrives well within this.
pub const PTY_DRAIN_IDLE: Duration = Duration::from_millis(20);

/// How long a PTY process's exit may wait for its terminal to be read to the end. A terminal's
/// output passes the kernel's line discipline (a worker thread) before it can be read, so
/// when the exit is seen, what the process printed last may still be on its way; the exit goes
/// out once the terminal has ended (the process held it alone, the usual case: a millisecond
/// or two) or stayed quiet for [`PTY_DRAIN_IDLE`], and at the latest after this long, for a
/// background job that keeps the terminal and prints on. What is read meanwhile is numbered
/// before the exit, and `sandboxDenied` is judged on it.
pub const PTY_EXIT_WAIT: Duration = Duration::from_millis(100);

/// Reads taken without waiting, per stream, when the exit is observed: output the child wrote
/// before exiting is numbered before its exit. Bounded so a chatty grandchild cannot hold the
/// exit back.
const READS_BEFORE_EXIT: usize = 16;

struct Stream {
    label: ExecOutputStream,
    reader: Option<Reader>,
    buffer: BytesMut,
}

impl Stream {
    fn new(label: ExecOutputStream, reader: Reader) -> Self {
        Self { label, reader: Some(reader), buffer: BytesMut::with_capacity(READ_CHUNK_BYTES) }
    }

    fn is_open(&self) -> bool {
        self.reader.is_some()
    }

    /// One chunk: `Some(bytes)` or `None` at end of stream. A PTY reports its end as EIO, and
    /// any other read error ends the stream the same way.
    ///
    /// After the read that waited, what more is ready is read at once into the same chunk (up
    /// to [`READ_CHUNK_BYTES`]): a PTY hands out at most a few KiB per read however much is
    /// waiting, and a chunk per read would be a notification per few KiB. Nothing waits for
    /// more, so an interactive echo goes out as soon as it is read.
    async fn read(&mut self) -> Option<Bytes> {
        use futures_util::FutureExt as _;
        let reader = self.reader.as_mut()?;
        self.buffer.clear();
        self.buffer.reserve(READ_CHUNK_BYTES);
        let first = reader.read_buf(&mut self.buffer).await;
        if matches!(first, Ok(n) if n > 0) {
            // Each read appends into the capacity reserved above, never past it.
            while self.buffer.len() < READ_CHUNK_BYTES {
                let more = reader.read_buf(&mut self.buffer).now_or_never();
                // Not ready, or the end: the end is met again by the next read.
                if !matches!(more, Some(Ok(n)) if n > 0) {
                    break;
                }
            }
        }
        match first.map(|_| self.buffer.len()) {
            Ok(0) | Err(_) => {
                self.reader = None;
                None
            }
            // A large read becomes the chunk itself (the next read gets a fresh buffer): a
            // streaming process's bytes are not copied. A small one is copied out, so that a
            // retained chunk costs its size, not the 64 KiB buffer it was read into.
            Ok(n) if n >= READ_CHUNK_BYTES / 2 => Some(self.buffer.split().freeze()),
            Ok(n) => Some(Bytes::copy_from_slice(&self.buffer[..n])),
        }
    }
}

/// Reads `stream` if it is open, otherwise never completes (so `select!` ignores it).
async fn read_open(stream: &mut Stream) -> Option<Bytes> {
    if stream.is_open() { stream.read().await } else { std::future::pending().await }
}

pub(crate) async fn run_pump(
    process: Arc<LocalProcess>,
    spawned: Spawned,
    tty: bool,
    events: mpsc::Sender<ProcessEvent>,
) {
    // A sandbox's hold (its mount targets on the host) is let go when the process closes.
    let Spawned { mut child, primary, secondary, sandbox: hold, pty_eager, proxy, .. } = spawned;
    let first_label = if tty { ExecOutputStream::Pty } else { ExecOutputStream::Stdout };
    let mut streams = vec![Stream::new(first_label, primary)];
    if let Some(stderr) = secondary {
        streams.push(Stream::new(ExecOutputStream::Stderr, stderr));
    }
    let pump = Pump { process, events };
    let mut exited = false;
    // Set once a PTY process exited: the terminal is finished when quiet this long.
    let mut pty_quiet_deadline: Option<Instant> = None;
    // A PTY process's exit code, held until its terminal is read to the end, and until when
    // at the latest ([`PTY_EXIT_WAIT`]).
    let mut held_exit: Option<(i32, Instant)> = None;

    loop {
        if exited && streams.iter().all(|s| !s.is_open()) {
            break;
        }
        let (first, rest) = streams.split_at_mut(1);
        let second = rest.first_mut();
        tokio::select! {
            biased;
            chunk = read_open(&mut first[0]) => {
                if let Some(chunk) = chunk {
                    pump.output(first[0].label, chunk).await;
                    pty_quiet_deadline = pty_quiet_deadline.map(|_| Instant::now() + PTY_DRAIN_IDLE);
                }
            }
            chunk = async {
                match second {
                    Some(stream) => read_open(stream).await.map(|c| (stream.label, c)),
                    None => std::future::pending().await,
                }
            } => {
                if let Some((label, chunk)) = chunk {
                    pump.output(label, chunk).await;
                }
            }
            code = wait_for_exit(&mut child), if !exited => {
                exited = true;
                if let Some(eager) = &pty_eager {
                    eager.now();
                }
                pump.drain_ready(&mut streams).await;
                if tty {
                    let now = Instant::now();
                    pty_quiet_deadline = Some(now + PTY_DRAIN_IDLE);
                    held_exit = Some((code, now + PTY_EXIT_WAIT));
                } else {
                    pump.exit(code).await;
                }
            }
            () = sleep_until_some(pty_quiet_deadline) => {
                // The terminal stayed quiet after the exit: whatever still holds it (a background
                // job) is not this process's output any more.
                streams.iter_mut().for_each(|s| s.reader = None);
            }
            () = sleep_until_some(held_exit.map(|(_, latest)| latest)) => {
                // A background job keeps the terminal busy: the exit waits no longer.
                if let Some((code, _)) = held_exit.take() {
                    pump.exit(code).await;
                }
            }
        }
    }
    if let Some((code, _)) = held_exit {
        pump.exit(code).await;
    }
    // Before `process/closed`: a client that looks at the host once it has that sees none of
    // the empty directories a sandbox made there for missing protected names.
    drop(hold);
    // Before `process/closed` too: once the client has that, the proxy is gone (its
    // listeners closed), and nothing the process left behind reaches the network through it.
    if let Some(proxy) = proxy {
        proxy.stop().await;
    }
    pump.close().await;
}

/// The `sandboxDenied` guess over what the process printed last.
fn looks_denied(output: &super::RetainedOutput, exit_code: i32) -> bool {
    use crate::sandbox::denied::{SEARCHED_TAIL_BYTES, looks_denied};
    let stdout = output.tail(|s| s != ExecOutputStream::Stderr, SEARCHED_TAIL_BYTES);
    let stderr = output.tail(|s| s == ExecOutputStream::Stderr, SEARCHED_TAIL_BYTES);
    looks_denied(exit_code, &stdout, &stderr)
}

/// Does what a process's spill needs (its file made, batches written) on the blocking pool,
/// with the state lock released: the pump waits meanwhile, as it would for a slow client, but
/// no async thread and no reader does. Also run for a process the server-wide budget shed
/// into its spill, which may print nothing more to make its pump do it.
pub(crate) async fn settle_spill(process: &LocalProcess) {
    loop {
        let step = process.state().output.spill_step();
        match step {
            SpillStep::Nothing => return,
            SpillStep::MakeFile(config) => {
                let made = tokio::task::spawn_blocking(move || SpillFile::create(&config))
                    .await
                    .unwrap_or_else(|panic| Err(std::io::Error::other(panic.to_string())));
                process.state().output.spill_file_made(made);
            }
            SpillStep::Write(batch) => {
                let written = tokio::task::spawn_blocking(move || {
                    let written = batch.write();
                    (batch, written)
                })
                .await;
                let mut state = process.state();
                match written {
                    Ok((batch, written)) => state.output.spill_written(&batch, written),
                    // The write never finished (the runtime is going away): the spill
                    // cannot be trusted.
                    Err(panic) => state.output.give_up_spill(&panic.to_string()),
                }
            }
        }
    }
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Waits for the child and turns its status into the exit code clients see: the status, or
/// 128 + the signal number (the shell convention) when a signal killed it; -1 if the status
/// could not be read.
async fn wait_for_exit(child: &mut super::child::Child) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match child.wait().await {
        Ok(status) => status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(-1),
        Err(_) => -1,
    }
}

/// Numbers and publishes one process's events (its output, exit and close), in one order.
pub(super) struct Pump {
    pub(super) process: Arc<LocalProcess>,
    pub(super) events: mpsc::Sender<ProcessEvent>,
}

impl Pump {
    pub(super) async fn output(&self, stream: ExecOutputStream, chunk: Bytes) {
        let seq = self.process.state().output.push_output(stream, chunk.clone());
        self.spill().await;
        trace!(process_id = %self.process.id, seq, bytes = chunk.len(), "output");
        self.publish(ProcessEvent::Output {
            process_id: self.process.id.clone(),
            seq,
            stream,
            chunk,
        })
        .await;
    }

    async fn spill(&self) {
        settle_spill(&self.process).await;
    }

    pub(super) async fn exit(&self, exit_code: i32) {
        let (seq, sandbox_denied) = {
            let mut state = self.process.state();
            let denied = self.process.sandboxed && looks_denied(&state.output, exit_code);
            state.sandbox_denied = denied;
            (state.output.record_exit(exit_code), denied)
        };
        debug!(process_id = %self.process.id, seq, exit_code, sandbox_denied, "process exited");
        self.publish(ProcessEvent::Exited {
            process_id: self.process.id.clone(),
            seq,
            exit_code,
            sandbox_denied,
        })
        .await;
    }

    pub(super) async fn close(&self) {
        let seq = self.process.state().output.record_close();
        debug!(process_id = %self.process.id, seq, "process closed");
        self.publish(ProcessEvent::Closed { process_id: self.process.id.clone(), seq }).await;
    }

    /// Takes what the streams already hold without waiting for more.
    async fn drain_ready(&self, streams: &mut [Stream]) {
        for stream in streams.iter_mut() {
            for _ in 0..READS_BEFORE_EXIT {
                if !stream.is_open() {
                    break;
                }
                // A zero timeout polls the read once: ready data or nothing.
                match tokio::time::timeout(Duration::ZERO, stream.read()).await {
                    Ok(Some(chunk)) => self.output(stream.label, chunk).await,
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }

    /// Wakes local readers, then hands the event to the session. Sending waits while the
    /// session's consumer is behind: a slow client slows this process's pipes, not the server's
    /// memory.
    async fn publish(&self, event: ProcessEvent) {
        self.process.changed.notify_waiters();
        // No receiver means nobody listens any more (the session is gone); the output is
        // retained either way.
        let _ = self.events.send(event).await;
    }
}
