//! How much of a tree one copy takes on: the walk holds only the listings of the directories
//! it is inside, and stops, in one line that names the limit, at a tree wider or deeper than
//! these — a side that lists without end makes the copy fail, not grow — and how big a file
//! is copied in one call.

use crate::error::CopyError;
use crate::shown::Shown;

/// Entries one copy lists at most, files, links and directories together. A large checkout
/// with its dependencies holds a few hundred thousand; a listing past this is either a tree to
/// copy in parts or a side that does not stop. An entry waiting to be copied costs its name
/// and a few words, so the listings held at once stay within a few hundred MB even when every
/// entry listed is still waiting.
pub const MAX_ENTRIES: u64 = 1_000_000;

/// Directories one copy goes down at most below its root. Real trees are a few dozen deep
/// (nested `node_modules` included); a path this deep is already near the 4,096 bytes a path
/// may have.
pub const MAX_DEPTH: usize = 256;

/// Files up to this size go in one call each way (`fs/readFile`, then `fs/putFile`) instead of
/// a handle's open, blocks and close: a tree of small files is mostly round trips otherwise.
/// One block's worth, so a file in flight costs what a block of a big one does.
pub(crate) const WHOLE_FILE_MAX_BYTES: u64 = tether_protocol::fs::FS_BLOCK_MAX_BYTES as u64;

/// What a copy has listed so far.
#[derive(Default)]
pub(crate) struct Budget {
    listed: u64,
}

impl Budget {
    /// Counts a listing of `count` entries of `directory`, refused when the copy would then
    /// have listed more than [`MAX_ENTRIES`].
    pub(crate) fn listed(&mut self, count: usize, directory: &Shown) -> Result<(), CopyError> {
        self.listed = self.listed.saturating_add(count as u64);
        if self.listed > MAX_ENTRIES {
            return Err(CopyError::TooManyEntries(directory.clone()));
        }
        Ok(())
    }
}

/// Refuses to go into `directory` at `depth` below the root when that is deeper than
/// [`MAX_DEPTH`].
pub(crate) fn check_depth(depth: usize, directory: &Shown) -> Result<(), CopyError> {
    if depth > MAX_DEPTH {
        return Err(CopyError::TooDeep(directory.clone()));
    }
    Ok(())
}
