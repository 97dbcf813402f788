//! Streamed file reads: a file of any size, block by block, without holding it whole.
//!
//! Locally the blocks are positional reads of one open file on the blocking pool; a remote
//! implementation reads them with `fs/open`, `fs/readBlock` and `fs/close`. Either way the file
//! is the one opened at the start: replacing or removing its path meanwhile changes nothing.

use std::fs::File;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::{Stream, stream};
use tether_protocol::fs::FS_BLOCK_MAX_BYTES;

use super::FsError;
use super::blocking::blocking;
use super::handles::read_at;

/// A file's contents as non-empty blocks of at most [`FS_BLOCK_MAX_BYTES`], in order. Ends
/// after the last block, or after the first error.
pub struct FileReadStream {
    inner: Pin<Box<dyn Stream<Item = Result<Bytes, FsError>> + Send>>,
    finished: bool,
}

impl FileReadStream {
    /// Wraps any stream of blocks; empty blocks are dropped.
    pub fn new(inner: impl Stream<Item = Result<Bytes, FsError>> + Send + 'static) -> Self {
        Self { inner: Box::pin(inner), finished: false }
    }
}

impl Stream for FileReadStream {
    type Item = Result<Bytes, FsError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        loop {
            match this.inner.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(block))) if block.is_empty() => continue,
                Poll::Ready(Some(Ok(block))) => return Poll::Ready(Some(Ok(block))),
                Poll::Ready(Some(Err(error))) => {
                    this.finished = true;
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(None) => {
                    this.finished = true;
                    return Poll::Ready(None);
                }
            }
        }
    }
}

impl std::fmt::Debug for FileReadStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileReadStream").field("finished", &self.finished).finish_non_exhaustive()
    }
}

/// Reads an open file in blocks, from its start.
pub(crate) fn blocks_of(file: File) -> FileReadStream {
    let file = Arc::new(file);
    // The state is where the next block starts, or `None` once a short block said the file
    // ended.
    let blocks = stream::unfold(Some(0u64), move |offset| {
        let file: Arc<File> = file.clone();
        async move {
            let offset = offset?;
            let read = blocking(move || read_at(&file, offset, FS_BLOCK_MAX_BYTES)).await;
            match read {
                Ok(block) if block.is_empty() => None,
                Ok(block) => {
                    let next = (block.len() == FS_BLOCK_MAX_BYTES)
                        .then(|| offset + FS_BLOCK_MAX_BYTES as u64);
                    Some((Ok(Bytes::from(block)), next))
                }
                Err(error) => Some((Err(error), None)),
            }
        }
    });
    FileReadStream::new(blocks)
}
