//! A connection's own answers written to its socket by the processor that made them, when
//! nothing is waiting to go out ahead of them.
//!
//! Everything else a connection sends (process output, answers of requests that run in tasks
//! of their own, pings) goes through its outbound queue to the writer task. An answer could
//! go that way too, but handing it over wakes the writer, and a woken task on a two-core
//! machine often means a second thread woken and put back to sleep: profiled, that was three
//! thread switches and two futex calls per small request, against the one switch a request
//! needs (the processor woken by its socket). So an answer is written where it was made,
//! under the socket's lock, when two things hold:
//!
//! - nothing handed to the queue is still unwritten ([`Unwritten`]: each queued message
//!   carries a [`Ticket`] that the writer drops once the message is on the socket), so an
//!   answer never overtakes a message queued before it; and
//! - the lock is free at once: a writer busy with a batch keeps it, and the answer then goes
//!   through the queue behind the batch, as before;
//! - the answer is small ([`DIRECT_ANSWER_MAX_BYTES`]): a large one (a block of a file being
//!   copied) is better handed to the writer, so that the processor reads the next request
//!   while the socket takes it.
//!
//! A peer that stops reading fills the socket; a direct write then waits for room exactly as a
//! queued one would wait for the queue, and stops when the connection is judged gone.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::ws::{Message, WebSocket};
use futures_util::SinkExt;
use futures_util::stream::SplitSink;
use tokio::sync::{Mutex, MutexGuard};
use tokio_util::sync::CancellationToken;

use super::{Closed, Payload};

/// The largest answer written where it is made. A small answer's cost is the wake-up that
/// handing it over would take; a large one's is the copy into the socket, which the writer
/// can do while the processor serves the next request (four block reads in flight keep a
/// copy streaming only if they overlap). 64 KiB is far above any small request's answer and
/// a sixteenth of a block.
pub(crate) const DIRECT_ANSWER_MAX_BYTES: usize = 64 * 1024;

/// The sending half of a WebSocket, shared by the connection's writer task and its processor.
pub(crate) type Sink = SplitSink<WebSocket, Message>;

/// Leaves no task registered to be woken for the socket's writes, after a write is done.
///
/// The WebSocket wakes the task that last wrote whenever the socket has something to read,
/// not only when it has room to write. After the writer task's batch, that is the writer:
/// woken for nothing by every request that arrives, alongside the processor that reads it, it
/// makes two tasks ready at once, and the runtime hands one to a second thread. A flush with
/// nothing to flush, under a waker that does nothing, takes the writer's place; should it find
/// bytes it cannot write yet (a pong queued by the reading side), the reading side is the one
/// woken for them.
pub(crate) fn forget_writer(sink: &mut Sink) {
    use futures_util::Sink as _;
    let mut nobody = std::task::Context::from_waker(std::task::Waker::noop());
    let _ = std::pin::Pin::new(sink).poll_flush(&mut nobody);
}

/// How many messages were handed to a connection's queue and are not yet on its socket.
#[derive(Clone, Default)]
pub(crate) struct Unwritten(Arc<AtomicUsize>);

impl Unwritten {
    /// Counts one more message on its way; the count drops when the ticket does.
    pub(crate) fn ticket(&self) -> Ticket {
        self.0.fetch_add(1, Ordering::AcqRel);
        Ticket(self.0.clone())
    }

    fn none(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }
}

/// One queued message's place in [`Unwritten`]; dropped with the message after it was
/// written (or when it never will be).
pub(crate) struct Ticket(Arc<AtomicUsize>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A WebSocket's sending half, as its writer task and its processor share it.
pub(crate) struct SharedSocket {
    sink: Mutex<Sink>,
    /// The peer is gone (see `liveness`): a write waiting for room gives up.
    gone: CancellationToken,
}

impl SharedSocket {
    pub(crate) fn new(sink: Sink, gone: CancellationToken) -> Self {
        Self { sink: Mutex::new(sink), gone }
    }

    /// The sink, for the writer task: it waits its turn.
    pub(crate) async fn lock(&self) -> MutexGuard<'_, Sink> {
        self.sink.lock().await
    }

    /// Writes `payload` now if it is small, nothing queued is still unwritten and nobody holds
    /// the socket; gives it back otherwise, for the queue.
    pub(crate) async fn try_write(
        &self,
        unwritten: &Unwritten,
        payload: Payload,
    ) -> Result<Result<(), Closed>, Payload> {
        if payload.len() > DIRECT_ANSWER_MAX_BYTES || !unwritten.none() {
            return Err(payload);
        }
        let Ok(mut sink) = self.sink.try_lock() else { return Err(payload) };
        // Looked at again under the lock: the writer drops its tickets before it lets go, so
        // a batch it has just written counts as written here, and one it has taken from the
        // queue but not written yet still counts.
        if !unwritten.none() {
            return Err(payload);
        }
        let written = tokio::select! {
            written = sink.send(payload.into_message()) => written.map_err(|_| Closed),
            () = self.gone.cancelled() => Err(Closed),
        };
        Ok(written)
    }
}

impl Payload {
    /// The WebSocket message that carries it.
    pub(crate) fn into_message(self) -> Message {
        match self {
            Payload::Text(text) => Message::text(text),
            Payload::Binary(bytes) => Message::binary(bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::{Context, Poll, Wake, Waker};

    use axum::extract::ws::WebSocketUpgrade;
    use futures_util::{FutureExt, StreamExt};

    use super::*;

    /// Counts the wake-ups of a writer.
    struct WakeCount(AtomicUsize);

    impl Wake for WakeCount {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// How often a batch's writer is woken by the request that arrives after it: the server's
    /// side of a real WebSocket writes a notification under a waker of its own, with
    /// [`forget_writer`] after it or not, then reads the client's next request (a
    /// current-thread runtime: the socket's wake-ups are over when the read returns).
    async fn writer_wakes_on_a_request(forget: bool) -> usize {
        let (upgraded, socket) = tokio::sync::oneshot::channel::<WebSocket>();
        let upgraded = Arc::new(std::sync::Mutex::new(Some(upgraded)));
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(move |upgrade: WebSocketUpgrade| {
                let upgraded = upgraded.lock().unwrap().take();
                async move {
                    upgrade.on_upgrade(move |socket| async move {
                        if let Some(upgraded) = upgraded {
                            let _ = upgraded.send(socket);
                        }
                    })
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let (mut client, _) =
            tokio_tungstenite::connect_async(format!("ws://{address}")).await.unwrap();
        let (mut sink, mut requests) = socket.await.unwrap().split();

        let writes = Arc::new(WakeCount(AtomicUsize::new(0)));
        let waker = Waker::from(writes.clone());
        let mut notification = sink.send(Message::text("notification"));
        let written = notification.poll_unpin(&mut Context::from_waker(&waker));
        assert!(matches!(written, Poll::Ready(Ok(()))), "a small write waits");
        drop(notification);
        if forget {
            forget_writer(&mut sink);
        }
        let before = writes.0.load(Ordering::SeqCst);
        assert_eq!(client.next().await.unwrap().unwrap().into_text().unwrap(), "notification");
        client.send(tokio_tungstenite::tungstenite::Message::text("request")).await.unwrap();
        let request = requests.next().await.unwrap().unwrap();
        assert_eq!(request.into_text().unwrap(), "request");
        server.abort();
        writes.0.load(Ordering::SeqCst) - before
    }

    #[tokio::test]
    async fn a_written_batch_leaves_the_writer_asleep_when_a_request_comes() {
        // The socket's behaviour this works around: the last writer is woken by a read.
        assert!(writer_wakes_on_a_request(false).await > 0);
        assert_eq!(writer_wakes_on_a_request(true).await, 0);
    }

    #[test]
    fn unwritten_counts_tickets_until_they_are_dropped() {
        let unwritten = Unwritten::default();
        assert!(unwritten.none());
        let first = unwritten.ticket();
        let second = unwritten.ticket();
        assert!(!unwritten.none());
        drop(first);
        assert!(!unwritten.none(), "one message is still on its way");
        drop(second);
        assert!(unwritten.none());
    }
}
