//! A client's record of one remote process: the events published to its handle so far, the
//! ones waiting for a gap to close, and where its handle listens.

use std::sync::Mutex;

use tether_engine::{ProcessEvent, ProcessUpdate};
use tether_protocol::ProcessId;
use tokio::sync::mpsc;

use crate::reconcile::{Known, ReconcileError, reconcile};
use crate::reorder::ReorderBuffer;

pub(crate) struct Registration {
    pub process_id: ProcessId,
    state: Mutex<State>,
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
    next_write_id: u64,
    /// Set while a reconnect catches this process up: live events that arrive meanwhile are
    /// held here, unbounded, instead of the reorder buffer — the gap they wait on is the one
    /// the catch-up read is about to fill, and a fast process can send a lot in that time.
    catching_up: bool,
    held: Vec<ProcessEvent>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finished {
    Closed,
    Failed(String),
}

impl Registration {
    pub(crate) fn new(process_id: ProcessId) -> (Self, mpsc::UnboundedReceiver<ProcessUpdate>) {
        let (updates, receiver) = mpsc::unbounded_channel();
        let state = State {
            reorder: ReorderBuffer::new(0),
            exit_published: false,
            started: false,
            finished: None,
            updates: Some(updates),
            next_write_id: 1,
            catching_up: false,
            held: Vec::new(),
        };
        (Self { process_id, state: Mutex::new(state) }, receiver)
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

    /// A reconnect is about to catch this process up: hold live events until it has.
    pub(crate) fn begin_catch_up(&self) {
        self.state().catching_up = true;
    }

    /// Takes a live event; publishes what is now in order. Returns the failure, if the event
    /// made the process impossible to follow.
    pub(crate) fn push(&self, event: ProcessEvent) -> Option<String> {
        let mut state = self.state();
        if state.finished.is_some() {
            return None;
        }
        if state.catching_up {
            state.held.push(event);
            return None;
        }
        match state.reorder.push(event) {
            Ok(ready) => {
                ready.into_iter().for_each(|event| publish(&mut state, event));
                None
            }
            Err(error) => {
                let message = format!("process {} failed: {error}", self.process_id);
                fail(&mut state, message.clone());
                Some(message)
            }
        }
    }

    /// Publishes the leading run of a catch-up page: chunks that follow what was published
    /// with no hole between them. Pages let a large backlog be caught up in parts that each
    /// survive a later drop (the next attempt reads on from here), where one read of it all
    /// might never arrive whole over a flaky link. Returns whether the whole page was such a
    /// run, so paging may go on; false when it held a hole (an exit, or output the server
    /// dropped) or nothing new: the rest then comes from one complete read, whose answer
    /// places exits and closes (see [`crate::reconcile`]).
    pub(crate) fn publish_page(&self, page: &tether_protocol::process::ReadResponse) -> bool {
        let mut state = self.state();
        if state.finished.is_some() || page.failure.is_some() {
            return false;
        }
        let last = state.reorder.last_published();
        let fresh: Vec<_> = page.chunks.iter().filter(|chunk| chunk.seq > last).collect();
        let run = fresh
            .iter()
            .zip(last + 1..)
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
        restart_ordering(&mut state, &self.process_id, last + run as u64, pending)
            && run == fresh.len()
    }

    /// Merges a catch-up read into the stream (see [`crate::reconcile`]).
    pub(crate) fn catch_up(
        &self,
        read: &tether_protocol::process::ReadResponse,
    ) -> Result<(), ReconcileError> {
        let mut state = self.state();
        if state.finished.is_some() {
            return Ok(());
        }
        state.catching_up = false;
        let held = std::mem::take(&mut state.held);
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
        restart_ordering(&mut state, &self.process_id, caught_up_to, pending);
        Ok(())
    }

    /// Ends the stream with a failure (no-op if already finished).
    pub(crate) fn fail(&self, message: String) {
        let mut state = self.state();
        if state.finished.is_none() {
            fail(&mut state, message);
        }
    }
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
                fail(state, format!("process {process_id} failed: {error}"));
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

fn fail(state: &mut State, message: String) {
    state.finished = Some(Finished::Failed(message.clone()));
    send(state, ProcessUpdate::Failed(message));
}

fn send(state: &mut State, update: ProcessUpdate) {
    let Some(updates) = &state.updates else { return };
    // A handle that was dropped no longer listens; the stream still advances.
    let _ = updates.send(update);
    if state.finished.is_some() {
        state.updates = None;
    }
}

#[cfg(test)]
mod tests {
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
                Ok(ProcessUpdate::Failed(message)) => panic!("failed: {message}"),
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
        let (registration, mut updates) = Registration::new("p".into());
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
        let (registration, mut updates) = Registration::new("p".into());
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
        let (registration, mut updates) = Registration::new("p".into());
        registration.push(out(1));
        registration.fail("gone".into());
        registration.fail("again".into());
        registration.push(out(2));
        assert_eq!(updates.try_recv(), Ok(ProcessUpdate::Event(out(1))));
        assert_eq!(updates.try_recv(), Ok(ProcessUpdate::Failed("gone".into())));
        assert_eq!(updates.try_recv(), Err(mpsc::error::TryRecvError::Disconnected));
    }
}
