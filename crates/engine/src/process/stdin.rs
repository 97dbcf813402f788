//! A process's stdin: writes are queued and applied in order by one writer task, so a
//! `process/write` is answered at once even when the child is not reading.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tether_protocol::ProcessId;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ProcessError;

/// Most stdin bytes queued for one process and not yet taken by it.
///
/// Writes are acknowledged before the child reads them; without a bound, a client writing to a
/// child that never reads would grow the server without limit.
pub const STDIN_QUEUE_LIMIT_BYTES: usize = 64 * 1024 * 1024;

pub(crate) struct StdinQueue {
    /// `None` once the client closed stdin: the writer task writes what is queued, then
    /// closes the pipe, and the child reads end of input.
    tx: Mutex<Option<mpsc::UnboundedSender<Bytes>>>,
    queued: Arc<AtomicUsize>,
}

impl StdinQueue {
    /// Queues `chunk`; `Ok(false)` if stdin was closed by the client already.
    pub(crate) fn push(&self, process_id: &ProcessId, chunk: Bytes) -> Result<bool, ProcessError> {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = tx.as_ref() else { return Ok(false) };
        if chunk.is_empty() {
            return Ok(true);
        }
        let queued = self.queued.load(Ordering::Acquire);
        if queued + chunk.len() > STDIN_QUEUE_LIMIT_BYTES {
            return Err(ProcessError::StdinQueueFull(process_id.clone(), queued));
        }
        self.queued.fetch_add(chunk.len(), Ordering::AcqRel);
        tx.send(chunk).map_err(|_| ProcessError::StdinClosed)?;
        Ok(true)
    }

    /// Ends the input after what is queued. Closing twice is closing once.
    pub(crate) fn close(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

/// Starts the writer task for `writer`. Once the child stops reading (its stdin broke), queued
/// and later bytes are discarded, as a pipe to a dead reader would: the write was accepted, and
/// the process's exit tells the rest.
pub(crate) fn start_stdin_writer<W>(writer: W) -> StdinQueue
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    start_stdin_writer_until(writer, CancellationToken::new())
}

/// [`start_stdin_writer`], whose writer is let go unflushed once `stop` is cancelled: a
/// forwarded connection ended by its client must not wait for a peer that does not read.
pub(crate) fn start_stdin_writer_until<W>(mut writer: W, stop: CancellationToken) -> StdinQueue
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
    let queued = Arc::new(AtomicUsize::new(0));
    let pending = queued.clone();
    tokio::spawn(async move {
        let mut broken = false;
        let writing = async {
            while let Some(chunk) = rx.recv().await {
                if !broken {
                    broken =
                        writer.write_all(&chunk).await.is_err() || writer.flush().await.is_err();
                }
                pending.fetch_sub(chunk.len(), Ordering::AcqRel);
            }
            // Closed by the client (or the process is gone): the child reads end of input.
            let _ = writer.shutdown().await;
        };
        tokio::select! {
            () = writing => {}
            () = stop.cancelled() => {}
        }
    });
    StdinQueue { tx: Mutex::new(Some(tx)), queued }
}
