//! [`Environment`]: where a harness runs its tools — processes, files and HTTP — as one value.
//!
//! Local, the engine serves all three in-process; remote, one session with an exec-server
//! does. A harness written against the three traits switches placement by choosing the
//! constructor and nothing else.

use std::sync::Arc;

use tether_engine::exec::{ExecBackend, LocalExecBackend};
use tether_engine::fs::{FileSystem, LocalFileSystem};
use tether_engine::http::{HttpClient, LocalHttpClient};

use crate::client::ExecServerClient;

/// The three surfaces of one executor. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Environment {
    pub exec: Arc<dyn ExecBackend>,
    pub fs: Arc<dyn FileSystem>,
    pub http: Arc<dyn HttpClient>,
    /// The session behind a remote environment.
    client: Option<ExecServerClient>,
}

impl Environment {
    /// This machine: processes in a process table of the environment's own (killed when the
    /// environment and every process handle are gone), its filesystem, its network.
    pub fn local() -> Self {
        Self {
            exec: Arc::new(LocalExecBackend::default()),
            fs: Arc::new(LocalFileSystem::new()),
            http: Arc::new(LocalHttpClient::new()),
            client: None,
        }
    }

    /// The executor behind `client`'s session: every call goes over it, riding through
    /// reconnects as the client does.
    pub fn remote(client: ExecServerClient) -> Self {
        Self {
            exec: Arc::new(client.clone()),
            fs: Arc::new(client.clone()),
            http: Arc::new(client.clone()),
            client: Some(client),
        }
    }

    pub fn is_remote(&self) -> bool {
        self.client.is_some()
    }

    /// The session of a remote environment (its status, its environment info).
    pub fn client(&self) -> Option<&ExecServerClient> {
        self.client.as_ref()
    }
}

impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let session = self.client.as_ref().map(ExecServerClient::session_id);
        f.debug_struct("Environment").field("remote_session", &session).finish_non_exhaustive()
    }
}
