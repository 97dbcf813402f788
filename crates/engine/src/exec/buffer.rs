//! How much a process handle holds for a caller that has not taken its updates: the same
//! bound for the in-process handles here and the client's remote ones.

use super::ProcessUpdate;
use crate::ProcessEvent;

/// Most bytes of updates one process handle holds for a caller that has not taken them.
///
/// Four times the largest catch-up page (1 MiB) and 64 of the largest output chunks (64 KiB):
/// enough that a caller reading at its own pace never notices the bound, small enough that a
/// thousand idle handles cost a few GiB at worst, not everything. Past it, a handle lets
/// output pass and catches up later from the process's retained output.
pub const HANDLE_BUFFER_BYTES: usize = 4 * 1024 * 1024;

/// A full handle takes output again once its caller has read it down to this: half the
/// buffer, so the window refills in megabyte steps rather than one chunk at a time.
pub const RESUME_BELOW_BYTES: usize = HANDLE_BUFFER_BYTES / 2;

/// What one update costs besides its output bytes, so that a flood of empty updates (exits,
/// empty chunks) is bounded too: about what the update and its queue slot take in memory.
pub const UPDATE_OVERHEAD_BYTES: usize = 64;

/// What one update costs against its handle's buffer.
pub fn update_cost(update: &ProcessUpdate) -> usize {
    UPDATE_OVERHEAD_BYTES
        + match update {
            ProcessUpdate::Event(ProcessEvent::Output { chunk, .. }) => chunk.len(),
            ProcessUpdate::Failed(failure) => failure.message.len(),
            ProcessUpdate::Event(_) => 0,
        }
}
