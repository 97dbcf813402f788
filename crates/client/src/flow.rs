//! How much a client holds for callers that have not read it yet, and what happens past that.
//!
//! The server's retained output is the backlog; the client holds only a window of it. A
//! process handle is full at [`HANDLE_BUFFER_BYTES`] of updates its caller has not taken, and
//! everything the client holds for one process (those updates, early events, live events held
//! during a catch-up) stays within [`HANDLE_MEMORY_BYTES`]; besides, a connection has in
//! flight between its socket and the handles at most [`CONNECTION_EVENT_QUEUE`] events and
//! [`CONNECTION_QUEUE_BYTES`] of their bytes, shared by its processes. When a handle is full,
//! [`crate::ClientOptions::full_handle_pause`] decides:
//!
//! - For a moment (the default, [`DEFAULT_FULL_HANDLE_PAUSE`]), the connection pauses as
//!   below: a caller that was only slow for a moment (a busy machine) loses nothing and holds
//!   up nobody for long. Then, or at once with a pause of zero, the handle falls behind:
//! - Falling behind: the handle stops taking live output. When its caller has read it down
//!   to [`RESUME_BELOW_BYTES`], it catches up from the server's retained output with `process/read` pages, in order, and then follows live
//!   output again. Other handles and calls are not held up. If the server no longer holds the
//!   output the handle fell behind on (a chatty process, a caller that stopped for long), the
//!   handle fails and says so: nothing is skipped silently.
//! - Pausing the connection (for as long as it takes with `None`): the client stops reading
//!   the connection until the handle is read down to [`RESUME_BELOW_BYTES`]. The server's own
//!   output budget then holds the process back (its pipe fills and it blocks, as under `ssh`), so no byte is ever lost, at
//!   the price of holding up every other handle and every call's answer meanwhile. Right for
//!   one stream into a slow consumer (`tether exec … | less`); wrong for a caller that keeps
//!   handles it does not read.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::reorder::MAX_PENDING_EVENT_BYTES;

/// How long a full handle may hold the connection paused before it falls behind instead:
/// long enough to ride out a caller descheduled on a busy machine (at 700 MB/s, a 4 MiB
/// buffer fills in 6 ms), short enough that a caller which stopped reading one handle holds
/// up the others and every answer for no more than a moment.
pub const DEFAULT_FULL_HANDLE_PAUSE: Duration = Duration::from_secs(2);

pub(crate) use tether_engine::exec::update_cost;
pub use tether_engine::exec::{HANDLE_BUFFER_BYTES, RESUME_BELOW_BYTES, UPDATE_OVERHEAD_BYTES};

/// Most bytes the client holds for one process at any moment, wherever they wait: updates its
/// handle's caller has not taken, early events waiting in the reorder buffer for a gap to
/// close, and live events held while a catch-up reads the backlog — each event counted with
/// [`UPDATE_OVERHEAD_BYTES`], as its handle counts it. Events past it are not held: a handle
/// that would go over falls behind, a catch-up drops the live events it cannot hold, and the
/// server's retained output gives both back later.
///
/// The handle's window ([`HANDLE_BUFFER_BYTES`], where a handle counts as full) and one
/// reorder buffer's worth ([`MAX_PENDING_EVENT_BYTES`]) above it: room for what is still on
/// its way when a handle pauses the connection (the reader's queue, [`CONNECTION_QUEUE_BYTES`],
/// and the event in the reader's hand) or for events a server sent out of order, so the
/// ordinary course never meets the bound. What it cuts is live output arriving while a
/// catch-up reads, past the room the handle leaves: read back from the server's retained
/// output instead.
pub const HANDLE_MEMORY_BYTES: usize = HANDLE_BUFFER_BYTES + MAX_PENDING_EVENT_BYTES;

/// Events queued between a connection's socket reader and the client's router. The router
/// never waits (handles are bounded by dropping to the server's backlog or by pausing the
/// reader, never by blocking the router), so this only absorbs scheduling jitter; a reader that
/// finds it full stops reading the socket until the router catches up.
pub const CONNECTION_EVENT_QUEUE: usize = 64;

/// Bytes of output and body deltas queued between a connection's socket reader and the
/// router, bounded as the events are: a reader whose next event's bytes do not fit waits for
/// the router (an event bigger than the whole queue, a 1 MiB body delta, goes alone). It only
/// has to keep the reader moving; the socket's own buffer absorbs the rest. 512 KiB is what 64
/// events of the reference's 8 KiB chunks hold: eight of Tether's 64 KiB chunks. At 4 MiB, a
/// stalled `tether exec` held 1.3 MB more of Tether's chunks than of the reference's.
pub const CONNECTION_QUEUE_BYTES: usize = 512 * 1024;

/// An event's share of [`CONNECTION_QUEUE_BYTES`], given back when the event is dropped, once
/// the router has routed it.
#[derive(Debug, Default)]
pub(crate) struct Queued {
    /// Held, never read: dropping it gives the room back.
    _room: Option<OwnedSemaphorePermit>,
}

/// Something that holds a connection paused and can fall behind instead (a registration).
pub(crate) trait FallBehind: Send + Sync {
    /// Stops pausing the connection (releasing the gate, if it held it) and falls behind.
    fn fall_behind(&self);
}

/// How many full handles pause the connection, shared by the client and its connections'
/// readers: a reader whose connection is the session's current one reads nothing while it is
/// above zero — for at most `patience`, after which the full handles fall behind instead.
pub(crate) struct PauseGate {
    /// What is left of [`CONNECTION_QUEUE_BYTES`]: shared by a session's connections, which
    /// all feed its one router.
    queue_bytes: Arc<Semaphore>,
    full_handles: watch::Sender<usize>,
    /// The handles that have paused the connection at some point and may still be pausing
    /// it: each at most once, so the list is no longer than the client's handles.
    holders: Mutex<Vec<Weak<dyn FallBehind>>>,
    patience: Option<Duration>,
}

impl PauseGate {
    pub(crate) fn new(patience: Option<Duration>) -> Self {
        Self {
            queue_bytes: Arc::new(Semaphore::new(CONNECTION_QUEUE_BYTES)),
            full_handles: watch::channel(0).0,
            holders: Mutex::new(Vec::new()),
            patience,
        }
    }

    /// Room for an event of `bytes` in the queue to the router, once the router has made it
    /// (an event bigger than the whole queue waits for all of it).
    pub(crate) async fn queue(&self, bytes: usize) -> Queued {
        let bytes = bytes.min(CONNECTION_QUEUE_BYTES) as u32;
        // The semaphore is never closed.
        Queued { _room: self.queue_bytes.clone().acquire_many_owned(bytes).await.ok() }
    }

    /// How long the connection may stay paused; `None`: as long as it takes.
    pub(crate) fn patience(&self) -> Option<Duration> {
        self.patience
    }

    /// `holder`'s handle became full. A holder calls this and [`Self::release`] with its own
    /// state locked, so its count and its own record of pausing change together; the gate
    /// never calls a holder while it holds its list's lock.
    pub(crate) fn hold(&self, holder: Weak<dyn FallBehind>) {
        {
            let mut holders = self.holders.lock().unwrap_or_else(|p| p.into_inner());
            holders.retain(|h| h.strong_count() > 0 && !Weak::ptr_eq(h, &holder));
            holders.push(holder);
        }
        self.full_handles.send_modify(|count| *count += 1);
    }

    /// A full handle was read down, or ended.
    pub(crate) fn release(&self) {
        self.full_handles.send_modify(|count| *count = count.saturating_sub(1));
    }

    /// The pause lasted its patience: every handle holding it falls behind, and the
    /// connection is read again.
    pub(crate) fn give_up_pause(&self) {
        let holders: Vec<_> = {
            let mut holders = self.holders.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::take(&mut *holders)
        };
        // Each releases the gate itself, with its own state locked: see `hold`.
        for holder in holders.iter().filter_map(Weak::upgrade) {
            holder.fall_behind();
        }
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<usize> {
        self.full_handles.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt as _;

    use super::*;

    #[tokio::test]
    async fn the_queue_to_the_router_holds_at_most_its_bytes() {
        let gate = PauseGate::new(None);
        let most = gate.queue(CONNECTION_QUEUE_BYTES - 10).await;
        let rest = gate.queue(10).await;
        // Full: the next event waits until the router lets one go.
        let mut next = Box::pin(gate.queue(1));
        assert!(next.as_mut().now_or_never().is_none());
        drop(rest);
        let next = next.await;

        // An event bigger than the whole queue waits for all of it, then goes.
        let mut big = Box::pin(gate.queue(2 * CONNECTION_QUEUE_BYTES));
        assert!(big.as_mut().now_or_never().is_none());
        drop(next);
        assert!(big.as_mut().now_or_never().is_none());
        drop(most);
        let big = big.await;
        assert!(gate.queue(1).now_or_never().is_none());
        drop(big);
        assert!(gate.queue(CONNECTION_QUEUE_BYTES).now_or_never().is_some());
    }
}
