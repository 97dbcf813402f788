//! The sandboxed workloads: `process/start`, `fs/writeFile` and `fs/createDirectory` under
//! Codex's `sandbox` intents, sent as Codex 0.169 sends them. Each returns one figure for one
//! fresh server, working in a project root of its own under `/var/tmp`, not `/tmp`: the
//! workspace-write intent also grants `/tmp`, which would hide a write that lands outside the
//! project root.
//!
//! The servers for these workloads keep their scratch outside the temp dir
//! ([`Scratch::VarTmp`](crate::servers::Scratch::VarTmp)); the reference cannot sandbox
//! otherwise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tether_client::{ClientOptions, ExecServerClient, ProcessUpdate, RemoteProcess};
use tether_engine::ProcessEvent;
use tether_engine::fs::FileSystem;
use tether_protocol::PathUri;
use tether_protocol::fs::{FsCreateDirectoryParams, FsWriteFileParams};
use tether_protocol::process::ExecParams;
use tether_protocol::sandbox::SandboxContext;

use crate::report::median;

/// Sandboxed starts per round, per intent. The reference takes ~60–120 ms a sandboxed start,
/// so 20 keep a round of it near two seconds on a 2-core machine, and are enough for a median
/// that does not move with one slow run.
pub const START_RUNS: usize = 20;

/// Sandboxed `fs/writeFile` calls per round: the reference runs a sandboxed helper per call
/// (~60–120 ms), so the same reasoning as [`START_RUNS`].
pub const WRITE_RUNS: usize = 20;

/// Bytes each `fs/writeFile` writes.
const WRITE_BYTES: usize = 1024;

/// The names protected inside every writable root, in the order Codex lists them.
const PROTECTED_NAMES: [&str; 4] = [".git", ".agents", ".codex", ".aws"];

/// Codex's two filesystem intents (`-s read-only`, `-s workspace-write`).
#[derive(Debug, Clone, Copy)]
pub enum Intent {
    /// Read everything, write nothing.
    ReadOnly,
    /// The project roots, `/tmp` and `$TMPDIR` writable, minus the protected names.
    WorkspaceWrite,
}

impl Intent {
    /// The name Codex's `-s` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Intent::ReadOnly => "read-only",
            Intent::WorkspaceWrite => "workspace-write",
        }
    }

    /// The intent's filesystem entries, in Codex's order.
    fn entries(self) -> Vec<Value> {
        let special = |kind: &str, access: &str| {
            let path = json!({"type": "special", "value": {"kind": kind}});
            json!({"path": path, "access": access})
        };
        let mut entries = vec![special("root", "read")];
        if let Intent::WorkspaceWrite = self {
            entries.push(special("project_roots", "write"));
            entries.push(special("slash_tmp", "write"));
            entries.push(special("tmpdir", "write"));
            entries.extend(PROTECTED_NAMES.map(|subpath| {
                json!({"path": {"type": "special",
                    "value": {"kind": "project_roots", "subpath": subpath}},
                    "access": "read", "missing_path_behavior": "skip"})
            }));
        }
        entries
    }

    fn permissions(self) -> Value {
        json!({"type": "managed",
            "file_system": {"type": "restricted", "entries": self.entries()},
            "network": "restricted"})
    }

    /// The intent's shape on `process/start`: no `policyContext`, no `userHomeDir`.
    fn for_process(self, root: &ProjectRoot) -> anyhow::Result<SandboxContext> {
        let uri = root.uri();
        Ok(serde_json::from_value(json!({
            "permissions": self.permissions(),
            "cwd": uri,
            "workspaceRoots": [uri],
            "windowsSandboxLevel": "disabled",
            "windowsSandboxProxySettingsMode": "reconcile",
            "useLegacyLandlock": false,
        }))?)
    }

    /// The intent's shape on `fs/*`: `policyContext` and `userHomeDir`, no proxy settings mode.
    fn for_fs(self, root: &ProjectRoot) -> anyhow::Result<SandboxContext> {
        let uri = root.uri();
        Ok(serde_json::from_value(json!({
            "permissions": self.permissions(),
            "cwd": uri,
            "workspaceRoots": [uri],
            "policyContext": {"cwd": uri, "workspaceRoots": [uri]},
            "userHomeDir": "file:///root",
            "windowsSandboxLevel": "disabled",
            "useLegacyLandlock": false,
        }))?)
    }
}

/// A fresh project root under `/var/tmp`, beside a directory no intent grants; both removed
/// with everything in them when dropped. Refused under the temp dir (`TMPDIR=/var/tmp`): the
/// workspace-write intent grants `$TMPDIR` on `fs/*`, so nothing there is outside the grants.
pub(crate) struct ProjectRoot {
    dir: PathBuf,
    root: PathBuf,
    outside: PathBuf,
}

impl ProjectRoot {
    pub(crate) fn new() -> anyhow::Result<Self> {
        let unique = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = PathBuf::from(format!("/var/tmp/tether-bench-{}-{unique}", std::process::id()));
        let (root, outside) = (dir.join("project"), dir.join("outside"));
        std::fs::create_dir_all(&root)?;
        std::fs::create_dir_all(&outside)?;
        let dir = std::fs::canonicalize(dir)?;
        let temp = std::fs::canonicalize(std::env::temp_dir())?;
        if dir.starts_with(&temp) {
            let _ = std::fs::remove_dir_all(&dir);
            bail!("{} is under the temp dir {}: unset TMPDIR", dir.display(), temp.display());
        }
        Ok(Self { root: dir.join("project"), outside: dir.join("outside"), dir })
    }

    fn uri(&self) -> String {
        uri_of(&self.root).expect("an absolute path")
    }
}

impl Drop for ProjectRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn uri_of(path: &Path) -> anyhow::Result<String> {
    Ok(PathUri::from_path(path).context("an absolute path")?.as_str().to_owned())
}

/// `process/start` params for `argv` in the project root under `intent`, with what Codex sends
/// beside a sandbox.
pub(crate) fn sandboxed(
    id: &str,
    argv: &[&str],
    root: &ProjectRoot,
    intent: Intent,
) -> anyhow::Result<ExecParams> {
    let cwd = PathUri::from_path(&root.root).context("an absolute path")?;
    let mut params = ExecParams::new(id, argv.iter().map(|s| s.to_string()).collect(), cwd);
    params.env = BTreeMap::from([
        ("PATH".to_string(), "/usr/bin:/bin".to_string()),
        ("CODEX_SANDBOX_NETWORK_DISABLED".to_string(), "1".to_string()),
    ]);
    params.sandbox = Some(intent.for_process(root)?);
    Ok(params)
}

pub(crate) async fn connect(url: &str) -> anyhow::Result<ExecServerClient> {
    Ok(ExecServerClient::connect(url, ClientOptions::default()).await?)
}

/// Follows a process to its close; returns (output, exit code). The output is kept: a sandbox
/// that fails says why there (`bwrap: execvp codex-linux-sandbox: …`).
pub(crate) async fn finish(process: &mut RemoteProcess) -> anyhow::Result<(String, i32)> {
    let (mut output, mut code) = (Vec::new(), None);
    loop {
        match process.next_update().await.context("stream ended without close")? {
            ProcessUpdate::Event(ProcessEvent::Output { chunk, .. }) => {
                output.extend_from_slice(&chunk)
            }
            ProcessUpdate::Event(ProcessEvent::Exited { exit_code, .. }) => code = Some(exit_code),
            ProcessUpdate::Event(ProcessEvent::Closed { .. }) => {
                let output = String::from_utf8_lossy(&output).into_owned();
                return Ok((output, code.context("closed before exit")?));
            }
            ProcessUpdate::Failed(failure) => bail!("process failed: {failure}"),
        }
    }
}

/// Fails unless `intent` is enforced: a write it does not grant (into the project root under
/// read-only, beside it under workspace-write) must fail and leave nothing. Run once, untimed,
/// so a server that ignored the intent cannot post a figure.
async fn check_confined(
    client: &ExecServerClient,
    root: &ProjectRoot,
    intent: Intent,
) -> anyhow::Result<()> {
    let denied = match intent {
        Intent::ReadOnly => root.root.join("probe"),
        Intent::WorkspaceWrite => root.outside.join("probe"),
    };
    let script = format!("echo escaped > '{}'", denied.display());
    let params = sandboxed("probe", &["/bin/sh", "-c", &script], root, intent)?;
    let (_, code) = finish(&mut client.start(params).await?).await?;
    if code == 0 || denied.exists() {
        bail!("not confined: {intent:?} let {} be written (exit {code})", denied.display());
    }
    Ok(())
}

/// Median milliseconds from `process/start` of `/bin/true` under `intent` to its close,
/// sequentially. Every run must exit 0.
pub async fn start(url: &str, intent: Intent, runs: usize) -> anyhow::Result<f64> {
    let client = connect(url).await?;
    let root = ProjectRoot::new()?;
    check_confined(&client, &root, intent).await?;
    let mut samples = Vec::with_capacity(runs);
    for run in 0..runs {
        let params = sandboxed(&format!("true-{run}"), &["/bin/true"], &root, intent)?;
        let started = Instant::now();
        let mut process = client.start(params).await?;
        let (output, code) = finish(&mut process).await?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        if code != 0 {
            bail!("sandboxed /bin/true (run {run}) exited {code}: {:?}", output.trim());
        }
    }
    Ok(median(&mut samples))
}

/// Median milliseconds per `fs/writeFile` of 1 KiB into the project root under the
/// workspace-write intent, sequentially, each to a new file. Every write is checked on disk,
/// untimed; a write beside the project root must be refused.
pub async fn write_file(url: &str, runs: usize) -> anyhow::Result<f64> {
    let client = connect(url).await?;
    let root = ProjectRoot::new()?;
    let sandbox = Intent::WorkspaceWrite.for_fs(&root)?;
    let block: Vec<u8> =
        (0..WRITE_BYTES as u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
    let data = tether_protocol::ByteChunk::new(block.clone()).to_base64();
    let params = |path: &Path| sandboxed_call(path, json!({"dataBase64": data}), &sandbox);
    check_writes_confined(&client, &root, &sandbox).await?;
    let mut samples = Vec::with_capacity(runs);
    for run in 0..runs {
        let path = root.root.join(format!("write-{run}.bin"));
        let params = params(&path)?;
        let started = Instant::now();
        client.write_file(params).await.with_context(|| format!("write {run}"))?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        let written = std::fs::read(&path).with_context(|| format!("write {run} did not land"))?;
        anyhow::ensure!(
            written == block,
            "write {run} landed {} bytes, not the block",
            written.len()
        );
    }
    Ok(median(&mut samples))
}

/// Median milliseconds to put a new 1 KiB file in a new directory of the project root under the
/// workspace-write intent, as Codex's apply_patch does: `fs/writeFile`, answered "not found"
/// (the directory is missing), `fs/createDirectory` of the directory, `fs/writeFile` again.
/// Sequentially, a new directory each run; every file is checked on disk, untimed, and a write
/// beside the project root must be refused.
pub async fn new_file_in_new_directory(url: &str, runs: usize) -> anyhow::Result<f64> {
    let client = connect(url).await?;
    let root = ProjectRoot::new()?;
    let sandbox = Intent::WorkspaceWrite.for_fs(&root)?;
    let data = tether_protocol::ByteChunk::new(vec![b'x'; WRITE_BYTES]).to_base64();
    let write = |path: &Path| -> anyhow::Result<FsWriteFileParams> {
        sandboxed_call(path, json!({"dataBase64": data}), &sandbox)
    };
    let create = |path: &Path| -> anyhow::Result<FsCreateDirectoryParams> {
        sandboxed_call(path, json!({}), &sandbox)
    };
    check_writes_confined(&client, &root, &sandbox).await?;
    let mut samples = Vec::with_capacity(runs);
    for run in 0..runs {
        let dir = root.root.join(format!("module-{run}"));
        let file = dir.join("lib.rs");
        let (first, made, second) = (write(&file)?, create(&dir)?, write(&file)?);
        let started = Instant::now();
        let missing = client.write_file(first).await;
        client.create_directory(made).await.with_context(|| format!("directory {run}"))?;
        client.write_file(second).await.with_context(|| format!("write {run}"))?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(missing.is_err(), "run {run}: a write into a missing directory succeeded");
        let written = std::fs::read(&file).with_context(|| format!("write {run} did not land"))?;
        anyhow::ensure!(written.len() == WRITE_BYTES, "write {run} landed {} bytes", written.len());
    }
    Ok(median(&mut samples))
}

/// The params of a file call on `path`: `fields` beside the path, under `sandbox`.
fn sandboxed_call<T: serde::de::DeserializeOwned>(
    path: &Path,
    mut fields: Value,
    sandbox: &SandboxContext,
) -> anyhow::Result<T> {
    fields["path"] = json!(uri_of(path)?);
    fields["sandbox"] = serde_json::to_value(sandbox)?;
    Ok(serde_json::from_value(fields)?)
}

/// Fails unless a sandboxed `fs/writeFile` beside the project root is refused and leaves
/// nothing. Run once, untimed, so a server that ignored the intent cannot post a figure.
async fn check_writes_confined(
    client: &ExecServerClient,
    root: &ProjectRoot,
    sandbox: &SandboxContext,
) -> anyhow::Result<()> {
    let denied = root.outside.join("probe");
    let params: FsWriteFileParams =
        sandboxed_call(&denied, json!({"dataBase64": "eA=="}), sandbox)?;
    if client.write_file(params).await.is_ok() || denied.exists() {
        bail!("not confined: workspace-write let {} be written", denied.display());
    }
    Ok(())
}
