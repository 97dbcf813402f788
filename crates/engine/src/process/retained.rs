//! The bounded history of one process's output, and its sequence counter.

use std::collections::VecDeque;

use bytes::Bytes;
use tether_protocol::ByteChunk;
use tether_protocol::process::{ExecOutputStream, ProcessOutputChunk};

/// Output kept per process for `process/read` replays, by default: the last 8 MiB.
///
/// A client that lost its connection catches up from here, so this bounds what an outage can
/// cost a chatty process. It must cover what was in flight when the connection dropped — the
/// server's output budget per connection (1 MiB) plus the kernel's socket buffer (up to 4 MiB
/// on Linux) — or a reconnect finds a gap. The reference keeps 1 MiB, which a fast process
/// overruns on a single drop. Memory is spent only by processes that print that much; the
/// server can change it with `--retain-output-bytes`.
pub const DEFAULT_RETAINED_OUTPUT_BYTES: usize = 8 * 1024 * 1024;

/// Most chunks kept per process, whatever their size.
///
/// Each chunk costs four JSON values in a `process/read` reply and a client accepts at most
/// 262,144 values per message, so a full replay of 50,000 chunks still fits.
pub const RETAINED_OUTPUT_CHUNKS: usize = 50_000;

/// What one process has produced, by sequence number.
///
/// One counter, starting at 1, numbers output chunks, the exit and the close alike. Exit and
/// close are remembered as their sequence numbers and never stored as chunks.
#[derive(Debug)]
pub(crate) struct RetainedOutput {
    chunks: VecDeque<ProcessOutputChunk>,
    bytes: usize,
    byte_limit: usize,
    next_seq: u64,
    exit: Option<(u64, i32)>,
    closed_seq: Option<u64>,
    /// The last sequence whose output was dropped to stay within the limits (0: none).
    evicted_through: u64,
}

/// A window of retained output, as `process/read` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadWindow {
    pub chunks: Vec<ProcessOutputChunk>,
    pub next_seq: u64,
    pub oldest_readable_seq: u64,
    pub exit_code: Option<i32>,
    pub exited: bool,
    pub closed: bool,
}

impl RetainedOutput {
    /// Output bytes retained now.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn new(byte_limit: usize) -> Self {
        Self {
            chunks: VecDeque::new(),
            bytes: 0,
            evicted_through: 0,
            byte_limit,
            next_seq: 1,
            exit: None,
            closed_seq: None,
        }
    }

    /// Numbers a chunk and keeps it, dropping whole chunks from the front to stay in bounds.
    pub(crate) fn push_output(&mut self, stream: ExecOutputStream, bytes: Bytes) -> u64 {
        let seq = self.allocate();
        self.bytes += bytes.len();
        self.chunks.push_back(ProcessOutputChunk { seq, stream, chunk: ByteChunk(bytes) });
        while self.chunks.len() > 1
            && (self.bytes > self.byte_limit || self.chunks.len() > RETAINED_OUTPUT_CHUNKS)
        {
            if let Some(dropped) = self.chunks.pop_front() {
                self.bytes -= dropped.chunk.len();
                self.evicted_through = dropped.seq;
            }
        }
        seq
    }

    pub(crate) fn record_exit(&mut self, code: i32) -> u64 {
        let seq = self.allocate();
        self.exit = Some((seq, code));
        seq
    }

    pub(crate) fn record_close(&mut self) -> u64 {
        let seq = self.allocate();
        self.closed_seq = Some(seq);
        seq
    }

    fn allocate(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub(crate) fn exit(&self) -> Option<(u64, i32)> {
        self.exit
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed_seq.is_some()
    }

    /// The oldest sequence number still held, if any chunk is.
    pub(crate) fn oldest_retained_seq(&self) -> Option<u64> {
        self.chunks.front().map(|c| c.seq)
    }

    /// The oldest sequence a read can still return: everything before it that was output has
    /// been dropped (1 when nothing was).
    pub(crate) fn oldest_readable_seq(&self) -> u64 {
        self.evicted_through + 1
    }

    /// Whether a reader that has seen everything up to `after_seq` has something new to see:
    /// a chunk, the exit, or the close.
    pub(crate) fn has_news_after(&self, after_seq: u64) -> bool {
        self.next_seq > after_seq + 1
    }

    /// Chunks after `after_seq` within a byte budget. The first chunk is always included, even
    /// past the budget, so a reader always makes progress; chunks are never split, and more are
    /// added while the total stays within the budget.
    ///
    /// `next_seq` is where the reader continues. Without a budget it is the process's next
    /// sequence, which also steps over an exit and a close. With a budget it is one past the last
    /// chunk returned (so the exit and close are reported again on the next read), or the
    /// process's next sequence when no chunk was returned — as the reference computes it.
    pub(crate) fn read(&self, after_seq: u64, max_bytes: Option<usize>) -> ReadWindow {
        let start = self.chunks.partition_point(|c| c.seq <= after_seq);
        let mut chunks = Vec::new();
        let mut total = 0usize;
        for chunk in self.chunks.range(start..) {
            let within_budget = max_bytes.is_none_or(|budget| total + chunk.chunk.len() <= budget);
            if !chunks.is_empty() && !within_budget {
                break;
            }
            total += chunk.chunk.len();
            chunks.push(chunk.clone());
        }
        let next_seq = match (max_bytes, chunks.last()) {
            (Some(_), Some(last)) => last.seq + 1,
            _ => self.next_seq,
        };
        ReadWindow {
            chunks,
            next_seq,
            oldest_readable_seq: self.oldest_readable_seq(),
            exit_code: self.exit.map(|(_, code)| code),
            exited: self.exit.is_some(),
            closed: self.closed_seq.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(retained: &mut RetainedOutput, text: &str) -> u64 {
        retained.push_output(ExecOutputStream::Stdout, Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn output_exit_and_close_share_one_sequence() {
        let mut retained = RetainedOutput::new(DEFAULT_RETAINED_OUTPUT_BYTES);
        assert_eq!(out(&mut retained, "a"), 1);
        assert_eq!(retained.record_exit(0), 2);
        assert_eq!(out(&mut retained, "late"), 3);
        assert_eq!(retained.record_close(), 4);
        let window = retained.read(0, None);
        assert_eq!(window.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(window.next_seq, 5);
        assert!(window.exited && window.closed);
        assert_eq!(window.exit_code, Some(0));
    }

    #[test]
    fn byte_budget_keeps_whole_chunks_and_always_returns_one() {
        let mut retained = RetainedOutput::new(DEFAULT_RETAINED_OUTPUT_BYTES);
        out(&mut retained, "abcdef");
        out(&mut retained, "ghij");
        let seqs = |w: ReadWindow| (w.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(), w.next_seq);
        assert_eq!(seqs(retained.read(0, Some(0))), (vec![1], 2));
        assert_eq!(seqs(retained.read(0, Some(7))), (vec![1], 2));
        assert_eq!(seqs(retained.read(0, Some(10))), (vec![1, 2], 3));
        assert_eq!(seqs(retained.read(0, Some(100))), (vec![1, 2], 3));
        assert_eq!(seqs(retained.read(0, None)), (vec![1, 2], 3));
        // Nothing new: next_seq is the process's next sequence.
        assert_eq!(seqs(retained.read(2, Some(5))), (vec![], 3));
        assert_eq!(seqs(retained.read(99, None)), (vec![], 3));
    }

    #[test]
    fn with_a_budget_next_seq_follows_the_last_chunk_returned() {
        let mut retained = RetainedOutput::new(DEFAULT_RETAINED_OUTPUT_BYTES);
        out(&mut retained, "hello");
        out(&mut retained, "ab");
        retained.record_exit(0);
        retained.record_close();
        let seqs = |w: ReadWindow| (w.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(), w.next_seq);
        assert_eq!(seqs(retained.read(0, Some(100))), (vec![1, 2], 3));
        assert_eq!(seqs(retained.read(0, Some(7))), (vec![1, 2], 3));
        assert_eq!(seqs(retained.read(0, Some(5))), (vec![1], 2));
        assert_eq!(seqs(retained.read(0, None)), (vec![1, 2], 5));
        assert_eq!(seqs(retained.read(2, Some(5))), (vec![], 5));
    }

    #[test]
    fn evicts_whole_chunks_from_the_front() {
        let mut retained = RetainedOutput::new(10);
        out(&mut retained, "1234");
        out(&mut retained, "5678");
        out(&mut retained, "9abc");
        let window = retained.read(0, None);
        assert_eq!(window.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(retained.oldest_retained_seq(), Some(2));
    }

    #[test]
    fn a_single_chunk_over_the_limit_is_kept() {
        let mut retained = RetainedOutput::new(2);
        out(&mut retained, "12345");
        assert_eq!(retained.read(0, None).chunks.len(), 1);
    }

    #[test]
    fn chunk_count_is_bounded() {
        let mut retained = RetainedOutput::new(usize::MAX);
        for _ in 0..RETAINED_OUTPUT_CHUNKS + 10 {
            out(&mut retained, "x");
        }
        let window = retained.read(0, None);
        assert_eq!(window.chunks.len(), RETAINED_OUTPUT_CHUNKS);
        assert_eq!(window.chunks[0].seq, 11);
    }
}
