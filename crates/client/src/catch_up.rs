//! Catching a process's handle up from the server's retained output, in `process/read` pages:
//! after a reconnect (the recovery's), for a handle that fell behind once its caller has read
//! it down (a refill, see [`crate::flow`]), and for a handle attached to a running process.
//!
//! Pages, not one complete read, because no server promises to answer everything at once (a
//! server that spills output to disk answers in pieces), because a page published survives
//! the next drop where one large answer might never arrive whole over a flaky link, and
//! because each page is only as large as the handle has room for.

use std::sync::Arc;

use tether_protocol::process::{ReadParams, ReadResponse, TerminateParams};
use tracing::warn;

use crate::connection::Connection;
use crate::error::ClientError;
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
    /// read): the process cannot be followed without a gap.
    Lost(String),
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
                Err(error) => Ok(Err(error.to_string())),
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
            Err(error) => return Ok(CatchUp::Lost(error.to_string())),
        }
    }
}

/// Runs a catch-up this task has claimed ([`Registration::claim_catch_up`]) until the handle
/// follows live output or is full again, on whichever connection the session has, through
/// reconnects. The error says why the process cannot be followed.
pub(crate) async fn run_claimed(
    session: &Session,
    registration: &Arc<Registration>,
) -> Result<(), String> {
    loop {
        let connection = match session.connected().await {
            Ok(connection) => connection,
            Err(error) => {
                registration.release_catch_up();
                return Err(error.to_string());
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
        let message = format!(
            "process {} fell behind its reader and cannot be caught up: {error}; read its output sooner, or have the server retain more (`tether serve --retain-output-bytes`, `--spill-output-dir`)",
            registration.process_id
        );
        lose(&session, &registration, message);
    }
}

/// The process cannot be followed: its handle fails with `message`, and the process, which
/// nobody can follow now, is terminated (riding through a recovery if need be).
pub(crate) fn lose(session: &Arc<Session>, registration: &Arc<Registration>, message: String) {
    warn!(process_id = %registration.process_id, %message, "process lost; terminating it");
    registration.fail(message);
    let session = session.clone();
    let registration = registration.clone();
    tokio::spawn(async move {
        let params = TerminateParams { process_id: registration.process_id.clone() };
        let _ =
            session.call::<_, serde_json::Value>("process/terminate", &params, Retry::Safe).await;
        session.unregister(&registration);
    });
}
