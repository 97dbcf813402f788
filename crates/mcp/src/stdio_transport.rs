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

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use tether_engine::ProcessEvent;
use tether_engine::exec::{ExecBackend, ExecError, ExecProcess, ProcessUpdate};
use tether_protocol::PathUri;
use tether_protocol::process::{EnvInherit, EnvPolicy, ExecOutputStream, ExecParams, WriteStatus};
use tokio::sync::{mpsc, oneshot};
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
    pub failure: Option<String>,
    pub closed: bool,
    pub stderr_tail: VecDeque<String>,
}

impl ServerEnd {
    /// One sentence on how the server ended, or `None` while it runs.
    pub(crate) fn describe(&self) -> Option<String> {
        let how = match (&self.failure, self.exit_code) {
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
    messages: mpsc::UnboundedReceiver<ServerJsonRpcMessage>,
    shutdown: Option<oneshot::Sender<()>>,
    end: Arc<Mutex<ServerEnd>>,
}

struct WriteRequest {
    line: Bytes,
    reply: oneshot::Sender<std::io::Result<()>>,
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
        let process = exec.start(params).await.map_err(|error| McpError::Launch {
            program: command.program.clone(),
            message: error.message,
        })?;
        Ok(Self::spawn(process, &command.program, tap))
    }

    fn spawn(process: Box<dyn ExecProcess>, program: &str, tap: Option<NotificationTap>) -> Self {
        let (writes, write_requests) = mpsc::channel(64);
        let (message_sender, messages) = mpsc::unbounded_channel();
        let (shutdown, shutdown_requested) = oneshot::channel();
        let end = Arc::new(Mutex::new(ServerEnd::default()));
        let span = info_span!("mcp_stdio", process_id = %process.process_id(), program);
        let pump = Pump {
            process,
            write_requests,
            messages: message_sender,
            end: end.clone(),
            tap,
            stdout: LineBuffer::new(MAX_STDOUT_LINE_BYTES),
            stderr: LineBuffer::new(MAX_STDERR_LINE_BYTES),
        };
        tokio::spawn(pump.run(shutdown_requested).instrument(span));
        Self { writes, messages, shutdown: Some(shutdown), end }
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
            let gone = || {
                let why = end.lock().unwrap().describe();
                std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    why.unwrap_or_else(|| "the MCP server transport is closed".into()),
                )
            };
            writes.send(WriteRequest { line: line.into(), reply }).await.map_err(|_| gone())?;
            answer.await.map_err(|_| gone())?
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.messages.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        Ok(())
    }
}

/// The task that owns the process handle (see the module docs).
struct Pump {
    process: Box<dyn ExecProcess>,
    write_requests: mpsc::Receiver<WriteRequest>,
    messages: mpsc::UnboundedSender<ServerJsonRpcMessage>,
    end: Arc<Mutex<ServerEnd>>,
    tap: Option<NotificationTap>,
    stdout: LineBuffer,
    stderr: LineBuffer,
}

impl Pump {
    async fn run(mut self, mut shutdown: oneshot::Receiver<()>) {
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => return self.terminate("the transport was closed").await,
                request = self.write_requests.recv() => match request {
                    Some(WriteRequest { line, reply }) => {
                        let result = self.process.write(line).await;
                        let _ = reply.send(write_result(result));
                    }
                    None => return self.terminate("the transport was dropped").await,
                },
                update = self.process.next_update() => {
                    if !self.follow(update) {
                        return;
                    }
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
            Some(ProcessUpdate::Failed(message)) => {
                warn!(%message, "MCP server process lost");
                self.end.lock().unwrap().failure = Some(message);
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
                    let _ = self.messages.send(message);
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
