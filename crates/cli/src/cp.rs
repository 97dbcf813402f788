//! `tether cp SRC… DST`: files and directory trees up to an executor or down from one, as
//! `scp -r` and `kubectl cp` copy them. A remote path is written `:/abs/path` (the executor of
//! `--url`) or `NAME:/abs/path` (a named executor), as scp writes `host:path`.
//!
//! The bytes go through the executor's `fs/*` calls: a file bigger than one block streamed
//! in blocks of 1 MiB (never one whole-file message), a smaller one in a single call each way
//! (`fs/putFile` up, `fs/readFile` down), since a tree of small files is otherwise mostly
//! round trips. Every file is written under a temporary name in its directory and renamed into
//! place once whole — by the server itself within `fs/putFile` — so an interrupted copy leaves
//! no half-written file under the final name. A remote tree is listed one directory per call,
//! each entry with its own mode and time (`fs/readDirectory {includeMetadata}`).
//! Modes, modification times and symbolic links are kept where the server can set them (the
//! `fsMetadata` extension); against a server without it, the bytes are copied and the command
//! says what was not kept.

use std::io::IsTerminal as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use clap::Args;
use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use indicatif::{ProgressBar, ProgressStyle};
use tether_client::ExecServerClient;
use tether_engine::fs::{FileSystem as _, FsError, FsErrorKind, piecewise};
use tether_protocol::fs::{
    FsCopyParams, FsCreateDirectoryParams, FsCreateSymlinkParams, FsGetMetadataParams,
    FsPutFileParams, FsReadDirectoryEntry, FsReadDirectoryParams, FsReadFileParams,
    FsReadLinkParams, FsRemoveParams, FsRenameParams, FsSetMetadataParams,
};
use tether_protocol::{ByteChunk, PathUri};

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
executor). A path with a slash before its first colon is local (./a:b).

Exit codes: 0 copied; 1 something was not copied (one line on stderr says what and why).";

#[derive(Args)]
#[command(after_help = CP_HELP)]
pub struct CpArgs {
    /// The executor that `:/path` means: `ws://HOST:PORT`, `wss://HOST:PORT`, or a name.
    #[arg(long, env = "TETHER_URL", value_name = "URL|NAME")]
    url: Option<String>,

    /// Read the exec-server's bearer token from this file (default: TETHER_TOKEN).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,

    /// For `wss://`: trust only this CA certificate (PEM), or the server's own.
    #[arg(long, value_name = "PEM", env = "TETHER_TLS_CA_FILE")]
    tls_ca_file: Option<PathBuf>,

    /// For `wss://`: trust exactly the certificate with this fingerprint.
    #[arg(long, value_name = "SHA256:HEX", env = "TETHER_TLS_FINGERPRINT")]
    tls_fingerprint: Option<tether_client::TlsFingerprint>,

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
    /// On the executor `executor` names (`None`: `--url`'s), at an absolute path.
    Remote {
        executor: Option<String>,
        path: PathBuf,
    },
}

/// Reads a path as scp does: a colon before any slash makes it remote.
fn location(text: &str) -> anyhow::Result<Location> {
    let Some((host, path)) = text.split_once(':') else {
        return Ok(Location::Local(PathBuf::from(text)));
    };
    if host.contains('/') {
        return Ok(Location::Local(PathBuf::from(text)));
    }
    if !path.starts_with('/') {
        bail!("{text}: a path on the executor must be absolute; write {host}:/abs/path");
    }
    let executor = (!host.is_empty()).then(|| host.to_owned());
    Ok(Location::Remote { executor, path: PathBuf::from(path) })
}

/// One thing to copy, relative to the root being copied (`""`: the root itself).
#[derive(Debug, Clone)]
struct Entry {
    relative: PathBuf,
    kind: Kind,
    mode: Option<u32>,
    modified_ms: Option<i64>,
}

#[derive(Debug, Clone)]
enum Kind {
    File { size: u64 },
    Directory,
    Link { target: String },
}

/// What the copy could not keep, said once at the end.
#[derive(Default)]
struct NotKept {
    metadata: AtomicU64,
    links: AtomicU64,
}

async fn run(args: CpArgs) -> anyhow::Result<()> {
    let (destination, sources) = args.paths.split_last().expect("clap: at least two paths");
    let destination = location(destination)?;
    let sources = sources.iter().map(|s| location(s)).collect::<anyhow::Result<Vec<_>>>()?;
    let upload = matches!(destination, Location::Remote { .. });
    let mut executor = match &destination {
        Location::Remote { executor, .. } => executor.clone(),
        Location::Local(_) => None,
    };
    for source in &sources {
        match (source, upload) {
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
    let keeps_metadata = client.tether_extensions().fs_metadata;
    let not_kept = NotKept::default();
    let progress = progress_bar();
    let copy = Copy { client: &client, keeps_metadata, not_kept: &not_kept, progress: &progress };
    let several = sources.len() > 1;
    let result = async {
        for source in &sources {
            match (source, &destination) {
                (Location::Local(from), Location::Remote { path: to, .. }) => {
                    copy.upload(from, to, several, args.recursive).await?
                }
                (Location::Remote { path: from, .. }, Location::Local(to)) => {
                    copy.download(from, to, several, args.recursive).await?
                }
                _ => unreachable!("checked above"),
            }
        }
        anyhow::Ok(())
    }
    .await;
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
    Ok(())
}

async fn connect(args: &CpArgs, named: Option<&str>) -> anyhow::Result<ExecServerClient> {
    let Some(url) = named.or(args.url.as_deref()) else {
        bail!("which executor? give --url (or TETHER_URL), or write the remote path as NAME:/path");
    };
    let executor = crate::executors::resolve(url)?.with_flags(
        args.token_file.clone(),
        args.tls_ca_file.clone(),
        args.tls_fingerprint,
    );
    let options = executor.client_options("tether-cp")?;
    crate::report::connect(&executor.url, options).await
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

/// `relative` under `root`; the empty path is the root itself (no trailing slash, which would
/// make a file's path a directory's).
fn under(root: &Path, relative: &Path) -> PathBuf {
    match relative.as_os_str().is_empty() {
        true => root.to_owned(),
        false => root.join(relative),
    }
}

/// A name for a file being written next to `path`, unique to this run.
fn temporary(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let unique = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.tether-{}-{unique}", std::process::id()))
}

/// The last component of a source, for "copy into this directory".
fn base_name(path: &Path) -> anyhow::Result<&std::ffi::OsStr> {
    path.file_name().with_context(|| format!("{}: has no name to copy under", path.display()))
}

struct Copy<'a> {
    client: &'a ExecServerClient,
    keeps_metadata: bool,
    not_kept: &'a NotKept,
    progress: &'a ProgressBar,
}

impl Copy<'_> {
    // --- up ------------------------------------------------------------------------------

    async fn upload(
        &self,
        from: &Path,
        to: &Path,
        several: bool,
        recursive: bool,
    ) -> anyhow::Result<()> {
        let entries = local_tree(from, recursive)?;
        let root_is_directory = matches!(entries[0].kind, Kind::Directory);
        let target = match self.remote_kind(to).await? {
            Some(true) => to.join(base_name(from)?),
            Some(false) if root_is_directory => bail!(
                "cannot copy the directory {} onto the file {} on the executor",
                from.display(),
                to.display()
            ),
            Some(false) | None if several => {
                bail!("{} on the executor: not a directory (several sources)", to.display())
            }
            _ => to.to_owned(),
        };
        self.add_bytes(&entries);
        for entry in entries.iter().filter(|e| matches!(e.kind, Kind::Directory)) {
            let path = under(&target, &entry.relative);
            let params = FsCreateDirectoryParams {
                path: uri(&path)?,
                recursive: Some(true),
                follow_symlinks: None,
                sandbox: None,
            };
            self.client.create_directory(params).await.map_err(|e| remote(&path, e))?;
        }
        let others = entries.iter().filter(|e| !matches!(e.kind, Kind::Directory));
        stream::iter(others.map(|entry| self.upload_one(from, &target, entry)))
            .buffer_unordered(FILES_IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        // Last, deepest first: adding entries changed each directory's time.
        for entry in entries.iter().rev().filter(|e| matches!(e.kind, Kind::Directory)) {
            self.set_remote_metadata(&under(&target, &entry.relative), entry).await?;
        }
        Ok(())
    }

    /// Whether `path` on the executor is a directory (`None`: nothing there).
    async fn remote_kind(&self, path: &Path) -> anyhow::Result<Option<bool>> {
        let params = FsGetMetadataParams {
            path: uri(path)?,
            follow_symlinks: None,
            include_mode: None,
            sandbox: None,
        };
        match self.client.get_metadata(params).await {
            Ok(found) => Ok(Some(found.is_directory)),
            Err(error) if error.kind == FsErrorKind::NotFound => Ok(None),
            Err(error) => Err(remote(path, error)),
        }
    }

    async fn upload_one(&self, from: &Path, target: &Path, entry: &Entry) -> anyhow::Result<()> {
        let source = under(from, &entry.relative);
        let destination = under(target, &entry.relative);
        if let Kind::File { size } = entry.kind
            && size <= WHOLE_FILE_MAX_BYTES
            && self.keeps_metadata
        {
            return self.put_small(&source, &destination, entry).await;
        }
        let staged = temporary(&destination);
        let written = match &entry.kind {
            Kind::File { .. } => self.upload_bytes(&source, &staged).await,
            Kind::Link { target: link } => {
                if !self.keeps_metadata {
                    self.not_kept.links.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                let params = FsCreateSymlinkParams {
                    path: uri(&staged)?,
                    target: link.clone(),
                    sandbox: None,
                };
                self.client.create_symlink(params).await.map_err(|e| remote(&destination, e))
            }
            Kind::Directory => unreachable!("directories are made first"),
        };
        let placed = match written {
            Ok(()) => match self.set_remote_metadata(&staged, entry).await {
                Ok(()) => self.place_remote(&staged, &destination).await,
                Err(error) => Err(error),
            },
            Err(error) => Err(error),
        };
        if placed.is_err() {
            self.remove_remote(&staged).await;
        }
        placed
    }

    /// A small file in one call: read whole here, and put in place there with its mode and
    /// time (`fs/putFile`, which stages and renames on the server's side).
    async fn put_small(
        &self,
        source: &Path,
        destination: &Path,
        entry: &Entry,
    ) -> anyhow::Result<()> {
        let path = source.to_owned();
        let bytes = tokio::task::spawn_blocking(move || std::fs::read(path))
            .await?
            .with_context(|| format!("cannot read {}", source.display()))?;
        let len = bytes.len() as u64;
        let params = FsPutFileParams {
            path: uri(destination)?,
            data_base64: ByteChunk::from(bytes),
            mode: entry.mode,
            modified_at_ms: entry.modified_ms,
            sandbox: None,
        };
        self.client.put_file(params).await.map_err(|e| remote(destination, e))?;
        self.progress.inc(len);
        Ok(())
    }

    async fn upload_bytes(&self, source: &Path, staged: &Path) -> anyhow::Result<()> {
        let cannot_read = || format!("cannot read {}", source.display());
        let file = std::sync::Arc::new(std::fs::File::open(source).with_context(cannot_read)?);
        let mut writer = self
            .client
            .write_file_stream(uri(staged)?, None)
            .await
            .map_err(|e| remote(staged, e))?;
        loop {
            let file = file.clone();
            let block = tokio::task::spawn_blocking(move || read_block(&file)).await?;
            let block = block.with_context(cannot_read)?;
            if block.is_empty() {
                break;
            }
            let n = block.len() as u64;
            writer.write(block).await.map_err(|e| remote(staged, e))?;
            self.progress.inc(n);
        }
        writer.finish().await.map_err(|e| remote(staged, e))
    }

    async fn set_remote_metadata(&self, path: &Path, entry: &Entry) -> anyhow::Result<()> {
        if !self.keeps_metadata {
            self.not_kept.metadata.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let mode = match entry.kind {
            Kind::Link { .. } => None,
            _ => entry.mode,
        };
        let params = FsSetMetadataParams {
            path: uri(path)?,
            mode,
            modified_at_ms: entry.modified_ms,
            sandbox: None,
        };
        self.client.set_metadata(params).await.map_err(|e| remote(path, e))
    }

    /// Moves a whole staged file to its final name: a rename where the server can, else a copy
    /// on the server (not atomic, but never of a partial upload) and the stage removed.
    async fn place_remote(&self, staged: &Path, destination: &Path) -> anyhow::Result<()> {
        let (from, to) = (uri(staged)?, uri(destination)?);
        if self.keeps_metadata {
            let params = FsRenameParams { source_path: from, destination_path: to, sandbox: None };
            return self.client.rename(params).await.map_err(|e| remote(destination, e));
        }
        let params = FsCopyParams {
            source_path: from,
            destination_path: to,
            recursive: false,
            sandbox: None,
        };
        self.client.copy(params).await.map_err(|e| remote(destination, e))?;
        self.remove_remote(staged).await;
        Ok(())
    }

    async fn remove_remote(&self, path: &Path) {
        if let Ok(path) = uri(path) {
            let params = FsRemoveParams {
                path,
                recursive: Some(false),
                force: Some(true),
                follow_symlinks: Some(false),
                sandbox: None,
            };
            let _ = self.client.remove(params).await;
        }
    }

    // --- down ----------------------------------------------------------------------------

    async fn download(
        &self,
        from: &Path,
        to: &Path,
        several: bool,
        recursive: bool,
    ) -> anyhow::Result<()> {
        let entries = self.remote_tree(from, recursive).await?;
        let root_is_directory = matches!(entries[0].kind, Kind::Directory);
        let target = match std::fs::metadata(to) {
            Ok(found) if found.is_dir() => to.join(base_name(from)?),
            Ok(_) if root_is_directory => bail!(
                "cannot copy the directory {} on the executor onto the file {}",
                from.display(),
                to.display()
            ),
            Ok(_) | Err(_) if several => {
                bail!("{}: not a directory (several sources)", to.display())
            }
            _ => to.to_owned(),
        };
        self.add_bytes(&entries);
        for entry in entries.iter().filter(|e| matches!(e.kind, Kind::Directory)) {
            let path = under(&target, &entry.relative);
            std::fs::create_dir_all(&path)
                .with_context(|| format!("cannot make the directory {}", path.display()))?;
        }
        let others = entries.iter().filter(|e| !matches!(e.kind, Kind::Directory));
        stream::iter(others.map(|entry| self.download_one(from, &target, entry)))
            .buffer_unordered(FILES_IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        for entry in entries.iter().rev().filter(|e| matches!(e.kind, Kind::Directory)) {
            set_local_metadata(&under(&target, &entry.relative), entry)?;
        }
        Ok(())
    }

    async fn download_one(&self, from: &Path, target: &Path, entry: &Entry) -> anyhow::Result<()> {
        let source = under(from, &entry.relative);
        let destination = under(target, &entry.relative);
        let staged = temporary(&destination);
        if let Kind::File { size } = entry.kind
            && size <= WHOLE_FILE_MAX_BYTES
        {
            let params = FsReadFileParams {
                path: uri(&source)?,
                follow_symlinks: None,
                sandbox: None,
                attach_data: None,
            };
            let read = self.client.read_file(params).await.map_err(|e| remote(&source, e))?;
            let bytes = read.data_base64.into_bytes();
            let len = bytes.len() as u64;
            let entry = entry.clone();
            tokio::task::spawn_blocking(move || place_local(&staged, &destination, &bytes, &entry))
                .await??;
            self.progress.inc(len);
            return Ok(());
        }
        let written = match &entry.kind {
            Kind::File { .. } => self.download_bytes(&source, &staged).await,
            Kind::Link { target: link } => std::os::unix::fs::symlink(link, &staged)
                .with_context(|| format!("cannot make the link {}", destination.display())),
            Kind::Directory => unreachable!("directories are made first"),
        };
        place_staged_local(&staged, &destination, entry, written)
    }

    async fn download_bytes(&self, source: &Path, staged: &Path) -> anyhow::Result<()> {
        let mut blocks = self
            .client
            .read_file_stream(uri(source)?, None)
            .await
            .map_err(|e| remote(source, e))?;
        let cannot_write = || format!("cannot write {}", staged.display());
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(staged)
            .with_context(cannot_write)?;
        let file = std::sync::Arc::new(file);
        while let Some(block) = blocks.next().await {
            let block = block.map_err(|e| remote(source, e))?;
            let n = block.len() as u64;
            let file = file.clone();
            tokio::task::spawn_blocking(move || piecewise::write_all(&file, &block))
                .await?
                .with_context(cannot_write)?;
            self.progress.inc(n);
        }
        Ok(())
    }

    /// The tree at `root` on the executor, the root first and each directory before what it
    /// holds.
    async fn remote_tree(&self, root: &Path, recursive: bool) -> anyhow::Result<Vec<Entry>> {
        let first = self.remote_entry(root, PathBuf::new()).await?.with_context(|| {
            format!("{} on the executor: no such file or directory", root.display())
        })?;
        if matches!(first.kind, Kind::Directory) && !recursive {
            bail!("{} on the executor is a directory; copy it with -r", root.display());
        }
        let mut entries = vec![first];
        let mut next = 0;
        while let Some(relative) = next_directory(&entries, &mut next) {
            let directory = under(root, &relative);
            let params = FsReadDirectoryParams {
                path: uri(&directory)?,
                include_metadata: self.keeps_metadata.then_some(true),
                sandbox: None,
            };
            let listing =
                self.client.read_directory(params).await.map_err(|e| remote(&directory, e))?;
            if self.keeps_metadata {
                let found = self.listed_entries(&directory, &relative, listing.entries).await?;
                entries.extend(found);
                continue;
            }
            let mut names = Vec::new();
            for entry in listing.entries {
                names.push(safe_name(&directory, &entry.file_name)?);
            }
            names.sort();
            let lookups = names.into_iter().map(|name| {
                let relative = relative.join(&name);
                async move {
                    let path = under(root, &relative);
                    self.remote_entry(&path, relative).await
                }
            });
            let found: Vec<Option<Entry>> =
                stream::iter(lookups).buffered(LOOKUPS_IN_FLIGHT).try_collect().await?;
            // Something removed since the listing is simply not copied.
            entries.extend(found.into_iter().flatten());
        }
        Ok(entries)
    }

    /// The entries of a listing that carried each one's own metadata, sorted by name; a link's
    /// target is asked for (a few at a time), as the listing does not hold it.
    async fn listed_entries(
        &self,
        directory: &Path,
        relative: &Path,
        listed: Vec<FsReadDirectoryEntry>,
    ) -> anyhow::Result<Vec<Entry>> {
        let mut listed = listed
            .into_iter()
            .map(|entry| Ok((safe_name(directory, &entry.file_name)?, entry)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        let entries = listed.into_iter().map(|(name, entry)| async move {
            let path = directory.join(&name);
            let Some(own) = entry.metadata else {
                bail!("{} on the executor was listed without its metadata", path.display());
            };
            let kind = if own.is_symlink {
                let params = FsReadLinkParams { path: uri(&path)?, sandbox: None };
                match self.client.read_link(params).await {
                    Ok(link) => Kind::Link { target: link.target },
                    // Removed since the listing: not copied.
                    Err(error) if error.kind == FsErrorKind::NotFound => return Ok(None),
                    Err(error) => return Err(remote(&path, error)),
                }
            } else if entry.is_directory {
                Kind::Directory
            } else if entry.is_file {
                Kind::File { size: own.size }
            } else {
                bail!(
                    "{} on the executor is neither a file, a directory nor a link",
                    path.display()
                );
            };
            // A link's mode is not its own to keep; its time is.
            let mode = (!own.is_symlink).then_some(own.mode);
            Ok(Some(Entry {
                relative: relative.join(&name),
                kind,
                mode,
                modified_ms: Some(own.modified_at_ms),
            }))
        });
        let found: Vec<Option<Entry>> =
            stream::iter(entries).buffered(LOOKUPS_IN_FLIGHT).try_collect().await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// What `path` on the executor is (`None`: gone). Asked following links — `fs/getMetadata`
    /// refuses a link as the last component otherwise — and it says whether it was one.
    async fn remote_entry(&self, path: &Path, relative: PathBuf) -> anyhow::Result<Option<Entry>> {
        let params = FsGetMetadataParams {
            path: uri(path)?,
            follow_symlinks: None,
            include_mode: self.keeps_metadata.then_some(true),
            sandbox: None,
        };
        let found = match self.client.get_metadata(params).await {
            Ok(found) => found,
            // A dangling link: kept as a link where the server can say where it points.
            Err(error) if error.kind == FsErrorKind::NotFound && self.keeps_metadata => {
                let params = FsReadLinkParams { path: uri(path)?, sandbox: None };
                return match self.client.read_link(params).await {
                    Ok(link) => Ok(Some(Entry {
                        relative,
                        kind: Kind::Link { target: link.target },
                        mode: None,
                        modified_ms: None,
                    })),
                    Err(error) if error.kind == FsErrorKind::NotFound => Ok(None),
                    Err(error) => Err(remote(path, error)),
                };
            }
            Err(error) if error.kind == FsErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(remote(path, error)),
        };
        let kind = if found.is_symlink && self.keeps_metadata {
            let params = FsReadLinkParams { path: uri(path)?, sandbox: None };
            let link = self.client.read_link(params).await.map_err(|e| remote(path, e))?;
            // Its own time is not to be had: the answer is its target's.
            return Ok(Some(Entry {
                relative,
                kind: Kind::Link { target: link.target },
                mode: None,
                modified_ms: None,
            }));
        } else if found.is_directory {
            Kind::Directory
        } else if found.is_file {
            Kind::File { size: found.size }
        } else {
            bail!("{} on the executor is neither a file, a directory nor a link", path.display());
        };
        if found.is_symlink {
            // Without `fs/readLink`, a link is copied as what it points to.
            self.not_kept.links.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(Entry {
            relative,
            kind,
            mode: found.mode,
            modified_ms: Some(found.modified_at_ms),
        }))
    }

    fn add_bytes(&self, entries: &[Entry]) {
        let bytes: u64 = entries
            .iter()
            .map(|e| match e.kind {
                Kind::File { size } => size,
                _ => 0,
            })
            .sum();
        self.progress.inc_length(bytes);
    }
}

/// A name from a remote listing, refused unless it is one plain component: a server must not
/// make this side write outside the directory being copied into (`../.bashrc`).
fn safe_name(directory: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let path = Path::new(name);
    let mut components = path.components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(_)), None) if !name.contains('/') => Ok(path.to_owned()),
        _ => bail!(
            "{} on the executor lists an entry named {name:?}, which is not a file name; nothing more copied",
            directory.display()
        ),
    }
}

/// The next directory of `entries` from `*next` on, whose listing is still to be read: a tree
/// is listed breadth first by appending each listing to the entries it walks.
fn next_directory(entries: &[Entry], next: &mut usize) -> Option<PathBuf> {
    while let Some(entry) = entries.get(*next) {
        *next += 1;
        if matches!(entry.kind, Kind::Directory) {
            return Some(entry.relative.clone());
        }
    }
    None
}

/// The tree at `root` here, the root first and each directory before what it holds; links
/// are not followed.
fn local_tree(root: &Path, recursive: bool) -> anyhow::Result<Vec<Entry>> {
    let mut entries = vec![local_entry(root, PathBuf::new())?];
    if matches!(entries[0].kind, Kind::Directory) && !recursive {
        bail!("{} is a directory; copy it with -r", root.display());
    }
    let mut next = 0;
    while let Some(relative) = next_directory(&entries, &mut next) {
        let directory = under(root, &relative);
        let mut names = std::fs::read_dir(&directory)
            .with_context(|| format!("cannot list {}", directory.display()))?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("cannot list {}", directory.display()))?;
        names.sort();
        for name in names {
            entries.push(local_entry(&directory.join(&name), relative.join(&name))?);
        }
    }
    Ok(entries)
}

fn local_entry(path: &Path, relative: PathBuf) -> anyhow::Result<Entry> {
    let found = std::fs::symlink_metadata(path).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => {
            anyhow::anyhow!("{}: no such file or directory", path.display())
        }
        _ => anyhow::Error::new(error).context(format!("cannot read {}", path.display())),
    })?;
    let kind = if found.file_type().is_symlink() {
        let target = std::fs::read_link(path)?;
        let target = target
            .to_str()
            .with_context(|| format!("{}: its link target is not UTF-8", path.display()))?;
        Kind::Link { target: target.to_owned() }
    } else if found.is_dir() {
        Kind::Directory
    } else if found.is_file() {
        Kind::File { size: found.len() }
    } else {
        bail!("{} is neither a file, a directory nor a link", path.display());
    };
    let modified_ms = found.mtime() * 1000 + found.mtime_nsec() / 1_000_000;
    Ok(Entry { relative, kind, mode: Some(found.mode() & 0o7777), modified_ms: Some(modified_ms) })
}

/// Gives a file made here the mode and time it had there (a link: its time only).
fn set_local_metadata(path: &Path, entry: &Entry) -> anyhow::Result<()> {
    let context = || format!("cannot set the mode and time of {}", path.display());
    if let (Some(mode), false) = (entry.mode, matches!(entry.kind, Kind::Link { .. })) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(context)?;
    }
    if let Some(ms) = entry.modified_ms {
        let when = if ms >= 0 {
            UNIX_EPOCH + Duration::from_millis(ms as u64)
        } else {
            UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
        };
        set_modified(path, when).with_context(context)?;
    }
    Ok(())
}

/// Sets a path's modification time, not following a final link.
fn set_modified(path: &Path, when: SystemTime) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, CWD, Timespec, Timestamps, UTIME_OMIT, utimensat};
    let since = when.duration_since(UNIX_EPOCH).unwrap_or_default();
    let times = Timestamps {
        last_access: Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT },
        last_modification: Timespec {
            tv_sec: since.as_secs() as i64,
            tv_nsec: since.subsec_nanos().into(),
        },
    };
    utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(std::io::Error::from)
}

/// The next block of `file` from where it stands, up to [`UPLOAD_CHUNK_BYTES`]; empty at the
/// end. Read straight into the block's own buffer, never through a copy.
fn read_block(file: &std::fs::File) -> std::io::Result<Bytes> {
    use std::io::Read as _;
    let mut block = Vec::with_capacity(UPLOAD_CHUNK_BYTES);
    file.take(UPLOAD_CHUNK_BYTES as u64).read_to_end(&mut block)?;
    Ok(Bytes::from(block))
}

/// A small file downloaded whole: written under its temporary name, given its mode and time,
/// renamed into place; the temporary file removed if any of it fails.
fn place_local(
    staged: &Path,
    destination: &Path,
    bytes: &[u8],
    entry: &Entry,
) -> anyhow::Result<()> {
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(staged)
        .and_then(|file| piecewise::write_all(&file, bytes))
        .with_context(|| format!("cannot write {}", staged.display()));
    place_staged_local(staged, destination, entry, written)
}

/// A file or link written here under its temporary name (`written` says whether it was):
/// given its mode and time and renamed into place, or removed if any of it failed.
fn place_staged_local(
    staged: &Path,
    destination: &Path,
    entry: &Entry,
    written: anyhow::Result<()>,
) -> anyhow::Result<()> {
    let placed = written.and_then(|()| set_local_metadata(staged, entry)).and_then(|()| {
        std::fs::rename(staged, destination)
            .with_context(|| format!("cannot write {}", destination.display()))
    });
    if placed.is_err() {
        let _ = std::fs::remove_file(staged);
    }
    placed
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
        assert_eq!(
            location("build:work").unwrap_err().to_string(),
            "build:work: a path on the executor must be absolute; write build:/abs/path"
        );
    }

    #[test]
    fn remote_names_must_be_one_plain_component() {
        let dir = Path::new("/d");
        assert_eq!(safe_name(dir, "a.txt").unwrap(), PathBuf::from("a.txt"));
        for bad in ["..", ".", "../x", "a/b", "/etc", ""] {
            assert!(safe_name(dir, bad).is_err(), "{bad:?}");
        }
    }
}
