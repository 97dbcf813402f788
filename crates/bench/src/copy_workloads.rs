//! `tether cp` against `scp`: the same files copied up to an executor and down from it, by
//! each tool's own command-line program, timed from spawn to exit. `tether cp` goes to a fresh
//! `tether serve` over `wss://`; `scp` to a local `sshd` of our own — both encrypted, both to
//! this machine, so the figures compare the tools, not the networks.
//!
//! These rows compare Tether with scp, not with the reference: scp's figures sit where the
//! reference's do (`Kind::Reference`), in a table of their own.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::report::Better;
use crate::servers::{self, Kind};

/// The line a missing `sshd` or `scp` fails the benchmark with.
const SSHD_MISSING: &str = "sshd is not installed: apt-get install openssh-server (the cp rows \
                            compare tether cp with scp to a local sshd)";

/// Debian's `sshd`: absolute, as `sshd` requires of itself to re-exec per connection.
const SSHD: &str = "/usr/sbin/sshd";

/// Debian's SFTP server. Since OpenSSH 9.0, `scp` speaks SFTP; without the subsystem it fails
/// with "Connection closed".
const SFTP_SERVER: &str = "/usr/lib/openssh/sftp-server";

/// Where Debian's `sshd` insists on its privilege-separation directory.
const PRIVSEP_DIR: &str = "/run/sshd";

/// Starts of `sshd`, each on a port free a moment before: another process may take the port
/// before `sshd` binds it, rarely enough that three starts never all lose that race.
const PORT_ATTEMPTS: usize = 3;

/// Logins tried, [`READY_INTERVAL`] apart, before `sshd` counts as not serving: 5 s, where it
/// serves in a few tens of milliseconds.
const READY_ATTEMPTS: usize = 100;
const READY_INTERVAL: Duration = Duration::from_millis(50);

/// Bytes the generator fills at a time for the big file: large enough that one write per block
/// costs nothing beside the filling, small enough to stay in cache.
const BLOCK_BYTES: usize = 1 << 20;

/// Bytes of each file in the tree: the small source files a repository is made of.
const TREE_FILE_BYTES: usize = 1024;

/// Directories the tree's files are spread over, so a copy also makes directories, and none
/// holds so many files that its own lookups dominate.
const TREE_DIRS: usize = 100;

/// The targets: `tether cp` moves a big file at 1.5× scp's rate, and a tree of small
/// files in a third of scp's time (it keeps many files in flight; scp sends one at a time).
const FILE_TARGET: f64 = 1.5;
const TREE_TARGET: f64 = 3.0;

/// What each tool is called in the table and the log.
pub fn tool_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Tether => "tether cp",
        Kind::Reference => "scp",
    }
}

/// A local `sshd` of our own, on `127.0.0.1` and a free port, with throwaway keys; dropped, it
/// is stopped and its directory removed.
pub struct Sshd {
    dir: PathBuf,
    port: u16,
    /// The user key `ssh` and `scp` log in with.
    key: PathBuf,
    user: String,
    child: Option<Child>,
}

impl Sshd {
    /// Starts `sshd` and waits until it lets us log in. Fails with [`SSHD_MISSING`] without
    /// `sshd` or `scp`.
    pub fn start() -> anyhow::Result<Self> {
        if !Path::new(SSHD).is_file() || !on_path("scp") {
            bail!("{SSHD_MISSING}");
        }
        let dir = std::env::temp_dir().join(format!("tether-bench-sshd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let user = current_user()?;
        // From here on, dropping `sshd` removes the directory and stops what was started.
        let mut sshd = Self { key: dir.join("user_key"), dir, port: 0, user, child: None };
        std::fs::create_dir_all(PRIVSEP_DIR)
            .with_context(|| format!("cannot make {PRIVSEP_DIR}, which sshd needs"))?;
        keygen(&sshd.dir.join("host_key"))?;
        keygen(&sshd.key)?;
        std::fs::copy(sshd.key.with_extension("pub"), sshd.dir.join("authorized_keys"))?;
        let mut why = String::new();
        for _ in 0..PORT_ATTEMPTS {
            match sshd.serve_on_a_free_port()? {
                None => return Ok(sshd),
                Some(exited) => why = exited,
            }
        }
        bail!("sshd did not start: {why}")
    }

    /// Starts `sshd` on a port that was free a moment ago; `Some(why)` if it exited (another
    /// process took the port first).
    fn serve_on_a_free_port(&mut self) -> anyhow::Result<Option<String>> {
        self.port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let config = self.dir.join("sshd_config");
        let dir = self.dir.display();
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {dir}/host_key\n\
                 AuthorizedKeysFile {dir}/authorized_keys\nPidFile {dir}/sshd.pid\n\
                 StrictModes no\nUsePAM no\nPermitRootLogin yes\nPasswordAuthentication no\n\
                 Subsystem sftp {SFTP_SERVER}\n",
                port = self.port
            ),
        )?;
        // `-e` logs to stderr, kept in a file (unread, a pipe would fill and stall `sshd`).
        let log = self.dir.join("sshd.log");
        let child = Command::new(SSHD)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("cannot start sshd")?;
        let mut login = Command::new("ssh");
        login.arg("-p").arg(self.port.to_string()).args(self.client_options());
        login.arg(format!("{}@127.0.0.1", self.user)).arg("true");
        login.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let child = self.child.insert(child);
        for _ in 0..READY_ATTEMPTS {
            if child.try_wait()?.is_some() {
                self.child = None;
                return Ok(Some(last_line(&std::fs::read(&log)?)));
            }
            if login.status()?.success() {
                return Ok(None);
            }
            std::thread::sleep(READY_INTERVAL);
        }
        bail!("sshd did not let us log in within {:?}", READY_INTERVAL * READY_ATTEMPTS as u32)
    }

    /// The options `ssh` and `scp` share (after the port, which they spell differently): our
    /// key only, no prompt, no host key check, and none of the user's own ssh config, whose
    /// connection sharing or compression would change what is measured.
    fn client_options(&self) -> Vec<OsString> {
        let mut options: Vec<OsString> = vec!["-F".into(), "/dev/null".into()];
        options.extend(["-i".into(), self.key.clone().into_os_string()]);
        for option in [
            "BatchMode=yes",
            "StrictHostKeyChecking=no",
            "UserKnownHostsFile=/dev/null",
            "IdentitiesOnly=yes",
        ] {
            options.extend(["-o".into(), option.into()]);
        }
        options
    }

    /// `scp`'s name for `path` on this server.
    fn remote(&self, path: &Path) -> String {
        format!("{}@127.0.0.1:{}", self.user, path.display())
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            servers::terminate(child);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether `program` is an executable file on `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// The user we log in as: whoever runs the benchmark.
fn current_user() -> anyhow::Result<String> {
    let name = Command::new("id")
        .arg("-un")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("USER").ok().filter(|name| !name.is_empty()));
    name.context("cannot tell who the current user is (`id -un`, $USER)")
}

/// A throwaway ed25519 key with no passphrase at `path` (and its public half at `path.pub`).
fn keygen(path: &Path) -> anyhow::Result<()> {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .context("cannot run ssh-keygen")?;
    if !out.status.success() {
        bail!("ssh-keygen failed: {}", last_line(&out.stderr));
    }
    Ok(())
}

/// The last non-blank line of a program's output: where it says why it failed.
fn last_line(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    text.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("").trim().to_owned()
}

/// A fresh `tether serve` over `wss://` with a self-signed certificate, as `tether cp` reaches
/// an executor across a network; dropped, it is stopped.
struct TlsTether {
    url: String,
    /// `SHA256:<hex>`, for `--tls-fingerprint`.
    fingerprint: String,
    child: Child,
}

impl TlsTether {
    fn start() -> anyhow::Result<Self> {
        let mut child = Command::new(servers::tether_binary()?)
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
        servers::terminate(&mut self.child);
    }
}

/// What the copy workloads copy, made once per run; [`Sources::remove`] removes it, and the
/// copies.
pub struct Sources {
    dir: PathBuf,
    /// One file of `file_bytes` bytes.
    file: PathBuf,
    file_bytes: u64,
    /// `tree_files` files of [`TREE_FILE_BYTES`], over [`TREE_DIRS`] directories.
    tree: PathBuf,
    tree_files: usize,
}

impl Sources {
    /// The file and the tree, with contents that do not compress, so neither tool's figure
    /// depends on whether it compresses what it sends.
    pub fn prepare(file_bytes: u64, tree_files: usize) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("tether-bench-cp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let sources = Self {
            file: dir.join("source/file.bin"),
            tree: dir.join("source/tree"),
            dir,
            file_bytes,
            tree_files,
        };
        if let Err(error) = sources.write() {
            sources.remove();
            return Err(error);
        }
        Ok(sources)
    }

    fn write(&self) -> anyhow::Result<()> {
        let mut random = XorShift::new();
        std::fs::create_dir_all(&self.tree)?;
        let mut file = std::fs::File::create(&self.file)?;
        let mut block = vec![0u8; BLOCK_BYTES];
        let mut left = self.file_bytes;
        while left > 0 {
            random.fill(&mut block);
            let n = left.min(BLOCK_BYTES as u64) as usize;
            file.write_all(&block[..n])?;
            left -= n as u64;
        }
        let dirs = TREE_DIRS.min(self.tree_files);
        for d in 0..dirs {
            std::fs::create_dir(self.tree.join(format!("dir-{d}")))?;
        }
        let mut contents = [0u8; TREE_FILE_BYTES];
        for n in 0..self.tree_files {
            random.fill(&mut contents);
            std::fs::write(self.tree.join(format!("dir-{}/file-{n}.bin", n % dirs)), contents)?;
        }
        // The sources on disk before the first run, so it does not share the disk with their
        // writeback.
        let synced = Command::new("sync").status().context("cannot run sync")?;
        anyhow::ensure!(synced.success(), "sync failed");
        Ok(())
    }

    /// Where the copies of one run of `workload` by `kind` land: a directory of their own.
    fn run_dir(&self, workload: Workload, kind: Kind, round: usize) -> PathBuf {
        self.dir.join("copies").join(format!("{}-{kind:?}-{round}", workload.slug()))
    }

    /// Removes every copy made so far. Called when a row is done, not after each run: ext4
    /// makes files slowly right after many are deleted (it scans the freed inodes), which
    /// would make the run after a removed tree noisy.
    pub fn remove_copies(&self) {
        let _ = std::fs::remove_dir_all(self.dir.join("copies"));
    }

    /// Removes the sources and the copies (the benchmark keeps them for the whole run, so
    /// they are not dropped).
    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// xorshift64: incompressible bytes at memory speed, where `/dev/urandom` would take longer
/// to make a gigabyte than the copies take to move it.
struct XorShift(u64);

impl XorShift {
    fn new() -> Self {
        // Any nonzero seed; a fixed one makes every run copy the same bytes.
        Self(0x9e37_79b9_7f4a_7c15)
    }

    fn fill(&mut self, buffer: &mut [u8]) {
        for chunk in buffer.chunks_mut(8) {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
    }
}

/// What is copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Payload {
    /// The one big file: the rate of a single stream.
    File,
    /// The tree of small files: the cost per file.
    Tree,
}

/// Which way it is copied: up to the executor or down from it (both are this machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Up,
    Down,
}

/// One row: what is copied, and which way.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    payload: Payload,
    direction: Direction,
}

impl Workload {
    /// The rows, in the order they are run and printed.
    pub const ALL: [Workload; 4] = [
        Workload { payload: Payload::File, direction: Direction::Up },
        Workload { payload: Payload::File, direction: Direction::Down },
        Workload { payload: Payload::Tree, direction: Direction::Up },
        Workload { payload: Payload::Tree, direction: Direction::Down },
    ];

    pub fn label(self, sources: &Sources) -> String {
        let direction = match self.direction {
            Direction::Up => "up",
            Direction::Down => "down",
        };
        match self.payload {
            Payload::File => format!(
                "tether cp of a {} file {direction}, over wss:// vs scp (MB/s)",
                size(sources.file_bytes)
            ),
            Payload::Tree => format!(
                "tether cp -r of {} files of 1 KiB {direction}, over wss:// vs scp -r (s)",
                thousands(sources.tree_files)
            ),
        }
    }

    pub fn better(self) -> Better {
        match self.payload {
            Payload::File => Better::Higher,
            Payload::Tree => Better::Lower,
        }
    }

    /// How many times better than scp `tether cp` is meant to be.
    pub fn target(self) -> f64 {
        match self.payload {
            Payload::File => FILE_TARGET,
            Payload::Tree => TREE_TARGET,
        }
    }

    fn slug(self) -> String {
        format!("{:?}-{:?}", self.payload, self.direction).to_lowercase()
    }
}

/// One run of `workload` by `kind`'s tool (`scp` to `sshd` for the reference's side), into a
/// directory of its own: MB/s for the file, seconds for the tree. A copy that does not match
/// its source is a failed run, so a silently broken copy is not timed as fast. The file's copy
/// is removed after (a gigabyte a run adds up); the tree's stay until the row is done
/// ([`Sources::remove_copies`]).
pub async fn copy(
    workload: Workload,
    kind: Kind,
    sources: &Sources,
    sshd: Option<&Sshd>,
    round: usize,
) -> anyhow::Result<f64> {
    let run_dir = sources.run_dir(workload, kind, round);
    std::fs::create_dir_all(&run_dir)?;
    let (source, destination) = match workload.payload {
        Payload::File => (&sources.file, run_dir.join("file.bin")),
        Payload::Tree => (&sources.tree, run_dir.join("tree")),
    };
    let recursive = workload.payload == Payload::Tree;
    let up = workload.direction == Direction::Up;
    // Started before the clock, and stopped when the run is done.
    let mut tether_server = None;
    let (program, args): (PathBuf, Vec<OsString>) = match kind {
        Kind::Tether => {
            let server = tether_server.insert(TlsTether::start()?);
            let mut args: Vec<OsString> = vec!["cp".into()];
            if recursive {
                args.push("-r".into());
            }
            args.extend(["--url".into(), server.url.clone().into()]);
            args.extend(["--tls-fingerprint".into(), server.fingerprint.clone().into()]);
            let remote = |path: &Path| OsString::from(format!(":{}", path.display()));
            if up {
                args.extend([source.clone().into_os_string(), remote(&destination)]);
            } else {
                args.extend([remote(source), destination.clone().into_os_string()]);
            }
            (servers::tether_binary()?, args)
        }
        Kind::Reference => {
            let sshd = sshd.context("scp needs the local sshd")?;
            let mut args: Vec<OsString> = vec!["-q".into()];
            if recursive {
                args.push("-r".into());
            }
            args.extend(["-P".into(), sshd.port.to_string().into()]);
            args.extend(sshd.client_options());
            if up {
                args.extend([source.clone().into_os_string(), sshd.remote(&destination).into()]);
            } else {
                args.extend([sshd.remote(source).into(), destination.clone().into_os_string()]);
            }
            (PathBuf::from("scp"), args)
        }
    };
    let seconds = run(&program, &args).await?;
    match workload.payload {
        Payload::File => {
            let copied = std::fs::metadata(&destination)?.len();
            let _ = std::fs::remove_file(&destination);
            anyhow::ensure!(
                copied == sources.file_bytes,
                "copied {copied} of {} bytes",
                sources.file_bytes
            );
            Ok(sources.file_bytes as f64 / seconds / 1e6)
        }
        Payload::Tree => {
            let copied = count_files(&destination)?;
            anyhow::ensure!(
                copied == sources.tree_files,
                "copied {copied} of {} files",
                sources.tree_files
            );
            Ok(seconds)
        }
    }
}

/// Seconds from spawning `program` to its exit; a nonzero exit fails with the last line of its
/// stderr. Killed if the run is abandoned (`--timeout-secs`).
async fn run(program: &Path, args: &[OsString]) -> anyhow::Result<f64> {
    let name = program.file_name().unwrap_or(program.as_os_str()).to_string_lossy();
    let started = Instant::now();
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {name}"))?;
    let out = child.wait_with_output().await?;
    let seconds = started.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("{name} failed ({}): {}", out.status, last_line(&out.stderr));
    }
    Ok(seconds)
}

/// Regular files under `dir`, at any depth.
fn count_files(dir: &Path) -> anyhow::Result<usize> {
    let mut count = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("no {}", dir.display()))? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            count += count_files(&entry.path())?;
        } else if kind.is_file() {
            count += 1;
        }
    }
    Ok(count)
}

/// `1 GB`, `50 MB`: decimal units, as the MB/s figures are.
fn size(bytes: u64) -> String {
    match bytes as f64 {
        b if b >= 1e9 => format!("{} GB", b / 1e9),
        b if b >= 1e6 => format!("{} MB", b / 1e6),
        _ => format!("{bytes}-byte"),
    }
}

/// `20,000`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut text = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            text.push(',');
        }
        text.push(digit);
    }
    text
}
