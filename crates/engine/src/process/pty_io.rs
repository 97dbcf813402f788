//! A PTY master's two directions, each served the way the kernel's terminal layer is fastest.
//!
//! **Output** is read by a thread of its own per terminal. The PTY layer hands out at most a few
//! KiB per read, however much is waiting, so a terminal streaming output is a read every few KiB;
//! how fast it goes is how soon after each read the next one is made. Read through the runtime, each
//! read costs a reactor round (`epoll_wait`, a task woken, a read that finds nothing), and while
//! the pump is publishing a chunk nobody reads at all: the kernel's buffer fills and the program
//! writing stops. The thread reads again at once, into a batch of its own that it hands to the
//! pump's buffer when it holds a whole chunk or the terminal has nothing more for now — a
//! streaming terminal costs a hand-over per chunk, not a lock and a copy per read, and a burst
//! (an echo, a prompt) is handed over as soon as it has been read. The pump's buffer is bounded
//! ([`PTY_BUFFERED_BYTES`]): past it the thread waits, the kernel's buffer fills and the program
//! blocks, as it would on a slow terminal.
//!
//! A terminal that streams would still be a chunk (a notification to every client) per read, a
//! few KiB each. So while it streams, output is handed over at most once per [`PTY_LINGER`]
//! unless a whole chunk (the pump's, which [`split`] is given) is ready: a terminal printing
//! flat out sends full chunks, and the first output after a pause — an echo, a prompt — goes at
//! once.
//!
//! **Input** goes through an [`AsyncFd`] registered for writability only: the thread owns the
//! reads, and the runtime is not woken by every burst of output.

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker, ready};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// Output handed to the pump but not yet taken by it. Two of the pump's chunks (64 KiB each):
/// one being published while the next is read. Beyond it the thread waits with its batch (less
/// than a chunk and a read more, [`READ_BYTES`]), and the program writing to the terminal is
/// held back by the kernel.
pub const PTY_BUFFERED_BYTES: usize = 128 * 1024;

/// While a terminal streams, how long output may wait for more before it is handed over: a
/// millisecond is far below what a person at a terminal notices (a screen refreshes every 16),
/// and a terminal printing flat out fills a whole chunk in less.
pub const PTY_LINGER: Duration = Duration::from_millis(1);

/// Bytes asked of each read: more than the PTY layer ever hands out at once (a few KiB).
const READ_BYTES: usize = 16 * 1024;

/// Stack of the reading thread: it keeps its read buffer on the heap and calls nothing deep.
const READER_STACK_BYTES: usize = 64 * 1024;

/// Splits a PTY master (non-blocking, not registered with the runtime) into its output, read by
/// a thread started here, and its input. `chunk_bytes` is what the reader's caller takes at
/// once: that much output is handed over without lingering, however recently the last was.
pub(crate) fn split(master: OwnedFd, chunk_bytes: usize) -> io::Result<(PtyReader, PtyWriter)> {
    let input = master.try_clone()?;
    // SAFETY: `input` is an open descriptor the `AsyncFd` owns, so it stays open and names the
    // same file description for the `AsyncFd`'s whole life.
    let writer = unsafe { AsyncFd::register_with_interest(input, Interest::WRITABLE) }
        .map_err(io::Error::from)?;
    let writer = PtyWriter(writer);
    let (stop_read, stop_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            chunk_bytes,
            buffer: BytesMut::with_capacity(PTY_BUFFERED_BYTES),
            ended: false,
            dropped: false,
            last_handed: None,
            waker: None,
        }),
        space: Condvar::new(),
        eager: AtomicBool::new(false),
    });
    let thread_shared = shared.clone();
    std::thread::Builder::new()
        .name("tether-pty".into())
        .stack_size(READER_STACK_BYTES)
        .spawn(move || read_terminal(&master, &stop_read, &thread_shared, chunk_bytes))?;
    let linger = Box::pin(tokio::time::sleep(Duration::ZERO));
    Ok((PtyReader { shared, linger, _stop: stop_write }, writer))
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when the pump takes output, or the reader is dropped.
    space: Condvar,
    /// Hand over whatever is read, without lingering: the process exited, and what it wrote
    /// before is numbered before its exit. Outside the lock, for the thread to read per read.
    eager: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent whatever panicked: each change is one assignment.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

struct State {
    /// Output handed over at once when this much is buffered ([`split`]'s `chunk_bytes`).
    chunk_bytes: usize,
    buffer: BytesMut,
    /// The terminal is finished (every holder of its other side closed it) or unreadable.
    ended: bool,
    /// The [`PtyReader`] is gone: the thread stops.
    dropped: bool,
    /// When output was last handed over.
    last_handed: Option<Instant>,
    /// The pump, waiting for output.
    waker: Option<Waker>,
}

impl State {
    /// When what is buffered may be handed over: now if there is a whole chunk, the terminal
    /// ended, the process exited (`eager`), or nothing was handed over for [`PTY_LINGER`];
    /// else once that much has passed since the last. `None` with nothing buffered.
    fn hand_over_at(&self, eager: bool) -> Option<Instant> {
        if self.buffer.is_empty() {
            return None;
        }
        let now = Instant::now();
        if self.buffer.len() >= self.chunk_bytes || self.ended || eager {
            return Some(now);
        }
        Some(self.last_handed.map_or(now, |last| (last + PTY_LINGER).max(now)))
    }

    /// The pump's waker, if it waits and should look now: what is buffered may be handed
    /// over, or it is the `first` output since the last hand-over — lingering output is the
    /// pump's to wait for (it sets a timer when it sees it), so it must see it once.
    fn waker_due(&mut self, first: bool, eager: bool) -> Option<Waker> {
        match self.hand_over_at(eager) {
            Some(at) if first || at <= Instant::now() => self.waker.take(),
            _ => None,
        }
    }
}

/// The reading thread: reads into its batch while the terminal has output, hands the batch over
/// at a whole chunk (`chunk_bytes`) or when the terminal has nothing more for now, waits in
/// `poll` when it has nothing, and stops at the terminal's end or when the reader is dropped
/// (its stop pipe closes).
fn read_terminal(master: &OwnedFd, stop: &OwnedFd, shared: &Shared, chunk_bytes: usize) {
    let mut batch = BytesMut::with_capacity(chunk_bytes + READ_BYTES);
    loop {
        batch.reserve(READ_BYTES);
        let spare = batch.spare_capacity_mut();
        let room = spare.len().min(READ_BYTES);
        match rustix::io::read(master, &mut spare[..room]) {
            Ok(([], _)) => break,
            Ok((read, _)) => {
                let n = read.len();
                // SAFETY: `read` filled the first `n` bytes of the spare capacity.
                unsafe { batch.set_len(batch.len() + n) };
                let due = batch.len() >= chunk_bytes || shared.eager.load(Ordering::Relaxed);
                if due && !hand_over(&mut batch, shared) {
                    return;
                }
            }
            Err(Errno::AGAIN) => {
                // Nothing more for now: what was read goes to the pump before waiting.
                if !batch.is_empty() && !hand_over(&mut batch, shared) {
                    return;
                }
                let mut fds =
                    [PollFd::new(master, PollFlags::IN), PollFd::new(stop, PollFlags::IN)];
                match rustix::event::poll(&mut fds, None) {
                    // The stop pipe's other end is closed (the reader was dropped).
                    Ok(_) if !fds[1].revents().is_empty() => return,
                    Ok(_) | Err(Errno::INTR) => {}
                    Err(_) => break,
                }
            }
            Err(Errno::INTR) => {}
            // EIO: the last holder of the terminal's other side closed it — the end of output.
            Err(_) => break,
        }
    }
    if !batch.is_empty() && !hand_over(&mut batch, shared) {
        return;
    }
    let mut state = shared.lock();
    state.ended = true;
    let waker = state.waker.take();
    drop(state);
    if let Some(waker) = waker {
        waker.wake();
    }
}

/// Moves `batch` into the pump's buffer — the buffer itself when the pump's is empty, a copy
/// otherwise — once that has room, and wakes the pump if it should look. `false` if the
/// reader was dropped meanwhile: the thread stops.
fn hand_over(batch: &mut BytesMut, shared: &Shared) -> bool {
    let mut state = shared.lock();
    while state.buffer.len() >= PTY_BUFFERED_BYTES && !state.dropped {
        state = shared.space.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
    }
    if state.dropped {
        return false;
    }
    let first = state.buffer.is_empty();
    if first {
        std::mem::swap(&mut state.buffer, batch);
    } else {
        state.buffer.extend_from_slice(batch);
    }
    let waker = state.waker_due(first, shared.eager.load(Ordering::Relaxed));
    drop(state);
    // What the swap left here is the pump's old buffer, emptied by it: its room is reused.
    batch.clear();
    if let Some(waker) = waker {
        waker.wake();
    }
    true
}

/// A terminal's output as the thread read it. Dropped, the thread stops (and closes its
/// handle on the terminal).
pub(crate) struct PtyReader {
    shared: Arc<Shared>,
    /// Wakes the pump when lingering output is due.
    linger: Pin<Box<tokio::time::Sleep>>,
    /// The write end of the thread's stop pipe: dropped with the reader, it wakes the thread's
    /// `poll`.
    _stop: OwnedFd,
}

impl AsyncRead for PtyReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let mut state = this.shared.lock();
        let mut at = state.hand_over_at(this.shared.eager.load(Ordering::Relaxed));
        if let Some(due) = at.filter(|&due| due > Instant::now()) {
            // Lingering: the timer wakes this task when it is due (or the thread, sooner, if a
            // whole chunk comes).
            this.linger.as_mut().reset(due.into());
            if this.linger.as_mut().poll(cx).is_ready() {
                at = Some(Instant::now());
            }
        }
        if at.is_some_and(|due| due <= Instant::now()) {
            let n = buf.remaining().min(state.buffer.len());
            buf.put_slice(&state.buffer[..n]);
            state.buffer.advance(n);
            state.last_handed = Some(Instant::now());
            drop(state);
            this.shared.space.notify_one();
            return Poll::Ready(Ok(()));
        }
        if state.ended && state.buffer.is_empty() {
            // Nothing put: the end of output.
            return Poll::Ready(Ok(()));
        }
        match &mut state.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            waker => *waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl PtyReader {
    /// A handle that makes this reader hand over what it has without lingering, for the pump
    /// to use once the process exited.
    pub(crate) fn eager_handle(&self) -> PtyEager {
        PtyEager(self.shared.clone())
    }
}

/// Makes a [`PtyReader`] hand over what it has at once from now on ([`PtyReader::eager_handle`]).
pub(crate) struct PtyEager(Arc<Shared>);

impl PtyEager {
    pub(crate) fn now(&self) {
        self.0.eager.store(true, Ordering::Relaxed);
    }
}

impl Drop for PtyReader {
    fn drop(&mut self) {
        self.shared.lock().dropped = true;
        self.shared.space.notify_one();
    }
}

/// A terminal's input.
pub(crate) struct PtyWriter(AsyncFd<OwnedFd>);

impl AsyncWrite for PtyWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.0.poll_write_ready(cx))?;
            match guard
                .try_io(|fd| rustix::io::write(fd.get_ref().as_fd(), buf).map_err(Into::into))
            {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// A terminal has no end of input of its own: the program reads one when the line
    /// discipline sees its EOF character. Closing input leaves the terminal as it is.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
