//! Starting and stopping the server under test.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Which exec-server a scenario runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Tether,
    /// `codex exec-server` from Codex CLI 0.171.0, installed by the test command with npm.
    Reference,
}

/// A running server, killed when dropped (SIGTERM first, so it can end its own children).
pub struct ServerProcess {
    pub target: Target,
    pub url: String,
    /// With `--tls-self-signed` (or `--tls-self-signed-dir`): the certificate's `SHA256:…`
    /// fingerprint, as printed.
    pub fingerprint: Option<String>,
    child: Child,
    scratch: PathBuf,
}

impl ServerProcess {
    /// Starts `target` on `ws://127.0.0.1:0` and reads the bound URL from its first stdout line.
    pub async fn start(target: Target) -> anyhow::Result<Self> {
        Self::start_with(target, &[]).await
    }

    /// Starts `target` with extra command-line arguments.
    pub async fn start_with(target: Target, extra_args: &[&str]) -> anyhow::Result<Self> {
        Self::start_with_env(target, extra_args, &[]).await
    }

    /// Starts `target` with extra arguments and extra environment variables (on top of the
    /// test's own environment): what the executor's processes and `valueEnvVar` headers see.
    pub async fn start_with_env(
        target: Target,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        Self::start_wrapped(target, &[], extra_args, env).await
    }

    /// As [`Self::start_with_env`], run by `wrapper` (a program and its arguments, such as
    /// `["prlimit", "--nofile=1500:1500", "--"]`) that then runs the server.
    pub async fn start_wrapped(
        target: Target,
        wrapper: &[&str],
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let scratch = scratch_dir(target)?;
        let command = Self::command(target, &scratch)?;
        Self::spawn(target, command, scratch, wrapper, extra_args, env).await
    }

    /// `codex exec-server` from Codex CLI 0.169.0, the older release (its `target` is
    /// [`Target::Reference`]): for what a client must still do with a server that predates
    /// 0.171's additions.
    pub async fn start_previous_reference() -> anyhow::Result<Self> {
        let scratch = scratch_dir(Target::Reference)?;
        let mut command = Command::new(previous_codex_binary()?);
        command.arg("exec-server").env("CODEX_HOME", &scratch);
        Self::spawn(Target::Reference, command, scratch, &[], &[], &[]).await
    }

    async fn spawn(
        target: Target,
        mut command: Command,
        scratch: PathBuf,
        wrapper: &[&str],
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        if let Some((program, args)) = wrapper.split_first() {
            let server = command.as_std();
            let mut wrapped = Command::new(program);
            wrapped.args(args).arg(server.get_program()).args(server.get_args());
            for (key, value) in server.get_envs() {
                if let Some(value) = value {
                    wrapped.env(key, value);
                }
            }
            command = wrapped;
        }
        command.args(["--listen", "ws://127.0.0.1:0"]).args(extra_args);
        command.envs(env.iter().copied());
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let mut child = command.spawn().with_context(|| format!("cannot start {target:?}"))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("server did not print its URL within 30 s")??
            .context("server exited before printing its URL")?;
        if !first.starts_with("ws://") && !first.starts_with("wss://") {
            bail!("unexpected first line from {target:?}: {first}");
        }
        // A self-signed certificate's fingerprint is printed on the next line.
        let mut fingerprint = None;
        if extra_args.iter().any(|arg| ["--tls-self-signed", "--tls-self-signed-dir"].contains(arg))
        {
            let second = lines.next_line().await?.context("no fingerprint line")?;
            let pinned = second.strip_prefix("fingerprint ").context("no fingerprint line")?;
            fingerprint = Some(pinned.to_owned());
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self { target, url: first.trim().to_owned(), fingerprint, child, scratch })
    }

    /// The command that runs `target` in server mode, without a `--listen`.
    pub fn command(target: Target, scratch: &Path) -> anyhow::Result<Command> {
        Ok(match target {
            Target::Tether => {
                let mut command = Command::new(tether_binary()?);
                command.arg("serve");
                command
            }
            Target::Reference => {
                let mut command = Command::new(reference_binary()?);
                command.arg("exec-server").env("CODEX_HOME", scratch);
                command
            }
        })
    }

    /// The `host:port` the server listens on.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("wss://").trim_start_matches("ws://")
    }

    /// The server's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Stops the server with SIGTERM and waits for it to exit; returns its exit status.
    pub async fn stop(mut self) -> anyhow::Result<std::process::ExitStatus> {
        if let Some(pid) = self.child.id() {
            terminate(pid);
        }
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await??;
        Ok(status)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            terminate(pid);
            // Give it a moment to end its children, then make sure it is gone.
            for _ in 0..50 {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

fn terminate(pid: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
}

/// A private directory per server (the reference keeps its state under `CODEX_HOME`). Not
/// under the temp dir: there the reference refuses to make the `codex-linux-sandbox` alias its
/// sandbox runs, and every sandboxed command of its fails.
fn scratch_dir(target: Target) -> anyhow::Result<PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = Path::new("/var/tmp").join(format!(
        "tether-test-{}-{:?}-{}",
        std::process::id(),
        target,
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

/// The `tether` binary of the build the tests belong to (`target/<profile>/tether`).
pub fn tether_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // Test binaries live in target/<profile>/deps/.
    let profile_dir = exe.parent().and_then(Path::parent).context("test binary location")?;
    let binary = profile_dir.join("tether");
    if !binary.is_file() {
        bail!("{} not found: build it first (`cargo build --bin tether`)", binary.display());
    }
    Ok(binary)
}

/// The reference binary (Codex CLI 0.171.0), installed by the test command into
/// `tests/reference/node_modules`. A missing reference is an error, never a skip: the suite's
/// claim is that it passes against both.
pub fn reference_binary() -> anyhow::Result<PathBuf> {
    installed("@openai/codex-linux-x64")
}

/// Codex CLI 0.169.0, the older client the suite proves still works (its Linux binary,
/// installed beside the reference under an alias).
pub fn previous_codex_binary() -> anyhow::Result<PathBuf> {
    installed("codex-0169-linux-x64")
}

fn installed(package: &str) -> anyhow::Result<PathBuf> {
    let binary = workspace_root()
        .join("tests/reference/node_modules")
        .join(package)
        .join("vendor/x86_64-unknown-linux-musl/bin/codex");
    if !binary.is_file() {
        bail!(
            "Codex is not installed at {}: run `scripts/test`, or `npm install --prefix tests/reference`",
            binary.display()
        );
    }
    Ok(binary)
}
