//! Running the real Codex CLI against an executor, with the model scripted by [`MockModel`]:
//! what `codex` and `codex_stdio` share.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tether_testkit::server::{previous_codex_binary, reference_binary};
use tether_testkit::{MockModel, ServerProcess, Target, ToolCall, Verdict};

/// How Codex reaches its executor.
#[derive(Clone, Copy)]
pub enum Reach<'a> {
    /// `CODEX_EXEC_SERVER_URL`: a server that is already listening.
    Url(&'a str),
    /// Only what the workspace's `environments.toml` names (see [`Workspace::environments`]),
    /// such as a command Codex starts itself and speaks to over its stdin and stdout.
    Environments,
}

impl<'a> From<&'a ServerProcess> for Reach<'a> {
    fn from(server: &'a ServerProcess) -> Self {
        Reach::Url(&server.url)
    }
}

/// A Codex run's working directory and home, removed when dropped.
pub struct Workspace {
    pub root: PathBuf,
    /// The Codex CLI that runs: the reference's (0.171.0) unless told otherwise.
    pub codex: PathBuf,
    /// Top-level settings written before the model's tables in `config.toml` (`extra` can
    /// only add tables after them).
    pub top_level: String,
    /// Codex's machine-wide `/etc/codex/requirements.toml`, as this workspace's Codex run alone
    /// sees it (see [`PRIVATE_ETC`]); none unless set.
    pub requirements: Option<String>,
}

/// How one Codex run sees a `/etc/codex` of its own while the machine's `/etc` stays as it is
/// (`sh -c` with `$0`, a directory holding `codex/requirements.toml`, and the command after it).
///
/// `/etc/codex` is machine-wide, and other tests run Codex at the same time: none of them may
/// see these requirements, and a test that dies must leave nothing behind. So nothing is written
/// in the real `/etc` (not even a mount point: `/etc/codex` need not exist, so a bind mount
/// over it would first have to create it there). Instead, in a mount namespace of the run's
/// own (`unshare --mount`, private propagation, so no mount reaches the host's namespace),
/// `/etc` is covered by a read-only overlay: the run's directory on top of the real `/etc`. The
/// run sees every file of `/etc` plus `codex/requirements.toml`; the overlay ends with the
/// namespace, when the run's last process exits.
pub const PRIVATE_ETC: &str = r#"mount -t overlay overlay -o "lowerdir=$0:/etc" /etc && exec "$@""#;

impl Workspace {
    pub fn new(target: Target, name: &str) -> Self {
        let root = std::env::temp_dir()
            .join(format!("tether-codex-{name}-{}-{target:?}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("home")).unwrap();
        std::fs::create_dir_all(root.join("work")).unwrap();
        Self {
            root,
            codex: reference_binary().unwrap(),
            top_level: String::new(),
            requirements: None,
        }
    }

    /// As [`Self::new`], run by Codex CLI 0.169.0.
    pub fn previous_codex(target: Target, name: &str) -> Self {
        let mut workspace = Self::new(target, name);
        workspace.codex = previous_codex_binary().unwrap();
        workspace
    }

    pub fn work(&self) -> PathBuf {
        self.root.join("work")
    }

    /// Whether this machine lets a run have requirements of its own ([`PRIVATE_ETC`]: `unshare`,
    /// mount namespaces, overlays; root).
    pub fn can_have_own_requirements(&self) -> bool {
        let layer = self.root.join("probe-etc");
        std::fs::create_dir_all(&layer).unwrap();
        std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", PRIVATE_ETC])
            .arg(&layer)
            .arg("true")
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Writes Codex's `$CODEX_HOME/environments.toml`.
    pub fn environments(&self, toml: &str) {
        std::fs::write(self.root.join("home/environments.toml"), toml).unwrap();
    }

    /// Runs `codex exec` against `executor` with the model scripted to make `calls`; returns
    /// the tool outputs Codex reported to the model.
    pub async fn run_codex<'a>(
        &self,
        executor: impl Into<Reach<'a>>,
        calls: Vec<ToolCall>,
    ) -> Vec<String> {
        self.run_codex_with(executor, calls, "").await
    }

    /// As [`Self::run_codex`], in Codex's sandbox `mode` (`read-only`, `workspace-write`).
    pub async fn run_codex_sandboxed<'a>(
        &self,
        executor: impl Into<Reach<'a>>,
        mode: &str,
        calls: Vec<ToolCall>,
    ) -> Vec<String> {
        self.run(executor, mode, calls, "").await
    }

    /// As [`Self::run_codex`], with `extra` appended to Codex's `config.toml`.
    pub async fn run_codex_with<'a>(
        &self,
        executor: impl Into<Reach<'a>>,
        calls: Vec<ToolCall>,
        extra: &str,
    ) -> Vec<String> {
        self.run(executor, "danger-full-access", calls, extra).await
    }

    pub async fn run<'a>(
        &self,
        executor: impl Into<Reach<'a>>,
        sandbox: &str,
        calls: Vec<ToolCall>,
        extra: &str,
    ) -> Vec<String> {
        self.run_seen(executor, sandbox, calls, extra).await.0
    }

    /// As [`Self::run`], also returning every request the model received.
    pub async fn run_seen<'a>(
        &self,
        executor: impl Into<Reach<'a>>,
        sandbox: &str,
        calls: Vec<ToolCall>,
        extra: &str,
    ) -> (Vec<String>, Vec<serde_json::Value>) {
        let model = MockModel::scripted(calls.clone()).await.unwrap();
        let outputs = self.finish(executor, sandbox, &model, calls.len(), extra).await;
        (outputs, model.requests())
    }

    /// As [`Self::run`], Codex's approvals reviewer (with `approvals_reviewer = "auto_review"`)
    /// answering every review with `verdict`; also returns every request the reviewer received.
    pub async fn run_reviewed<'a>(
        &self,
        executor: impl Into<Reach<'a>>,
        sandbox: &str,
        calls: Vec<ToolCall>,
        extra: &str,
        verdict: Verdict,
    ) -> (Vec<String>, Vec<serde_json::Value>) {
        let model = MockModel::scripted_reviewing(calls.clone(), verdict).await.unwrap();
        let outputs = self.finish(executor, sandbox, &model, calls.len(), extra).await;
        (outputs, model.reviews())
    }

    /// Runs `codex exec` to its end with `model`, which makes `calls` tool calls; returns the
    /// tool outputs Codex reported to the model.
    async fn finish<'a>(
        &self,
        executor: impl Into<Reach<'a>>,
        sandbox: &str,
        model: &MockModel,
        calls: usize,
        extra: &str,
    ) -> Vec<String> {
        let run = self.command(executor, sandbox, model, extra).output();
        let output = tokio::time::timeout(Duration::from_secs(120), run)
            .await
            .expect("codex finished")
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "codex exec failed: {stderr}");
        let outputs = model.tool_outputs();
        assert_eq!(outputs.len(), calls, "one output per call: {outputs:?}\n{stderr}");
        outputs
    }

    /// Starts `codex exec` against `executor` with the model scripted to make `calls`, in
    /// `danger-full-access`, and returns it running (killed if dropped), with its model.
    pub async fn start<'a>(
        &self,
        executor: impl Into<Reach<'a>>,
        calls: Vec<ToolCall>,
    ) -> (tokio::process::Child, MockModel) {
        let model = MockModel::scripted(calls).await.unwrap();
        let mut command = self.command(executor, "danger-full-access", &model, "");
        command.stdout(Stdio::null()).stderr(Stdio::null());
        (command.spawn().unwrap(), model)
    }

    /// `codex exec` in the workspace, `model` and `extra` in its `config.toml`, run with
    /// [`PRIVATE_ETC`] when the workspace has requirements.
    fn command<'a>(
        &self,
        executor: impl Into<Reach<'a>>,
        sandbox: &str,
        model: &MockModel,
        extra: &str,
    ) -> tokio::process::Command {
        let config = format!("{}{}", self.top_level, model.codex_config_with(extra));
        std::fs::write(self.root.join("home/config.toml"), config).unwrap();
        let mut command = match &self.requirements {
            None => tokio::process::Command::new(&self.codex),
            Some(requirements) => {
                let layer = self.root.join("etc");
                std::fs::create_dir_all(layer.join("codex")).unwrap();
                std::fs::write(layer.join("codex/requirements.toml"), requirements).unwrap();
                let mut command = tokio::process::Command::new("unshare");
                command
                    .args(["--mount", "--propagation", "private", "sh", "-c", PRIVATE_ETC])
                    .arg(layer)
                    .arg(&self.codex);
                command
            }
        };
        command
            .args(["exec", "--skip-git-repo-check", "--sandbox", sandbox, "go"])
            .current_dir(self.work())
            .env("CODEX_HOME", self.root.join("home"))
            .env_remove("CODEX_EXEC_SERVER_URL")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Reach::Url(url) = executor.into() {
            command.env("CODEX_EXEC_SERVER_URL", url);
        }
        command
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
