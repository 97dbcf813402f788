//! The handshake (`initialize`, then the `initialized` notification) and the environment
//! methods.

use serde::{Deserialize, Serialize};

use crate::PathUri;
use crate::process::ProcessSignal;

/// `initialize` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    pub client_name: String,
    /// Reattach to this session instead of starting a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_session_id: Option<String>,
    /// Tether extension (`sessionTtl`): how long, in seconds, the session is to wait for a
    /// resume once its connection is gone — what a command left running on purpose
    /// (`tether exec --detach`) needs. The server grants at most its own maximum and says what
    /// it granted ([`InitializeResponse::detached_ttl_secs`]); absent on a resume, the session
    /// keeps what it had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detached_ttl_secs: Option<u64>,
    /// Tether extension (`attachedOutput`): this connection reads `process/output` whose chunk
    /// travels raw, attached to a binary message ([`crate::attached`]), instead of as base64 in
    /// the JSON. Asked by each connection for itself, so a session resumed by a client that
    /// does not ask gets text again. Granted over WebSocket only
    /// ([`InitializeResponse::attached_output`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attach_output: bool,
}

/// `initialize` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResponse {
    /// A UUID; on a resume, the resumed session's id.
    pub session_id: String,
    /// Absent from servers older than 0.169; the same object `environment/info` returns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_info: Option<EnvironmentInfo>,
    /// Tether extension (`sessionTtl`): how long the session waits for a resume once its
    /// connection is gone, when the request asked (`detachedTtlSecs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detached_ttl_secs: Option<u64>,
    /// Tether extension (`attachedOutput`): this connection's output comes attached, as the
    /// request asked (`attachOutput`); absent when it did not ask or the transport carries
    /// text only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attached_output: bool,
}

/// What the executor is: its shell, paths and the optional protocol features it serves.
///
/// Every member after `shell` is absent from older servers, so each is optional when decoding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentInfo {
    pub shell: ShellInfo,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_version: Option<String>,
    /// A stable identifier of the machine the executor runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The server process's working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathUri>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_home_dir: Option<PathUri>,
    /// `linux`, `macos`, `windows`, … as Rust's `std::env::consts::OS` spells it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_os: Option<String>,
    /// Directories the `core` environment policy puts in front of `PATH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepend_path_dirs: Option<Vec<PathUri>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temporary_directories: Option<Vec<PathUri>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_dir: Option<PathUri>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellInfo {
    /// `bash`, `zsh`, `sh`, …
    pub name: String,
    pub path: String,
}

/// Optional protocol features. A client sends the request fields a flag gates only when the
/// flag is true, so a flag is set only for what this server really does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Capabilities {
    pub network_proxy_launch: bool,
    pub network_proxy_review_domains: bool,
    /// `networkProxy.proxy.transparentTcp`: a sandbox's TCP routed through the managed SOCKS
    /// proxy (Codex 0.171).
    pub network_proxy_transparent_tcp: bool,
    pub credential_masking: bool,
    pub credential_masking_custom_providers: bool,
    pub capability_discovery_sandbox: bool,
    pub fs_watch_missing: bool,
    pub capability_discovery_v2: bool,
    pub environment_config_read: bool,
    /// `http/request` headers may take their value from an executor variable (`valueEnvVar`).
    pub http_header_env_vars: bool,
    pub sandboxed_file_streaming: bool,
    /// `fs/open {mode: "replace"}` and `fs/writeBlock`.
    pub file_write_streaming: bool,
    pub shell_snapshot_v2: bool,
    pub windows_mxc: bool,
    pub linux_root_write_preserves_devices: bool,
    pub linux_approved_root_write_preserves_restrictions: bool,
    /// What Tether serves beyond the reference protocol; absent from the reference. A client
    /// uses an extension only where its flag says so, and a client that knows none sees the
    /// reference's protocol unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tether_extensions: Option<TetherExtensions>,
}

/// The Tether extensions a server serves (see the README's protocol section).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TetherExtensions {
    /// `process/start {ptySize}` and `process/resize`.
    pub pty_size: bool,
    /// `process/closeStdin`.
    pub close_stdin: bool,
    /// `process/list`.
    pub process_list: bool,
    /// `oldestRetainedSeq` in `process/read` results.
    pub oldest_retained_seq: bool,
    /// Every signal `process/signal` delivers (the reference delivers only `interrupt`).
    pub signals: Vec<ProcessSignal>,
    /// `fs/rename`, `fs/setMetadata`, `fs/createSymlink`, `fs/readLink`, `fs/putFile`,
    /// `fs/getMetadata {includeMode}` and `fs/readDirectory {includeMetadata}`.
    pub fs_metadata: bool,
    /// File blocks as raw bytes in binary WebSocket messages ([`crate::attached`]):
    /// `fs/writeBlock` with the chunk attached, `fs/readBlock {attachChunk}`, `fs/readFile
    /// {attachData}`. Over WebSocket
    /// only: stdio carries text lines.
    pub binary_blocks: bool,
    /// `initialize {detachedTtlSecs}`: a session's own wait for a resume, up to the server's
    /// maximum.
    pub session_ttl: bool,
    /// `http/request {attachBody}`: the body as raw bytes in binary WebSocket messages — the
    /// buffered answer, or each streamed delta ([`crate::attached`]). Over WebSocket only.
    pub attached_http_bodies: bool,
    /// `session/list` and `session/end`: the sessions of the caller's own client, found and
    /// ended from any connection of it.
    #[serde(default)]
    pub sessions: bool,
    /// `initialize {attachOutput}`: `process/output` chunks as raw bytes in binary WebSocket
    /// messages ([`crate::attached`]). Over WebSocket only.
    pub attached_output: bool,
    /// `process/connect`: a TCP connection to a port on the executor's loopback, served as a
    /// process (`tether port-forward`).
    pub port_forward: bool,
}

/// `environment/status` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentStatus {
    pub status: EnvironmentState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EnvironmentState {
    Ready,
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::fixtures::{Ordered, round_trip, round_trip_in_order};

    #[test]
    fn initialize_matches_the_reference() {
        for text in [fixture!("initialize"), fixture!("initialize_resume")] {
            let fixture: Value = serde_json::from_str(text).unwrap();
            crate::fixtures::decodes::<InitializeParams>(&fixture["request"]["params"]);
            let ordered = Ordered::parse(text);
            let response = round_trip_in_order::<InitializeResponse>(
                &fixture["response"]["result"],
                ordered.get("response").get("result"),
            );
            assert_eq!(response.session_id.len(), 36);
            assert!(response.environment_info.unwrap().capabilities.is_some());
        }
    }

    #[test]
    fn environment_methods_match_the_reference() {
        let text = fixture!("environment_info");
        let fixture: Value = serde_json::from_str(text).unwrap();
        round_trip_in_order::<EnvironmentInfo>(
            &fixture["response"]["result"],
            Ordered::parse(text).get("response").get("result"),
        );
        let fixture: Value = serde_json::from_str(fixture!("environment_status")).unwrap();
        let status = round_trip::<EnvironmentStatus>(&fixture["response"]["result"]);
        assert_eq!(status.status, EnvironmentState::Ready);
    }
}

/// `initialized` notification params: none, `{}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitializedParams {}

/// `session/list` result (Tether extension, `sessions`): the sessions of the caller's own
/// client — its token's subject, or its address on a server without authentication — the
/// caller's own among them. Another client's sessions are never listed: a session id is what
/// resumes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionListResponse {
    pub sessions: Vec<SessionSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub session_id: String,
    /// The session of the connection that asked.
    pub current: bool,
    /// A connection holds it (another client cannot resume it meanwhile).
    pub attached: bool,
    /// Processes it holds, closed ones included.
    pub processes: usize,
    /// Of those, the ones not yet closed.
    pub running: usize,
    /// Detached: how long before it expires and its processes are killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_ms: Option<u64>,
}

/// `session/end` params (Tether extension, `sessions`): a detached session of the caller's own
/// client, ended now as its expiry would end it (its processes killed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionEndParams {
    pub session_id: String,
}
