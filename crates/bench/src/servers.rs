//! The servers under test, each started fresh on `127.0.0.1:0`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Tether,
    Reference,
}

/// Where a server keeps its scratch directory (the reference's `CODEX_HOME`).
#[derive(Debug, Clone, Copy)]
pub enum Scratch {
    /// The temp dir.
    TempDir,
    /// `/var/tmp`, for the sandboxed workloads: with its `CODEX_HOME` under the temp dir the
    /// reference refuses to make the `codex-linux-sandbox` alias its sandbox runs, and every
    /// sandboxed command of its fails (`bwrap: execvp codex-linux-sandbox`).
    VarTmp,
}

impl Scratch {
    fn parent(self) -> PathBuf {
        match self {
            Scratch::TempDir => std::env::temp_dir(),
            Scratch::VarTmp => PathBuf::from("/var/tmp"),
        }
    }
}

pub struct Server {
    pub url: String,
    pub pid: u32,
    child: std::sync::Mutex<Child>,
    scratch: PathBuf,
}

impl Server {
    /// Starts `kind` with its scratch directory in `scratch`; [`Server::stop`] removes it.
    pub async fn start(kind: Kind, scratch: Scratch) -> anyhow::Result<Self> {
        let scratch = scratch.parent().join(format!(
            "tether-bench-{}-{kind:?}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&scratch)?;
        let mut command = match kind {
            Kind::Tether => {
                let mut command = Command::new(tether_binary()?);
                // Tether writes nothing there; it reads the executor's Codex config from it.
                command.arg("serve").env("CODEX_HOME", &scratch);
                command
            }
            Kind::Reference => {
                let mut command = Command::new(tether_testkit::server::reference_binary()?);
                command.arg("exec-server").env("CODEX_HOME", &scratch);
                command
            }
        };
        command.args(["--listen", "ws://127.0.0.1:0"]).stdin(Stdio::null()).stderr(Stdio::null());
        command.stdout(Stdio::piped()).env("TETHER_LOG", "warn");
        let mut child = command.spawn().with_context(|| format!("cannot start {kind:?}"))?;
        let mut stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut url = String::new();
        stdout.read_line(&mut url)?;
        if !url.starts_with("ws://") {
            bail!("{kind:?} printed {url:?} instead of its URL");
        }
        std::thread::spawn(move || for _ in stdout.lines() {});
        let pid = child.id();
        Ok(Self { url: url.trim().to_owned(), pid, child: std::sync::Mutex::new(child), scratch })
    }

    /// The server's `CODEX_HOME` (its scratch directory).
    pub fn codex_home(&self) -> &std::path::Path {
        &self.scratch
    }

    /// `host:port`.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("ws://")
    }

    /// Resident memory of the server, in bytes (for Tether, its guardian's own pages too).
    pub fn rss_bytes(&self) -> anyhow::Result<u64> {
        let kib = tether_testkit::process_stats::server_rss_kib(self.pid).context("no VmRSS")?;
        Ok(kib * 1024)
    }

    /// CPU time the server has used so far (user + system; for Tether, its guardian's too),
    /// in seconds.
    pub fn cpu_seconds(&self) -> anyhow::Result<f64> {
        self.seconds_of(tether_testkit::process_stats::cpu_ticks)
    }

    /// CPU time the server and every descendant it has reaped have used so far (user + system,
    /// with the children's), in seconds: what a workload whose work is split among helper
    /// processes (a sandbox's inner stage, a proxy bridge) costs in all, once they have ended.
    pub fn tree_cpu_seconds(&self) -> anyhow::Result<f64> {
        self.seconds_of(tether_testkit::process_stats::tree_cpu_ticks)
    }

    /// `ticks` of the server (and of its guardian, for Tether), in seconds.
    fn seconds_of(&self, ticks: fn(u32) -> Option<u64>) -> anyhow::Result<f64> {
        let serving = tether_testkit::process_stats::serving_pid(self.pid);
        let mut total = ticks(self.pid).context("no stat")?;
        if serving != self.pid {
            total += ticks(serving).context("no stat")?;
        }
        Ok(total as f64 / clock_ticks_per_second())
    }

    /// Stops the server ([`terminate`]) and removes its scratch directory.
    pub fn stop(&self) {
        terminate(&mut self.child.lock().unwrap());
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// A fresh `tether serve` over `wss://` with a self-signed certificate, as `tether cp` reaches
/// an executor across a network (`copy_workloads`, `wss_workloads`); dropped, it is stopped.
pub(crate) struct TlsTether {
    pub(crate) url: String,
    /// `SHA256:<hex>`, for `--tls-fingerprint` (and [`tether_client::TlsFingerprint`]).
    pub(crate) fingerprint: String,
    child: Child,
}

impl TlsTether {
    pub(crate) fn start() -> anyhow::Result<Self> {
        let mut child = Command::new(tether_binary()?)
            .args(["serve", "--tls-self-signed", "--listen", "wss://127.0.0.1:0"])
            .env("TETHER_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start tether serve")?;
        let stdout = child.stdout.take().context("no stdout")?;
        // From here on, dropping the server stops it.
        let mut server = Self { url: String::new(), fingerprint: String::new(), child };
        let mut stdout = BufReader::new(stdout);
        let (mut url, mut fingerprint) = (String::new(), String::new());
        stdout.read_line(&mut url)?;
        stdout.read_line(&mut fingerprint)?;
        if !url.starts_with("wss://") {
            bail!("tether serve printed {url:?} instead of its URL");
        }
        server.url = url.trim().to_owned();
        server.fingerprint = fingerprint
            .trim()
            .strip_prefix("fingerprint ")
            .filter(|hash| hash.starts_with("SHA256:"))
            .with_context(|| format!("tether serve printed {fingerprint:?}, not a fingerprint"))?
            .to_owned();
        // Its stdout is drained, so a line it prints can never stall it.
        std::thread::spawn(move || for _ in stdout.lines() {});
        Ok(server)
    }
}

impl Drop for TlsTether {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

/// SIGTERM (a server ends its processes), then SIGKILL if it lingers.
pub(crate) fn terminate(child: &mut Child) {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    for _ in 0..100 {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The release `tether` next to this benchmark binary.
pub(crate) fn tether_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let binary = exe.parent().context("no parent")?.join("tether");
    if !binary.is_file() {
        bail!("{} not found: build it with `cargo build --release --bin tether`", binary.display());
    }
    Ok(binary)
}

fn unique() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// The kernel's clock tick rate for `/proc/*/stat` times (`getconf CLK_TCK`; 100 on Linux).
fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100.0)
}
