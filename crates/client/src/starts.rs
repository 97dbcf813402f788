//! A `process/start` whose outcome is not known yet, and what becomes of it when the answer
//! never comes.

use std::sync::Arc;

use tether_engine::{ProcessFailure, ProcessFailureKind};
use tether_protocol::process::TerminateParams;

use crate::registration::Registration;
use crate::session::{Retry, Session};

/// A `process/start` whose outcome is not known yet.
///
/// While its request may be on a connection, it counts as in flight: recovery waits for it to
/// settle, so a start that succeeded is caught up like any other process. A start still waiting
/// for a connection does not count — it waits for the recovery, not the other way round.
///
/// Dropped unsettled (the caller stopped waiting), it cleans up as an ambiguous start does.
pub(crate) struct PendingStart<'a> {
    session: &'a Arc<Session>,
    registration: Arc<Registration>,
    stage: StartStage,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum StartStage {
    /// Waiting for a connection: nothing was sent.
    Waiting,
    /// The request may have reached the server.
    InFlight,
    /// Its connection was lost before the answer: it may have run. Recovery no longer waits
    /// for it (it waits for the recovery, to be asked again); dropped now, whatever runs under
    /// its id is terminated.
    Uncertain,
    Settled,
}

impl<'a> PendingStart<'a> {
    pub(crate) fn new(session: &'a Arc<Session>, registration: Arc<Registration>) -> Self {
        Self { session, registration, stage: StartStage::Waiting }
    }

    /// The request is about to go out.
    pub(crate) fn sending(&mut self) {
        self.session.start_sending();
        self.stage = StartStage::InFlight;
    }

    /// Its connection was lost before the answer came: recovery goes on without it, and the
    /// caller may send it again once the session is back.
    pub(crate) fn lost(&mut self) {
        if self.stage == StartStage::InFlight {
            self.session.start_settled();
        }
        self.stage = StartStage::Uncertain;
    }

    /// The outcome is known and acted on.
    pub(crate) fn settle(&mut self) {
        if self.stage == StartStage::InFlight {
            self.session.start_settled();
        }
        self.stage = StartStage::Settled;
    }

    /// The process may be running and nobody will follow it: fail the registration, terminate
    /// whatever runs under its id (waiting through a recovery), then release the id.
    pub(crate) fn abandon(&mut self, message: String) {
        let failure = ProcessFailure::new(ProcessFailureKind::StartUncertain, message);
        self.registration.fail(failure);
        let session = self.session.clone();
        let registration = self.registration.clone();
        let terminate = async move {
            let params = TerminateParams { process_id: registration.process_id.clone() };
            // Idempotent, so it rides through recoveries; it fails only with the session.
            let _ = session
                .call::<_, serde_json::Value>("process/terminate", &params, Retry::Safe)
                .await;
            session.unregister(&registration);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(terminate)),
            // No runtime left to ask the server with: the session ends with it anyway.
            Err(_) => self.session.unregister(&self.registration),
        }
        self.settle();
    }
}

impl Drop for PendingStart<'_> {
    fn drop(&mut self) {
        match self.stage {
            StartStage::Waiting => self.session.unregister(&self.registration),
            StartStage::InFlight | StartStage::Uncertain => {
                let message = format!(
                    "the caller stopped waiting for process/start for {}; it is being terminated",
                    self.registration.process_id
                );
                self.abandon(message);
            }
            StartStage::Settled => {}
        }
    }
}
