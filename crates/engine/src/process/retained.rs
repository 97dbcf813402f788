//! The bounded history of one process's output, and its sequence counter.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use tether_protocol::ByteChunk;
use tether_protocol::process::{ExecOutputStream, ProcessOutputChunk};
use tracing::warn;

use super::output_budget::OutputBudget;
use super::spill::{DiskRead, Spill, SpillBatch, SpillConfig, SpillFile};

/// Spilled chunks the pump lets queue in memory before it writes them as one batch: a few of
/// the pump's reads, so a chatty process costs one blocking-pool hop per quarter megabyte, not
/// per chunk.
pub(crate) const SPILL_BATCH_BYTES: usize = 256 * 1024;

/// What the pump does next for the spill ([`RetainedOutput::spill_step`]), off the state lock
/// and on the blocking pool.
#[derive(Debug)]
pub(crate) enum SpillStep {
    /// Nothing to write yet.
    Nothing,
    /// Make the spill file (the first time output is spilled).
    MakeFile(Arc<SpillConfig>),
    /// Write this batch, then hand it back with [`RetainedOutput::spill_written`].
    Write(SpillBatch),
}

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
///
/// The newest output is held in memory, up to `byte_limit`. With a spill configured, what
/// memory lets go of moves to a bounded file on disk ([`Spill`]) instead of being dropped;
/// everything in the spill is older than everything in memory.
///
/// What memory holds is counted in the server-wide [`OutputBudget`] too, which may have the
/// oldest of it let go of ([`RetainedOutput::shed_to`]) while processes together hold too
/// much.
#[derive(Debug)]
pub(crate) struct RetainedOutput {
    chunks: VecDeque<ProcessOutputChunk>,
    bytes: usize,
    byte_limit: usize,
    budget: Arc<OutputBudget>,
    next_seq: u64,
    exit: Option<(u64, i32)>,
    closed_seq: Option<u64>,
    /// The last sequence whose output was dropped to stay within the limits (0: none).
    evicted_through: u64,
    /// Where to spill, until the spill's file is made or has failed.
    spill_config: Option<Arc<SpillConfig>>,
    spill: Option<Spill>,
    /// [`SPILL_BATCH_BYTES`] (tests write every chunk at once).
    spill_batch_bytes: usize,
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
    /// Output bytes retained in memory now.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether output memory lets go of goes to a spill (one is configured and not given up).
    pub(crate) fn spills(&self) -> bool {
        self.spill.is_some() || self.spill_config.is_some()
    }

    /// Output bytes spilled to disk now.
    pub(crate) fn spilled_bytes(&self) -> u64 {
        self.spill.as_ref().map_or(0, Spill::bytes)
    }

    pub(crate) fn new(
        byte_limit: usize,
        budget: Arc<OutputBudget>,
        spill_config: Option<Arc<SpillConfig>>,
    ) -> Self {
        Self {
            chunks: VecDeque::new(),
            bytes: 0,
            evicted_through: 0,
            byte_limit,
            budget,
            next_seq: 1,
            exit: None,
            closed_seq: None,
            spill_config,
            spill: None,
            spill_batch_bytes: SPILL_BATCH_BYTES,
        }
    }

    /// Numbers a chunk and keeps it, moving whole chunks from the front to the spill (or
    /// dropping them, without one) to stay in bounds: this process's own, then, while all
    /// processes together hold more than the server-wide budget, the budget's level.
    pub(crate) fn push_output(&mut self, stream: ExecOutputStream, bytes: Bytes) -> u64 {
        let seq = self.allocate();
        self.bytes += bytes.len();
        self.budget.add(bytes.len());
        self.chunks.push_back(ProcessOutputChunk { seq, stream, chunk: ByteChunk(bytes) });
        while self.chunks.len() > 1
            && (self.bytes > self.byte_limit || self.chunks.len() > RETAINED_OUTPUT_CHUNKS)
        {
            self.let_go_of_oldest();
        }
        if let Some(level) = self.budget.over_limit_level() {
            self.shed_to(level);
            if self.budget.over_limit_level().is_some() {
                self.budget.wake_reclaimer();
            }
        }
        seq
    }

    /// Lets the oldest chunks in memory go (to the spill, or dropped) until memory holds at
    /// most `level` bytes, for the server-wide budget; returns how many bytes went.
    pub(crate) fn shed_to(&mut self, level: usize) -> usize {
        let mut shed = 0;
        while self.bytes > level {
            match self.let_go_of_oldest() {
                Some(len) => shed += len,
                None => break,
            }
        }
        self.budget.count_shed(shed);
        shed
    }

    /// Moves the oldest chunk in memory out of it; its length, if there was one.
    fn let_go_of_oldest(&mut self) -> Option<usize> {
        let oldest = self.chunks.pop_front()?;
        let len = oldest.chunk.len();
        self.bytes -= len;
        self.budget.remove(len);
        self.retire(oldest);
        Some(len)
    }

    /// Moves a chunk memory no longer holds to the spill's queue, or drops it.
    fn retire(&mut self, chunk: ProcessOutputChunk) {
        if self.spill.is_none()
            && let Some(config) = &self.spill_config
        {
            self.spill = Some(Spill::new(config));
        }
        match &mut self.spill {
            Some(spill) => spill.push(chunk),
            None => self.evicted_through = chunk.seq,
        }
    }

    /// What the spill needs from the pump now: its file made, or a batch written (once a
    /// batch's worth is queued). Dropping what a batch will overwrite happens here.
    pub(crate) fn spill_step(&mut self) -> SpillStep {
        let Some(spill) = &mut self.spill else { return SpillStep::Nothing };
        if spill.needs_file() {
            return match &self.spill_config {
                Some(config) => SpillStep::MakeFile(config.clone()),
                None => SpillStep::Nothing,
            };
        }
        if spill.unbatched_bytes() < self.spill_batch_bytes.max(1) {
            return SpillStep::Nothing;
        }
        match spill.take_batch() {
            Some((batch, dropped)) => {
                if let Some(dropped) = dropped {
                    self.evicted_through = self.evicted_through.max(dropped);
                }
                SpillStep::Write(batch)
            }
            None => SpillStep::Nothing,
        }
    }

    /// The spill file was made (or could not be: the spill is given up, its queue dropped).
    pub(crate) fn spill_file_made(&mut self, made: std::io::Result<SpillFile>) {
        match (made, &mut self.spill) {
            (Ok(file), Some(spill)) => spill.set_file(file),
            (Ok(_), None) => {}
            (Err(error), _) => {
                if let Some(config) = self.spill_config.take() {
                    warn!(%error, dir = %config.dir.display(), "cannot spill output to disk; older output is dropped instead");
                }
                self.discard_spill();
            }
        }
    }

    /// The spill cannot be trusted any more: what it holds reads as dropped from now on, and
    /// later output is dropped instead of spilled.
    pub(crate) fn give_up_spill(&mut self, why: &str) {
        warn!(why, "spilling output failed; the spill is given up");
        self.spill_config = None;
        self.discard_spill();
    }

    /// A batch was written (or failed: the spill is given up).
    pub(crate) fn spill_written(&mut self, batch: &SpillBatch, written: std::io::Result<()>) {
        let Some(spill) = &mut self.spill else { return };
        if !spill.owns(batch) {
            return;
        }
        match written {
            Ok(()) => spill.commit(batch),
            Err(error) => {
                warn!(%error, "writing spilled output failed; the spill is given up");
                self.spill_config = None;
                self.discard_spill();
            }
        }
    }

    /// Drops what the spill holds (a closed process giving up its disk, or a failed file):
    /// reads then say it is gone.
    pub(crate) fn discard_spill(&mut self) {
        if let Some(spill) = self.spill.take()
            && let Some(last) = spill.last_seq()
        {
            self.evicted_through = self.evicted_through.max(last);
        }
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

    /// The last `max` bytes held in memory of the streams `wanted` picks, oldest first.
    pub(crate) fn tail(&self, wanted: impl Fn(ExecOutputStream) -> bool, max: usize) -> Vec<u8> {
        let mut picked: Vec<&[u8]> = Vec::new();
        let mut total = 0;
        for chunk in self.chunks.iter().rev().filter(|c| wanted(c.stream)) {
            if total >= max {
                break;
            }
            picked.push(&chunk.chunk.0);
            total += chunk.chunk.len();
        }
        let mut out: Vec<u8> = picked.into_iter().rev().flatten().copied().collect();
        if out.len() > max {
            out.drain(..out.len() - max);
        }
        out
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

    /// The oldest sequence number still held, on disk or in memory, if any chunk is.
    pub(crate) fn oldest_retained_seq(&self) -> Option<u64> {
        self.spill
            .as_ref()
            .and_then(Spill::first_seq)
            .or_else(|| self.chunks.front().map(|c| c.seq))
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
    ///
    /// A read in two steps, so that no disk I/O happens under the state lock:
    /// [`RetainedOutput::plan_read`] says what to read from the spill file (if anything), the
    /// caller reads it on the blocking pool, and [`RetainedOutput::finish_read`] makes the
    /// window. [`RetainedOutput::read`] is both for a read that must not wait for the disk:
    /// what only the file holds then reads as dropped.
    ///
    /// A read that reaches into spilled output gets at most as much as memory holds (the
    /// spill may hold far more than one message should carry), and stops at
    /// [`RETAINED_OUTPUT_CHUNKS`] chunks; cut short, its `next_seq` follows its last chunk, as
    /// a budgeted read's does, and the reader continues from there.
    pub(crate) fn read(&mut self, after_seq: u64, max_bytes: Option<usize>) -> ReadWindow {
        self.finish_read(after_seq, max_bytes, None)
            .expect("a read without the disk is never stale")
    }

    /// What a read after `after_seq` takes from the spill file, if anything.
    pub(crate) fn plan_read(&self, after_seq: u64, max_bytes: Option<usize>) -> Option<DiskRead> {
        let spill = self.spill.as_ref().filter(|spill| spill.has_on_disk_after(after_seq))?;
        let mut budget = Budget::new(max_bytes.or(Some(self.byte_limit)));
        spill.disk_read(after_seq, |len| budget.admit(len))
    }

    /// The window of a read, from what [`RetainedOutput::plan_read`]'s disk read returned and
    /// what memory holds now. `None` when the disk read is stale — a chunk it read was
    /// dropped meanwhile, so its bytes may have been overwritten —, and the read is planned
    /// again.
    pub(crate) fn finish_read(
        &mut self,
        after_seq: u64,
        max_bytes: Option<usize>,
        disk: Option<(DiskRead, std::io::Result<Vec<ProcessOutputChunk>>)>,
    ) -> Option<ReadWindow> {
        // A read that reaches spilled output, on disk or queued for it, carries at most what
        // memory holds (the spill may hold far more than one message should).
        let reaches_spill = disk.is_some()
            || self.spill.as_ref().is_some_and(|spill| spill.has_queued_after(after_seq));
        let mut budget = Budget::new(max_bytes.or(reaches_spill.then_some(self.byte_limit)));
        let mut chunks = Vec::new();
        if let Some((read, result)) = disk {
            if !self.spill.as_ref().is_some_and(|spill| spill.still_holds(&read)) {
                return None;
            }
            match result {
                Ok(spilled) => {
                    chunks =
                        spilled.into_iter().take_while(|c| budget.admit(c.chunk.len())).collect();
                    // Chunks written to the file since the read was planned are no longer in
                    // memory: the window ends where the read did, and the reader goes on from
                    // there.
                    let last = chunks.last().map_or(after_seq, |c: &ProcessOutputChunk| c.seq);
                    if self.spill.as_ref().is_some_and(|spill| spill.has_on_disk_after(last)) {
                        budget.cut = true;
                    }
                }
                Err(error) => {
                    warn!(%error, "reading spilled output failed; the spill is given up");
                    self.spill_config = None;
                    self.discard_spill();
                    budget = Budget::new(max_bytes.or(Some(self.byte_limit)));
                }
            }
        }
        if !budget.cut {
            let after = chunks.last().map_or(after_seq, |c: &ProcessOutputChunk| c.seq);
            let queued = self.spill.iter().flat_map(Spill::queued);
            chunks.extend(
                queued
                    .chain(self.chunks.iter())
                    .filter(|c| c.seq > after)
                    .take_while(|c| budget.admit(c.chunk.len()))
                    .cloned(),
            );
        }
        let continue_after_last = max_bytes.is_some() || budget.cut;
        let next_seq = match (continue_after_last, chunks.last()) {
            (true, Some(last)) => last.seq + 1,
            _ => self.next_seq,
        };
        // A budgeted read reports the exit and the close wherever they are, as the reference
        // does. A read without a budget is a promise of everything up to `next_seq`: cut
        // short, it reports only what happened within it, so a client that takes it as
        // complete never places an exit or a close where output still follows.
        let within = |seq: u64| max_bytes.is_some() || seq < next_seq;
        let exit = self.exit.filter(|&(seq, _)| within(seq));
        Some(ReadWindow {
            chunks,
            next_seq,
            oldest_readable_seq: self.oldest_readable_seq(),
            exit_code: exit.map(|(_, code)| code),
            exited: exit.is_some(),
            closed: self.closed_seq.is_some_and(within),
        })
    }
}

impl Drop for RetainedOutput {
    fn drop(&mut self) {
        self.budget.remove(self.bytes);
    }
}

/// What a read may still take: bytes within the limit (the first chunk always) and chunks
/// within [`RETAINED_OUTPUT_CHUNKS`]. `cut` once something was left out.
struct Budget {
    limit: Option<usize>,
    bytes: usize,
    chunks: usize,
    cut: bool,
}

impl Budget {
    fn new(limit: Option<usize>) -> Self {
        Self { limit, bytes: 0, chunks: 0, cut: false }
    }

    fn admit(&mut self, len: usize) -> bool {
        let within_bytes = self.limit.is_none_or(|limit| self.bytes + len <= limit);
        if self.cut || (self.chunks > 0 && !within_bytes) || self.chunks >= RETAINED_OUTPUT_CHUNKS {
            self.cut = true;
            return false;
        }
        self.bytes += len;
        self.chunks += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unlimited() -> Arc<OutputBudget> {
        Arc::new(OutputBudget::new(usize::MAX))
    }

    fn out(retained: &mut RetainedOutput, text: &str) -> u64 {
        retained.push_output(ExecOutputStream::Stdout, Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn output_exit_and_close_share_one_sequence() {
        let mut retained = RetainedOutput::new(DEFAULT_RETAINED_OUTPUT_BYTES, unlimited(), None);
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
        let mut retained = RetainedOutput::new(DEFAULT_RETAINED_OUTPUT_BYTES, unlimited(), None);
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
        let mut retained = RetainedOutput::new(DEFAULT_RETAINED_OUTPUT_BYTES, unlimited(), None);
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
        let mut retained = RetainedOutput::new(10, unlimited(), None);
        out(&mut retained, "1234");
        out(&mut retained, "5678");
        out(&mut retained, "9abc");
        let window = retained.read(0, None);
        assert_eq!(window.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(retained.oldest_retained_seq(), Some(2));
    }

    #[test]
    fn a_single_chunk_over_the_limit_is_kept() {
        let mut retained = RetainedOutput::new(2, unlimited(), None);
        out(&mut retained, "12345");
        assert_eq!(retained.read(0, None).chunks.len(), 1);
    }

    fn spilling(memory: usize) -> RetainedOutput {
        let config = SpillConfig {
            dir: std::env::temp_dir(),
            bytes_per_process: super::super::spill::MIN_SPILL_BYTES_PER_PROCESS,
        };
        let mut retained = RetainedOutput::new(memory, unlimited(), Some(Arc::new(config)));
        retained.spill_batch_bytes = 1;
        retained
    }

    /// What the pump does after each chunk: the spill's file made, its batch written.
    fn settle(retained: &mut RetainedOutput) {
        loop {
            match retained.spill_step() {
                SpillStep::Nothing => return,
                SpillStep::MakeFile(config) => retained.spill_file_made(SpillFile::create(&config)),
                SpillStep::Write(batch) => {
                    let written = batch.write();
                    retained.spill_written(&batch, written);
                }
            }
        }
    }

    /// A read as a process makes it: the disk part first, then the window.
    fn read(retained: &mut RetainedOutput, after: u64, max: Option<usize>) -> ReadWindow {
        loop {
            let disk = retained.plan_read(after, max).map(|read| {
                let chunks = read.run();
                (read, chunks)
            });
            if let Some(window) = retained.finish_read(after, max, disk) {
                return window;
            }
        }
    }

    fn spill_out(retained: &mut RetainedOutput, text: &str) {
        out(retained, text);
        settle(retained);
    }

    fn text(window: &ReadWindow) -> String {
        window.chunks.iter().map(|c| String::from_utf8_lossy(&c.chunk.0).into_owned()).collect()
    }

    /// Memory holds the newest 10 bytes; the rest is on disk. A budgeted read pages through
    /// both without a seam; a read without a budget that reaches the spill is cut at what
    /// memory holds and says where to go on.
    #[test]
    fn spilled_output_reads_back_in_order_with_the_memory_after_it() {
        let mut retained = spilling(10);
        let all: String = (0..40).map(|n| format!("{n:03}|")).collect();
        for n in 0..40 {
            spill_out(&mut retained, &format!("{n:03}|"));
        }
        retained.record_exit(0);
        retained.record_close();
        assert!(retained.bytes() <= 10);
        assert_eq!(retained.spilled_bytes() as usize + retained.bytes(), 160);
        assert_eq!(retained.oldest_retained_seq(), Some(1));
        assert_eq!(retained.oldest_readable_seq(), 1);

        let (mut paged, mut after) = (String::new(), 0);
        loop {
            let window = read(&mut retained, after, Some(24));
            if window.chunks.is_empty() {
                break;
            }
            paged += &text(&window);
            after = window.next_seq - 1;
        }
        assert_eq!(paged, all);

        let first = read(&mut retained, 0, None);
        assert_eq!(text(&first), all[..8], "cut at what memory holds (10 bytes, whole chunks)");
        assert_eq!(first.next_seq, 3, "a cut read continues after its last chunk");
        assert!(!first.exited && !first.closed, "the exit and close lie beyond the cut");
        assert!(read(&mut retained, 0, Some(8)).closed, "a budgeted read reports them anyway");
        let (mut unbudgeted, mut after) = (String::new(), 0);
        let last = loop {
            let window = read(&mut retained, after, None);
            unbudgeted += &text(&window);
            if window.next_seq == retained.next_seq() {
                break window;
            }
            after = window.next_seq - 1;
        };
        assert_eq!(unbudgeted, all);
        assert!(last.exited && last.closed);
    }

    #[test]
    fn a_discarded_spill_reads_as_dropped_output() {
        let mut retained = spilling(10);
        for n in 0..10 {
            spill_out(&mut retained, &format!("{n:03}|"));
        }
        retained.discard_spill();
        assert_eq!(retained.spilled_bytes(), 0);
        let window = read(&mut retained, 0, None);
        assert_eq!(window.oldest_readable_seq, window.chunks[0].seq);
        assert_eq!(text(&window), "008|009|");
    }

    /// What the server-wide budget sheds is the oldest whole chunks, counted, and readers
    /// are told where output resumes; a buffer that goes gives its bytes back.
    #[test]
    fn shedding_for_the_shared_budget_is_counted_and_visible_to_readers() {
        let budget = Arc::new(OutputBudget::new(8));
        let mut quiet = RetainedOutput::new(100, budget.clone(), None);
        let mut noisy = RetainedOutput::new(100, budget.clone(), None);
        out(&mut quiet, "1234");
        out(&mut noisy, "abcd");
        out(&mut noisy, "efgh");
        assert_eq!(budget.held(), 12);
        assert_eq!(noisy.shed_to(5), 4);
        assert_eq!((budget.held(), budget.shed_bytes()), (8, 4));
        let window = noisy.read(0, None);
        assert_eq!(window.oldest_readable_seq, 2);
        assert_eq!(text(&window), "efgh");
        drop(quiet);
        assert_eq!(budget.held(), 4);
    }

    #[test]
    fn chunk_count_is_bounded() {
        let mut retained = RetainedOutput::new(usize::MAX, unlimited(), None);
        for _ in 0..RETAINED_OUTPUT_CHUNKS + 10 {
            out(&mut retained, "x");
        }
        let window = retained.read(0, None);
        assert_eq!(window.chunks.len(), RETAINED_OUTPUT_CHUNKS);
        assert_eq!(window.chunks[0].seq, 11);
    }
}
