//! Tether over `wss://` against `ssh`: three things an agent does on a remote host — stream a
//! command's output, read a file, run a short command — each done by Tether's own client over
//! `wss://` to a fresh `tether serve --tls-self-signed` (`servers::TlsTether`), and by `ssh` to
//! a local `sshd` of our own (`tether_testkit::sshd`). Both encrypted, both to this machine, so
//! the figures compare the tools and their protocols, not the networks.
//!
//! Each tool's connection is made before the clock starts and reused by what is timed, as an
//! agent's is: an agent keeps its Tether client connected for a whole session, and one on ssh
//! keeps a control master up (`ControlMaster`) so that its commands skip the handshake. So no
//! figure holds a TCP, TLS or SSH handshake or a login — those happen once per session, not
//! once per command, and would otherwise swamp the short rows. What ssh's figures do hold is
//! spawning an `ssh` for each command, which is how anything runs a command over ssh; Tether's
//! client sends a request on the connection it has.
//!
//! These rows compare Tether with ssh, not with the reference: ssh's figures sit where the
//! reference's do (`Kind::Reference`), in a table of their own.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, bail};
use tether_client::{ClientOptions, ExecServerClient, TlsFingerprint};
use tether_engine::fs::FileSystem;
use tether_protocol::PathUri;
use tether_protocol::fs::FsReadFileParams;
use tether_testkit::sshd::{SshMaster, Sshd, last_line};
use tokio::io::AsyncReadExt;

use crate::copy_workloads::XorShift;
use crate::report::{Better, median};
use crate::servers::{Kind, TlsTether};
use crate::workloads;

/// Bytes of the file the readFile row reads: the `bigfile` row's 100 MB, large enough that the
/// rate is timed, not the request.
const READ_FILE_BYTES: u64 = 100_000_000;

/// Commands per run of the round-trip row, its figure their median: enough that one slow
/// command does not move it, few enough that ssh's (a process spawned each, several ms) keep a
/// run well under a second.
const ROUND_TRIP_RUNS: usize = 50;

/// Bytes read from `ssh`'s stdout at a time: more than a pipe holds (64 KiB), so each read
/// takes all that is there.
const READ_BUFFER_BYTES: usize = 1 << 18;

/// What each tool is called in the table and the log.
pub fn tool_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Tether => "Tether over wss://",
        Kind::Reference => "ssh",
    }
}

/// One row.
#[derive(Debug, Clone, Copy)]
pub enum Workload {
    /// `head -c BYTES /dev/zero`, every byte of its output counted: the rate of one stream.
    Pipe,
    /// One file of [`READ_FILE_BYTES`] read whole: `fs/readFile`, or `cat` over ssh.
    ReadFile,
    /// `/bin/true`, [`ROUND_TRIP_RUNS`] times one after another: what a command costs beside
    /// its own work.
    RoundTrip,
}

impl Workload {
    /// The rows, in the order they are run and printed.
    pub const ALL: [Workload; 3] = [Workload::Pipe, Workload::ReadFile, Workload::RoundTrip];

    /// What the row's runs need, made once for the row: `pipe_bytes` is the pipe row's output
    /// (`--bytes`); the readFile row writes its file here, removed when the row is dropped.
    pub fn prepare(self, pipe_bytes: u64) -> anyhow::Result<Prepared> {
        let file = match self {
            Workload::ReadFile => Some(ScratchFile::write(READ_FILE_BYTES)?),
            Workload::Pipe | Workload::RoundTrip => None,
        };
        Ok(Prepared { workload: self, pipe_bytes, file })
    }
}

/// A row ready to run ([`Workload::prepare`]).
pub struct Prepared {
    workload: Workload,
    pipe_bytes: u64,
    file: Option<ScratchFile>,
}

impl Prepared {
    pub fn label(&self) -> String {
        match self.workload {
            Workload::Pipe => {
                format!("pipe output over wss://, {} MB vs ssh (MB/s)", self.pipe_bytes / 1_000_000)
            }
            Workload::ReadFile => format!(
                "fs/readFile of {} MB over wss:// vs ssh cat (MB/s)",
                READ_FILE_BYTES / 1_000_000
            ),
            Workload::RoundTrip => {
                "command round trip over wss:// vs ssh, /bin/true (median ms)".to_owned()
            }
        }
    }

    pub fn better(&self) -> Better {
        match self.workload {
            Workload::Pipe | Workload::ReadFile => Better::Higher,
            Workload::RoundTrip => Better::Lower,
        }
    }

    /// One run by `kind`'s tool (`ssh` to `sshd` for the reference's side), over a connection
    /// of its own made before the clock and closed after: MB/s, or the median ms of the round
    /// trips. A short read or a failed command is a failed run, so nothing broken is timed as
    /// fast.
    pub async fn run(&self, kind: Kind, sshd: Option<&Sshd>) -> anyhow::Result<f64> {
        match kind {
            Kind::Tether => {
                // Declared before the client, so the client closes first.
                let server = TlsTether::start()?;
                let client = connect(&server).await?;
                match self.workload {
                    Workload::Pipe => tether_pipe(&client, self.pipe_bytes).await,
                    Workload::ReadFile => tether_read_file(&client, self.file()?).await,
                    Workload::RoundTrip => tether_round_trip(&client, ROUND_TRIP_RUNS).await,
                }
            }
            Kind::Reference => {
                let sshd = sshd.context("ssh needs the local sshd")?;
                let master = sshd.master()?;
                let value = match self.workload {
                    Workload::Pipe => ssh_pipe(&master, self.pipe_bytes).await?,
                    Workload::ReadFile => ssh_read_file(&master, self.file()?).await?,
                    Workload::RoundTrip => ssh_round_trip(&master, ROUND_TRIP_RUNS).await?,
                };
                // Had the master gone, `ssh` would have logged in afresh, unseen.
                anyhow::ensure!(master.serving()?, "the ssh control master stopped during the run");
                Ok(value)
            }
        }
    }

    fn file(&self) -> anyhow::Result<&ScratchFile> {
        self.file.as_ref().context("this row has no file")
    }
}

/// The readFile row's file, in a directory of its own; dropped, it is removed.
struct ScratchFile {
    dir: PathBuf,
    path: PathBuf,
    bytes: u64,
}

impl ScratchFile {
    /// `bytes` that do not compress, so neither figure depends on whether its tool compresses
    /// what it sends.
    fn write(bytes: u64) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("tether-bench-wss-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        // From here on, dropping the file removes its directory.
        let scratch = Self { path: dir.join("file.bin"), dir, bytes };
        let mut file = std::fs::File::create(&scratch.path)?;
        XorShift::new().write(&mut file, bytes)?;
        // On disk before the first run, so no run shares the disk with its writeback.
        file.sync_all()?;
        Ok(scratch)
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A client of `server` over `wss://`, trusting exactly its self-signed certificate, as
/// `tether cp --tls-fingerprint` does.
async fn connect(server: &TlsTether) -> anyhow::Result<ExecServerClient> {
    let fingerprint: TlsFingerprint = server.fingerprint.parse()?;
    let options = ClientOptions { tls_fingerprint: Some(fingerprint), ..Default::default() };
    Ok(ExecServerClient::connect(&server.url, options).await?)
}

/// MB/s of `head -c BYTES /dev/zero`'s output from `process/start` to the process's close, as
/// `workloads::throughput` times it.
async fn tether_pipe(client: &ExecServerClient, bytes: u64) -> anyhow::Result<f64> {
    let argv = ["/usr/bin/head", "-c", &bytes.to_string(), "/dev/zero"];
    let start = workloads::params("head", &argv);
    let started = Instant::now();
    let mut process = client.start(start).await?;
    let (received, code) = workloads::finish(&mut process).await?;
    let seconds = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        code == 0 && received == bytes,
        "received {received} of {bytes} bytes, exit {code}"
    );
    Ok(bytes as f64 / seconds / 1e6)
}

/// MB/s of one `fs/readFile` of `file`.
async fn tether_read_file(client: &ExecServerClient, file: &ScratchFile) -> anyhow::Result<f64> {
    let uri = PathUri::from_path(&file.path).context("an absolute path")?;
    let params: FsReadFileParams = serde_json::from_value(serde_json::json!({"path": uri}))?;
    let started = Instant::now();
    let read = client.read_file(params).await?;
    let seconds = started.elapsed().as_secs_f64();
    let received = read.data_base64.0.len() as u64;
    anyhow::ensure!(received == file.bytes, "read {received} of {} bytes", file.bytes);
    Ok(file.bytes as f64 / seconds / 1e6)
}

/// Median ms from `process/start` of `/bin/true` to its close, `runs` times one after another,
/// as `workloads::latency` times it.
async fn tether_round_trip(client: &ExecServerClient, runs: usize) -> anyhow::Result<f64> {
    Ok(median(&mut workloads::start_to_close(client, runs).await?))
}

/// MB/s of `head -c BYTES /dev/zero`'s output over ssh, from spawning `ssh` to its exit.
async fn ssh_pipe(master: &SshMaster<'_>, bytes: u64) -> anyhow::Result<f64> {
    let (received, seconds) = ssh_output(master, &format!("head -c {bytes} /dev/zero")).await?;
    anyhow::ensure!(received == bytes, "received {received} of {bytes} bytes");
    Ok(bytes as f64 / seconds / 1e6)
}

/// MB/s of `cat FILE` over ssh, from spawning `ssh` to its exit.
async fn ssh_read_file(master: &SshMaster<'_>, file: &ScratchFile) -> anyhow::Result<f64> {
    let (received, seconds) = ssh_output(master, &format!("cat {}", quoted(&file.path))).await?;
    anyhow::ensure!(received == file.bytes, "read {received} of {} bytes", file.bytes);
    Ok(file.bytes as f64 / seconds / 1e6)
}

/// Median ms from spawning `ssh … /bin/true` to its exit, `runs` times one after another. Each
/// holds what any command over ssh costs: an `ssh` process here, and the user's shell that
/// `sshd` runs the command with there. The same `/bin/true` as Tether's: that shell execs it,
/// where a bare `true` would be its builtin, with no process at all.
async fn ssh_round_trip(master: &SshMaster<'_>, runs: usize) -> anyhow::Result<f64> {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (_, seconds) = ssh_output(master, "/bin/true").await?;
        samples.push(seconds * 1000.0);
    }
    Ok(median(&mut samples))
}

/// Runs `remote_command` over `master`: the bytes it wrote to stdout, every one read, and the
/// seconds from spawning `ssh` to its exit. A nonzero exit fails with the last line of its
/// stderr.
async fn ssh_output(master: &SshMaster<'_>, remote_command: &str) -> anyhow::Result<(u64, f64)> {
    let mut buffer = vec![0u8; READ_BUFFER_BYTES];
    let started = Instant::now();
    let mut child = master
        .command(remote_command)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start ssh")?;
    let mut stdout = child.stdout.take().context("no stdout")?;
    let counted = async move {
        let mut received = 0u64;
        loop {
            match stdout.read(&mut buffer).await? {
                0 => return Ok::<_, std::io::Error>(received),
                n => received += n as u64,
            }
        }
    };
    // Its stderr is read alongside, so a full stderr pipe can never stall it.
    let (received, out) = tokio::join!(counted, child.wait_with_output());
    let seconds = started.elapsed().as_secs_f64();
    let out = out?;
    if !out.status.success() {
        bail!("ssh failed ({}): {}", out.status, last_line(&out.stderr));
    }
    Ok((received?, seconds))
}

/// `path` as one word for the remote shell: in single quotes, each of its own spelled `'\''`.
fn quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}
