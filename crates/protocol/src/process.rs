//! `process/*`: start, read, write, signal and terminate processes, and the notifications that
//! stream their output.
//!
//! Every process has one sequence counter, starting at 1, shared by its output chunks, its exit
//! and its close: a process that prints once has output 1, exited 2, closed 3. Exit and close
//! occupy sequence numbers but are never returned as chunks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::sandbox::SandboxContext;
use crate::{ByteChunk, PathUri};

/// A client-chosen process handle, unique within its session (not an OS pid), at most
/// [`PROCESS_ID_MAX_BYTES`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProcessId(pub String);

impl ProcessId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ProcessId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for ProcessId {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for ProcessId {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

/// Which shell state a command wants restored: captured once per scope (Codex sends
/// `<thread>:<environment>`) and shell, and reused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShellSnapshotRequest {
    /// 1 to 256 bytes.
    pub scope_id: String,
    pub shell: SnapshotShell,
}

/// The shell whose state is captured: `bash`, `zsh` or `sh`, at `path`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SnapshotShell {
    pub name: String,
    pub path: String,
}

/// The longest `processId`, in bytes. Every notification of a process repeats its id, so an
/// unbounded id multiplies into every output chunk a slow client has not read yet; Codex's ids
/// are decimal counters and UUIDs. The reference has no bound; a longer id is refused with
/// `-32602` by every method that takes one.
pub const PROCESS_ID_MAX_BYTES: usize = 256;

/// The longest `writeId`, in bytes. The server keeps each id it has seen (to recognise a
/// retry), so an unbounded id is memory a client can make it hold; Codex's ids are 36 bytes.
/// The reference has no bound; a longer id is refused with `-32602`.
pub const WRITE_ID_MAX_BYTES: usize = 256;

/// Why `process/start` could not start its program, in `error.data.kind` (as Codex 0.171's
/// exec-server says it), so that a client decides on the kind, not the OS's words: a missing
/// program or working directory, a program that may not be executed (or is a directory), any
/// other failure to spawn; and for a sandboxed start, a host that cannot sandbox, or a sandbox
/// that could not be prepared. Tether's `process/connect` (`portForward`) adds two: nothing
/// listens on the port, and any other failure to connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SpawnFailureKind {
    SpawnNotFound,
    SpawnPermissionDenied,
    SpawnFailed,
    SandboxUnavailable,
    SandboxPreparation,
    ConnectRefused,
    ConnectFailed,
}

/// `error.data` of a failed `process/start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnFailure {
    pub kind: SpawnFailureKind,
}

/// `process/start` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecParams {
    pub process_id: ProcessId,
    /// Program and arguments; must not be empty. A bare program name is looked up on `PATH`.
    pub argv: Vec<String>,
    pub cwd: PathUri,
    /// Without `envPolicy` the child gets exactly this environment; with it, this is overlaid on
    /// the environment the policy builds.
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_policy: Option<EnvPolicy>,
    /// Restore the user's interactive shell state (functions, aliases, options, exports)
    /// before a `<shell> -lc <script>` command (the `shellSnapshotV2` capability).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell_snapshot: Option<ShellSnapshotRequest>,
    /// Run on a PTY (one `pty` stream) instead of pipes (`stdout` and `stderr`).
    pub tty: bool,
    /// Keep stdin writable for a pipe process; otherwise its stdin is closed at start.
    #[serde(default)]
    pub pipe_stdin: bool,
    /// What the program sees as `argv[0]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg0: Option<String>,
    /// What to confine the process to; `null` or absent: nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enforce_managed_network: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_network: Option<Value>,
    /// The managed network proxy to launch for this process (`networkProxyLaunch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_proxy: Option<crate::network_proxy::NetworkProxyLaunch>,
    /// Caller bookkeeping: which thread and tool call started the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ExecMetadata>,
    /// Tether extension (`tetherExtensions.ptySize`): the terminal's size for a `tty` process;
    /// 24×80 without it, as the reference's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty_size: Option<PtySize>,
}

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    pub cols: u16,
    pub rows: u16,
}

/// `process/list` params (Tether extension): none, `{}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListParams {}

/// `process/list` result (Tether extension, `tetherExtensions.processList`; the params are
/// `{}`): the session's processes, for a client that lost track of them (a harness restarted
/// and resumed its session) to reattach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResponse {
    pub processes: Vec<ProcessSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessSummary {
    pub process_id: ProcessId,
    pub argv: Vec<String>,
    pub tty: bool,
    pub state: ProcessState,
    pub exit_code: Option<i32>,
    /// The sequence the next event will carry: a client that saw everything has seen this - 1.
    pub next_seq: u64,
    pub oldest_retained_seq: u64,
    /// A forwarded connection's destination (`process/connect`); its `argv` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect: Option<std::net::SocketAddr>,
}

/// `process/connect` params (Tether extension, `tetherExtensions.portForward`): a TCP
/// connection from the executor to a port on its own loopback, served as a process whose
/// stdout is what the peer sends, whose stdin (`process/write`, `process/closeStdin`: a
/// half-close) goes to the peer, and which exits when the peer has finished sending (0) or the
/// connection broke (1). Answered as `process/start` is, `{processId}`.
///
/// Unknown members are refused, so a `sandbox` (or `argv`) sent along is never ignored: a
/// connection runs nothing to confine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConnectParams {
    pub process_id: ProcessId,
    pub port: u16,
    /// `127.0.0.1` (the default) or `::1`; any other address is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// `process/connect` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectResponse {
    pub process_id: ProcessId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ProcessState {
    Running,
    /// Exited; output may still come (a grandchild holds the pipes).
    Exited,
    /// Exited and every output stream ended: nothing more will come.
    Closed,
}

/// `process/closeStdin` params (Tether extension): end a pipe process's input after what was
/// written; later writes answer `stdinClosed`. Answered with `{}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloseStdinParams {
    pub process_id: ProcessId,
}

/// `process/resize` params (Tether extension): a `tty` process's new terminal size; the
/// process group gets `SIGWINCH`. Answered with `{}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResizeParams {
    pub process_id: ProcessId,
    pub cols: u16,
    pub rows: u16,
}

impl ExecParams {
    /// A pipe process with an empty environment, stdin closed and no optional intent: the
    /// starting point callers adjust.
    pub fn new(process_id: impl Into<ProcessId>, argv: Vec<String>, cwd: PathUri) -> Self {
        Self {
            process_id: process_id.into(),
            argv,
            cwd,
            env: BTreeMap::new(),
            env_policy: None,
            shell_snapshot: None,
            tty: false,
            pipe_stdin: false,
            arg0: None,
            sandbox: None,
            enforce_managed_network: false,
            managed_network: None,
            network_proxy: None,
            metadata: None,
            pty_size: None,
        }
    }
}

/// How a child's environment is built from the executor's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvPolicy {
    pub inherit: EnvInherit,
    /// Keep variables whose names look like credentials (`*KEY*`, `*SECRET*`, `*TOKEN*`).
    pub ignore_default_excludes: bool,
    /// Case-insensitive globs of variables to drop.
    pub exclude: Vec<String>,
    /// Variables to set after inheriting and excluding.
    pub set: BTreeMap<String, String>,
    /// When non-empty, case-insensitive globs of the only variables to keep.
    pub include_only: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnvInherit {
    /// A small core: `HOME`, `LOGNAME`, `PATH`, `SHELL`, `USER`, … .
    Core,
    /// The executor's whole environment.
    All,
    /// Nothing.
    None,
}

/// `process/start` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecResponse {
    pub process_id: ProcessId,
    /// Absent from old servers.
    #[serde(default)]
    pub sandbox_type: Option<SandboxType>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SandboxType {
    None,
    MacosSeatbelt,
    LinuxSeccomp,
    WindowsRestrictedToken,
}

/// `process/read` params: retained output after a sequence, optionally long-polling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadParams {
    pub process_id: ProcessId,
    /// Return chunks with `seq > afterSeq`; absent means 0.
    #[serde(default)]
    pub after_seq: Option<u64>,
    /// Byte budget for chunk payloads; the first chunk is returned even if it alone exceeds it.
    #[serde(default)]
    pub max_bytes: Option<usize>,
    /// Wait up to this long for something new; absent or 0 returns at once.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecOutputStream {
    Stdout,
    Stderr,
    /// Both streams of a PTY process, merged by the terminal.
    Pty,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessOutputChunk {
    pub seq: u64,
    pub stream: ExecOutputStream,
    pub chunk: ByteChunk,
}

/// `process/read` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadResponse {
    pub chunks: Vec<ProcessOutputChunk>,
    /// Continue with `afterSeq = nextSeq - 1`.
    pub next_seq: u64,
    pub exited: bool,
    pub exit_code: Option<i32>,
    /// Exit observed and every output stream ended: nothing more will come.
    pub closed: bool,
    /// Set only by clients that gave up on a process (its session could not be recovered).
    pub failure: Option<String>,
    #[serde(default)]
    pub sandbox_denied: bool,
    /// Tether extension (`tetherExtensions.oldestRetainedSeq`): the oldest sequence a read can
    /// still return. A client that has seen less than `oldestRetainedSeq - 1` knows output
    /// after what it saw was dropped, rather than inferring it from holes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_retained_seq: Option<u64>,
}

/// `process/write` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteParams {
    pub process_id: ProcessId,
    pub chunk: ByteChunk,
    /// Idempotency key: a repeated id is acknowledged without writing again, so a client may
    /// retry a write whose answer it lost. 1 to [`WRITE_ID_MAX_BYTES`] bytes.
    pub write_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteResponse {
    pub status: WriteStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WriteStatus {
    Accepted,
    UnknownProcess,
    StdinClosed,
    Starting,
}

/// `process/signal` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalParams {
    pub process_id: ProcessId,
    pub signal: ProcessSignal,
}

/// A signal `process/signal` delivers to a process's group. The reference knows only
/// `interrupt`; the others are a Tether extension, advertised in
/// `tetherExtensions.signals`. An unknown name is refused with the list of accepted ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ProcessSignal {
    /// SIGINT, as Ctrl-C at a terminal.
    Interrupt,
    /// SIGTERM: asks the process to end, letting it clean up.
    Terminate,
    /// SIGKILL: ends the process at once (`process/terminate` does the same and says whether
    /// it was running).
    Kill,
    /// SIGHUP: its terminal went away; daemons read it as "reload".
    Hangup,
    /// SIGQUIT, as Ctrl-\ at a terminal.
    Quit,
    /// SIGUSR1.
    User1,
    /// SIGUSR2.
    User2,
}

impl ProcessSignal {
    /// Every signal a Tether server delivers, in the order its errors list them.
    pub const ALL: [ProcessSignal; 7] = [
        ProcessSignal::Interrupt,
        ProcessSignal::Terminate,
        ProcessSignal::Kill,
        ProcessSignal::Hangup,
        ProcessSignal::Quit,
        ProcessSignal::User1,
        ProcessSignal::User2,
    ];

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessSignal::Interrupt => "interrupt",
            ProcessSignal::Terminate => "terminate",
            ProcessSignal::Kill => "kill",
            ProcessSignal::Hangup => "hangup",
            ProcessSignal::Quit => "quit",
            ProcessSignal::User1 => "user1",
            ProcessSignal::User2 => "user2",
        }
    }
}

impl std::fmt::Display for ProcessSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalResponse {}

/// `process/terminate` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminateParams {
    pub process_id: ProcessId,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminateResponse {
    /// The process was running and is now being killed.
    pub running: bool,
}

/// `process/output` notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessOutputNotification {
    pub process_id: ProcessId,
    pub seq: u64,
    pub stream: ExecOutputStream,
    pub chunk: ByteChunk,
}

impl ProcessOutputNotification {
    /// A `process/output` notification read straight from its frame: the chunk's base64 is
    /// found by its key, last in the frame as both servers write it, and decoded where it lies;
    /// only the small rest goes through the JSON parser. No value tree, no copy of the text, no
    /// scan of it for escapes (base64 has none, and the decoder refuses anything else). Output
    /// is the bulk of what a client receives, so this is its hot path.
    ///
    /// `None` for any other frame, and for one of unusual form (members in another order or
    /// repeated, a member the notification does not have, escapes in the chunk, bad base64):
    /// the general decoder then reads it, and reports what is wrong with it.
    pub fn from_frame(frame: &[u8]) -> Option<Self> {
        const PREFIX: &[u8] = br#"{"method":"process/output","params":{"#;
        const CHUNK_KEY: &[u8] = br#","chunk":""#;
        const END: &[u8] = br#""}}"#;
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Head<'a> {
            #[serde(rename = "method")]
            _method: &'a str,
            params: HeadParams,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct HeadParams {
            process_id: ProcessId,
            seq: u64,
            stream: ExecOutputStream,
        }
        let body = frame.strip_prefix(PREFIX)?.strip_suffix(END)?;
        // Base64 holds no quote, so the last quote opens the chunk; the key before it cannot
        // be part of a JSON string (its quotes would be escaped there).
        let open = memchr::memrchr(b'"', body)? + 1;
        let key = open.checked_sub(CHUNK_KEY.len()).filter(|&at| &body[at..open] == CHUNK_KEY)?;
        let chunk = &body[open..];
        let mut head = Vec::with_capacity(PREFIX.len() + key + 2);
        head.extend_from_slice(PREFIX);
        head.extend_from_slice(&body[..key]);
        head.extend_from_slice(b"}}");
        let head: Head<'_> = serde_json::from_slice(&head).ok()?;
        let chunk = crate::bytes::decode_base64(chunk).ok()?;
        Some(Self {
            process_id: head.params.process_id,
            seq: head.params.seq,
            stream: head.params.stream,
            chunk: ByteChunk(chunk),
        })
    }

    /// The whole `process/output` notification as JSON text, built directly: the chunk is
    /// base64-encoded straight into the message, with no intermediate string and no escape scan
    /// (base64 needs no escaping). Output is the bulk of what a server sends, so this is its hot
    /// path; the result is byte for byte what serde would produce (see the tests).
    pub fn to_notification_text(&self) -> String {
        let mut text = self.json_head(self.chunk.len().div_ceil(3) * 4);
        crate::bytes::encode_base64_into(&self.chunk.0, &mut text);
        text.push_str("\"}}");
        text
    }

    /// The notification as a binary message (`attachedOutput`): its JSON with an empty
    /// `chunk`, then the chunk's bytes as they are ([`crate::attached`]). The bytes are copied
    /// once, into the message; nothing is encoded, and a quarter fewer bytes cross.
    pub fn to_attached_message(&self) -> Vec<u8> {
        let mut text = self.json_head(0);
        text.push_str("\"}}");
        crate::attached::join(&text, &self.chunk.0)
    }

    /// A notification read from a binary message's two parts (`attachedOutput`): `json`, read
    /// as [`Self::from_frame`] reads a text frame (or, with its members in another order, by
    /// serde, which refuses members the notification does not have, or repeated), whose
    /// `chunk` must be empty, and the `attached` bytes, which become the chunk without a copy.
    /// `None` for anything else.
    pub fn from_attached(json: &[u8], attached: bytes::Bytes) -> Option<Self> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Whole {
            #[serde(rename = "method")]
            _method: MethodIsOutput,
            params: Params,
        }
        #[derive(Deserialize)]
        enum MethodIsOutput {
            #[serde(rename = "process/output")]
            Output,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct Params {
            process_id: ProcessId,
            seq: u64,
            stream: ExecOutputStream,
            chunk: ByteChunk,
        }
        let mut output = match Self::from_frame(json) {
            Some(output) => output,
            None => {
                let Params { process_id, seq, stream, chunk } =
                    serde_json::from_slice::<Whole>(json).ok()?.params;
                Self { process_id, seq, stream, chunk }
            }
        };
        if !output.chunk.is_empty() {
            return None;
        }
        output.chunk = ByteChunk(attached);
        Some(output)
    }

    /// The notification's JSON up to the opening quote of its chunk, with room for
    /// `chunk_len` more bytes.
    fn json_head(&self, chunk_len: usize) -> String {
        use std::fmt::Write as _;

        let stream = match self.stream {
            ExecOutputStream::Stdout => "stdout",
            ExecOutputStream::Stderr => "stderr",
            ExecOutputStream::Pty => "pty",
        };
        let process_id = serde_json::to_string(&self.process_id).expect("a string serialises");
        let mut text = String::with_capacity(96 + process_id.len() + chunk_len);
        text.push_str(r#"{"method":"process/output","params":{"processId":"#);
        text.push_str(&process_id);
        let _ = write!(text, r#","seq":{},"stream":"{stream}","chunk":""#, self.seq);
        text
    }
}

/// `process/exited` notification. Output with higher sequence numbers may still follow (a
/// grandchild can hold the pipes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessExitedNotification {
    pub process_id: ProcessId,
    pub seq: u64,
    /// The exit status, or 128 + the signal number for a child killed by a signal.
    pub exit_code: i32,
    /// Absent from old servers.
    #[serde(default)]
    pub sandbox_denied: bool,
}

/// `process/closed` notification: always the process's last, with its highest sequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessClosedNotification {
    pub process_id: ProcessId,
    pub seq: u64,
}

/// `process/start {metadata}`: who started the process, typed as the reference types it (a
/// `threadId` that is not a UUID is refused in the uuid crate's words; other members are
/// ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", expecting = "struct ExecMetadata")]
pub struct ExecMetadata {
    #[serde(default, deserialize_with = "thread_id", skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<uuid::Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A `threadId`: a UUID in any form the uuid crate reads (hyphenated, simple, braced,
/// `urn:uuid:`), refused in the reference's words.
fn thread_id<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<uuid::Uuid>, D::Error> {
    let Some(text) = Option::<String>::deserialize(deserializer)? else { return Ok(None) };
    uuid::Uuid::parse_str(&text)
        .map(Some)
        .map_err(|_| serde::de::Error::custom(uuid_refusal(&text)))
}

/// Why `text` is no UUID, as the reference says it: the first character that cannot be in
/// one (counted from 1), else the length of an unhyphenated one, else the first group of the
/// wrong length.
fn uuid_refusal(text: &str) -> String {
    let body = text
        .strip_prefix("urn:uuid:")
        .or_else(|| text.strip_prefix('{').and_then(|t| t.strip_suffix('}')))
        .unwrap_or(text);
    let offset = text.len() - body.len() - usize::from(text.starts_with('{'));
    if let Some((at, c)) =
        body.chars().enumerate().find(|(_, c)| !c.is_ascii_hexdigit() && *c != '-')
    {
        return format!(
            "invalid character: expected an optional prefix of `urn:uuid:` followed by [0-9a-fA-F-], found `{c}` at {}",
            offset + at + 1
        );
    }
    if !body.contains('-') {
        return format!(
            "invalid length: expected length 32 for simple format, found {}",
            body.len()
        );
    }
    let groups: Vec<&str> = body.split('-').collect();
    if groups.len() != 5 {
        return format!("invalid group count: expected 5, found {}", groups.len());
    }
    for (at, (group, expected)) in groups.iter().zip([8, 4, 4, 4, 12]).enumerate() {
        if group.len() != expected {
            return format!(
                "invalid group length in group {at}: expected {expected}, found {}",
                group.len()
            );
        }
    }
    format!("invalid UUID `{text}`")
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use serde_json::Value;

    use super::*;

    #[test]
    fn spawn_failure_kinds_are_written_as_the_reference_writes_them() {
        let kinds = [
            (SpawnFailureKind::SpawnNotFound, "spawnNotFound"),
            (SpawnFailureKind::SpawnPermissionDenied, "spawnPermissionDenied"),
            (SpawnFailureKind::SpawnFailed, "spawnFailed"),
            (SpawnFailureKind::SandboxUnavailable, "sandboxUnavailable"),
            (SpawnFailureKind::SandboxPreparation, "sandboxPreparation"),
            (SpawnFailureKind::ConnectRefused, "connectRefused"),
            (SpawnFailureKind::ConnectFailed, "connectFailed"),
        ];
        for (kind, words) in kinds {
            let data = serde_json::to_value(SpawnFailure { kind }).unwrap();
            assert_eq!(data, serde_json::json!({"kind": words}));
        }
    }
    use crate::fixtures::{Ordered, check_exchange, decodes, round_trip_in_order};

    /// Checks every notification of a captured exchange against its type, in member order.
    fn check_notifications(text: &str) -> Vec<Value> {
        let fixture: Value = serde_json::from_str(text).unwrap();
        let ordered = Ordered::parse(text);
        let Ordered::Array(captured) = ordered.get("notifications") else { panic!() };
        let notifications = fixture["notifications"].as_array().unwrap().clone();
        for (notification, captured) in notifications.iter().zip(captured) {
            let params = &notification["params"];
            let captured = captured.get("params");
            match notification["method"].as_str().unwrap() {
                "process/output" => {
                    round_trip_in_order::<ProcessOutputNotification>(params, captured);
                }
                "process/exited" => {
                    round_trip_in_order::<ProcessExitedNotification>(params, captured);
                }
                "process/closed" => {
                    round_trip_in_order::<ProcessClosedNotification>(params, captured);
                }
                other => panic!("unexpected notification {other}"),
            }
        }
        notifications
    }

    fn exchange(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn start_and_its_notifications_match_the_reference() {
        let fixture = exchange(fixture!("process_start"));
        let params = decodes::<ExecParams>(&fixture["request"]["params"]);
        assert!(!params.tty && !params.pipe_stdin);
        let ordered = Ordered::parse(fixture!("process_start"));
        let result = round_trip_in_order::<ExecResponse>(
            &fixture["response"]["result"],
            ordered.get("response").get("result"),
        );
        assert_eq!(result.sandbox_type, Some(SandboxType::None));
        let notifications = check_notifications(fixture!("process_start"));
        assert_eq!(notifications.last().unwrap()["method"], "process/closed");
        check_notifications(fixture!("process_start_tty"));
        check_notifications(fixture!("process_write"));
    }

    #[test]
    fn the_direct_output_encoding_is_what_serde_writes() {
        for (id, bytes, stream) in [
            ("p1", &b"hello\n"[..], ExecOutputStream::Stdout),
            ("quote\"and\\slash", &[0u8, 255, 10, 13][..], ExecOutputStream::Stderr),
            ("", &b""[..], ExecOutputStream::Pty),
        ] {
            let notification = ProcessOutputNotification {
                process_id: id.into(),
                seq: 42,
                stream,
                chunk: ByteChunk::from(bytes),
            };
            let by_serde =
                crate::envelope::encode_notification(crate::method::PROCESS_OUTPUT, &notification);
            assert_eq!(notification.to_notification_text(), by_serde);
            assert_eq!(
                ProcessOutputNotification::from_frame(by_serde.as_bytes()),
                Some(notification)
            );
        }
    }

    /// With `attachedOutput` a chunk travels raw after the JSON, whose own `chunk` is empty;
    /// read back, the bytes are the chunk, NULs and all, and an attached message whose JSON
    /// still holds a chunk is refused rather than one of the two dropped.
    #[test]
    fn attached_output_carries_the_chunk_raw_after_its_json() {
        let notification = ProcessOutputNotification {
            process_id: "p\"1".into(),
            seq: 7,
            stream: ExecOutputStream::Pty,
            chunk: ByteChunk::from(&b"\0raw\r\n\xff"[..]),
        };
        let message = notification.to_attached_message();
        let (json, attached) = crate::attached::split(&message).unwrap();
        assert_eq!(
            json,
            br#"{"method":"process/output","params":{"processId":"p\"1","seq":7,"stream":"pty","chunk":""}}"#
        );
        assert_eq!(attached, b"\0raw\r\n\xff");
        let read = ProcessOutputNotification::from_attached(json, Bytes::copy_from_slice(attached));
        assert_eq!(read, Some(notification.clone()));
        let text = notification.to_notification_text();
        assert_eq!(ProcessOutputNotification::from_attached(text.as_bytes(), Bytes::new()), None);
        // Members in another order are read too; another method, or a member too many, not.
        let reordered = br#"{"params":{"chunk":"","stream":"pty","seq":7,"processId":"p\"1"},"method":"process/output"}"#;
        let read =
            ProcessOutputNotification::from_attached(reordered, Bytes::copy_from_slice(attached));
        assert_eq!(read, Some(notification));
        for refused in [
            &br#"{"method":"process/exited","params":{"processId":"p","seq":7,"stream":"pty","chunk":""}}"#[..],
            br#"{"method":"process/output","params":{"processId":"p","seq":7,"stream":"pty","chunk":"","extra":1}}"#,
            br#"{"params":{"processId":"p","seq":7,"seq":8,"stream":"pty","chunk":""},"method":"process/output"}"#,
        ] {
            assert_eq!(ProcessOutputNotification::from_attached(refused, Bytes::new()), None);
        }
    }

    /// The fast read of an output frame takes exactly what the general decoder would read as
    /// the same notification, and leaves everything else to it.
    #[test]
    fn output_frames_read_fast_only_in_their_usual_form() {
        let usual = r#"{"method":"process/output","params":{"processId":"p","seq":3,"stream":"stdout","chunk":"aGk="}}"#;
        let read = ProcessOutputNotification::from_frame(usual.as_bytes()).unwrap();
        assert_eq!((read.process_id.as_str(), read.seq, &read.chunk.0[..]), ("p", 3, &b"hi"[..]));
        // The reference's own notifications, with their members in its order (which the
        // fixture keeps: processId, seq, stream, chunk), written compactly as it sends them.
        for text in [fixture!("process_start"), fixture!("process_start_tty")] {
            let notifications = &text[text.find("\"notifications\"").unwrap()..];
            let order: Vec<usize> = ["\"processId\"", "\"seq\"", "\"stream\"", "\"chunk\""]
                .iter()
                .map(|key| notifications.find(key).unwrap())
                .collect();
            assert!(order.is_sorted(), "{order:?}");
            for notification in exchange(text)["notifications"].as_array().unwrap() {
                if notification["method"] == "process/output" {
                    let p = &notification["params"];
                    let frame = format!(
                        r#"{{"method":"process/output","params":{{"processId":{},"seq":{},"stream":{},"chunk":{}}}}}"#,
                        p["processId"], p["seq"], p["stream"], p["chunk"]
                    );
                    let fast = ProcessOutputNotification::from_frame(frame.as_bytes()).unwrap();
                    let general: ProcessOutputNotification =
                        serde_json::from_value(notification["params"].clone()).unwrap();
                    assert_eq!(fast, general);
                }
            }
        }
        for unusual in [
            r#"{"params":{"processId":"p","seq":3,"stream":"stdout","chunk":"aGk="},"method":"process/output"}"#,
            r#"{"method":"process/output","params":{"processId":"p","seq":3,"stream":"stdout","chunk":"aGk="},"id":1}"#,
            r#"{"method":"process/output","params":{"processId":"p","seq":3,"stream":"stdout","chunk":"aG\u0073="}}"#,
            r#"{"method":"process/output","params":{"processId":"p","seq":3,"stream":"stdout","chunk":"!!"}}"#,
            r#"{"method":"process/output","params":{"processId":"p","seq":-3,"stream":"stdout","chunk":"aGk="}}"#,
            r#"{"method":"process/output","params":{"processId":"p","seq":3,"seq":4,"stream":"stdout","chunk":"aGk="}}"#,
            r#"{"method":"process/exited","params":{"processId":"p","seq":3,"exitCode":0}}"#,
            r#"{"method":"process/output","params":{"processId":"p","seq":3,"stream":"stdout","chunk":"aGk=","chunk":"aGk="}}"#,
            r#"{"method":"process/output","params":{"processId":"p","chunk":"aGk=","seq":3,"stream":"stdout"}}"#,
            r#"{"method":"process/output","params":{"processId":"p","seq":3,"stream":"stdout","extra":1,"chunk":"aGk="}}"#,
            r#"{"method":"process/output","params":{"processId":"p","seq":3,"stream":"stdout","chunk":"aGk="}} "#,
            r#"{"method":"process/output","params":{"processId":"p","seq":3,"stream":"stdout","chunk":"aGk=\"}}"#,
        ] {
            assert_eq!(
                ProcessOutputNotification::from_frame(unusual.as_bytes()),
                None,
                "{unusual}"
            );
        }
    }

    #[test]
    fn read_results_match_the_reference() {
        for text in [
            fixture!("process_read"),
            fixture!("process_read_maxbytes"),
            fixture!("process_read_wait"),
        ] {
            check_exchange::<ReadParams, ReadResponse>(text);
        }
    }

    #[test]
    fn write_signal_and_terminate_match_the_reference() {
        let (_, write) =
            check_exchange::<WriteParams, WriteResponse>(fixture!("process_write_unknown"));
        assert_eq!(write.status, WriteStatus::UnknownProcess);
        let (_, write) =
            check_exchange::<WriteParams, WriteResponse>(fixture!("process_write_stdin_closed"));
        assert_eq!(write.status, WriteStatus::StdinClosed);
        check_exchange::<SignalParams, SignalResponse>(fixture!("process_signal"));
        let (_, terminate) =
            check_exchange::<TerminateParams, TerminateResponse>(fixture!("process_terminate"));
        assert!(terminate.running);
        let (_, terminate) = check_exchange::<TerminateParams, TerminateResponse>(fixture!(
            "process_terminate_exited"
        ));
        assert!(!terminate.running);
    }

    /// The reference knows only `interrupt` and refuses `kill` (the fixture); Tether delivers
    /// more, and its refusal of an unknown name lists every one it accepts.
    #[test]
    fn signals_beyond_interrupt_are_accepted_and_unknown_ones_listed() {
        let fixture = exchange(fixture!("signal_bad_variant"));
        let params = fixture["request"]["params"].clone();
        assert_eq!(params["signal"], "kill");
        let decoded: SignalParams = serde_json::from_value(params).unwrap();
        assert_eq!(decoded.signal, ProcessSignal::Kill);
        for signal in ProcessSignal::ALL {
            let text = serde_json::to_value(signal).unwrap();
            assert_eq!(text, signal.as_str());
            assert_eq!(serde_json::from_value::<ProcessSignal>(text).unwrap(), signal);
        }
        let error = serde_json::from_value::<ProcessSignal>(serde_json::json!("Interrupt"));
        assert_eq!(
            error.unwrap_err().to_string(),
            "unknown variant `Interrupt`, expected one of `interrupt`, `terminate`, `kill`, `hangup`, `quit`, `user1`, `user2`"
        );
    }

    #[test]
    fn decode_errors_read_as_the_reference_reports_them() {
        let cases = [
            (fixture!("start_missing_env"), "process/start"),
            (fixture!("write_bad_base64"), "process/write"),
        ];
        for (text, method) in cases {
            let fixture = exchange(text);
            let params = fixture["request"]["params"].clone();
            let error = match method {
                "process/start" => serde_json::from_value::<ExecParams>(params).unwrap_err(),
                _ => serde_json::from_value::<WriteParams>(params).unwrap_err(),
            };
            assert_eq!(fixture["response"]["error"]["code"], crate::error::INVALID_PARAMS);
            assert_eq!(fixture["response"]["error"]["message"], error.to_string(), "{method}");
        }
    }

    /// A `threadId` that is no UUID is refused in the reference's words (measured against
    /// 0.171 for each case); every form the uuid crate reads is accepted.
    #[test]
    fn a_thread_id_is_a_uuid_refused_in_the_references_words() {
        let refusal = |id: Value| {
            serde_json::from_value::<ExecMetadata>(serde_json::json!({"threadId": id}))
                .unwrap_err()
                .to_string()
        };
        let prefix = "invalid character: expected an optional prefix of `urn:uuid:` followed by [0-9a-fA-F-], found";
        for (id, message) in [
            ("t", format!("{prefix} `t` at 1")),
            ("00000000-0000-0000-0000-00000000000g", format!("{prefix} `g` at 36")),
            ("00000000-0000-0000-0000-00000000000\u{e9}", format!("{prefix} `\u{e9}` at 36")),
            ("", "invalid length: expected length 32 for simple format, found 0".into()),
            ("0000", "invalid length: expected length 32 for simple format, found 4".into()),
            (
                "00000000-0000-0000-0000-0000000000011",
                "invalid group length in group 4: expected 12, found 13".into(),
            ),
            (
                "0000000-00000-0000-0000-000000000001",
                "invalid group length in group 0: expected 8, found 7".into(),
            ),
        ] {
            assert_eq!(refusal(Value::from(id)), message, "{id}");
        }
        assert_eq!(refusal(Value::from(5)), "invalid type: number, expected a string");
        for id in [
            "00000000000000000000000000000000",
            "{00000000-0000-0000-0000-000000000001}",
            "urn:uuid:00000000-0000-0000-0000-000000000001",
            "A0000000-0000-0000-0000-000000000001",
        ] {
            let metadata: ExecMetadata =
                serde_json::from_value(serde_json::json!({"threadId": id, "other": 1})).unwrap();
            assert!(metadata.thread_id.is_some(), "{id}");
        }
        let refused = serde_json::from_value::<ExecMetadata>(Value::from("s")).unwrap_err();
        assert_eq!(refused.to_string(), "invalid type: string \"s\", expected struct ExecMetadata");
    }
}
