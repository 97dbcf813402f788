//! One file or link copied: a small file in one call each way where the destination puts a
//! whole file in place itself (`fs/readFile`, `fs/putFile`); any other file streamed in
//! blocks (`read_file_stream`, `write_file_stream`) to a temporary name beside its final one,
//! given its mode and time, and renamed into place; a link made under a temporary name and
//! renamed so too. A destination without `fsMetadata` gets the bytes under the temporary name
//! and a copy to the final one (not atomic, but never of a partial file).

use std::path::Path;

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _, TryStreamExt as _, stream};
use tether_engine::fs::FsErrorKind;
use tether_protocol::ByteChunk;
use tether_protocol::fs::{
    FsCopyParams, FsCreateSymlinkParams, FsPutFileParams, FsReadFileParams, FsReadLinkParams,
    FsRenameParams, FsSetMetadataParams,
};

use crate::copier::TreeCopy;
use crate::entry::Kind;
use crate::error::CopyError;
use crate::limits::WHOLE_FILE_MAX_BYTES;
use crate::report::Tally;
use crate::shown::Shown;
use crate::side::uri;
use crate::stages::{remove_file, staged_path};
use crate::walk::Job;

impl TreeCopy<'_> {
    /// Copies one file or link, then lets go of its directory. One in a tree that the source
    /// may not read is skipped.
    pub(crate) async fn copy_job(&self, job: Job) -> Result<(), CopyError> {
        let copied = self.copy_entry(&job).await;
        let Job { directory, entry, in_tree, .. } = job;
        match copied {
            Err(denied @ CopyError::Denied(_)) if in_tree => {
                self.observer.dropped(entry.size());
                self.skipped(denied);
            }
            copied => copied?,
        }
        self.finish(Some(directory)).await
    }

    async fn copy_entry(&self, job: &Job) -> Result<(), CopyError> {
        let source = self.from.shown(&job.source_shown);
        let dest = self.to.shown(&job.dest_shown);
        match job.entry.kind {
            Kind::File { size } => self.copy_file(job, size, &source, &dest).await,
            Kind::Link => self.copy_link(job, &source, &dest).await,
            // Directories are walked, and the rest skipped, before anything is queued.
            Kind::Directory | Kind::Special => Ok(()),
        }
    }

    async fn copy_file(
        &self,
        job: &Job,
        size: u64,
        source: &Shown,
        dest: &Shown,
    ) -> Result<(), CopyError> {
        let (mode, modified_ms) = (job.entry.mode, job.entry.modified_ms);
        let blocks = if size <= WHOLE_FILE_MAX_BYTES {
            let params = FsReadFileParams {
                path: uri(&job.source)?,
                follow_symlinks: None,
                sandbox: None,
                attach_data: None,
            };
            let read = self.from.fs.read_file(params).await;
            let bytes = read.map_err(|error| CopyError::reading(source.clone(), error))?;
            let bytes = bytes.data_base64.into_bytes();
            if self.to.keeps_metadata() && bytes.len() as u64 <= WHOLE_FILE_MAX_BYTES {
                let len = bytes.len() as u64;
                let params = FsPutFileParams {
                    path: uri(&job.dest)?,
                    data_base64: ByteChunk::new(bytes),
                    mode,
                    modified_at_ms: modified_ms,
                    sandbox: None,
                };
                let put = self.to.fs.put_file(params).await;
                put.map_err(|error| CopyError::fs(dest.clone(), error))?;
                self.copied(len);
                Tally::add(&self.tally.files, 1);
                return Ok(());
            }
            stream::once(std::future::ready(Ok(bytes))).boxed()
        } else {
            let blocks = self.from.fs.read_file_stream(uri(&job.source)?, None).await;
            let blocks = blocks.map_err(|error| CopyError::reading(source.clone(), error))?;
            let source = source.clone();
            blocks.map_err(move |error| CopyError::reading(source.clone(), error)).boxed()
        };
        let staged = staged_path(&job.dest);
        self.staging(&staged, async {
            self.write_staged(&staged, dest, blocks).await?;
            self.set_metadata(&staged, dest, mode, modified_ms).await?;
            self.place(&staged, &job.dest, dest).await
        })
        .await?;
        Tally::add(&self.tally.files, 1);
        Ok(())
    }

    async fn copy_link(&self, job: &Job, source: &Shown, dest: &Shown) -> Result<(), CopyError> {
        if !self.to.keeps_metadata() {
            Tally::add(&self.tally.links_skipped, 1);
            return Ok(());
        }
        let params = FsReadLinkParams { path: uri(&job.source)?, sandbox: None };
        let target = match self.from.fs.read_link(params).await {
            Ok(link) => link.target,
            // Removed since the listing: not copied.
            Err(error) if error.kind == FsErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(CopyError::reading(source.clone(), error)),
        };
        let staged = staged_path(&job.dest);
        self.staging(&staged, async {
            let params = FsCreateSymlinkParams { path: uri(&staged)?, target, sandbox: None };
            let made = self.to.fs.create_symlink(params).await;
            made.map_err(|error| CopyError::fs(dest.clone(), error))?;
            // A link's mode is not its own; its time is.
            self.set_metadata(&staged, dest, None, job.entry.modified_ms).await?;
            self.place(&staged, &job.dest, dest).await
        })
        .await?;
        Tally::add(&self.tally.links, 1);
        Ok(())
    }

    /// Runs `work`, which writes `staged` on the destination and puts it in place, with the
    /// stage noted for as long as it may be left behind, and removed if `work` fails.
    pub(crate) async fn staging(
        &self,
        staged: &Path,
        work: impl Future<Output = Result<(), CopyError>>,
    ) -> Result<(), CopyError> {
        self.stages.note(staged);
        let placed = work.await;
        if placed.is_err() {
            remove_file(self.to.fs, staged).await;
        }
        self.stages.done(staged);
        placed
    }

    /// Writes `blocks` to `staged` on the destination, which it makes or truncates.
    pub(crate) async fn write_staged(
        &self,
        staged: &Path,
        dest: &Shown,
        mut blocks: impl Stream<Item = Result<Bytes, CopyError>> + Unpin,
    ) -> Result<(), CopyError> {
        let failed = |error| CopyError::fs(dest.clone(), error);
        let mut writer = self.to.fs.write_file_stream(uri(staged)?, None).await.map_err(failed)?;
        while let Some(block) = blocks.next().await {
            let block = block?;
            let len = block.len() as u64;
            writer.write(block).await.map_err(failed)?;
            self.copied(len);
        }
        writer.finish().await.map_err(failed)
    }

    /// Gives `path` on the destination `mode` and `modified_ms` where it keeps them; counts
    /// what it could not keep otherwise.
    pub(crate) async fn set_metadata(
        &self,
        path: &Path,
        shown: &Shown,
        mode: Option<u32>,
        modified_ms: Option<i64>,
    ) -> Result<(), CopyError> {
        if mode.is_none() && modified_ms.is_none() {
            return Ok(());
        }
        if !self.to.keeps_metadata() {
            Tally::add(&self.tally.metadata_not_kept, 1);
            return Ok(());
        }
        let params = FsSetMetadataParams {
            path: uri(path)?,
            mode,
            modified_at_ms: modified_ms,
            sandbox: None,
        };
        let set = self.to.fs.set_metadata(params).await;
        set.map_err(|error| CopyError::fs(shown.clone(), error))
    }

    /// Moves a whole staged file to its final name: a rename where the destination can, else a
    /// copy there (not atomic, but never of a partial file) and the stage removed.
    pub(crate) async fn place(
        &self,
        staged: &Path,
        dest: &Path,
        shown: &Shown,
    ) -> Result<(), CopyError> {
        let (from, to) = (uri(staged)?, uri(dest)?);
        let failed = |error| CopyError::fs(shown.clone(), error);
        if self.to.keeps_metadata() {
            let params = FsRenameParams { source_path: from, destination_path: to, sandbox: None };
            return self.to.fs.rename(params).await.map_err(failed);
        }
        let params = FsCopyParams {
            source_path: from,
            destination_path: to,
            recursive: false,
            sandbox: None,
        };
        self.to.fs.copy(params).await.map_err(failed)?;
        remove_file(self.to.fs, staged).await;
        Ok(())
    }

    pub(crate) fn copied(&self, bytes: u64) {
        Tally::add(&self.tally.bytes, bytes);
        self.observer.copied(bytes);
    }
}
