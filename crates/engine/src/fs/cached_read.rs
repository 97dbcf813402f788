//! Small `fs/readFile`s answered on the calling thread when the kernel has the file in memory.
//!
//! As with [`super::cached_metadata`]: an agent reads many small files a turn, and handing each
//! read to the blocking pool and back costs more thread wake-ups than the read itself. It goes
//! there because a read *may* block — on the disk, on a network or FUSE filesystem's server.
//! So a read is done here only when it cannot:
//!
//! - the path resolves from the kernel's lookup cache alone, through no link, to a regular
//!   file on a kernel-local filesystem ([`cached_metadata::resolve`]), of at most
//!   [`INLINE_READ_MAX_BYTES`];
//! - every byte is in the page cache: `preadv2` with `RWF_NOWAIT` fails at once rather than
//!   read from the disk (`EAGAIN`), or where the filesystem cannot promise that
//!   (`EOPNOTSUPP`);
//! - the server's whole-read budget has room for it now (a read never waits for it here).
//!
//! Anything else returns `None` and the caller takes the usual path, which answers exactly as
//! before (errors included: this path never produces one). What a read here may still wait
//! for is the file's access time being noted, which on a local filesystem is a journal's
//! memory, not its disk.

use std::path::Path;

use rustix::fs::{FileType, OFlags};
use rustix::io::{Errno, ReadWriteFlags};

use super::whole_read::{ReadGrant, WholeReadBudget};
use super::{cached_metadata, no_follow};

/// The largest file read on the calling thread: a page-cache copy of 64 KiB takes a few
/// microseconds, well under the blocking pool's round trip, and most files an agent reads
/// whole (sources, configs, manifests) are smaller. Larger ones take the usual path, where a
/// long copy holds no connection's thread.
pub(crate) const INLINE_READ_MAX_BYTES: u64 = 64 * 1024;

/// The contents of `path` and their share of `budget`, if the file is small and in memory;
/// `None` means "read it the usual way".
pub(crate) fn read(path: &Path, budget: &WholeReadBudget) -> Option<(Vec<u8>, ReadGrant)> {
    let stat = cached_metadata::resolve(path)?;
    if no_follow::file_type(&stat) != FileType::RegularFile || stat.stx_size > INLINE_READ_MAX_BYTES
    {
        return None;
    }
    // Opened for reading only once it is known to be a regular file (opening a device can
    // have effects of its own), and checked to be the same file: the path may have been
    // replaced in between.
    let file = cached_metadata::open_cached(path, OFlags::RDONLY | OFlags::NONBLOCK)?;
    let opened = rustix::fs::fstat(&file).ok()?;
    if opened.st_ino != stat.stx_ino
        || rustix::fs::major(opened.st_dev) != stat.stx_dev_major
        || rustix::fs::minor(opened.st_dev) != stat.stx_dev_minor
    {
        return None;
    }
    // One byte more than the size says, to see the end of the file within the share.
    let want = stat.stx_size + 1;
    let grant = budget.try_grant(want)?;
    let mut bytes = vec![0u8; want as usize];
    let mut filled = 0;
    loop {
        let read = match rustix::io::preadv2(
            &file,
            &mut [std::io::IoSliceMut::new(&mut bytes[filled..])],
            filled as u64,
            ReadWriteFlags::NOWAIT,
        ) {
            Ok(read) => read,
            Err(Errno::INTR) => continue,
            Err(_) => return None,
        };
        if read == 0 {
            break;
        }
        filled += read;
        if filled == bytes.len() {
            // Longer than it said (it grew): the usual path reads on within the budget.
            return None;
        }
    }
    bytes.truncate(filled);
    Some((bytes, grant))
}

#[cfg(test)]
mod tests {
    use tether_testkit::scratch::Scratch;

    use super::*;

    fn budget() -> WholeReadBudget {
        WholeReadBudget::new(1024 * 1024)
    }

    /// A small file just written is in the page cache: read here, whole, holding its share.
    #[test]
    fn a_small_cached_file_is_read_here_with_its_share_of_the_budget() {
        let dir = Scratch::new("cached-read");
        let contents: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let file = dir.file("file", &contents);
        let budget = budget();
        let (bytes, grant) = read(&file, &budget).expect("a cached small file is read here");
        assert_eq!(bytes, contents);
        assert_eq!(grant.into_permit().num_permits(), contents.len() + 1);
        let empty = dir.file("empty", b"");
        let (bytes, _) = read(&empty, &budget).expect("an empty file is read here");
        assert!(bytes.is_empty());
    }

    #[test]
    fn large_files_links_directories_and_a_full_budget_go_the_usual_way() {
        let dir = Scratch::new("cached-read-refusals");
        let large = dir.file("large", &vec![1u8; INLINE_READ_MAX_BYTES as usize + 1]);
        assert!(read(&large, &budget()).is_none(), "over the inline size");
        let small = dir.file("small", b"small");
        let link = dir.path("link");
        std::os::unix::fs::symlink(&small, &link).unwrap();
        assert!(read(&link, &budget()).is_none(), "a link");
        assert!(read(&dir.path(""), &budget()).is_none(), "a directory");
        assert!(read(&dir.path("missing"), &budget()).is_none(), "a missing path");
        let fifo = dir.path("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(read(&fifo, &budget()).is_none(), "a FIFO is never opened here");
        let tight = WholeReadBudget::new(3);
        assert!(read(&small, &tight).is_none(), "a budget without room");
        // procfs is not a local filesystem of the list (its files say they are empty).
        assert!(read(Path::new("/proc/self/status"), &budget()).is_none());
    }
}
