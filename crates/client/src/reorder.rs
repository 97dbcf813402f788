//! Publishing one process's events strictly in sequence order.
//!
//! Notifications can arrive out of order (the reference sends each output stream, the exit and
//! the close from different tasks) and twice (a reconnect's catch-up read can overlap live
//! notifications). The buffer publishes sequence `n` only after `n - 1`, drops anything already
//! published, and holds early events within a bound: past it, the process cannot be followed
//! reliably and fails.

use std::collections::BTreeMap;

use tether_engine::ProcessEvent;

/// Most early events held while waiting for a gap to close.
pub const MAX_PENDING_EVENTS: usize = 256;

/// Most output bytes held while waiting for a gap to close; also the largest single event
/// accepted (a server sends at most 64 KiB per chunk).
pub const MAX_PENDING_EVENT_BYTES: usize = 1024 * 1024;

/// Why a process's event stream could not be kept in order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReorderError {
    #[error("process event {seq} carries {bytes} bytes, more than the {limit}-byte limit")]
    EventTooLarge { seq: u64, bytes: usize, limit: usize },
    #[error(
        "too many process events arrived ahead of sequence {waiting_for} ({events} events, {bytes} bytes held)"
    )]
    Overflow { waiting_for: u64, events: usize, bytes: usize },
    /// No server numbers an event `u64::MAX` (it would leave no number for the close): the
    /// server is broken or hostile, and this process cannot be followed.
    #[error("process event sequence {seq} is out of range")]
    OutOfRange { seq: u64 },
}

/// One process's reorder buffer.
#[derive(Debug)]
pub struct ReorderBuffer {
    /// The next sequence to publish: everything below it has been published.
    next: u64,
    pending: BTreeMap<u64, ProcessEvent>,
    pending_bytes: usize,
}

impl ReorderBuffer {
    /// A buffer for a process whose events up to `last_published` are already out.
    pub fn new(last_published: u64) -> Self {
        Self { next: last_published.saturating_add(1), pending: BTreeMap::new(), pending_bytes: 0 }
    }

    /// The last sequence published.
    pub fn last_published(&self) -> u64 {
        self.next - 1
    }

    /// Events held, waiting for a gap below them to close.
    pub fn pending(&self) -> impl Iterator<Item = &ProcessEvent> {
        self.pending.values()
    }

    /// Output bytes of the events held.
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// How many events are held.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Takes one event; returns the events that can now be published, in order.
    pub fn push(&mut self, event: ProcessEvent) -> Result<Vec<ProcessEvent>, ReorderError> {
        let seq = event.seq();
        if seq == u64::MAX {
            return Err(ReorderError::OutOfRange { seq });
        }
        if seq < self.next || self.pending.contains_key(&seq) {
            return Ok(Vec::new());
        }
        let bytes = event_bytes(&event);
        if bytes > MAX_PENDING_EVENT_BYTES {
            return Err(ReorderError::EventTooLarge { seq, bytes, limit: MAX_PENDING_EVENT_BYTES });
        }
        if seq != self.next {
            let events = self.pending.len() + 1;
            let held = self.pending_bytes + bytes;
            if events > MAX_PENDING_EVENTS || held > MAX_PENDING_EVENT_BYTES {
                return Err(ReorderError::Overflow { waiting_for: self.next, events, bytes: held });
            }
            self.pending_bytes = held;
            self.pending.insert(seq, event);
            return Ok(Vec::new());
        }
        // Every held and published sequence is below `u64::MAX`, so these never overflow.
        let mut ready = vec![event];
        self.next += 1;
        while let Some(event) = self.pending.remove(&self.next) {
            self.pending_bytes -= event_bytes(&event);
            ready.push(event);
            self.next += 1;
        }
        Ok(ready)
    }
}

pub(crate) fn event_bytes(event: &ProcessEvent) -> usize {
    match event {
        ProcessEvent::Output { chunk, .. } => chunk.len(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tether_protocol::process::ExecOutputStream;

    use super::*;

    fn out(seq: u64, text: &str) -> ProcessEvent {
        ProcessEvent::Output {
            process_id: "p".into(),
            seq,
            stream: ExecOutputStream::Stdout,
            chunk: Bytes::copy_from_slice(text.as_bytes()),
        }
    }

    fn exited(seq: u64) -> ProcessEvent {
        ProcessEvent::Exited { process_id: "p".into(), seq, exit_code: 0, sandbox_denied: false }
    }

    fn closed(seq: u64) -> ProcessEvent {
        ProcessEvent::Closed { process_id: "p".into(), seq }
    }

    fn seqs(events: Vec<ProcessEvent>) -> Vec<u64> {
        events.iter().map(ProcessEvent::seq).collect()
    }

    #[test]
    fn reordered_events_come_out_in_sequence() {
        // As the reference can send them: closed(4), output(1), exited(3), output(2).
        let mut buffer = ReorderBuffer::new(0);
        assert_eq!(seqs(buffer.push(closed(4)).unwrap()), Vec::<u64>::new());
        assert_eq!(seqs(buffer.push(out(1, "a")).unwrap()), [1]);
        assert_eq!(seqs(buffer.push(exited(3)).unwrap()), Vec::<u64>::new());
        assert_eq!(seqs(buffer.push(out(2, "b")).unwrap()), [2, 3, 4]);
        assert_eq!(buffer.last_published(), 4);
    }

    #[test]
    fn duplicates_are_dropped() {
        let mut buffer = ReorderBuffer::new(0);
        assert_eq!(seqs(buffer.push(out(1, "a")).unwrap()), [1]);
        assert_eq!(seqs(buffer.push(out(1, "a")).unwrap()), Vec::<u64>::new());
        assert_eq!(seqs(buffer.push(out(3, "c")).unwrap()), Vec::<u64>::new());
        assert_eq!(seqs(buffer.push(out(3, "c")).unwrap()), Vec::<u64>::new());
        assert_eq!(seqs(buffer.push(out(2, "b")).unwrap()), [2, 3]);
    }

    #[test]
    fn a_buffer_starting_later_ignores_what_was_published() {
        let mut buffer = ReorderBuffer::new(10);
        assert!(buffer.push(out(10, "old")).unwrap().is_empty());
        assert_eq!(seqs(buffer.push(out(11, "new")).unwrap()), [11]);
    }

    #[test]
    fn too_many_early_events_fail_the_process() {
        let mut buffer = ReorderBuffer::new(0);
        for seq in 2..(2 + MAX_PENDING_EVENTS as u64) {
            buffer.push(out(seq, "x")).unwrap();
        }
        let error = buffer.push(out(2 + MAX_PENDING_EVENTS as u64, "x")).unwrap_err();
        assert!(matches!(error, ReorderError::Overflow { waiting_for: 1, .. }), "{error}");
    }

    #[test]
    fn too_many_early_bytes_fail_the_process_but_the_gap_closer_is_accepted() {
        let mut buffer = ReorderBuffer::new(0);
        let half = "x".repeat(MAX_PENDING_EVENT_BYTES / 2);
        buffer.push(out(2, &half)).unwrap();
        buffer.push(out(3, &half)).unwrap();
        assert!(buffer.push(out(4, "y")).is_err());
        // The event that closes the gap is published, not held, so it always fits.
        assert_eq!(seqs(buffer.push(out(1, &half)).unwrap()), [1, 2, 3]);
    }

    #[test]
    fn the_largest_sequence_fails_the_process_instead_of_overflowing() {
        let mut buffer = ReorderBuffer::new(u64::MAX - 1);
        assert_eq!(
            buffer.push(out(u64::MAX, "x")),
            Err(ReorderError::OutOfRange { seq: u64::MAX })
        );
        let mut buffer = ReorderBuffer::new(u64::MAX);
        assert_eq!(buffer.last_published(), u64::MAX - 1, "saturated, not wrapped");
        assert!(buffer.push(out(u64::MAX, "x")).is_err());
    }

    #[test]
    fn one_oversized_event_fails() {
        let mut buffer = ReorderBuffer::new(0);
        let huge = "x".repeat(MAX_PENDING_EVENT_BYTES + 1);
        assert!(matches!(buffer.push(out(1, &huge)), Err(ReorderError::EventTooLarge { .. })));
    }
}
