//! Shell snapshots (`shellSnapshotV2`): the user's interactive shell state — functions, aliases,
//! options and exported variables from `~/.bashrc` and the like — captured once per scope and
//! restored before each `<shell> -lc <script>` command that asks for it.
//!
//! A plain `bash -lc` reads the login profile only, so what users put in `~/.bashrc` is missing
//! from an agent's commands. With a snapshot, the command runs as `bash -pc '<restore>; <script>'`:
//! startup files do not run again, the captured state is evaluated first, and the request's own
//! `env` still wins over captured variables.
//!
//! - [`capture`]: runs the shell's startup once, exactly as the command would run (same
//!   environment, cwd and sandbox), and reads back its state, bounded in size and time.
//! - [`restore`]: rewrites a start request to restore a snapshot.
//!
//! Capture failing is never the command's failure: it runs as if no snapshot had been asked for.
//! A failed capture is retried by later commands, at most [`MAX_ATTEMPTS`] times, one second
//! apart.

mod capture;
mod restore;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tether_protocol::process::{ExecParams, ShellSnapshotRequest};
use tokio::sync::{Mutex, OnceCell};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::ProcessError;
use crate::process_table::ProcessTable;

/// Snapshots kept. Each is one scope (a Codex thread and environment) in one shell, cwd and
/// sandbox; sixteen covers the threads one executor serves at a time.
pub const MAX_SNAPSHOTS: usize = 16;
/// Captures tried per snapshot before its commands run without one for good.
pub const MAX_ATTEMPTS: usize = 3;
/// How long after a failed capture the next command may try again.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The longest scope id, in bytes.
const MAX_SCOPE_BYTES: usize = 256;

/// The shells a snapshot can be taken of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shell {
    Bash,
    Zsh,
    Sh,
}

/// What a capture found.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    /// Shell source that recreates the functions, aliases and options.
    state: String,
    /// The exported variables, as the startup left them.
    environment: BTreeMap<String, String>,
}

/// Everything a snapshot depends on besides the user's files: the same scope in another cwd,
/// policy or sandbox is another snapshot.
#[derive(Debug, Clone, PartialEq)]
struct Key {
    request: ShellSnapshotRequest,
    cwd: tether_protocol::PathUri,
    env_policy: Option<tether_protocol::process::EnvPolicy>,
    sandbox: Option<tether_protocol::sandbox::SandboxContext>,
}

impl Key {
    fn of(params: &ExecParams, request: &ShellSnapshotRequest) -> Self {
        Self {
            request: request.clone(),
            cwd: params.cwd.clone(),
            env_policy: params.env_policy.clone(),
            sandbox: params.sandbox.clone(),
        }
    }
}

/// A capture's outcome: the snapshot, or when the next attempt may start.
type Outcome = Result<Arc<Snapshot>, Instant>;

struct Entry {
    key: Key,
    attempts: usize,
    /// Shared by every command that waits on the same capture.
    outcome: Arc<OnceCell<Outcome>>,
}

/// The snapshots one server keeps, least recently used first.
#[derive(Default)]
pub struct ShellSnapshots {
    entries: Mutex<VecDeque<Entry>>,
}

impl std::fmt::Debug for ShellSnapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShellSnapshots")
    }
}

impl ShellSnapshots {
    /// The start request to run: `params` rewritten to restore its snapshot, or unchanged (its
    /// `shellSnapshot` dropped) where none applies or none could be captured. Only a malformed
    /// request is an error.
    pub async fn prepare(
        &self,
        table: &ProcessTable,
        mut params: ExecParams,
    ) -> Result<ExecParams, ProcessError> {
        let Some(request) = params.shell_snapshot.take() else { return Ok(params) };
        if request.scope_id.is_empty() || request.scope_id.len() > MAX_SCOPE_BYTES {
            return Err(ProcessError::InvalidParams(format!(
                "shell snapshot scope must be non-empty and at most {MAX_SCOPE_BYTES} bytes"
            )));
        }
        // Only the exact form Codex sends is rewritten; anything else runs as sent.
        if params.argv.len() < 3 || params.argv[0] != request.shell.path || params.argv[1] != "-lc"
        {
            return Ok(params);
        }
        let shell = match request.shell.name.as_str() {
            "bash" => Shell::Bash,
            "zsh" => Shell::Zsh,
            "sh" => Shell::Sh,
            name => {
                return Err(ProcessError::InvalidParams(format!(
                    "shell snapshots are unsupported for shell `{name}`"
                )));
            }
        };
        let cell = self.cell(Key::of(&params, &request)).await;
        let outcome = cell
            .get_or_init(|| async {
                match capture::capture(table, &params, shell).await {
                    Ok(snapshot) => {
                        debug!(process_id = %params.process_id, state_bytes = snapshot.state.len(), variables = snapshot.environment.len(), "shell snapshot captured");
                        Ok(Arc::new(snapshot))
                    }
                    Err(error) => {
                        warn!(process_id = %params.process_id, %error, "shell snapshot not captured; the command runs without it");
                        Err(Instant::now() + RETRY_AFTER)
                    }
                }
            })
            .await;
        match outcome {
            Ok(snapshot) => Ok(restore::restore(params, shell, Arc::clone(snapshot))),
            Err(_) => Ok(params),
        }
    }

    /// The capture to share for `key`: the kept one, a fresh one where the last failed, it may
    /// be retried and its pause is over, or a new entry (evicting the least recently used).
    async fn cell(&self, key: Key) -> Arc<OnceCell<Outcome>> {
        let mut entries = self.entries.lock().await;
        if let Some(at) = entries.iter().position(|entry| entry.key == key) {
            let mut entry = entries.remove(at).expect("the position is in range");
            if let Some(Err(retry_at)) = entry.outcome.get()
                && entry.attempts < MAX_ATTEMPTS
                && Instant::now() >= *retry_at
            {
                entry.attempts += 1;
                entry.outcome = Arc::new(OnceCell::new());
            }
            let cell = Arc::clone(&entry.outcome);
            entries.push_back(entry);
            return cell;
        }
        let outcome = Arc::new(OnceCell::new());
        entries.push_back(Entry { key, attempts: 1, outcome: Arc::clone(&outcome) });
        if entries.len() > MAX_SNAPSHOTS {
            entries.pop_front();
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tokio::sync::mpsc;

    use super::*;
    use crate::ProcessTableConfig;

    fn start(home: &std::path::Path) -> ExecParams {
        serde_json::from_value(json!({
            "processId": "p",
            "argv": ["/bin/bash", "-lc", "rcfn"],
            "cwd": "file:///",
            "env": {"PATH": "/usr/bin:/bin", "HOME": home.display().to_string()},
            "tty": false,
            "shellSnapshot": {"scopeId": "s", "shell": {"name": "bash", "path": "/bin/bash"}},
        }))
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_startup_that_hangs_is_given_up_then_retried_after_a_pause() {
        let home =
            std::env::temp_dir().join(format!("tether-snapshot-hang-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join(".bashrc"), "sleep 30\nrcfn() { :; }\n").unwrap();
        let (events, _rx) = mpsc::channel(16);
        let table = ProcessTable::new(ProcessTableConfig::default(), events);
        let snapshots = ShellSnapshots::default();

        let started = Instant::now();
        let prepared = snapshots.prepare(&table, start(&home)).await.unwrap();
        assert_eq!(prepared.argv, ["/bin/bash", "-lc", "rcfn"], "unchanged");
        assert!(prepared.shell_snapshot.is_none());
        assert!(started.elapsed() >= Duration::from_secs(10), "{:?}", started.elapsed());
        // Within the pause the failure is shared: no second capture, no wait.
        let again = Instant::now();
        snapshots.prepare(&table, start(&home)).await.unwrap();
        assert_eq!(again.elapsed(), Duration::ZERO);
        // After it, another attempt; after the third, none (the startup still hangs).
        for attempt in 2..=MAX_ATTEMPTS {
            tokio::time::advance(RETRY_AFTER).await;
            snapshots.prepare(&table, start(&home)).await.unwrap();
            assert_eq!(snapshots.entries.lock().await[0].attempts, attempt);
        }
        tokio::time::advance(RETRY_AFTER).await;
        let given_up = Instant::now();
        let prepared = snapshots.prepare(&table, start(&home)).await.unwrap();
        assert_eq!((given_up.elapsed(), prepared.argv[1].as_str()), (Duration::ZERO, "-lc"));
        assert_eq!(snapshots.entries.lock().await[0].attempts, MAX_ATTEMPTS);
        std::fs::remove_dir_all(&home).unwrap();
    }
}
