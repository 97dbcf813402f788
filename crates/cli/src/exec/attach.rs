//! `tether exec --resume SESSION --process ID`: back into a session, onto a process already
//! running there.

use tether_client::{ClientOptions, ExecServerClient, RemoteProcess};
use tether_protocol::error::{INVALID_REQUEST, NOT_FOUND, SESSION_ALREADY_ATTACHED};

use crate::executors::Executor;

/// Resumes `session` and attaches to `process_id` in it; a process the session does not hold
/// is refused with the command that lists the ones it does (`again` reaches the executor).
pub(super) async fn attach(
    executor: &Executor,
    session: &str,
    process_id: &str,
    options: ClientOptions,
    again: &str,
) -> anyhow::Result<(ExecServerClient, RemoteProcess)> {
    let client = resume(executor, session, options).await?;
    let (process, truncated) = client.attach(process_id).await.map_err(|e| match e.code() {
        Some(NOT_FOUND) | Some(INVALID_REQUEST) => anyhow::anyhow!(
            "session {session} has no process {process_id}; `{again} --resume {session} --list` shows the ones it has"
        ),
        _ => e.into(),
    })?;
    if truncated {
        eprintln!(
            "tether exec: earlier output of {process_id} is no longer retained; showing the rest"
        );
    }
    Ok((client, process))
}

/// Resumes `session` (trusting the executor's certificate on first use: [`crate::trust`]); a
/// refusal says what became of it.
pub(super) async fn resume(
    executor: &Executor,
    session: &str,
    options: ClientOptions,
) -> anyhow::Result<ExecServerClient> {
    let url = executor.url.as_str();
    let with_token = options.bearer_token.is_some();
    // A client that just died still holds the session for a moment: the client asks again.
    let attempt =
        async |options: ClientOptions| ExecServerClient::resume(url, session, options).await;
    crate::trust::connect(executor, options, attempt, |error| {
        match error.code() {
            Some(INVALID_REQUEST) => anyhow::anyhow!(
                "{url} has no session {session}: it ended, it expired while no client held it (the server's --session-ttl-secs), or the server restarted"
            ),
            Some(SESSION_ALREADY_ATTACHED) => anyhow::anyhow!(
                "session {session} is held by another client that is still connected; end that one, or wait until it detaches"
            ),
            _ => crate::report::connect_failure(url, error, with_token),
        }
    })
    .await
}
