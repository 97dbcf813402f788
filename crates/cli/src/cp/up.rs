//! Copies up: files and trees from here to the executor.

use std::fs::File;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use tether_engine::fs::{FileSystem as _, FsErrorKind};
use tether_protocol::ByteChunk;
use tether_protocol::fs::{
    FsCopyParams, FsCreateDirectoryParams, FsCreateSymlinkParams, FsGetMetadataParams,
    FsPutFileParams, FsRenameParams, FsSetMetadataParams,
};
use tokio::sync::mpsc;

use super::limits::{Budget, check_depth};
use super::local_read::{Denied, Opened, SpecialFile, list, open_entry, open_followed};
use super::{
    Copier, Entry, Kind, Landing, UPLOAD_CHUNK_BYTES, WHOLE_FILE_MAX_BYTES, landing, remote,
    staged_name, uri, walk_beside_copies,
};

/// A directory made on the executor, with the mode and time it takes once everything in it is
/// copied: when the last of its files, and of the directories below it, lets go of it
/// ([`Copier::finish_up`]).
struct Directory {
    there: PathBuf,
    entry: Entry,
    /// Given its mode and time only after this one is.
    parent: Option<Arc<Directory>>,
}

/// A directory here being walked: held open, its names still to copy.
struct Level {
    here: OwnedFd,
    shown: PathBuf,
    directory: Arc<Directory>,
    names: std::vec::IntoIter<std::ffi::OsString>,
}

/// A file or link here, opened, to copy to `destination` on the executor.
struct Job {
    /// The directory it goes into, where the copy made it (`None`: one the person named).
    directory: Option<Arc<Directory>>,
    shown: PathBuf,
    destination: PathBuf,
    entry: Entry,
    opened: Opened,
}

impl Copier<'_> {
    /// Copies `from` here to `to` on the executor, as scp does: into `to` under its own name
    /// when `to` is a directory there (which it must be for `several` sources), else as `to`.
    /// A tree is walked depth first, each directory made there before what it holds, while
    /// its files and links are copied sixteen at a time; each directory is given its mode and
    /// time once what it holds is copied.
    pub(super) async fn upload(
        &self,
        from: &Path,
        to: &Path,
        several: bool,
        recursive: bool,
    ) -> anyhow::Result<()> {
        let (mut entry, mut opened) = open_entry(rustix::fs::CWD, from.as_os_str(), from)?;
        // A link named on the command line is what it leads to, as cp takes it without -r.
        if matches!(opened, Opened::Link(_)) && !recursive {
            (entry, opened) = open_followed(from)?;
        }
        let root_is_directory = matches!(entry.kind, Kind::Directory);
        if root_is_directory && !recursive {
            bail!("{} is a directory; copy it with -r", from.display());
        }
        let (from_name, to_name) =
            (from.display().to_string(), format!("{} on the executor", to.display()));
        let found = self.remote_kind(to).await?;
        let target =
            match landing((from, &from_name), (to, &to_name), found, root_is_directory, several)? {
                Landing::At(target) => target,
                Landing::NewFile(target) => {
                    self.check_remote_parent(&target).await?;
                    target
                }
            };
        let Opened::Directory(here) = opened else {
            self.progress.inc_length(size(&entry));
            let job =
                Job { directory: None, shown: from.to_owned(), destination: target, entry, opened };
            return self.upload_one(job).await;
        };
        self.create_remote_directory(&target).await?;
        let directory = Arc::new(Directory { there: target, entry, parent: None });
        walk_beside_copies(
            |jobs| self.walk_up(here, from, directory, jobs),
            |job| self.upload_one(job),
        )
        .await
    }

    /// Walks the tree here whose root `root` is open as `here`, depth first, making each
    /// directory on the executor before what it holds and handing its files and links to
    /// `jobs`.
    async fn walk_up(
        &self,
        here: OwnedFd,
        from: &Path,
        root: Arc<Directory>,
        jobs: mpsc::Sender<Job>,
    ) -> anyhow::Result<()> {
        let mut budget = Budget::default();
        let names = list(here.as_fd(), from, &mut budget)?;
        let mut stack =
            vec![Level { here, shown: from.to_owned(), directory: root, names: names.into_iter() }];
        while let Some(level) = stack.last_mut() {
            let Some(name) = level.names.next() else {
                let level = stack.pop().expect("a directory being walked");
                self.finish_up(Some(level.directory)).await?;
                continue;
            };
            let shown = level.shown.join(&name);
            let destination = level.directory.there.join(&name);
            let parent = level.directory.clone();
            let (entry, opened) = match open_entry(level.here.as_fd(), &name, &shown) {
                Ok(opened) => opened,
                // A FIFO or a socket in a tree is not a reason to copy nothing of it.
                Err(error) if error.downcast_ref::<SpecialFile>().is_some() => {
                    self.not_kept.special.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                // Nor is one file or directory this side may not read, as with cp -r: said
                // now, counted for the end.
                Err(denied) if denied.is::<Denied>() => {
                    self.skipped_denied(&denied);
                    continue;
                }
                Err(error) => return Err(error),
            };
            let Opened::Directory(here) = opened else {
                self.progress.inc_length(size(&entry));
                let job = Job { directory: Some(parent), shown, destination, entry, opened };
                if jobs.send(job).await.is_err() {
                    // The copies stopped on an error, which is the one to report.
                    return Ok(());
                }
                continue;
            };
            check_depth(stack.len(), shown.display())?;
            self.create_remote_directory(&destination).await?;
            let names = list(here.as_fd(), &shown, &mut budget)?;
            let directory = Arc::new(Directory { there: destination, entry, parent: Some(parent) });
            stack.push(Level { here, shown, directory, names: names.into_iter() });
        }
        Ok(())
    }

    /// Lets go of `directory`: the last to do so gives it its mode and time, then lets go of
    /// its parent in turn, so that each directory's are set once nothing more is written in it.
    async fn finish_up(&self, mut directory: Option<Arc<Directory>>) -> anyhow::Result<()> {
        while let Some(done) = directory.and_then(Arc::into_inner) {
            self.set_remote_metadata(&done.there, &done.entry).await?;
            directory = done.parent;
        }
        Ok(())
    }

    async fn create_remote_directory(&self, path: &Path) -> anyhow::Result<()> {
        let params = FsCreateDirectoryParams {
            path: uri(path)?,
            recursive: Some(true),
            follow_symlinks: None,
            sandbox: None,
        };
        self.client.create_directory(params).await.map_err(|e| remote(path, e))
    }

    /// Refuses a new file on the executor whose directory is not there, in those words rather
    /// than as the "No such file or directory" of the first write into it.
    async fn check_remote_parent(&self, path: &Path) -> anyhow::Result<()> {
        let Some(parent) = path.parent() else { return Ok(()) };
        match self.remote_kind(parent).await? {
            Some(true) => Ok(()),
            Some(false) => bail!("{} on the executor is not a directory", parent.display()),
            None => bail!(
                "{} on the executor: no such directory; make it first, or copy into a directory \
                 that exists",
                parent.display()
            ),
        }
    }

    /// Whether `path` on the executor is a directory (`None`: nothing there).
    pub(super) async fn remote_kind(&self, path: &Path) -> anyhow::Result<Option<bool>> {
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

    /// `tether cp - :file`: standard input's bytes, under a temporary name until they are all
    /// there, then under `to` (a file: input has no name to copy into a directory under).
    pub(super) async fn upload_stdin(&self, to: &Path) -> anyhow::Result<()> {
        let names_a_directory = to.as_os_str().as_encoded_bytes().ends_with(b"/");
        if names_a_directory || self.remote_kind(to).await? == Some(true) {
            bail!(
                "{} on the executor is a directory, and standard input has no name to copy under; give the file's path (:/dir/name)",
                to.display()
            );
        }
        self.check_remote_parent(to).await?;
        let stdin = File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
        let staged = temporary(to);
        self.stages.remote(staged.clone());
        let placed = match self.upload_bytes(stdin, Path::new("standard input"), &staged).await {
            Ok(()) => self.place_remote(&staged, to).await,
            Err(error) => Err(error),
        };
        if placed.is_err() {
            self.remove_remote(&staged).await;
        }
        self.stages.remote_done(&staged);
        placed
    }

    /// Copies one file or link, then lets go of its directory.
    async fn upload_one(&self, job: Job) -> anyhow::Result<()> {
        let Job { directory, shown, destination, entry, opened } = job;
        let file = match opened {
            Opened::File(file) if self.keeps_metadata && size(&entry) <= WHOLE_FILE_MAX_BYTES => {
                self.put_small(file, &shown, &destination, &entry).await?;
                return self.finish_up(directory).await;
            }
            Opened::Link(_) if !self.keeps_metadata => {
                self.not_kept.links.fetch_add(1, Ordering::Relaxed);
                return self.finish_up(directory).await;
            }
            opened => opened,
        };
        let staged = temporary(&destination);
        self.stages.remote(staged.clone());
        let written = match file {
            Opened::File(file) => self.upload_bytes(file, &shown, &staged).await,
            Opened::Link(link) => {
                let params =
                    FsCreateSymlinkParams { path: uri(&staged)?, target: link, sandbox: None };
                self.client.create_symlink(params).await.map_err(|e| remote(&destination, e))
            }
            Opened::Directory(_) => unreachable!("directories are walked"),
        };
        let placed = match written {
            Ok(()) => match self.set_remote_metadata(&staged, &entry).await {
                Ok(()) => self.place_remote(&staged, &destination).await,
                Err(error) => Err(error),
            },
            Err(error) => Err(error),
        };
        if placed.is_err() {
            self.remove_remote(&staged).await;
        }
        self.stages.remote_done(&staged);
        placed?;
        self.finish_up(directory).await
    }

    /// A small file in one call: read whole here, and put in place there with its mode and
    /// time (`fs/putFile`, which stages and renames on the server's side).
    async fn put_small(
        &self,
        file: File,
        shown: &Path,
        destination: &Path,
        entry: &Entry,
    ) -> anyhow::Result<()> {
        let bytes = tokio::task::spawn_blocking(move || {
            use std::io::Read as _;
            let mut bytes = Vec::new();
            (&file).read_to_end(&mut bytes).map(|_| bytes)
        })
        .await?
        .with_context(|| format!("cannot read {}", shown.display()))?;
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

    async fn upload_bytes(&self, file: File, shown: &Path, staged: &Path) -> anyhow::Result<()> {
        let cannot_read = || format!("cannot read {}", shown.display());
        let file = Arc::new(file);
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
            Kind::Link => None,
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
        super::remove_remote_file(self.client, path).await;
    }
}

/// A name for a file being written next to `path` on the executor, unique to this run.
fn temporary(path: &Path) -> PathBuf {
    path.with_file_name(staged_name(path.file_name().unwrap_or_default()))
}

/// The bytes an entry adds to the progress bar.
fn size(entry: &Entry) -> u64 {
    match entry.kind {
        Kind::File { size } => size,
        _ => 0,
    }
}

/// The next block of `file` from where it stands, up to [`UPLOAD_CHUNK_BYTES`]; empty at the
/// end. Read straight into the block's own buffer, never through a copy.
fn read_block(file: &std::fs::File) -> std::io::Result<Bytes> {
    use std::io::Read as _;
    let mut block = Vec::with_capacity(UPLOAD_CHUNK_BYTES);
    file.take(UPLOAD_CHUNK_BYTES as u64).read_to_end(&mut block)?;
    Ok(Bytes::from(block))
}
