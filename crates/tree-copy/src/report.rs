//! What a copy did and did not do: told as it happens to an [`Observer`] (a progress bar, a
//! line for each entry skipped), and counted for the end ([`CopyReport`]).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::CopyError;

/// Told what a copy does as it does it. Every method has a default that does nothing, so an
/// observer takes only what it shows. Called from the copy's tasks: quick, and never blocking.
pub trait Observer: Send + Sync {
    /// `bytes` more to copy: a file found (its size when it was listed).
    fn found(&self, bytes: u64) {
        let _ = bytes;
    }

    /// `bytes` more copied.
    fn copied(&self, bytes: u64) {
        let _ = bytes;
    }

    /// `bytes` found that will not be copied after all (a file skipped).
    fn dropped(&self, bytes: u64) {
        let _ = bytes;
    }

    /// An entry of a tree skipped, and why (a [`CopyError::Denied`]); the copy goes on.
    fn skipped(&self, why: &CopyError) {
        let _ = why;
    }
}

/// The observer that shows nothing.
pub(crate) struct Unobserved;

impl Observer for Unobserved {}

/// What a copy did, and what it could not keep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CopyReport {
    /// Regular files put in place.
    pub files: u64,
    /// Directories copied (made, or there already).
    pub directories: u64,
    /// Symbolic links copied as links.
    pub links: u64,
    /// Bytes of files copied.
    pub bytes: u64,
    /// Files and directories in a tree that the source may not read, skipped (each told to
    /// the observer).
    pub denied: u64,
    /// FIFOs, sockets and devices in a tree, skipped: a copy carries files, directories and
    /// links.
    pub special: u64,
    /// Entries whose mode and time were not set: the destination lacks `fsMetadata`.
    pub metadata_not_kept: u64,
    /// Links not copied: the destination lacks `fsMetadata` and cannot make one.
    pub links_skipped: u64,
    /// Links copied as what they point to: the source lacks `fsMetadata` and cannot say
    /// which entries are links.
    pub links_followed: u64,
}

impl CopyReport {
    /// Whether everything found was copied as it was: nothing skipped, nothing left out.
    pub fn is_whole(&self) -> bool {
        self.denied == 0
            && self.special == 0
            && self.metadata_not_kept == 0
            && self.links_skipped == 0
            && self.links_followed == 0
    }
}

/// The counts of a [`CopyReport`], added to by the copy's tasks.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) files: AtomicU64,
    pub(crate) directories: AtomicU64,
    pub(crate) links: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) denied: AtomicU64,
    pub(crate) special: AtomicU64,
    pub(crate) metadata_not_kept: AtomicU64,
    pub(crate) links_skipped: AtomicU64,
    pub(crate) links_followed: AtomicU64,
}

impl Tally {
    pub(crate) fn add(count: &AtomicU64, n: u64) {
        count.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn report(&self) -> CopyReport {
        let read = |count: &AtomicU64| count.load(Ordering::Relaxed);
        CopyReport {
            files: read(&self.files),
            directories: read(&self.directories),
            links: read(&self.links),
            bytes: read(&self.bytes),
            denied: read(&self.denied),
            special: read(&self.special),
            metadata_not_kept: read(&self.metadata_not_kept),
            links_skipped: read(&self.links_skipped),
            links_followed: read(&self.links_followed),
        }
    }
}
