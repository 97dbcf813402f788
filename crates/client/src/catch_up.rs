//! Catching a process's handle up from the server's retained output, in `process/read` pages:
//! after a reconnect (the recovery's), for a handle that fell behind once its caller has read
//! it down (a refill, see [`crate::flow`]), and for a handle attached to a running process.
//!
//! Pages, not one complete read, because no server promises to answer everything at once (a
//! server that spills output to disk answers in pieces), because a page published survives
//! the next drop where one large answer might never arrive whole over a flaky link, and
//! because each page is only as large as the handle has room for.

use std::sync::Arc;

use tether_engine::{ProcessFailure, ProcessFailureKind};
use tether_protocol::ProcessId;
use tether_protocol::process::{ReadParams, ReadResponse, TerminateParams};
use tracing::warn;

use crate::connection::Connection;
use crate::error::ClientError;
use crate::reconcile::ReconcileError;
use crate::registration::{NextPage, Registration};
use crate::session::{Retry, Session};

/// How a catch-up ended.
#[derive(Debug)]
pub(crate) enum CatchUp {
    /// The handle follows live output again (or the process is finished).
    Done,
    /// The handle is too full for another page; its caller's reading resumes the catch-up.
    HandleFull,
    /// The server cannot say what was missed (it no longer holds that output, or refused the
    /// read), or said something senseless: the process cannot be followed without a gap.
    Lost(ProcessFailure),
}

/// Catches `registration` up over `connection`: reads pages of the backlog, publishing each,
/// until a page finds nothing new — that answer (no chunks, so its `nextSeq` is the process's
/// next sequence) also says whether the process exited and closed, and completes the catch-up.
/// A page with a hole in it (an exit, or output the server dropped) hands over to one
/// complete read, which places the exit and the close (see [`Registration::publish_page`]).
/// The error is the connection's (this attempt ends; the next connection reads on from what
/// was published); anything else is this process's.
pub(crate) async fn catch_up(
    connection: &Connection,
    registration: &Registration,
) -> Result<CatchUp, ClientError> {
    let read = |max_bytes: Option<usize>| {
        let params = ReadParams {
            process_id: registration.process_id.clone(),
            after_seq: Some(registration.last_published()),
            max_bytes,
            wait_ms: Some(0),
        };
        async move {
            match connection.call::<_, ReadResponse>("process/read", &params).await {
                Ok(read) => Ok(Ok(read)),
                Err(error @ ClientError::Disconnected(_)) => Err(error),
                Err(error) => Ok(Err(read_failure(&error))),
            }
        }
    };
    loop {
        let page_bytes = match registration.next_page() {
            NextPage::Read(bytes) => bytes,
            NextPage::HandleFull => return Ok(CatchUp::HandleFull),
            NextPage::Finished => return Ok(CatchUp::Done),
        };
        let page = match read(Some(page_bytes)).await? {
            Ok(page) => page,
            Err(error) => return Ok(CatchUp::Lost(error)),
        };
        let last_published = registration.last_published();
        let last_read = if page.failure.is_some()
            || page.chunks.iter().all(|chunk| chunk.seq <= last_published)
        {
            page
        } else if registration.publish_page(&page) {
            continue;
        } else {
            match read(None).await? {
                Ok(complete) => complete,
                Err(error) => return Ok(CatchUp::Lost(error)),
            }
        };
        match registration.catch_up(&last_read) {
            Ok(true) => return Ok(CatchUp::Done),
            // Live events were dropped meanwhile: read on from what is published.
            Ok(false) => continue,
            Err(error) => return Ok(CatchUp::Lost(reconcile_failure(error))),
        }
    }
}

/// A catch-up read that failed otherwise than by its connection dropping. An answer this
/// client cannot read is the server's fault; any other refusal (the process unknown to the
/// server, the session lost) means what was missed cannot be read back.
fn read_failure(error: &ClientError) -> ProcessFailure {
    let kind = match error {
        ClientError::Protocol(_) => ProcessFailureKind::Protocol,
        _ => ProcessFailureKind::OutputLost,
    };
    ProcessFailure::new(kind, error.to_string())
}

/// A catch-up read that cannot be merged, as the kind of failure it is: output the server
/// no longer holds, the server's own word that the process is lost, or an answer that
/// contradicts itself or what was published.
fn reconcile_failure(error: ReconcileError) -> ProcessFailure {
    let kind = match &error {
        ReconcileError::Lost { .. } => ProcessFailureKind::OutputLost,
        ReconcileError::ServerFailed { .. } => ProcessFailureKind::Server,
        ReconcileError::ChunkPastEnd { .. }
        | ReconcileError::CloseConflict { .. }
        | ReconcileError::MissingExitCode => ProcessFailureKind::Protocol,
    };
    ProcessFailure::new(kind, error.to_string())
}

/// Runs a catch-up this task has claimed ([`Registration::claim_catch_up`]) until the handle
/// follows live output or is full again, on whichever connection the session has, through
/// reconnects. The error says why the process cannot be followed.
pub(crate) async fn run_claimed(
    session: &Session,
    registration: &Arc<Registration>,
) -> Result<(), ProcessFailure> {
    loop {
        let connection = match session.connected().await {
            Ok(connection) => connection,
            Err(error) => {
                registration.release_catch_up();
                return Err(ProcessFailure::new(session.lost_kind(), error.to_string()));
            }
        };
        match catch_up(&connection, registration).await {
            Ok(CatchUp::Lost(error)) => {
                registration.release_catch_up();
                return Err(error);
            }
            Ok(CatchUp::Done | CatchUp::HandleFull) => {
                if !registration.end_catch_up() {
                    return Ok(());
                }
            }
            // The connection dropped: read on from what was published, on the next one.
            Err(_) => tokio::task::yield_now().await,
        }
    }
}

/// Catches up a handle that fell behind, now that its caller has made room (the handle
/// claimed the catch-up for this task).
pub(crate) async fn refill(session: Arc<Session>, registration: Arc<Registration>) {
    if let Err(error) = run_claimed(&session, &registration).await {
        lose(&session, &registration, refill_failure(&registration.process_id, error));
    }
}

/// Why a refill failed, as its handle's caller should hear it. Output gone from the server
/// while the handle was behind is gone because it fell behind, which its reader can act on
/// (read sooner, retain more); any other failure keeps its kind.
fn refill_failure(process_id: &ProcessId, error: ProcessFailure) -> ProcessFailure {
    match error.kind {
        ProcessFailureKind::OutputLost => ProcessFailure::new(
            ProcessFailureKind::FellBehind,
            format!(
                "process {process_id} fell behind its reader and cannot be caught up: {error}; read its output sooner, or have the server retain more (`tether serve --retain-output-bytes`, `--spill-output-dir`)"
            ),
        ),
        kind => ProcessFailure::new(
            kind,
            format!("process {process_id} fell behind its reader and cannot be caught up: {error}"),
        ),
    }
}

/// The process cannot be followed: its handle fails with `failure`, and the process, which
/// nobody can follow now, is terminated (riding through a recovery if need be).
pub(crate) fn lose(
    session: &Arc<Session>,
    registration: &Arc<Registration>,
    failure: ProcessFailure,
) {
    warn!(process_id = %registration.process_id, message = %failure, "process lost; terminating it");
    registration.fail(failure);
    let session = session.clone();
    let registration = registration.clone();
    tokio::spawn(async move {
        let params = TerminateParams { process_id: registration.process_id.clone() };
        let _ =
            session.call::<_, serde_json::Value>("process/terminate", &params, Retry::Safe).await;
        session.unregister(&registration);
    });
}

#[cfg(test)]
mod tests {
    //! Each way a catch-up can fail, and the kind its handle's caller decides on.

    use tether_protocol::error::NOT_FOUND;

    use super::*;

    #[test]
    fn output_the_server_no_longer_holds_is_output_lost() {
        let lost = ReconcileError::Lost { last_published: 3, through: 9 };
        assert_eq!(reconcile_failure(lost).kind, ProcessFailureKind::OutputLost);
    }

    #[test]
    fn a_read_that_says_the_process_failed_is_the_servers_failure() {
        let failed = ReconcileError::ServerFailed { failure: "the server lost it".into() };
        assert_eq!(reconcile_failure(failed).kind, ProcessFailureKind::Server);
    }

    #[test]
    fn an_answer_that_contradicts_itself_is_a_protocol_failure() {
        for error in [
            ReconcileError::ChunkPastEnd { seq: 9, target: 5 },
            ReconcileError::CloseConflict { seq: 4 },
            ReconcileError::MissingExitCode,
        ] {
            let failure = reconcile_failure(error);
            assert_eq!(failure.kind, ProcessFailureKind::Protocol, "{failure}");
        }
    }

    #[test]
    fn a_refused_read_loses_the_output_and_an_unreadable_answer_is_a_protocol_failure() {
        let refused = ClientError::Server {
            code: NOT_FOUND,
            message: "unknown process id p".into(),
            data: None,
        };
        assert_eq!(read_failure(&refused).kind, ProcessFailureKind::OutputLost);
        let unreadable = ClientError::Protocol("a read answer without nextSeq".into());
        assert_eq!(read_failure(&unreadable).kind, ProcessFailureKind::Protocol);
    }

    #[test]
    fn a_refill_that_finds_its_output_gone_fell_behind_and_other_failures_keep_their_kind() {
        let id = ProcessId::from("p");
        let gone = ProcessFailure::new(ProcessFailureKind::OutputLost, "no longer retained");
        let failure = refill_failure(&id, gone);
        assert_eq!(failure.kind, ProcessFailureKind::FellBehind);
        // The reader is told what to do about it.
        assert!(failure.message.contains("--retain-output-bytes"), "{failure}");
        for kind in [
            ProcessFailureKind::Server,
            ProcessFailureKind::Protocol,
            ProcessFailureKind::SessionLost { server_went_away: true },
        ] {
            assert_eq!(refill_failure(&id, ProcessFailure::new(kind, "x")).kind, kind);
        }
    }
}
