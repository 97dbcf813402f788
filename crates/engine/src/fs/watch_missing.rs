//! `fs/watchMissing`: one connection's watch for missing paths appearing.
//!
//! A client looked for optional paths (Codex: a project's `.agents/skills`) and found them
//! missing; instead of polling, it asks to be told when looking again might find something.
//! The watch fires once — when a component along any missing path is created, or when the
//! `present` path is removed or replaced — and then ends. A connection has one watch at a time:
//! a new request replaces the last, as the reference does.
//!
//! Linux inotify wakes the watch at once; a slow periodic re-check backs it up for what inotify
//! cannot see (a directory created by another mount namespace, a watch that could not be
//! added).

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::inotify;
use tether_protocol::fs::{FsWatchMissingParams, FsWatchMissingResponse};
use tokio::io::unix::AsyncFd;
use tokio::task::JoinHandle;
use tracing::debug;

use super::FsError;

/// How often a watch re-checks its paths without being woken.
const RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The connection's current missing-path watch. Dropping it ends the watch.
#[derive(Debug, Default)]
pub struct MissingWatch {
    current: Option<JoinHandle<()>>,
    /// Watch ids this connection has used; reusing one is refused (`watching: false`).
    used_ids: HashSet<u64>,
}

impl MissingWatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the current watch. `fired` is called once, with the watch id, when the watch
    /// fires. Answers `watching: false`, and sets nothing, when looking again now would already
    /// find something: a missing path exists or `present` does not (or the id was used before).
    ///
    /// It looks at the filesystem on the calling thread: from async code, run
    /// [`MissingWatch::prepare`] on the blocking pool and [`MissingWatch::install`] after.
    pub fn watch(
        &mut self,
        params: FsWatchMissingParams,
        fired: impl FnOnce(u64) + Send + 'static,
    ) -> Result<FsWatchMissingResponse, FsError> {
        Ok(self.install(Self::prepare(params)?, fired))
    }

    /// The filesystem half of a watch: the paths looked at as they are now, and the inotify
    /// watches added where the awaited changes would show. Blocking (a `stat` per path
    /// component); needs a runtime's context (the blocking pool has one).
    pub fn prepare(params: FsWatchMissingParams) -> Result<PreparedWatch, FsError> {
        let missing = params
            .missing
            .iter()
            .map(|uri| uri.to_path().map_err(|e| FsError::invalid_input(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        let present = match &params.present {
            Some(uri) => Some(uri.to_path().map_err(|e| FsError::invalid_input(e.to_string()))?),
            None => None,
        };
        let baseline = Snapshot::take(&missing, present.as_deref());
        let already = baseline.any_missing_exists(&missing)
            || (present.is_some() && baseline.present.is_none());
        // Watches go in before the answer, so a change right after it is seen; the first
        // re-check in `wait_for_change` catches one between the snapshot and now.
        let watcher = if already { None } else { Watcher::new(&missing, present.as_deref()) };
        Ok(PreparedWatch {
            watch_id: params.watch_id,
            paths: Arc::new(Paths { missing, present }),
            baseline,
            watcher,
            already,
        })
    }

    /// Makes a prepared watch the connection's, replacing the last one.
    pub fn install(
        &mut self,
        prepared: PreparedWatch,
        fired: impl FnOnce(u64) + Send + 'static,
    ) -> FsWatchMissingResponse {
        if let Some(previous) = self.current.take() {
            previous.abort();
        }
        if !self.used_ids.insert(prepared.watch_id) || prepared.already {
            return FsWatchMissingResponse { watching: false };
        }
        let PreparedWatch { watch_id, paths, baseline, watcher, .. } = prepared;
        self.current = Some(tokio::spawn(async move {
            wait_for_change(watcher, paths, &baseline).await;
            debug!(watch_id, "watched missing paths changed");
            fired(watch_id);
        }));
        FsWatchMissingResponse { watching: true }
    }
}

/// A watch looked at and set up, not yet the connection's ([`MissingWatch::prepare`]).
#[derive(Debug)]
pub struct PreparedWatch {
    watch_id: u64,
    paths: Arc<Paths>,
    baseline: Snapshot,
    watcher: Option<Watcher>,
    /// Looking again would already find something: nothing to wait for.
    already: bool,
}

/// What a watch looks at.
#[derive(Debug)]
struct Paths {
    missing: Vec<PathBuf>,
    present: Option<PathBuf>,
}

impl Drop for MissingWatch {
    fn drop(&mut self) {
        if let Some(current) = self.current.take() {
            current.abort();
        }
    }
}

/// What the watch compares against: how far each missing path exists, and which file
/// `present` is.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    /// Per missing path, how many of its leading components exist.
    existing_depths: Vec<usize>,
    /// `present`'s device and inode, if it exists.
    present: Option<(u64, u64)>,
}

impl Snapshot {
    fn take(missing: &[PathBuf], present: Option<&Path>) -> Self {
        Self {
            existing_depths: missing.iter().map(|p| existing_depth(p)).collect(),
            present: present
                .and_then(|p| std::fs::symlink_metadata(p).ok())
                .map(|m| (m.dev(), m.ino())),
        }
    }

    fn any_missing_exists(&self, missing: &[PathBuf]) -> bool {
        missing.iter().zip(&self.existing_depths).any(|(p, depth)| *depth == p.components().count())
    }

    /// Whether something the watch waits for happened since `baseline`.
    fn changed_since(&self, baseline: &Snapshot) -> bool {
        self.present != baseline.present
            || self
                .existing_depths
                .iter()
                .zip(&baseline.existing_depths)
                .any(|(now, then)| now > then)
    }
}

/// How many leading components of `path` exist.
fn existing_depth(path: &Path) -> usize {
    path.ancestors()
        .find(|a| std::fs::symlink_metadata(a).is_ok())
        .map_or(0, |a| a.components().count())
}

/// The deepest existing ancestor of `path` (the directory a creation would show up in).
fn deepest_existing(path: &Path) -> Option<&Path> {
    path.ancestors().find(|a| std::fs::symlink_metadata(a).is_ok())
}

/// Re-checks the paths when inotify wakes the watch (or every [`RECHECK_INTERVAL`]) until
/// something changed. Each look is a few `stat`s, made on the blocking pool.
async fn wait_for_change(watcher: Option<Watcher>, paths: Arc<Paths>, baseline: &Snapshot) {
    loop {
        let look = paths.clone();
        let now = tokio::task::spawn_blocking(move || {
            Snapshot::take(&look.missing, look.present.as_deref())
        })
        .await;
        // A look that panicked says nothing changed; the next one tries again.
        if now.is_ok_and(|now| now.changed_since(baseline)) {
            return;
        }
        match &watcher {
            Some(watcher) => {
                let _ = tokio::time::timeout(RECHECK_INTERVAL, watcher.woken()).await;
            }
            None => tokio::time::sleep(RECHECK_INTERVAL).await,
        }
    }
}

/// An inotify instance watching the directories where the awaited changes would show.
#[derive(Debug)]
struct Watcher {
    fd: AsyncFd<rustix::fd::OwnedFd>,
}

impl Watcher {
    fn new(missing: &[PathBuf], present: Option<&Path>) -> Option<Self> {
        let fd =
            inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).ok()?;
        let creations = inotify::WatchFlags::CREATE | inotify::WatchFlags::MOVED_TO;
        for path in missing {
            if let Some(dir) = deepest_existing(path) {
                let _ = inotify::add_watch(&fd, dir, creations);
            }
        }
        if let Some(present) = present {
            let gone = inotify::WatchFlags::DELETE_SELF | inotify::WatchFlags::MOVE_SELF;
            let _ = inotify::add_watch(&fd, present, gone | inotify::WatchFlags::DONT_FOLLOW);
            if let Some(parent) = present.parent() {
                let removed = inotify::WatchFlags::DELETE | inotify::WatchFlags::MOVED_FROM;
                let _ = inotify::add_watch(&fd, parent, removed | creations);
            }
        }
        // SAFETY: `fd` is an owned, open inotify descriptor that the `AsyncFd` owns from here on,
        // so it stays open and the same for the `AsyncFd`'s whole life.
        let fd =
            unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()?;
        Some(Self { fd })
    }

    /// Waits for any event and discards it: the caller re-checks the paths themselves.
    async fn woken(&self) {
        let Ok(mut guard) = self.fd.readable().await else {
            return std::future::pending().await;
        };
        let mut buffer = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(self.fd.get_ref(), &mut buffer);
        while reader.next().is_ok() {}
        guard.clear_ready();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tether_protocol::PathUri;

    use super::*;

    fn uri(path: &Path) -> PathUri {
        PathUri::from_path(path).unwrap()
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tether-watch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("present")).unwrap();
        dir
    }

    fn recorder() -> (Arc<Mutex<Vec<u64>>>, impl FnOnce(u64) + Send + 'static) {
        let fired = Arc::new(Mutex::new(Vec::new()));
        let sink = fired.clone();
        (fired, move |id| sink.lock().unwrap().push(id))
    }

    async fn eventually(fired: &Arc<Mutex<Vec<u64>>>) -> Vec<u64> {
        for _ in 0..100 {
            if !fired.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        fired.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn fires_once_when_a_component_of_a_missing_path_appears() {
        let dir = scratch("component");
        let mut watch = MissingWatch::new();
        let (fired, sink) = recorder();
        let params = FsWatchMissingParams {
            watch_id: 7,
            missing: vec![uri(&dir.join("d/e"))],
            present: Some(uri(&dir.join("present"))),
        };
        assert!(watch.watch(params, sink).unwrap().watching);
        std::fs::create_dir(dir.join("d")).unwrap();
        assert_eq!(eventually(&fired).await, [7]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn fires_when_present_goes_away() {
        let dir = scratch("present");
        let mut watch = MissingWatch::new();
        let (fired, sink) = recorder();
        let params = FsWatchMissingParams {
            watch_id: 1,
            missing: vec![uri(&dir.join("never"))],
            present: Some(uri(&dir.join("present"))),
        };
        assert!(watch.watch(params, sink).unwrap().watching);
        std::fs::rename(dir.join("present"), dir.join("moved")).unwrap();
        assert_eq!(eventually(&fired).await, [1]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn refuses_when_looking_again_would_already_find_something() {
        let dir = scratch("refuse");
        let mut watch = MissingWatch::new();
        let exists = FsWatchMissingParams {
            watch_id: 1,
            missing: vec![uri(&dir.join("present"))],
            present: None,
        };
        assert!(!watch.watch(exists, |_| {}).unwrap().watching);
        let no_present = FsWatchMissingParams {
            watch_id: 2,
            missing: vec![uri(&dir.join("x"))],
            present: Some(uri(&dir.join("gone"))),
        };
        assert!(!watch.watch(no_present, |_| {}).unwrap().watching);
        let fine =
            FsWatchMissingParams { watch_id: 3, missing: vec![uri(&dir.join("x"))], present: None };
        assert!(watch.watch(fine.clone(), |_| {}).unwrap().watching);
        assert!(!watch.watch(fine, |_| {}).unwrap().watching, "a watch id is used once");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_new_watch_replaces_the_last() {
        let dir = scratch("replace");
        let mut watch = MissingWatch::new();
        let (first, sink) = recorder();
        let params =
            FsWatchMissingParams { watch_id: 1, missing: vec![uri(&dir.join("a"))], present: None };
        assert!(watch.watch(params, sink).unwrap().watching);
        let (second, sink) = recorder();
        let params =
            FsWatchMissingParams { watch_id: 2, missing: vec![uri(&dir.join("b"))], present: None };
        assert!(watch.watch(params, sink).unwrap().watching);
        std::fs::write(dir.join("a"), "").unwrap();
        std::fs::write(dir.join("b"), "").unwrap();
        assert_eq!(eventually(&second).await, [2]);
        assert!(first.lock().unwrap().is_empty(), "the replaced watch never fires");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
