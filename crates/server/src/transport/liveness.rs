//! Whether a WebSocket peer is still there, judged from its socket.
//!
//! A client that vanished (its machine slept, its network black-holed it, it was stopped)
//! must be let go so that its session detaches and can be resumed at once. Two things show
//! it, and both are measured on the socket itself, underneath the WebSocket layer, so they hold
//! whatever the connection's tasks are doing:
//!
//! - **Silence:** the server is waiting to read and not a byte has come for the pong timeout.
//!   The server pings at least twice per timeout, so a live client always sends something.
//!   Time the server spends *not* reading — its own queue of the client's requests is full —
//!   is the server's backlog, not the client's silence, and does not count.
//! - **A stalled write:** the socket has refused every byte the server tried to write for the
//!   pong timeout. A client that reads at all, however slowly, makes progress; one that reads
//!   nothing for that long is not listening.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// "Not waiting": no read waiting for bytes, no write refused.
const NOT_WAITING: u64 = u64::MAX;

/// The clock one connection's socket keeps: since when it has waited, in milliseconds after
/// the connection opened.
#[derive(Debug)]
pub(crate) struct SocketClock {
    opened: Instant,
    /// Since when a read has been waiting without a byte arriving.
    read_waiting_since: AtomicU64,
    /// Since when every write has been refused (the socket is full).
    write_blocked_since: AtomicU64,
}

/// Why a peer was judged gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// Nothing read for this long while waiting to read.
    Silent { ms: u64 },
    /// Nothing written for this long while trying to write.
    NotReading { ms: u64 },
}

impl SocketClock {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            opened: Instant::now(),
            read_waiting_since: AtomicU64::new(NOT_WAITING),
            write_blocked_since: AtomicU64::new(NOT_WAITING),
        })
    }

    fn now_ms(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    /// The peer's state after `timeout` of patience: `Some` once it has been silent, or has
    /// refused the server's writes, for longer.
    pub(crate) fn verdict(&self, timeout: Duration) -> Option<Gone> {
        let now = self.now_ms();
        let timeout = timeout.as_millis() as u64;
        let waited = |since: &AtomicU64| match since.load(Ordering::Relaxed) {
            NOT_WAITING => 0,
            since => now.saturating_sub(since),
        };
        let (silent, blocked) =
            (waited(&self.read_waiting_since), waited(&self.write_blocked_since));
        if blocked > timeout {
            Some(Gone::NotReading { ms: blocked })
        } else if silent > timeout {
            Some(Gone::Silent { ms: silent })
        } else {
            None
        }
    }

    fn waiting(&self, since: &AtomicU64) {
        // Keep the first moment of a wait: only the start of it counts.
        let _ = since.compare_exchange(
            NOT_WAITING,
            self.now_ms(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    fn progressed(since: &AtomicU64) {
        since.store(NOT_WAITING, Ordering::Relaxed);
    }

    /// A write (or flush) was refused (the socket is full), or went through.
    fn write_polled(&self, refused: bool) {
        match refused {
            true => self.waiting(&self.write_blocked_since),
            false => Self::progressed(&self.write_blocked_since),
        }
    }
}

/// A socket that keeps a [`SocketClock`].
pub(crate) struct ClockedIo<T> {
    inner: T,
    clock: Arc<SocketClock>,
}

impl<T> ClockedIo<T> {
    pub(crate) fn new(inner: T, clock: Arc<SocketClock>) -> Self {
        Self { inner, clock }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ClockedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let clock = &self.clock;
        match &polled {
            Poll::Pending => clock.waiting(&clock.read_waiting_since),
            // Bytes, an end of stream or an error: the wait is over either way.
            Poll::Ready(_) => SocketClock::progressed(&clock.read_waiting_since),
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ClockedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.clock.write_polled(polled.is_pending());
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.clock.write_polled(polled.is_pending());
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.clock.write_polled(polled.is_pending());
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wait_counts_from_its_start_and_ends_with_progress() {
        let clock = SocketClock::new();
        let timeout = Duration::from_secs(5);
        clock.waiting(&clock.read_waiting_since);
        tokio::time::advance(Duration::from_secs(3)).await;
        // A second poll of the same wait does not restart it.
        clock.waiting(&clock.read_waiting_since);
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(clock.verdict(timeout), Some(Gone::Silent { ms: 6000 }));
        SocketClock::progressed(&clock.read_waiting_since);
        assert_eq!(clock.verdict(timeout), None);

        clock.write_polled(true);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(clock.verdict(timeout), Some(Gone::NotReading { ms: 6000 }));
        clock.write_polled(false);
        assert_eq!(clock.verdict(timeout), None);
    }
}
