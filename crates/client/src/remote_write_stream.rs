//! The blocks of a streamed file write, over one connection: `fs/writeBlock` calls on a handle
//! opened with `fs/open {mode: "replace"}`, a few in flight, and `fs/close` at the end.
//!
//! Like a streamed read, the handle belongs to the connection that opened it: a drop fails
//! the stream, which cannot go on on a handle the next connection never had.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tether_engine::fs::{BlockWriter, FsError};
use tether_protocol::ByteChunk;
use tether_protocol::fs::{FsCloseParams, FsEmptyResponse, FsWriteBlockParams};
use tether_protocol::method::Method;
use tokio::task::JoinHandle;

use crate::connection::Connection;
use crate::fs_errors::{StreamOf, stream_error};

/// How many `fs/writeBlock` calls a stream keeps in flight: 4 (4 MiB of blocks). With one,
/// every block waits a whole round trip and the server's disk write before the next one
/// leaves, so the link's latency sets the pace; a few keep both the link and the disk busy.
/// More would only add to what the client holds (each block also as its 1.4 MB of base64)
/// and to what a failure leaves written past the first failed block.
pub const WRITE_BLOCKS_IN_FLIGHT: usize = 4;

/// One open handle's writes, on the connection that opened it.
pub(crate) struct RemoteBlockWriter {
    connection: Arc<Connection>,
    handle_id: String,
    /// The writes not yet seen to finish, oldest first. Each is a task of its own, so its
    /// request leaves at once and its answer is taken whenever it comes.
    in_flight: VecDeque<JoinHandle<Result<(), FsError>>>,
    /// Until `finish` closes the handle: dropping the writer while open closes it in the
    /// background, after the writes in flight.
    open: bool,
    /// Blocks go as raw bytes beside their JSON (`binaryBlocks`), not as base64 in it.
    binary: bool,
}

impl RemoteBlockWriter {
    pub(crate) fn new(connection: Arc<Connection>, handle_id: String, binary: bool) -> Self {
        let in_flight = VecDeque::new();
        Self { connection, handle_id, in_flight, open: true, binary }
    }

    /// Takes the answers of the writes that have finished, oldest first, stopping at the
    /// first that has not; the first failure among them.
    async fn reap_finished(&mut self) -> Result<(), FsError> {
        while self.in_flight.front().is_some_and(JoinHandle::is_finished) {
            let write = self.in_flight.pop_front().expect("checked above");
            settled(write).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl BlockWriter for RemoteBlockWriter {
    async fn write_block(&mut self, offset: u64, block: Bytes) -> Result<(), FsError> {
        self.reap_finished().await?;
        if self.in_flight.len() >= WRITE_BLOCKS_IN_FLIGHT {
            let oldest = self.in_flight.pop_front().expect("the queue is full");
            settled(oldest).await?;
        }
        let params = FsWriteBlockParams {
            handle_id: self.handle_id.clone(),
            offset,
            chunk: ByteChunk(block),
            sandbox: None,
        };
        let (connection, binary) = (self.connection.clone(), self.binary);
        self.in_flight.push_back(tokio::spawn(async move {
            let method = Method::FsWriteBlock.name();
            let written = match binary {
                true => {
                    let encode = |id: &_| params.to_attached_message(id, method);
                    connection.call_binary(method, encode).await
                }
                false => {
                    let encode = |id: &_| params.to_request_text(id, method);
                    connection.call_encoded(method, encode).await
                }
            };
            written.map(|FsEmptyResponse {}| ()).map_err(|e| stream_error(e, StreamOf::Write))
        }));
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<(), FsError> {
        let mut first_failure = None;
        for write in std::mem::take(&mut self.in_flight) {
            if let Err(error) = settled(write).await {
                first_failure.get_or_insert(error);
            }
        }
        self.open = false;
        let close = FsCloseParams { handle_id: self.handle_id.clone(), sandbox: None };
        let closed = self.connection.call(Method::FsClose.name(), &close).await;
        let closed =
            closed.map(|FsEmptyResponse {}| ()).map_err(|e| stream_error(e, StreamOf::Write));
        match first_failure {
            Some(error) => Err(error),
            None => closed,
        }
    }
}

impl Drop for RemoteBlockWriter {
    fn drop(&mut self) {
        if !std::mem::replace(&mut self.open, false) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let connection = self.connection.clone();
        let in_flight = std::mem::take(&mut self.in_flight);
        let close = FsCloseParams { handle_id: self.handle_id.clone(), sandbox: None };
        runtime.spawn(async move {
            // After the writes in flight, so none of them meets a closed handle.
            for write in in_flight {
                let _ = write.await;
            }
            let _ = connection.call::<_, FsEmptyResponse>(Method::FsClose.name(), &close).await;
        });
    }
}

/// A write's outcome once its task is done.
async fn settled(write: JoinHandle<Result<(), FsError>>) -> Result<(), FsError> {
    match write.await {
        Ok(written) => written,
        Err(failed) => Err(FsError::other(format!("a streamed file write failed: {failed}"))),
    }
}
