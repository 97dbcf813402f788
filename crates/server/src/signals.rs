//! How a server stops on signals: the first SIGTERM or SIGINT drains it (see [`crate::drain`]),
//! a second stops it at once, and then every session's processes are killed. Every embedder
//! of the server needs this same policy — a supervisor's SIGTERM must not lose the work under
//! way, a person's second Ctrl-C must not be made to wait, and a process left without the
//! parent that would clean up after it must not linger in a drain — so it lives here, not in
//! each binary: [`crate::Server::run_until_signalled`] serves with it.

use std::future::Future;
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::drain::Drain;

/// A SIGINT this soon after the first is taken as the same Ctrl-C: a terminal sends it to the
/// whole process group, a supervising parent included (`tether serve`'s guardian), which
/// passes its copy on within milliseconds. A person's second Ctrl-C comes later than this;
/// SIGTERM has no such twin and is never discounted.
const SIGINT_TWIN_WINDOW: Duration = Duration::from_millis(500);

/// The signals that stop the server, handled from the moment they are installed: install them
/// before anything can say the server is up, so that a stop that comes as it starts takes the
/// clean way out, and a server whose stop signals cannot be handled fails to start rather than
/// serving on with nobody able to stop it cleanly.
pub struct StopSignals {
    term: Signal,
    int: Signal,
    /// The server's parent as it starts. Another parent later means that parent is gone (a
    /// supervisor such as `tether serve`'s guardian, whose death arrives as a SIGTERM), and
    /// nothing would kill a drain's processes should this server be killed too.
    parent: Option<rustix::process::Pid>,
}

/// Which stop signal came.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    Term,
    Int,
}

impl StopSignals {
    /// Handles SIGTERM and SIGINT from now on, and notes the parent.
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            parent: rustix::process::getppid(),
        })
    }

    async fn next(&mut self) -> Stop {
        tokio::select! {
            _ = self.term.recv() => Stop::Term,
            _ = self.int.recv() => Stop::Int,
        }
    }

    /// Whether the parent this server started under has died.
    fn parent_gone(&self) -> bool {
        rustix::process::getppid() != self.parent
    }
}

/// Cancels `shutdown` when the server should stop: on SIGTERM or SIGINT, or when `also`
/// completes (an embedder's own stop, taken as a SIGTERM; `std::future::pending()` for none).
/// With a grace ([`crate::ServerConfig::shutdown_grace`]) the server drains first, and a
/// second signal ends the drain at once. A server whose parent has died skips the drain: with
/// nobody left to clean up after it, stopping now is what keeps its processes from outliving
/// it.
pub async fn drain_on_signals(
    mut signals: StopSignals,
    also: impl Future<Output = ()>,
    drain: Drain,
    shutdown: CancellationToken,
) {
    let first = tokio::select! {
        stop = signals.next() => stop,
        () = also => Stop::Term,
    };
    if !drain.grace().is_zero() && !signals.parent_gone() {
        let received = tokio::time::Instant::now();
        let second = async {
            loop {
                let next = signals.next().await;
                if next == Stop::Term
                    || first == Stop::Term
                    || received.elapsed() > SIGINT_TWIN_WINDOW
                {
                    return;
                }
            }
        };
        drain.run(second).await;
    }
    tracing::info!("shutting down");
    shutdown.cancel();
}
