//! A session: the processes one client works with, and which connection (if any) hears about
//! them.
//!
//! Processes belong to the session, not the connection: when a connection drops, the session
//! detaches and keeps running, and a new connection resumes it with `initialize
//! {resumeSessionId}`. Connection-scoped state (long-polls, file handles, HTTP streams) lives
//! with the connection instead.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tether_engine::network::proxy::NetworkEvent;
use tether_engine::{ProcessEvent, ProcessTable, ProcessTableConfig};
use tether_protocol::envelope::{RequestId, encode_notification, encode_request};
use tether_protocol::method::{PROCESS_CLOSED, PROCESS_EXITED};
use tether_protocol::network::{POLICY_DECISION, POLICY_REQUEST};
use tether_protocol::process::{
    ProcessClosedNotification, ProcessExitedNotification, ProcessOutputNotification,
};
use tether_protocol::{ByteChunk, JsonRpcError};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::{Instrument, info_span};

use crate::asks::{Answered, PendingAsks};
use crate::auth::ClientId;
use crate::transport::{ConnectionId, Outbound, Payload};

/// Process events buffered between a session's processes and its connection.
const SESSION_EVENT_QUEUE: usize = 256;

/// Decisions and questions queued between a session's managed proxies and its connection.
/// A proxy waits while it is full, so a flood of connections through one proxy slows that
/// proxy down rather than growing this queue.
const SESSION_NETWORK_QUEUE: usize = 256;

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
    /// The `network/policyRequest`s waiting for the client.
    asks: Mutex<PendingAsks>,
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
        let (network_tx, network_rx) = mpsc::channel(SESSION_NETWORK_QUEUE);
        let session = Arc::new(Self {
            processes: ProcessTable::with_network(config, events_tx, Some(network_tx)),
            client,
            attachment: Mutex::new(Attachment::Attached { connection, outbound }),
            detached_ttl: Mutex::new(detached_ttl),
            catch_up,
            asks: Mutex::new(PendingAsks::default()),
            id,
        });
        let span = info_span!("session", session = %log_tag(&session.id));
        let forwarding =
            forward_events(Arc::downgrade(&session), events_rx, network_rx, catch_up_rx);
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

    fn asks(&self) -> MutexGuard<'_, PendingAsks> {
        self.asks.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A response from the client to one of the session's questions: its result, or its
    /// error (a denial). Whether the id was one the session gave.
    pub(crate) fn answer(
        &self,
        id: &RequestId,
        result: Result<&serde_json::Value, &JsonRpcError>,
    ) -> Answered {
        match id {
            RequestId::Integer(id) => self.asks().answer(*id, result.ok()),
            RequestId::String(_) => Answered::Unknown,
        }
    }

    /// The connection is gone: the questions it carried are denied.
    pub(crate) fn forget_asks(&self) {
        self.asks().forget_all();
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
/// first), so every event queued before it has been handled. A proxy's reports go before
/// process events ready at the same time, so that those made before an exit come before it.
async fn forward_events(
    session: std::sync::Weak<Session>,
    mut events: mpsc::Receiver<ProcessEvent>,
    mut network: mpsc::Receiver<NetworkEvent>,
    mut catch_up: mpsc::Receiver<oneshot::Sender<()>>,
) {
    loop {
        let event = tokio::select! {
            biased;
            // A proxy's report first: one made before its process exited is queued before the
            // exit is, and so reaches the client before `process/exited` does.
            Some(event) = network.recv() => {
                forward_network_event(&session, event).await;
                continue;
            }
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

/// Sends a proxy's decision, or asks its question, on the attached connection. A question
/// with no connection to go to, or with too many already waiting, is denied (its answer
/// dropped); a decision with no connection is dropped as output is.
async fn forward_network_event(session: &std::sync::Weak<Session>, event: NetworkEvent) {
    let Some(session) = session.upgrade() else { return };
    let Some(outbound) = session.current_outbound() else { return };
    let _ = match event {
        NetworkEvent::Decided(decision) => {
            outbound.send(encode_notification(POLICY_DECISION, &decision)).await
        }
        NetworkEvent::Ask { request, answer } => {
            let Some(id) = session.asks().register(answer) else { return };
            outbound.send(encode_request(&RequestId::Integer(id), POLICY_REQUEST, &request)).await
        }
    };
}

/// What logs above DEBUG call a session: a short digest of its id. Enough to follow one
/// session through the logs; useless for resuming it, which the id itself allows.
pub(crate) fn log_tag(id: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(id.as_bytes())[..4])
}
