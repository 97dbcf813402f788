//! A stdio MCP server run as an executor process, as an rmcp transport.
//!
//! The server is started through an [`ExecBackend`] — the local engine or a remote session —
//! with piped stdin and no TTY. Messages go to it as `process/write`s of one JSON line each and
//! come back as its stdout, framed by lines. Because the process is an ordinary exec handle, a
//! remote one rides through WebSocket drops like any other: same process, no lost line, and
//! each write applied once.
//!
//! One task (the pump) owns the process handle: it follows the process's events and performs
//! the writes in the order they were asked for, so a line is never interleaved with another.
//! The transport talks to it through channels; dropping the transport ends the pump, which
//! terminates the process, so nothing outlives its client.
//!
//! Both channels are bounded. Messages read and not yet taken by the client hold at most
//! [`QUEUED_MESSAGE_BYTES`]: at that, the pump stops taking the process's output — it stays
//! in the process handle, which holds it within its own bound and catches up on it later, or
//! says the output was lost — so a server that floods a slow client costs the client no more
//! than that. Writes are served meanwhile: the client's next message may be the one that lets
//! the server stop.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use tether_engine::ProcessEvent;
use tether_engine::exec::{
    ExecBackend, ExecError, ExecProcess, ProcessFailure, ProcessFailureKind, ProcessUpdate,
};
use tether_protocol::PathUri;
use tether_protocol::process::{EnvInherit, EnvPolicy, ExecOutputStream, ExecParams, WriteStatus};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tracing::{Instrument, debug, info_span, warn};

use crate::error::McpError;
use crate::line_buffer::{Line, LineBuffer};
use crate::notifications::NotificationTap;

/// Longest stdout line (one JSON-RPC message) accepted from a server.
pub const MAX_STDOUT_LINE_BYTES: usize = 8 * 1024 * 1024;
/// Longest stderr line kept; longer ones are dropped.
pub const MAX_STDERR_LINE_BYTES: usize = 1024 * 1024;
/// Stderr lines kept to explain a server's exit.
const STDERR_TAIL_LINES: usize = 20;
/// Bytes of one stderr line kept in that tail.
const STDERR_TAIL_LINE_BYTES: usize = 512;

/// Messages read from the server and not yet taken by the client, by the bytes of their
/// lines: 1 MiB, hundreds of ordinary messages, which a client that keeps up never comes near
/// (rmcp takes each as it comes). A line longer than this is queued alone, once the queue is
/// empty, so the bound is this or one longest line ([`MAX_STDOUT_LINE_BYTES`]), whichever is
/// more.
pub const QUEUED_MESSAGE_BYTES: usize = 1024 * 1024;

/// The least a queued message counts for, however short its line: a parsed message costs its
/// maps and strings beyond its text, so a flood of tiny messages is bounded too.
const MESSAGE_COST_FLOOR_BYTES: usize = 256;

/// Writes asked for and not yet performed: rmcp writes one message at a time per request or
/// answer it sends, so a queue of a few dozen never fills unless the process stops reading
/// its stdin, and then a writer waits here rather than growing the queue.
const QUEUED_WRITES: usize = 64;

/// How to start a stdio MCP server on the executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioServerCommand {
    pub program: String,
    pub args: Vec<String>,
    /// Set for the server on top of the executor's core variables (`PATH`, `HOME`, …); nothing
    /// else of the executor's environment reaches it.
    pub env: BTreeMap<String, String>,
    /// The server's working directory, on the executor. Required: a remote executor's
    /// filesystem has no default that would be right for every server.
    pub cwd: PathBuf,
}

/// What is known of a server process's end, for errors that say why it went away.
#[derive(Debug, Default)]
pub(crate) struct ServerEnd {
    pub exit_code: Option<i32>,
    pub failure: Option<ProcessFailure>,
    pub closed: bool,
    pub stderr_tail: VecDeque<String>,
}

impl ServerEnd {
    /// One sentence on how the server ended, or `None` while it runs.
    pub(crate) fn describe(&self) -> Option<String> {
        let how = match (&self.failure, self.exit_code) {
            // A stopping executor ends its processes: this one is not running somewhere unseen.
            (Some(failure), _)
                if failure.kind == (ProcessFailureKind::SessionLost { server_went_away: true }) =>
            {
                format!("was stopped with its executor, which shut down: {failure}")
            }
            (Some(failure), _) => format!("could no longer be followed: {failure}"),
            (None, Some(code)) => format!("exited with code {code}"),
            (None, None) if self.closed => "closed its output".to_owned(),
            (None, None) => return None,
        };
        let tail = if self.stderr_tail.is_empty() {
            String::new()
        } else {
            let lines: Vec<&str> = self.stderr_tail.iter().map(String::as_str).collect();
            format!("; its last stderr lines: {}", lines.join(" | "))
        };
        Some(format!("the MCP server process {how}{tail}"))
    }
}

/// An rmcp client transport over an executor process.
pub struct ExecutorStdioTransport {
    writes: mpsc::Sender<WriteRequest>,
    messages: mpsc::UnboundedReceiver<Queued>,
    shutdown: Option<oneshot::Sender<()>>,
    /// Closed when the pump has ended (the process terminated, its handle dropped), so that
    /// `close` returns once the server is gone rather than once it has been asked to go: a
    /// caller that closes a session and then looks at the executor's processes sees it ended.
    pump_ended: Option<oneshot::Receiver<()>>,
    end: Arc<Mutex<ServerEnd>>,
}

struct WriteRequest {
    line: Bytes,
    reply: oneshot::Sender<std::io::Result<()>>,
}

/// A message for the client, holding its room in the queue ([`QUEUED_MESSAGE_BYTES`]) until
/// it is taken: the channel is unbounded, the room is its bound.
struct Queued {
    message: ServerJsonRpcMessage,
    _room: OwnedSemaphorePermit,
}

/// What a message read from the server counts for in the queue ([`QUEUED_MESSAGE_BYTES`]).
fn queue_cost(line_bytes: usize) -> u32 {
    // The bound is far below `u32::MAX`.
    line_bytes.clamp(MESSAGE_COST_FLOOR_BYTES, QUEUED_MESSAGE_BYTES) as u32
}

impl ExecutorStdioTransport {
    /// Starts `command` through `exec` and returns the transport to it. The process's events
    /// are followed from its first one, so nothing the server says early is missed.
    pub async fn launch(
        exec: &dyn ExecBackend,
        command: &StdioServerCommand,
    ) -> Result<Self, McpError> {
        Self::launch_tapped(exec, command, None).await
    }

    /// [`launch`](Self::launch), offering every notification to `tap` as it is read.
    pub(crate) async fn launch_tapped(
        exec: &dyn ExecBackend,
        command: &StdioServerCommand,
        tap: Option<NotificationTap>,
    ) -> Result<Self, McpError> {
        let params = exec_params(command)?;
        let process = exec.start(params).await.map_err(|error| McpError::Launch {
            program: command.program.clone(),
            message: error.message,
            spawn_failure: error.spawn_failure,
        })?;
        Ok(Self::spawn(process, &command.program, tap))
    }

    fn spawn(process: Box<dyn ExecProcess>, program: &str, tap: Option<NotificationTap>) -> Self {
        let span = info_span!("mcp_stdio", process_id = %process.process_id(), program);
        let (transport, pump) = Self::pair(process, tap);
        tokio::spawn(pump.run().instrument(span));
        transport
    }

    /// The transport to `process` and the pump that serves it, not yet started.
    fn pair(process: Box<dyn ExecProcess>, tap: Option<NotificationTap>) -> (Self, Pump) {
        let (writes, write_requests) = mpsc::channel(QUEUED_WRITES);
        let (message_sender, messages) = mpsc::unbounded_channel();
        let (shutdown, shutdown_requested) = oneshot::channel();
        let end = Arc::new(Mutex::new(ServerEnd::default()));
        let (ended, pump_ended) = oneshot::channel();
        let pump = Pump {
            process,
            _ended: ended,
            write_requests,
            shutdown: shutdown_requested,
            messages: message_sender,
            room: Arc::new(Semaphore::new(QUEUED_MESSAGE_BYTES)),
            read: VecDeque::new(),
            ended: false,
            end: end.clone(),
            tap,
            stdout: LineBuffer::new(MAX_STDOUT_LINE_BYTES),
            stderr: LineBuffer::new(MAX_STDERR_LINE_BYTES),
            #[cfg(test)]
            waits_for_room: None,
        };
        (
            Self { writes, messages, shutdown: Some(shutdown), pump_ended: Some(pump_ended), end },
            pump,
        )
    }

    /// How the server ended, shared with the client for its errors.
    pub(crate) fn end(&self) -> Arc<Mutex<ServerEnd>> {
        self.end.clone()
    }
}

impl Transport<RoleClient> for ExecutorStdioTransport {
    type Error = std::io::Error;

    fn name() -> Cow<'static, str> {
        "executor-stdio".into()
    }

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writes = self.writes.clone();
        let end = self.end.clone();
        async move {
            let mut line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            line.push(b'\n');
            let (reply, answer) = oneshot::channel();
            let gone = || gone(&end);
            writes.send(WriteRequest { line: line.into(), reply }).await.map_err(|_| gone())?;
            answer.await.map_err(|_| gone())?
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        // Taken, the message gives its room back.
        self.messages.recv().await.map(|queued| queued.message)
    }

    /// Terminates the server and waits for the pump to end: as long as the executor takes to
    /// answer the terminate, within the client's own bounds (its recovery time, if the
    /// connection is down).
    async fn close(&mut self) -> Result<(), Self::Error> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(pump_ended) = self.pump_ended.take() {
            // Never sent: the pump drops its end as it finishes.
            let _ = pump_ended.await;
        }
        Ok(())
    }
}

/// How `command` is started: piped stdin, no TTY, the executor's core variables and the
/// command's own.
fn exec_params(command: &StdioServerCommand) -> Result<ExecParams, McpError> {
    let process_id = format!("mcp-stdio-{}", uuid::Uuid::new_v4());
    let cwd = PathUri::from_path(&command.cwd).ok_or_else(|| {
        McpError::InvalidConfig(format!(
            "the stdio server's cwd must be an absolute path, got {}",
            command.cwd.display()
        ))
    })?;
    let mut argv = vec![command.program.clone()];
    argv.extend(command.args.iter().cloned());
    let mut params = ExecParams::new(process_id.as_str(), argv, cwd);
    params.pipe_stdin = true;
    params.env = command.env.clone();
    params.env_policy = Some(EnvPolicy {
        inherit: EnvInherit::Core,
        ignore_default_excludes: false,
        exclude: Vec::new(),
        set: BTreeMap::new(),
        include_only: Vec::new(),
    });
    Ok(params)
}

/// The error a write meets once the server is gone: how it ended, when that is known.
fn gone(end: &Mutex<ServerEnd>) -> std::io::Error {
    let why = end.lock().unwrap().describe();
    std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        why.unwrap_or_else(|| "the MCP server transport is closed".into()),
    )
}

/// The task that owns the process handle (see the module docs).
struct Pump {
    process: Box<dyn ExecProcess>,
    /// Dropped with the pump, which tells a waiting `close` that it has ended.
    _ended: oneshot::Sender<()>,
    write_requests: mpsc::Receiver<WriteRequest>,
    /// Told when the transport is closed.
    shutdown: oneshot::Receiver<()>,
    messages: mpsc::UnboundedSender<Queued>,
    /// Room left in the client's queue ([`QUEUED_MESSAGE_BYTES`]).
    room: Arc<Semaphore>,
    /// Messages read and waiting for room, with what each counts for: the lines of one
    /// update at most, as the next update is taken only once these are queued.
    read: VecDeque<(ServerJsonRpcMessage, u32)>,
    /// The process said its last: what is read goes to the client, then the pump ends.
    ended: bool,
    end: Arc<Mutex<ServerEnd>>,
    tap: Option<NotificationTap>,
    stdout: LineBuffer,
    stderr: LineBuffer,
    /// Told each time the pump finds no room for the next message.
    #[cfg(test)]
    waits_for_room: Option<Arc<tokio::sync::Notify>>,
}

impl Pump {
    async fn run(mut self) {
        loop {
            let next_cost = self.read.front().map(|(_, cost)| *cost);
            if self.ended && next_cost.is_none() {
                // Dropping the sender ends the client's stream once it has taken the rest.
                return;
            }
            #[cfg(test)]
            if let (Some(cost), Some(waits)) = (next_cost, &self.waits_for_room)
                && self.room.available_permits() < cost as usize
            {
                waits.notify_one();
            }
            tokio::select! {
                biased;
                _ = &mut self.shutdown => return self.terminate("the transport was closed").await,
                request = self.write_requests.recv() => match request {
                    Some(WriteRequest { reply, .. }) if self.ended => {
                        let _ = reply.send(Err(gone(&self.end)));
                    }
                    Some(WriteRequest { line, reply }) => {
                        let result = self.process.write(line).await;
                        let _ = reply.send(write_result(result));
                    }
                    None => return self.terminate("the transport was dropped").await,
                },
                room = self.room.clone().acquire_many_owned(next_cost.unwrap_or(0)),
                    if next_cost.is_some() =>
                {
                    let (message, _) = self.read.pop_front().expect("a message waits for room");
                    let room = room.expect("the queue's room is never closed");
                    if self.messages.send(Queued { message, _room: room }).is_err() {
                        return self.terminate("the client stopped listening").await;
                    }
                }
                update = self.process.next_update(), if next_cost.is_none() && !self.ended => {
                    self.ended = !self.follow(update);
                    if self.messages.is_closed() {
                        return self.terminate("the client stopped listening").await;
                    }
                }
            }
        }
    }

    /// Takes one update; returns whether the process can still say anything.
    fn follow(&mut self, update: Option<ProcessUpdate>) -> bool {
        match update {
            Some(ProcessUpdate::Event(ProcessEvent::Output { stream, chunk, .. })) => {
                if stream == ExecOutputStream::Stderr {
                    for line in self.stderr.push(&chunk) {
                        self.keep_stderr(line);
                    }
                } else {
                    for line in self.stdout.push(&chunk) {
                        self.deliver(line);
                    }
                }
                true
            }
            Some(ProcessUpdate::Event(ProcessEvent::Exited { exit_code, .. })) => {
                // Output flushed at exit may still come: the stream ends with the close.
                self.end.lock().unwrap().exit_code = Some(exit_code);
                true
            }
            Some(ProcessUpdate::Event(ProcessEvent::Closed { .. })) | None => {
                if let Some(line) = self.stdout.finish() {
                    self.deliver(line);
                }
                if let Some(line) = self.stderr.finish() {
                    self.keep_stderr(line);
                }
                let mut end = self.end.lock().unwrap();
                end.closed = true;
                debug!(exit_code = ?end.exit_code, "MCP server process ended");
                false
            }
            Some(ProcessUpdate::Failed(failure)) => {
                warn!(kind = ?failure.kind, message = %failure, "MCP server process lost");
                self.end.lock().unwrap().failure = Some(failure);
                false
            }
        }
    }

    fn deliver(&mut self, line: Line) {
        match line {
            Line::Complete(line) if line.iter().all(u8::is_ascii_whitespace) => {}
            Line::Complete(line) => match serde_json::from_slice::<ServerJsonRpcMessage>(&line) {
                Ok(message) => {
                    if let Some(tap) = &self.tap {
                        tap.offer(&message);
                    }
                    self.read.push_back((message, queue_cost(line.len())));
                }
                Err(error) => {
                    debug!(bytes = line.len(), %error, "stdout line that is no MCP message skipped")
                }
            },
            Line::Overlong(bytes) => warn!(
                bytes,
                limit = MAX_STDOUT_LINE_BYTES,
                "MCP server wrote a stdout line over the limit; dropped"
            ),
        }
    }

    fn keep_stderr(&mut self, line: Line) {
        let Line::Complete(line) = line else { return };
        let mut text = String::from_utf8_lossy(&line).into_owned();
        if text.len() > STDERR_TAIL_LINE_BYTES {
            let mut cut = STDERR_TAIL_LINE_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        let mut end = self.end.lock().unwrap();
        if end.stderr_tail.len() == STDERR_TAIL_LINES {
            end.stderr_tail.pop_front();
        }
        end.stderr_tail.push_back(text);
    }

    async fn terminate(self, why: &str) {
        debug!(why, "terminating the MCP server process");
        if let Err(error) = self.process.terminate().await {
            debug!(%error, "terminating the MCP server process failed");
        }
    }
}

fn write_result(result: Result<WriteStatus, ExecError>) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    match result {
        Ok(WriteStatus::Accepted) => Ok(()),
        Ok(WriteStatus::UnknownProcess) => {
            Err(Error::new(ErrorKind::BrokenPipe, "the MCP server process is gone"))
        }
        Ok(WriteStatus::StdinClosed) => {
            Err(Error::new(ErrorKind::BrokenPipe, "the MCP server closed its stdin"))
        }
        Ok(WriteStatus::Starting) => {
            Err(Error::new(ErrorKind::WouldBlock, "the MCP server process is still starting"))
        }
        Err(error) => Err(Error::other(error)),
    }
}

#[cfg(test)]
mod tests {
    use tether_engine::ProcessTableConfig;
    use tether_engine::exec::LocalExecBackend;
    use tokio::sync::Notify;

    use super::*;

    /// Messages in the flood: 100 of 20 KB, twice the queue, and within what the process
    /// handle holds for a slow reader (so nothing may be lost).
    const FLOOD_MESSAGES: usize = 100;
    const FLOOD_PAD_BYTES: usize = 20_000;

    /// A server that writes `FLOOD_MESSAGES` log messages at once, numbered, then waits for
    /// its stdin to close.
    fn flooding_server() -> StdioServerCommand {
        let script = format!(
            r#"pad=$(head -c {FLOOD_PAD_BYTES} /dev/zero | tr '\0' a); i=0
while [ $i -lt {FLOOD_MESSAGES} ]; do
  printf '{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":"%s %s"}}}}\n' $i "$pad"
  i=$((i+1))
done
exec cat >/dev/null"#
        );
        StdioServerCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script],
            env: BTreeMap::new(),
            cwd: std::env::temp_dir(),
        }
    }

    /// The transport to `command`, started on the local engine, once its pump has found the
    /// queue full (nothing is taken from it here).
    async fn until_full(command: StdioServerCommand) -> ExecutorStdioTransport {
        let backend = LocalExecBackend::new(ProcessTableConfig::default());
        let process = backend.start(exec_params(&command).unwrap()).await.unwrap();
        let (transport, mut pump) = ExecutorStdioTransport::pair(process, None);
        let waits = Arc::new(Notify::new());
        pump.waits_for_room = Some(waits.clone());
        tokio::spawn(pump.run());
        waits.notified().await;
        transport
    }

    /// The number a flood message carries in its data.
    fn number(message: &ServerJsonRpcMessage) -> usize {
        let ServerJsonRpcMessage::Notification(notification) = message else {
            panic!("not a notification: {message:?}");
        };
        let value = serde_json::to_value(&notification.notification).unwrap();
        let data = value["params"]["data"].as_str().unwrap();
        data.split(' ').next().unwrap().parse().unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flood_the_client_does_not_read_waits_at_the_bound_and_then_arrives_whole() {
        // Nothing is taken: the pump stops once the queue is full, far short of the flood.
        let mut transport = until_full(flooding_server()).await;
        let line_bytes = FLOOD_PAD_BYTES + 80;
        let queued = transport.messages.len();
        assert!(queued * line_bytes <= QUEUED_MESSAGE_BYTES, "{queued} messages queued");
        assert!(queued * line_bytes > QUEUED_MESSAGE_BYTES - line_bytes, "{queued} queued");
        assert!(queued < FLOOD_MESSAGES);

        // Taken now, every message comes, once, in order.
        for expected in 0..FLOOD_MESSAGES {
            let message = transport.receive().await.expect("the flood ended early");
            assert_eq!(number(&message), expected);
        }

        // Writes are served all along; closing ends the server and the stream.
        transport.close().await.unwrap();
        assert!(transport.receive().await.is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_is_served_while_the_queue_is_full() {
        // The flood, then one more message once the server reads a line: the answer to the
        // write made while nothing was taken.
        let mut command = flooding_server();
        let script = command.args[1].replace(
            "exec cat >/dev/null",
            r#"read line; printf '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"100 after the write"}}\n'; exec cat >/dev/null"#,
        );
        command.args[1] = script;
        let mut transport = until_full(command).await;
        let ping: ClientJsonRpcMessage = serde_json::from_value(serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "ping"
        }))
        .unwrap();
        transport.send(ping).await.expect("a write while the queue is full");

        for expected in 0..=FLOOD_MESSAGES {
            let message = transport.receive().await.expect("the flood ended early");
            assert_eq!(number(&message), expected);
        }
        transport.close().await.unwrap();
    }

    /// How the server ended is decided on the failure's kind: an executor that shut down
    /// took the server with it, where any other failure leaves it perhaps running, unseen.
    #[test]
    fn a_server_stopped_with_its_executor_is_told_apart_from_one_lost_sight_of() {
        let ended = |kind| {
            let failure = ProcessFailure::new(kind, "process p: the session is gone");
            ServerEnd { failure: Some(failure), ..ServerEnd::default() }.describe().unwrap()
        };
        let stopped = ended(ProcessFailureKind::SessionLost { server_went_away: true });
        assert!(stopped.contains("was stopped with its executor"), "{stopped}");
        for kind in [
            ProcessFailureKind::SessionLost { server_went_away: false },
            ProcessFailureKind::FellBehind,
        ] {
            let lost = ended(kind);
            assert!(lost.contains("could no longer be followed"), "{lost}");
        }
    }
}
