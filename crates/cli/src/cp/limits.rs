//! How much of a tree one copy takes on: the walk holds only the listings of the directories
//! it is inside, and stops, in one line that names the limit, at a tree wider or deeper than
//! these — a server that lists without end makes the copy fail, not grow.

use anyhow::bail;

/// Entries one copy lists at most, files, links and directories together. A large checkout
/// with its dependencies holds a few hundred thousand; a listing past this is either a tree to
/// copy in parts or a server that does not stop. An entry waiting to be copied costs its name
/// and a few words, so the listings held at once stay within a few hundred MB even when every
/// entry listed is still waiting.
pub(super) const MAX_ENTRIES: u64 = 1_000_000;

/// Directories one copy goes down at most below its root. Real trees are a few dozen deep
/// (nested `node_modules` included); each level holds a directory open here, so this also
/// keeps a copy's descriptors well inside the usual limit of 1,024.
pub(super) const MAX_DEPTH: usize = 256;

/// What a copy has listed so far.
#[derive(Default)]
pub(super) struct Budget {
    listed: u64,
}

impl Budget {
    /// Counts a listing of `count` entries of `directory` (named as the errors name it),
    /// refused when the copy would then have listed more than [`MAX_ENTRIES`].
    pub(super) fn listed(
        &mut self,
        count: usize,
        directory: impl std::fmt::Display,
    ) -> anyhow::Result<()> {
        self.listed = self.listed.saturating_add(count as u64);
        if self.listed > MAX_ENTRIES {
            bail!(
                "{directory}: the tree holds more than {MAX_ENTRIES} entries, the most one tether cp \
                 copies; copy its directories one at a time"
            );
        }
        Ok(())
    }
}

/// Refuses to go into `directory` (named as the errors name it) at `depth` below the root
/// when that is deeper than [`MAX_DEPTH`].
pub(super) fn check_depth(depth: usize, directory: impl std::fmt::Display) -> anyhow::Result<()> {
    if depth > MAX_DEPTH {
        bail!(
            "{directory}: more than {MAX_DEPTH} directories deep, the deepest one tether cp goes; \
             copy what is below it on its own"
        );
    }
    Ok(())
}
