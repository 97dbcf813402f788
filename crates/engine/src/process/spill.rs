//! A process's older output on disk: what the in-memory history lets go of, kept in a bounded
//! file so that a client away for minutes still catches up on every byte
//! (`tether serve --spill-output-dir`).
//!
//! Each spilling process owns one anonymous file (created unlinked, so nothing is left behind
//! when the process is forgotten or the server dies) used as a ring of `capacity` bytes: new
//! chunks are written after the newest, and the oldest are dropped when the ring is full. The
//! index of what the ring holds stays in memory, a few dozen bytes per chunk.
//!
//! No disk I/O happens under the process's state lock, nor on an async thread. A chunk memory
//! lets go of is queued here (still readable, from memory); the pump takes the queue as a
//! [`SpillBatch`] — its place in the ring reserved, the chunks it will overwrite dropped from
//! the index first — writes it on the blocking pool, and commits it, after which the chunks
//! are read from the file. A read takes a [`DiskRead`] of the indexed chunks it wants, reads it
//! on the blocking pool, and checks on return that none of them was dropped meanwhile (their
//! bytes may then have been overwritten): if one was, it reads again.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tether_protocol::ByteChunk;
use tether_protocol::process::{ExecOutputStream, ProcessOutputChunk};

/// The smallest ring a process may have: a chunk from the pump always fits in it.
pub const MIN_SPILL_BYTES_PER_PROCESS: u64 = 1024 * 1024;

/// Default for [`SpillConfig::bytes_per_process`]: minutes of a busy build's output.
pub const DEFAULT_SPILL_BYTES_PER_PROCESS: u64 = 256 * 1024 * 1024;

/// Most chunks one process's ring indexes, whatever their size: the index lives in memory.
pub const SPILLED_CHUNKS_PER_PROCESS: usize = 1_000_000;

/// Where and how much output may be spilled to disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillConfig {
    /// The directory the spill files live in (unlinked: they never show up there).
    pub dir: PathBuf,
    /// Disk bytes per process. Closed processes share one more such allowance in each
    /// session, the oldest closed giving theirs up first.
    pub bytes_per_process: u64,
}

impl SpillConfig {
    /// Checks, before serving, that spill files can be made in `dir` and that the size is
    /// workable, so a bad flag fails at startup instead of at the first outage.
    pub fn validate(&self) -> Result<(), String> {
        if self.bytes_per_process < MIN_SPILL_BYTES_PER_PROCESS {
            return Err(format!(
                "the spill size per process must be at least {MIN_SPILL_BYTES_PER_PROCESS} bytes, got {}",
                self.bytes_per_process
            ));
        }
        anonymous_file(&self.dir).map(drop).map_err(|error| {
            format!("cannot create spill files in {}: {error}", self.dir.display())
        })
    }
}

/// One spilled chunk: where its bytes are in the ring.
#[derive(Debug, Clone, Copy)]
struct Entry {
    seq: u64,
    /// Position in the stream of all bytes ever spilled (the ring position is this modulo the
    /// capacity).
    offset: u64,
    len: u32,
    stream: ExecOutputStream,
}

/// The spilled part of one process's history, oldest first, all older than what is in memory:
/// the chunks written to the file (`entries`), then those waiting to be (`queued`).
#[derive(Debug)]
pub(crate) struct Spill {
    /// Made by the pump on the blocking pool at the first batch; until then chunks queue.
    file: Option<Arc<SpillFile>>,
    capacity: u64,
    entries: VecDeque<Entry>,
    /// Let go of by memory, not yet written: read from here until their batch is committed.
    queued: VecDeque<ProcessOutputChunk>,
    queued_bytes: usize,
    /// Where the next chunk's bytes go, counted like [`Entry::offset`].
    end: u64,
    /// Chunks of `queued` (from its front) in a batch being written.
    writing: usize,
}

/// The ring file itself, shared with the batches and reads under way.
#[derive(Debug)]
pub(crate) struct SpillFile {
    file: File,
    capacity: u64,
}

/// Queued chunks on their way to the file, their places reserved.
#[derive(Debug)]
pub(crate) struct SpillBatch {
    file: Arc<SpillFile>,
    writes: Vec<(u64, Bytes)>,
}

/// Indexed chunks to read back from the file.
#[derive(Debug, Clone)]
pub(crate) struct DiskRead {
    file: Arc<SpillFile>,
    taken: Vec<Entry>,
}

impl Spill {
    /// A spill for `config`, its file not made yet ([`SpillFile::create`], then
    /// [`Spill::set_file`]).
    pub(crate) fn new(config: &SpillConfig) -> Self {
        Self {
            file: None,
            capacity: config.bytes_per_process.max(MIN_SPILL_BYTES_PER_PROCESS),
            entries: VecDeque::new(),
            queued: VecDeque::new(),
            queued_bytes: 0,
            end: 0,
            writing: 0,
        }
    }

    /// Whether the file is still to be made.
    pub(crate) fn needs_file(&self) -> bool {
        self.file.is_none()
    }

    /// Keeps the first file made: the pump and the server-wide budget may both have made one
    /// at once, and batches may already be written to the first; a second is let go (it has
    /// no name, so it is freed).
    pub(crate) fn set_file(&mut self, file: SpillFile) {
        if self.file.is_none() {
            self.file = Some(Arc::new(file));
        }
    }

    /// Bytes held now, on disk and queued.
    pub(crate) fn bytes(&self) -> u64 {
        self.disk_bytes() + self.queued_bytes as u64
    }

    fn disk_bytes(&self) -> u64 {
        self.entries.front().map_or(0, |first| self.end_of_entries() - first.offset)
    }

    fn end_of_entries(&self) -> u64 {
        self.entries.back().map_or(self.end, |last| last.offset + u64::from(last.len))
    }

    /// Bytes queued for the file, not yet in a batch.
    pub(crate) fn unbatched_bytes(&self) -> usize {
        self.queued.iter().skip(self.writing).map(|c| c.chunk.len()).sum()
    }

    pub(crate) fn first_seq(&self) -> Option<u64> {
        self.entries.front().map(|e| e.seq).or_else(|| self.queued.front().map(|c| c.seq))
    }

    pub(crate) fn last_seq(&self) -> Option<u64> {
        self.queued.back().map(|c| c.seq).or_else(|| self.entries.back().map(|e| e.seq))
    }

    /// Whether a chunk after `after_seq` is in the file.
    pub(crate) fn has_on_disk_after(&self, after_seq: u64) -> bool {
        self.entries.back().is_some_and(|last| last.seq > after_seq)
    }

    /// Whether a queued chunk follows `after_seq`.
    pub(crate) fn has_queued_after(&self, after_seq: u64) -> bool {
        self.queued.back().is_some_and(|last| last.seq > after_seq)
    }

    /// The queued chunks, oldest first: memory's older part.
    pub(crate) fn queued(&self) -> impl Iterator<Item = &ProcessOutputChunk> {
        self.queued.iter()
    }

    /// Keeps a chunk the memory let go of: queued, until the pump writes it.
    pub(crate) fn push(&mut self, chunk: ProcessOutputChunk) {
        self.queued_bytes += chunk.chunk.len();
        self.queued.push_back(chunk);
    }

    /// The queued chunks not yet in a batch, their places in the ring reserved: the oldest
    /// indexed chunks are dropped first to make room (their bytes are about to be overwritten,
    /// so no read may take them from now on). Returns the batch, and the last sequence
    /// dropped, if any was. `None` when nothing waits, or a batch is being written.
    pub(crate) fn take_batch(&mut self) -> Option<(SpillBatch, Option<u64>)> {
        let file = self.file.clone()?;
        if self.writing > 0 || self.queued.is_empty() {
            return None;
        }
        let capacity = self.capacity;
        let mut dropped = None;
        let mut writes = Vec::with_capacity(self.queued.len());
        let mut reserved = 0u64;
        for chunk in &self.queued {
            let len = chunk.chunk.len() as u64;
            if len > capacity {
                break;
            }
            while !self.entries.is_empty()
                && (self.disk_bytes() + reserved + len > capacity
                    || self.entries.len() + writes.len() >= SPILLED_CHUNKS_PER_PROCESS)
            {
                dropped = self.entries.pop_front().map(|e| e.seq);
            }
            if reserved + len > capacity || writes.len() >= SPILLED_CHUNKS_PER_PROCESS {
                break;
            }
            writes.push((self.end + reserved, chunk.chunk.0.clone()));
            reserved += len;
        }
        if writes.is_empty() {
            // A chunk larger than the ring (the pump's never are): it is dropped, and with it
            // everything older, which keeps "what is gone is everything up to a sequence".
            let chunk = self.queued.pop_front()?;
            self.queued_bytes -= chunk.chunk.len();
            self.entries.clear();
            return Some((SpillBatch { file, writes }, Some(chunk.seq)));
        }
        self.writing = writes.len();
        Some((SpillBatch { file, writes }, dropped))
    }

    /// A batch was written: its chunks are read from the file from now on.
    pub(crate) fn commit(&mut self, batch: &SpillBatch) {
        for (offset, bytes) in &batch.writes {
            let Some(chunk) = self.queued.pop_front() else { break };
            self.queued_bytes -= chunk.chunk.len();
            self.entries.push_back(Entry {
                seq: chunk.seq,
                offset: *offset,
                len: bytes.len() as u32,
                stream: chunk.stream,
            });
            self.end = offset + bytes.len() as u64;
        }
        self.writing = 0;
    }

    /// Whether `batch` is this spill's (a spill given up and made again has another file).
    pub(crate) fn owns(&self, batch: &SpillBatch) -> bool {
        self.file.as_ref().is_some_and(|file| Arc::ptr_eq(file, &batch.file))
    }

    /// The indexed chunks after `after_seq` that `admit` lets in, to read from the file.
    pub(crate) fn disk_read(
        &self,
        after_seq: u64,
        mut admit: impl FnMut(usize) -> bool,
    ) -> Option<DiskRead> {
        let start = self.entries.partition_point(|e| e.seq <= after_seq);
        let taken: Vec<Entry> =
            self.entries.range(start..).copied().take_while(|e| admit(e.len as usize)).collect();
        let file = self.file.clone()?;
        (!taken.is_empty()).then(|| DiskRead { file, taken })
    }

    /// Whether what `read` read is still what the index says: none of its chunks was dropped
    /// (and so overwritten) since it was planned.
    pub(crate) fn still_holds(&self, read: &DiskRead) -> bool {
        self.file.as_ref().is_some_and(|file| Arc::ptr_eq(file, &read.file))
            && read.taken.first().is_some_and(|first| {
                self.entries.front().is_some_and(|oldest| oldest.seq <= first.seq)
            })
    }
}

impl SpillBatch {
    /// Writes the batch. Blocking: on the blocking pool.
    pub(crate) fn write(&self) -> io::Result<()> {
        for (offset, bytes) in &self.writes {
            self.file.write_at(*offset, bytes)?;
        }
        Ok(())
    }
}

impl DiskRead {
    /// Reads the chunks back. Blocking: on the blocking pool.
    pub(crate) fn run(&self) -> io::Result<Vec<ProcessOutputChunk>> {
        let (Some(first), Some(last)) = (self.taken.first(), self.taken.last()) else {
            return Ok(Vec::new());
        };
        // The chunks are contiguous: one read, then slices of it.
        let span = (last.offset + u64::from(last.len) - first.offset) as usize;
        let mut buffer = BytesMut::zeroed(span);
        self.file.read_at(first.offset, &mut buffer)?;
        let mut bytes: Bytes = buffer.freeze();
        Ok(self
            .taken
            .iter()
            .map(|entry| ProcessOutputChunk {
                seq: entry.seq,
                stream: entry.stream,
                chunk: ByteChunk(bytes.split_to(entry.len as usize)),
            })
            .collect())
    }
}

impl SpillFile {
    /// Makes the ring file for `config`. Blocking: on the blocking pool.
    pub(crate) fn create(config: &SpillConfig) -> io::Result<Self> {
        Ok(Self {
            file: anonymous_file(&config.dir)?,
            capacity: config.bytes_per_process.max(MIN_SPILL_BYTES_PER_PROCESS),
        })
    }

    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let (first, rest) = self.split(offset, bytes.len());
        self.file.write_all_at(&bytes[..first], offset % self.capacity)?;
        if rest > 0 {
            self.file.write_all_at(&bytes[first..], 0)?;
        }
        Ok(())
    }

    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> io::Result<()> {
        let (first, rest) = self.split(offset, buffer.len());
        self.file.read_exact_at(&mut buffer[..first], offset % self.capacity)?;
        if rest > 0 {
            self.file.read_exact_at(&mut buffer[first..], 0)?;
        }
        Ok(())
    }

    /// How `len` bytes at `offset` divide between the ring's end and its start.
    fn split(&self, offset: u64, len: usize) -> (usize, usize) {
        let room = (self.capacity - offset % self.capacity) as usize;
        let first = len.min(room);
        (first, len - first)
    }
}

/// A read-write file in `dir` that has no name: it disappears with its last descriptor.
fn anonymous_file(dir: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC;
    match rustix::fs::open(dir, flags, Mode::RUSR | Mode::WUSR) {
        Ok(fd) => Ok(File::from(fd)),
        // A filesystem without O_TMPFILE: a named file, unlinked at once.
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::ISDIR) => {
            let path = dir.join(format!(
                ".tether-spill-{}-{}",
                std::process::id(),
                NEXT_NAME.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            let file =
                std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
            std::fs::remove_file(&path)?;
            Ok(file)
        }
        Err(error) => Err(error.into()),
    }
}

static NEXT_NAME: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[cfg(test)]
mod tests {
    use super::*;

    fn config(bytes_per_process: u64) -> SpillConfig {
        SpillConfig { dir: std::env::temp_dir(), bytes_per_process }
    }

    fn chunk(seq: u64, fill: u8, len: usize) -> ProcessOutputChunk {
        ProcessOutputChunk {
            seq,
            stream: if seq.is_multiple_of(2) {
                ExecOutputStream::Stderr
            } else {
                ExecOutputStream::Stdout
            },
            chunk: ByteChunk(Bytes::from(vec![fill; len])),
        }
    }

    /// A small ring, filled several times over: what it returns is always the newest chunks,
    /// byte for byte, across the wrap; what a batch is about to overwrite is out of the index
    /// first, and a read planned before that says it is stale.
    #[test]
    fn the_ring_keeps_the_newest_chunks_across_wraps() {
        let mut spill = Spill::new(&config(0));
        spill.capacity = 1000;
        let mut file = SpillFile::create(&config(0)).unwrap();
        file.capacity = 1000;
        spill.set_file(file);
        let mut last_dropped = 0;
        let mut stale = None;
        for seq in 1..=100u64 {
            let len = 37 + (seq as usize * 13) % 90;
            spill.push(chunk(seq, seq as u8, len));
            if seq == 50 {
                stale = spill.disk_read(0, |_| true);
            }
            let (batch, dropped) = spill.take_batch().unwrap();
            if let Some(dropped) = dropped {
                assert!(dropped > last_dropped);
                last_dropped = dropped;
            }
            batch.write().unwrap();
            spill.commit(&batch);
            assert!(spill.bytes() <= 1000);
        }
        assert!(!spill.still_holds(&stale.unwrap()), "its first chunk was overwritten since");
        assert_eq!(spill.first_seq(), Some(last_dropped + 1));
        let read = spill.disk_read(0, |_| true).unwrap();
        assert!(spill.still_holds(&read));
        let chunks = read.run().unwrap();
        assert_eq!(chunks.first().map(|c| c.seq), Some(last_dropped + 1));
        assert_eq!(chunks.last().map(|c| c.seq), Some(100));
        for chunk in &chunks {
            let len = 37 + (chunk.seq as usize * 13) % 90;
            assert_eq!(&chunk.chunk.0[..], &vec![chunk.seq as u8; len][..], "seq {}", chunk.seq);
            assert_eq!(chunk.stream, self::chunk(chunk.seq, 0, 0).stream);
        }
        // A read after a sequence, within a budget.
        let mut budget = 200usize;
        let some = spill
            .disk_read(95, |len| {
                let fits = len <= budget;
                budget = budget.saturating_sub(len);
                fits
            })
            .unwrap()
            .run()
            .unwrap();
        assert_eq!(some.first().map(|c| c.seq), Some(96));
        assert!(some.iter().map(|c| c.chunk.len()).sum::<usize>() <= 200);
    }

    #[test]
    fn sizes_below_the_minimum_and_missing_directories_are_refused() {
        assert!(config(1024).validate().unwrap_err().contains("at least"));
        let missing = SpillConfig {
            dir: PathBuf::from("/nonexistent/tether-spill"),
            bytes_per_process: DEFAULT_SPILL_BYTES_PER_PROCESS,
        };
        assert!(missing.validate().unwrap_err().contains("/nonexistent/tether-spill"));
        config(DEFAULT_SPILL_BYTES_PER_PROCESS).validate().unwrap();
    }
}
