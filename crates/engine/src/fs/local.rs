//! [`LocalFileSystem`]: the filesystem of the machine this process runs on.
//!
//! Each method checks the request (sandbox intent, then what else the reference checks before
//! the path, then the path) and runs the filesystem work on the blocking pool. The work itself
//! lives in one module per concern: [`regular_file`], [`directory`], [`metadata`], [`walk`],
//! [`remove`], [`copy`].

use async_trait::async_trait;
use serde_json::Value;
use tether_protocol::fs::{
    FS_READ_DIRECTORY_MAX_ENTRIES, FsCanonicalizeParams, FsCanonicalizeResponse, FsCopyParams,
    FsCreateDirectoryParams, FsGetMetadataParams, FsGetMetadataResponse, FsReadDirectoryParams,
    FsReadDirectoryResponse, FsReadFileParams, FsReadFileResponse, FsRemoveParams, FsWalkParams,
    FsWalkResponse, FsWriteFileParams,
};
use tether_protocol::{ByteChunk, PathUri};

use super::blocking::blocking;
use super::request::{admit, native_path};
use super::{
    FileReadStream, FileSystem, FsError, copy, directory, metadata, regular_file, remove, stream,
    walk,
};

/// The executor's own filesystem.
#[derive(Debug, Clone, Default)]
pub struct LocalFileSystem;

impl LocalFileSystem {
    pub fn new() -> Self {
        Self
    }
}

#[async_trait]
impl FileSystem for LocalFileSystem {
    async fn read_file(&self, params: FsReadFileParams) -> Result<FsReadFileResponse, FsError> {
        admit(params.sandbox.as_ref())?;
        let follow = params.follows_symlinks();
        let path = native_path(&params.path)?;
        let bytes = blocking(move || regular_file::read_whole(&path, follow)).await?;
        Ok(FsReadFileResponse { data_base64: ByteChunk::from(bytes) })
    }

    async fn write_file(&self, params: FsWriteFileParams) -> Result<(), FsError> {
        admit(params.sandbox.as_ref())?;
        let bytes = params.decode_data().map_err(|error| {
            FsError::invalid_input(format!(
                "fs/writeFile requires valid base64 dataBase64: {error}"
            ))
        })?;
        let follow = params.follows_symlinks();
        let path = native_path(&params.path)?;
        blocking(move || regular_file::write_whole(&path, &bytes.0, follow)).await
    }

    async fn create_directory(&self, params: FsCreateDirectoryParams) -> Result<(), FsError> {
        admit(params.sandbox.as_ref())?;
        let (recursive, follow) = (params.is_recursive(), params.follows_symlinks());
        let path = native_path(&params.path)?;
        blocking(move || directory::create(&path, recursive, follow)).await
    }

    async fn get_metadata(
        &self,
        params: FsGetMetadataParams,
    ) -> Result<FsGetMetadataResponse, FsError> {
        admit(params.sandbox.as_ref())?;
        let follow = params.follows_symlinks();
        let path = native_path(&params.path)?;
        blocking(move || metadata::metadata(&path, follow)).await
    }

    async fn canonicalize(
        &self,
        params: FsCanonicalizeParams,
    ) -> Result<FsCanonicalizeResponse, FsError> {
        admit(params.sandbox.as_ref())?;
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
        admit(params.sandbox.as_ref())?;
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
        admit(params.sandbox.as_ref())?;
        walk::validate(&params.options)?;
        let path = native_path(&params.path)?;
        let options = params.options;
        blocking(move || walk::walk(&path, &options)).await
    }

    async fn remove(&self, params: FsRemoveParams) -> Result<(), FsError> {
        admit(params.sandbox.as_ref())?;
        let (recursive, force) = (params.is_recursive(), params.is_forced());
        let follow = params.follows_symlinks();
        let path = native_path(&params.path)?;
        blocking(move || remove::remove(&path, recursive, force, follow)).await
    }

    async fn copy(&self, params: FsCopyParams) -> Result<(), FsError> {
        admit(params.sandbox.as_ref())?;
        let source = native_path(&params.source_path)?;
        let destination = native_path(&params.destination_path)?;
        let recursive = params.recursive;
        blocking(move || copy::copy(&source, &destination, recursive)).await
    }

    async fn read_file_stream(
        &self,
        path: PathUri,
        sandbox: Option<Value>,
    ) -> Result<FileReadStream, FsError> {
        admit(sandbox.as_ref())?;
        stream::open_local(native_path(&path)?).await
    }
}
