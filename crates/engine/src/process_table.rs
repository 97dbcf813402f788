//! The processes of one session, keyed by the client's process ids.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tether_protocol::process::{
    ConnectParams, ConnectResponse, ExecParams, ExecResponse, ProcessSignal, ReadParams,
    ReadResponse, SandboxType, WriteStatus,
};
use tether_protocol::{ByteChunk, ProcessId};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span};

use crate::env_policy::child_env;
use crate::network::bridge::{self, PreparedBridge};
use crate::network::forward::ProxyRoute;
use crate::network::proxy::upstream::{UpstreamRouting, tcp};
use crate::network::proxy::{NetworkEvents, PreparedProxy, ProxyConfig};
use crate::process::{
    self, DEFAULT_RETAINED_OUTPUT_BYTES, LocalProcess, OutputBudget, ProcessError, ProcessEvent,
    SpawnRequest, SpillConfig,
};
use crate::sandbox::launch::{self, LaunchError, Start};
use crate::sandbox::policy::PolicyError;
use crate::sandbox::{Launch, Sandboxing};

/// Limits that shape a table's processes.
#[derive(Debug, Clone)]
pub struct ProcessTableConfig {
    /// Output retained per process for `process/read` replays.
    pub retained_output_bytes: usize,
    /// Output retained in memory by every process of every table that shares it (a server's
    /// tables share one); past its limit, the largest holders shed their oldest output.
    pub output_budget: Arc<OutputBudget>,
    /// How long a closed process stays readable (and its id taken). `None`: for as long as the
    /// session lives, as the reference keeps them.
    pub closed_process_retention: Option<Duration>,
    /// Processes not yet closed at once; a start past it is refused. One client must not be
    /// able to exhaust the machine's process table for everyone.
    pub max_processes: usize,
    /// Output bytes that closed processes may go on retaining, together. Past it, the
    /// processes that closed first are forgotten (a read of one then says it is unknown), so a
    /// long session that runs thousands of commands does not keep all their output forever.
    pub closed_output_budget: usize,
    /// Where output memory lets go of is kept on disk instead of dropped; `None`: dropped.
    /// Closed processes together keep one process's allowance; the oldest closed give their
    /// spilled output up first.
    pub spill: Option<Arc<SpillConfig>>,
    /// `--linux-sandbox-transparent-tcp`: every sandboxed start behind a managed proxy gets
    /// transparent TCP, whether its launch asks for it or not (as the reference's flag does).
    pub transparent_tcp: bool,
    /// `--tcp-upstream-proxy` and `--proxy-private-ips-via-upstream`: how every managed proxy
    /// of the table reaches past the executor, whatever a launch asks.
    pub upstream_routing: UpstreamRouting,
}

/// Default for [`ProcessTableConfig::closed_output_budget`]: the last several commands' worth
/// of output, per session.
pub const DEFAULT_CLOSED_OUTPUT_BUDGET: usize = 64 * 1024 * 1024;

/// Default for [`ProcessTableConfig::max_processes`]: far above what an agent runs at once,
/// far below what the kernel allows.
pub const DEFAULT_MAX_PROCESSES: usize = 4096;

impl Default for ProcessTableConfig {
    fn default() -> Self {
        Self {
            retained_output_bytes: DEFAULT_RETAINED_OUTPUT_BYTES,
            output_budget: Arc::new(OutputBudget::default()),
            closed_process_retention: None,
            max_processes: DEFAULT_MAX_PROCESSES,
            closed_output_budget: DEFAULT_CLOSED_OUTPUT_BUDGET,
            spill: None,
            transparent_tcp: false,
            upstream_routing: UpstreamRouting::default(),
        }
    }
}

/// One session's processes. Every process publishes its events into the one channel the table
/// was made with, in each process's sequence order.
pub struct ProcessTable {
    config: ProcessTableConfig,
    processes: Mutex<HashMap<ProcessId, Arc<LocalProcess>>>,
    /// Closed processes, oldest first, with the output each retains (fixed once closed).
    closed: Mutex<ClosedProcesses>,
    /// Processes started and not yet closed: what `max_processes` limits.
    unfinished: AtomicUsize,
    events: mpsc::Sender<ProcessEvent>,
    /// Where the managed proxies of the table's processes report and ask.
    network: NetworkEvents,
    /// The executor's environment, read once: `envPolicy` filters it for every start.
    parent_env: Vec<(String, String)>,
}

impl ProcessTable {
    pub fn new(config: ProcessTableConfig, events: mpsc::Sender<ProcessEvent>) -> Arc<Self> {
        Self::with_network(config, events, None)
    }

    /// A table whose processes' managed proxies report their decisions to `network`, and ask
    /// it what their policy leaves open.
    pub fn with_network(
        config: ProcessTableConfig,
        events: mpsc::Sender<ProcessEvent>,
        network: NetworkEvents,
    ) -> Arc<Self> {
        let parent_env = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Arc::new(Self {
            config,
            processes: Mutex::new(HashMap::new()),
            closed: Mutex::new(ClosedProcesses::default()),
            unfinished: AtomicUsize::new(0),
            events,
            network,
            parent_env,
        })
    }

    fn processes(&self) -> MutexGuard<'_, HashMap<ProcessId, Arc<LocalProcess>>> {
        self.processes.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Processes started and not yet closed, as `max_processes` counts them: a process
    /// leaves this count once its close is recorded (after its `Closed` event went out).
    pub fn unfinished(&self) -> usize {
        self.unfinished.load(Ordering::Acquire)
    }

    pub fn get(&self, id: &ProcessId) -> Option<Arc<LocalProcess>> {
        self.processes().get(id).cloned()
    }

    /// The process, for a request that must name one the table holds.
    fn require(&self, id: &ProcessId) -> Result<Arc<LocalProcess>, ProcessError> {
        self.get(id).ok_or_else(|| ProcessError::UnknownProcess(id.clone()))
    }

    /// What `process/list` says: every process, by id.
    pub fn summaries(&self) -> Vec<tether_protocol::process::ProcessSummary> {
        let mut summaries: Vec<_> = self.list().iter().map(|p| p.summary()).collect();
        summaries.sort_by(|a, b| a.process_id.as_str().cmp(b.process_id.as_str()));
        summaries
    }

    /// Every process of the table, in no particular order.
    pub fn list(&self) -> Vec<Arc<LocalProcess>> {
        self.processes().values().cloned().collect()
    }

    /// Starts a process. Ids are unique within the table for as long as the entry exists, a
    /// closed process included.
    pub fn start(self: &Arc<Self>, params: ExecParams) -> Result<ExecResponse, ProcessError> {
        if self.config.upstream_routing.tcp.is_some() && held_without_own_proxy(&params) {
            return Err(ProcessError::InvalidParams(tcp::NEEDS_EXECUTOR_LOCAL_PROXY.to_owned()));
        }
        let proxy = match network_config(&params, &self.parent_env, &self.config)? {
            Some(config) => Some(PreparedProxy::new(config).map_err(ProcessError::Spawn)?),
            None => None,
        };
        let bridge = match managed_without_proxy(&params) {
            true => {
                let env = child_env(
                    &params.env,
                    params.env_policy.as_ref(),
                    self.parent_env.iter().cloned(),
                );
                match bridge::plan(&env, params.managed_network.as_ref()) {
                    Ok(plan) => Ok(Some(
                        PreparedBridge::new(plan, &params.process_id)
                            .map_err(ProcessError::Spawn)?,
                    )),
                    Err(refusal) => Err(refusal),
                }
            }
            false => Ok(None),
        };
        let way_out = match (&proxy, &bridge) {
            (Some(proxy), _) => WayOut::Through(&proxy.route),
            (None, Ok(Some(bridge))) => WayOut::Through(&bridge.route),
            (None, Err(refusal)) => WayOut::Refused(refusal.to_string()),
            (None, Ok(None)) => WayOut::Own,
        };
        let mut request = validate(&params, &self.parent_env, way_out)?;
        let forwarded = matches!(&request.launch, Launch::Wrapped(w) if w.proxied);
        let running_proxy = match (proxy, bridge) {
            (Some(proxy), _) => {
                let started = proxy.start(forwarded, &mut request.env, self.network.clone());
                Some(started.map_err(ProcessError::Spawn)?)
            }
            (None, Ok(Some(bridge))) => bridge
                .start(forwarded, &mut request.env, &params.process_id)
                .map_err(ProcessError::Spawn)?,
            (None, _) => None,
        };
        // Spawning happens under the table lock: a fork/exec takes a millisecond, and holding
        // the lock makes "one id, one process" trivially true under concurrent starts.
        let mut processes = self.processes();
        self.admit(&processes, &params.process_id)?;
        let mut spawned = process::spawn(request).map_err(ProcessError::Spawn)?;
        spawned.proxy = running_proxy;
        let sandboxed = params.sandbox.is_some();
        let inner_info = spawned.sandbox.as_mut().and_then(|hold| hold.info.take());
        let stdin = spawned.stdin.take().map(process::start_stdin_writer);
        let budget = &self.config.output_budget;
        let local = process::new_process(
            process::NewProcess {
                id: params.process_id.clone(),
                runner: process::Runner::child(spawned.pid),
                output: process::RetainedOutput::new(
                    self.config.retained_output_bytes,
                    budget.clone(),
                    self.config.spill.clone(),
                ),
                stdin,
                terminal: spawned.terminal.take(),
                argv: params.argv.clone(),
                tty: params.tty,
                sandboxed,
            },
            budget,
        );
        processes.insert(params.process_id.clone(), local.clone());
        self.unfinished.fetch_add(1, Ordering::Relaxed);
        drop(processes);

        let pid = local.pid().unwrap_or_default();
        debug!(process_id = %params.process_id, pid, tty = params.tty, "process started");
        let span = info_span!("process", process_id = %params.process_id, pid);
        let tty = params.tty;
        if let Some(info) = inner_info {
            tokio::spawn(process::learn_inner_pid(local.clone(), info));
        }
        let events = self.events.clone();
        let pump = process::run_pump(local.clone(), spawned, tty, events);
        self.follow(local, pump, span);
        // Any intent at all is answered as the reference answers it, `disabled` included.
        let sandbox_type = if sandboxed { SandboxType::LinuxSeccomp } else { SandboxType::None };
        Ok(ExecResponse { process_id: params.process_id, sandbox_type: Some(sandbox_type) })
    }

    /// Refuses a new process whose id is taken, or past `max_processes`. Called under the
    /// table lock, so concurrent starts cannot overshoot.
    fn admit(
        &self,
        processes: &HashMap<ProcessId, Arc<LocalProcess>>,
        id: &ProcessId,
    ) -> Result<(), ProcessError> {
        if processes.contains_key(id) {
            return Err(ProcessError::AlreadyExists(id.clone()));
        }
        if self.unfinished.load(Ordering::Relaxed) >= self.config.max_processes {
            return Err(ProcessError::TooManyProcesses(self.config.max_processes));
        }
        Ok(())
    }

    /// Runs a new process's pump, then records its close and, after the retention, forgets
    /// it.
    fn follow(
        self: &Arc<Self>,
        local: Arc<LocalProcess>,
        pump: impl Future<Output = ()> + Send + 'static,
        span: tracing::Span,
    ) {
        let table = Arc::downgrade(self);
        let retention = self.config.closed_process_retention;
        tokio::spawn(
            async move {
                pump.await;
                if let Some(table) = table.upgrade() {
                    table.closed(&local);
                }
                if let Some(retention) = retention {
                    tokio::time::sleep(retention).await;
                    if let Some(table) = table.upgrade() {
                        table.evict_if_same(&local);
                    }
                }
            }
            .instrument(span),
        );
    }

    /// Opens a forwarded connection (`process/connect`): a TCP connection to the executor's
    /// loopback, served as a process ([`process::connect`]). The id and the limit are checked
    /// before connecting and again once connected, under the table lock; a connection that
    /// lost the race is closed unused.
    pub async fn connect(
        self: &Arc<Self>,
        params: ConnectParams,
    ) -> Result<ConnectResponse, ProcessError> {
        let destination = process::destination(params.host.as_deref(), params.port)?;
        self.admit(&self.processes(), &params.process_id)?;
        let stream = process::connect(destination).await?;
        let mut processes = self.processes();
        self.admit(&processes, &params.process_id)?;
        let (reader, writer) = stream.into_split();
        let stop = CancellationToken::new();
        let budget = &self.config.output_budget;
        let local = process::new_process(
            process::NewProcess {
                id: params.process_id.clone(),
                runner: process::Runner::Connection { destination, stop: stop.clone() },
                output: process::RetainedOutput::new(
                    self.config.retained_output_bytes,
                    budget.clone(),
                    self.config.spill.clone(),
                ),
                stdin: Some(process::start_stdin_writer_until(writer, stop.clone())),
                terminal: None,
                argv: Vec::new(),
                tty: false,
                sandboxed: false,
            },
            budget,
        );
        processes.insert(params.process_id.clone(), local.clone());
        self.unfinished.fetch_add(1, Ordering::Relaxed);
        drop(processes);

        debug!(process_id = %params.process_id, %destination, "connection forwarded");
        let span = info_span!("connection", process_id = %params.process_id, %destination);
        let pump = process::run_connection_pump(local.clone(), reader, stop, self.events.clone());
        self.follow(local, pump, span);
        Ok(ConnectResponse { process_id: params.process_id })
    }

    /// Spawns what `params` describes (validated, environment built, sandbox applied) without
    /// listing it: for work the server does on a command's behalf, such as capturing its
    /// shell's state, which the caller reads and reaps itself.
    pub(crate) fn spawn_unlisted(
        &self,
        params: &ExecParams,
    ) -> Result<process::Spawned, ProcessError> {
        let way_out = match managed_without_proxy(params) {
            // The bridge to the caller's proxy is made for the command itself only.
            true => WayOut::Refused("a bridge is made for the command, not for this".into()),
            false => WayOut::Own,
        };
        let request = validate(params, &self.parent_env, way_out)?;
        process::spawn(request).map_err(ProcessError::Spawn)
    }

    fn evict_if_same(&self, local: &Arc<LocalProcess>) {
        let mut processes = self.processes();
        if processes.get(local.id()).is_some_and(|current| Arc::ptr_eq(current, local)) {
            processes.remove(local.id());
        }
        drop(processes);
        self.closed_lock().remove(local);
    }

    fn closed_lock(&self) -> MutexGuard<'_, ClosedProcesses> {
        self.closed.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a process's close, then forgets the oldest closed processes while their output
    /// together is over the budget (the newest is kept whatever its size). Spilled output has
    /// its own allowance: the oldest closed processes give theirs up first.
    fn closed(&self, local: &Arc<LocalProcess>) {
        local.release_terminal();
        self.unfinished.fetch_sub(1, Ordering::Relaxed);
        let mut closed = self.closed_lock();
        closed.push(local.clone());
        if let Some(spill) = &self.config.spill {
            closed.discard_spills_beyond(spill.bytes_per_process);
        }
        while closed.bytes > self.config.closed_output_budget && closed.queue.len() > 1 {
            let Some(oldest) = closed.pop() else { break };
            let mut processes = self.processes();
            if processes.get(oldest.id()).is_some_and(|current| Arc::ptr_eq(current, &oldest)) {
                processes.remove(oldest.id());
                debug!(process_id = %oldest.id(), "closed process forgotten: the session's closed-output budget is spent");
            }
        }
    }

    pub async fn read(&self, params: ReadParams) -> Result<ReadResponse, ProcessError> {
        let process = self.require(&params.process_id)?;
        let wait = params.wait_ms.map(Duration::from_millis);
        Ok(process.read(params.after_seq.unwrap_or(0), params.max_bytes, wait).await)
    }

    pub fn write(
        &self,
        process_id: &ProcessId,
        chunk: ByteChunk,
        write_id: &str,
    ) -> Result<WriteStatus, ProcessError> {
        match self.get(process_id) {
            Some(process) => process.write(chunk.into_bytes(), write_id),
            None => Ok(WriteStatus::UnknownProcess),
        }
    }

    /// Signals a running process's group; unknown or finished processes are left alone.
    pub fn signal(
        &self,
        process_id: &ProcessId,
        signal: ProcessSignal,
    ) -> Result<(), ProcessError> {
        match self.get(process_id) {
            Some(process) => process.signal(signal),
            None => Ok(()),
        }
    }

    /// Sets a `tty` process's terminal size.
    pub fn resize(&self, process_id: &ProcessId, cols: u16, rows: u16) -> Result<(), ProcessError> {
        self.require(process_id)?.resize(cols, rows)
    }

    /// Ends a pipe process's input after what was written.
    pub fn close_stdin(&self, process_id: &ProcessId) -> Result<(), ProcessError> {
        self.require(process_id)?.close_stdin()
    }

    pub fn terminate(&self, process_id: &ProcessId) -> bool {
        self.get(process_id).is_some_and(|p| p.terminate())
    }

    /// Kills every process group of the table — what closed processes left behind too — and
    /// forgets them: the session is over.
    pub fn shutdown(&self) {
        let processes: Vec<_> = self.processes().drain().map(|(_, p)| p).collect();
        for process in processes {
            match process.is_closed() {
                false => process.kill_group(),
                true => process.kill_leftovers(),
            }
        }
    }
}

impl Drop for ProcessTable {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The managed proxy a start asks for, checked; `None` for a start without one. A start with
/// `managedNetwork` too is served by the proxy it asks for (the reference accepts both). The
/// server's `--linux-sandbox-transparent-tcp` makes every sandboxed launch transparent (one
/// without SOCKS5 then fails in its sandbox, as the reference's does); its upstream routing
/// holds every launch.
fn network_config(
    params: &ExecParams,
    executor_env: &[(String, String)],
    table: &ProcessTableConfig,
) -> Result<Option<ProxyConfig>, ProcessError> {
    let Some(launch) = &params.network_proxy else { return Ok(None) };
    let sandboxed = params.sandbox.is_some();
    if let Some(refusal) = launch.refusal(sandboxed) {
        return Err(ProcessError::InvalidParams(refusal.to_owned()));
    }
    let process_id = params.process_id.clone();
    let mut config = ProxyConfig::new(process_id, launch, executor_env, &table.upstream_routing)
        .map_err(ProcessError::InvalidParams)?;
    config.transparent_tcp |= table.transparent_tcp && sandboxed;
    Ok(Some(config))
}

/// A start held to a managed network (`enforceManagedNetwork`, or the facts of one,
/// `managedNetwork`) with no proxy of the executor's own (`networkProxy`): under a mandatory
/// TCP upstream the reference refuses it before anything else, sandboxed or not, since only
/// a proxy the executor runs can be held to that upstream.
fn held_without_own_proxy(params: &ExecParams) -> bool {
    params.network_proxy.is_none()
        && (params.enforce_managed_network || params.managed_network.is_some())
}

/// A sandboxed start held to a managed network it does not launch (`enforceManagedNetwork`
/// without `networkProxy`): bridged to the proxy the caller runs, named by the caller's proxy
/// variables ([`bridge`]). `managedNetwork` without `enforceManagedNetwork` changes nothing,
/// and unsandboxed both are ignored, as the reference ignores them.
fn managed_without_proxy(params: &ExecParams) -> bool {
    params.sandbox.is_some() && params.network_proxy.is_none() && params.enforce_managed_network
}

/// A full sandbox's way out, when it is not its own network.
enum WayOut<'a> {
    /// The sandbox's network, as its intent says.
    Own,
    /// Only through the forwarders to this route (a managed proxy, or the bridge).
    Through(&'a ProxyRoute),
    /// None can be made: the command runs nothing, saying why.
    Refused(String),
}

/// Checks a start request and puts it in native terms, before anything is spawned. A full
/// sandbox with `proxy` reaches the network only through it.
fn validate<'a>(
    params: &'a ExecParams,
    parent_env: &[(String, String)],
    way_out: WayOut<'_>,
) -> Result<SpawnRequest<'a>, ProcessError> {
    if params.argv.is_empty() {
        return Err(ProcessError::InvalidParams("argv must not be empty".into()));
    }
    let cwd = params.cwd.to_path().map_err(|e| {
        ProcessError::InvalidParams(format!(
            "cwd URI `{}` is not valid on this exec-server host: {e}",
            params.cwd
        ))
    })?;
    if params.shell_snapshot.is_some() {
        // `ShellSnapshots::prepare` turns the request into plain arguments first.
        return Err(ProcessError::InvalidParams(
            "`shellSnapshot` must be prepared (`ShellSnapshots::prepare`) before the start".into(),
        ));
    }
    let env = child_env(&params.env, params.env_policy.as_ref(), parent_env.iter().cloned());
    let launch = match &params.sandbox {
        None => Launch::Direct,
        Some(_) if let WayOut::Refused(why) = &way_out => launch::refused(&format!(
            "tether sandbox: failed to prepare host proxy routing bridge: {why}"
        )),
        Some(intent) => {
            let proxy = match way_out {
                WayOut::Through(route) => Some(route),
                WayOut::Own | WayOut::Refused(_) => None,
            };
            let program = process::program_for(&params.argv[0], &env);
            let start = Start {
                intent,
                cwd: &cwd,
                env: &env,
                program: &program,
                args: &params.argv[1..],
                arg0: params.arg0.as_deref().unwrap_or(&params.argv[0]),
                proxy,
            };
            launch::prepare(start, Sandboxing::current()).map_err(|error| match error {
                LaunchError::Policy(error @ PolicyError::InvalidPath(_)) => {
                    ProcessError::InvalidParams(format!(
                        "failed to prepare process sandbox: {error}"
                    ))
                }
                LaunchError::Policy(error @ PolicyError::MxcUnavailable) => {
                    ProcessError::InvalidParams(error.to_string())
                }
                LaunchError::Unavailable(reason) => ProcessError::SandboxUnavailable(reason),
            })?
        }
    };
    Ok(SpawnRequest {
        argv: &params.argv,
        arg0: params.arg0.as_deref(),
        cwd,
        env,
        launch,
        sandboxed: params.sandbox.is_some(),
        tty: params.tty,
        pipe_stdin: params.pipe_stdin,
        pty_size: match params.pty_size {
            None => (process::PTY_COLS, process::PTY_ROWS),
            Some(size) if size.cols > 0 && size.rows > 0 => (size.cols, size.rows),
            Some(size) => {
                return Err(ProcessError::InvalidParams(format!(
                    "ptySize must be at least 1×1, got {}×{}",
                    size.cols, size.rows
                )));
            }
        },
    })
}

/// Closed processes in the order they closed, and the output they retain together (in
/// memory, and spilled to disk).
#[derive(Default)]
struct ClosedProcesses {
    queue: std::collections::VecDeque<ClosedProcess>,
    bytes: usize,
    spilled: u64,
}

/// A closed process, with what it was counted for (its output no longer changes).
struct ClosedProcess {
    process: Arc<LocalProcess>,
    bytes: usize,
    spilled: u64,
}

impl ClosedProcesses {
    fn push(&mut self, process: Arc<LocalProcess>) {
        let (bytes, spilled) = (process.retained_bytes(), process.spilled_bytes());
        self.bytes += bytes;
        self.spilled += spilled;
        self.queue.push_back(ClosedProcess { process, bytes, spilled });
    }

    /// Has the oldest closed processes give up their spilled output while the closed
    /// processes' spills together are over `allowance`; the newest keeps its own.
    fn discard_spills_beyond(&mut self, allowance: u64) {
        let newest = self.queue.len().saturating_sub(1);
        for closed in self.queue.iter_mut().take(newest) {
            if self.spilled <= allowance {
                break;
            }
            if closed.spilled > 0 {
                closed.process.discard_spill();
                self.spilled -= closed.spilled;
                debug!(process_id = %closed.process.id(), spilled = closed.spilled, "closed process's spilled output dropped: the session's spill allowance for closed processes is spent");
                closed.spilled = 0;
            }
        }
    }

    fn pop(&mut self) -> Option<Arc<LocalProcess>> {
        let closed = self.queue.pop_front()?;
        self.forget(&closed);
        Some(closed.process)
    }

    fn remove(&mut self, process: &Arc<LocalProcess>) {
        if let Some(at) = self.queue.iter().position(|c| Arc::ptr_eq(&c.process, process)) {
            let closed = self.queue.remove(at).expect("the position is in range");
            self.forget(&closed);
        }
    }

    fn forget(&mut self, closed: &ClosedProcess) {
        self.bytes -= closed.bytes;
        self.spilled -= closed.spilled;
    }
}
