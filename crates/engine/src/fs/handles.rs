//! Open files of one connection: `fs/open`, `fs/readBlock`, `fs/writeBlock`, `fs/close`.

use tether_protocol::fs::*;

use super::FsError;

/// The files one connection has open, by the client's handle ids.
#[derive(Debug, Default)]
pub struct FileHandles {}

impl FileHandles {
    pub fn new() -> Self {
        Self::default()
    }

    pub async fn open(&mut self, _params: FsOpenParams) -> Result<FsOpenResponse, FsError> {
        Err(FsError::other("not implemented yet"))
    }

    pub async fn read_block(
        &mut self,
        _params: FsReadBlockParams,
    ) -> Result<FsReadBlockResponse, FsError> {
        Err(FsError::other("not implemented yet"))
    }

    pub async fn write_block(&mut self, _params: FsWriteBlockParams) -> Result<(), FsError> {
        Err(FsError::other("not implemented yet"))
    }

    /// Closes a handle; closing an unknown one is not an error.
    pub fn close(&mut self, _params: FsCloseParams) {}
}
