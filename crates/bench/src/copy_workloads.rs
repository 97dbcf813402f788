//! `tether cp` against `scp`: the same files copied up to an executor and down from it, by
//! each tool's own command-line program, timed from spawn to exit. `tether cp` goes to a fresh
//! `tether serve` over `wss://` (`servers::TlsTether`); `scp` to a local `sshd` of our own
//! (`tether_testkit::sshd`) — both encrypted, both to this machine, so the figures compare the
//! tools, not the networks.
//!
//! These rows compare Tether with scp, not with the reference: scp's figures sit where the
//! reference's do (`Kind::Reference`), in a table of their own.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use tether_testkit::sshd::{Sshd, last_line};

use crate::report::Better;
use crate::servers::{self, Kind, TlsTether};

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
        random.write(&mut std::fs::File::create(&self.file)?, self.file_bytes)?;
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
pub(crate) struct XorShift(u64);

impl XorShift {
    pub(crate) fn new() -> Self {
        // Any nonzero seed; a fixed one makes every run copy the same bytes.
        Self(0x9e37_79b9_7f4a_7c15)
    }

    /// The next `bytes` of the stream into `out`, [`BLOCK_BYTES`] at a time.
    pub(crate) fn write(&mut self, out: &mut impl Write, bytes: u64) -> std::io::Result<()> {
        let mut block = vec![0u8; BLOCK_BYTES];
        let mut left = bytes;
        while left > 0 {
            self.fill(&mut block);
            let n = left.min(BLOCK_BYTES as u64) as usize;
            out.write_all(&block[..n])?;
            left -= n as u64;
        }
        Ok(())
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
