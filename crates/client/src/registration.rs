//! A client's record of one remote process: the events published to its handle so far, the
//! ones waiting for a gap to close, what its handle holds, and where its handle listens.
//!
//! Bounded whatever the caller does (see [`crate::flow`]): the handle's queue by
//! [`HANDLE_BUFFER_BYTES`], early events by the reorder buffer's limits, live events held
//! during a catch-up by [`HELD_EVENT_BYTES`]. A handle that is full either falls behind (and
//! is caught up later from the server's retained output) or pauses the connection.

use std::sync::{Arc, Mutex, MutexGuard};

use tether_engine::{ProcessEvent, ProcessFailure, ProcessFailureKind, ProcessUpdate};
use tether_protocol::ProcessId;
use tether_protocol::process::ReadResponse;
use tokio::sync::mpsc;

use crate::flow::{
    FallBehind, HANDLE_BUFFER_BYTES, HELD_EVENT_BYTES, PauseGate, RESUME_BELOW_BYTES, update_cost,
};
use crate::reconcile::{Known, ReconcileError, reconcile};
use crate::reorder::{ReorderBuffer, event_bytes};

/// Most output bytes asked for in one catch-up page.
pub(crate) const CATCH_UP_PAGE_BYTES: usize = 1024 * 1024;

pub(crate) struct Registration {
    pub process_id: ProcessId,
    state: Mutex<State>,
    /// Whether a full handle pauses the connection (and the gate it holds while it does), or
    /// falls behind at once.
    gate: Option<Arc<PauseGate>>,
}

struct State {
    reorder: ReorderBuffer,
    exit_published: bool,
    /// Its start succeeded, so a reconnect catches it up (an ambiguous start is not).
    started: bool,
    /// Closed or failed: nothing more is published.
    finished: Option<Finished>,
    /// Where the handle listens; let go after the last update, which ends the handle's stream.
    updates: Option<mpsc::UnboundedSender<ProcessUpdate>>,
    /// What the updates sent to the handle and not yet taken cost ([`update_cost`]): the
    /// channel is unbounded, this is its bound.
    queued: usize,
    /// This handle is full and holds the connection paused.
    pausing: bool,
    next_write_id: u64,
    /// Behind the server: a catch-up (after a reconnect, or for a handle that fell behind)
    /// reads what was missed from the server's retained output. Live events meanwhile are held
    /// here, up to [`HELD_EVENT_BYTES`], instead of the reorder buffer: the gap they wait on is
    /// the one the catch-up is about to fill.
    catching_up: bool,
    held: Vec<ProcessEvent>,
    held_bytes: usize,
    /// Past [`HELD_EVENT_BYTES`], live events are dropped (the oldest held are kept, so what
    /// is held stays one run) until the catch-up's next answer is merged.
    dropping: bool,
    /// The newest sequence dropped so: a catch-up answer that does not reach it does not end
    /// the catch-up, and another page reads the rest back.
    dropped_through: u64,
    /// A catch-up task (a recovery's, or a refill) is working on this process.
    catch_up_running: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finished {
    Closed,
    Failed(ProcessFailure),
}

/// What a catch-up may do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextPage {
    /// Read a page of at most this many bytes.
    Read(usize),
    /// The handle is too full for another page: wait until its caller reads it.
    HandleFull,
    /// Nothing more to catch up: the process is finished.
    Finished,
}

impl Registration {
    /// A registration whose full handle pauses the connection through `gate`, or falls behind
    /// at once without one.
    pub(crate) fn new(
        process_id: ProcessId,
        gate: Option<Arc<PauseGate>>,
    ) -> (Self, mpsc::UnboundedReceiver<ProcessUpdate>) {
        let (updates, receiver) = mpsc::unbounded_channel();
        let state = State {
            reorder: ReorderBuffer::new(0),
            exit_published: false,
            started: false,
            finished: None,
            updates: Some(updates),
            queued: 0,
            pausing: false,
            next_write_id: 1,
            catching_up: false,
            held: Vec::new(),
            held_bytes: 0,
            dropping: false,
            dropped_through: 0,
            catch_up_running: false,
        };
        (Self { process_id, state: Mutex::new(state), gate }, receiver)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn mark_started(&self) {
        self.state().started = true;
    }

    pub(crate) fn is_started(&self) -> bool {
        self.state().started
    }

    pub(crate) fn finished(&self) -> Option<Finished> {
        self.state().finished.clone()
    }

    pub(crate) fn last_published(&self) -> u64 {
        self.state().reorder.last_published()
    }

    /// What the handle holds for its caller now (bytes of updates not yet taken).
    pub(crate) fn queued_bytes(&self) -> usize {
        self.state().queued
    }

    /// A fresh write id: decimal strings from "1", kept by a write across its retries so the
    /// server applies it once.
    pub(crate) fn next_write_id(&self) -> String {
        let mut state = self.state();
        let id = state.next_write_id;
        state.next_write_id += 1;
        id.to_string()
    }

    /// Treats everything up to `seq` as seen: for a handle attached after that output was
    /// dropped by the server.
    pub(crate) fn skip_to(&self, seq: u64) {
        let mut state = self.state();
        if state.reorder.last_published() < seq {
            state.reorder = ReorderBuffer::new(seq);
        }
    }

    /// A reconnect (or an attach) is about to catch this process up: hold live events until
    /// it has.
    pub(crate) fn begin_catch_up(&self) {
        self.state().catching_up = true;
    }

    /// Claims the catch-up of this process for the caller's task; false if another task has
    /// it (it then also does what the caller would have).
    pub(crate) fn claim_catch_up(&self) -> bool {
        let mut state = self.state();
        !std::mem::replace(&mut state.catch_up_running, true)
    }

    /// A catch-up task stops (caught up, waiting for its caller to read, or failed). Returns
    /// true when it should go on instead: the handle was read down meanwhile and the process
    /// is still behind — nobody else would start its catch-up then.
    ///
    /// Stopped to wait for the caller, with no read of its own in flight, a handle that may
    /// pause the connection does: the server then holds the process back while the caller
    /// catches up, instead of running ahead of what it retains (live output would only be
    /// dropped meanwhile). The pause has its patience, as any other.
    pub(crate) fn end_catch_up(self: &Arc<Self>) -> bool {
        let mut state = self.state();
        let behind = state.catching_up && state.finished.is_none();
        let go_on = behind && state.queued <= RESUME_BELOW_BYTES;
        state.catch_up_running = go_on;
        if behind && !go_on && self.gate.is_some() && !state.pausing {
            state.pausing = true;
            self.hold_gate();
        }
        go_on
    }

    /// Before a catch-up page is asked for: how much it may bring.
    pub(crate) fn next_page(&self) -> NextPage {
        let state = self.state();
        if state.finished.is_some() {
            return NextPage::Finished;
        }
        if state.queued > RESUME_BELOW_BYTES {
            return NextPage::HandleFull;
        }
        NextPage::Read(CATCH_UP_PAGE_BYTES)
    }

    /// A catch-up task stops for a reason of its own (its connection dropped during a
    /// resume, or the process was lost): the claim goes, so the next one can take it.
    pub(crate) fn release_catch_up(&self) {
        self.state().catch_up_running = false;
    }

    /// The handle took `update`. Returns true when that made room for a catch-up nobody runs
    /// yet: the caller (the handle) starts one. A paused connection is let go here too.
    pub(crate) fn taken(&self, update: &ProcessUpdate) -> bool {
        let mut state = self.state();
        state.queued = state.queued.saturating_sub(update_cost(update));
        if state.queued > RESUME_BELOW_BYTES {
            return false;
        }
        // Read down: a paused connection is read again (a refill needs its answers).
        if std::mem::take(&mut state.pausing) {
            self.release_gate();
        }
        let refill = state.catching_up && state.finished.is_none() && !state.catch_up_running;
        if refill {
            state.catch_up_running = true;
        }
        refill
    }

    /// The handle was dropped: nothing listens any more, and nothing it held holds anyone up.
    pub(crate) fn detach_handle(&self) {
        let mut state = self.state();
        state.updates = None;
        state.queued = 0;
        if std::mem::take(&mut state.pausing) {
            self.release_gate();
        }
    }

    /// Takes a live event; publishes what is now in order. Returns the failure, if the event
    /// made the process impossible to follow.
    pub(crate) fn push(self: &Arc<Self>, event: ProcessEvent) -> Option<ProcessFailure> {
        let mut state = self.state();
        if state.finished.is_some() || event.seq() <= state.reorder.last_published() {
            return None;
        }
        if state.catching_up {
            hold(&mut state, event);
            return None;
        }
        if state.queued + event_bytes(&event) > HANDLE_BUFFER_BYTES && self.gate.is_none() {
            // Full, and falling behind is the policy: the catch-up reads this and what follows.
            state.catching_up = true;
            hold(&mut state, event);
            return None;
        }
        let outcome = match state.reorder.push(event) {
            Ok(ready) => {
                ready.into_iter().for_each(|event| publish(&mut state, event));
                None
            }
            Err(error) => {
                let failure = ProcessFailure::new(
                    ProcessFailureKind::Protocol,
                    format!("process {} failed: {error}", self.process_id),
                );
                fail(&mut state, failure.clone());
                Some(failure)
            }
        };
        if state.queued > HANDLE_BUFFER_BYTES
            && state.finished.is_none()
            && !std::mem::replace(&mut state.pausing, true)
        {
            self.hold_gate();
        }
        self.unlock(state);
        outcome
    }

    /// Publishes the leading run of a catch-up page: chunks that follow what was published
    /// with no hole between them. Pages let a large backlog be caught up in parts that each
    /// survive a later drop (the next attempt reads on from here), where one read of it all
    /// might never arrive whole over a flaky link. Returns whether the whole page was such a
    /// run, so paging may go on; false when it held a hole (an exit, or output the server
    /// dropped) or nothing new: the rest then comes from one complete read, whose answer
    /// places exits and closes (see [`crate::reconcile`]).
    pub(crate) fn publish_page(&self, page: &ReadResponse) -> bool {
        let mut state = self.state();
        if state.finished.is_some() || page.failure.is_some() {
            return false;
        }
        let last = state.reorder.last_published();
        // Sequences come from the server: a page past the last number there is is no run.
        let Some(first_expected) = last.checked_add(1) else { return false };
        let fresh: Vec<_> = page.chunks.iter().filter(|chunk| chunk.seq > last).collect();
        let run = fresh
            .iter()
            .zip(first_expected..u64::MAX)
            .take_while(|(chunk, expected)| chunk.seq == *expected)
            .count();
        if run == 0 {
            return false;
        }
        for chunk in &fresh[..run] {
            let event = ProcessEvent::Output {
                process_id: self.process_id.clone(),
                seq: chunk.seq,
                stream: chunk.stream,
                chunk: chunk.chunk.0.clone(),
            };
            publish(&mut state, event);
        }
        let pending: Vec<ProcessEvent> = state.reorder.pending().cloned().collect();
        let whole = restart_ordering(&mut state, &self.process_id, last + run as u64, pending)
            && run == fresh.len();
        self.unlock(state);
        whole
    }

    /// Merges a catch-up read into the stream (see [`crate::reconcile`]). Returns whether the
    /// process is now caught up: not if live events past this read's end were dropped, when
    /// the catch-up reads on.
    pub(crate) fn catch_up(&self, read: &ReadResponse) -> Result<bool, ReconcileError> {
        let mut state = self.state();
        if state.finished.is_some() {
            return Ok(true);
        }
        let complete = state.dropped_through < read.next_seq;
        let held = std::mem::take(&mut state.held);
        state.held_bytes = 0;
        // Live events are held again from here; the pages read what was dropped.
        state.dropping = false;
        let mut pending: Vec<ProcessEvent> = state.reorder.pending().cloned().collect();
        pending.extend(held);
        pending.sort_by_key(ProcessEvent::seq);
        pending.dedup_by_key(|e| e.seq());
        let known = Known {
            process_id: &self.process_id,
            last_published: state.reorder.last_published(),
            exit_published: state.exit_published,
            pending: pending.clone(),
        };
        let last_published = state.reorder.last_published();
        let events = reconcile(known, read)?;
        // `reconcile` returns exactly the events after `last_published` through the read's end.
        let caught_up_to = events.last().map_or(last_published, ProcessEvent::seq);
        for event in events {
            publish(&mut state, event);
        }
        if complete {
            state.catching_up = false;
            state.dropped_through = 0;
            restart_ordering(&mut state, &self.process_id, caught_up_to, pending);
        } else {
            state.reorder = ReorderBuffer::new(caught_up_to);
        }
        self.unlock(state);
        Ok(complete)
    }

    /// Ends the stream with a failure (no-op if already finished).
    pub(crate) fn fail(&self, failure: ProcessFailure) {
        let mut state = self.state();
        if state.finished.is_none() {
            fail(&mut state, failure);
        }
        self.unlock(state);
    }

    /// Lets go of the state; if the process finished while its handle paused the connection,
    /// the pause is over.
    fn unlock(&self, mut state: MutexGuard<'_, State>) {
        if state.finished.is_some() && std::mem::take(&mut state.pausing) {
            self.release_gate();
        }
    }

    /// This handle pauses the connection (its `pausing` was just set). Called with the state
    /// locked, as [`Self::release_gate`] is: the gate's count changes together with `pausing`,
    /// so a read that ends a pause can never be counted before the pause it ends (which would
    /// leave the connection paused with nothing holding it). The gate never calls back into a
    /// registration while it holds a lock of its own.
    fn hold_gate(self: &Arc<Self>) {
        if let Some(gate) = &self.gate {
            let me: Arc<dyn FallBehind> = self.clone();
            gate.hold(Arc::downgrade(&me));
        }
    }

    fn release_gate(&self) {
        if let Some(gate) = &self.gate {
            gate.release();
        }
    }
}

impl FallBehind for Registration {
    /// The connection was paused on this handle for too long: it falls behind instead, and
    /// catches up from the server once its caller reads it.
    fn fall_behind(&self) {
        let mut state = self.state();
        if !std::mem::take(&mut state.pausing) {
            return;
        }
        self.release_gate();
        if state.finished.is_none() {
            state.catching_up = true;
        }
    }
}

/// Holds a live event for the catch-up under way, within [`HELD_EVENT_BYTES`]; past that,
/// this and every later event until the catch-up's next answer is dropped (the server still
/// has them: the pages read them back), the oldest held kept.
fn hold(state: &mut State, event: ProcessEvent) {
    let bytes = event_bytes(&event).max(1);
    if state.dropping || state.held_bytes + bytes > HELD_EVENT_BYTES {
        state.dropping = true;
        state.dropped_through = state.dropped_through.max(event.seq());
        return;
    }
    state.held_bytes += bytes;
    state.held.push(event);
}

/// Restarts ordering after `through` (just published) and feeds it the `pending` events
/// beyond, publishing what is then in order. Returns false if that failed the process.
fn restart_ordering(
    state: &mut State,
    process_id: &ProcessId,
    through: u64,
    pending: Vec<ProcessEvent>,
) -> bool {
    state.reorder = ReorderBuffer::new(through);
    for event in pending.into_iter().filter(|e| e.seq() > through) {
        match state.reorder.push(event) {
            Ok(ready) => ready.into_iter().for_each(|e| publish(state, e)),
            Err(error) => {
                let message = format!("process {process_id} failed: {error}");
                fail(state, ProcessFailure::new(ProcessFailureKind::Protocol, message));
                return false;
            }
        }
    }
    true
}

fn publish(state: &mut State, event: ProcessEvent) {
    if state.finished.is_some() {
        return;
    }
    match &event {
        ProcessEvent::Exited { .. } => state.exit_published = true,
        ProcessEvent::Closed { .. } => state.finished = Some(Finished::Closed),
        ProcessEvent::Output { .. } => {}
    }
    send(state, ProcessUpdate::Event(event));
}

fn fail(state: &mut State, failure: ProcessFailure) {
    state.finished = Some(Finished::Failed(failure.clone()));
    send(state, ProcessUpdate::Failed(failure));
}

fn send(state: &mut State, update: ProcessUpdate) {
    let Some(updates) = &state.updates else { return };
    let cost = update_cost(&update);
    // A handle that was dropped no longer listens; the stream still advances.
    if updates.send(update).is_ok() {
        state.queued += cost;
    }
    if state.finished.is_some() {
        state.updates = None;
    }
}

#[cfg(test)]
mod tests {
    use std::thread;

    use bytes::Bytes;
    use tether_protocol::ByteChunk;
    use tether_protocol::process::{ExecOutputStream, ProcessOutputChunk, ReadResponse};

    use super::*;

    fn out(seq: u64) -> ProcessEvent {
        ProcessEvent::Output {
            process_id: "p".into(),
            seq,
            stream: ExecOutputStream::Stdout,
            chunk: Bytes::from(format!("c{seq}")),
        }
    }

    fn closed(seq: u64) -> ProcessEvent {
        ProcessEvent::Closed { process_id: "p".into(), seq }
    }

    /// The sequences published so far, and whether the stream has ended.
    fn published(updates: &mut mpsc::UnboundedReceiver<ProcessUpdate>) -> (Vec<u64>, bool) {
        let mut seqs = Vec::new();
        loop {
            match updates.try_recv() {
                Ok(ProcessUpdate::Event(event)) => seqs.push(event.seq()),
                Ok(ProcessUpdate::Failed(failure)) => panic!("failed: {failure}"),
                Err(mpsc::error::TryRecvError::Empty) => return (seqs, false),
                Err(mpsc::error::TryRecvError::Disconnected) => return (seqs, true),
            }
        }
    }

    fn read_of(chunks: &[u64], next_seq: u64) -> ReadResponse {
        ReadResponse {
            chunks: chunks
                .iter()
                .map(|&seq| ProcessOutputChunk {
                    seq,
                    stream: ExecOutputStream::Stdout,
                    chunk: ByteChunk::from(format!("c{seq}").into_bytes()),
                })
                .collect(),
            next_seq,
            exited: false,
            exit_code: None,
            closed: false,
            failure: None,
            sandbox_denied: false,
            oldest_retained_seq: None,
        }
    }

    #[test]
    fn a_page_publishes_its_leading_run_and_says_whether_paging_may_go_on() {
        let (registration, mut updates) = Registration::new("p".into(), None);
        let registration = Arc::new(registration);
        registration.push(out(1));
        registration.push(out(5)); // early, waits in the reorder buffer
        registration.begin_catch_up();
        // A page with an already published chunk and a whole run after it: paging goes on.
        assert!(registration.publish_page(&read_of(&[1, 2, 3], 4)));
        assert_eq!(published(&mut updates), (vec![1, 2, 3], false));
        // A hole (an exit, or lost output) stops paging after the run before it.
        assert!(!registration.publish_page(&read_of(&[4, 6], 7)));
        assert_eq!(published(&mut updates), (vec![4, 5], false), "the early 5 now in order");
        // Nothing new: stop.
        assert!(!registration.publish_page(&read_of(&[], 7)));
        assert_eq!(registration.last_published(), 5);
        // The complete read places the rest.
        registration.catch_up(&read_of(&[6], 7)).unwrap();
        assert_eq!(published(&mut updates), (vec![6], false));
    }

    #[test]
    fn events_held_during_a_catch_up_are_published_once_in_order() {
        let (registration, mut updates) = Registration::new("p".into(), None);
        let registration = Arc::new(registration);
        registration.push(out(1));
        registration.begin_catch_up();
        // Live events from the new connection, ahead of the catch-up read's answer: one the
        // read also returns, one past it, and a duplicate.
        registration.push(out(4));
        registration.push(out(3));
        registration.push(out(4));
        assert_eq!(published(&mut updates), (vec![1], false), "held while catching up");
        let read = ReadResponse {
            chunks: [2, 3]
                .map(|seq| ProcessOutputChunk {
                    seq,
                    stream: ExecOutputStream::Stdout,
                    chunk: ByteChunk::from(format!("c{seq}").into_bytes()),
                })
                .to_vec(),
            next_seq: 4,
            exited: false,
            exit_code: None,
            closed: false,
            failure: None,
            sandbox_denied: false,
            oldest_retained_seq: None,
        };
        registration.catch_up(&read).unwrap();
        assert_eq!(published(&mut updates), (vec![2, 3, 4], false));
        // Live again: a late duplicate is dropped, the close ends the stream.
        registration.push(out(4));
        registration.push(closed(5));
        assert_eq!(published(&mut updates), (vec![5], true));
    }

    #[test]
    fn the_update_stream_ends_after_a_failure() {
        let (registration, mut updates) = Registration::new("p".into(), None);
        let registration = Arc::new(registration);
        registration.push(out(1));
        let gone = ProcessFailure::new(ProcessFailureKind::OutputLost, "gone");
        registration.fail(gone.clone());
        registration.fail(ProcessFailure::new(ProcessFailureKind::Protocol, "again"));
        registration.push(out(2));
        assert_eq!(updates.try_recv(), Ok(ProcessUpdate::Event(out(1))));
        assert_eq!(updates.try_recv(), Ok(ProcessUpdate::Failed(gone)));
        assert_eq!(updates.try_recv(), Err(mpsc::error::TryRecvError::Disconnected));
    }

    /// How many times the race between a full handle's pause and its caller's read is run.
    const ROUNDS: usize = 2_000;

    /// A handle that fills (the reader pausing the connection) while its caller reads it down
    /// (letting the connection go) on another thread: however the two interleave, once the
    /// caller has read everything, nothing holds the connection paused. A pause counted after
    /// the read that ended it would keep the connection paused for ever.
    #[test]
    fn a_pause_and_the_read_that_ends_it_never_cross() {
        // The largest chunk a process event may carry; 6 MiB overfill the handle's 4 MiB.
        let chunk = Bytes::from(vec![b'x'; 1024 * 1024]);
        const EVENTS: u64 = 6;
        for round in 0..ROUNDS {
            let gate = Arc::new(PauseGate::new(None));
            let (registration, mut updates) =
                Registration::new("p".into(), Some(Arc::clone(&gate)));
            let registration = Arc::new(registration);
            let pusher = {
                let registration = Arc::clone(&registration);
                let chunk = chunk.clone();
                thread::spawn(move || {
                    for seq in 1..=EVENTS {
                        let stream = ExecOutputStream::Stdout;
                        let chunk = chunk.clone();
                        let event =
                            ProcessEvent::Output { process_id: "p".into(), seq, stream, chunk };
                        registration.push(event);
                    }
                })
            };
            let mut taken = 0;
            while taken < EVENTS {
                match updates.try_recv() {
                    Ok(update) => {
                        registration.taken(&update);
                        taken += 1;
                    }
                    Err(mpsc::error::TryRecvError::Empty) => thread::yield_now(),
                    Err(closed) => panic!("round {round}: {closed:?} after {taken} updates"),
                }
            }
            pusher.join().unwrap();
            let paused = *gate.subscribe().borrow();
            assert_eq!(paused, 0, "round {round}: the connection stays paused with nothing held");
        }
    }
}
