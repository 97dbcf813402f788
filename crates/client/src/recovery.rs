//! Recovery: when the current connection drops, reconnect to the same URL, resume the
//! session (`initialize {resumeSessionId}`, retrying while the server still holds the old
//! connection: `-32010`), catch every process up from the server's retained output, and only
//! then install the new connection — or give the session up when the deadline passes, failing
//! every handle with the reason. A drop is only acted on if it came from the current
//! connection: a late "closed" from an older generation changes nothing.

use std::sync::Arc;

use tether_engine::{ProcessFailure, ProcessFailureKind};
use tether_protocol::error::{SESSION_ALREADY_ATTACHED, TRANSPORT_CLOSED};
use tether_protocol::method::INITIALIZED;
use tether_protocol::session::{InitializeParams, InitializeResponse, InitializedParams};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::catch_up::{CatchUp, catch_up, lose, refill};
use crate::connection::Connection;
use crate::error::{ClientError, ConnectError, ConnectErrorKind};
use crate::options::{ClientOptions, GOING_AWAY_RECOVERY};
use crate::session::Session;

pub(crate) async fn initialize(
    connection: &Connection,
    options: &ClientOptions,
    resume: Option<&str>,
) -> Result<InitializeResponse, ClientError> {
    let params = InitializeParams {
        client_name: options.client_name.clone(),
        resume_session_id: resume.map(String::from),
        detached_ttl_secs: options.detached_ttl.map(|ttl| ttl.as_secs()),
        // Output as raw bytes where the server can send it so (`attachedOutput`): no base64 to
        // make and undo, a quarter fewer bytes. Servers without it ignore the member.
        attach_output: true,
    };
    let call = connection.call::<_, InitializeResponse>("initialize", &params);
    let response =
        tokio::time::timeout(options.initialize_timeout, call).await.map_err(|_| {
            ClientError::Connect(ConnectError::new(
                ConnectErrorKind::Timeout,
                "the server did not answer `initialize` in time",
            ))
        })??;
    if let Some(expected) = resume
        && response.session_id != expected
    {
        return Err(ClientError::Protocol(format!(
            "exec-server initialized an unexpected session {}",
            response.session_id
        )));
    }
    connection.notify(INITIALIZED, &InitializedParams::default()).await?;
    Ok(response)
}

/// Starts a recovery if `generation` is the current connection's; a drop reported for any other
/// connection (an older one, or a resume attempt not installed yet) changes nothing. The check
/// and the change are one step, so two reports of one drop start one recovery.
pub(crate) fn connection_lost(
    session: &Arc<Session>,
    generation: u64,
    reason: String,
    going_away: bool,
) {
    if session.begin_recovery(generation) {
        warn!(generation, %reason, "exec-server connection lost; recovering the session");
        tokio::spawn(recover(session.clone(), reason, going_away));
    }
}

/// Makes a resumed connection the current one. Its drop may already have been reported — and
/// ignored, as it was not current yet — so a connection that is closed by now goes straight
/// back to recovery instead of leaving every call waiting on a dead connection.
pub(crate) fn install(session: &Arc<Session>, connection: Arc<Connection>) {
    let generation = connection.generation;
    connection.apply_gate();
    session.set_connected(connection.clone());
    if connection.is_closed() {
        connection_lost(
            session,
            generation,
            "the connection closed as it was resumed".into(),
            false,
        );
    }
}

async fn recover(session: Arc<Session>, reason: String, going_away: bool) {
    let started = Instant::now();
    let patience = match going_away {
        true => session.options().recovery_timeout.min(GOING_AWAY_RECOVERY),
        false => session.options().recovery_timeout,
    };
    let deadline = started + patience;
    // Starts in flight settle first (their connection is gone, so they fail fast).
    session.starts_settled_by(deadline).await;
    let mut last_error = reason.clone();
    loop {
        if Instant::now() >= deadline {
            let message =
                format!("{reason}; could not resume the session within {patience:?}: {last_error}");
            return give_up(&session, message, going_away);
        }
        // Read for each attempt: a token renewed since the last one is the one sent.
        let token = match session.options().token_now() {
            Ok(token) => token,
            Err(error) => {
                last_error = error.to_string();
                tokio::time::sleep(session.options().recovery_retry_interval).await;
                continue;
            }
        };
        // The deadline bounds an attempt too: one that hangs (a network that swallows packets
        // after the connect, a catch-up read never answered) must not outlive it.
        let attempt = resume(&session, token.as_deref());
        let Ok(attempt) = tokio::time::timeout_at(deadline, attempt).await else {
            last_error = "the last attempt was still unanswered".into();
            continue;
        };
        match attempt {
            Ok(connection) => {
                info!(
                    generation = connection.generation,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "exec-server session resumed"
                );
                install(&session, connection);
                return;
            }
            // The credential refused: tried again only with another one (a token renewed
            // meanwhile); the same one would be refused until the deadline.
            Err(ClientError::Connect(error))
                if error.kind == ConnectErrorKind::Refused { status: 401 } =>
            {
                let renewed = session.options().token_now().ok().flatten();
                if session.options().token_source.is_some() && renewed != token {
                    debug!("the server refused the token; trying the renewed one");
                    last_error = error.to_string();
                    continue;
                }
                let message = format!(
                    "{reason}; could not resume the session: {error} (the token is no longer \
                     accepted; renew it and reattach)"
                );
                return give_up(&session, message, going_away);
            }
            Err(error) if is_retryable(&error) => {
                debug!(%error, "resume attempt failed; retrying");
                last_error = error.to_string();
                tokio::time::sleep(session.options().recovery_retry_interval).await;
            }
            Err(error) => {
                let message = format!("{reason}; could not resume the session: {error}");
                return give_up(&session, message, going_away);
            }
        }
    }
}

/// One resume attempt: reconnect, reattach, catch every process up.
async fn resume(
    session: &Arc<Session>,
    token: Option<&str>,
) -> Result<Arc<Connection>, ClientError> {
    let registrations = session.running_registrations();
    // Live events from the new connection can arrive before the catch-up reads are answered.
    for registration in &registrations {
        registration.begin_catch_up();
    }
    let connection = session.open_connection(token).await?;
    initialize(&connection, session.options(), Some(session.id())).await?;
    // A process whose catch-up another task runs (a handle that fell behind) is left to it: it
    // reads on over this connection once it is installed.
    let claimed: Vec<_> = registrations.iter().filter(|r| r.claim_catch_up()).collect();
    let catch_ups = claimed.iter().map(|registration| catch_up(&connection, registration));
    let outcomes = futures_util::future::join_all(catch_ups).await;
    let mut transport_error = None;
    for (registration, outcome) in claimed.into_iter().zip(outcomes) {
        match outcome {
            // A transport problem ends this attempt; the next reads on from what was published.
            Err(error) => {
                registration.release_catch_up();
                transport_error = Some(error);
            }
            Ok(CatchUp::Lost(failure)) => {
                registration.release_catch_up();
                let message =
                    format!("failed to recover process {}: {failure}", registration.process_id);
                lose(session, registration, ProcessFailure::new(failure.kind, message));
            }
            // Caught up, or waiting for its caller to make room: the handle resumes it then,
            // unless it has room already.
            Ok(CatchUp::Done | CatchUp::HandleFull) => {
                if registration.end_catch_up() {
                    tokio::spawn(refill(session.clone(), registration.clone()));
                }
            }
        }
        if registration.finished().is_some() {
            session.unregister(registration);
        }
    }
    match transport_error {
        Some(error) => Err(error),
        None => Ok(connection),
    }
}

fn is_retryable(error: &ClientError) -> bool {
    match error {
        ClientError::Connect(_) | ClientError::Disconnected(_) => true,
        // The old connection is still attached (the server has not noticed the drop yet), or
        // a server said its transport closed (the code clients treat as a drop).
        ClientError::Server { code, .. } => {
            *code == SESSION_ALREADY_ATTACHED || *code == TRANSPORT_CLOSED
        }
        ClientError::Failed(_) | ClientError::Protocol(_) | ClientError::Unsupported(_) => false,
    }
}

/// Gives the session up: calls fail from now on with `message`, and so does every process's
/// handle, as [`ProcessFailureKind::SessionLost`]. `server_went_away`: the server had said it
/// was going away, so its processes ended with it (no reattach will find them).
pub(crate) fn give_up(session: &Arc<Session>, message: String, server_went_away: bool) {
    warn!(%message, server_went_away, "exec-server session lost");
    let registrations = session.fail(message.clone(), server_went_away);
    let kind = ProcessFailureKind::SessionLost { server_went_away };
    for registration in registrations {
        let message = format!("process {}: {message}", registration.process_id);
        registration.fail(ProcessFailure::new(kind, message));
    }
}

#[cfg(test)]
mod tests {
    //! The route and install steps of recovery, driven with events constructed by hand: the
    //! races they guard against are too narrow to provoke over the wire on demand. The client,
    //! the server and the connections are real.

    use std::time::Duration;

    use serde_json::json;
    use tether_engine::ProcessEvent;
    use tether_protocol::method::{HTTP_REQUEST_BODY_DELTA, PROCESS_OUTPUT};
    use tether_protocol::process::{ExecOutputStream, ExecParams, ProcessOutputNotification};
    use tether_protocol::{ByteChunk, Notification, PathUri};
    use tether_testkit::{ServerProcess, Target};

    use super::*;
    use crate::reader::ConnectionEvent;
    use crate::session::ConnectionState;
    use crate::{ConnectionStatus, ExecServerClient, ProcessUpdate};

    fn generation(client: &ExecServerClient) -> Option<u64> {
        match client.session.current_state() {
            ConnectionState::Connected(connection) => Some(connection.generation),
            _ => None,
        }
    }

    async fn wait_for_generation_after(client: &ExecServerClient, after: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(generation) = generation(client).filter(|g| *g > after) {
                return generation;
            }
            assert!(Instant::now() < deadline, "no connection after generation {after}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A close reported for an older connection after a newer one is installed (a late report,
    /// or one from a resume attempt that was abandoned) starts no recovery.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_close_reported_for_an_older_connection_changes_nothing() {
        // Setup: a real recovery, so that generation 1 is an old connection.
        let server = ServerProcess::start(Target::Tether).await.unwrap();
        let client =
            ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
        client.disconnect();
        let current = wait_for_generation_after(&client, 1).await;
        let sleeper = ExecParams::new(
            "quiet",
            vec!["/bin/sleep".into(), "30".into()],
            PathUri::parse("file:///tmp").unwrap(),
        );
        let mut process = client.start(sleeper).await.unwrap();

        // Exercise: generation 1's close, then a marker the route handles after it.
        let late =
            ConnectionEvent::Closed { generation: 1, reason: "late".into(), going_away: false };
        client.session.report(late).await;
        let marker = ProcessOutputNotification {
            process_id: "quiet".into(),
            seq: 1,
            stream: ExecOutputStream::Stdout,
            chunk: ByteChunk::from(b"marker".to_vec()),
        };
        let marker = Notification {
            method: PROCESS_OUTPUT.into(),
            params: Some(serde_json::to_value(marker).unwrap()),
        };
        client.session.report(ConnectionEvent::Notification(marker)).await;

        // Assert: once the marker is through, the session is still on the same connection.
        let update = tokio::time::timeout(Duration::from_secs(10), process.next_update()).await;
        assert!(
            matches!(&update, Ok(Some(ProcessUpdate::Event(ProcessEvent::Output { chunk, .. })))
                if &chunk[..] == b"marker"),
            "{update:?}"
        );
        assert_eq!(client.status(), ConnectionStatus::Connected);
        assert_eq!(generation(&client), Some(current));
    }

    /// A sequence number no server would send (`u64::MAX`, as a hostile or broken one might)
    /// fails that process alone, saying why; the router goes on serving the others.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_senseless_sequence_fails_its_process_alone() {
        let server = ServerProcess::start(Target::Tether).await.unwrap();
        let client =
            ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
        let sleeper = |id: &str| {
            ExecParams::new(
                id,
                vec!["/bin/sh".into(), "-c".into(), "read line; echo $line".into()],
                PathUri::parse("file:///tmp").unwrap(),
            )
        };
        let quiet = ExecParams::new(
            "victim",
            vec!["/bin/sleep".into(), "30".into()],
            PathUri::parse("file:///tmp").unwrap(),
        );
        let mut victim = client.start(quiet).await.unwrap();
        let mut params = sleeper("bystander");
        params.pipe_stdin = true;
        let mut bystander = client.start(params).await.unwrap();

        let senseless = ProcessOutputNotification {
            process_id: "victim".into(),
            seq: u64::MAX,
            stream: ExecOutputStream::Stdout,
            chunk: ByteChunk::from(b"x".to_vec()),
        };
        let event = ConnectionEvent::Output(senseless, Default::default());
        client.session.report(event).await;

        let update = tokio::time::timeout(Duration::from_secs(10), victim.next_update()).await;
        assert!(
            matches!(&update, Ok(Some(ProcessUpdate::Failed(failure))) if failure.kind == ProcessFailureKind::Protocol),
            "{update:?}"
        );
        bystander.write(b"still-here\n".to_vec()).await.unwrap();
        let update = tokio::time::timeout(Duration::from_secs(10), bystander.next_update()).await;
        assert!(
            matches!(&update, Ok(Some(ProcessUpdate::Event(ProcessEvent::Output { chunk, .. })))
                if &chunk[..] == b"still-here\n"),
            "{update:?}"
        );
    }

    /// A body delta larger than any server may send breaks the protocol: the connection that
    /// carried it is dropped and the session recovered on a new one, its processes intact.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_oversized_body_delta_drops_the_connection_and_the_session_recovers() {
        let server = ServerProcess::start(Target::Tether).await.unwrap();
        let client =
            ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
        let sleeper = ExecParams::new(
            "survivor",
            vec!["/bin/sh".into(), "-c".into(), "sleep 0.5; echo still-here".into()],
            PathUri::parse("file:///tmp").unwrap(),
        );
        let mut process = client.start(sleeper).await.unwrap();
        let before = generation(&client).unwrap();

        let oversized = Notification {
            method: HTTP_REQUEST_BODY_DELTA.into(),
            params: Some(json!({
                "requestId": "http-1",
                "seq": 1,
                "deltaBase64": "A".repeat(2 * 1024 * 1024),
                "done": false,
            })),
        };
        client.session.report(ConnectionEvent::Notification(oversized)).await;

        wait_for_generation_after(&client, before).await;
        let update = tokio::time::timeout(Duration::from_secs(10), process.next_update()).await;
        assert!(
            matches!(&update, Ok(Some(ProcessUpdate::Event(ProcessEvent::Output { chunk, .. })))
                if &chunk[..] == b"still-here\n"),
            "{update:?}"
        );
    }

    /// A resumed connection can drop between the end of the resume and its installation; its
    /// close, reported while it was not yet current, was ignored. Installing it must start a
    /// new recovery rather than leave every call waiting on a dead connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_that_closed_before_it_was_installed_is_recovered() {
        // Setup: the session's connection is gone and the client is recovering.
        let server = ServerProcess::start(Target::Tether).await.unwrap();
        let client =
            ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
        let session = &client.session;
        let first = client.connected().await.unwrap();
        assert!(session.begin_recovery(first.generation));
        first.close();

        // A new connection that closes before it is installed; its close goes nowhere (as when
        // the route saw it during the recovery and ignored it).
        let token = session.options().token_now().unwrap();
        let resumed = session.open_unreported_connection(token.as_deref()).await.unwrap();
        let resumed_generation = resumed.generation;
        resumed.close();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !resumed.is_closed() {
            assert!(Instant::now() < deadline, "the connection did not close");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }

        // Exercise.
        install(session, resumed);

        // Assert: a recovery ran and installed a live connection.
        tokio::time::timeout(Duration::from_secs(20), client.wait_connected())
            .await
            .expect("the client never recovered")
            .unwrap();
        assert!(generation(&client).is_some_and(|g| g > resumed_generation));
    }
}
