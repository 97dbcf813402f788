//! File writes made in pieces of at most [`WRITE_PIECE_BYTES`].
//!
//! A buffered write is given page-cache memory in blocks ("folios") as large as the write
//! allows: a 1 MiB write at a 1 MiB boundary takes one 1 MiB block, a 2 MiB write a 2 MiB one.
//! On a virtual machine whose host takes back the guest's free memory (free page reporting
//! through a virtio balloon, as on the VM these figures come from), large free blocks are exactly
//! what the host has taken back, so every such block is faulted in again from the host, 4 KiB
//! at a time, while the write copies into it. Small blocks come from memory the guest still
//! has. Measured on such a machine (1 GB into a new file, a few seconds after the last big
//! write): in 1 MiB writes 170–200 MB/s, in 2 MiB and 4 MiB writes 120–165, in writes of
//! 64–768 KiB 2.2–4.3 GB/s. The server wrote each 1 MiB `fs/writeBlock` in one call, and
//! `tether cp` of 1 GB up ran at 113–142 MB/s; in pieces, at 446–521 (three rounds each,
//! alternately). Where no memory has been taken back, the size makes no difference.
//!
//! Pieces of 256 KiB stay well below where that starts and cost one system call per 256 KiB
//! (about a microsecond, against ~60 µs of copying), on any machine.

use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt as _;

/// The most one write system call is given. A power of two, so pieces of a block written at a
/// 1 MiB offset stay aligned to their size, as the kernel's blocks are.
pub const WRITE_PIECE_BYTES: usize = 256 * 1024;

/// Writes all of `bytes` at `offset` (positionally, so writers of other ranges may share
/// `file`), [`WRITE_PIECE_BYTES`] at a time.
pub fn write_all_at(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    let mut at = offset;
    for piece in bytes.chunks(WRITE_PIECE_BYTES) {
        file.write_all_at(piece, at)?;
        at += piece.len() as u64;
    }
    Ok(())
}

/// Writes all of `bytes` at the file's cursor, [`WRITE_PIECE_BYTES`] at a time.
pub fn write_all(mut file: &File, bytes: &[u8]) -> io::Result<()> {
    for piece in bytes.chunks(WRITE_PIECE_BYTES) {
        file.write_all(piece)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_testkit::scratch::Scratch;

    /// Bytes that differ at every offset of a piece, so a piece written at the wrong offset or
    /// twice shows.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn a_block_bigger_than_a_piece_lands_whole_at_its_offset() {
        let dir = Scratch::new("piecewise-at");
        let file = File::create(dir.path("f")).unwrap();
        let first = pattern(3 * WRITE_PIECE_BYTES + 17);
        let second = pattern(WRITE_PIECE_BYTES - 1);
        // Out of order, as blocks in flight may land.
        write_all_at(&file, &second, first.len() as u64).unwrap();
        write_all_at(&file, &first, 0).unwrap();
        assert_eq!(dir.read("f"), [first, second].concat());
    }

    #[test]
    fn a_cursor_write_appends_every_piece_in_order() {
        let dir = Scratch::new("piecewise-cursor");
        let file = File::create(dir.path("f")).unwrap();
        let bytes = pattern(2 * WRITE_PIECE_BYTES + 5);
        write_all(&file, &bytes).unwrap();
        write_all(&file, b"end").unwrap();
        write_all(&file, b"").unwrap();
        assert_eq!(dir.read("f"), [bytes, b"end".to_vec()].concat());
    }
}
