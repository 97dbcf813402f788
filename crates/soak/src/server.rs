//! The server a soak starts for itself, and the samples of its memory and descriptors.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

pub struct Started {
    pub url: String,
    child: Child,
}

#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub rss_kb: u64,
    pub fds: usize,
}

impl Started {
    /// `tether serve` from next to this binary, on `127.0.0.1:0`, with `extra` flags.
    pub fn tether(extra: &[&str]) -> anyhow::Result<Self> {
        let exe = std::env::current_exe()?;
        let tether = exe.with_file_name("tether");
        if !tether.is_file() {
            bail!(
                "{} not found: build it (`cargo build --bin tether`), or pass --url",
                tether.display()
            );
        }
        let mut child = Command::new(tether)
            .args(["serve", "--listen", "ws://127.0.0.1:0"])
            .args(extra)
            .env("TETHER_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut url = String::new();
        stdout.read_line(&mut url)?;
        if !url.starts_with("ws://") {
            bail!("tether printed {url:?} instead of its URL");
        }
        std::thread::spawn(move || for _ in stdout.lines() {});
        Ok(Self { url: url.trim().to_owned(), child })
    }

    /// The guardian's pid (the serving process is its child).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Samples the server once a second until stopped.
    pub fn sampler(&self) -> Sampler {
        let pid = self.child.id();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            loop {
                if let Some(sample) = sample(pid) {
                    samples.push(sample);
                }
                tokio::select! {
                    _ = &mut stopped => return samples,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        });
        Sampler { stop, task }
    }
}

impl Started {
    /// Kills the serving process with SIGKILL (the guardian stays) and returns how many of
    /// the processes it had started are still running two seconds later: the orphans.
    pub fn orphans_after_sigkill(&mut self) -> usize {
        use tether_testkit::process_stats::{descendants, is_alive, serving_pid};
        let guardian = self.child.id();
        let serving = serving_pid(guardian);
        let started: Vec<u32> =
            descendants(guardian).into_iter().filter(|&pid| pid != serving).collect();
        let _ = Command::new("kill").args(["-9", &serving.to_string()]).status();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_secs(2));
        started.iter().filter(|&&pid| is_alive(pid)).count()
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Sampler {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Vec<Sample>>,
}

impl Sampler {
    pub async fn stop(self) -> Vec<Sample> {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

fn sample(pid: u32) -> Option<Sample> {
    let rss_kb = tether_testkit::process_stats::server_rss_kib(pid)?;
    let fds =
        tether_testkit::process_stats::open_fds(tether_testkit::process_stats::serving_pid(pid))?;
    Some(Sample { rss_kb, fds })
}
