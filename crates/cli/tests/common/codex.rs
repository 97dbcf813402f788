//! Running the real Codex CLI against an executor, with the model scripted by [`MockModel`]:
//! what `codex` and `codex_stdio` share.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tether_testkit::server::{previous_codex_binary, reference_binary};
use tether_testkit::{MockModel, ServerProcess, Target, ToolCall};

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
}

impl Workspace {
    pub fn new(target: Target, name: &str) -> Self {
        let root = std::env::temp_dir()
            .join(format!("tether-codex-{name}-{}-{target:?}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("home")).unwrap();
        std::fs::create_dir_all(root.join("work")).unwrap();
        Self { root, codex: reference_binary().unwrap(), top_level: String::new() }
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
        let run = self.command(executor, sandbox, &model, extra).output();
        let output = tokio::time::timeout(Duration::from_secs(120), run)
            .await
            .expect("codex finished")
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "codex exec failed: {stderr}");
        let outputs = model.tool_outputs();
        assert_eq!(outputs.len(), calls.len(), "one output per call: {outputs:?}\n{stderr}");
        (outputs, model.requests())
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

    /// `codex exec` in the workspace, `model` and `extra` in its `config.toml`.
    fn command<'a>(
        &self,
        executor: impl Into<Reach<'a>>,
        sandbox: &str,
        model: &MockModel,
        extra: &str,
    ) -> tokio::process::Command {
        let config = format!("{}{}", self.top_level, model.codex_config_with(extra));
        std::fs::write(self.root.join("home/config.toml"), config).unwrap();
        let mut command = tokio::process::Command::new(&self.codex);
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
