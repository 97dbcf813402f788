//! [`LocalFileSystem`]: the filesystem of the machine this process runs on.
//!
//! Each method checks the request (sandbox intent, then what else the reference checks before
//! the path, then the path) and runs the filesystem work on the blocking pool, or in a helper
//! inside the sandbox when the intent confines it ([`sandboxed`]); a `stat` or a small read
//! the kernel answers from memory is done on the calling thread ([`cached_metadata`],
//! [`cached_read`]). The work itself lives in one
//! module per concern: [`regular_file`], [`directory`](super::directory),
//! [`metadata`](super::metadata), [`walk`], [`remove`](super::remove), [`copy`](super::copy),
//! [`set_metadata`](super::set_metadata), [`put_file`](super::put_file); streams in [`stream`] and [`write_stream`].

use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tether_protocol::fs::{
    FS_READ_DIRECTORY_MAX_ENTRIES, FsCanonicalizeParams, FsCanonicalizeResponse, FsCopyParams,
    FsCreateDirectoryParams, FsCreateSymlinkParams, FsGetMetadataParams, FsGetMetadataResponse,
    FsPutFileParams, FsReadDirectoryParams, FsReadDirectoryResponse, FsReadFileParams,
    FsReadFileResponse, FsReadLinkParams, FsReadLinkResponse, FsRemoveParams, FsRenameParams,
    FsSetMetadataParams, FsWalkParams, FsWalkResponse, FsWriteFileParams,
};
use tether_protocol::sandbox::SandboxContext;
use tether_protocol::{ByteChunk, PathUri};

use super::blocking::blocking;
use super::directory::Listing;
use super::handles::open_stage;
use super::request::{Admission, Work, admit, native_path};
use super::sandboxed::{self, FileOp, FromOutcome, OpenHow};
use super::stage::{self, ConnectionStages, Stage};
use super::whole_read::{ReadGrant, WholeReadBudget};
use super::{
    FileReadStream, FileSystem, FileWriteStream, FsError, regular_file, stream, walk, write_stream,
};
use super::{cached_metadata, cached_read};

/// File bytes that whole-file reads (`fs/readFile`) may hold at once, server-wide, by
/// default: read, and then answered until the answer is written. A read peaks at about 2.4
/// times its size (the bytes, their base64, the frame), so this is some 2.5 GiB at most, and
/// the largest file a read takes (512 MiB) fits twice. Past it, reads wait their turn: two
/// dozen concurrent 500 MB reads queue instead of exhausting a 24 GiB machine.
pub const DEFAULT_WHOLE_READ_BUDGET_BYTES: usize = 1024 * 1024 * 1024;

/// The executor's own filesystem.
#[derive(Debug, Clone)]
pub struct LocalFileSystem {
    whole_reads: WholeReadBudget,
    /// The stages its streamed writes made (a staged name, `.NAME.tether-PID-N`, opened by
    /// [`FileSystem::write_file_stream`]), held as a connection holds those of its `fs/open`s:
    /// until each leaves its name. A `put_file` here sweeps its directory of stages nobody
    /// holds, and must not take one still being written, or written and not yet renamed. Let
    /// go of as the next is made; those never placed are removed with the last clone.
    stages: Arc<Mutex<ConnectionStages>>,
}

impl Default for LocalFileSystem {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalFileSystem {
    pub fn new() -> Self {
        Self::with_whole_read_budget(DEFAULT_WHOLE_READ_BUDGET_BYTES)
    }

    /// With `bytes` for whole-file reads in flight (see [`DEFAULT_WHOLE_READ_BUDGET_BYTES`]).
    pub fn with_whole_read_budget(bytes: usize) -> Self {
        Self { whole_reads: WholeReadBudget::new(bytes), stages: Arc::default() }
    }

    /// `fs/readFile`, with the share of the whole-read budget it holds: keep the grant until
    /// the answer has been written, so that answers waiting to go out count too.
    pub async fn read_file_granted(
        &self,
        params: FsReadFileParams,
    ) -> Result<(FsReadFileResponse, ReadGrant), FsError> {
        let (bytes, grant) = self.read_file_onto(params, Vec::new()).await?;
        Ok((FsReadFileResponse { data_base64: ByteChunk::from(bytes) }, grant))
    }

    /// As [`Self::read_file_granted`], the file's bytes read onto the end of `head`: the start
    /// of a binary answer, so that a large file is read straight into its message rather than
    /// copied there once read (a copy of up to the whole read budget into a fresh buffer).
    pub async fn read_file_onto(
        &self,
        params: FsReadFileParams,
        head: Vec<u8>,
    ) -> Result<(Vec<u8>, ReadGrant), FsError> {
        let admission = admit(params.sandbox.as_ref(), Work::Read)?;
        let follow = params.follows_symlinks();
        let path = native_path(&params.path)?;
        Ok(match admission {
            Admission::InProcess => match cached_read::read(&path, &self.whole_reads) {
                // Read here when the kernel has the file in memory (see `cached_read`): a small
                // file, joined to the head.
                Some((bytes, grant)) if head.is_empty() => (bytes, grant),
                Some((bytes, grant)) => ([head, bytes].concat(), grant),
                None => {
                    let open = move || regular_file::open_for_reading(&path, follow);
                    self.whole_reads.read(open, head).await?
                }
            },
            Admission::Sandboxed(policy) => {
                let how = OpenHow::Read { follow };
                let file: File = sandboxed::run(&policy, FileOp::Open { path, how }).await?;
                self.whole_reads.read(move || Ok(file), head).await?
            }
        })
    }
}

/// Runs `op` here, or in the sandbox its intent describes, and answers what it yields.
async fn perform<T: FromOutcome + Send + 'static>(
    sandbox: Option<&SandboxContext>,
    work: Work,
    op: FileOp,
) -> Result<T, FsError> {
    admit(sandbox, work)?.perform(op).await
}

#[async_trait]
impl FileSystem for LocalFileSystem {
    async fn read_file(&self, params: FsReadFileParams) -> Result<FsReadFileResponse, FsError> {
        self.read_file_granted(params).await.map(|(response, _grant)| response)
    }

    async fn write_file(&self, params: FsWriteFileParams) -> Result<(), FsError> {
        let bytes = params.decode_data().map_err(|error| {
            FsError::invalid_input(format!(
                "fs/writeFile requires valid base64 dataBase64: {error}"
            ))
        })?;
        let follow = params.follows_symlinks();
        let path = native_path(&params.path)?;
        let op = FileOp::WriteFile { path, data: bytes, follow };
        perform(params.sandbox.as_ref(), Work::Write, op).await
    }

    async fn create_directory(&self, params: FsCreateDirectoryParams) -> Result<(), FsError> {
        let (recursive, follow) = (params.is_recursive(), params.follows_symlinks());
        let path = native_path(&params.path)?;
        let op = FileOp::CreateDirectory { path, recursive, follow };
        perform(params.sandbox.as_ref(), Work::Write, op).await
    }

    async fn get_metadata(
        &self,
        params: FsGetMetadataParams,
    ) -> Result<FsGetMetadataResponse, FsError> {
        let (follow, include_mode) = (params.follows_symlinks(), params.includes_mode());
        let path = native_path(&params.path)?;
        let admission = admit(params.sandbox.as_ref(), Work::Read)?;
        // Answered here when the kernel has it in memory, without the blocking pool's
        // round trip; the usual way otherwise (see `cached_metadata`).
        let cached = match admission {
            Admission::InProcess => cached_metadata::lookup(&path, follow),
            Admission::Sandboxed(_) => None,
        };
        let mut metadata: FsGetMetadataResponse = match cached {
            Some(metadata) => metadata,
            None => admission.perform(FileOp::Metadata { path, follow }).await?,
        };
        if !include_mode {
            metadata.mode = None;
        }
        Ok(metadata)
    }

    async fn canonicalize(
        &self,
        params: FsCanonicalizeParams,
    ) -> Result<FsCanonicalizeResponse, FsError> {
        let path = native_path(&params.path)?;
        let real: PathBuf =
            perform(params.sandbox.as_ref(), Work::Read, FileOp::Canonicalize { path }).await?;
        let path = PathUri::from_path(&real)
            .ok_or_else(|| FsError::other(format!("`{}` is not absolute", real.display())))?;
        Ok(FsCanonicalizeResponse { path })
    }

    /// Fails (`-32603`) past [`FS_READ_DIRECTORY_MAX_ENTRIES`], with the reference's message,
    /// which says how many entries there were.
    async fn read_directory(
        &self,
        params: FsReadDirectoryParams,
    ) -> Result<FsReadDirectoryResponse, FsError> {
        let path = native_path(&params.path)?;
        let keep = FS_READ_DIRECTORY_MAX_ENTRIES;
        let op = FileOp::ReadDirectory { path, keep, metadata: params.includes_metadata() };
        let listing: Listing = perform(params.sandbox.as_ref(), Work::Read, op).await?;
        if listing.total > FS_READ_DIRECTORY_MAX_ENTRIES {
            return Err(FsError::other(format!(
                "fs/readDirectory returned {} entries; limit is {FS_READ_DIRECTORY_MAX_ENTRIES}",
                listing.total
            )));
        }
        Ok(FsReadDirectoryResponse { entries: listing.entries })
    }

    async fn walk(&self, params: FsWalkParams) -> Result<FsWalkResponse, FsError> {
        walk::validate(&params.options)?;
        let path = native_path(&params.path)?;
        let op = FileOp::Walk { path, options: params.options };
        perform(params.sandbox.as_ref(), Work::Read, op).await
    }

    async fn remove(&self, params: FsRemoveParams) -> Result<(), FsError> {
        let (recursive, force) = (params.is_recursive(), params.is_forced());
        let follow = params.follows_symlinks();
        let path = native_path(&params.path)?;
        let op = FileOp::Remove { path, recursive, force, follow };
        perform(params.sandbox.as_ref(), Work::Write, op).await
    }

    async fn copy(&self, params: FsCopyParams) -> Result<(), FsError> {
        let source = native_path(&params.source_path)?;
        let destination = native_path(&params.destination_path)?;
        let recursive = params.recursive;
        let op = FileOp::Copy { source, destination, recursive };
        perform(params.sandbox.as_ref(), Work::Write, op).await
    }

    async fn read_file_stream(
        &self,
        path: PathUri,
        sandbox: Option<SandboxContext>,
    ) -> Result<FileReadStream, FsError> {
        let path = native_path(&path)?;
        let how = OpenHow::Read { follow: true };
        let file: File = perform(sandbox.as_ref(), Work::Read, FileOp::Open { path, how }).await?;
        Ok(stream::blocks_of(file))
    }

    async fn rename(&self, params: FsRenameParams) -> Result<(), FsError> {
        let source = native_path(&params.source_path)?;
        let destination = native_path(&params.destination_path)?;
        let op = FileOp::Rename { source, destination };
        perform(params.sandbox.as_ref(), Work::Write, op).await
    }

    async fn set_metadata(&self, params: FsSetMetadataParams) -> Result<(), FsError> {
        let path = native_path(&params.path)?;
        let op =
            FileOp::SetMetadata { path, mode: params.mode, modified_at_ms: params.modified_at_ms };
        perform(params.sandbox.as_ref(), Work::Write, op).await
    }

    async fn put_file(&self, params: FsPutFileParams) -> Result<(), FsError> {
        let path = native_path(&params.path)?;
        let (mode, modified_at_ms) = (params.mode, params.modified_at_ms);
        let op = FileOp::PutFile { path, data: params.data_base64, mode, modified_at_ms };
        perform(params.sandbox.as_ref(), Work::Write, op).await
    }

    async fn create_symlink(&self, params: FsCreateSymlinkParams) -> Result<(), FsError> {
        let path = native_path(&params.path)?;
        let op = FileOp::CreateSymlink { path, target: params.target };
        perform(params.sandbox.as_ref(), Work::Write, op).await
    }

    async fn read_link(&self, params: FsReadLinkParams) -> Result<FsReadLinkResponse, FsError> {
        let path = native_path(&params.path)?;
        let op = FileOp::ReadLink { path: path.clone() };
        let target: PathBuf = perform(params.sandbox.as_ref(), Work::Read, op).await?;
        let target = target.into_os_string().into_string().map_err(|_| {
            FsError::invalid_input(format!(
                "the target of symbolic link `{}` is not UTF-8, which JSON text cannot carry",
                path.display()
            ))
        })?;
        Ok(FsReadLinkResponse { target })
    }

    /// The file is opened as `fs/open` in `replace` mode opens it — inside the sandbox when the
    /// intent confines writes, which hands the open file back — and then written here.
    async fn write_file_stream(
        &self,
        path: PathUri,
        sandbox: Option<SandboxContext>,
    ) -> Result<FileWriteStream, FsError> {
        let path = native_path(&path)?;
        let admission = admit(sandbox.as_ref(), Work::Write)?;
        let staged = path.file_name().is_some_and(stage::is_staged_name);
        if !staged || !matches!(admission, Admission::InProcess) {
            let file: File =
                admission.perform(FileOp::Open { path, how: OpenHow::Replace }).await?;
            return Ok(write_stream::blocks_into(file));
        }
        let stages = Arc::clone(&self.stages);
        let file = blocking(move || {
            let (file, stage) = open_stage(&path)?;
            let mut held = stages.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let all = held.take_all();
            held.restore(all.into_iter().filter(Stage::in_place).collect());
            if let Some(stage) = stage {
                held.push(stage);
            }
            Ok(file)
        })
        .await?;
        Ok(write_stream::blocks_into(file))
    }
}
