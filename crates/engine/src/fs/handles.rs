//! Open files of one connection: `fs/open`, `fs/readBlock`, `fs/writeBlock`, `fs/close`.
//!
//! They let a client stream a file of any size in bounded blocks. Reads and writes are
//! positional (`pread`/`pwrite`): no cursor is shared, so a retried block reads or writes the
//! same bytes, and the blocks of one handle may come in any order. A handle holds the file it
//! opened, not its path: reading goes on from that file if the path is replaced or removed.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use tether_protocol::ByteChunk;
use tether_protocol::fs::{
    FS_BLOCK_MAX_BYTES, FS_HANDLE_ID_MAX_BYTES, FS_MAX_OPEN_HANDLES, FsCloseParams, FsOpenMode,
    FsOpenParams, FsOpenResponse, FsReadBlockParams, FsReadBlockResponse, FsWriteBlockParams,
};

use super::FsError;
use super::blocking::blocking;
use super::piecewise;
use super::request::{Work, admit, native_path};
use super::sandboxed::{FileOp, OpenHow};

/// The files one connection has open, by the client's handle ids. Dropping it closes them all,
/// which is what ending the connection does.
#[derive(Debug, Default)]
pub struct FileHandles {
    open: HashMap<String, OpenFile>,
}

/// A handle's file. The mode it was opened with is the OS's to enforce: reading a handle
/// opened for writing fails with `Bad file descriptor`, as on the reference.
#[derive(Debug)]
struct OpenFile {
    /// Shared with the blocking task doing a read or write, so the map is never locked while
    /// the disk works.
    file: Arc<File>,
}

impl FileHandles {
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens `path` as `handleId`: a regular file for reading (`read`, the default), or a file
    /// created or truncated for writing (`replace`). The id is checked first (length, then
    /// uniqueness), then the connection's handle count, then the path, as the reference does.
    /// Under a sandbox that confines the open, the file is opened inside it; what the handle
    /// reads or writes later is that file.
    pub async fn open(&mut self, params: FsOpenParams) -> Result<FsOpenResponse, FsError> {
        let mode = params.mode();
        let work = match mode {
            FsOpenMode::Read => Work::Read,
            FsOpenMode::Replace => Work::Write,
        };
        let admission = admit(params.sandbox.as_ref(), work)?;
        let id = params.handle_id;
        check_id(&id)?;
        if self.open.contains_key(&id) {
            return Err(FsError::invalid_input(format!("file handle `{id}` already exists")));
        }
        if self.open.len() >= FS_MAX_OPEN_HANDLES {
            return Err(FsError::invalid_input(format!(
                "at most {FS_MAX_OPEN_HANDLES} file handles may be open per connection"
            )));
        }
        let path = native_path(&params.path)?;
        let how = match mode {
            FsOpenMode::Read => OpenHow::Read { follow: true },
            FsOpenMode::Replace => OpenHow::Replace,
        };
        let op = FileOp::Open { path, how };
        let file: File = admission.perform(op).await?;
        self.open.insert(id.clone(), OpenFile { file: Arc::new(file) });
        Ok(FsOpenResponse { handle_id: id })
    }

    /// Reads up to `len` bytes at `offset`. `eof` means fewer than `len` bytes were there, so
    /// a block that ends exactly at the end of the file is not `eof`; the next one is, and is
    /// empty. A read that fails closes the handle (its file is in an unknown state): later use
    /// is not found.
    ///
    /// The block's `sandbox` is not consulted: the one that mattered was given to `fs/open`,
    /// and the reference ignores it here too.
    pub async fn read_block(
        &mut self,
        params: FsReadBlockParams,
    ) -> Result<FsReadBlockResponse, FsError> {
        check_id(&params.handle_id)?;
        let len = params.len;
        if !(1..=FS_BLOCK_MAX_BYTES).contains(&len) {
            return Err(FsError::invalid_input(format!(
                "file read block length must be between 1 and {FS_BLOCK_MAX_BYTES}"
            )));
        }
        let file = self.file(&params.handle_id)?;
        let offset = params.offset;
        let read = blocking(move || read_at(&file, offset, len)).await;
        if read.is_err() {
            self.open.remove(&params.handle_id);
        }
        let chunk = read?;
        let eof = chunk.len() < len;
        Ok(FsReadBlockResponse { chunk: ByteChunk::from(chunk), eof })
    }

    /// Writes the whole chunk at `offset`; writing past the end leaves a hole that reads as
    /// zeros. The range must fit the OS's signed 64-bit offsets. A failed write leaves the
    /// handle open, as the reference does.
    pub async fn write_block(&mut self, params: FsWriteBlockParams) -> Result<(), FsError> {
        check_id(&params.handle_id)?;
        let chunk = params.chunk.into_bytes();
        if !(1..=FS_BLOCK_MAX_BYTES).contains(&chunk.len()) {
            return Err(FsError::invalid_input(format!(
                "file write block length must be between 1 and {FS_BLOCK_MAX_BYTES}"
            )));
        }
        let end = params.offset.checked_add(chunk.len() as u64);
        if end.is_none_or(|end| end > i64::MAX as u64) {
            return Err(FsError::invalid_input(
                "file write range exceeds the signed 64-bit file offset limit",
            ));
        }
        let file = self.file(&params.handle_id)?;
        let offset = params.offset;
        blocking(move || piecewise::write_all_at(&file, &chunk, offset)).await
    }

    /// Closes a handle; closing an unknown one is not an error, so a client may close in the
    /// background without tracking whether it already did. An id no handle can have is refused,
    /// as on every handle call.
    pub fn close(&mut self, params: FsCloseParams) -> Result<(), FsError> {
        check_id(&params.handle_id)?;
        self.open.remove(&params.handle_id);
        Ok(())
    }

    fn file(&self, id: &str) -> Result<Arc<File>, FsError> {
        match self.open.get(id) {
            Some(open) => Ok(Arc::clone(&open.file)),
            None => Err(FsError::not_found(format!("unknown file handle `{id}`"))),
        }
    }
}

/// Refuses an id longer than any handle may have, without repeating it (it may be huge).
fn check_id(id: &str) -> Result<(), FsError> {
    if id.len() > FS_HANDLE_ID_MAX_BYTES {
        return Err(FsError::invalid_input(format!(
            "file handle ID must not exceed {FS_HANDLE_ID_MAX_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Up to `len` bytes at `offset`, fewer only at the end of the file.
pub(super) fn read_at(file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buffer = vec![0; len];
    let mut filled = 0;
    while filled < len {
        match file.read_at(&mut buffer[filled..], offset.saturating_add(filled as u64)) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        }
    }
    buffer.truncate(filled);
    Ok(buffer)
}
