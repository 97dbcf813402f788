//! `NativeMcpSession`: one MCP session whose server the executor places — a stdio server run
//! as a process there, or a Streamable HTTP server reached from its network — through
//! `tether-mcp`'s client, so Python gets the same narrow retries and clear errors as
//! `tether mcp`. Results cross to Python as JSON (rmcp's own serialisation, the MCP wire
//! shape), which the Python half turns into the `mcp` SDK's names.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use tether_client::{Environment, ExecServerClient};
use tether_mcp::{
    HttpServerConfig, McpClient, McpClientOptions, McpNotification, McpServerConfig,
    StdioServerCommand,
};
use tokio::sync::broadcast;

use crate::errors::NativeError;
use crate::pending::{Convert, Pending, value};

/// One MCP session. `None` once closed: later calls fail plainly.
#[pyclass(frozen, module = "tether._native")]
pub struct NativeMcpSession {
    /// Shared with the calls in flight, so `close` never waits for a long tool call: the
    /// session ends when the last of them lets go (dropping the client ends it too).
    client: Mutex<Option<Arc<McpClient>>>,
}

/// What Python gave for the server's place and the session's bounds.
pub(crate) struct Connect {
    pub(crate) server: McpServerConfig,
    pub(crate) timeout: Option<Duration>,
    pub(crate) call_timeout: Option<Duration>,
}

impl Connect {
    /// A stdio server: `argv` run in `cwd` (the executor's working directory when not given,
    /// else `/`), with `env` on top of the executor's core variables.
    pub(crate) fn stdio(
        client: &ExecServerClient,
        argv: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    ) -> Result<McpServerConfig, NativeError> {
        let mut words = argv.into_iter();
        let Some(program) = words.next() else {
            return Err(NativeError::InvalidArgument(
                "args must name the MCP server's program".into(),
            ));
        };
        let cwd = match cwd {
            Some(cwd) if cwd.is_absolute() => cwd,
            Some(cwd) => {
                return Err(NativeError::InvalidArgument(format!(
                    "cwd {}: give an absolute path on the executor",
                    cwd.display()
                )));
            }
            None => client
                .environment_info()
                .and_then(|info| info.cwd.as_ref().and_then(|cwd| cwd.to_path().ok()))
                .unwrap_or_else(|| PathBuf::from("/")),
        };
        Ok(McpServerConfig::Stdio(StdioServerCommand { program, args: words.collect(), env, cwd }))
    }

    /// A Streamable HTTP server at `url`, `headers` sent with every request.
    pub(crate) fn http(
        url: String,
        headers: Vec<(String, String)>,
        bearer_token: Option<String>,
    ) -> McpServerConfig {
        McpServerConfig::Http(HttpServerConfig { url, bearer_token, headers })
    }

    /// Starts or reaches the server and completes the MCP handshake.
    pub(crate) fn open(self, client: ExecServerClient) -> Pending {
        let mut options =
            McpClientOptions { call_timeout: self.call_timeout, ..Default::default() };
        if let Some(timeout) = self.timeout {
            options.request_timeout = timeout;
        }
        Pending::spawn(async move {
            let environment = Environment::remote(client);
            let session = McpClient::connect(&environment, &self.server, options)
                .await
                .map_err(NativeError::Mcp)?;
            value(NativeMcpSession { client: Mutex::new(Some(Arc::new(session))) })
        })
    }
}

impl NativeMcpSession {
    fn client(&self) -> PyResult<Arc<McpClient>> {
        self.client
            .lock()
            .expect("the MCP session's lock")
            .clone()
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("this MCP session is closed"))
    }
}

/// A value rmcp serialises, as Python data (through Python's own `json`) once the GIL is
/// held.
fn json<T: serde::Serialize>(data: &T) -> Convert {
    let text = serde_json::to_string(data).expect("MCP types serialise");
    Box::new(move |py: Python<'_>| Ok(py.import("json")?.call_method1("loads", (text,))?.unbind()))
}

#[pymethods]
impl NativeMcpSession {
    /// What the server said of itself in the handshake (`serverInfo`, `capabilities`,
    /// `protocolVersion`, `instructions`), as a dict.
    fn server_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let info = self.client()?.server_info();
        let text = serde_json::to_string(&info.as_deref()).expect("MCP types serialise");
        py.import("json")?.call_method1("loads", (text,))
    }

    /// Every tool the server offers (all pages), as the wire's dicts.
    fn list_tools(&self) -> PyResult<Pending> {
        let client = self.client()?;
        Ok(Pending::spawn(async move {
            let tools = client.list_tools().await.map_err(NativeError::Mcp)?;
            Ok(json(&tools))
        }))
    }

    /// Calls tool `name` once (never resent): the wire's `CallToolResult` as a dict.
    /// `arguments` is a JSON object's text, made by Python's `json`.
    #[pyo3(signature = (name, arguments=None))]
    fn call_tool(&self, name: String, arguments: Option<String>) -> PyResult<Pending> {
        let client = self.client()?;
        let arguments = match arguments.as_deref().map(serde_json::from_str) {
            None => None,
            Some(Ok(serde_json::Value::Object(object))) => Some(object),
            Some(_) => {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "arguments must be a dict of JSON values",
                ));
            }
        };
        Ok(Pending::spawn(async move {
            let result = client.call_tool(&name, arguments).await.map_err(NativeError::Mcp)?;
            Ok(json(&result))
        }))
    }

    /// What the server says on its own from now on (progress, log messages, changed lists),
    /// in the order it said it.
    fn notifications(&self) -> PyResult<NativeMcpNotifications> {
        let receiver = self.client()?.subscribe();
        Ok(NativeMcpNotifications {
            receiver: Arc::new(tokio::sync::Mutex::new(receiver)),
            missed: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Ends the session: an HTTP session is deleted, a stdio server's process terminated, and
    /// the call ends once that is done; with calls in flight it ends at once, and the session
    /// with the last of them.
    fn close(&self) -> Pending {
        let client = self.client.lock().expect("the MCP session's lock").take();
        Pending::spawn(async move {
            if let Some(client) = client.and_then(|client| Arc::try_unwrap(client).ok()) {
                client.close().await;
            }
            value(())
        })
    }
}

/// A session's notifications from the moment it was made. The client keeps a backlog for
/// each listener (1,024 notifications): one that falls further behind skips the oldest, and
/// counts them in `missed`, rather than holding the session's memory for ever.
#[pyclass(frozen, module = "tether._native")]
pub struct NativeMcpNotifications {
    /// Shared with the `next` in flight: one wait at a time takes from it.
    receiver: Arc<tokio::sync::Mutex<broadcast::Receiver<McpNotification>>>,
    missed: Arc<AtomicU64>,
}

#[pymethods]
impl NativeMcpNotifications {
    /// The next notification as the wire's dict (`method`, `params`), or `None` once the
    /// session has ended and every notification before its end has been taken.
    fn next(&self) -> Pending {
        let receiver = self.receiver.clone();
        let missed = self.missed.clone();
        Pending::spawn(async move {
            let mut receiver = receiver.lock().await;
            loop {
                match receiver.recv().await {
                    Ok(notification) => {
                        let wire = serde_json::json!({
                            "method": notification.method(),
                            "params": notification.params(),
                        });
                        return Ok(json(&wire));
                    }
                    Err(broadcast::error::RecvError::Lagged(skipped)) => {
                        missed.fetch_add(skipped, Ordering::Relaxed);
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        return Ok(Box::new(|py: Python<'_>| Ok(py.None())));
                    }
                }
            }
        })
    }

    /// Notifications skipped because this listener fell more than the backlog behind.
    #[getter]
    fn missed(&self) -> u64 {
        self.missed.load(Ordering::Relaxed)
    }
}
