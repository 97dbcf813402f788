//! A session: the processes one client works with, and which connection (if any) hears about
//! them.
//!
//! Processes belong to the session, not the connection: when a connection drops, the session
//! detaches and keeps running, and a new connection resumes it with `initialize
//! {resumeSessionId}`. Connection-scoped state (long-polls, file handles, HTTP streams) lives
//! with the connection instead.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tether_engine::{ProcessEvent, ProcessTable, ProcessTableConfig};
use tether_protocol::ByteChunk;
use tether_protocol::envelope::encode_notification;
use tether_protocol::method::{PROCESS_CLOSED, PROCESS_EXITED};
use tether_protocol::process::{
    ProcessClosedNotification, ProcessExitedNotification, ProcessOutputNotification,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::{Instrument, info_span};

use crate::auth::ClientId;
use crate::transport::{ConnectionId, Outbound, Payload};

/// Process events buffered between a session's processes and its connection.
const SESSION_EVENT_QUEUE: usize = 256;

/// Catch-up requests ([`Session::caught_up`]) queued for a session's forwarder. Only a
/// draining server asks, one session at a time: one slot is plenty, and a second asker waits.
const CATCH_UP_REQUESTS: usize = 1;

pub(crate) struct Session {
    pub id: String,
    pub processes: Arc<ProcessTable>,
    /// Who created it, for the per-client bound (`--max-sessions-per-client`).
    pub client: ClientId,
    attachment: Mutex<Attachment>,
    /// How long it waits for a resume once detached: the server's default, or what its client
    /// asked for within the server's maximum (Tether's `sessionTtl`).
    detached_ttl: Mutex<Duration>,
    /// Asks the forwarder to answer once it has handled every event queued before the ask,
    /// so that a draining server knows the last `process/closed` is on its way to the client.
    catch_up: mpsc::Sender<oneshot::Sender<()>>,
}

/// Who hears a session's notifications.
#[derive(Clone)]
pub(crate) enum Attachment {
    Attached {
        connection: ConnectionId,
        outbound: Outbound,
    },
    /// No connection; the session expires at `expires_at` unless resumed. `connection` is the
    /// one that left, so a stale expiry timer can tell it is stale. `order` numbers the
    /// server's detaches (a lower one detached earlier): a full table ends the oldest first.
    Detached {
        connection: ConnectionId,
        expires_at: Instant,
        order: u64,
    },
}

impl Session {
    /// A new session attached to `connection`, with a task that forwards its process events to
    /// whichever connection is attached.
    pub(crate) fn new(
        id: String,
        client: ClientId,
        config: ProcessTableConfig,
        connection: ConnectionId,
        outbound: Outbound,
        detached_ttl: Duration,
    ) -> Arc<Self> {
        let (events_tx, events_rx) = mpsc::channel(SESSION_EVENT_QUEUE);
        let (catch_up, catch_up_rx) = mpsc::channel(CATCH_UP_REQUESTS);
        let session = Arc::new(Self {
            processes: ProcessTable::new(config, events_tx),
            client,
            attachment: Mutex::new(Attachment::Attached { connection, outbound }),
            detached_ttl: Mutex::new(detached_ttl),
            catch_up,
            id,
        });
        let span = info_span!("session", session = %log_tag(&session.id));
        let forwarding = forward_events(Arc::downgrade(&session), events_rx, catch_up_rx);
        tokio::spawn(forwarding.instrument(span));
        session
    }

    /// Returns once every process event published before the call has been handed to the
    /// attached connection's queue (or dropped, if detached). A process whose table counts it
    /// closed has published its `Closed` event, so after this its notification is queued
    /// ahead of any Close frame. Returns at once if the forwarder is gone (nothing to wait
    /// for).
    pub(crate) async fn caught_up(&self) {
        let (done, answer) = oneshot::channel();
        if self.catch_up.send(done).await.is_ok() {
            let _ = answer.await;
        }
    }

    /// How long the session waits for a resume once detached.
    pub(crate) fn detached_ttl(&self) -> Duration {
        *self.detached_ttl.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn set_detached_ttl(&self, ttl: Duration) {
        *self.detached_ttl.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = ttl;
    }

    pub(crate) fn attachment(&self) -> MutexGuard<'_, Attachment> {
        self.attachment.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn is_attached_to(&self, connection: ConnectionId) -> bool {
        matches!(&*self.attachment(), Attachment::Attached { connection: c, .. } if *c == connection)
    }

    fn current_outbound(&self) -> Option<Outbound> {
        match &*self.attachment() {
            Attachment::Attached { outbound, .. } => Some(outbound.clone()),
            Attachment::Detached { .. } => None,
        }
    }
}

/// Turns process events into notifications for the attached connection. While detached, events
/// are dropped: the output stays retained, and a resuming client catches up with `process/read`.
///
/// A catch-up request is answered only when no event is ready (`biased`: events are polled
/// first), so every event queued before it has been handled.
async fn forward_events(
    session: std::sync::Weak<Session>,
    mut events: mpsc::Receiver<ProcessEvent>,
    mut catch_up: mpsc::Receiver<oneshot::Sender<()>>,
) {
    loop {
        let event = tokio::select! {
            biased;
            event = events.recv() => event,
            Some(done) = catch_up.recv() => {
                let _ = done.send(());
                continue;
            }
        };
        let Some(event) = event else { return };
        let Some(outbound) = session.upgrade().and_then(|s| s.current_outbound()) else {
            continue;
        };
        // If the connection died meanwhile, the notification goes nowhere, which is what a
        // detached session does with it anyway.
        let _ = match event {
            ProcessEvent::Output { process_id, seq, stream, chunk } => {
                let output =
                    ProcessOutputNotification { process_id, seq, stream, chunk: ByteChunk(chunk) };
                let payload = match outbound.attached_output() {
                    true => Payload::Binary(output.to_attached_message()),
                    false => Payload::Text(output.to_notification_text()),
                };
                outbound.send_output_payload(payload).await
            }
            ProcessEvent::Exited { process_id, seq, exit_code, sandbox_denied } => {
                let exited =
                    ProcessExitedNotification { process_id, seq, exit_code, sandbox_denied };
                outbound.send(encode_notification(PROCESS_EXITED, &exited)).await
            }
            ProcessEvent::Closed { process_id, seq } => {
                let closed = ProcessClosedNotification { process_id, seq };
                outbound.send(encode_notification(PROCESS_CLOSED, &closed)).await
            }
        };
    }
}

/// What logs above DEBUG call a session: a short digest of its id. Enough to follow one
/// session through the logs; useless for resuming it, which the id itself allows.
pub(crate) fn log_tag(id: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(id.as_bytes())[..4])
}
