//! The engine's process surface over a session: [`ExecServerClient`] is an [`ExecBackend`] and
//! [`RemoteProcess`] an [`ExecProcess`], so a harness written against the traits runs its
//! processes remotely by swapping one value.
//!
//! The traits add nothing to what the client already does (ordering, recovery, idempotent
//! writes); this is the translation of its errors into the engine's.

use async_trait::async_trait;
use bytes::Bytes;
use tether_engine::ProcessUpdate;
use tether_engine::exec::{ExecBackend, ExecError, ExecErrorKind, ExecProcess};
use tether_protocol::ProcessId;
use tether_protocol::error::{INVALID_PARAMS, INVALID_REQUEST};
use tether_protocol::process::{ExecParams, ProcessSignal, ReadResponse, WriteStatus};

use crate::client::ExecServerClient;
use crate::error::ClientError;
use crate::process::{ProcessControl, RemoteProcess};

#[async_trait]
impl ExecBackend for ExecServerClient {
    async fn start(&self, params: ExecParams) -> Result<Box<dyn ExecProcess>, ExecError> {
        let process = ExecServerClient::start(self, params).await.map_err(exec_error)?;
        Ok(Box::new(process))
    }
}

#[async_trait]
impl ExecProcess for RemoteProcess {
    fn process_id(&self) -> &ProcessId {
        ProcessControl::process_id(self)
    }

    fn buffered_bytes(&self) -> usize {
        RemoteProcess::buffered_bytes(self)
    }

    async fn next_update(&mut self) -> Option<ProcessUpdate> {
        RemoteProcess::next_update(self).await
    }

    async fn write(&self, bytes: Bytes) -> Result<WriteStatus, ExecError> {
        ProcessControl::write(self, bytes).await.map_err(exec_error)
    }

    async fn signal(&self, signal: ProcessSignal) -> Result<(), ExecError> {
        ProcessControl::signal(self, signal).await.map_err(exec_error)
    }

    async fn terminate(&self) -> Result<bool, ExecError> {
        ProcessControl::terminate(self).await.map_err(exec_error)
    }

    async fn resize(&self, cols: u16, rows: u16) -> Result<(), ExecError> {
        ProcessControl::resize(self, cols, rows).await.map_err(exec_error)
    }

    async fn close_stdin(&self) -> Result<(), ExecError> {
        ProcessControl::close_stdin(self).await.map_err(exec_error)
    }

    async fn read(
        &self,
        after_seq: u64,
        max_bytes: Option<usize>,
        wait_ms: Option<u64>,
    ) -> Result<ReadResponse, ExecError> {
        ProcessControl::read(self, after_seq, max_bytes, wait_ms).await.map_err(exec_error)
    }
}

/// The server's answer keeps its message (the engine's own words, as a local backend would
/// report them) and gets its kind back from the code. Anything the client itself reports —
/// a drop, a lost session, an answer it cannot read — is the client's sentence.
pub(crate) fn exec_error(error: ClientError) -> ExecError {
    let spawn_failure = error.spawn_failure();
    let error = match error {
        ClientError::Server { code, message, .. } => {
            let kind = match code {
                INVALID_PARAMS => ExecErrorKind::InvalidParams,
                INVALID_REQUEST => ExecErrorKind::InvalidRequest,
                _ => ExecErrorKind::Internal,
            };
            ExecError::new(kind, message)
        }
        error @ (ClientError::Disconnected(_)
        | ClientError::Failed(_)
        | ClientError::Connect(_)) => ExecError::new(ExecErrorKind::Unreachable, error.to_string()),
        error @ ClientError::Unsupported(_) => {
            ExecError::new(ExecErrorKind::InvalidParams, error.to_string())
        }
        error @ ClientError::Protocol(_) => {
            ExecError::new(ExecErrorKind::Internal, error.to_string())
        }
    };
    error.with_spawn_failure(spawn_failure)
}
