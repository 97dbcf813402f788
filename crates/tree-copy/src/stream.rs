//! A reader's bytes to one file on the destination, and one file's bytes on the source to a
//! writer: `tether cp -` with standard input or output, or a program's own bytes. Both go
//! through the same staging and blocks as a file of a tree.

use bytes::Bytes;
use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use crate::copier::{TreeCopy, TreePath};
use crate::entry;
use crate::error::CopyError;
use crate::landing::Landing;
use crate::side::uri;
use crate::stages::staged_path;

/// How much of a reader is read before it is written: one block's worth, the most one
/// write carries, so that a reader that pauses still has each block sent once it is whole.
const READER_BLOCK_BYTES: usize = tether_protocol::fs::FS_BLOCK_MAX_BYTES;

impl TreeCopy<'_> {
    /// Copies what `reader` (named `reader_name` in messages) gives, to its end, to the file
    /// `to` on the destination: under a temporary name until it is all there, then under `to`.
    /// The source side is not used. `to` must name a file: a reader has no name to copy into
    /// a directory under.
    pub async fn copy_from_reader(
        &self,
        reader: impl AsyncRead + Unpin + Send,
        reader_name: &str,
        to: &TreePath,
    ) -> Result<(), CopyError> {
        let shown = self.to.shown(&to.shown);
        let names_a_directory = to.shown.as_os_str().as_encoded_bytes().ends_with(b"/");
        let is_directory = match entry::metadata(&self.to, &uri(&to.path)?).await {
            Ok(found) => found.is_directory,
            Err(error) if error.kind == tether_engine::fs::FsErrorKind::NotFound => false,
            Err(error) => return Err(CopyError::fs(shown, error)),
        };
        if names_a_directory || is_directory {
            return Err(CopyError::ReaderIntoDirectory(shown, reader_name.to_owned()));
        }
        let landed = Landing { path: to.path.clone(), shown: shown.clone(), new_file: true };
        self.check_parent(&landed).await?;
        let blocks = stream::try_unfold(reader, |mut reader| async move {
            let mut block = Vec::with_capacity(READER_BLOCK_BYTES);
            (&mut reader).take(READER_BLOCK_BYTES as u64).read_to_end(&mut block).await?;
            Ok(if block.is_empty() { None } else { Some((Bytes::from(block), reader)) })
        })
        .map_err(|source| CopyError::Read { what: reader_name.to_owned(), source });
        let staged = staged_path(&to.path);
        self.staging(&staged, async {
            self.write_staged(&staged, &shown, Box::pin(blocks)).await?;
            self.place(&staged, &to.path, &shown).await
        })
        .await
    }

    /// Copies the file `from` on the source to `writer` (named `writer_name` in messages),
    /// block by block, and flushes it. The destination side is not used.
    pub async fn copy_to_writer(
        &self,
        from: &TreePath,
        mut writer: impl AsyncWrite + Unpin + Send,
        writer_name: &str,
    ) -> Result<(), CopyError> {
        let shown = self.from.shown(&from.shown);
        if let Ok(found) = entry::metadata(&self.from, &uri(&from.path)?).await
            && found.is_directory
        {
            return Err(CopyError::DirectoryToWriter(shown, writer_name.to_owned()));
        }
        let opened = self.from.fs.read_file_stream(uri(&from.path)?, None).await;
        let mut blocks = opened.map_err(|error| CopyError::reading(shown.clone(), error))?;
        let failed = |source| CopyError::Write { what: writer_name.to_owned(), source };
        while let Some(block) = blocks.next().await {
            let block = block.map_err(|error| CopyError::reading(shown.clone(), error))?;
            writer.write_all(&block).await.map_err(failed)?;
            self.copied(block.len() as u64);
        }
        writer.flush().await.map_err(failed)
    }
}
