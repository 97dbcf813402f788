//! Filesystem calls block. They run on tokio's blocking pool, so a slow disk, a network mount or
//! a large copy never stalls the async workers that carry every connection's messages.

use std::io;

use super::FsError;

/// Runs `work` on the blocking pool; its `io::Error` becomes an [`FsError`] that keeps the OS
/// text.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> Result<T, FsError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(FsError::from),
        Err(failed) => Err(FsError::other(format!("filesystem task failed: {failed}"))),
    }
}
