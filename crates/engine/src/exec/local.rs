//! [`LocalExecBackend`]: processes started on this machine, through a [`ProcessTable`] of the
//! backend's own.
//!
//! The table publishes every process's events into one channel, each process's in sequence
//! order (one pump per process numbers and sends them). A router task hands each event to the
//! handle of its process; nothing needs reordering, so a handle's updates are the pump's events
//! as they come.
//!
//! A handle holds at most [`HANDLE_BUFFER_BYTES`] its caller has not taken. Past that it
//! lets live events pass and falls behind; once its caller has read it down to
//! [`RESUME_BELOW_BYTES`], it catches up from the process's retained output (in order, the
//! exit and the close in their places) and follows live events again — or fails, saying so,
//! if the process no longer retains what it missed. The router never waits for a handle, so
//! one unread handle holds up no other process.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tether_protocol::ProcessId;
use tether_protocol::process::{ExecParams, ProcessSignal, ReadResponse, WriteStatus};
use tokio::sync::mpsc;

use super::{
    ExecBackend, ExecError, ExecProcess, HANDLE_BUFFER_BYTES, ProcessFailure, ProcessFailureKind,
    ProcessUpdate, RESUME_BELOW_BYTES, update_cost,
};
use crate::process::{LocalProcess, ProcessError, ProcessEvent};
use crate::process_table::{ProcessTable, ProcessTableConfig};

/// Events queued between the table's pumps and the router. The router never waits (a full
/// handle falls behind instead), so this only absorbs scheduling jitter; a pump that finds it
/// full waits, which slows that process, never memory.
const EVENT_QUEUE: usize = 256;

/// Starts processes in this process's own process table.
///
/// Processes live as long as the backend or any handle to them: when the last of those goes,
/// the table ends and kills every process group it started, as a server does when a session
/// ends.
pub struct LocalExecBackend {
    table: Arc<ProcessTable>,
    routes: Arc<Routes>,
    /// The table's event channel, until the first start spawns the router that drains it:
    /// spawning needs a runtime, and building a backend should not.
    unrouted: Mutex<Option<mpsc::Receiver<ProcessEvent>>>,
}

impl LocalExecBackend {
    pub fn new(config: ProcessTableConfig) -> Self {
        let (events, receiver) = mpsc::channel(EVENT_QUEUE);
        Self {
            table: ProcessTable::new(config, events),
            routes: Arc::new(Routes::default()),
            unrouted: Mutex::new(Some(receiver)),
        }
    }

    fn spawn_router(&self) {
        let receiver = lock(&self.unrouted).take();
        if let Some(mut events) = receiver {
            let routes = self.routes.clone();
            // Ends when every sender is gone: the table's, and each running pump's.
            tokio::spawn(async move {
                while let Some(event) = events.recv().await {
                    routes.deliver(event);
                }
            });
        }
    }
}

impl Default for LocalExecBackend {
    fn default() -> Self {
        Self::new(ProcessTableConfig::default())
    }
}

impl std::fmt::Debug for LocalExecBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalExecBackend").finish_non_exhaustive()
    }
}

#[async_trait]
impl ExecBackend for LocalExecBackend {
    async fn start(&self, params: ExecParams) -> Result<Box<dyn ExecProcess>, ExecError> {
        self.spawn_router();
        let process_id = params.process_id.clone();
        // The route exists before the process does, so its first event finds its handle.
        let Some((token, updates)) = self.routes.open(&process_id) else {
            return Err(ProcessError::AlreadyExists(process_id).into());
        };
        let started = self.table.start(params).and_then(|_| {
            self.table
                .get(&process_id)
                .ok_or_else(|| ProcessError::UnknownProcess(process_id.clone()))
        });
        match started {
            Ok(process) => {
                self.routes.follow(&process_id, token, process.clone());
                Ok(Box::new(LocalExecProcess {
                    process,
                    updates,
                    _table: self.table.clone(),
                    routes: self.routes.clone(),
                    token,
                    next_write_id: AtomicU64::new(1),
                }))
            }
            Err(error) => {
                self.routes.close(&process_id, token);
                Err(error.into())
            }
        }
    }
}

/// The handle to a process of a [`LocalExecBackend`].
pub(crate) struct LocalExecProcess {
    process: Arc<LocalProcess>,
    updates: mpsc::UnboundedReceiver<ProcessUpdate>,
    /// Keeps the table, and so the process, alive while the handle is.
    _table: Arc<ProcessTable>,
    routes: Arc<Routes>,
    /// Which route is this handle's, so dropping it never removes a later one.
    token: u64,
    /// Every write gets a fresh id; the process applies each id once.
    next_write_id: AtomicU64,
}

#[async_trait]
impl ExecProcess for LocalExecProcess {
    fn process_id(&self) -> &ProcessId {
        self.process.id()
    }

    fn buffered_bytes(&self) -> usize {
        self.routes.queued(self.process.id(), self.token)
    }

    async fn next_update(&mut self) -> Option<ProcessUpdate> {
        let update = self.updates.recv().await?;
        self.routes.taken(self.process.id(), self.token, &update);
        Some(update)
    }

    async fn write(&self, bytes: Bytes) -> Result<WriteStatus, ExecError> {
        let write_id = self.next_write_id.fetch_add(1, Ordering::Relaxed).to_string();
        Ok(self.process.write(bytes, &write_id)?)
    }

    async fn signal(&self, signal: ProcessSignal) -> Result<(), ExecError> {
        Ok(self.process.signal(signal)?)
    }

    async fn terminate(&self) -> Result<bool, ExecError> {
        Ok(self.process.terminate())
    }

    async fn resize(&self, cols: u16, rows: u16) -> Result<(), ExecError> {
        Ok(self.process.resize(cols, rows)?)
    }

    async fn close_stdin(&self) -> Result<(), ExecError> {
        Ok(self.process.close_stdin()?)
    }

    async fn read(
        &self,
        after_seq: u64,
        max_bytes: Option<usize>,
        wait_ms: Option<u64>,
    ) -> Result<ReadResponse, ExecError> {
        Ok(self.process.read(after_seq, max_bytes, wait_ms.map(Duration::from_millis)).await)
    }
}

impl Drop for LocalExecProcess {
    fn drop(&mut self) {
        self.routes.close(self.process.id(), self.token);
    }
}

impl std::fmt::Debug for LocalExecProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalExecProcess").field("process", &self.process).finish_non_exhaustive()
    }
}

/// Where each followed process's events go.
#[derive(Default)]
struct Routes {
    next_token: AtomicU64,
    by_process: Mutex<HashMap<ProcessId, Route>>,
}

struct Route {
    token: u64,
    updates: mpsc::UnboundedSender<ProcessUpdate>,
    /// The process, once started: where a handle that fell behind catches up from.
    process: Option<Arc<LocalProcess>>,
    /// What the updates sent and not yet taken cost ([`update_cost`]): the channel is
    /// unbounded, this is its bound.
    queued: usize,
    /// The last sequence sent to the handle.
    sent: u64,
    /// Full: live events pass by, to be read back from the process's retained output.
    behind: bool,
}

/// Most output bytes read back at a time by a handle catching up.
const CATCH_UP_PAGE_BYTES: usize = 1024 * 1024;

impl Routes {
    /// A route for a new handle, or `None` if a handle already follows that id.
    fn open(&self, id: &ProcessId) -> Option<(u64, mpsc::UnboundedReceiver<ProcessUpdate>)> {
        let mut routes = lock(&self.by_process);
        if routes.contains_key(id) {
            return None;
        }
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let (updates, receiver) = mpsc::unbounded_channel();
        let route = Route { token, updates, process: None, queued: 0, sent: 0, behind: false };
        routes.insert(id.clone(), route);
        Some((token, receiver))
    }

    /// What the route's handle holds for its caller.
    fn queued(&self, id: &ProcessId, token: u64) -> usize {
        lock(&self.by_process).get(id).filter(|r| r.token == token).map_or(0, |r| r.queued)
    }

    /// The route's process started: a catch-up can read from it now.
    fn follow(&self, id: &ProcessId, token: u64, process: Arc<LocalProcess>) {
        if let Some(route) = lock(&self.by_process).get_mut(id).filter(|r| r.token == token) {
            route.process = Some(process);
        }
    }

    /// The handle took `update`. A handle that fell behind and now has room catches up here,
    /// under the routes lock, so no live event can slip between what it reads back and what
    /// the router sends next (the pump retains an event before it sends it, so anything the
    /// read-back missed is still on its way, and anything it found is a duplicate then).
    fn taken(&self, id: &ProcessId, token: u64, update: &ProcessUpdate) {
        let mut routes = lock(&self.by_process);
        let Some(route) = routes.get_mut(id).filter(|r| r.token == token) else { return };
        route.queued = route.queued.saturating_sub(update_cost(update));
        if !route.behind || route.queued > RESUME_BELOW_BYTES {
            return;
        }
        let Some(process) = route.process.clone() else { return };
        while route.queued <= RESUME_BELOW_BYTES {
            let events = match process.events_after(route.sent, CATCH_UP_PAGE_BYTES) {
                Ok(events) => events,
                Err(lost) => {
                    let message = format!(
                        "process {id} fell behind its reader and cannot be caught up: {lost}; read its output sooner, or retain more (`ProcessTableConfig::retained_output_bytes`)"
                    );
                    let failure = ProcessFailure::new(ProcessFailureKind::FellBehind, message);
                    let _ = route.updates.send(ProcessUpdate::Failed(failure));
                    routes.remove(id);
                    return;
                }
            };
            if events.is_empty() {
                route.behind = false;
                return;
            }
            for event in events {
                if !send(route, event) {
                    routes.remove(id);
                    return;
                }
            }
        }
    }

    fn close(&self, id: &ProcessId, token: u64) {
        let mut routes = lock(&self.by_process);
        if routes.get(id).is_some_and(|route| route.token == token) {
            routes.remove(id);
        }
    }

    /// Hands an event to its process's handle. The close is the last event: the route goes
    /// with it, which ends the handle's stream. Events of a process nobody follows are dropped
    /// (its output stays retained for reads).
    ///
    /// A full handle lets the event pass and falls behind (see [`Routes::taken`]); an event a
    /// catch-up already sent is a duplicate, dropped.
    fn deliver(&self, event: ProcessEvent) {
        let mut routes = lock(&self.by_process);
        let id = event.process_id().clone();
        let Some(route) = routes.get_mut(&id) else { return };
        if route.behind || event.seq() <= route.sent {
            return;
        }
        let bytes = match &event {
            ProcessEvent::Output { chunk, .. } => chunk.len(),
            _ => 0,
        };
        if route.queued + bytes > HANDLE_BUFFER_BYTES && route.process.is_some() {
            route.behind = true;
            return;
        }
        if !send(route, event) {
            routes.remove(&id);
        }
    }
}

/// Sends `event` to the route's handle; false when the route is done (the handle is gone, or
/// this was the close).
fn send(route: &mut Route, event: ProcessEvent) -> bool {
    let seq = event.seq();
    let last = matches!(event, ProcessEvent::Closed { .. });
    let update = ProcessUpdate::Event(event);
    let cost = update_cost(&update);
    if route.updates.send(update).is_err() {
        return false;
    }
    route.queued += cost;
    route.sent = seq;
    !last
}

/// Every critical section here is a map update that cannot panic halfway, so a poisoned lock
/// still guards consistent data.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
