//! `NativeExecutor`: one session on an exec-server, and the calls Python makes on it. Every
//! call returns a [`Pending`]; `tether` (blocking) waits on it, `tether.aio` awaits it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tether_client::{ClientError, ClientOptions, ExecServerClient, TlsFingerprint, TokenSource};
use tether_engine::fs::FileSystem;
use tether_protocol::PathUri;
use tether_protocol::fs::{FsReadFileParams, FsWriteFileParams};
use tether_protocol::process::{EnvInherit, EnvPolicy, ExecParams, PtySize};

use crate::errors::NativeError;
use crate::pending::Stop;
use crate::pending::{Pending, value};
use crate::process::{INTERRUPT_GRACE, NativeProcess, RunGuard, collect, interrupt_then_kill};

/// What `connect` was given, checked before anything is sent.
#[derive(Default)]
struct ConnectArgs {
    token: Option<String>,
    token_source: Option<TokenSource>,
    tls_fingerprint: Option<TlsFingerprint>,
    tls_ca_file: Option<std::path::PathBuf>,
    recovery_timeout: Option<Duration>,
    detached_ttl: Option<Duration>,
}

/// One session on an exec-server.
#[pyclass(frozen, module = "tether._native")]
pub struct NativeExecutor {
    /// `None` once closed: later calls fail plainly instead of reconnecting.
    client: Mutex<Option<ExecServerClient>>,
    session_id: String,
}

/// Tells process ids of this Python process apart within a session.
static NEXT_PROCESS: AtomicU64 = AtomicU64::new(1);

fn process_id() -> String {
    format!("py-{}-{}", std::process::id(), NEXT_PROCESS.fetch_add(1, Ordering::Relaxed))
}

#[pyfunction]
#[pyo3(signature = (url, *, token=None, tls_fingerprint=None, tls_ca_file=None, session_id=None,
    client_name=None, recovery_timeout=None, detached_ttl=None))]
#[allow(clippy::too_many_arguments)]
pub fn connect(
    url: String,
    token: Option<Bound<'_, PyAny>>,
    tls_fingerprint: Option<String>,
    tls_ca_file: Option<std::path::PathBuf>,
    session_id: Option<String>,
    client_name: Option<String>,
    recovery_timeout: Option<f64>,
    detached_ttl: Option<f64>,
) -> PyResult<Pending> {
    let mut args = ConnectArgs { tls_ca_file, ..ConnectArgs::default() };
    match token {
        None => {}
        Some(token) if token.is_callable() => {
            let source: Py<PyAny> = token.unbind();
            args.token_source = Some(Arc::new(move || {
                Python::attach(|py| {
                    let token = source
                        .call0(py)
                        .map_err(|error| format!("the token callable failed: {error}"))?;
                    token
                        .extract::<Option<String>>(py)
                        .map_err(|_| "the token callable must return a str or None".to_owned())
                })
            }));
        }
        Some(token) => {
            args.token = Some(token.extract::<String>().map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err("token must be a str, a callable or None")
            })?);
        }
    }
    if let Some(text) = tls_fingerprint {
        args.tls_fingerprint = Some(text.parse().map_err(|error| {
            pyo3::exceptions::PyValueError::new_err(format!("tls_fingerprint: {error}"))
        })?);
    }
    args.recovery_timeout = seconds("recovery_timeout", recovery_timeout)?;
    args.detached_ttl = seconds("detached_ttl", detached_ttl)?;
    let mut options = ClientOptions {
        client_name: client_name.unwrap_or_else(|| "tether-python".to_owned()),
        bearer_token: args.token,
        token_source: args.token_source,
        tls_ca_file: args.tls_ca_file,
        tls_fingerprint: args.tls_fingerprint,
        detached_ttl: args.detached_ttl,
        ..ClientOptions::default()
    };
    if let Some(timeout) = args.recovery_timeout {
        options.recovery_timeout = timeout;
    }
    Ok(Pending::spawn(async move {
        let client = match session_id {
            Some(session) => ExecServerClient::resume(&url, &session, options).await,
            None => ExecServerClient::connect(&url, options).await,
        }?;
        let session_id = client.session_id().to_owned();
        value(NativeExecutor { client: Mutex::new(Some(client)), session_id })
    }))
}

/// A duration in seconds from Python, refused when negative or not finite.
fn seconds(name: &str, seconds: Option<f64>) -> PyResult<Option<Duration>> {
    seconds
        .map(|seconds| {
            Duration::try_from_secs_f64(seconds).map_err(|_| {
                pyo3::exceptions::PyValueError::new_err(format!(
                    "{name} must be a non-negative number of seconds, not {seconds}"
                ))
            })
        })
        .transpose()
}

/// What `run` and `spawn` start, from Python's arguments.
struct Command {
    argv: Vec<String>,
    cwd: Option<std::path::PathBuf>,
    env: Option<BTreeMap<String, String>>,
    tty: bool,
    stdin: bool,
    pty_size: Option<(u16, u16)>,
}

impl Command {
    /// The `process/start` params: in `cwd` (the server's own working directory when not
    /// given), with exactly `env` when given and the executor's whole environment otherwise,
    /// as `subprocess` treats its parent's.
    fn params(self, client: &ExecServerClient) -> Result<ExecParams, NativeError> {
        if self.argv.is_empty() {
            return Err(NativeError::InvalidArgument("args must name a program to run".into()));
        }
        let cwd = match &self.cwd {
            Some(dir) => PathUri::from_path(dir).ok_or_else(|| {
                NativeError::InvalidArgument(format!(
                    "cwd {}: give an absolute path on the executor",
                    dir.display()
                ))
            })?,
            None => client
                .environment_info()
                .and_then(|info| info.cwd.clone())
                .or_else(|| PathUri::from_path(Path::new("/")))
                .expect("/ is an absolute path"),
        };
        let mut params = ExecParams::new(process_id(), self.argv, cwd);
        match self.env {
            Some(env) => params.env = env,
            None => {
                params.env_policy = Some(EnvPolicy {
                    inherit: EnvInherit::All,
                    ignore_default_excludes: false,
                    exclude: Vec::new(),
                    set: BTreeMap::new(),
                    include_only: Vec::new(),
                })
            }
        }
        params.tty = self.tty;
        params.pipe_stdin = self.stdin;
        if let Some((cols, rows)) = self.pty_size {
            if !client.tether_extensions().pty_size {
                return Err(NativeError::Unsupported(
                    "this exec-server does not take a terminal size (the ptySize extension); leave pty_size out".into(),
                ));
            }
            params.pty_size = Some(PtySize { cols, rows });
        }
        Ok(params)
    }
}

impl NativeExecutor {
    fn client(&self) -> PyResult<ExecServerClient> {
        self.client
            .lock()
            .expect("the executor's lock")
            .clone()
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("this executor is closed"))
    }
}

#[pymethods]
impl NativeExecutor {
    #[getter]
    fn session_id(&self) -> &str {
        &self.session_id
    }

    /// `"connected"`, `"recovering"`, `"failed"` or `"closed"`.
    #[getter]
    fn status(&self) -> PyResult<&'static str> {
        let Some(client) = self.client.lock().expect("the executor's lock").clone() else {
            return Ok("closed");
        };
        Ok(match client.status() {
            tether_client::ConnectionStatus::Connected => "connected",
            tether_client::ConnectionStatus::Recovering => "recovering",
            tether_client::ConnectionStatus::Failed(_) => "failed",
        })
    }

    /// The Tether extensions the server offers (empty on the reference), as a dict.
    fn extensions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let extensions = self.client()?.tether_extensions();
        let text = serde_json::to_string(&extensions).expect("extensions serialise");
        py.import("json")?.call_method1("loads", (text,))
    }

    /// Ends this connection; the server keeps the session (and its processes) for its
    /// detached time, so `connect(…, session_id=…)` can take it up again.
    fn close(&self) {
        self.client.lock().expect("the executor's lock").take();
    }

    #[pyo3(signature = (
        argv, cwd=None, env=None, input=None, timeout=None, tty=false, interrupt_grace=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        argv: Vec<String>,
        cwd: Option<std::path::PathBuf>,
        env: Option<BTreeMap<String, String>>,
        input: Option<Vec<u8>>,
        timeout: Option<f64>,
        tty: bool,
        interrupt_grace: Option<f64>,
    ) -> PyResult<Pending> {
        let client = self.client()?;
        let timeout_duration = seconds("timeout", timeout)?;
        let grace = seconds("interrupt_grace", interrupt_grace)?.unwrap_or(INTERRUPT_GRACE);
        let command = Command { argv, cwd, env, tty, stdin: input.is_some(), pty_size: None };
        Ok(Pending::spawn_stoppable(grace, move |stop| async move {
            let limit = timeout_duration.map(|d| (d, timeout.unwrap_or(0.0)));
            let (code, stdout, stderr) = run(&client, command, input, limit, grace, stop).await?;
            Ok(Box::new(move |py: Python<'_>| {
                let stdout = PyBytes::new(py, &stdout);
                let stderr = PyBytes::new(py, &stderr);
                Ok((code, stdout, stderr).into_pyobject(py)?.into_any().unbind())
            }) as crate::pending::Convert)
        }))
    }

    #[pyo3(signature = (argv, cwd=None, env=None, tty=false, stdin=false, pty_size=None))]
    fn spawn(
        &self,
        argv: Vec<String>,
        cwd: Option<std::path::PathBuf>,
        env: Option<BTreeMap<String, String>>,
        tty: bool,
        stdin: bool,
        pty_size: Option<(u16, u16)>,
    ) -> PyResult<Pending> {
        let client = self.client()?;
        let command = Command { argv, cwd, env, tty, stdin, pty_size };
        Ok(Pending::spawn(async move {
            let params = command.params(&client)?;
            let program = params.argv[0].clone();
            let process =
                client.start(params).await.map_err(|error| spawn_error(error, program))?;
            value(NativeProcess::new(process))
        }))
    }

    /// Follows a process of this session started earlier (by this program before it
    /// restarted, say): `(process, output_lost)`, `output_lost` true when the server no longer
    /// held its earliest output.
    fn attach(&self, process_id: String) -> PyResult<Pending> {
        let client = self.client()?;
        Ok(Pending::spawn(async move {
            let (process, lost) = client.attach(process_id).await?;
            let process = NativeProcess::new(process);
            Ok(Box::new(move |py: Python<'_>| {
                Ok((process, lost).into_pyobject(py)?.into_any().unbind())
            }) as crate::pending::Convert)
        }))
    }

    /// The session's processes (a Tether extension): a list of dicts.
    fn processes(&self, py: Python<'_>) -> PyResult<Pending> {
        let client = self.client()?;
        if !client.tether_extensions().process_list {
            return Err(NativeError::Unsupported(
                "this exec-server does not list a session's processes (the processList extension)"
                    .into(),
            )
            .into_pyerr(py));
        }
        Ok(Pending::spawn(async move {
            let processes = client.list_processes().await?;
            let text = serde_json::to_string(&processes).expect("process summaries serialise");
            Ok(Box::new(move |py: Python<'_>| {
                Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
            }) as crate::pending::Convert)
        }))
    }

    fn read_file(&self, path: std::path::PathBuf) -> PyResult<Pending> {
        let client = self.client()?;
        let shown = path.display().to_string();
        let path = absolute(&path)?;
        Ok(Pending::spawn(async move {
            let params =
                FsReadFileParams { path, follow_symlinks: None, sandbox: None, attach_data: None };
            let read = client.read_file(params).await.map_err(|error| fs_error(error, &shown))?;
            let data = read.data_base64.into_bytes();
            Ok(Box::new(move |py: Python<'_>| Ok(PyBytes::new(py, &data).into_any().unbind()))
                as crate::pending::Convert)
        }))
    }

    /// An HTTP request made from the executor (`http/request`, its body buffered):
    /// `(status, [(name, value)…], body)`. `headers` as `(name, value)` pairs, in order;
    /// `value_env_var` headers are left to the Rust client.
    #[pyo3(signature = (method, url, headers=Vec::new(), body=None, timeout=None, follow_redirects=true))]
    fn http_request(
        &self,
        method: String,
        url: String,
        headers: Vec<(String, String)>,
        body: Option<Vec<u8>>,
        timeout: Option<f64>,
        follow_redirects: bool,
    ) -> PyResult<Pending> {
        use tether_engine::http::HttpClient;
        use tether_protocol::http::{HttpHeader, HttpRedirectPolicy, HttpRequestParams};
        let client = self.client()?;
        let timeout_ms = seconds("timeout", timeout)?
            .map(|timeout| u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).max(1));
        let params = HttpRequestParams {
            method,
            url,
            headers: headers
                .into_iter()
                .map(|(name, value)| HttpHeader { name, value, value_env_var: None })
                .collect(),
            body_base64: body.map(tether_protocol::ByteChunk::from),
            timeout_ms,
            redirect_policy: match follow_redirects {
                true => HttpRedirectPolicy::Follow,
                false => HttpRedirectPolicy::Stop,
            },
            request_id: format!(
                "py-{}-{}",
                std::process::id(),
                NEXT_REQUEST.fetch_add(1, Ordering::Relaxed)
            ),
            stream_response: false,
            attach_body: false,
        };
        Ok(Pending::spawn(async move {
            let response = client.request(params).await.map_err(NativeError::Http)?;
            let headers: Vec<(String, String)> =
                response.headers.into_iter().map(|header| (header.name, header.value)).collect();
            let body = response.body_base64.into_bytes();
            let status = response.status;
            Ok(Box::new(move |py: Python<'_>| {
                Ok((status, headers, PyBytes::new(py, &body))
                    .into_pyobject(py)?
                    .into_any()
                    .unbind())
            }) as crate::pending::Convert)
        }))
    }

    /// An MCP session with a stdio server run on the executor: `argv` in `cwd`, `env` on top
    /// of the executor's core variables (nothing else of its environment reaches the server,
    /// whose stdout is the MCP stream). `timeout` bounds the handshake and each list,
    /// `call_timeout` each tool call.
    #[pyo3(signature = (argv, env=BTreeMap::new(), cwd=None, timeout=None, call_timeout=None))]
    fn mcp_stdio(
        &self,
        py: Python<'_>,
        argv: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<std::path::PathBuf>,
        timeout: Option<f64>,
        call_timeout: Option<f64>,
    ) -> PyResult<Pending> {
        let client = self.client()?;
        let server = crate::mcp::Connect::stdio(&client, argv, env, cwd)
            .map_err(|error| error.into_pyerr(py))?;
        let timeout = seconds("timeout", timeout)?;
        let call_timeout = seconds("call_timeout", call_timeout)?;
        Ok(crate::mcp::Connect { server, timeout, call_timeout }.open(client))
    }

    /// An MCP session with a Streamable HTTP server at `url`, reached from the executor's
    /// network (`http/request`); `headers` go with every request, `bearer_token` as
    /// `Authorization: Bearer …`.
    #[pyo3(signature = (url, headers=Vec::new(), bearer_token=None, timeout=None, call_timeout=None))]
    fn mcp_http(
        &self,
        url: String,
        headers: Vec<(String, String)>,
        bearer_token: Option<String>,
        timeout: Option<f64>,
        call_timeout: Option<f64>,
    ) -> PyResult<Pending> {
        let client = self.client()?;
        let server = crate::mcp::Connect::http(url, headers, bearer_token);
        let timeout = seconds("timeout", timeout)?;
        let call_timeout = seconds("call_timeout", call_timeout)?;
        Ok(crate::mcp::Connect { server, timeout, call_timeout }.open(client))
    }

    /// `local` (this machine) to `remote` (an absolute path on the executor), as scp copies;
    /// a directory with `recursive`. The answer is a `tether.CopyReport`.
    #[pyo3(signature = (local, remote, recursive=false))]
    fn upload(
        &self,
        local: std::path::PathBuf,
        remote: std::path::PathBuf,
        recursive: bool,
    ) -> PyResult<Pending> {
        crate::copy::start(self.client()?, crate::copy::Direction::Up, local, remote, recursive)
    }

    /// `remote` (an absolute path on the executor) to `local` (this machine), as scp copies;
    /// a directory with `recursive`. The answer is a `tether.CopyReport`.
    #[pyo3(signature = (remote, local, recursive=false))]
    fn download(
        &self,
        remote: std::path::PathBuf,
        local: std::path::PathBuf,
        recursive: bool,
    ) -> PyResult<Pending> {
        crate::copy::start(self.client()?, crate::copy::Direction::Down, local, remote, recursive)
    }

    fn write_file(&self, path: std::path::PathBuf, data: Vec<u8>) -> PyResult<Pending> {
        let client = self.client()?;
        let shown = path.display().to_string();
        let path = absolute(&path)?;
        Ok(Pending::spawn(async move {
            let data_base64 = tether_protocol::ByteChunk::from(data).to_base64();
            let params =
                FsWriteFileParams { path, data_base64, follow_symlinks: None, sandbox: None };
            client.write_file(params).await.map_err(|error| fs_error(error, &shown))?;
            value(())
        }))
    }
}

/// Tells `http/request` ids of this Python process apart within a session.
static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

fn absolute(path: &Path) -> PyResult<PathUri> {
    PathUri::from_path(path).ok_or_else(|| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "{}: give an absolute path on the executor",
            path.display()
        ))
    })
}

fn fs_error(error: tether_engine::fs::FsError, path: &str) -> NativeError {
    NativeError::Fs { error, path: path.to_owned() }
}

/// A failed start as the exception Python raises for a program it cannot run.
fn spawn_error(error: ClientError, program: String) -> NativeError {
    match error.spawn_failure() {
        Some(_) => NativeError::Spawn { error, program },
        None => NativeError::Client(error),
    }
}

/// Runs `command` to its end: its exit code and everything it wrote, `input` given to its
/// stdin first. `timeout` (with the seconds as Python gave them, for the exception) ends it;
/// a run asked to `stop` (Ctrl-C, a cancelled task) interrupts it, and kills it if it has not
/// ended `grace` later; one dropped unfinished does the same in the background.
async fn run(
    client: &ExecServerClient,
    command: Command,
    input: Option<Vec<u8>>,
    timeout: Option<(Duration, f64)>,
    grace: Duration,
    stop: Stop,
) -> Result<(i32, Vec<u8>, Vec<u8>), NativeError> {
    if input.is_some() && !client.tether_extensions().close_stdin {
        return Err(NativeError::Unsupported(
            "this exec-server cannot end a process's input (the closeStdin extension): input= needs a Tether server; use spawn(…, stdin=True) and write() to a command that knows when its input ends".into(),
        ));
    }
    let params = command.params(client)?;
    let argv = params.argv.clone();
    let mut process =
        client.start(params).await.map_err(|error| spawn_error(error, argv[0].clone()))?;
    let control = process.control();
    let guard = RunGuard::new(control.clone(), grace);
    let feed = async {
        if let Some(input) = input {
            // A command that exits without reading all of its input is not a failure, as
            // `subprocess` ignores a broken pipe.
            let _ = control.write(input).await;
            let _ = control.close_stdin().await;
        }
    };
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let outcome = {
        let collected = collect(&mut process, &mut stdout, &mut stderr);
        let both = async {
            let ((), code) = tokio::join!(feed, collected);
            code
        };
        let limited = async {
            match timeout {
                Some((limit, _)) => tokio::time::timeout(limit, both).await.ok(),
                None => Some(both.await),
            }
        };
        tokio::select! {
            biased;
            () = stop.requested() => None,
            outcome = limited => Some(outcome),
        }
    };
    let Some(outcome) = outcome else {
        interrupt_then_kill(&mut process, &control, grace).await;
        guard.disarm();
        return Err(NativeError::Cancelled);
    };
    match outcome {
        Some(code) => {
            guard.disarm();
            Ok((code?, stdout, stderr))
        }
        None => {
            guard.disarm();
            let _ = process.terminate().await;
            let (_, seconds) = timeout.expect("only a timeout ends a run unfinished");
            Err(NativeError::Timeout { argv, timeout: seconds, stdout, stderr })
        }
    }
}
