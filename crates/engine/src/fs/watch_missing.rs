//! `fs/watchMissing`: one connection's watch for missing paths appearing.

use tether_protocol::fs::{FsWatchMissingParams, FsWatchMissingResponse};

use super::FsError;

/// The connection's current missing-path watch.
#[derive(Debug, Default)]
pub struct MissingWatch {}

impl MissingWatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the current watch; `fired` is called once with the watch id when it fires.
    pub fn watch(
        &mut self,
        _params: FsWatchMissingParams,
        _fired: impl FnOnce(u64) + Send + 'static,
    ) -> Result<FsWatchMissingResponse, FsError> {
        Ok(FsWatchMissingResponse { watching: false })
    }
}
