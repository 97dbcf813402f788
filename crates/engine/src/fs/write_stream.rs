//! Streamed file writes: a file of any size, block by block, without holding it whole.
//!
//! [`FileWriteStream`] keeps the running offset and cuts what it is given into blocks of at
//! most [`FS_BLOCK_MAX_BYTES`]; where the blocks go is a [`BlockWriter`]. Locally that is
//! positional writes of one open file on the blocking pool ([`piecewise`]); a remote
//! implementation writes them with `fs/open {mode: "replace"}`, `fs/writeBlock` and `fs/close`, a few in flight.
//! Either way the file is the one opened at the start: replacing its path meanwhile changes
//! nothing.

use std::fs::File;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tether_protocol::fs::FS_BLOCK_MAX_BYTES;

use super::FsError;
use super::blocking::blocking;
use super::piecewise;

/// Where a [`FileWriteStream`]'s blocks go: one open file, written positionally.
///
/// A writer may keep writes in flight: [`write_block`](Self::write_block) may return before
/// its block is written, and the failure of an earlier block may come back from a later call
/// or from [`finish`](Self::finish) instead. Dropped unfinished, a writer closes its file
/// without waiting (in the background where that takes a round trip).
#[async_trait]
pub trait BlockWriter: Send {
    /// Writes `block` (`1..=FS_BLOCK_MAX_BYTES` bytes) at `offset`.
    async fn write_block(&mut self, offset: u64, block: Bytes) -> Result<(), FsError>;

    /// Waits for every write, then closes the file: the first failure, if any.
    async fn finish(self: Box<Self>) -> Result<(), FsError>;
}

/// A file being written from its start, in order: each [`write`](Self::write) goes after the
/// last. Nothing is known to be written until [`finish`](Self::finish) says so.
pub struct FileWriteStream {
    writer: Box<dyn BlockWriter>,
    /// Where the next byte goes.
    offset: u64,
    /// Why the stream can write no more: a failed block, or a write whose caller stopped
    /// waiting for it (its blocks may or may not have been written). Every later call reports
    /// it, `finish` included, so a stream with a hole never finishes well.
    failed: Option<FsError>,
}

impl FileWriteStream {
    /// Writes through any [`BlockWriter`].
    pub fn new(writer: impl BlockWriter + 'static) -> Self {
        Self { writer: Box::new(writer), offset: 0, failed: None }
    }

    /// Appends `bytes` at the running offset, as blocks of at most [`FS_BLOCK_MAX_BYTES`].
    /// An error here, or an earlier one, ends the stream: later writes fail with it too.
    pub async fn write(&mut self, mut bytes: Bytes) -> Result<(), FsError> {
        if let Some(failed) = &self.failed {
            return Err(failed.clone());
        }
        // Stays if this future is dropped before the loop ends, since what it wrote then is
        // unknown.
        self.failed = Some(FsError::other(
            "a write to this file stream was cancelled before it finished, so what it wrote is \
             unknown",
        ));
        while !bytes.is_empty() {
            let block = bytes.split_to(bytes.len().min(FS_BLOCK_MAX_BYTES));
            let len = block.len() as u64;
            if let Err(error) = self.writer.write_block(self.offset, block).await {
                self.failed = Some(error.clone());
                return Err(error);
            }
            self.offset += len;
        }
        self.failed = None;
        Ok(())
    }

    /// Waits for every write and closes the file. Ok only if every byte given to
    /// [`write`](Self::write) was written; otherwise the first failure (the file is closed
    /// either way).
    pub async fn finish(self) -> Result<(), FsError> {
        let finished = self.writer.finish().await;
        match self.failed {
            Some(failed) => Err(failed),
            None => finished,
        }
    }
}

impl std::fmt::Debug for FileWriteStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWriteStream")
            .field("offset", &self.offset)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

/// Writes an open file positionally, one block at a time on the blocking pool.
pub(crate) fn blocks_into(file: File) -> FileWriteStream {
    FileWriteStream::new(LocalBlocks { file: Some(Arc::new(file)) })
}

struct LocalBlocks {
    /// Shared with the blocking task writing a block; `None` once finished.
    file: Option<Arc<File>>,
}

#[async_trait]
impl BlockWriter for LocalBlocks {
    async fn write_block(&mut self, offset: u64, block: Bytes) -> Result<(), FsError> {
        let file = self.file.clone().expect("a stream writes only until it is finished");
        blocking(move || piecewise::write_all_at(&file, &block, offset)).await
    }

    async fn finish(mut self: Box<Self>) -> Result<(), FsError> {
        // Closing may wait on the disk (or a network filesystem): not on an async thread.
        let file = self.file.take();
        blocking(move || {
            drop(file);
            Ok(())
        })
        .await
    }
}

impl Drop for LocalBlocks {
    fn drop(&mut self) {
        let Some(file) = self.file.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || drop(file))),
            Err(_) => drop(file),
        }
    }
}
