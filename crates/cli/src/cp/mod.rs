//! `tether cp SRC… DST`: files and directory trees up to an executor or down from one, as
//! `scp -r` and `kubectl cp` copy them. A remote path is written `:/abs/path` (the executor of
//! `--url`) or `NAME:/abs/path` (a named executor), as scp writes `host:path`.
//!
//! The copying is `tether_tree_copy`'s, from this machine's files (the engine's
//! `LocalFileSystem`) to the executor's (the client), back, or from one executor to another; this module reads the paths as
//! scp reads them, expands remote patterns ([`globs`]), shows the progress and the entries
//! skipped, says what could not be kept, and removes what a signal left halfway.

use std::io::IsTerminal as _;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tether_client::ExecServerClient;
use tether_engine::fs::{FsError, LocalFileSystem};
use tether_protocol::PathUri;
use tether_tree_copy::{
    CopyError, CopyOptions, CopyReport, Observer, Place, Side, TreeCopy, TreePath,
};

mod globs;

const CP_HELP: &str = "\
Examples:
  tether cp --url ws://127.0.0.1:4500 ./notes.txt :/tmp/notes.txt      up
  tether cp --url ws://127.0.0.1:4500 :/var/log/app.log .              down, into a directory
  tether cp -r ./src build:/work/                                      a tree, to a named executor
  tether cp -r build:/work/out test:/srv/in                            executor to executor

A remote path is :/abs/path (the executor of --url or TETHER_URL) or NAME:/abs/path (a named
executor); :rel, :~/rel and : are from the executor user's home, as scp reads them. A path with
a slash before its first colon is local (./a:b). - is standard input as the source, standard
output as the destination (one file). The last part of a remote source may be a pattern
(':/var/log/*.log', quoted so the shell here leaves it alone): it is matched against the
executor's listing as sh matches names (*, ?, [a-z], [!x]; * and ? take no leading dot), and
one that matches nothing is an error. Sources on one executor may go to another (or to another
path on the same one): the bytes pass through this machine, nothing is written here.

A link named on the command line is copied as what it leads to, as cp does without -r; in a
tree (and with -r) a link is copied as a link, and a copy stops where a directory it makes would
go through one. FIFOs, sockets and devices in a tree are skipped, and counted; a file
or directory in a tree that cannot be read (here going up, on the executor coming down) is
named and skipped, the rest copied, and the copy exits 1 saying how many. A copy takes at most 1000000 entries, 256 directories
deep.

Exit codes: 0 copied; 1 something was not copied (one line on stderr says what and why);
128+N after signal N (SIGINT, SIGTERM, SIGHUP), its temporary files removed first; 141 when the
reader of - goes away.";

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

    /// What to copy, then where to: one side here and the other on an executor, or both on
    /// executors.
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

async fn run(args: CpArgs) -> anyhow::Result<()> {
    let (destination, sources) = args.paths.split_last().expect("clap: at least two paths");
    let destination = location(destination)?;
    let sources = sources.iter().map(|s| location(s)).collect::<anyhow::Result<Vec<_>>>()?;
    let Executors { source: source_executor, destination: destination_executor } =
        executors(&sources, &destination)?;
    let standard = matches!(destination, Location::Standard)
        || sources.iter().any(|source| matches!(source, Location::Standard));
    if standard && (sources.len() > 1 || args.recursive) {
        bail!("- (standard input or output) is one file: copy one, without -r");
    }
    let source_client = match &source_executor {
        Some(named) => Some(connect(&args, named.as_deref()).await?),
        None => None,
    };
    // One executor on both sides is one connection, used both ways.
    let destination_client = match &destination_executor {
        Some(named) if source_executor.as_ref() == Some(named) => None,
        Some(named) => Some(connect(&args, named.as_deref()).await?),
        None => None,
    };
    let clients =
        Clients { source: source_client.as_ref(), destination: destination_client.as_ref() };
    let sources = match clients.source {
        Some(client) => expand_patterns(client, sources).await?,
        None => sources,
    };
    if matches!(destination, Location::Standard) && sources.len() > 1 {
        bail!("- (standard output) is one file, and the pattern matches several: copy one");
    }
    let local = LocalFileSystem::new();
    // Two executors are named in what is said; one is "the executor".
    let across = clients.source.is_some() && clients.destination.is_some();
    let place = |named: &Option<Option<String>>| match named {
        Some(named) if across => {
            Place::Executor(Some(executor_name(&args, named.as_deref()).into()))
        }
        _ => Place::Executor(None),
    };
    let from = match clients.source {
        Some(client) => Side::new(client, place(&source_executor)),
        None => Side::here(&local),
    };
    let to = match clients.destination.or(clients.source.filter(|_| destination_executor.is_some()))
    {
        Some(client) => Side::new(client, place(&destination_executor)),
        None => Side::here(&local),
    };
    let progress = Progress(progress_bar());
    let copy = TreeCopy::new(from, to).observed_by(&progress);
    let options = CopyOptions { recursive: args.recursive, into_directory: sources.len() > 1 };
    let copying = async {
        for source in &sources {
            let from = match source {
                Location::Local(path) => Some(here_path(path)?),
                Location::Remote { path, .. } => Some(TreePath::new(on_executor(
                    path,
                    clients.source.expect("a remote source's connection"),
                )?)),
                Location::Standard => None,
            };
            let to = match &destination {
                Location::Local(path) => Some(here_path(path)?),
                Location::Remote { path, .. } => {
                    let client = clients.destination.or(clients.source);
                    let client = client.expect("a remote destination's connection");
                    Some(TreePath::new(on_executor(path, client)?))
                }
                Location::Standard => None,
            };
            match (from, to) {
                (Some(from), Some(to)) => copy.copy(&from, &to, options).await?,
                (None, Some(to)) => {
                    let stdin = std::io::stdin().as_fd().try_clone_to_owned()?;
                    let stdin = tokio::fs::File::from_std(std::fs::File::from(stdin));
                    copy.copy_from_reader(stdin, "standard input", &to).await?
                }
                (Some(from), None) => {
                    let stdout = std::io::stdout().as_fd().try_clone_to_owned()?;
                    let stdout = tokio::fs::File::from_std(std::fs::File::from(stdout));
                    copy.copy_to_writer(&from, stdout, "standard output").await?
                }
                (None, None) => unreachable!("checked above: - is one side at most"),
            }
        }
        anyhow::Ok(())
    };
    let result = tokio::select! {
        result = copying => result,
        signal = interrupted() => {
            // What was halfway is dropped with the copy; its temporary files go with it.
            progress.0.finish_and_clear();
            copy.remove_stages().await;
            clients.disconnect();
            return Err(Interrupted(signal).into());
        }
    };
    progress.0.finish_and_clear();
    clients.disconnect();
    result?;
    say_what_was_not_kept(&copy.report())
}

/// The connections a copy uses: to the executor its sources are on, and to the one its
/// destination is on where that is another.
struct Clients<'a> {
    source: Option<&'a ExecServerClient>,
    destination: Option<&'a ExecServerClient>,
}

impl Clients<'_> {
    fn disconnect(&self) {
        self.source.into_iter().chain(self.destination).for_each(ExecServerClient::disconnect);
    }
}

/// The executors a copy's sources and destination are on, each `None` for here and
/// `Some(None)` for `--url`'s.
struct Executors {
    source: Option<Option<String>>,
    destination: Option<Option<String>>,
}

/// The executors the sources and the destination are on, refusing what cannot be copied:
/// both sides here, `-` with nothing remote, sources on two executors, or on both sides.
fn executors(sources: &[Location], destination: &Location) -> anyhow::Result<Executors> {
    let destination_executor = match destination {
        Location::Remote { executor, .. } => Some(executor.clone()),
        Location::Local(_) | Location::Standard => None,
    };
    let mut source_executor: Option<Option<String>> = None;
    for source in sources {
        match source {
            Location::Standard if destination_executor.is_none() => {
                bail!("- is standard input here; the other side must be on the executor (:/path)")
            }
            Location::Local(path) if destination_executor.is_none() => bail!(
                "{}: both sides are here; copy with cp, or write the executor's side as :/path",
                path.display()
            ),
            Location::Remote { executor: named, .. } => {
                if source_executor.as_ref().is_some_and(|seen| seen != named) {
                    bail!("the sources name different executors; copy from one at a time");
                }
                source_executor = Some(named.clone());
            }
            Location::Standard | Location::Local(_) => {}
        }
    }
    let here = sources.iter().any(|source| !matches!(source, Location::Remote { .. }));
    if source_executor.is_some() && here {
        bail!("the sources are here and on an executor; copy from one side at a time");
    }
    Ok(Executors { source: source_executor, destination: destination_executor })
}

/// How an executor is named where two are: its name, or `--url`'s.
fn executor_name(args: &CpArgs, named: Option<&str>) -> String {
    named.or(args.url.as_deref()).unwrap_or("the executor").to_owned()
}

/// A local path as the copy uses it (absolute) and as the person wrote it, for what is said.
fn here_path(path: &Path) -> anyhow::Result<TreePath> {
    let absolute = std::path::absolute(path)
        .with_context(|| format!("{}: cannot make it an absolute path", path.display()))?;
    Ok(TreePath::new(absolute).shown_as(path))
}

/// What the copy could not keep, in a line each, once it is over; an error if something was
/// not copied.
fn say_what_was_not_kept(report: &CopyReport) -> anyhow::Result<()> {
    let metadata = report.metadata_not_kept;
    let (skipped, followed) = (report.links_skipped, report.links_followed);
    if metadata > 0 || skipped > 0 || followed > 0 {
        let links = match (skipped, followed) {
            (_, 0) => format!("{skipped} symbolic links were skipped"),
            (0, _) => format!("{followed} symbolic links were copied as what they point to"),
            _ => format!(
                "{skipped} symbolic links were skipped and {followed} copied as what they point to"
            ),
        };
        eprintln!(
            "tether cp: the server cannot set modes, times or links (it lacks Tether's fsMetadata): {metadata} entries kept only their bytes, {links}"
        );
    }
    if report.special > 0 {
        eprintln!(
            "tether cp: {} FIFOs, sockets or devices in the tree were skipped: a copy carries files, directories and links",
            report.special
        );
    }
    if report.denied > 0 {
        bail!(
            "{} files or directories could not be read (permission denied) and were skipped, each named above; the rest was copied: make them readable and copy again",
            report.denied
        );
    }
    Ok(())
}

/// The progress bar, and a line for each entry skipped (above the bar).
struct Progress(ProgressBar);

impl Observer for Progress {
    fn found(&self, bytes: u64) {
        self.0.inc_length(bytes);
    }

    fn copied(&self, bytes: u64) {
        self.0.inc(bytes);
    }

    fn dropped(&self, bytes: u64) {
        self.0.dec_length(bytes);
    }

    fn skipped(&self, why: &CopyError) {
        self.0.suspend(|| eprintln!("tether cp: {why}; skipped"));
    }
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

/// An error from the executor about `path`, in one line.
fn remote(path: &Path, error: FsError) -> anyhow::Error {
    anyhow::anyhow!("{} on the executor: {}", path.display(), error.message)
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
