//! A process's older output on disk: what the in-memory history lets go of, kept in a bounded
//! file so that a client away for minutes still catches up on every byte
//! (`tether serve --spill-output-dir`).
//!
//! Each spilling process owns one anonymous file (created unlinked, so nothing is left behind
//! when the process is forgotten or the server dies) used as a ring of `capacity` bytes: new
//! chunks are written after the newest, and the oldest are dropped when the ring is full. The
//! index of what the ring holds stays in memory, a few dozen bytes per chunk.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

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

/// The spilled part of one process's history, oldest first, all older than what is in memory.
#[derive(Debug)]
pub(crate) struct Spill {
    file: File,
    capacity: u64,
    entries: VecDeque<Entry>,
    /// Where the next chunk's bytes go, counted like [`Entry::offset`].
    end: u64,
}

impl Spill {
    pub(crate) fn create(config: &SpillConfig) -> io::Result<Self> {
        Ok(Self {
            file: anonymous_file(&config.dir)?,
            capacity: config.bytes_per_process.max(MIN_SPILL_BYTES_PER_PROCESS),
            entries: VecDeque::new(),
            end: 0,
        })
    }

    /// Bytes held now.
    pub(crate) fn bytes(&self) -> u64 {
        self.entries.front().map_or(0, |first| self.end - first.offset)
    }

    pub(crate) fn first_seq(&self) -> Option<u64> {
        self.entries.front().map(|e| e.seq)
    }

    pub(crate) fn last_seq(&self) -> Option<u64> {
        self.entries.back().map(|e| e.seq)
    }

    /// Whether a chunk after `after_seq` is held here.
    pub(crate) fn has_after(&self, after_seq: u64) -> bool {
        self.last_seq().is_some_and(|last| last > after_seq)
    }

    /// Keeps a chunk the memory let go of, dropping the oldest to make room. Returns the last
    /// sequence dropped, if any was.
    pub(crate) fn push(&mut self, chunk: &ProcessOutputChunk) -> io::Result<Option<u64>> {
        let bytes: &[u8] = &chunk.chunk.0;
        let len = bytes.len() as u64;
        if len > self.capacity {
            // Cannot happen with the pump's chunk sizes; dropping everything keeps "what is
            // gone is everything up to a sequence" true.
            self.entries.clear();
            return Ok(Some(chunk.seq));
        }
        let mut dropped = None;
        while !self.entries.is_empty()
            && (self.bytes() + len > self.capacity
                || self.entries.len() >= SPILLED_CHUNKS_PER_PROCESS)
        {
            dropped = self.entries.pop_front().map(|e| e.seq);
        }
        self.write_at(self.end, bytes)?;
        self.entries.push_back(Entry {
            seq: chunk.seq,
            offset: self.end,
            len: len as u32,
            stream: chunk.stream,
        });
        self.end += len;
        Ok(dropped)
    }

    /// The chunks after `after_seq` that `admit` lets in, in order, read back from the file.
    pub(crate) fn read_after(
        &self,
        after_seq: u64,
        mut admit: impl FnMut(usize) -> bool,
    ) -> io::Result<Vec<ProcessOutputChunk>> {
        let start = self.entries.partition_point(|e| e.seq <= after_seq);
        let taken: Vec<Entry> =
            self.entries.range(start..).copied().take_while(|e| admit(e.len as usize)).collect();
        let (Some(first), Some(last)) = (taken.first(), taken.last()) else {
            return Ok(Vec::new());
        };
        // The chunks are contiguous: one read, then slices of it.
        let span = (last.offset + u64::from(last.len) - first.offset) as usize;
        let mut buffer = BytesMut::zeroed(span);
        self.read_at(first.offset, &mut buffer)?;
        let mut bytes: Bytes = buffer.freeze();
        Ok(taken
            .iter()
            .map(|entry| ProcessOutputChunk {
                seq: entry.seq,
                stream: entry.stream,
                chunk: ByteChunk(bytes.split_to(entry.len as usize)),
            })
            .collect())
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
    /// byte for byte, across the wrap.
    #[test]
    fn the_ring_keeps_the_newest_chunks_across_wraps() {
        let mut spill = Spill::create(&config(0)).unwrap();
        spill.capacity = 1000;
        let mut last_dropped = 0;
        for seq in 1..=100u64 {
            let len = 37 + (seq as usize * 13) % 90;
            if let Some(dropped) = spill.push(&chunk(seq, seq as u8, len)).unwrap() {
                assert!(dropped > last_dropped);
                last_dropped = dropped;
            }
            assert!(spill.bytes() <= 1000);
        }
        assert_eq!(spill.first_seq(), Some(last_dropped + 1));
        let chunks = spill.read_after(0, |_| true).unwrap();
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
            .read_after(95, |len| {
                let fits = len <= budget;
                budget = budget.saturating_sub(len);
                fits
            })
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
