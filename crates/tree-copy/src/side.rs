//! One end of a copy: a filesystem, where it is, and whether it keeps modes, times and links.

use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

use tether_engine::fs::FileSystem;
use tether_protocol::PathUri;

use crate::error::CopyError;
use crate::shown::{Place, Shown};

/// Whether a side keeps modes, times and links, not yet known: learnt from its first answer.
const UNKNOWN: u8 = 0;
const KEEPS: u8 = 1;
const LACKS: u8 = 2;

/// One end of a copy: the filesystem its files are read from or written to, and where it is.
///
/// Whether it keeps modes, times and links (Tether's `fsMetadata` extension; a server without
/// it refuses those calls unsent, as `Unsupported`) is learnt from the first look at a path
/// there, which asks for the mode: nothing is asked of a person or sent twice.
pub struct Side<'a> {
    pub(crate) fs: &'a dyn FileSystem,
    pub(crate) place: Place,
    metadata: AtomicU8,
}

impl<'a> Side<'a> {
    pub fn new(fs: &'a dyn FileSystem, place: Place) -> Self {
        Self { fs, place, metadata: AtomicU8::new(UNKNOWN) }
    }

    /// This machine's files, through the engine's `LocalFileSystem` (or any other).
    pub fn here(fs: &'a dyn FileSystem) -> Self {
        Self::new(fs, Place::Here)
    }

    /// An executor's files, through a client.
    pub fn executor(fs: &'a dyn FileSystem) -> Self {
        Self::new(fs, Place::Executor(None))
    }

    /// `path` named as this side names it.
    pub fn shown(&self, path: &Path) -> Shown {
        Shown { path: path.to_owned(), place: self.place.clone() }
    }

    /// Whether the side keeps modes, times and links; `true` until it has said otherwise.
    pub(crate) fn keeps_metadata(&self) -> bool {
        self.metadata.load(Ordering::Relaxed) != LACKS
    }

    pub(crate) fn learnt(&self, keeps: bool) {
        self.metadata.store(if keeps { KEEPS } else { LACKS }, Ordering::Relaxed);
    }
}

/// The `file:` URI of an absolute path.
pub(crate) fn uri(path: &Path) -> Result<PathUri, CopyError> {
    PathUri::from_path(path).ok_or_else(|| CopyError::NotAbsolute(path.to_owned()))
}
