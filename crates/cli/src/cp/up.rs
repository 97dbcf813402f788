//! Copies up: files and trees from here to the executor.

use std::path::Path;
use std::sync::atomic::Ordering;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use tether_engine::fs::{FileSystem as _, FsErrorKind};
use tether_protocol::ByteChunk;
use tether_protocol::fs::{
    FsCopyParams, FsCreateDirectoryParams, FsCreateSymlinkParams, FsGetMetadataParams,
    FsPutFileParams, FsRemoveParams, FsRenameParams, FsSetMetadataParams,
};

use super::local::local_tree;
use super::{
    Copier, Entry, FILES_IN_FLIGHT, Kind, Landing, UPLOAD_CHUNK_BYTES, WHOLE_FILE_MAX_BYTES,
    landing, remote, temporary, under, uri,
};

impl Copier<'_> {
    /// Copies `from` here to `to` on the executor, as scp does: into `to` under its own name
    /// when `to` is a directory there (which it must be for `several` sources), else as `to`.
    /// The directories are made first, the files and links then sixteen at a time, and the
    /// directories' modes and times set last.
    pub(super) async fn upload(
        &self,
        from: &Path,
        to: &Path,
        several: bool,
        recursive: bool,
    ) -> anyhow::Result<()> {
        let entries = local_tree(from, recursive)?;
        let root_is_directory = matches!(entries[0].kind, Kind::Directory);
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
}

/// The next block of `file` from where it stands, up to [`UPLOAD_CHUNK_BYTES`]; empty at the
/// end. Read straight into the block's own buffer, never through a copy.
fn read_block(file: &std::fs::File) -> std::io::Result<Bytes> {
    use std::io::Read as _;
    let mut block = Vec::with_capacity(UPLOAD_CHUNK_BYTES);
    file.take(UPLOAD_CHUNK_BYTES as u64).read_to_end(&mut block)?;
    Ok(Bytes::from(block))
}
