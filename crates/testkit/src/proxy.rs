//! A TCP proxy that breaks connections on demand: the network failures a recovering client must
//! ride through, made real and repeatable.
//!
//! Every fault acts on the connections open when it is called (later ones are forwarded
//! normally) unless it says otherwise:
//!
//! - [`cut`](FaultProxy::cut): both sides dropped at once, as a network failure would.
//! - [`freeze_downstream`](FaultProxy::freeze_downstream): requests still reach the server,
//!   its answers never reach the client. A request sent then has taken effect, but its caller
//!   cannot know: the ambiguous case, made deterministic.
//! - [`freeze_upstream`](FaultProxy::freeze_upstream): the client's bytes never reach the
//!   server: a request sent then is lost with the connection, surely not taken effect.
//! - [`cut_client_side`](FaultProxy::cut_client_side): the client sees its connection end while
//!   the server's side stays open for a while, so the server still holds the session attached.
//! - [`set_down`](FaultProxy::set_down) and [`set_unresponsive`](FaultProxy::set_unresponsive)
//!   (new connections): refused at once, or accepted and then never answered.
//! - [`set_upstream`](FaultProxy::set_upstream) (new connections): another server answers.
//! - [`set_downstream_limit`](FaultProxy::set_downstream_limit) (new connections): each is cut
//!   once it has carried so many server→client bytes, a link too flaky to carry a big answer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::bail;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// Forwards `127.0.0.1:<port>` to an upstream address until dropped.
pub struct FaultProxy {
    /// `ws://127.0.0.1:<port>`, for a client to connect to instead of the server.
    pub url: String,
    control: Arc<Control>,
    acceptor: tokio::task::JoinHandle<()>,
}

struct Control {
    upstream: Mutex<String>,
    links: Mutex<Vec<Link>>,
    down: Mutex<bool>,
    unresponsive: Mutex<bool>,
    downstream_limit: Mutex<Option<usize>>,
    /// New connections start frozen too (until the next cut).
    freeze_new: Mutex<bool>,
    /// Connections accepted and forwarded (or held, while unresponsive).
    accepted: AtomicUsize,
    /// Server→client bytes held back since the last `freeze_downstream`.
    held: Arc<Count>,
    /// Client→server bytes held back since the last `freeze_upstream`.
    held_upstream: Arc<Count>,
    /// Server→client bytes forwarded to the client, on every connection so far.
    forwarded: Arc<Count>,
    /// Client→server bytes forwarded to the server, on every connection so far.
    forwarded_upstream: Arc<Count>,
}

/// A count of bytes that a test can wait on: each addition wakes whoever waits, so a wait for a
/// point in a fast stream ends as the stream passes it, not at the next poll.
#[derive(Default)]
struct Count(watch::Sender<usize>);

impl Count {
    fn add(&self, bytes: usize) {
        self.0.send_modify(|count| *count += bytes);
    }

    fn get(&self) -> usize {
        *self.0.borrow()
    }

    fn reset(&self) {
        self.0.send_replace(0);
    }

    /// Whether the count reaches `bytes` within `within`, waited for as it grows.
    async fn reaches(&self, bytes: usize, within: Duration) -> bool {
        let mut changes = self.0.subscribe();
        let reached = changes.wait_for(|&count| count >= bytes);
        tokio::time::timeout(within, reached).await.is_ok()
    }

    /// Waits until the count is at least `bytes`; panics naming `what` if it is not within
    /// [`crate::wait::DEADLINE`].
    async fn at_least(&self, bytes: usize, what: &str) {
        let within = crate::wait::DEADLINE;
        assert!(self.reaches(bytes, within).await, "waited {within:?} for {bytes} {what}, in vain");
    }
}

/// One client connection and its way to the server.
struct Link {
    mode: watch::Sender<LinkMode>,
    task: AbortHandle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkMode {
    Open,
    /// Client→server bytes flow; server→client bytes are read and held back.
    DownstreamFrozen,
    /// Client→server bytes are read and held back; server→client bytes flow.
    UpstreamFrozen,
    /// The client's side is closed; the server's is held open (unread) for this long.
    ClientSideCut {
        hold_server_for: Duration,
    },
}

/// How long the server or the client may take to send what a frozen connection holds back.
const HELD_WITHIN: Duration = Duration::from_secs(20);

/// Largest read forwarded at once.
const BUFFER_BYTES: usize = 64 * 1024;

impl FaultProxy {
    /// Starts a proxy to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("ws://{}", listener.local_addr()?);
        let control = Arc::new(Control {
            upstream: Mutex::new(upstream.to_owned()),
            links: Mutex::new(Vec::new()),
            down: Mutex::new(false),
            unresponsive: Mutex::new(false),
            downstream_limit: Mutex::new(None),
            freeze_new: Mutex::new(false),
            accepted: AtomicUsize::new(0),
            held: Arc::default(),
            held_upstream: Arc::default(),
            forwarded: Arc::default(),
            forwarded_upstream: Arc::default(),
        });
        let acceptor_control = control.clone();
        let acceptor = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let control = &acceptor_control;
                if *control.down.lock().unwrap() {
                    drop(client);
                    continue;
                }
                control.accepted.fetch_add(1, Ordering::Relaxed);
                // Held from the choice of the link's first mode until it is listed: a `cut`
                // meanwhile would otherwise miss a link that started frozen, which would then
                // stay frozen for good (an HTTP client's pooled connection that never answers).
                let mut links = control.links.lock().unwrap();
                let initial = if *control.freeze_new.lock().unwrap() {
                    LinkMode::DownstreamFrozen
                } else {
                    LinkMode::Open
                };
                let (mode, mode_changes) = watch::channel(initial);
                let task = if *control.unresponsive.lock().unwrap() {
                    // Hold the connection without reading it, until cut.
                    tokio::spawn(async move {
                        let _client = client;
                        std::future::pending::<()>().await
                    })
                } else {
                    let upstream = control.upstream.lock().unwrap().clone();
                    let limit = control.downstream_limit.lock().unwrap().unwrap_or(usize::MAX);
                    let counters = Counters {
                        held: control.held.clone(),
                        held_upstream: control.held_upstream.clone(),
                        forwarded: control.forwarded.clone(),
                        forwarded_upstream: control.forwarded_upstream.clone(),
                    };
                    tokio::spawn(relay(client, upstream, mode_changes, counters, limit))
                };
                links.push(Link { mode, task: task.abort_handle() });
            }
        });
        Ok(Self { url, control, acceptor })
    }

    /// Drops every open connection abruptly, both sides, as a network failure would (this also
    /// ends the hold of a [`cut_client_side`](Self::cut_client_side)).
    pub fn cut(&self) {
        // Under the links' lock, as the acceptor lists a new link: a connection accepted
        // during the cut is either cut with the others or starts open.
        let mut links = self.control.links.lock().unwrap();
        *self.control.freeze_new.lock().unwrap() = false;
        for link in links.drain(..) {
            link.task.abort();
        }
    }

    /// While down, new connections are accepted and dropped at once (an unreachable network
    /// that still answers SYNs fails the same way for the client: a failed handshake).
    pub fn set_down(&self, down: bool) {
        *self.control.down.lock().unwrap() = down;
        if down {
            self.cut();
        }
    }

    /// While unresponsive, new connections are accepted and then never answered nor closed: a
    /// network that swallows packets. Only the client's own timeouts end such a connection.
    pub fn set_unresponsive(&self, unresponsive: bool) {
        *self.control.unresponsive.lock().unwrap() = unresponsive;
    }

    /// New connections are cut (both sides) once they have carried `limit` bytes from the
    /// server to the client; `None` lifts the limit.
    pub fn set_downstream_limit(&self, limit: Option<usize>) {
        *self.control.downstream_limit.lock().unwrap() = limit;
    }

    /// New connections go to `upstream` (`host:port`) from now on.
    pub fn set_upstream(&self, upstream: &str) {
        *self.control.upstream.lock().unwrap() = upstream.to_owned();
    }

    /// From now on, the open connections still carry client→server bytes, but server→client
    /// bytes are read and held back (and dropped by a later [`cut`](Self::cut)): requests reach
    /// the server and take effect, their answers never arrive. Resets
    /// [`held_bytes`](Self::held_bytes).
    pub fn freeze_downstream(&self) {
        self.control.held.reset();
        for link in self.control.links.lock().unwrap().iter() {
            link.mode.send_replace(LinkMode::DownstreamFrozen);
        }
    }

    /// [`freeze_downstream`](Self::freeze_downstream), and connections made from now until the
    /// next [`cut`](Self::cut) start frozen too: for a client that may open a new connection
    /// for its next request (an HTTP client's pool).
    pub fn freeze_downstream_including_new(&self) {
        *self.control.freeze_new.lock().unwrap() = true;
        self.freeze_downstream();
    }

    /// From now on, the open connections still carry server→client bytes, but client→server
    /// bytes are read and held back (and dropped by a later [`cut`](Self::cut)): what the
    /// client sends never reaches the server. Resets
    /// [`held_upstream_bytes`](Self::held_upstream_bytes).
    pub fn freeze_upstream(&self) {
        self.control.held_upstream.reset();
        for link in self.control.links.lock().unwrap().iter() {
            link.mode.send_replace(LinkMode::UpstreamFrozen);
        }
    }

    /// Client→server bytes held back since [`freeze_upstream`](Self::freeze_upstream).
    pub fn held_upstream_bytes(&self) -> usize {
        self.control.held_upstream.get()
    }

    /// Waits until the client has sent at least `bytes` bytes that were held back: proof
    /// that what it sent after the freeze is on the wire, and lost with a cut.
    pub async fn wait_held_upstream_bytes(&self, bytes: usize) -> anyhow::Result<()> {
        if !self.control.held_upstream.reaches(bytes, HELD_WITHIN).await {
            let sent = self.held_upstream_bytes();
            bail!("the client sent {sent} of {bytes} bytes within {HELD_WITHIN:?}");
        }
        Ok(())
    }

    /// Server→client bytes held back since [`freeze_downstream`](Self::freeze_downstream).
    pub fn held_bytes(&self) -> usize {
        self.control.held.get()
    }

    /// Waits until the server has sent at least `bytes` bytes that were held back: proof that
    /// it received and answered what the client sent after the freeze.
    pub async fn wait_held_bytes(&self, bytes: usize) -> anyhow::Result<()> {
        if !self.control.held.reaches(bytes, HELD_WITHIN).await {
            let sent = self.held_bytes();
            bail!("the server sent {sent} of {bytes} bytes within {HELD_WITHIN:?}");
        }
        Ok(())
    }

    /// Closes the client's side of every open connection at once, but keeps the server's side
    /// open, unread, for `hold_server_for` before closing it too: the server still believes
    /// the client attached (a resume meanwhile is refused with `-32010`) until it is released.
    pub fn cut_client_side(&self, hold_server_for: Duration) {
        for link in self.control.links.lock().unwrap().iter() {
            link.mode.send_replace(LinkMode::ClientSideCut { hold_server_for });
        }
    }

    /// Server→client bytes forwarded to the client so far, over every connection: how far the
    /// output a test cuts through has come, whatever the clock says.
    pub fn forwarded_bytes(&self) -> usize {
        self.control.forwarded.get()
    }

    /// Waits until at least `bytes` server→client bytes have been forwarded, over every
    /// connection so far ([`forwarded_bytes`](Self::forwarded_bytes)).
    pub async fn wait_forwarded_bytes(&self, bytes: usize) {
        self.control.forwarded.at_least(bytes, "bytes forwarded to the client").await
    }

    /// Client→server bytes forwarded to the server so far, over every connection.
    pub fn forwarded_upstream_bytes(&self) -> usize {
        self.control.forwarded_upstream.get()
    }

    /// Waits until at least `bytes` client→server bytes have been forwarded, over every
    /// connection so far: what the client sent by then is at the server.
    pub async fn wait_forwarded_upstream_bytes(&self, bytes: usize) {
        self.control.forwarded_upstream.at_least(bytes, "bytes forwarded to the server").await
    }

    /// Connections accepted so far (each reconnect attempt is one).
    pub fn connections(&self) -> usize {
        self.control.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.cut();
    }
}

/// The proxy's byte counts a link adds to.
struct Counters {
    held: Arc<Count>,
    held_upstream: Arc<Count>,
    forwarded: Arc<Count>,
    forwarded_upstream: Arc<Count>,
}

/// Forwards one client connection to `upstream` as `mode` says, until either side ends it or
/// `downstream_limit` server→client bytes have been forwarded.
async fn relay(
    client: TcpStream,
    upstream: String,
    mut mode: watch::Receiver<LinkMode>,
    Counters { held, held_upstream, forwarded, forwarded_upstream }: Counters,
    mut downstream_limit: usize,
) {
    let Ok(server) = TcpStream::connect(&upstream).await else { return };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut up = vec![0; BUFFER_BYTES];
    let mut down = vec![0; BUFFER_BYTES];
    loop {
        let current = *mode.borrow_and_update();
        if let LinkMode::ClientSideCut { hold_server_for } = current {
            drop((client_read, client_write));
            tokio::time::sleep(hold_server_for).await;
            return;
        }
        tokio::select! {
            changed = mode.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            read = client_read.read(&mut up) => {
                let Ok(n @ 1..) = read else { return };
                if *mode.borrow() == LinkMode::UpstreamFrozen {
                    held_upstream.add(n);
                    continue;
                }
                if server_write.write_all(&up[..n]).await.is_err() {
                    return;
                }
                forwarded_upstream.add(n);
            }
            read = server_read.read(&mut down) => {
                let Ok(n @ 1..) = read else { return };
                if *mode.borrow() == LinkMode::DownstreamFrozen {
                    held.add(n);
                    continue;
                }
                let allowed = n.min(downstream_limit);
                if client_write.write_all(&down[..allowed]).await.is_err() {
                    return;
                }
                forwarded.add(allowed);
                if allowed < n {
                    return;
                }
                downstream_limit -= allowed;
            }
        }
    }
}
