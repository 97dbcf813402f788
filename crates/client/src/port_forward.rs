//! [`PortForward`]: a local listener whose every accepted connection reaches a port on the
//! executor's loopback, as `kubectl port-forward` and `ssh -L` do.
//!
//! Each accepted connection is one forwarded connection on the executor
//! ([`ExecServerClient::connect_port`]), a process like any other: what the peer there sends
//! arrives as its output, in order and across network drops (the session's recovery resumes
//! it and catches it up), and what the local peer sends is written to its stdin, each write
//! applied once however often a drop makes it resent. Ends of sending travel both ways: the
//! local peer's end closes the process's stdin (a half-close there), the remote peer's end
//! (its exit) shuts down the local socket's sending side.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tether_engine::{ProcessEvent, ProcessUpdate};
use tether_protocol::ProcessId;
use tether_protocol::process::{ConnectParams, WriteStatus};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::client::{ConnectionStatus, ExecServerClient};
use crate::error::ClientError;
use crate::process::{ProcessControl, RemoteProcess};

/// The most connections one [`PortForward`] carries at once; past it, new connections wait in
/// the listener's backlog until one ends (the kernel's own backpressure). A browser opens six
/// per host, a dev server's live reload one more; 32 is far above that. The bound is on
/// memory: the client holds up to [`crate::HANDLE_MEMORY_BYTES`] for each connection its local
/// peer has not read yet, so 32 hold at most 160 MiB even when every local peer stops reading.
pub const MAX_FORWARDED_CONNECTIONS: usize = 32;

/// How long a stopping forward waits for each connection's close on the executor. A
/// terminated connection closes within a round trip; a session in the middle of a recovery
/// may not answer that soon, and then the server ends what is left with the session.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Largest read taken from a local peer at once: one `process/write`.
const UPSTREAM_READ_BYTES: usize = 64 * 1024;

/// What a forward has to say about one connection that did not go as its peer meant; the
/// forward itself goes on.
#[derive(Debug)]
pub enum ForwardNote {
    /// The executor could not open the connection (nothing listens there, say); the local
    /// connection was closed. `error.spawn_failure()` tells the kind.
    NotOpened { peer: SocketAddr, error: ClientError },
    /// A forwarded connection could not be carried to its end (its output could not be
    /// resumed, a write failed); the local connection was closed.
    Lost { peer: SocketAddr, reason: String },
}

impl std::fmt::Display for ForwardNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForwardNote::NotOpened { peer, error } => {
                write!(f, "connection from {peer} closed: {error}")
            }
            ForwardNote::Lost { peer, reason } => {
                write!(f, "connection from {peer} closed: {reason}")
            }
        }
    }
}

/// Where a forward's notes go; called from the connections' tasks.
type Notes = Arc<dyn Fn(ForwardNote) + Send + Sync>;

/// A listener whose connections are forwarded to a port on the executor's loopback.
pub struct PortForward {
    client: ExecServerClient,
    listener: TcpListener,
    /// `None`: 127.0.0.1.
    host: Option<String>,
    port: u16,
}

impl PortForward {
    /// Forwards what `listener` accepts to `127.0.0.1:remote_port` on the executor.
    pub fn new(client: ExecServerClient, listener: TcpListener, remote_port: u16) -> Self {
        Self { client, listener, host: None, port: remote_port }
    }

    /// To `host` on the executor instead (`127.0.0.1` or `::1`; the server refuses others).
    pub fn to_host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts and forwards connections until `shutdown` completes, then terminates the
    /// forwarded connections, waits for their close (at most [`STOP_GRACE`]) and returns.
    /// Fails only when the session is lost; a connection that fails is closed and told to
    /// `notes`.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()>,
        notes: impl Fn(ForwardNote) + Send + Sync + 'static,
    ) -> Result<(), ClientError> {
        let notes: Notes = Arc::new(notes);
        let permits = Arc::new(Semaphore::new(MAX_FORWARDED_CONNECTIONS));
        let (stop, stopping) = watch::channel(false);
        let mut connections = JoinSet::new();
        let mut status = self.client.status_changes();
        let mut opened = 0u64;
        tokio::pin!(shutdown);
        let result = loop {
            let accepted = tokio::select! {
                () = &mut shutdown => break Ok(()),
                Some(ConnectionStatus::Failed(lost)) = status.next() => {
                    break Err(ClientError::Failed(lost));
                }
                Some(_) = connections.join_next() => continue,
                accepted = async {
                    // Taken first: past the bound, connections wait in the listen backlog.
                    let permit = permits.clone().acquire_owned().await.expect("never closed");
                    (self.listener.accept().await, permit)
                } => accepted,
            };
            let ((local, peer), permit) = match accepted {
                (Ok(connection), permit) => (connection, permit),
                // One connection's failure (aborted before it was accepted, say).
                (Err(_), _) => continue,
            };
            opened += 1;
            let params = ConnectParams {
                process_id: ProcessId::from(format!("port-forward-{}-{opened}", self.port)),
                port: self.port,
                host: self.host.clone(),
            };
            let (client, notes, stopping) = (self.client.clone(), notes.clone(), stopping.clone());
            connections.spawn(async move {
                carry(client, local, peer, params, stopping, notes).await;
                drop(permit);
            });
        };
        drop(self.listener);
        let _ = stop.send(true);
        while connections.join_next().await.is_some() {}
        result
    }
}

/// One local connection, to its end: opened on the executor, carried both ways, closed.
async fn carry(
    client: ExecServerClient,
    local: TcpStream,
    peer: SocketAddr,
    params: ConnectParams,
    mut stopping: watch::Receiver<bool>,
    notes: Notes,
) {
    let _ = local.set_nodelay(true);
    let mut process = tokio::select! {
        opened = client.connect_port(params) => match opened {
            Ok(process) => process,
            Err(error) => return notes(ForwardNote::NotOpened { peer, error }),
        },
        // A connect given up may have been made: the client terminates it.
        () = stop_asked(&mut stopping) => return,
    };
    let control = process.control();
    let (from_local, mut to_local) = local.into_split();
    let upstream = send_upstream(control.clone(), from_local);
    tokio::pin!(upstream);
    let mut upstream_done = false;
    let mut stopped = false;
    // Until the connection has closed on the executor.
    let lost = loop {
        tokio::select! {
            sent = &mut upstream, if !upstream_done => {
                upstream_done = true;
                if let Err(reason) = sent {
                    let _ = control.terminate().await;
                    break Some(reason);
                }
            }
            () = stop_asked(&mut stopping), if !stopped => {
                stopped = true;
                terminate_soon(&control);
            }
            update = next_update(&mut process, stopped) => match update {
                Some(ProcessUpdate::Event(ProcessEvent::Output { chunk, .. })) => {
                    // The local peer went away: the connection ends there too.
                    if to_local.write_all(&chunk).await.is_err() && !stopped {
                        stopped = true;
                        terminate_soon(&control);
                    }
                }
                // The remote peer has finished sending: so has this side.
                Some(ProcessUpdate::Event(ProcessEvent::Exited { .. })) => {
                    let _ = to_local.shutdown().await;
                }
                Some(ProcessUpdate::Event(ProcessEvent::Closed { .. })) => break None,
                Some(ProcessUpdate::Failed(failure)) => {
                    terminate_soon(&control);
                    break Some(failure.message);
                }
                // Stopping, and the close did not come within the grace.
                None => break None,
            },
        }
    };
    if let Some(reason) = lost {
        return notes(ForwardNote::Lost { peer, reason });
    }
    // The remote peer is done; the local one may still be sending (a half-close), until it
    // ends too or the forward stops.
    if !upstream_done && !stopped {
        tokio::select! {
            sent = &mut upstream => {
                if let Err(reason) = sent {
                    notes(ForwardNote::Lost { peer, reason });
                }
                return;
            }
            () = stop_asked(&mut stopping) => {}
        }
    }
    if !upstream_done {
        // Closed there already; this lets go of its sending side. Awaited: nothing else is
        // left to read, and the forward may be about to end.
        let _ = control.terminate().await;
    }
}

/// Completes once the forward is stopping (or gone).
async fn stop_asked(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stop| *stop).await.is_ok();
}

/// The next update; once stopping, `None` if none comes within [`STOP_GRACE`].
async fn next_update(process: &mut RemoteProcess, stopping: bool) -> Option<ProcessUpdate> {
    match stopping {
        false => process.next_update().await,
        true => tokio::time::timeout(STOP_GRACE, process.next_update()).await.ok().flatten(),
    }
}

/// Terminates the forwarded connection from a task of its own, so that its answer never
/// waits behind updates this task has yet to read.
fn terminate_soon(control: &ProcessControl) {
    let control = control.clone();
    tokio::spawn(async move {
        let _ = control.terminate().await;
    });
}

/// What the local peer sends, written to the process until the peer's end of sending (then
/// its stdin closed: a half-close on the executor) or until the connection there is gone.
/// `Err` with why the bytes could not be carried.
async fn send_upstream(
    control: ProcessControl,
    mut from_local: OwnedReadHalf,
) -> Result<(), String> {
    let mut buffer = vec![0u8; UPSTREAM_READ_BYTES];
    loop {
        let n = match from_local.read(&mut buffer).await {
            Ok(0) => {
                return control.close_stdin().await.map_err(|error| error.to_string());
            }
            Ok(n) => n,
            // Reset by the local peer: the connection ends there too.
            Err(_) => {
                let _ = control.terminate().await;
                return Ok(());
            }
        };
        match control.write(buffer[..n].to_vec()).await {
            Ok(WriteStatus::Accepted) => {}
            // The connection on the executor has ended; the rest has nowhere to go.
            Ok(_) => return Ok(()),
            Err(error) => return Err(error.to_string()),
        }
    }
}
