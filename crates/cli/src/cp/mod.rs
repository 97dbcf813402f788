//! `tether cp SRC… DST`: files and directory trees up to an executor or down from one, as
//! `scp -r` and `kubectl cp` copy them. A remote path is written `:/abs/path` (the executor of
//! `--url`) or `NAME:/abs/path` (a named executor), as scp writes `host:path`.
//!
//! The bytes go through the executor's `fs/*` calls: a file bigger than one block streamed
//! in blocks of 1 MiB (never one whole-file message), a smaller one in a single call each way
//! (`fs/putFile` up, `fs/readFile` down), since a tree of small files is otherwise mostly
//! round trips. Every file is written under a temporary name in its directory and renamed into
//! place once whole — by the server itself within `fs/putFile` — so an interrupted copy leaves
//! no half-written file under the final name. A tree is walked depth first, one directory
//! listing at a time (a remote one with each entry's own mode and time, `fs/readDirectory
//! {includeMetadata}`), while its files are copied: the walk holds only the listings of the
//! directories it is inside, and stops at the caps of `limits`. This side's files are read and
//! written relative to directories held open, never through a link (`local_read`,
//! `local_write`): a link is copied as a link, and a link where a copy down has a directory
//! stops the copy.
//! Modes, modification times and symbolic links are kept where the server can set them (the
//! `fsMetadata` extension); against a server without it, the bytes are copied and the command
//! says what was not kept.

use std::ffi::{OsStr, OsString};
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Poll;

use anyhow::{Context as _, bail};
use clap::Args;
use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use indicatif::{ProgressBar, ProgressStyle};
use tether_client::ExecServerClient;
use tether_engine::fs::FsError;
use tether_protocol::PathUri;
use tokio::sync::mpsc;

mod down;
mod globs;
mod limits;
mod local_read;
mod local_write;
mod stages;
mod up;

/// Files copied at once: enough to hide each file's few round trips (open, blocks, close,
/// metadata, rename) behind the others' for a tree of small files, few enough that a tree of
/// big ones holds at most this many blocks in memory per direction.
const FILES_IN_FLIGHT: usize = 16;

/// Metadata questions asked at once while listing a remote tree.
const LOOKUPS_IN_FLIGHT: usize = 32;

/// How much of a local file is read at once for an upload: one `fs/writeBlock`'s worth.
const UPLOAD_CHUNK_BYTES: usize = tether_protocol::fs::FS_BLOCK_MAX_BYTES;

/// Files up to this size go in one call each way (`fs/putFile` up, `fs/readFile` down)
/// instead of a handle's open, blocks and close: a tree of small files is mostly round trips
/// otherwise. One block's worth, so a file in flight costs what a block of a big one does.
const WHOLE_FILE_MAX_BYTES: u64 = tether_protocol::fs::FS_BLOCK_MAX_BYTES as u64;

const CP_HELP: &str = "\
Examples:
  tether cp --url ws://127.0.0.1:4500 ./notes.txt :/tmp/notes.txt      up
  tether cp --url ws://127.0.0.1:4500 :/var/log/app.log .              down, into a directory
  tether cp -r ./src build:/work/                                      a tree, to a named executor

A remote path is :/abs/path (the executor of --url or TETHER_URL) or NAME:/abs/path (a named
executor); :rel, :~/rel and : are from the executor user's home, as scp reads them. A path with
a slash before its first colon is local (./a:b). - is standard input as the source, standard
output as the destination (one file). The last part of a remote source may be a pattern
(':/var/log/*.log', quoted so the shell here leaves it alone): it is matched against the
executor's listing as sh matches names (*, ?, [a-z], [!x]; * and ? take no leading dot), and
one that matches nothing is an error.

A link named on the command line is copied as what it leads to, as cp does without -r; in a
tree (and with -r) a link is copied as a link, and a copy down stops where a directory it makes
would go through one. FIFOs, sockets and devices in a tree are skipped, and counted; a file
or directory in a tree that cannot be read (here going up, on the executor coming down) is
named and skipped, the rest copied, and the copy exits 1 saying how many. A copy takes at most 1000000 entries, 256 directories
deep.

Exit codes: 0 copied; 1 something was not copied (one line on stderr says what and why).";

#[derive(Args)]
#[command(after_help = CP_HELP)]
pub struct CpArgs {
    /// The executor that `:/path` means: `ws://HOST:PORT`, `wss://HOST:PORT`, or a name.
    #[arg(long, env = "TETHER_URL", value_name = "URL|NAME")]
    url: Option<String>,

    #[command(flatten)]
    trust: crate::executors::TrustFlags,

    /// Copy directories and what they hold (as `cp -r`, `scp -r`).
    #[arg(short, long)]
    recursive: bool,

    /// What to copy, then where to: one side local, the other on the executor.
    #[arg(required = true, num_args = 2.., value_name = "SRC… DST")]
    paths: Vec<String>,
}

/// Runs the copy; returns the exit code.
pub async fn cp(args: CpArgs) -> i32 {
    match run(args).await {
        Ok(()) => 0,
        // Nobody reads what `-` writes any more (`| head`): quietly, as cat would.
        Err(error) if crate::stdout::is_closed(&error) => crate::stdout::CLOSED_STDOUT_EXIT,
        // As a shell reports a command a signal ended: 128 + its number.
        Err(error) if let Some(&Interrupted(signal)) = error.downcast_ref() => {
            eprintln!("tether cp: {error}");
            128 + signal
        }
        Err(error) => {
            eprintln!("tether cp: {}", crate::report::one_line(&error));
            1
        }
    }
}

/// Where a path is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Location {
    Local(PathBuf),
    /// `-`: standard input as a source, standard output as the destination.
    Standard,
    /// On the executor `executor` names (`None`: `--url`'s), at an absolute path or one from
    /// the executor user's home (as scp reads `host:rel` and `host:~/rel`).
    Remote {
        executor: Option<String>,
        path: PathBuf,
    },
}

/// Reads a path as scp does: a colon before any slash makes it remote.
fn location(text: &str) -> anyhow::Result<Location> {
    if text == "-" {
        return Ok(Location::Standard);
    }
    let Some((host, path)) = text.split_once(':') else {
        return Ok(Location::Local(PathBuf::from(text)));
    };
    if host.contains('/') {
        return Ok(Location::Local(PathBuf::from(text)));
    }
    // `~` and `~/rel` are the home, as a relative path is from it.
    let path = match path {
        "~" => "",
        _ => path.strip_prefix("~/").unwrap_or(path),
    };
    let executor = (!host.is_empty()).then(|| host.to_owned());
    Ok(Location::Remote { executor, path: PathBuf::from(path) })
}

/// A remote path as the executor has it: an absolute one as it is, another from the home the
/// executor says its user has (`environmentInfo.userHomeDir`). A trailing `/` is kept.
fn on_executor(path: &Path, client: &ExecServerClient) -> anyhow::Result<PathBuf> {
    if path.is_absolute() {
        return Ok(path.to_owned());
    }
    let home = client
        .environment_info()
        .and_then(|info| info.user_home_dir.as_ref())
        .and_then(|home| home.to_path().ok())
        .with_context(|| {
            format!(
                ":{}: the executor does not say where its user's home is; give an absolute path (:/abs/path)",
                path.display()
            )
        })?;
    let mut joined = home.into_os_string();
    if !path.as_os_str().is_empty() {
        joined.push("/");
        joined.push(path.as_os_str());
    }
    Ok(PathBuf::from(joined))
}

/// `sources` with each remote pattern (`:/dir/*.log`) replaced by the paths it matches on the
/// executor ([`globs`]).
async fn expand_patterns(
    client: &ExecServerClient,
    sources: Vec<Location>,
) -> anyhow::Result<Vec<Location>> {
    let mut expanded = Vec::with_capacity(sources.len());
    for source in sources {
        match source {
            Location::Remote { executor, path } if globs::is_pattern(&path) => {
                let pattern = on_executor(&path, client)?;
                for path in globs::expand(client, &pattern).await? {
                    expanded.push(Location::Remote { executor: executor.clone(), path });
                }
            }
            other => expanded.push(other),
        }
    }
    Ok(expanded)
}

/// One thing to copy, by its name in its directory (a root: the name it is copied under).
#[derive(Debug, Clone)]
struct Entry {
    name: OsString,
    kind: Kind,
    mode: Option<u32>,
    modified_ms: Option<i64>,
}

/// What an entry is. A link's target is read when the link is copied, so that an entry
/// waiting to be copied costs its name and a few words.
#[derive(Debug, Clone, Copy)]
enum Kind {
    File { size: u64 },
    Directory,
    Link,
}

/// What the copy could not keep, said once at the end.
#[derive(Default)]
struct NotKept {
    metadata: AtomicU64,
    links: AtomicU64,
    /// FIFOs, sockets and devices met in a tree, skipped.
    special: AtomicU64,
    /// Files and directories in a tree that this side (going up) or the executor (coming
    /// down) may not read, skipped.
    denied: AtomicU64,
}

async fn run(args: CpArgs) -> anyhow::Result<()> {
    let (destination, sources) = args.paths.split_last().expect("clap: at least two paths");
    let destination = location(destination)?;
    let sources = sources.iter().map(|s| location(s)).collect::<anyhow::Result<Vec<_>>>()?;
    let upload = matches!(destination, Location::Remote { .. });
    let mut executor = match &destination {
        Location::Remote { executor, .. } => executor.clone(),
        Location::Local(_) | Location::Standard => None,
    };
    let standard = matches!(destination, Location::Standard)
        || sources.iter().any(|source| matches!(source, Location::Standard));
    if standard && (sources.len() > 1 || args.recursive) {
        bail!("- (standard input or output) is one file: copy one, without -r");
    }
    for source in &sources {
        match (source, upload) {
            (Location::Standard, false) => {
                bail!("- is standard input here; the other side must be on the executor (:/path)")
            }
            (Location::Standard, true) => {}
            (Location::Local(path), false) => bail!(
                "{}: both sides are here; copy with cp, or write the executor's side as :/path",
                path.display()
            ),
            (Location::Remote { .. }, true) => {
                bail!("both sides are on an executor; one of them must be a path here")
            }
            (Location::Remote { executor: named, .. }, false) => {
                if executor.is_some() && named != &executor {
                    bail!("the sources name different executors; copy from one at a time");
                }
                executor = named.clone();
            }
            (Location::Local(_), true) => {}
        }
    }
    let client = connect(&args, executor.as_deref()).await?;
    let sources = expand_patterns(&client, sources).await?;
    if matches!(destination, Location::Standard) && sources.len() > 1 {
        bail!("- (standard output) is one file, and the pattern matches several: copy one");
    }
    let keeps_metadata = client.tether_extensions().fs_metadata;
    let not_kept = NotKept::default();
    let progress = progress_bar();
    let stages = stages::Stages::default();
    let copy = Copier {
        client: &client,
        keeps_metadata,
        not_kept: &not_kept,
        progress: &progress,
        stages: &stages,
    };
    let several = sources.len() > 1;
    let copying = async {
        for source in &sources {
            match (source, &destination) {
                (Location::Local(from), Location::Remote { path: to, .. }) => {
                    let to = on_executor(to, &client)?;
                    copy.upload(from, &to, several, args.recursive).await?
                }
                (Location::Remote { path: from, .. }, Location::Local(to)) => {
                    let from = on_executor(from, &client)?;
                    copy.download(&from, to, several, args.recursive).await?
                }
                (Location::Standard, Location::Remote { path: to, .. }) => {
                    copy.upload_stdin(&on_executor(to, &client)?).await?
                }
                (Location::Remote { path: from, .. }, Location::Standard) => {
                    copy.download_to_stdout(&on_executor(from, &client)?).await?
                }
                _ => unreachable!("checked above"),
            }
        }
        anyhow::Ok(())
    };
    let result = tokio::select! {
        result = copying => result,
        signal = interrupted() => {
            // What was halfway is dropped with the copy; its temporary files go with it.
            progress.finish_and_clear();
            stages.remove_all(&client).await;
            client.disconnect();
            return Err(Interrupted(signal).into());
        }
    };
    progress.finish_and_clear();
    client.disconnect();
    result?;
    let (metadata, links) =
        (not_kept.metadata.load(Ordering::Relaxed), not_kept.links.load(Ordering::Relaxed));
    if metadata > 0 || links > 0 {
        eprintln!(
            "tether cp: the server cannot set modes, times or links (it lacks Tether's fsMetadata): {metadata} entries kept only their bytes, {links} symbolic links were {}",
            if upload { "skipped" } else { "copied as what they point to" }
        );
    }
    let special = not_kept.special.load(Ordering::Relaxed);
    if special > 0 {
        eprintln!(
            "tether cp: {special} FIFOs, sockets or devices in the tree were skipped: a copy carries files, directories and links"
        );
    }
    let denied = not_kept.denied.load(Ordering::Relaxed);
    if denied > 0 {
        bail!(
            "{denied} files or directories could not be read (permission denied) and were skipped, each named above; the rest was copied: make them readable and copy again"
        );
    }
    Ok(())
}

/// A copy stopped by a signal (its number), its temporary files removed.
#[derive(Debug, thiserror::Error)]
#[error("interrupted; nothing was left halfway: what had been copied stays, the rest was not")]
struct Interrupted(i32);

/// The first of `SIGINT`, `SIGTERM` and `SIGHUP` to come (its number).
async fn interrupted() -> i32 {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => libc::SIGINT,
        _ = term.recv() => libc::SIGTERM,
        _ = hup.recv() => libc::SIGHUP,
    }
}

async fn connect(args: &CpArgs, named: Option<&str>) -> anyhow::Result<ExecServerClient> {
    let Some(url) = named.or(args.url.as_deref()) else {
        bail!("which executor? give --url (or TETHER_URL), or write the remote path as NAME:/path");
    };
    let executor = args.trust.over(crate::executors::resolve(url)?);
    let options = executor.client_options("tether-cp")?;
    crate::report::connect(&executor, options).await
}

/// A progress bar on a terminal; nothing otherwise.
fn progress_bar() -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    let style = ProgressStyle::with_template(
        "{wide_bar} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {eta}",
    )
    .expect("a valid template");
    bar.set_style(style);
    bar
}

fn uri(path: &Path) -> anyhow::Result<PathUri> {
    PathUri::from_path(path).with_context(|| format!("{}: not an absolute path", path.display()))
}

/// Removes the file or link `path` on the executor if it is there (a temporary file given up),
/// whatever comes of it: nothing more can be done about one that stays.
async fn remove_remote_file(client: &ExecServerClient, path: &Path) {
    use tether_engine::fs::FileSystem as _;
    if let Ok(path) = uri(path) {
        let params = tether_protocol::fs::FsRemoveParams {
            path,
            recursive: Some(false),
            force: Some(true),
            follow_symlinks: Some(false),
            sandbox: None,
        };
        let _ = client.remove(params).await;
    }
}

/// An error from the executor about `path`, in one line.
fn remote(path: &Path, error: FsError) -> anyhow::Error {
    anyhow::anyhow!("{} on the executor: {}", path.display(), error.message)
}

/// A name for a file being written next to `name`, unique to this run. It is a staged name
/// the server knows (`tether_engine::fs::staged_name`): a stage it opens under it is held for
/// this copy, and removed by the server if the copy's connection ends before it is placed, so
/// a copy killed outright (`kill -9`) leaves nothing behind either.
fn staged_name(name: &OsStr) -> OsString {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let unique = NEXT.fetch_add(1, Ordering::Relaxed);
    tether_engine::fs::staged_name(name, std::process::id(), unique)
}

/// The last component of a source, for "copy into this directory".
fn base_name(path: &Path) -> anyhow::Result<&std::ffi::OsStr> {
    path.file_name().with_context(|| format!("{}: has no name to copy under", path.display()))
}

/// Where a copy lands, as scp decides it.
enum Landing {
    /// This path, which is there already (into a directory, under the source's own name; or
    /// onto a file) or will be made with its parents (a tree's root).
    At(PathBuf),
    /// This path, new, for a file: its directory must be there already.
    NewFile(PathBuf),
}

/// Where a copy of `from` to `to` lands, given what `to` is on its side (`Some(true)` a
/// directory, `Some(false)` anything else, `None` nothing); `from_name` and `to_name` are the
/// two paths as the errors name them, each with the side it is on.
///
/// A `to` written with a trailing `/` names a directory, as it does to cp and scp: a file is
/// never written under that name, whether nothing is there or a file is. (A tree copied to a
/// missing `to/` becomes that directory, as `cp -r` makes it.)
fn landing(
    (from, from_name): (&Path, &str),
    (to, to_name): (&Path, &str),
    found: Option<bool>,
    root_is_directory: bool,
    several: bool,
) -> anyhow::Result<Landing> {
    let names_a_directory = to.as_os_str().as_encoded_bytes().ends_with(b"/");
    Ok(match found {
        Some(true) => Landing::At(to.join(base_name(from)?)),
        Some(false) if root_is_directory => {
            bail!("cannot copy the directory {from_name} onto the file {to_name}")
        }
        Some(false) | None if several => bail!("{to_name}: not a directory (several sources)"),
        Some(false) if names_a_directory => {
            bail!("{to_name}: not a directory; leave out the trailing / to copy onto the file")
        }
        None if !root_is_directory && names_a_directory => bail!(
            "{to_name}: no such directory; make it first, or leave out the trailing / to copy \
             to a file of that name"
        ),
        None if !root_is_directory => Landing::NewFile(to.to_owned()),
        _ => Landing::At(to.to_owned()),
    })
}

/// One run's copying: its connection, whether the server sets modes, times and links
/// (`fsMetadata`), what could not be kept without it, and the progress shown. Its copies up
/// are in `up`, down in `down`; this side's files are handled in `local`.
struct Copier<'a> {
    client: &'a ExecServerClient,
    keeps_metadata: bool,
    not_kept: &'a NotKept,
    progress: &'a ProgressBar,
    stages: &'a stages::Stages,
}

impl Copier<'_> {
    /// Says in one line that `denied`, in a tree, was skipped as this side or the executor
    /// may not read it, and counts it for the copy's last line.
    fn skipped_denied(&self, denied: &anyhow::Error) {
        self.progress.suspend(|| eprintln!("tether cp: {denied}; skipped"));
        self.not_kept.denied.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs a tree's walk beside its copies: the walk hands each file or link to a queue of
/// [`FILES_IN_FLIGHT`] (so a tree is never listed ahead of its copies by more than that), and
/// the copies take from it that many at a time. A walk that stops on an error stops the copies
/// taking more, and lets those begun finish, so that none is cut off with its temporary file
/// left behind; copies stopping on an error stop the walk (the queue is gone).
async fn walk_beside_copies<J, W, C>(
    walk: impl FnOnce(mpsc::Sender<J>) -> W,
    copy: impl Fn(J) -> C,
) -> anyhow::Result<()>
where
    W: Future<Output = anyhow::Result<()>>,
    C: Future<Output = anyhow::Result<()>>,
{
    let (jobs, mut queued) = mpsc::channel::<J>(FILES_IN_FLIGHT);
    let stopped = AtomicBool::new(false);
    let walk = async {
        let walked = walk(jobs).await;
        stopped.store(walked.is_err(), Ordering::Relaxed);
        walked
    };
    let copies = stream::poll_fn(|cx| match stopped.load(Ordering::Relaxed) {
        true => Poll::Ready(None),
        false => queued.poll_recv(cx),
    })
    .map(copy)
    .buffer_unordered(FILES_IN_FLIGHT)
    .try_for_each(|()| std::future::ready(Ok(())));
    let (walked, copied) = tokio::join!(walk, copies);
    walked.and(copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_read_as_scp_reads_them() {
        let remote = |executor: Option<&str>, path: &str| Location::Remote {
            executor: executor.map(str::to_owned),
            path: PathBuf::from(path),
        };
        assert_eq!(location(":/tmp/x").unwrap(), remote(None, "/tmp/x"));
        assert_eq!(location("build:/work").unwrap(), remote(Some("build"), "/work"));
        assert_eq!(location("./a:b").unwrap(), Location::Local(PathBuf::from("./a:b")));
        assert_eq!(location("notes.txt").unwrap(), Location::Local(PathBuf::from("notes.txt")));
        assert_eq!(location("build:work").unwrap(), remote(Some("build"), "work"));
        assert_eq!(location(":~/work/").unwrap(), remote(None, "work/"));
        assert_eq!(location(":~").unwrap(), remote(None, ""));
        assert_eq!(location(":").unwrap(), remote(None, ""));
    }
}
