//! Copies down: files and trees from the executor to here. A tree is walked depth first, one
//! listing per directory, while its files are copied sixteen at a time: the walk holds only
//! the listings of the directories it is inside ([`super::limits`]), and everything here is
//! made relative to a directory held open ([`super::local_write`]).

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::{Context as _, bail};
use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use tether_engine::fs::{FileSystem as _, FsErrorKind, piecewise};
use tether_protocol::fs::{
    FsGetMetadataParams, FsReadDirectoryEntry, FsReadDirectoryParams, FsReadFileParams,
    FsReadLinkParams,
};
use tokio::sync::mpsc;

use super::limits::{Budget, check_depth};
use super::local_write::{
    Staged, check_local_parent, create_staged, create_staged_link, make_directory,
    open_named_directory, place_staged, set_directory_metadata,
};
use super::{
    Copier, Entry, Kind, LOOKUPS_IN_FLIGHT, Landing, WHOLE_FILE_MAX_BYTES, base_name, landing,
    remote, staged_name, uri, walk_beside_copies,
};

/// A directory here that a copy writes into, held open, with the mode and time it takes once
/// everything in it is copied: when the last of its files, and of the directories below it,
/// lets go of it ([`finish`]).
struct Directory {
    here: OwnedFd,
    /// Its path here, for what is said about it.
    shown: PathBuf,
    /// Its path on the executor.
    there: PathBuf,
    mode: Option<u32>,
    modified_ms: Option<i64>,
    /// Given its mode and time only after this one is.
    parent: Option<Arc<Directory>>,
}

/// A file or link to copy into `directory`, from `source` on the executor.
struct Job {
    directory: Arc<Directory>,
    source: PathBuf,
    entry: Entry,
}

impl Copier<'_> {
    /// Copies `from` on the executor to `to` here, as [`Copier::upload`] copies the other
    /// way.
    pub(super) async fn download(
        &self,
        from: &Path,
        to: &Path,
        several: bool,
        recursive: bool,
    ) -> anyhow::Result<()> {
        let root = self.remote_entry(from, base_name(from).unwrap_or(OsStr::new(""))).await?;
        let root = root.with_context(|| {
            format!("{} on the executor: no such file or directory", from.display())
        })?;
        let root_is_directory = matches!(root.kind, Kind::Directory);
        if root_is_directory && !recursive {
            bail!("{} on the executor is a directory; copy it with -r", from.display());
        }
        let (from_name, to_name) =
            (format!("{} on the executor", from.display()), to.display().to_string());
        let found = std::fs::metadata(to).ok().map(|found| found.is_dir());
        let target =
            match landing((from, &from_name), (to, &to_name), found, root_is_directory, several)? {
                Landing::At(target) => target,
                Landing::NewFile(target) => {
                    check_local_parent(&target)?;
                    target
                }
            };
        let name = base_name(&target)?.to_owned();
        let parent = target.parent().unwrap_or(Path::new(""));
        if root_is_directory && !parent.as_os_str().is_empty() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot make the directory {}", parent.display()))?;
        }
        // The directory the copy lands in, as named: given no mode or time of its own.
        let landing = Arc::new(Directory {
            here: open_named_directory(parent)?,
            shown: parent.to_owned(),
            there: from.parent().unwrap_or(Path::new("/")).to_owned(),
            mode: None,
            modified_ms: None,
            parent: None,
        });
        let entry = Entry { name, ..root };
        if !root_is_directory {
            self.progress.inc_length(size(&entry));
            let job = Job { directory: landing, source: from.to_owned(), entry };
            return self.download_one(job).await;
        }
        walk_beside_copies(
            |jobs| self.walk_down(landing, from, entry, jobs),
            |job| self.download_one(job),
        )
        .await
    }

    /// Walks the tree `root` at `from` on the executor, depth first, making each directory in
    /// `landing` before listing it and handing its files and links to `jobs`.
    async fn walk_down(
        &self,
        landing: Arc<Directory>,
        from: &Path,
        root: Entry,
        jobs: mpsc::Sender<Job>,
    ) -> anyhow::Result<()> {
        let mut budget = Budget::default();
        let mut stack = Vec::new();
        let mut next = Some((landing, from.to_owned(), root));
        loop {
            if let Some((parent, there, entry)) = next.take() {
                let shown = parent.shown.join(&entry.name);
                check_depth(stack.len(), format_args!("{} on the executor", there.display()))?;
                // Listed before it is made here, so that one it may not read is not made.
                let listing = match self.list(&there, &mut budget).await {
                    Ok(listing) => listing,
                    // One directory in the tree this side may not read is not a reason to copy
                    // nothing of it, as with cp -r; the tree's root is.
                    Err(denied) if denied.is::<RemoteDenied>() && !stack.is_empty() => {
                        self.skipped_denied(&denied);
                        continue;
                    }
                    Err(error) => return Err(error),
                };
                let here = make_directory(parent.here.as_fd(), &entry.name, &shown)?;
                let directory = Arc::new(Directory {
                    here,
                    shown,
                    there,
                    mode: entry.mode,
                    modified_ms: entry.modified_ms,
                    parent: Some(parent),
                });
                stack.push((directory, listing.into_iter()));
            }
            let Some((directory, pending)) = stack.last_mut() else { return Ok(()) };
            let Some(entry) = pending.next() else {
                let (directory, _) = stack.pop().expect("a directory being walked");
                finish(directory)?;
                continue;
            };
            let source = directory.there.join(&entry.name);
            if matches!(entry.kind, Kind::Directory) {
                next = Some((directory.clone(), source, entry));
                continue;
            }
            self.progress.inc_length(size(&entry));
            let job = Job { directory: directory.clone(), source, entry };
            if jobs.send(job).await.is_err() {
                // The copies stopped on an error, which is the one to report.
                return Ok(());
            }
        }
    }

    /// Copies one file or link into place, then lets go of its directory.
    async fn download_one(&self, job: Job) -> anyhow::Result<()> {
        let Job { directory, source, entry } = job;
        let shown = directory.shown.join(&entry.name);
        let staged = staged_name(&entry.name);
        let here = directory.here.as_fd();
        let metadata = (entry.mode, entry.modified_ms);
        let noted = self.stages.local(here, &staged);
        let copied = self.download_into(here, &source, &staged, &shown, &entry, metadata).await;
        if noted {
            self.stages.local_done(&staged);
        }
        match copied {
            // A file in a tree that the executor may not read is skipped; one named on the
            // command line (in the landing directory, which has no parent) is the copy's error.
            Err(denied) if denied.is::<RemoteDenied>() && directory.parent.is_some() => {
                self.progress.dec_length(size(&entry));
                self.skipped_denied(&denied);
            }
            copied => copied?,
        }
        finish(directory)
    }

    /// Copies one file or link to `staged` in `here`, then puts it in place.
    async fn download_into(
        &self,
        here: BorrowedFd<'_>,
        source: &Path,
        staged: &OsStr,
        shown: &Path,
        entry: &Entry,
        metadata: (Option<u32>, Option<i64>),
    ) -> anyhow::Result<()> {
        let (source, staged, shown) = (source.to_owned(), staged.to_owned(), shown.to_owned());
        match entry.kind {
            Kind::File { size } if size <= WHOLE_FILE_MAX_BYTES => {
                let params = FsReadFileParams {
                    path: uri(&source)?,
                    follow_symlinks: None,
                    sandbox: None,
                    attach_data: None,
                };
                let read =
                    self.client.read_file(params).await.map_err(|e| remote_read(&source, e))?;
                let bytes = read.data_base64.into_bytes();
                let written = create_staged(here, &staged)
                    .and_then(|file| piecewise::write_all(&file, &bytes).map(|()| file))
                    .map(Staged::File)
                    .with_context(|| format!("cannot write {}", shown.display()));
                place_staged(here, (&staged, &entry.name, &shown), written, metadata)?;
                self.progress.inc(bytes.len() as u64);
            }
            Kind::File { .. } => {
                let written = async {
                    let file = create_staged(here, &staged)
                        .with_context(|| format!("cannot write {}", shown.display()))?;
                    self.download_bytes(&source, &file, &shown).await?;
                    Ok(Staged::File(file))
                }
                .await;
                place_staged(here, (&staged, &entry.name, &shown), written, metadata)?;
            }
            Kind::Link => {
                let params = FsReadLinkParams { path: uri(&source)?, sandbox: None };
                let target = match self.client.read_link(params).await {
                    Ok(link) => link.target,
                    // Removed since the listing: not copied.
                    Err(error) if error.kind == FsErrorKind::NotFound => return Ok(()),
                    Err(error) => return Err(remote(&source, error)),
                };
                let written = create_staged_link(here, &staged, &target)
                    .map(|()| Staged::Link)
                    .with_context(|| format!("cannot make the link {}", shown.display()));
                place_staged(here, (&staged, &entry.name, &shown), written, metadata)?;
            }
            Kind::Directory => unreachable!("directories are walked"),
        }
        Ok(())
    }

    /// `tether cp :file -`: the file's bytes to standard output.
    pub(super) async fn download_to_stdout(&self, from: &Path) -> anyhow::Result<()> {
        if self.remote_kind(from).await? == Some(true) {
            bail!(
                "{} on the executor is a directory; standard output takes one file",
                from.display()
            );
        }
        let stdout = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
        self.download_bytes(from, &stdout, Path::new("standard output")).await
    }

    async fn download_bytes(
        &self,
        source: &Path,
        file: &std::fs::File,
        shown: &Path,
    ) -> anyhow::Result<()> {
        let mut blocks = self
            .client
            .read_file_stream(uri(source)?, None)
            .await
            .map_err(|e| remote_read(source, e))?;
        let cannot_write = || format!("cannot write {}", shown.display());
        let file = Arc::new(file.try_clone().with_context(cannot_write)?);
        while let Some(block) = blocks.next().await {
            let block = block.map_err(|e| remote_read(source, e))?;
            let n = block.len() as u64;
            let file = file.clone();
            tokio::task::spawn_blocking(move || piecewise::write_all(&file, &block))
                .await?
                .with_context(cannot_write)?;
            self.progress.inc(n);
        }
        Ok(())
    }

    /// The entries of the directory `directory` on the executor, sorted by name, counted
    /// against the copy's budget.
    async fn list(&self, directory: &Path, budget: &mut Budget) -> anyhow::Result<Vec<Entry>> {
        let params = FsReadDirectoryParams {
            path: uri(directory)?,
            include_metadata: self.keeps_metadata.then_some(true),
            sandbox: None,
        };
        let listing =
            self.client.read_directory(params).await.map_err(|e| remote_read(directory, e))?;
        budget.listed(
            listing.entries.len(),
            format_args!("{} on the executor", directory.display()),
        )?;
        let mut entries = if self.keeps_metadata {
            listing
                .entries
                .into_iter()
                .map(|entry| listed_entry(directory, entry))
                .collect::<anyhow::Result<Vec<_>>>()?
        } else {
            let mut names = Vec::new();
            for entry in listing.entries {
                names.push(safe_name(directory, &entry.file_name)?);
            }
            let lookups = names.into_iter().map(|name| async move {
                self.remote_entry(&directory.join(&name), name.as_os_str()).await
            });
            let found: Vec<Option<Entry>> =
                stream::iter(lookups).buffered(LOOKUPS_IN_FLIGHT).try_collect().await?;
            // Something removed since the listing is simply not copied.
            found.into_iter().flatten().collect()
        };
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// What `path` on the executor is (`None`: gone), as `name`. Asked following links —
    /// `fs/getMetadata` refuses a link as the last component otherwise — and it says whether
    /// it was one.
    async fn remote_entry(&self, path: &Path, name: &OsStr) -> anyhow::Result<Option<Entry>> {
        let link =
            || Entry { name: name.to_owned(), kind: Kind::Link, mode: None, modified_ms: None };
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
                    Ok(_) => Ok(Some(link())),
                    Err(error) if error.kind == FsErrorKind::NotFound => Ok(None),
                    Err(error) => Err(remote(path, error)),
                };
            }
            Err(error) if error.kind == FsErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(remote(path, error)),
        };
        let kind = if found.is_symlink && self.keeps_metadata {
            // Its own time is not to be had: the answer is its target's.
            return Ok(Some(link()));
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
            name: name.to_owned(),
            kind,
            mode: found.mode,
            modified_ms: Some(found.modified_at_ms),
        }))
    }
}

/// A file or directory on the executor that the server may not read (its refusal's kind,
/// `permissionDenied`): named on the command line it is the copy's error, as cp's; met in a
/// tree it is said, skipped, and counted, and the copy goes on.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {} on the executor: permission denied", .0.display())]
struct RemoteDenied(PathBuf);

/// A failure to read `path` on the executor: [`RemoteDenied`] where the server refused it,
/// else as [`remote`] says it.
fn remote_read(path: &Path, error: tether_engine::fs::FsError) -> anyhow::Error {
    match error.kind {
        FsErrorKind::PermissionDenied => RemoteDenied(path.to_owned()).into(),
        _ => remote(path, error),
    }
}

/// An entry of a listing that carried each one's own metadata.
fn listed_entry(directory: &Path, entry: FsReadDirectoryEntry) -> anyhow::Result<Entry> {
    let name = safe_name(directory, &entry.file_name)?;
    let Some(own) = entry.metadata else {
        bail!(
            "{} on the executor was listed without its metadata",
            directory.join(&name).display()
        );
    };
    let kind = if own.is_symlink {
        Kind::Link
    } else if entry.is_directory {
        Kind::Directory
    } else if entry.is_file {
        Kind::File { size: own.size }
    } else {
        bail!(
            "{} on the executor is neither a file, a directory nor a link",
            directory.join(&name).display()
        );
    };
    // A link's mode is not its own to keep; its time is.
    let mode = (!own.is_symlink).then_some(own.mode);
    Ok(Entry { name: name.into_os_string(), kind, mode, modified_ms: Some(own.modified_at_ms) })
}

/// The bytes an entry adds to the progress bar.
fn size(entry: &Entry) -> u64 {
    match entry.kind {
        Kind::File { size } => size,
        _ => 0,
    }
}

/// Lets go of `directory`: the last to do so gives it its mode and time, then lets go of its
/// parent in turn, so that each directory's are set once nothing more is written in it.
fn finish(mut directory: Arc<Directory>) -> anyhow::Result<()> {
    while let Some(done) = Arc::into_inner(directory) {
        set_directory_metadata(done.here.as_fd(), (done.mode, done.modified_ms), &done.shown)?;
        let Some(parent) = done.parent else { break };
        directory = parent;
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_names_must_be_one_plain_component() {
        let dir = Path::new("/d");
        assert_eq!(safe_name(dir, "a.txt").unwrap(), PathBuf::from("a.txt"));
        for bad in ["..", ".", "../x", "a/b", "/etc", ""] {
            assert!(safe_name(dir, bad).is_err(), "{bad:?}");
        }
    }
}
