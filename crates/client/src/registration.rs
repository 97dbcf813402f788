//! A client's record of one remote process: the events published to its handle so far, the
//! ones waiting for a gap to close, what its handle holds, and where its handle listens.
//!
//! Where the record stands is four small state machines, each a type: the process's
//! [`Stage`] (starting, running, finished), whether its handle [`Follow`]s live events or is
//! catching up (and the live events a catch-up holds meanwhile), whether its being full puts
//! [`Pressure`] on the connection (and the gate it holds while it does), and whether a
//! [`CatchUpTask`] works on it.
//!
//! Bounded whatever the caller does (see [`crate::flow`]): everything held for one process —
//! its handle's queue, early events in the reorder buffer, live events held during a
//! catch-up — counts against one bound, [`HANDLE_MEMORY_BYTES`], enforced here, where events
//! are held. A handle that is full either falls behind (and is caught up later from the
//! server's retained output) or pauses the connection.

use std::sync::{Arc, Mutex, MutexGuard};

use tether_engine::{ProcessEvent, ProcessFailure, ProcessFailureKind, ProcessUpdate};
use tether_protocol::ProcessId;
use tether_protocol::process::ReadResponse;
use tokio::sync::mpsc;

use crate::flow::{
    FallBehind, HANDLE_BUFFER_BYTES, HANDLE_MEMORY_BYTES, PauseGate, RESUME_BELOW_BYTES,
    UPDATE_OVERHEAD_BYTES, update_cost,
};
use crate::reconcile::{Known, ReconcileError, reconcile};
use crate::reorder::{
    MAX_PENDING_EVENT_BYTES, MAX_PENDING_EVENTS, ReorderBuffer, ReorderError, event_bytes,
};

/// Most output bytes asked for in one catch-up page.
pub(crate) const CATCH_UP_PAGE_BYTES: usize = 1024 * 1024;

// A catch-up asks for a page only while its handle holds at most `RESUME_BELOW_BYTES`; the
// reorder buffer holds at most its own bounds; held live events give way to a page. So the
// first chunk of a page (at most `MAX_PENDING_EVENT_BYTES`, as any event) always fits under
// the bound, and every page moves the catch-up on: a page that could publish nothing would be
// asked for again for ever.
const _: () = assert!(
    RESUME_BELOW_BYTES
        + MAX_PENDING_EVENT_BYTES
        + MAX_PENDING_EVENTS * UPDATE_OVERHEAD_BYTES
        + MAX_PENDING_EVENT_BYTES
        + UPDATE_OVERHEAD_BYTES
        <= HANDLE_MEMORY_BYTES
);

pub(crate) struct Registration {
    pub process_id: ProcessId,
    state: Mutex<State>,
    /// The gate a full handle pauses the connection through; `None`: a full handle falls
    /// behind at once instead.
    gate: Option<Arc<PauseGate>>,
}

struct State {
    /// What was published, and early events waiting for a gap to close.
    reorder: ReorderBuffer,
    /// Whether the exit was among what was published: a catch-up places it otherwise.
    exit_published: bool,
    stage: Stage,
    follow: Follow,
    pressure: Pressure,
    catch_up: CatchUpTask,
    /// Where the handle listens; let go after the last update, which ends the handle's stream.
    updates: Option<mpsc::UnboundedSender<ProcessUpdate>>,
    /// What the updates sent to the handle and not yet taken cost ([`update_cost`]): the
    /// channel is unbounded, this is its bound.
    queued: usize,
}

/// Where the process stands, as this client follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stage {
    /// Registered while its start is in flight, or after a start that may or may not have run
    /// (which is terminated, never adopted): a reconnect does not catch it up.
    Starting,
    /// Its start succeeded, or it was attached: a reconnect catches it up.
    Running,
    /// Closed or failed: nothing more is published.
    Finished(Finished),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finished {
    Closed,
    Failed(ProcessFailure),
}

/// Whether the handle follows live events or is behind the server.
enum Follow {
    /// Live events go to the handle through the reorder buffer as they come.
    Live,
    /// Behind the server: a catch-up (after a reconnect, for a handle that fell behind, for an
    /// attach) reads what was missed from the server's retained output. Live events meanwhile
    /// are held instead of going to the reorder buffer: the gap they would wait on is the one
    /// the catch-up is about to fill.
    CatchingUp(Held),
}

/// Live events held while a catch-up runs, merged in with its next answer.
#[derive(Default)]
struct Held {
    events: Vec<ProcessEvent>,
    /// What `events` cost against [`HANDLE_MEMORY_BYTES`] ([`event_cost`]).
    cost: usize,
    dropped: Dropped,
}

/// Live events a catch-up did not hold for want of room under [`HANDLE_MEMORY_BYTES`]. The
/// server still has them: the catch-up reads them back.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Dropped {
    #[default]
    Nothing,
    /// Dropping now: this and every later live event until the catch-up's next merge, so what
    /// is held stays the oldest run. `through`: the newest sequence dropped.
    Now { through: u64 },
    /// Dropped before the catch-up's last merge, through `through`; live events are held
    /// again meanwhile. A merge whose read does not reach `through` does not end the catch-up:
    /// another page reads the rest back.
    Earlier { through: u64 },
}

/// What the handle's being full does to the connection.
enum Pressure {
    /// Nothing: the handle has room, or falls behind when it has none.
    Free,
    /// The handle is full and holds the connection paused through this gate until its caller
    /// reads it down to [`RESUME_BELOW_BYTES`], its process ends, or the pause outlasts its
    /// patience.
    Pausing(Arc<PauseGate>),
}

/// Whether a task catches this process up: one at a time (a claim), so a recovery and a
/// refill never read the same backlog twice. Apart from [`Follow`] because the task that
/// merged the last answer (the handle following live events again) still holds the claim
/// until it decides whether to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CatchUpTask {
    Idle,
    Running,
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
            stage: Stage::Starting,
            follow: Follow::Live,
            pressure: Pressure::Free,
            catch_up: CatchUpTask::Idle,
            updates: Some(updates),
            queued: 0,
        };
        (Self { process_id, state: Mutex::new(state), gate }, receiver)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn mark_started(&self) {
        let mut state = self.state();
        if state.stage == Stage::Starting {
            state.stage = Stage::Running;
        }
    }

    /// Started and not finished: a reconnect catches it up.
    pub(crate) fn is_running(&self) -> bool {
        self.state().stage == Stage::Running
    }

    pub(crate) fn finished(&self) -> Option<Finished> {
        match &self.state().stage {
            Stage::Finished(finished) => Some(finished.clone()),
            Stage::Starting | Stage::Running => None,
        }
    }

    pub(crate) fn last_published(&self) -> u64 {
        self.state().reorder.last_published()
    }

    /// What the handle holds for its caller now (bytes of updates not yet taken).
    pub(crate) fn queued_bytes(&self) -> usize {
        self.state().queued
    }

    /// Everything held for this process now, counted against [`HANDLE_MEMORY_BYTES`].
    #[cfg(test)]
    fn holding(&self) -> usize {
        self.state().holding()
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
        self.state().fall_behind();
    }

    /// Claims the catch-up of this process for the caller's task; false if another task has
    /// it (it then also does what the caller would have).
    pub(crate) fn claim_catch_up(&self) -> bool {
        let mut state = self.state();
        std::mem::replace(&mut state.catch_up, CatchUpTask::Running) == CatchUpTask::Idle
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
        let behind = matches!(state.follow, Follow::CatchingUp(_));
        let go_on = behind && state.queued <= RESUME_BELOW_BYTES;
        state.catch_up = if go_on { CatchUpTask::Running } else { CatchUpTask::Idle };
        if behind && !go_on {
            self.pause(&mut state);
        }
        go_on
    }

    /// Before a catch-up page is asked for: how much it may bring.
    pub(crate) fn next_page(&self) -> NextPage {
        let state = self.state();
        if state.is_finished() {
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
        self.state().catch_up = CatchUpTask::Idle;
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
        state.relieve();
        let refill =
            matches!(state.follow, Follow::CatchingUp(_)) && state.catch_up == CatchUpTask::Idle;
        if refill {
            state.catch_up = CatchUpTask::Running;
        }
        refill
    }

    /// The handle was dropped: nothing listens any more, and nothing it held holds anyone up.
    pub(crate) fn detach_handle(&self) {
        let mut state = self.state();
        state.updates = None;
        state.queued = 0;
        state.relieve();
    }

    /// Takes a live event; publishes what is now in order. Returns the failure, if the event
    /// made the process impossible to follow.
    pub(crate) fn push(self: &Arc<Self>, event: ProcessEvent) -> Option<ProcessFailure> {
        let mut state = self.state();
        if state.is_finished() || event.seq() <= state.reorder.last_published() {
            return None;
        }
        if matches!(state.follow, Follow::CatchingUp(_)) {
            state.hold(event);
            return None;
        }
        // Full, where falling behind is the policy, or at the bound whatever the policy: the
        // catch-up reads this and what follows from the server.
        let full = self.gate.is_none() && state.queued + event_bytes(&event) > HANDLE_BUFFER_BYTES;
        if full || state.holding() + event_cost(&event) > HANDLE_MEMORY_BYTES {
            state.fall_behind();
            state.hold(event);
            return None;
        }
        let outcome = match state.reorder.push(event) {
            Ok(ready) => {
                ready.into_iter().for_each(|event| state.publish(event));
                None
            }
            Err(error) => {
                let failure = protocol_failure(&self.process_id, &error);
                state.fail(failure.clone());
                Some(failure)
            }
        };
        if state.queued > HANDLE_BUFFER_BYTES && !state.is_finished() {
            self.pause(&mut state);
        }
        outcome
    }

    /// Publishes the leading run of a catch-up page: chunks that follow what was published
    /// with no hole between them. Pages let a large backlog be caught up in parts that each
    /// survive a later drop (the next attempt reads on from here), where one read of it all
    /// might never arrive whole over a flaky link. Returns whether paging may go on: the whole
    /// page was such a run, or the handle ran out of room for the rest (the next page waits
    /// for its caller then); false when it held a hole (an exit, or output the server dropped)
    /// or nothing new: the rest then comes from one complete read, whose answer places exits
    /// and closes (see [`crate::reconcile`]).
    ///
    /// Live events held meanwhile give way to the page (the newest first): they come later in
    /// the stream, and the server still has them.
    pub(crate) fn publish_page(&self, page: &ReadResponse) -> bool {
        let mut state = self.state();
        if state.is_finished() || page.failure.is_some() {
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
        let mut published = 0;
        for chunk in &fresh[..run] {
            let event = ProcessEvent::Output {
                process_id: self.process_id.clone(),
                seq: chunk.seq,
                stream: chunk.stream,
                chunk: chunk.chunk.0.clone(),
            };
            let bytes = event_bytes(&event);
            if bytes > MAX_PENDING_EVENT_BYTES {
                let limit = MAX_PENDING_EVENT_BYTES;
                let error = ReorderError::EventTooLarge { seq: chunk.seq, bytes, limit };
                state.fail(protocol_failure(&self.process_id, &error));
                return false;
            }
            if !state.make_room(event_cost(&event)) {
                break;
            }
            state.publish(event);
            published += 1;
        }
        let pending: Vec<ProcessEvent> = state.reorder.pending().cloned().collect();
        let through = last + published as u64;
        let ordered = state.restart_ordering(&self.process_id, through, pending);
        ordered && (published < run || run == fresh.len())
    }

    /// Merges a catch-up read into the stream (see [`crate::reconcile`]). Returns whether the
    /// process is now caught up: not if live events past this read's end were dropped, or if
    /// the handle had no room for all of it, when the catch-up reads on.
    pub(crate) fn catch_up(&self, read: &ReadResponse) -> Result<bool, ReconcileError> {
        let mut state = self.state();
        if state.is_finished() {
            return Ok(true);
        }
        let last_published = state.reorder.last_published();
        let mut pending: Vec<ProcessEvent> = state.reorder.pending().cloned().collect();
        if let Follow::CatchingUp(held) = &state.follow {
            pending.extend(held.events.iter().cloned());
        }
        pending.retain(|event| event.seq() > last_published);
        pending.sort_by_key(ProcessEvent::seq);
        pending.dedup_by_key(|e| e.seq());
        let known = Known {
            process_id: &self.process_id,
            last_published,
            exit_published: state.exit_published,
            pending: pending.clone(),
        };
        let events = reconcile(known, read)?;
        let dropped = match std::mem::replace(&mut state.follow, Follow::Live) {
            Follow::CatchingUp(held) => held.dropped,
            Follow::Live => Dropped::Nothing,
        };
        // What was held (live and early events) is counted already; what the read brings is
        // published only while it fits beside it.
        let mut reserved: usize = pending.iter().map(event_cost).sum();
        let mut caught_up_to = last_published;
        let mut fits = true;
        for event in events {
            let cost = event_cost(&event);
            let counted = pending.binary_search_by_key(&event.seq(), ProcessEvent::seq).is_ok();
            if counted {
                reserved -= cost.min(reserved);
            } else if state.queued + reserved + cost > HANDLE_MEMORY_BYTES {
                fits = false;
                break;
            }
            caught_up_to = event.seq();
            state.publish(event);
        }
        // `reconcile` returns exactly the events after `last_published` through the read's end.
        let complete = fits && dropped.through() < read.next_seq;
        if complete {
            state.restart_ordering(&self.process_id, caught_up_to, pending);
        } else {
            // Live and early events past what was published are let go: the pages read them.
            let let_go = pending.last().map_or(0, ProcessEvent::seq);
            let through = dropped.through().max(let_go);
            let dropped = if through > 0 { Dropped::Earlier { through } } else { Dropped::Nothing };
            state.reorder = ReorderBuffer::new(caught_up_to);
            if !state.is_finished() {
                state.follow = Follow::CatchingUp(Held { dropped, ..Held::default() });
            }
        }
        Ok(complete)
    }

    /// Ends the stream with a failure (no-op if already finished).
    pub(crate) fn fail(&self, failure: ProcessFailure) {
        let mut state = self.state();
        if !state.is_finished() {
            state.fail(failure);
        }
    }

    /// This handle is full and pauses the connection, if its policy is to pause and it does
    /// not already. Called with the state locked, as [`State::relieve`] is: the gate's count
    /// changes together with [`Pressure`], so a read that ends a pause can never be counted
    /// before the pause it ends (which would leave the connection paused with nothing holding
    /// it). The gate never calls back into a registration while it holds a lock of its own.
    fn pause(self: &Arc<Self>, state: &mut State) {
        let Some(gate) = &self.gate else { return };
        if matches!(state.pressure, Pressure::Pausing(_)) || state.is_finished() {
            return;
        }
        state.pressure = Pressure::Pausing(gate.clone());
        let me: Arc<dyn FallBehind> = self.clone();
        gate.hold(Arc::downgrade(&me));
    }
}

impl FallBehind for Registration {
    /// The connection was paused on this handle for too long: it falls behind instead, and
    /// catches up from the server once its caller reads it.
    fn fall_behind(&self) {
        let mut state = self.state();
        if state.relieve() {
            state.fall_behind();
        }
    }
}

impl State {
    fn is_finished(&self) -> bool {
        matches!(self.stage, Stage::Finished(_))
    }

    /// Everything held for this process, counted against [`HANDLE_MEMORY_BYTES`]: updates
    /// the handle's caller has not taken, early events in the reorder buffer, live events held
    /// for a catch-up.
    fn holding(&self) -> usize {
        let early =
            self.reorder.pending_bytes() + self.reorder.pending_len() * UPDATE_OVERHEAD_BYTES;
        let held = match &self.follow {
            Follow::Live => 0,
            Follow::CatchingUp(held) => held.cost,
        };
        self.queued + early + held
    }

    /// Behind the server from here (if not already, and not finished): live events are held
    /// for a catch-up.
    fn fall_behind(&mut self) {
        if matches!(self.follow, Follow::Live) && !self.is_finished() {
            self.follow = Follow::CatchingUp(Held::default());
        }
    }

    /// Lets go of the connection if this handle pauses it. Returns whether it did.
    fn relieve(&mut self) -> bool {
        match std::mem::replace(&mut self.pressure, Pressure::Free) {
            Pressure::Pausing(gate) => {
                gate.release();
                true
            }
            Pressure::Free => false,
        }
    }

    /// Holds a live event for the catch-up under way, in what room the bound leaves; past
    /// that, this and every later event until the catch-up's next merge is dropped (the server
    /// still has them: the pages read them back), the oldest held kept.
    fn hold(&mut self, event: ProcessEvent) {
        let room = HANDLE_MEMORY_BYTES.saturating_sub(self.holding());
        let Follow::CatchingUp(held) = &mut self.follow else { return };
        let cost = event_cost(&event);
        if matches!(held.dropped, Dropped::Now { .. }) || cost > room {
            held.drop_through(event.seq());
            return;
        }
        held.cost += cost;
        held.events.push(event);
    }

    /// Makes room for `cost` more under [`HANDLE_MEMORY_BYTES`] by letting held live events
    /// go, the newest first. Returns whether there is room now.
    fn make_room(&mut self, cost: usize) -> bool {
        let over = (self.holding() + cost).saturating_sub(HANDLE_MEMORY_BYTES);
        if let Follow::CatchingUp(held) = &mut self.follow {
            let keep = held.cost.saturating_sub(over);
            while held.cost > keep
                && let Some(event) = held.events.pop()
            {
                held.cost -= event_cost(&event);
                held.drop_through(event.seq());
            }
        }
        self.holding() + cost <= HANDLE_MEMORY_BYTES
    }

    /// Restarts ordering after `through` (just published) and feeds it the `pending` events
    /// beyond, publishing what is then in order. Returns false if that failed the process.
    fn restart_ordering(
        &mut self,
        process_id: &ProcessId,
        through: u64,
        pending: Vec<ProcessEvent>,
    ) -> bool {
        self.reorder = ReorderBuffer::new(through);
        for event in pending.into_iter().filter(|e| e.seq() > through) {
            match self.reorder.push(event) {
                Ok(ready) => ready.into_iter().for_each(|e| self.publish(e)),
                Err(error) => {
                    self.fail(protocol_failure(process_id, &error));
                    return false;
                }
            }
        }
        true
    }

    fn publish(&mut self, event: ProcessEvent) {
        if self.is_finished() {
            return;
        }
        match &event {
            ProcessEvent::Exited { .. } => self.exit_published = true,
            ProcessEvent::Closed { .. } => self.finish(Finished::Closed),
            ProcessEvent::Output { .. } => {}
        }
        self.send(ProcessUpdate::Event(event));
    }

    fn fail(&mut self, failure: ProcessFailure) {
        self.finish(Finished::Failed(failure.clone()));
        self.send(ProcessUpdate::Failed(failure));
    }

    /// Nothing more is published: nothing is held for a catch-up any more, and the handle's
    /// pause, if it paused the connection, is over.
    fn finish(&mut self, finished: Finished) {
        self.stage = Stage::Finished(finished);
        self.follow = Follow::Live;
        self.relieve();
    }

    fn send(&mut self, update: ProcessUpdate) {
        let Some(updates) = &self.updates else { return };
        let cost = update_cost(&update);
        // A handle that was dropped no longer listens; the stream still advances.
        if updates.send(update).is_ok() {
            self.queued += cost;
        }
        if self.is_finished() {
            self.updates = None;
        }
    }
}

impl Held {
    /// Live events through `seq` are not held: the catch-up reads them back.
    fn drop_through(&mut self, seq: u64) {
        let through = self.dropped.through().max(seq);
        self.dropped = Dropped::Now { through };
    }
}

impl Dropped {
    /// The newest sequence dropped; 0 when none was.
    fn through(self) -> u64 {
        match self {
            Dropped::Nothing => 0,
            Dropped::Now { through } | Dropped::Earlier { through } => through,
        }
    }
}

/// What an event costs against [`HANDLE_MEMORY_BYTES`]: what it costs its handle once
/// published ([`update_cost`]), wherever it waits before.
fn event_cost(event: &ProcessEvent) -> usize {
    UPDATE_OVERHEAD_BYTES + event_bytes(event)
}

fn protocol_failure(process_id: &ProcessId, error: &ReorderError) -> ProcessFailure {
    let message = format!("process {process_id} failed: {error}");
    ProcessFailure::new(ProcessFailureKind::Protocol, message)
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
        // Six overfill the handle's 4 MiB (it pauses), within the bound (it never falls behind).
        let chunk = Bytes::from(vec![b'x'; 768 * 1024]);
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

    /// Chunks of the simulated process below: the largest a Tether server sends.
    const CHUNK: usize = 64 * 1024;

    /// A process printing `CHUNK`-sized chunks and then closing, as a server sends it live and
    /// retains it for `process/read`; and the caller of its handle, reading when it pleases.
    /// Every step checks that the registration holds no more than its bound.
    struct Simulation {
        registration: Arc<Registration>,
        updates: mpsc::UnboundedReceiver<ProcessUpdate>,
        /// The process's chunks, 1..=`produced`; then its close.
        produced: u64,
        total: u64,
        closed: bool,
        /// What the caller took, in order.
        delivered: Vec<u64>,
        /// The most the registration held beyond its handle's queue: live events held
        /// for a catch-up, early events.
        most_held: usize,
    }

    impl Simulation {
        fn new(gate: Option<Arc<PauseGate>>, total: u64) -> Self {
            let (registration, updates) = Registration::new("p".into(), gate);
            registration.mark_started();
            let registration = Arc::new(registration);
            Self {
                registration,
                updates,
                produced: 0,
                total,
                closed: false,
                delivered: Vec::new(),
                most_held: 0,
            }
        }

        fn check_bound(&mut self) {
            let holding = self.registration.holding();
            assert!(holding <= HANDLE_MEMORY_BYTES, "{holding} bytes held");
            let held = holding - self.registration.queued_bytes();
            self.most_held = self.most_held.max(held);
        }

        /// The process prints up to `n` more chunks (its close after the last), each sent
        /// live to the registration — whether or not the connection is paused: what was on
        /// its way still arrives.
        fn print(&mut self, n: u64) {
            for _ in 0..n {
                let event = if self.produced < self.total {
                    self.produced += 1;
                    let chunk = Bytes::from(vec![b'x'; CHUNK]);
                    let stream = ExecOutputStream::Stdout;
                    ProcessEvent::Output {
                        process_id: "p".into(),
                        seq: self.produced,
                        stream,
                        chunk,
                    }
                } else if !self.closed {
                    self.closed = true;
                    closed(self.total + 1)
                } else {
                    return;
                };
                self.registration.push(event);
                self.check_bound();
            }
        }

        /// `process/read {afterSeq: after, maxBytes}` as the server answers it.
        fn read(&self, after: u64, max_bytes: Option<usize>) -> ReadResponse {
            let mut chunks = Vec::new();
            let mut bytes = 0;
            for seq in after + 1..=self.produced {
                if max_bytes.is_some_and(|max| bytes + CHUNK > max) && !chunks.is_empty() {
                    break;
                }
                bytes += CHUNK;
                chunks.push(ProcessOutputChunk {
                    seq,
                    stream: ExecOutputStream::Stdout,
                    chunk: ByteChunk::from(vec![b'x'; CHUNK]),
                });
            }
            let last = chunks.last().map_or(after, |chunk| chunk.seq);
            let whole = last == self.produced;
            let closed = whole && self.closed;
            let next_seq = if closed { self.total + 2 } else { last + 1 };
            ReadResponse { chunks, closed, ..read_of(&[], next_seq) }
        }

        /// The caller takes one update; if that makes room for a refill, runs it.
        fn take_one(&mut self) -> bool {
            let Ok(update) = self.updates.try_recv() else { return false };
            match &update {
                ProcessUpdate::Event(event) => self.delivered.push(event.seq()),
                ProcessUpdate::Failed(failure) => panic!("failed: {failure}"),
            }
            if self.registration.taken(&update) {
                self.catch_up();
            }
            self.check_bound();
            true
        }

        /// A claimed catch-up, as `catch_up::run_claimed` runs it, with the process printing
        /// while each read is on its way.
        fn catch_up(&mut self) {
            loop {
                let page_bytes = match self.registration.next_page() {
                    NextPage::Read(bytes) => bytes,
                    NextPage::HandleFull | NextPage::Finished => {
                        if self.registration.end_catch_up() {
                            continue;
                        }
                        return;
                    }
                };
                self.print(3);
                let last = self.registration.last_published();
                let page = self.read(last, Some(page_bytes));
                self.print(3);
                let last_read = if page.chunks.iter().all(|chunk| chunk.seq <= last) {
                    page
                } else if self.registration.publish_page(&page) {
                    self.check_bound();
                    continue;
                } else {
                    self.read(self.registration.last_published(), None)
                };
                self.check_bound();
                let complete = self.registration.catch_up(&last_read).unwrap();
                self.check_bound();
                if complete && !self.registration.end_catch_up() {
                    return;
                }
            }
        }
    }

    /// Everything the client holds for one process stays within `HANDLE_MEMORY_BYTES` while
    /// its handle is caught up and live output goes on arriving — held for the catch-up while
    /// there is room, read back from the server when there is not — and the caller still gets
    /// every chunk once, in order. Both policies: falling behind at once, and pausing, with
    /// live output arriving after the pause (the worst case: all a paused connection still
    /// had on its way, and more).
    #[test]
    fn a_catch_up_holds_no_more_than_the_bound_and_loses_nothing() {
        for gate in [None, Some(Arc::new(PauseGate::new(None)))] {
            // 25 MiB: several times what the bound holds.
            let total = 400;
            let mut simulation = Simulation::new(gate.clone(), total);
            // The caller is away while the process prints 12.5 MiB: the handle fills, pauses
            // or not, and falls behind.
            simulation.print(200);
            assert!(simulation.registration.queued_bytes() >= HANDLE_BUFFER_BYTES / 2);
            // The caller reads, one update at a time, while the process goes on printing.
            let mut rounds = 0;
            while simulation.delivered.last() != Some(&(total + 1)) {
                simulation.print(1);
                if !simulation.take_one() {
                    // Nothing to read: what the handle waits for is a catch-up's next answer.
                    if simulation.registration.claim_catch_up() {
                        simulation.catch_up();
                    }
                }
                rounds += 1;
                assert!(rounds < 100_000, "the caller never got the whole stream");
            }
            assert_eq!(simulation.delivered, (1..=total + 1).collect::<Vec<_>>());
            // The catch-ups held live events, up to what the bound left them.
            match gate {
                // Fallen behind at its window, the handle had room left under the bound: the
                // catch-up held live events.
                None => assert!(simulation.most_held > 0, "nothing was ever held"),
                // Pushed to the bound itself, the handle fell behind with no room: every live
                // event was read back instead, and the pause ended with the catch-up.
                Some(gate) => {
                    assert_eq!(*gate.subscribe().borrow(), 0, "the connection is left paused")
                }
            }
        }
    }
}
