//! A started child, however it was started: its exit awaited, and killed if let go running.

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use rustix::process::{Pid, Signal, WaitOptions};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A child process of the server.
pub(crate) enum Child {
    /// Started by `fork` and exec (`tokio::process`): where something must run in the child
    /// before its exec (a PTY's controlling terminal, a network filter).
    Forked(tokio::process::Child),
    /// Started by `posix_spawn` ([`super::posix_spawn`]); its exit is seen on a pidfd.
    Spawned(SpawnedChild),
}

impl Child {
    pub fn id(&self) -> Option<u32> {
        match self {
            Child::Forked(child) => child.id(),
            Child::Spawned(child) => Some(child.pid.as_raw_nonzero().get() as u32),
        }
    }

    /// Waits for the child to exit and reaps it. Cancel-safe: a later call picks up where a
    /// dropped one left off.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self {
            Child::Forked(child) => child.wait().await,
            Child::Spawned(child) => child.wait().await,
        }
    }
}

/// A child started without `fork`, and the pidfd that becomes readable when it exits.
pub(crate) struct SpawnedChild {
    pid: Pid,
    /// Always there but in `drop`, which hands it to the task that reaps a killed child.
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
}

impl SpawnedChild {
    /// Takes charge of `pid`, a child of this process that nothing else waits for (so the pid
    /// cannot be reused before the pidfd is open: it stays a zombie until reaped here).
    pub fn new(pid: Pid) -> std::io::Result<Self> {
        let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?;
        // SAFETY: `pidfd` is owned, open, and moved into the `AsyncFd`, which owns it from here
        // on: it stays the same descriptor for the registration's whole life.
        let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
            .map_err(|refused| refused.into_parts().1)?;
        Ok(Self { pid, pidfd: Some(pidfd), status: None })
    }

    async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let pidfd = self.pidfd.as_ref().expect("the pidfd is kept until drop");
        loop {
            let mut ready = pidfd.readable().await?;
            if let Some(status) = reap(self.pid)? {
                self.status = Some(status);
                return Ok(status);
            }
            ready.clear_ready();
        }
    }
}

/// Reaps `pid` if it has exited.
fn reap(pid: Pid) -> std::io::Result<Option<ExitStatus>> {
    let reaped = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG)?;
    Ok(reaped.map(|(_, status)| ExitStatus::from_raw(status.as_raw())))
}

impl Drop for SpawnedChild {
    /// As `tokio::process`'s `kill_on_drop`: a child let go while running is killed, and
    /// reaped once it is gone so that no zombie stays behind.
    fn drop(&mut self) {
        let Some(pidfd) = self.pidfd.take() else { return };
        if self.status.is_some() || matches!(reap(self.pid), Ok(Some(_))) {
            return;
        }
        let _ = rustix::process::pidfd_send_signal(pidfd.get_ref(), Signal::KILL);
        let pid = self.pid;
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let _ = pidfd.readable().await;
                    let _ = reap(pid);
                });
            }
            // No runtime left (the server is stopping): SIGKILL is delivered at once, so this
            // wait is short.
            Err(_) => {
                let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spawn_sleeper() -> SpawnedChild {
        let child = std::process::Command::new("sleep").arg("1000").spawn().unwrap();
        let pid = Pid::from_raw(child.id() as i32).unwrap();
        // `std`'s handle is let go without waiting: the SpawnedChild reaps it.
        std::mem::forget(child);
        SpawnedChild::new(pid).unwrap()
    }

    /// A child let go while running is killed and reaped: no process, no zombie.
    #[tokio::test]
    async fn a_dropped_child_is_killed_and_reaped() {
        let child = spawn_sleeper();
        let pid = child.pid;
        drop(child);
        let gone = async {
            // Reaped by the task `drop` spawned, which runs once this task yields.
            while std::path::Path::new(&format!("/proc/{}", pid.as_raw_nonzero())).exists() {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), gone)
            .await
            .expect("the child is killed and reaped");
    }

    /// A wait dropped halfway (as `select!` drops it) leaves the next one to see the exit.
    #[tokio::test]
    async fn wait_is_cancel_safe() {
        let mut child = Child::Spawned(spawn_sleeper());
        let pid = child.id().unwrap();
        assert!(futures_util::FutureExt::now_or_never(child.wait()).is_none(), "still running");
        rustix::process::kill_process(Pid::from_raw(pid as i32).unwrap(), Signal::TERM).unwrap();
        let status = child.wait().await.unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(15));
        assert_eq!(child.wait().await.unwrap(), status, "asked again, the same status");
    }
}
