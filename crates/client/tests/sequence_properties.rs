//! The ordering and catch-up rules, checked against every history proptest can think of: the
//! reorder buffer publishes each sequence once, in order, whatever the arrival order and
//! duplicates; a catch-up after a reconnect yields exactly the process's true history — or says
//! output was lost, exactly when it was.

use std::collections::BTreeSet;

use bytes::Bytes;
use proptest::prelude::*;
use tether_client::reconcile::{Known, ReconcileError, reconcile};
use tether_client::reorder::ReorderBuffer;
use tether_engine::ProcessEvent;
use tether_protocol::ByteChunk;
use tether_protocol::process::{ExecOutputStream, ProcessOutputChunk, ReadResponse};

fn output(seq: u64) -> ProcessEvent {
    ProcessEvent::Output {
        process_id: "p".into(),
        seq,
        stream: if seq.is_multiple_of(3) {
            ExecOutputStream::Stderr
        } else {
            ExecOutputStream::Stdout
        },
        chunk: Bytes::from(format!("chunk {seq}")),
    }
}

/// A process's whole history: outputs, its exit at `exit_seq`, its close last (`len`).
fn history(len: u64, exit_seq: u64) -> Vec<ProcessEvent> {
    (1..=len)
        .map(|seq| match seq {
            s if s == len => ProcessEvent::Closed { process_id: "p".into(), seq },
            s if s == exit_seq => ProcessEvent::Exited {
                process_id: "p".into(),
                seq,
                exit_code: 3,
                sandbox_denied: false,
            },
            _ => output(seq),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn any_arrival_order_is_published_in_order_once(
        len in 1u64..150,
        shuffle_seed in any::<u64>(),
        duplicates in prop::collection::vec(any::<prop::sample::Index>(), 0..40),
    ) {
        let events: Vec<ProcessEvent> = (1..=len).map(output).collect();
        let mut arrivals = events.clone();
        for index in &duplicates {
            arrivals.push(index.get(&events).clone());
        }
        // A deterministic shuffle from the seed.
        let mut state = shuffle_seed | 1;
        for i in (1..arrivals.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            arrivals.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let mut buffer = ReorderBuffer::new(0);
        let mut published = Vec::new();
        for event in arrivals {
            published.extend(buffer.push(event).unwrap());
        }
        prop_assert_eq!(published, events);
    }

    #[test]
    fn a_catch_up_yields_the_true_history_or_says_output_was_lost(
        len in 3u64..60,
        exit_at in any::<prop::sample::Index>(),
        published_at in any::<prop::sample::Index>(),
        live in prop::collection::btree_set(1u64..60, 0..10),
        evicted in prop::collection::btree_set(1u64..60, 0..3),
    ) {
        let exit_seq = 1 + exit_at.index(len as usize - 1) as u64; // before the close
        let truth = history(len, exit_seq);
        let last_published = published_at.index(len as usize) as u64; // 0 ..= len - 1
        // What arrived live on the new connection ahead of the read (any event, at all).
        let pending: Vec<ProcessEvent> = live
            .iter()
            .filter(|seq| **seq <= len)
            .map(|seq| truth[*seq as usize - 1].clone())
            .collect();
        // What the server still retains: output chunks after the last published, minus some.
        let chunks: Vec<ProcessOutputChunk> = truth
            .iter()
            .filter_map(|event| match event {
                ProcessEvent::Output { seq, stream, chunk, .. }
                    if *seq > last_published && !evicted.contains(seq) =>
                {
                    Some(ProcessOutputChunk { seq: *seq, stream: *stream, chunk: ByteChunk(chunk.clone()) })
                }
                _ => None,
            })
            .collect();
        let read = ReadResponse {
            chunks: chunks.clone(),
            next_seq: len + 1,
            exited: true,
            exit_code: Some(3),
            closed: true,
            failure: None,
            sandbox_denied: false,
            oldest_retained_seq: None,
        };
        let exit_published = exit_seq <= last_published;
        let known = Known {
            process_id: &"p".into(),
            last_published,
            exit_published,
            pending: pending.clone(),
        };
        let result = reconcile(known, &read);

        // Which sequences nothing accounts for: not a retained chunk, not live, not the close.
        let covered: BTreeSet<u64> = chunks
            .iter()
            .map(|c| c.seq)
            .chain(pending.iter().map(ProcessEvent::seq))
            .chain([len])
            .collect();
        let holes: Vec<u64> = (last_published + 1..=len).filter(|s| !covered.contains(s)).collect();
        let exit_known = exit_published || pending.iter().any(|e| e.seq() == exit_seq);
        let recoverable = holes.is_empty() || (!exit_known && holes == [exit_seq]);
        match result {
            Ok(events) => {
                prop_assert!(recoverable, "recovered despite holes {:?}", holes);
                prop_assert_eq!(events, truth[last_published as usize..].to_vec());
            }
            Err(ReconcileError::Lost { .. }) => prop_assert!(!recoverable, "lost, yet only {:?} missing", holes),
            Err(other) => prop_assert!(false, "unexpected {}", other),
        }
    }
}
