//! Mount targets made on the host for protected names that do not exist.
//!
//! A writable root's missing `.git` (or `.agents`, `.codex`, `.aws`) is covered inside the
//! sandbox by an empty read-only directory, so the command cannot create one. A mount needs a
//! target, and the target lies in the writable root on the host, so an empty directory appears
//! there while the command runs. Tether removes it when the last sandbox using it has ended.
//!
//! The count is what keeps this safe: removing the directory while another sandbox still has
//! something mounted on it would detach that mount, and that command could then create the
//! name it must not. So each path is counted across the server, and removed at zero — only
//! if it is still the empty directory Tether made (`rmdir` leaves a non-empty one alone).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// Paths Tether made, with how many live sandboxes use each.
static IN_USE: Mutex<Option<HashMap<PathBuf, usize>>> = Mutex::new(None);

fn in_use() -> MutexGuard<'static, Option<HashMap<PathBuf, usize>>> {
    IN_USE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The targets one sandbox holds; dropping it lets them go.
#[derive(Debug, Default)]
pub struct SyntheticTargets {
    held: Vec<PathBuf>,
}

impl SyntheticTargets {
    /// Makes `path` an empty directory for the sandbox about to start, if it does not exist,
    /// and holds it. A path that already exists and was not made here is not held (it is the
    /// user's, and stays).
    pub fn make(&mut self, path: &Path) -> std::io::Result<()> {
        let mut guard = in_use();
        let counts = guard.get_or_insert_with(HashMap::new);
        if let Some(count) = counts.get_mut(path) {
            *count += 1;
        } else {
            match std::fs::create_dir(path) {
                Ok(()) => {}
                // Somebody else's: mounted over all the same, never removed.
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
                Err(error) => return Err(error),
            }
            counts.insert(path.to_path_buf(), 1);
        }
        self.held.push(path.to_path_buf());
        Ok(())
    }
}

impl Drop for SyntheticTargets {
    fn drop(&mut self) {
        let mut guard = in_use();
        let Some(counts) = guard.as_mut() else { return };
        for path in self.held.drain(..) {
            let Some(count) = counts.get_mut(&path) else { continue };
            *count -= 1;
            if *count == 0 {
                counts.remove(&path);
                // Only an empty directory goes; anything put there since stays.
                let _ = std::fs::remove_dir(&path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_holder_removes_what_was_made_and_the_users_own_stays() {
        let dir = std::env::temp_dir().join(format!("tether-synthetic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let made = dir.join(".git");
        let (mut first, mut second) = (SyntheticTargets::default(), SyntheticTargets::default());
        first.make(&made).unwrap();
        second.make(&made).unwrap();
        assert!(made.is_dir());
        drop(first);
        assert!(made.is_dir(), "still used by the second sandbox");
        drop(second);
        assert!(!made.exists());

        let users = dir.join(".codex");
        std::fs::create_dir(&users).unwrap();
        let mut held = SyntheticTargets::default();
        held.make(&users).unwrap();
        drop(held);
        assert!(users.is_dir(), "not made here, so not removed");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
