//! The temporary files a copy has made and not yet put in place (`.NAME.tether-PID-N`, beside
//! where each file lands), so that a copy interrupted by a signal (Ctrl-C, `SIGTERM`,
//! `SIGHUP`) removes them before it exits rather than leaving them behind for ever.
//!
//! A stage is noted before it is made and let go once it is placed or removed, whatever the
//! outcome: what is still noted when the copy is interrupted is exactly what was left halfway.
//! (A copy killed outright, `kill -9`, can remove nothing itself: the server removes the
//! stages it streamed as its connection ends, and any other left by a server that went away
//! at the next copy into the same directory; see `tether_engine::fs::stage`. Stages made
//! here, coming down, are this copy's alone to remove.)

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use tether_client::ExecServerClient;

/// How long removing the stages on the executor may take once interrupted: the person is
/// waiting for the prompt, and the executor answers a removal at once when it is reachable.
const CLEANUP_DEADLINE: Duration = Duration::from_secs(5);

#[derive(Default)]
pub(super) struct Stages {
    /// On the executor, by path.
    remote: Mutex<HashSet<PathBuf>>,
    /// Here, by the directory they are in (held open) and their name.
    local: Mutex<Vec<(OwnedFd, OsString)>>,
}

impl Stages {
    pub(super) fn remote(&self, path: PathBuf) {
        self.remote.lock().unwrap_or_else(|p| p.into_inner()).insert(path);
    }

    pub(super) fn remote_done(&self, path: &std::path::Path) {
        self.remote.lock().unwrap_or_else(|p| p.into_inner()).remove(path);
    }

    /// Notes `name` in the directory `here`; `false` (and nothing noted) if the directory
    /// cannot be held, which leaves that stage as it was before stages were noted.
    pub(super) fn local(&self, here: BorrowedFd<'_>, name: &std::ffi::OsStr) -> bool {
        let Ok(held) = here.try_clone_to_owned() else { return false };
        self.local.lock().unwrap_or_else(|p| p.into_inner()).push((held, name.to_owned()));
        true
    }

    pub(super) fn local_done(&self, name: &std::ffi::OsStr) {
        let mut local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = local.iter().position(|(_, noted)| noted == name) {
            local.swap_remove(at);
        }
    }

    /// Removes every stage still noted: here at once, on the executor within
    /// [`CLEANUP_DEADLINE`].
    pub(super) async fn remove_all(&self, client: &ExecServerClient) {
        let local = std::mem::take(&mut *self.local.lock().unwrap_or_else(|p| p.into_inner()));
        for (directory, name) in local {
            let _ = rustix::fs::unlinkat(directory.as_fd(), &name, rustix::fs::AtFlags::empty());
        }
        let remote = std::mem::take(&mut *self.remote.lock().unwrap_or_else(|p| p.into_inner()));
        let removals = remote.iter().map(|path| super::remove_remote_file(client, path));
        let all = futures_util::future::join_all(removals);
        let _ = tokio::time::timeout(CLEANUP_DEADLINE, all).await;
    }
}
