//! The router: one task per client that takes what its connections report, in order —
//! process events to their registrations, body deltas to their streams, drops of the current
//! connection to recovery — and the supervisor that fails the session should it ever stop.

use std::sync::{Arc, Weak};

use tether_engine::ProcessEvent;
use tether_protocol::Notification;
use tether_protocol::method::{
    HTTP_REQUEST_BODY_DELTA, PROCESS_CLOSED, PROCESS_EXITED, PROCESS_OUTPUT,
};
use tether_protocol::process::{
    ProcessClosedNotification, ProcessExitedNotification, ProcessOutputNotification,
};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::reader::ConnectionEvent;
use crate::recovery::{connection_lost, give_up};
use crate::session::Session;

/// Routes what connections report: process notifications to their registrations, drops of the
/// current connection to recovery. Notifications are consumed as they come, so a resume never
/// stalls on notifications the server sends before its `initialize` answer.
pub(crate) async fn route_events(
    session: Weak<Session>,
    mut events: mpsc::Receiver<ConnectionEvent>,
) {
    while let Some(event) = events.recv().await {
        let Some(session) = session.upgrade() else { return };
        match event {
            // An event's room in the queue (`_queued`) is given back once it is routed.
            ConnectionEvent::Output(n, _queued) => route_event(
                &session,
                ProcessEvent::Output {
                    process_id: n.process_id,
                    seq: n.seq,
                    stream: n.stream,
                    chunk: n.chunk.0,
                },
            ),
            ConnectionEvent::BodyDelta(delta, _queued) => {
                session.http_streams().deliver_decoded(delta)
            }
            ConnectionEvent::Notification(notification) => {
                route_notification(&session, notification)
            }
            ConnectionEvent::Closed { generation, reason, going_away } => {
                session.http_streams().connection_closed(generation, &reason);
                connection_lost(&session, generation, reason, going_away);
            }
        }
    }
}

/// Watches the router: if it ever stops while the client lives (a bug that panicked it), no
/// event would reach any handle again, so the session fails, and every handle with it, with
/// the reason, instead of leaving them all waiting.
pub(crate) async fn supervise_router(session: Weak<Session>, router: tokio::task::JoinHandle<()>) {
    let outcome = router.await;
    let Some(session) = session.upgrade() else { return };
    let reason = match outcome {
        Err(error) if error.is_panic() => "the client's event router panicked",
        _ => "the client's event router stopped",
    };
    give_up(&session, format!("{reason}; connect again"), false);
}

fn route_notification(session: &Arc<Session>, notification: Notification) {
    let params = notification.params.unwrap_or_default();
    if notification.method == HTTP_REQUEST_BODY_DELTA {
        if let Err(violation) = session.http_streams().deliver(params) {
            warn!(%violation, "exec-server broke the protocol; dropping the connection to recover");
            session.disconnect();
        }
        return;
    }
    let event = match notification.method.as_str() {
        PROCESS_OUTPUT => serde_json::from_value::<ProcessOutputNotification>(params).map(|n| {
            ProcessEvent::Output {
                process_id: n.process_id,
                seq: n.seq,
                stream: n.stream,
                chunk: n.chunk.0,
            }
        }),
        PROCESS_EXITED => serde_json::from_value::<ProcessExitedNotification>(params).map(|n| {
            ProcessEvent::Exited {
                process_id: n.process_id,
                seq: n.seq,
                exit_code: n.exit_code,
                sandbox_denied: n.sandbox_denied,
            }
        }),
        PROCESS_CLOSED => serde_json::from_value::<ProcessClosedNotification>(params)
            .map(|n| ProcessEvent::Closed { process_id: n.process_id, seq: n.seq }),
        other => {
            debug!(method = other, "notification not handled by this client");
            return;
        }
    };
    let Ok(event) = event else {
        warn!(method = %notification.method, "malformed notification ignored");
        return;
    };
    route_event(session, event);
}

/// Hands a process's event to its handle, if one follows it.
fn route_event(session: &Arc<Session>, event: ProcessEvent) {
    if let Some(registration) = session.registration(event.process_id()) {
        registration.push(event);
        if registration.finished().is_some() {
            session.unregister(&registration);
        }
    }
}
