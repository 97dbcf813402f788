//! The temporary files a copy has made and not yet put in place (`.NAME.tether-PID-N`, beside
//! where each file lands), so that a copy abandoned halfway (a signal, a dropped future)
//! removes them rather than leaving them behind for ever.
//!
//! A stage is noted before it is made and let go once it is placed or removed, whatever the
//! outcome: what is still noted when the copy is abandoned is exactly what was left halfway.
//! (A copy killed outright, `kill -9`, can remove nothing itself: a Tether server removes the
//! stages it streamed as their connection ends, and any other left by a server that went away
//! at the next copy into the same directory; see `tether_engine::fs::stage`.)

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tether_engine::fs::FileSystem;
use tether_protocol::fs::FsRemoveParams;

use crate::side::uri;

/// How long removing the stages of an abandoned copy may take: a person is waiting for the
/// prompt, and a side answers a removal at once when it is reachable.
pub const CLEANUP_DEADLINE: Duration = Duration::from_secs(5);

/// The stages not yet in place, on the destination, by path. At most one per file in flight
/// ([`crate::walk`]'s `FILES_IN_FLIGHT`), so a set and never a queue.
#[derive(Default)]
pub(crate) struct Stages {
    noted: Mutex<HashSet<PathBuf>>,
}

impl Stages {
    pub(crate) fn note(&self, path: &Path) {
        self.noted.lock().unwrap_or_else(|p| p.into_inner()).insert(path.to_owned());
    }

    pub(crate) fn done(&self, path: &Path) {
        self.noted.lock().unwrap_or_else(|p| p.into_inner()).remove(path);
    }

    /// Removes every stage still noted from `fs`, within [`CLEANUP_DEADLINE`].
    pub(crate) async fn remove_all(&self, fs: &dyn FileSystem) {
        let noted = std::mem::take(&mut *self.noted.lock().unwrap_or_else(|p| p.into_inner()));
        let removals = noted.iter().map(|path| remove_file(fs, path));
        let all = futures_util::future::join_all(removals);
        let _ = tokio::time::timeout(CLEANUP_DEADLINE, all).await;
    }
}

/// A path for a file being written next to `path`, unique to this process. It is a staged
/// name a Tether server knows (`tether_engine::fs::staged_name`): a stage it opens under it is
/// held for this copy, and removed by the server if the copy's connection ends first.
pub(crate) fn staged_path(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let unique = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().unwrap_or(OsStr::new(""));
    path.with_file_name(tether_engine::fs::staged_name(name, std::process::id(), unique))
}

/// Removes the file or link `path` if it is there (a stage given up), whatever comes of it:
/// nothing more can be done about one that stays.
pub(crate) async fn remove_file(fs: &dyn FileSystem, path: &Path) {
    if let Ok(path) = uri(path) {
        let params = FsRemoveParams {
            path,
            recursive: Some(false),
            force: Some(true),
            follow_symlinks: Some(false),
            sandbox: None,
        };
        let _ = fs.remove(params).await;
    }
}
