//! The calls in flight on one connection: registered by the caller that sends the request,
//! answered by the connection's reader, failed all at once when the connection ends.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use tether_protocol::RequestId;
use tokio::sync::oneshot;

use crate::error::{ClientError, Disconnect};

/// A call's result, and the bytes attached to it (Tether's `binaryBlocks`: an answer in a
/// binary message, its JSON and a block's bytes after a NUL).
pub(crate) struct Answer {
    /// The result's JSON, checked with its frame by the hardened reader, decoded by the caller
    /// into the type it expects.
    pub result: Bytes,
    pub attached: Option<Bytes>,
}

/// Where a call's answer, or its failure, arrives.
pub(crate) type Pending = oneshot::Receiver<Result<Answer, ClientError>>;

/// The calls waiting for their answers on one connection, by request id.
#[derive(Default)]
pub(crate) struct Calls(Mutex<Waiting>);

#[derive(Default)]
struct Waiting {
    replies: HashMap<i64, oneshot::Sender<Result<Answer, ClientError>>>,
    /// Set once the connection is gone; later calls fail at once with it.
    closed: Option<Disconnect>,
}

impl Calls {
    /// Waits for the answer to request `id`; fails at once if the connection is gone.
    pub(crate) fn register(&self, id: i64) -> Result<Pending, ClientError> {
        let mut waiting = self.lock();
        if let Some(end) = &waiting.closed {
            return Err(ClientError::Disconnected(end.clone()));
        }
        let (reply, pending) = oneshot::channel();
        waiting.replies.insert(id, reply);
        Ok(pending)
    }

    /// Request `id` could not be written: the socket is broken, so the connection is over
    /// whether or not the reader has seen it yet. Marked so, a caller that retries waits for
    /// the next connection instead of coming straight back here.
    pub(crate) fn unsent(&self, id: i64) {
        let mut waiting = self.lock();
        waiting.replies.remove(&id);
        waiting.closed.get_or_insert_with(Disconnect::closed);
    }

    /// Whether the connection has ended.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed.is_some()
    }

    /// Answers the call `id`, if it is this client's and still waits.
    pub(crate) fn complete(&self, id: &RequestId, result: Result<Answer, ClientError>) {
        let RequestId::Integer(id) = id else { return };
        let reply = self.lock().replies.remove(id);
        if let Some(reply) = reply {
            let _ = reply.send(result);
        }
    }

    /// The connection ended with `disconnect`: every call waiting fails with `failure`, and
    /// every later one with the disconnect.
    pub(crate) fn end(&self, disconnect: Disconnect, failure: &ClientError) {
        let replies = {
            let mut waiting = self.lock();
            waiting.closed = Some(disconnect);
            std::mem::take(&mut waiting.replies)
        };
        for reply in replies.into_values() {
            let _ = reply.send(Err(failure.clone()));
        }
    }

    fn lock(&self) -> MutexGuard<'_, Waiting> {
        // Each change is one step, so the map stays whole whatever panicked.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
