//! [`Pending`]: one call running on the client's runtime, and the two ways Python waits for
//! it — a thread blocking with the GIL released ([`Pending::wait`]), or an asyncio loop told
//! through a [`Completions`] queue whose descriptor the loop watches.
//!
//! Tokio's worker threads never take the GIL: a finished call is either handed to the thread
//! that waits on it, or queued for the loop, which converts it to Python objects itself. So a
//! busy Python program never stalls the client (its keepalives, its catch-ups), and a
//! thousand calls finishing together cost the loop one wake-up, not a thousand.

use std::collections::VecDeque;
use std::future::Future;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::errors::NativeError;

/// How often a thread blocked in [`Pending::wait`] looks for a signal Python has to act on
/// (Ctrl-C): short enough that Ctrl-C feels immediate, long enough to cost nothing.
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// Threads of the client's runtime: the client's own work (frames, reorder, catch-up) is light;
/// two keep one slow conversion from delaying the connection on a two-core machine and up.
const RUNTIME_THREADS: usize = 2;

/// The runtime every connection of this Python process runs on, made on first use.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name("tether-client")
            .enable_all()
            .build()
            .expect("the tokio runtime starts")
    })
}

/// Makes the Python value of a finished call; run where the GIL is held.
pub(crate) type Convert = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// A finished call: its value to convert, or why it failed.
pub(crate) type Outcome = Result<Convert, NativeError>;

/// Wraps a value that converts to Python as a finished call's outcome.
pub(crate) fn value<T>(value: T) -> Outcome
where
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    Ok(Box::new(move |py| value.into_py_any(py)))
}

enum Slot {
    Running {
        notify: Option<(Arc<Queue>, u64)>,
    },
    /// Cancelled, and ending on its own (a `run` interrupting its command, then killing it
    /// after its grace): its outcome is not wanted, but its end wakes a thread waiting for it.
    Ending,
    Done(Outcome),
    Taken,
}

struct Shared {
    slot: Mutex<Slot>,
    done: Condvar,
}

impl Shared {
    fn finish(&self, outcome: Outcome) {
        let mut slot = self.slot.lock().expect("a pending call's lock");
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Running { notify: Some((queue, id)) } => {
                drop(slot);
                queue.push(id, outcome);
            }
            Slot::Running { notify: None } => {
                *slot = Slot::Done(outcome);
                self.done.notify_all();
            }
            Slot::Ending => self.done.notify_all(),
            // Cancelled already: nobody wants it.
            other => *slot = other,
        }
    }
}

/// How long a thread whose Ctrl-C cancelled a stoppable call waits for it to end tidily,
/// beyond what the call itself bounds (a `run`'s grace): the round trips of its SIGINT and its
/// kill, on a connection that may be recovering. A second Ctrl-C stops waiting at once.
const ENDING_MARGIN: Duration = Duration::from_secs(10);

/// A call in flight on the client's runtime.
#[pyclass(frozen, module = "tether._native")]
pub struct Pending {
    shared: Arc<Shared>,
    task: tokio::task::AbortHandle,
    /// For a call that ends tidily when asked ([`Pending::spawn_stoppable`]): how it is
    /// asked, and how long its ending may take.
    stop: Option<(Stop, Duration)>,
    /// For a stoppable call, what starts it: it begins only once it is waited for (or an
    /// asyncio loop is told of it), so a Ctrl-C that lands after the call was made but before
    /// the wait began cannot leave it running unwatched — it was never started, and its
    /// object's drop lets it go.
    start: Option<Start>,
}

/// Lets a deferred call begin, once.
struct Start {
    go: Arc<tokio::sync::Notify>,
    given: std::sync::atomic::AtomicBool,
}

impl Start {
    /// Lets the call begin (at most once; later calls change nothing).
    fn give(&self) {
        if !self.given.swap(true, std::sync::atomic::Ordering::AcqRel) {
            self.go.notify_one();
        }
    }

    fn given(&self) -> bool {
        self.given.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl Drop for Pending {
    /// A deferred call nobody waited for never starts: its task, parked at its start, goes.
    fn drop(&mut self) {
        if self.start.as_ref().is_some_and(|start| !start.given()) {
            self.task.abort();
        }
    }
}

/// Asks a running call to end early and tidily; given to it by [`Pending::spawn_stoppable`].
#[derive(Clone, Default)]
pub(crate) struct Stop(Arc<tokio::sync::Notify>);

impl Stop {
    /// Ready once the call is asked to stop (at once if it has been already).
    pub(crate) async fn requested(&self) {
        self.0.notified().await;
    }
}

impl Pending {
    /// Runs `call` on the client's runtime.
    pub(crate) fn spawn<F>(call: F) -> Self
    where
        F: Future<Output = Outcome> + Send + 'static,
    {
        let (shared, task) = Self::start(call);
        Self { shared, task, stop: None, start: None }
    }

    /// Runs the call `make` makes on the client's runtime, once it is waited for; cancelling
    /// it asks it to stop through the [`Stop`] it is given, instead of dropping it, so it can
    /// undo what it started (a `run` interrupts its command, and kills it after its grace). A
    /// thread whose Ctrl-C cancels it waits for that, as `subprocess.run` waits for its child,
    /// at most `ending` and [`ENDING_MARGIN`]. Dropped before it was waited for, it never
    /// starts.
    pub(crate) fn spawn_stoppable<F, M>(ending: Duration, make: M) -> Self
    where
        M: FnOnce(Stop) -> F,
        F: Future<Output = Outcome> + Send + 'static,
    {
        let stop = Stop::default();
        let go = Arc::new(tokio::sync::Notify::new());
        let call = make(stop.clone());
        let gate = go.clone();
        let (shared, task) = Self::start(async move {
            gate.notified().await;
            call.await
        });
        let start = Start { go, given: std::sync::atomic::AtomicBool::new(false) };
        Self { shared, task, stop: Some((stop, ending)), start: Some(start) }
    }

    /// Lets a deferred call begin: it is being waited for.
    fn begin(&self) {
        if let Some(start) = &self.start {
            start.give();
        }
    }

    fn start<F>(call: F) -> (Arc<Shared>, tokio::task::AbortHandle)
    where
        F: Future<Output = Outcome> + Send + 'static,
    {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot::Running { notify: None }),
            done: Condvar::new(),
        });
        let finisher = shared.clone();
        let task = runtime().spawn(async move { finisher.finish(call.await) });
        (shared, task.abort_handle())
    }

    /// After a stoppable call was cancelled: blocks (the GIL released) until it has ended, at
    /// most its ending time; a signal Python must handle meanwhile drops it where it stands.
    fn wait_ending(&self, py: Python<'_>, ending: Duration) -> PyResult<()> {
        let deadline = Instant::now() + ending + ENDING_MARGIN;
        loop {
            let slice =
                deadline.saturating_duration_since(Instant::now()).min(SIGNAL_CHECK_INTERVAL);
            let ended = py.detach(|| {
                let slot = self.shared.slot.lock().expect("a pending call's lock");
                let (slot, _) = self
                    .shared
                    .done
                    .wait_timeout_while(slot, slice, |slot| matches!(slot, Slot::Ending))
                    .expect("a pending call's lock");
                !matches!(*slot, Slot::Ending)
            });
            if ended {
                return Ok(());
            }
            if let Err(again) = py.check_signals() {
                self.abort();
                return Err(again);
            }
            if Instant::now() >= deadline {
                self.abort();
                return Ok(());
            }
        }
    }

    /// Drops the call where it stands; its outcome is never given.
    fn abort(&self) {
        *self.shared.slot.lock().expect("a pending call's lock") = Slot::Taken;
        self.task.abort();
    }
}

#[pymethods]
impl Pending {
    /// Blocks until the call ends, with the GIL released, and returns its value (or raises).
    ///
    /// `timeout` (seconds): raise `TimeoutError` after that long, the call still running, so
    /// that it can be waited for again. A signal Python must handle (Ctrl-C's
    /// `KeyboardInterrupt`) is raised at once; with `cancel_on_interrupt` it also cancels the
    /// call (a cancelled `run` interrupts its remote command), otherwise the call goes on.
    #[pyo3(signature = (timeout=None, cancel_on_interrupt=true))]
    fn wait(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        cancel_on_interrupt: bool,
    ) -> PyResult<Py<PyAny>> {
        self.begin();
        let deadline = match timeout {
            Some(seconds) => Some(
                Instant::now()
                    + Duration::try_from_secs_f64(seconds).map_err(|_| {
                        pyo3::exceptions::PyValueError::new_err(format!(
                            "timeout must be a non-negative number of seconds, not {seconds}"
                        ))
                    })?,
            ),
            None => None,
        };
        loop {
            let slice = match deadline {
                Some(deadline) => {
                    deadline.saturating_duration_since(Instant::now()).min(SIGNAL_CHECK_INTERVAL)
                }
                None => SIGNAL_CHECK_INTERVAL,
            };
            let outcome = py.detach(|| {
                let slot = self.shared.slot.lock().expect("a pending call's lock");
                let (mut slot, _) = self
                    .shared
                    .done
                    .wait_timeout_while(slot, slice, |slot| matches!(slot, Slot::Running { .. }))
                    .expect("a pending call's lock");
                match std::mem::replace(&mut *slot, Slot::Taken) {
                    Slot::Done(outcome) => Some(Some(outcome)),
                    Slot::Taken => Some(None),
                    Slot::Ending => {
                        *slot = Slot::Ending;
                        Some(None)
                    }
                    running => {
                        *slot = running;
                        None
                    }
                }
            });
            match outcome {
                Some(Some(outcome)) => return into_python(py, outcome),
                Some(None) => return Err(NativeError::Cancelled.into_pyerr(py)),
                None => {}
            }
            if let Err(interrupted) = py.check_signals() {
                if cancel_on_interrupt {
                    self.cancel();
                    if let Some((_, ending)) = &self.stop {
                        self.wait_ending(py, *ending)?;
                    }
                }
                return Err(interrupted);
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Err(pyo3::exceptions::PyTimeoutError::new_err(
                    "the call had not ended when the timeout expired",
                ));
            }
        }
    }

    /// Has the outcome queued on `completions` under `id` when the call ends (at once if it
    /// has), for an asyncio loop that watches the queue's descriptor.
    fn notify(&self, completions: &Completions, id: u64) {
        {
            let mut slot = self.shared.slot.lock().expect("a pending call's lock");
            match std::mem::replace(&mut *slot, Slot::Taken) {
                Slot::Done(outcome) => {
                    drop(slot);
                    completions.queue.push(id, outcome);
                }
                Slot::Running { .. } => {
                    *slot = Slot::Running { notify: Some((completions.queue.clone(), id)) };
                }
                Slot::Ending => *slot = Slot::Ending,
                Slot::Taken => {}
            }
        }
        // Told where its outcome goes, a deferred call may begin.
        self.begin();
    }

    /// Stops the call. Its outcome is never given. A stoppable call is asked to stop and
    /// ends on its own (a `run` interrupts its remote command, and kills it after its grace);
    /// any other is dropped where it stands (a start in flight is terminated once it is
    /// known).
    fn cancel(&self) {
        let Some((stop, _)) = &self.stop else { return self.abort() };
        // Never waited for, so never started: nothing to undo.
        if self.start.as_ref().is_some_and(|start| !start.given()) {
            return self.abort();
        }
        let mut slot = self.shared.slot.lock().expect("a pending call's lock");
        match &*slot {
            Slot::Running { .. } => {
                *slot = Slot::Ending;
                drop(slot);
                stop.0.notify_one();
            }
            Slot::Ending => {}
            Slot::Done(_) | Slot::Taken => *slot = Slot::Taken,
        }
    }
}

fn into_python(py: Python<'_>, outcome: Outcome) -> PyResult<Py<PyAny>> {
    match outcome {
        Ok(convert) => convert(py),
        Err(error) => Err(error.into_pyerr(py)),
    }
}

/// Finished calls waiting for an asyncio loop, and the pipe that wakes it.
struct Queue {
    finished: Mutex<VecDeque<(u64, Outcome)>>,
    wake_read: OwnedFd,
    wake_write: OwnedFd,
}

impl Queue {
    fn push(&self, id: u64, outcome: Outcome) {
        let mut finished = self.finished.lock().expect("a completion queue's lock");
        let was_empty = finished.is_empty();
        finished.push_back((id, outcome));
        drop(finished);
        // One byte per batch: the loop drains everything queued each time it wakes, so the
        // pipe never holds more than one and a write never blocks.
        if was_empty {
            let _ = rustix::io::write(&self.wake_write, &[1]);
        }
    }
}

/// Where an asyncio loop collects its finished calls: watch [`Completions::fileno`] for
/// reading, then [`Completions::drain`].
#[pyclass(frozen, module = "tether._native")]
pub struct Completions {
    queue: Arc<Queue>,
}

#[pymethods]
impl Completions {
    #[new]
    fn new() -> PyResult<Self> {
        let flags = rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK;
        let (wake_read, wake_write) = rustix::pipe::pipe_with(flags)
            .map_err(|error| pyo3::exceptions::PyOSError::new_err(error.to_string()))?;
        Ok(Self {
            queue: Arc::new(Queue { finished: Mutex::new(VecDeque::new()), wake_read, wake_write }),
        })
    }

    /// The descriptor that becomes readable when calls have finished.
    fn fileno(&self) -> i32 {
        self.queue.wake_read.as_raw_fd()
    }

    /// Every finished call as `(id, ok, value_or_exception)`.
    fn drain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut wake = [0u8; 64];
        while matches!(rustix::io::read(&self.queue.wake_read, &mut wake), Ok(n) if n > 0) {}
        let finished: Vec<_> =
            self.queue.finished.lock().expect("a completion queue's lock").drain(..).collect();
        let list = PyList::empty(py);
        for (id, outcome) in finished {
            match into_python(py, outcome) {
                Ok(value) => list.append((id, true, value))?,
                Err(error) => list.append((id, false, error.into_value(py)))?,
            }
        }
        Ok(list)
    }
}
