//! A connection's own answers, and its process output, written to its socket by the task
//! that made them, when nothing is waiting to go out ahead of them.
//!
//! Everything else a connection sends (answers of requests that run in tasks of their own,
//! pings) goes through its outbound queue to the writer task, and so does anything that finds
//! the socket busy. An answer could always go that way, but handing it over wakes the writer,
//! and a woken task on a two-core machine often means a second thread woken and put back to
//! sleep: profiled, that was three thread switches and two futex calls per small request,
//! against the one switch a request needs (the processor woken by its socket). So a message is
//! written where it was made, under the socket's lock, when these hold:
//!
//! - nothing handed to the queue is still unwritten ([`Unwritten`]: each queued message
//!   carries a [`Ticket`] that the writer drops once the message is on the socket), so nothing
//!   overtakes a message queued before it;
//! - the lock is free at once: a writer busy with a batch keeps it, and the message then goes
//!   through the queue behind the batch, as before;
//! - an answer is small ([`DIRECT_ANSWER_MAX_BYTES`]): a large one (a block of a file being
//!   copied) is better handed to the writer, so that the processor reads the next request
//!   while the socket takes it. Output (a session's `process/output`, a streamed HTTP body's
//!   delta) may be up to a frame ([`FRAGMENT_BYTES`]): the task that forwards it has nothing
//!   else to do meanwhile (the process's own reader goes on filling its buffer), and a
//!   terminal's chunk is just over 64 KiB with its JSON. Built both ways and run alternately
//!   (five runs of three rounds each), a terminal's output with every CPU but one busy moved
//!   at 101–123 MB/s written so, against 93–105 through the writer: one wake-up fewer a chunk.
//!
//! A peer that stops reading fills the socket; a direct write then waits for room exactly as a
//! queued one would wait for the queue, and stops when the connection is judged gone.
//!
//! Whoever writes, a message bigger than [`FRAGMENT_BYTES`] goes out as frames of that size
//! ([`Payload::feed_into`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures_util::SinkExt;
use futures_util::stream::SplitSink;
use tether_protocol::fragments::fragments;
use tokio::sync::{Mutex, MutexGuard};
use tokio_tungstenite::tungstenite::protocol::frame::coding::Data;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;

use super::upgrade::Socket;
use super::{Closed, Payload};

/// The largest answer written where it is made. A small answer's cost is the wake-up that
/// handing it over would take; a large one's is the copy into the socket, which the writer
/// can do while the processor serves the next request (four block reads in flight keep a
/// copy streaming only if they overlap). 64 KiB is far above any small request's answer and
/// a sixteenth of a block.
pub(crate) const DIRECT_ANSWER_MAX_BYTES: usize = 64 * 1024;

/// The largest frame a message goes out in; a bigger message is sent as several (RFC 6455
/// fragments, which every WebSocket client reassembles).
///
/// The WebSocket library copies each frame whole into its write buffer before the socket takes
/// it, and keeps that buffer's room for the rest of the connection. A 100 MB `fs/readFile`
/// sent as one frame made the server fault in 133 MB of fresh memory for the copy (on a
/// virtual machine whose host takes freed memory back, a few hundred MB/s), then move what
/// the socket had not taken yet to the buffer's front after every partial write, and hold
/// the 133 MB until the connection closed: 140 MB resident where 9 MB had been (the reference
/// does the same, 48 → 178 MB). In frames of 256 KiB, the copy lands in the same few hundred
/// KiB each time, still in the CPU's cache, and that is all the buffer keeps. Small enough
/// for that; large enough that a frame's header and the library's work per frame are
/// nothing beside its bytes. At least [`DIRECT_ANSWER_MAX_BYTES`], so an answer written
/// where it is made is one frame.
pub(crate) const FRAGMENT_BYTES: usize = 256 * 1024;

const _: () = assert!(FRAGMENT_BYTES >= DIRECT_ANSWER_MAX_BYTES);

/// The sending half of a WebSocket, shared by the connection's writer task and its processor.
pub(crate) type Sink = SplitSink<Socket, Message>;

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
        max_bytes: usize,
    ) -> Result<Result<(), Closed>, Payload> {
        if payload.len() > max_bytes || !unwritten.none() {
            return Err(payload);
        }
        let Ok(mut sink) = self.sink.try_lock() else { return Err(payload) };
        // Looked at again under the lock: the writer drops its tickets before it lets go, so
        // a batch it has just written counts as written here, and one it has taken from the
        // queue but not written yet still counts.
        if !unwritten.none() {
            return Err(payload);
        }
        let send = async {
            payload.feed_into(&mut sink).await?;
            sink.flush().await
        };
        let written = tokio::select! {
            written = send => written.map_err(|_| Closed),
            () = self.gone.cancelled() => Err(Closed),
        };
        Ok(written)
    }
}

impl Payload {
    /// Hands the message to `sink`, unflushed: as one frame, or past [`FRAGMENT_BYTES`] as
    /// frames of that size, each waiting for room in the socket as the one before it did.
    /// Nothing else can come between them: the caller holds the sink (a pong the library owes
    /// may, as control frames are allowed to).
    pub(crate) async fn feed_into(self, sink: &mut Sink) -> Result<(), WsError> {
        let (bytes, kind) = match self {
            Payload::Text(text) if text.len() <= FRAGMENT_BYTES => {
                return sink.feed(Message::text(text)).await;
            }
            Payload::Binary(bytes) if bytes.len() <= FRAGMENT_BYTES => {
                return sink.feed(Message::binary(bytes)).await;
            }
            Payload::Text(text) => (Bytes::from(text), Data::Text),
            Payload::Binary(bytes) => (Bytes::from(bytes), Data::Binary),
        };
        for frame in fragments(bytes, kind, FRAGMENT_BYTES) {
            sink.feed(Message::Frame(frame)).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::{Context, Poll, Wake, Waker};

    use futures_util::{FutureExt, StreamExt};
    use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

    use super::super::upgrade::Upgrade;

    use super::*;

    /// Counts the wake-ups of a writer.
    struct WakeCount(AtomicUsize);

    impl Wake for WakeCount {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    type Client = tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >;

    /// A real WebSocket over loopback: the server's end, upgraded by [`Upgrade`], and a
    /// client's, which takes frames of at most `client_frame_max` bytes.
    async fn connected_with(
        client_frame_max: Option<usize>,
    ) -> (tokio::task::JoinHandle<std::io::Result<()>>, Client, Socket) {
        let (upgraded, socket) = tokio::sync::oneshot::channel::<Socket>();
        let upgraded = Arc::new(std::sync::Mutex::new(Some(upgraded)));
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(move |upgrade: Upgrade| {
                let upgraded = upgraded.lock().unwrap().take();
                async move {
                    upgrade.accept(WebSocketConfig::default(), move |socket| async move {
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
        let config =
            WebSocketConfig::default().max_frame_size(client_frame_max).max_message_size(None);
        let (client, _) = tokio_tungstenite::connect_async_with_config(
            format!("ws://{address}"),
            Some(config),
            false,
        )
        .await
        .unwrap();
        (server, client, socket.await.unwrap())
    }

    async fn connected() -> (tokio::task::JoinHandle<std::io::Result<()>>, Client, Socket) {
        connected_with(None).await
    }

    #[tokio::test]
    async fn a_big_message_reaches_the_client_whole_in_frames_no_bigger_than_a_fragment() {
        // The client refuses any frame over FRAGMENT_BYTES, so each message it reads whole
        // came in frames that size or smaller.
        let (server, mut client, socket) = connected_with(Some(FRAGMENT_BYTES)).await;
        let (mut sink, _requests) = socket.split();
        let binary: Vec<u8> = (0..3 * FRAGMENT_BYTES + 5).map(|i| (i % 251) as u8).collect();
        // Two-byte characters, one of them cut by the first fragment's end.
        let text = format!("{}{}", "a", "é".repeat(FRAGMENT_BYTES));
        assert!(!text.is_char_boundary(FRAGMENT_BYTES));
        let exact = vec![9u8; FRAGMENT_BYTES];
        for payload in [
            Payload::Binary(binary.clone()),
            Payload::Text(text.clone()),
            Payload::Binary(exact.clone()),
            Payload::Text("small".to_owned()),
        ] {
            payload.feed_into(&mut sink).await.unwrap();
        }
        sink.flush().await.unwrap();
        let mut next = async || client.next().await.unwrap().unwrap();
        assert_eq!(next().await, Message::binary(binary));
        assert_eq!(next().await, Message::text(text));
        assert_eq!(next().await, Message::binary(exact));
        assert_eq!(next().await, Message::text("small"));
        server.abort();
    }

    #[tokio::test]
    async fn a_message_one_byte_past_a_fragment_is_too_big_for_one_frame_of_that_size() {
        // The test above would pass with no fragments at all if the client's limit held
        // nothing back: a frame of FRAGMENT_BYTES + 1 must be refused by it.
        let (server, mut client, socket) = connected_with(Some(FRAGMENT_BYTES)).await;
        let (mut sink, _requests) = socket.split();
        sink.send(Message::binary(vec![1u8; FRAGMENT_BYTES + 1])).await.unwrap();
        assert!(client.next().await.unwrap().is_err(), "an oversized frame was taken");
        server.abort();
    }

    /// How often a batch's writer is woken by the request that arrives after it: the server's
    /// side of a real WebSocket writes a notification under a waker of its own, with
    /// [`forget_writer`] after it or not, then reads the client's next request (a
    /// current-thread runtime: the socket's wake-ups are over when the read returns).
    async fn writer_wakes_on_a_request(forget: bool) -> usize {
        let (server, mut client, socket) = connected().await;
        let (mut sink, mut requests) = socket.split();

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
