//! Open files of one connection: `fs/open`, `fs/readBlock`, `fs/writeBlock`, `fs/close`.
//!
//! They let a client stream a file of any size in bounded blocks. Reads and writes are
//! positional (`pread`/`pwrite`): no cursor is shared, so a retried block reads or writes the
//! same bytes, and the blocks of one handle may come in any order. A handle holds the file it
//! opened, not its path: reading goes on from that file if the path is replaced or removed.
//!
//! A file opened for writing under a staged name (`tether cp`'s `.NAME.tether-PID-N`) is a
//! stage its connection holds past the handle's close, until it leaves that name; one still
//! there when the connection ends is removed with it (see [`super::stage`]).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::AsFd as _;
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
use super::request::{Admission, Work, admit, native_path};
use super::sandboxed::{FileOp, OpenHow};
use super::stage::{self, ConnectionStages, Stage};

/// Stages one connection may hold between their making and their placing: as many as it may
/// have open handles, since a stage is held from its `fs/open` until its rename, which
/// follows its handle's close by a round trip or two (`tether cp` keeps 16 in flight). A
/// connection past it has stages it never placed, and is refused more until it places or
/// removes some.
const MAX_STAGES_PER_CONNECTION: usize = FS_MAX_OPEN_HANDLES;

/// The files one connection has open, by the client's handle ids. Dropping it closes them all,
/// which is what ending the connection does.
#[derive(Debug, Default)]
pub struct FileHandles {
    open: HashMap<String, OpenFile>,
    stages: ConnectionStages,
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
        let staged = path.file_name().is_some_and(stage::is_staged_name);
        let file = match (mode, admission) {
            (FsOpenMode::Replace, Admission::InProcess) if staged => {
                self.make_room_for_a_stage().await?;
                let (file, stage) = blocking(move || open_stage(&path)).await?;
                if let Some(stage) = stage {
                    self.stages.push(stage);
                }
                file
            }
            (FsOpenMode::Replace, admission) if staged => {
                // Made in the sandbox, held here where this side's path leads to the same
                // file, so that no sweep takes it for dead; not swept from here, where the
                // sandbox's confinement would not apply.
                self.make_room_for_a_stage().await?;
                let op = FileOp::Open { path: path.clone(), how: OpenHow::Replace };
                let file: File = admission.perform(op).await?;
                let file = Arc::new(file);
                let held = Arc::clone(&file);
                if let Ok(Some(stage)) = blocking(move || hold_made_elsewhere(&path, &held)).await {
                    self.stages.push(stage);
                }
                self.open.insert(id.clone(), OpenFile { file });
                return Ok(FsOpenResponse { handle_id: id });
            }
            (mode, admission) => {
                let how = match mode {
                    FsOpenMode::Read => OpenHow::Read { follow: true },
                    FsOpenMode::Replace => OpenHow::Replace,
                };
                admission.perform(FileOp::Open { path, how }).await?
            }
        };
        self.open.insert(id.clone(), OpenFile { file: Arc::new(file) });
        Ok(FsOpenResponse { handle_id: id })
    }

    /// Lets go of the stages that have left their names: the client placed or removed them.
    /// Called after the connection renames or removes something, so that a placed file is not
    /// held locked longer than its copy.
    pub async fn release_placed_stages(&mut self) {
        if self.stages.len() == 0 {
            return;
        }
        let stages = self.stages.take_all();
        let kept = tokio::task::spawn_blocking(move || {
            stages.into_iter().filter(Stage::in_place).collect::<Vec<_>>()
        })
        .await;
        self.stages.restore(kept.unwrap_or_default());
    }

    /// Refuses a stage past [`MAX_STAGES_PER_CONNECTION`] once the placed ones are let go.
    async fn make_room_for_a_stage(&mut self) -> Result<(), FsError> {
        if self.stages.len() >= MAX_STAGES_PER_CONNECTION {
            self.release_placed_stages().await;
        }
        if self.stages.len() >= MAX_STAGES_PER_CONNECTION {
            return Err(FsError::invalid_input(format!(
                "at most {MAX_STAGES_PER_CONNECTION} staged files may wait to be renamed into \
                 place per connection: rename or remove one first"
            )));
        }
        Ok(())
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

/// Creates or truncates the staged file `path` for writing, as `replace` does (a link at its
/// name written through), after sweeping its directory of dead stages; and holds it as a stage
/// when its name leads to it (not through a link). A directory that cannot be opened is one
/// no stage can be held in: the file is opened as any other.
pub(super) fn open_stage(path: &std::path::Path) -> io::Result<(File, Option<Stage>)> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok((super::regular_file::open_for_write(path, true)?, None));
    };
    let Ok(directory) = stage::open_directory(parent) else {
        return Ok((super::regular_file::open_for_write(path, true)?, None));
    };
    stage::sweep(directory.as_fd());
    let mut attempt = 1;
    loop {
        let file = super::regular_file::open_for_write_at(directory.as_fd(), name)?;
        match Stage::hold(directory.try_clone()?, name, &file)? {
            Some(stage) => return Ok((file, Some(stage))),
            None if attempt < stage::STAGE_ATTEMPTS => attempt += 1,
            None => return Ok((file, None)),
        }
    }
}

/// Holds the staged file `path`, opened as `file` somewhere else (a sandbox), where this
/// side's `path` leads to that very file; `None` where it does not.
fn hold_made_elsewhere(path: &std::path::Path, file: &File) -> io::Result<Option<Stage>> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return Ok(None) };
    Stage::hold(stage::open_directory(parent)?, name, file)
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
