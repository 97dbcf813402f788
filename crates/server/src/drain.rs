//! A graceful stop: the server stops taking new work and lets what runs finish, for at most a
//! grace period (`--shutdown-grace-secs`), before the shutdown kills what is left.
//!
//! While draining:
//! - `GET /readyz` answers 503, so a load balancer (or Kubernetes) sends new work elsewhere;
//! - an `initialize` that would start a new session is refused ([`crate::rpc_error::draining`]),
//!   while one that resumes a session is served as ever: a client that dropped during the
//!   drain comes back and reads what it missed;
//! - running processes go on, and their clients get every byte and every notification.
//!
//! The drain ends when every process has closed and its `process/closed` is queued for its
//! client, when the grace runs out, or when the caller's interruption comes (a second stop
//! signal). The caller then starts the shutdown as it would have without a drain.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::{Instrument, info, info_span};

use crate::state::ServerState;

/// How often a draining server looks whether every process has closed. The count is a sum of
/// counters, so this costs nothing; a tenth of a second is the most the exit lags behind the
/// last close. (Counting it down by events instead would race with the engine, which forgets
/// a process a moment after its `Closed` event went out.)
const DRAIN_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// A handle on a server's drain, taken before it serves ([`crate::Server::drain`]).
#[derive(Clone)]
pub struct Drain {
    state: Arc<ServerState>,
}

/// Why a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainEnd {
    /// Every process closed (or none was running).
    Finished,
    /// The grace ran out with this many processes still running.
    GraceRanOut { running: usize },
    /// The caller interrupted it (a second stop signal) with this many still running.
    Interrupted { running: usize },
}

impl Drain {
    pub(crate) fn new(state: Arc<ServerState>) -> Self {
        Self { state }
    }

    /// The grace the server was configured with (`ServerConfig::shutdown_grace`).
    pub fn grace(&self) -> Duration {
        self.state.config.shutdown_grace
    }

    /// Drains: from now on new sessions are refused and `/readyz` answers 503; returns when the
    /// drain ends (see the module documentation). The caller then cancels the server's
    /// shutdown token, which kills whatever still runs.
    pub async fn run(&self, interrupt: impl Future<Output = ()>) -> DrainEnd {
        let grace = self.grace();
        let span = info_span!("drain", grace_s = grace.as_secs());
        async move {
            self.state.drain.start();
            let sessions = &self.state.sessions;
            info!(
                running = sessions.unfinished_processes(),
                "draining: new sessions are refused; running processes have the grace to finish"
            );
            let end = tokio::select! {
                () = self.finished() => DrainEnd::Finished,
                () = tokio::time::sleep(grace) => {
                    DrainEnd::GraceRanOut { running: sessions.unfinished_processes() }
                }
                () = interrupt => DrainEnd::Interrupted { running: sessions.unfinished_processes() },
            };
            match end {
                DrainEnd::Finished => info!("drain done: every process finished"),
                DrainEnd::GraceRanOut { running } => {
                    info!(running, "drain over: the grace ran out; what still runs is killed")
                }
                DrainEnd::Interrupted { running } => {
                    info!(running, "drain cut short by a second signal; what still runs is killed")
                }
            }
            end
        }
        .instrument(span)
        .await
    }

    /// Returns once no session has a process that has not closed, and every `process/closed`
    /// is queued for its client (so the shutdown's Close frame comes after it).
    async fn finished(&self) {
        let sessions = &self.state.sessions;
        let mut check = tokio::time::interval(DRAIN_CHECK_INTERVAL);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            check.tick().await;
            if sessions.unfinished_processes() == 0 {
                sessions.caught_up().await;
                return;
            }
        }
    }
}
