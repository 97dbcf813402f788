//! Catching a process up after a reconnect.
//!
//! While the connection was down the process kept running and the server kept its recent
//! output. The client reads everything after the last sequence it published
//! (`process/read {afterSeq, maxBytes: null}`) and merges the answer into the stream: retained
//! chunks in their places, then the exit and the close, which occupy sequence numbers but are
//! never returned as chunks. The exit goes into the first sequence no chunk accounts for, the
//! close at the last. Any other hole means the server's bounded buffer dropped output the client
//! never saw: the process cannot be followed without losing bytes, so it is declared lost
//! (the caller terminates it and fails its handle) rather than resumed with a silent gap.

use std::collections::BTreeMap;

use tether_engine::ProcessEvent;
use tether_protocol::ProcessId;
use tether_protocol::process::ReadResponse;

/// Why a process could not be caught up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconcileError {
    /// The server's catch-up read says the process failed there (its `failure`, as sent).
    #[error("process failed while recovering: {failure}")]
    ServerFailed { failure: String },
    #[error("recovered output has sequence {seq}, past the process's last sequence {target}")]
    ChunkPastEnd { seq: u64, target: u64 },
    #[error("close sequence {seq} conflicts with recovered output")]
    CloseConflict { seq: u64 },
    #[error("process exited but the server reported no exit code")]
    MissingExitCode,
    #[error(
        "process events are no longer retained while recovering through sequence {through}: the server dropped output after sequence {last_published} before it could be read"
    )]
    Lost { last_published: u64, through: u64 },
}

/// What is known of a process before the catch-up read.
pub struct Known<'a> {
    pub process_id: &'a ProcessId,
    /// Everything up to here was published.
    pub last_published: u64,
    /// Whether the exit was among what was published.
    pub exit_published: bool,
    /// Events received live but not yet published (waiting for a gap to close).
    pub pending: Vec<ProcessEvent>,
}

/// The events with sequences `last_published + 1 ..= nextSeq - 1`, in order, built from the
/// catch-up read and what arrived live. Pending events past that range are the caller's to keep.
pub fn reconcile(
    known: Known<'_>,
    read: &ReadResponse,
) -> Result<Vec<ProcessEvent>, ReconcileError> {
    if let Some(failure) = &read.failure {
        return Err(ReconcileError::ServerFailed { failure: failure.clone() });
    }
    let last = known.last_published;
    let target = read.next_seq.saturating_sub(1);
    if target <= last {
        return Ok(Vec::new());
    }
    let process_id = known.process_id.clone();
    let mut slots: BTreeMap<u64, ProcessEvent> = known
        .pending
        .into_iter()
        .filter(|event| (last + 1..=target).contains(&event.seq()))
        .map(|event| (event.seq(), event))
        .collect();
    for chunk in &read.chunks {
        if chunk.seq > target {
            return Err(ReconcileError::ChunkPastEnd { seq: chunk.seq, target });
        }
        if chunk.seq > last {
            slots.entry(chunk.seq).or_insert_with(|| ProcessEvent::Output {
                process_id: process_id.clone(),
                seq: chunk.seq,
                stream: chunk.stream,
                chunk: chunk.chunk.0.clone(),
            });
        }
    }
    if read.closed {
        match slots.get(&target) {
            Some(ProcessEvent::Closed { .. }) | None => {}
            Some(_) => return Err(ReconcileError::CloseConflict { seq: target }),
        }
        slots.insert(target, ProcessEvent::Closed { process_id: process_id.clone(), seq: target });
    }
    let exit_known =
        known.exit_published || slots.values().any(|e| matches!(e, ProcessEvent::Exited { .. }));
    if read.exited && !exit_known {
        let exit_code = read.exit_code.ok_or(ReconcileError::MissingExitCode)?;
        if let Some(hole) = (last + 1..=target).find(|seq| !slots.contains_key(seq)) {
            slots.insert(
                hole,
                ProcessEvent::Exited {
                    process_id: process_id.clone(),
                    seq: hole,
                    exit_code,
                    sandbox_denied: read.sandbox_denied,
                },
            );
        }
    }
    if slots.len() as u64 != target - last {
        return Err(ReconcileError::Lost { last_published: last, through: target });
    }
    Ok(slots.into_values().collect())
}

#[cfg(test)]
mod tests {
    use tether_protocol::ByteChunk;
    use tether_protocol::process::{ExecOutputStream, ProcessOutputChunk};

    use super::*;

    fn chunk(seq: u64) -> ProcessOutputChunk {
        ProcessOutputChunk {
            seq,
            stream: ExecOutputStream::Stdout,
            chunk: ByteChunk::from(format!("c{seq}").into_bytes()),
        }
    }

    fn read(chunks: &[u64], next_seq: u64, exited: Option<i32>, closed: bool) -> ReadResponse {
        ReadResponse {
            chunks: chunks.iter().copied().map(chunk).collect(),
            next_seq,
            exited: exited.is_some(),
            exit_code: exited,
            closed,
            failure: None,
            sandbox_denied: false,
            oldest_retained_seq: None,
        }
    }

    fn known(last_published: u64, pending: Vec<ProcessEvent>) -> Known<'static> {
        static ID: std::sync::LazyLock<ProcessId> = std::sync::LazyLock::new(|| "p".into());
        Known { process_id: &ID, last_published, exit_published: false, pending }
    }

    fn shape(events: &[ProcessEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                ProcessEvent::Output { seq, .. } => format!("out{seq}"),
                ProcessEvent::Exited { seq, exit_code, .. } => format!("exit{seq}={exit_code}"),
                ProcessEvent::Closed { seq, .. } => format!("close{seq}"),
            })
            .collect()
    }

    #[test]
    fn fills_output_exit_and_close_in_their_places() {
        // Published 1; the process printed 2 and 3, exited (4) and closed (5) meanwhile.
        let events = reconcile(known(1, vec![]), &read(&[1, 2, 3], 6, Some(7), true)).unwrap();
        assert_eq!(shape(&events), ["out2", "out3", "exit4=7", "close5"]);
    }

    #[test]
    fn late_output_after_the_exit_keeps_the_exit_in_its_hole() {
        // out1, exit2, out3 (a grandchild), close4.
        let events = reconcile(known(0, vec![]), &read(&[1, 3], 5, Some(0), true)).unwrap();
        assert_eq!(shape(&events), ["out1", "exit2=0", "out3", "close4"]);
    }

    #[test]
    fn nothing_new_is_nothing_to_do() {
        assert!(reconcile(known(5, vec![]), &read(&[4, 5], 6, None, false)).unwrap().is_empty());
    }

    #[test]
    fn live_events_that_arrived_meanwhile_fill_their_slots_and_are_not_duplicated() {
        let pending = vec![ProcessEvent::Exited {
            process_id: "p".into(),
            seq: 3,
            exit_code: 1,
            sandbox_denied: false,
        }];
        let events = reconcile(known(1, pending), &read(&[2], 4, Some(1), false)).unwrap();
        assert_eq!(shape(&events), ["out2", "exit3=1"]);
    }

    #[test]
    fn pending_events_past_the_read_are_left_to_the_caller() {
        let pending = vec![ProcessEvent::Closed { process_id: "p".into(), seq: 9 }];
        let events = reconcile(known(0, pending), &read(&[1], 2, None, false)).unwrap();
        assert_eq!(shape(&events), ["out1"]);
    }

    #[test]
    fn evicted_output_loses_the_process() {
        // Published 1; 2 and 3 were dropped from the server's buffer; 4 is retained.
        let error = reconcile(known(1, vec![]), &read(&[4], 5, None, false)).unwrap_err();
        assert_eq!(error, ReconcileError::Lost { last_published: 1, through: 4 });
        // With an exit, one hole is the exit's; a second hole is lost output.
        let error = reconcile(known(0, vec![]), &read(&[3], 5, Some(0), true)).unwrap_err();
        assert!(matches!(error, ReconcileError::Lost { .. }), "{error}");
    }

    #[test]
    fn an_exit_already_published_takes_no_second_slot() {
        let mut known = known(2, vec![]);
        known.exit_published = true;
        // out1, exit2 published; out3 (late) and close4 to come.
        let events = reconcile(known, &read(&[1, 3], 5, Some(0), true)).unwrap();
        assert_eq!(shape(&events), ["out3", "close4"]);
    }

    #[test]
    fn inconsistent_answers_are_refused() {
        let error = reconcile(known(0, vec![]), &read(&[1, 7], 3, None, false)).unwrap_err();
        assert_eq!(error, ReconcileError::ChunkPastEnd { seq: 7, target: 2 });
        let error = reconcile(known(0, vec![]), &read(&[1, 2], 3, Some(0), true)).unwrap_err();
        assert_eq!(error, ReconcileError::CloseConflict { seq: 2 });
        let mut no_code = read(&[1], 3, None, false);
        no_code.exited = true;
        assert_eq!(
            reconcile(known(0, vec![]), &no_code).unwrap_err(),
            ReconcileError::MissingExitCode
        );
        let mut failed = read(&[], 1, None, false);
        failed.failure = Some("gone".into());
        assert!(matches!(
            reconcile(known(0, vec![]), &failed),
            Err(ReconcileError::ServerFailed { .. })
        ));
    }
}
