//! [`LocalFileSystem`]: the filesystem of the machine this process runs on.
//!
//! Each method checks the request (sandbox intent, then what else the reference checks before
//! the path, then the path) and runs the filesystem work on the blocking pool. The work itself
//! lives in one module per concern: [`regular_file`], [`directory`], [`metadata`], [`walk`],
//! [`remove`], [`copy`].

use async_trait::async_trait;
use tether_protocol::fs::{
    FS_READ_DIRECTORY_MAX_ENTRIES, FsCanonicalizeParams, FsCanonicalizeResponse, FsCopyParams,
    FsCreateDirectoryParams, FsGetMetadataParams, FsGetMetadataResponse, FsReadDirectoryParams,
    FsReadDirectoryResponse, FsReadFileParams, FsReadFileResponse, FsRemoveParams, FsWalkParams,
    FsWalkResponse, FsWriteFileParams,
};
use tether_protocol::sandbox::SandboxContext;
use tether_protocol::{ByteChunk, PathUri};

use super::blocking::blocking;
use super::request::{Admission, Work, admit, native_path, refuse_sandboxed_read};
use super::sandboxed::{self, FileOp};
use super::{FileReadStream, FileSystem, FsError, directory, metadata, regular_file, stream, walk};

/// The executor's own filesystem.
#[derive(Debug, Clone, Default)]
pub struct LocalFileSystem;

impl LocalFileSystem {
    pub fn new() -> Self {
        Self
    }
}

/// Admits a read: in-process, or refused (a read the sandbox would have to confine is not
/// served unconfined).
fn admit_read(sandbox: Option<&SandboxContext>) -> Result<(), FsError> {
    match admit(sandbox, Work::Read)? {
        Admission::InProcess => Ok(()),
        Admission::Sandboxed(_) => Err(refuse_sandboxed_read()),
    }
}

/// Runs a write here, or in the sandbox its intent describes.
async fn write(sandbox: Option<&SandboxContext>, op: FileOp) -> Result<(), FsError> {
    match admit(sandbox, Work::Write)? {
        Admission::InProcess => blocking(move || op.apply()).await,
        Admission::Sandboxed(policy) => sandboxed::run(&policy, op).await,
    }
}

#[async_trait]
impl FileSystem for LocalFileSystem {
    async fn read_file(&self, params: FsReadFileParams) -> Result<FsReadFileResponse, FsError> {
        admit_read(params.sandbox.as_ref())?;
        let follow = params.follows_symlinks();
        let path = native_path(&params.path)?;
        let bytes = blocking(move || regular_file::read_whole(&path, follow)).await?;
        Ok(FsReadFileResponse { data_base64: ByteChunk::from(bytes) })
    }

    async fn write_file(&self, params: FsWriteFileParams) -> Result<(), FsError> {
        let bytes = params.decode_data().map_err(|error| {
            FsError::invalid_input(format!(
                "fs/writeFile requires valid base64 dataBase64: {error}"
            ))
        })?;
        let follow = params.follows_symlinks();
        let path = native_path(&params.path)?;
        write(params.sandbox.as_ref(), FileOp::WriteFile { path, data: bytes, follow }).await
    }

    async fn create_directory(&self, params: FsCreateDirectoryParams) -> Result<(), FsError> {
        let (recursive, follow) = (params.is_recursive(), params.follows_symlinks());
        let path = native_path(&params.path)?;
        write(params.sandbox.as_ref(), FileOp::CreateDirectory { path, recursive, follow }).await
    }

    async fn get_metadata(
        &self,
        params: FsGetMetadataParams,
    ) -> Result<FsGetMetadataResponse, FsError> {
        admit_read(params.sandbox.as_ref())?;
        let follow = params.follows_symlinks();
        let path = native_path(&params.path)?;
        blocking(move || metadata::metadata(&path, follow)).await
    }

    async fn canonicalize(
        &self,
        params: FsCanonicalizeParams,
    ) -> Result<FsCanonicalizeResponse, FsError> {
        admit_read(params.sandbox.as_ref())?;
        let path = native_path(&params.path)?;
        let real = blocking(move || std::fs::canonicalize(path)).await?;
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
        admit_read(params.sandbox.as_ref())?;
        let path = native_path(&params.path)?;
        let keep = FS_READ_DIRECTORY_MAX_ENTRIES;
        let listing = blocking(move || directory::list(&path, keep)).await?;
        if listing.total > FS_READ_DIRECTORY_MAX_ENTRIES {
            return Err(FsError::other(format!(
                "fs/readDirectory returned {} entries; limit is {FS_READ_DIRECTORY_MAX_ENTRIES}",
                listing.total
            )));
        }
        Ok(FsReadDirectoryResponse { entries: listing.entries })
    }

    async fn walk(&self, params: FsWalkParams) -> Result<FsWalkResponse, FsError> {
        admit_read(params.sandbox.as_ref())?;
        walk::validate(&params.options)?;
        let path = native_path(&params.path)?;
        let options = params.options;
        blocking(move || walk::walk(&path, &options)).await
    }

    async fn remove(&self, params: FsRemoveParams) -> Result<(), FsError> {
        let (recursive, force) = (params.is_recursive(), params.is_forced());
        let follow = params.follows_symlinks();
        let path = native_path(&params.path)?;
        write(params.sandbox.as_ref(), FileOp::Remove { path, recursive, force, follow }).await
    }

    async fn copy(&self, params: FsCopyParams) -> Result<(), FsError> {
        let source = native_path(&params.source_path)?;
        let destination = native_path(&params.destination_path)?;
        let recursive = params.recursive;
        write(params.sandbox.as_ref(), FileOp::Copy { source, destination, recursive }).await
    }

    async fn read_file_stream(
        &self,
        path: PathUri,
        sandbox: Option<SandboxContext>,
    ) -> Result<FileReadStream, FsError> {
        admit_read(sandbox.as_ref())?;
        stream::open_local(native_path(&path)?).await
    }
}
