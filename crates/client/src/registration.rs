//! A client's record of one remote process: the events published to its handle so far, the
//! ones waiting for a gap to close, and where its handle listens.

use std::sync::Mutex;

use tether_engine::ProcessEvent;
use tether_protocol::ProcessId;
use tokio::sync::mpsc;

use crate::reconcile::{Known, ReconcileError, reconcile};
use crate::reorder::ReorderBuffer;

/// What a process handle receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessUpdate {
    /// The next event, in sequence order.
    Event(ProcessEvent),
    /// The process can no longer be followed; no more updates come. The message says why.
    Failed(String),
}

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
    updates: mpsc::UnboundedSender<ProcessUpdate>,
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
            updates,
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
        // Restart ordering after what was just published, and feed it what arrived beyond.
        state.reorder = ReorderBuffer::new(caught_up_to);
        for event in pending.into_iter().filter(|e| e.seq() > caught_up_to) {
            match state.reorder.push(event) {
                Ok(ready) => ready.into_iter().for_each(|e| publish(&mut state, e)),
                Err(error) => {
                    fail(&mut state, format!("process {} failed: {error}", self.process_id));
                    break;
                }
            }
        }
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

fn publish(state: &mut State, event: ProcessEvent) {
    if state.finished.is_some() {
        return;
    }
    match &event {
        ProcessEvent::Exited { .. } => state.exit_published = true,
        ProcessEvent::Closed { .. } => state.finished = Some(Finished::Closed),
        ProcessEvent::Output { .. } => {}
    }
    // A handle that was dropped no longer listens; the stream still advances.
    let _ = state.updates.send(ProcessUpdate::Event(event));
}

fn fail(state: &mut State, message: String) {
    state.finished = Some(Finished::Failed(message.clone()));
    let _ = state.updates.send(ProcessUpdate::Failed(message));
}
