//! [`LocalFileSystem`]: the filesystem of the machine this process runs on.

use async_trait::async_trait;
use tether_protocol::fs::*;

use super::{FileSystem, FsError};

/// The executor's own filesystem.
#[derive(Debug, Clone, Default)]
pub struct LocalFileSystem;

impl LocalFileSystem {
    pub fn new() -> Self {
        Self
    }
}

fn unimplemented() -> FsError {
    FsError::other("not implemented yet")
}

#[async_trait]
impl FileSystem for LocalFileSystem {
    async fn read_file(&self, _params: FsReadFileParams) -> Result<FsReadFileResponse, FsError> {
        Err(unimplemented())
    }
    async fn write_file(&self, _params: FsWriteFileParams) -> Result<(), FsError> {
        Err(unimplemented())
    }
    async fn create_directory(&self, _params: FsCreateDirectoryParams) -> Result<(), FsError> {
        Err(unimplemented())
    }
    async fn get_metadata(
        &self,
        _params: FsGetMetadataParams,
    ) -> Result<FsGetMetadataResponse, FsError> {
        Err(unimplemented())
    }
    async fn canonicalize(
        &self,
        _params: FsCanonicalizeParams,
    ) -> Result<FsCanonicalizeResponse, FsError> {
        Err(unimplemented())
    }
    async fn read_directory(
        &self,
        _params: FsReadDirectoryParams,
    ) -> Result<FsReadDirectoryResponse, FsError> {
        Err(unimplemented())
    }
    async fn walk(&self, _params: FsWalkParams) -> Result<FsWalkResponse, FsError> {
        Err(unimplemented())
    }
    async fn remove(&self, _params: FsRemoveParams) -> Result<(), FsError> {
        Err(unimplemented())
    }
    async fn copy(&self, _params: FsCopyParams) -> Result<(), FsError> {
        Err(unimplemented())
    }
}
