//! `NativeProcess`: a remote process Python follows, its output handed over in batches, and
//! what `run` shares with it (collecting output to the end, interrupting a cancelled run).

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use tether_client::{
    ProcessControl, ProcessFailure, ProcessFailureKind, ProcessUpdate, RemoteProcess,
};
use tether_engine::ProcessEvent;
use tether_protocol::process::{ExecOutputStream, ProcessSignal, WriteStatus};

use crate::errors::NativeError;
use crate::pending::{Convert, Pending, runtime, value};

/// Most updates handed to Python at once: everything the handle already holds (at most
/// [`tether_client::HANDLE_MEMORY_BYTES`]) up to this many, so a fast stream costs Python one
/// call per batch rather than one per chunk, and a batch stays small enough to hand over
/// whole.
const BATCH_MAX_UPDATES: usize = 256;

/// How long a cancelled `run`'s command has, after its SIGINT, before it is killed, unless the
/// caller says (`interrupt_grace=`): the grace `subprocess.run` gives its own child on Ctrl-C.
pub(crate) const INTERRUPT_GRACE: Duration = Duration::from_millis(250);

/// One update as Python sees it.
enum Item {
    Output(&'static str, bytes::Bytes),
    Exit(i32),
}

/// A remote process this Python program follows.
#[pyclass(frozen, module = "tether._native")]
pub struct NativeProcess {
    process: Arc<tokio::sync::Mutex<RemoteProcess>>,
    control: ProcessControl,
}

impl NativeProcess {
    pub(crate) fn new(process: RemoteProcess) -> Self {
        let control = process.control();
        Self { process: Arc::new(tokio::sync::Mutex::new(process)), control }
    }
}

fn stream_name(stream: ExecOutputStream) -> &'static str {
    match stream {
        ExecOutputStream::Stdout => "stdout",
        ExecOutputStream::Stderr => "stderr",
        ExecOutputStream::Pty => "pty",
    }
}

/// What one update says: an item for Python, the end (`None`), or a failure.
fn item(update: Option<ProcessUpdate>) -> Result<Option<Item>, NativeError> {
    match update {
        Some(ProcessUpdate::Event(ProcessEvent::Output { stream, chunk, .. })) => {
            Ok(Some(Item::Output(stream_name(stream), chunk)))
        }
        Some(ProcessUpdate::Event(ProcessEvent::Exited { exit_code, .. })) => {
            Ok(Some(Item::Exit(exit_code)))
        }
        Some(ProcessUpdate::Event(ProcessEvent::Closed { .. })) | None => Ok(None),
        Some(ProcessUpdate::Failed(why)) => Err(NativeError::ProcessLost(why)),
    }
}

/// Reads `process` to its end into `stdout` and `stderr` (a PTY's output into `stdout`):
/// its exit code.
pub(crate) async fn collect(
    process: &mut RemoteProcess,
    stdout: &mut Vec<u8>,
    stderr: &mut Vec<u8>,
) -> Result<i32, NativeError> {
    let mut code = None;
    while let Some(item) = item(process.next_update().await)? {
        match item {
            Item::Output("stderr", chunk) => stderr.extend_from_slice(&chunk),
            Item::Output(_, chunk) => stdout.extend_from_slice(&chunk),
            Item::Exit(exit_code) => code = Some(exit_code),
        }
    }
    code.ok_or_else(|| {
        // The server closed the process's stream without its exit: no server should.
        let failure = ProcessFailure::new(
            ProcessFailureKind::Protocol,
            format!("process {} closed without an exit code", process.process_id()),
        );
        NativeError::ProcessLost(failure)
    })
}

/// Ends a run given up before its command ended, as `subprocess.run` ends its child on Ctrl-C:
/// SIGINT, then up to `grace` for the command to end (its output read and dropped), then a
/// kill.
pub(crate) async fn interrupt_then_kill(
    process: &mut RemoteProcess,
    control: &ProcessControl,
    grace: Duration,
) {
    let _ = control.interrupt().await;
    let ended = tokio::time::timeout(grace, async {
        while let Ok(Some(_)) = item(process.next_update().await) {}
    })
    .await;
    if ended.is_err() {
        let _ = process.terminate().await;
    }
}

/// Interrupts a `run`'s command if the run is dropped before it ends (Ctrl-C in Python, an
/// asyncio task cancelled): SIGINT, then a kill after its grace (by default
/// [`INTERRUPT_GRACE`]), as `subprocess.run` treats its child.
pub(crate) struct RunGuard {
    control: Option<ProcessControl>,
    grace: Duration,
}

impl RunGuard {
    pub(crate) fn new(control: ProcessControl, grace: Duration) -> Self {
        Self { control: Some(control), grace }
    }

    pub(crate) fn disarm(mut self) {
        self.control = None;
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if let Some(control) = self.control.take() {
            let grace = self.grace;
            runtime().spawn(async move {
                let _ = control.interrupt().await;
                tokio::time::sleep(grace).await;
                let _ = control.terminate().await;
            });
        }
    }
}

fn signal_named(signal: &Bound<'_, PyAny>) -> PyResult<ProcessSignal> {
    let number: i32 = match signal.extract::<i32>() {
        Ok(number) => number,
        Err(_) => {
            let name: String = signal.extract()?;
            return serde_json::from_value(serde_json::Value::String(name.clone())).map_err(|_| {
                pyo3::exceptions::PyValueError::new_err(format!("unknown signal {name:?}"))
            });
        }
    };
    Ok(match number {
        1 => ProcessSignal::Hangup,
        2 => ProcessSignal::Interrupt,
        3 => ProcessSignal::Quit,
        9 => ProcessSignal::Kill,
        10 => ProcessSignal::User1,
        12 => ProcessSignal::User2,
        15 => ProcessSignal::Terminate,
        _ => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "signal {number} cannot be sent to a remote process (SIGHUP, SIGINT, SIGQUIT, SIGKILL, SIGUSR1, SIGUSR2 and SIGTERM can)"
            )));
        }
    })
}

#[pymethods]
impl NativeProcess {
    #[getter]
    fn process_id(&self) -> String {
        self.control.process_id().to_string()
    }

    /// The next updates, waiting for the first: a list of `("stdout" | "stderr" | "pty",
    /// bytes)` and `("exit", code)` tuples; an empty list once the process has closed. Raises
    /// `tether.ProcessLost`, with the failure's `kind`, when it can no longer be followed.
    fn next_batch(&self) -> Pending {
        let process = self.process.clone();
        Pending::spawn(async move {
            let mut process = process.lock().await;
            let mut items = Vec::new();
            let mut update = Some(process.next_update().await);
            while let Some(next) = update.take() {
                let Some(item) = item(next)? else { break };
                items.push(item);
                if items.len() >= BATCH_MAX_UPDATES {
                    break;
                }
                // What the handle already holds, without waiting.
                update = futures_now(process.next_update());
            }
            Ok(Box::new(move |py: Python<'_>| {
                let list = PyList::empty(py);
                for item in items {
                    match item {
                        Item::Output(stream, chunk) => {
                            list.append((stream, PyBytes::new(py, &chunk)))?
                        }
                        Item::Exit(code) => list.append(("exit", code))?,
                    }
                }
                Ok(list.into_any().unbind())
            }) as Convert)
        })
    }

    /// Writes to the process's stdin: `"accepted"`, or why not (`"unknownProcess"`,
    /// `"stdinClosed"`, `"starting"`).
    fn write(&self, data: Vec<u8>) -> Pending {
        let control = self.control.clone();
        Pending::spawn(async move {
            let status = control.write(data).await?;
            value(match status {
                WriteStatus::Accepted => "accepted",
                WriteStatus::UnknownProcess => "unknownProcess",
                WriteStatus::StdinClosed => "stdinClosed",
                WriteStatus::Starting => "starting",
            })
        })
    }

    fn close_stdin(&self) -> Pending {
        let control = self.control.clone();
        Pending::spawn(async move {
            control.close_stdin().await?;
            value(())
        })
    }

    fn signal(&self, signal: &Bound<'_, PyAny>) -> PyResult<Pending> {
        let signal = signal_named(signal)?;
        let control = self.control.clone();
        Ok(Pending::spawn(async move {
            control.signal(signal).await?;
            value(())
        }))
    }

    /// Kills the process group: whether it was still running.
    fn terminate(&self) -> Pending {
        let control = self.control.clone();
        Pending::spawn(async move { value(control.terminate().await?) })
    }

    fn resize(&self, cols: u16, rows: u16) -> Pending {
        let control = self.control.clone();
        Pending::spawn(async move {
            control.resize(cols, rows).await?;
            value(())
        })
    }
}

/// `future`'s output if it is ready now, without waiting. `next_update` is cancel-safe (a
/// channel receive), so a future that is not ready is simply dropped.
fn futures_now<F: std::future::Future>(future: F) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    let mut context = std::task::Context::from_waker(waker);
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}
