//! The proxy a `networkProxy` launch starts for its process: HTTP (forward requests and
//! `CONNECT`) and, when asked, SOCKS5, each connection held to the launch's domain policy,
//! every decision reported, destinations nobody decided asked of the client.
//!
//! - [`ProxyConfig`]: what a launch asks for, checked (`-32602` for what this proxy refuses).
//! - [`Proxy`]: one process's proxy. Its connections come from host listeners on
//!   `127.0.0.1:0` (an unconfined process, which can reach the host anyway) or, for a
//!   sandboxed one, handed over by the sandbox's inner stage ([`super::forward`]), so the
//!   proxy never listens where anyone else can reach it. Either way it ends with its process
//!   ([`RunningProxy`] is held by the process's pump and aborts every connection when dropped).
//! - [`gate`]: the decision for one destination; [`http`] and [`socks`] the two protocols,
//!   [`udp`] the SOCKS5 UDP relay; [`upstream`]: what an allowed connection goes through past
//!   the executor, if anything.
//!
//! Bounded: at most [`MAX_CONNECTIONS`] connections at once per proxy and
//! [`MAX_CONNECTIONS_SERVER_WIDE`] across the server (more wait in the kernel's queues, not in
//! memory here), deadlines on every handshake, resolution and
//! connect, and the reports go through the session's bounded queue, slowing a flood down
//! rather than piling up.

mod gate;
mod http;
mod socks;
mod udp;
pub mod upstream;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use tether_protocol::ProcessId;
use tether_protocol::network::{ClientDecision, PolicyDecisionNotification, PolicyRequestParams};
use tether_protocol::network_proxy::{NetworkMode, NetworkProxyLaunch};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::task::AbortOnDropHandle;
use tracing::{Instrument, debug, info_span, warn};

use super::domains::DomainPolicy;
use super::forward::{Entry, ProxyRoute, Receiver};
use super::masking;

/// Connections one proxy serves at once. Above what a build opens in parallel (package
/// managers keep 15 or so per registry), low enough that one command flooding its proxy takes
/// a quarter of [`MAX_CONNECTIONS_SERVER_WIDE`] and leaves the rest to the others; past it,
/// connections wait unaccepted in the kernel's queues, not in memory here.
pub const MAX_CONNECTIONS: usize = 64;

/// Connections all of a server's managed proxies serve at once. Each holds two descriptors
/// (the command's end and the destination), taken from the headroom the server keeps for its
/// sessions' own work (`DESCRIPTOR_HEADROOM`, 1,024): 256 take half of it, so commands' pipes
/// and files keep the other half however many proxies are flooded.
pub const MAX_CONNECTIONS_SERVER_WIDE: usize = 256;

/// The server-wide share of [`MAX_CONNECTIONS_SERVER_WIDE`].
pub(crate) fn server_wide() -> Arc<Semaphore> {
    static SHARED: std::sync::OnceLock<Arc<Semaphore>> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| Arc::new(Semaphore::new(MAX_CONNECTIONS_SERVER_WIDE))).clone()
}

/// How long a connection may take to say where it wants to go (request headers, SOCKS5
/// greeting and command): a peer that says nothing does not hold a slot for ever.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a proxy waits after a failed `accept` (the process or the server out of
/// descriptors) before it accepts again: a failing accept returns at once, and retried at once
/// it would spin a CPU until something is closed.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// How long a name may take to resolve, and a connection to its destination to open.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Added to the client's `policyDecisionTimeoutMs` for the round trip of the question and its
/// answer (the timeout is the client's decider's own).
pub const DECISION_SLACK: Duration = Duration::from_secs(2);

/// What a proxy tells its session, and asks of its client.
#[derive(Debug)]
pub enum NetworkEvent {
    /// `network/policyDecision`.
    Decided(PolicyDecisionNotification),
    /// `network/policyRequest`: the client's decision is sent on `answer`; a dropped `answer`
    /// (no client, too many questions waiting, the connection gone) is a denial.
    Ask { request: PolicyRequestParams, answer: oneshot::Sender<ClientDecision> },
}

/// Where a table's proxies send their [`NetworkEvent`]s: the session, which turns them into
/// traffic to its client. `None`: reports go nowhere and questions are denied.
pub type NetworkEvents = Option<mpsc::Sender<NetworkEvent>>;

/// A launch's proxy, checked.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub process_id: ProcessId,
    pub policy: DomainPolicy,
    pub mode: NetworkMode,
    pub socks5: bool,
    /// `enableSocks5Udp` (with SOCKS5): `UDP ASSOCIATE` is granted and its datagrams relayed,
    /// each destination decided as a connection's is ([`udp`]). Never with a mandatory TCP
    /// upstream, which UDP could not go through: there the command is answered "command not
    /// supported", as without the flag.
    pub socks5_udp: bool,
    /// `transparentTcp`: the sandbox's outbound TCP goes through the SOCKS5 proxy however the
    /// command connects (checked: only with SOCKS5, and only for a sandboxed start).
    pub transparent_tcp: bool,
    /// How long the client's decider has for a destination the policy leaves open; `None`:
    /// no decider, such a destination is refused.
    pub ask_timeout: Option<Duration>,
    /// What the proxy goes through past the executor: the executor's own proxies (when the
    /// launch allows them), the operator's TCP upstream.
    pub routes: upstream::Routes,
    /// `credentialMasking`: where the CA bundle goes (`$CODEX_HOME/proxy`), when asked.
    pub masking_home: Option<std::path::PathBuf>,
    /// `credentialProviders` that can be honoured (used only with masking on).
    pub providers: Arc<[masking::providers::Provider]>,
}

/// The launch's custom credential providers that can be honoured, at most
/// [`masking::providers::MAX_PROVIDERS`]; each left out is named in the log with why (the
/// start runs, as on the reference, its variables unmasked).
fn compiled_providers(launch: &NetworkProxyLaunch) -> Vec<masking::providers::Provider> {
    use masking::providers::{MAX_PROVIDERS, Provider};
    let Some(providers) = &launch.proxy.credential_providers else { return Vec::new() };
    if launch.proxy.credential_masking != Some(true) {
        return Vec::new();
    }
    if providers.len() > MAX_PROVIDERS {
        warn!(
            count = providers.len(),
            "credential providers past the first {MAX_PROVIDERS} are left out"
        );
    }
    providers
        .iter()
        .take(MAX_PROVIDERS)
        .filter_map(|(name, config)| {
            Provider::compile(name, config)
                .inspect_err(|error| warn!(%error, "credential provider left out: its variables reach the command unmasked"))
                .ok()
        })
        .collect()
}

impl ProxyConfig {
    /// The proxy `launch` asks for, or why this executor refuses it (a `-32602` message).
    /// `executor_env` is the server's environment, where its own upstream proxies are named;
    /// `routing`, how the operator started the server to route past it.
    pub fn new(
        process_id: ProcessId,
        launch: &NetworkProxyLaunch,
        executor_env: &[(String, String)],
        routing: &upstream::UpstreamRouting,
    ) -> Result<Self, String> {
        let proxy = &launch.proxy;
        let domains: Option<BTreeMap<String, String>> = match &proxy.domains {
            None | Some(serde_json::Value::Null) => None,
            Some(value) => Some(serde_json::from_value(value.clone()).map_err(|error| {
                format!("invalid network proxy config: `domains` maps host patterns to `allow`, `deny` or `none`: {error}")
            })?),
        };
        let policy = DomainPolicy::new(domains.as_ref(), proxy.allow_local_binding)
            .map_err(|error| error.to_string())?;
        let routes = upstream::Routes::new(
            routing,
            proxy.allow_upstream_proxy,
            proxy.allow_local_binding,
            executor_env,
        );
        Ok(Self {
            process_id,
            policy,
            mode: proxy.mode,
            socks5: proxy.enable_socks5,
            socks5_udp: proxy.enable_socks5 && proxy.enable_socks5_udp && routes.tcp.is_none(),
            transparent_tcp: proxy.transparent_tcp,
            ask_timeout: launch.policy_decision_timeout_ms.map(Duration::from_millis),
            routes,
            masking_home: (proxy.credential_masking == Some(true))
                .then(|| codex_home(executor_env)),
            providers: compiled_providers(launch).into(),
        })
    }
}

/// `$CODEX_HOME`, or `~/.codex`, of the executor.
fn codex_home(executor_env: &[(String, String)]) -> std::path::PathBuf {
    let get = |name: &str| {
        executor_env.iter().find(|(key, value)| key == name && !value.is_empty()).map(|(_, v)| v)
    };
    match (get("CODEX_HOME"), get("HOME")) {
        (Some(home), _) => home.into(),
        (None, Some(home)) => std::path::Path::new(home).join(".codex"),
        (None, None) => std::path::PathBuf::from("/root/.codex"),
    }
}

/// A launch's masked secrets and the authority its tunnels to their hosts are opened with.
#[derive(Debug, Clone)]
pub struct MaskedSecrets {
    pub authority: Arc<masking::ca::Authority>,
    pub masking: Arc<masking::Masking>,
}

/// One process's proxy.
pub struct Proxy {
    config: ProxyConfig,
    events: NetworkEvents,
    connections: Arc<Semaphore>,
    masked: Option<MaskedSecrets>,
    /// The SOCKS5 UDP relay, once its socket is here: bound on the host's loopback for an
    /// unconfined process, handed over by the sandbox's inner stage for a sandboxed one (the
    /// first hand-over, before any connection). Unset: `UDP ASSOCIATE` is not supported.
    udp: std::sync::OnceLock<Arc<udp::Relay>>,
}

/// A proxy serving: dropped (the process closed), it stops and every connection through it
/// ends.
pub struct RunningProxy {
    task: AbortOnDropHandle<()>,
}

impl RunningProxy {
    /// Runs `serving` as the way out of `process_id`'s sandbox, until stopped or dropped.
    pub(crate) fn spawn(
        process_id: &ProcessId,
        serving: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        let span = info_span!("proxy", process_id = %process_id);
        Self { task: AbortOnDropHandle::new(tokio::spawn(serving.instrument(span))) }
    }

    /// Stops the proxy and returns once it is gone: its listeners closed, every connection
    /// through it ended. (Dropped instead, it goes as the runtime gets to it.)
    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// Host listeners for an unconfined process: the addresses its variables name.
pub struct HostListeners {
    pub http: TcpListener,
    pub socks: Option<TcpListener>,
    /// The SOCKS5 UDP relay's socket, on the SOCKS5 port's number when it is free.
    pub udp: Option<std::net::UdpSocket>,
}

impl HostListeners {
    /// Binds `127.0.0.1:0` for HTTP, and for SOCKS5 when `socks5` (within a Tokio runtime),
    /// with its UDP relay when `udp`.
    pub fn bind(socks5: bool, udp: bool) -> std::io::Result<Self> {
        let bind = || -> std::io::Result<TcpListener> {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            listener.set_nonblocking(true)?;
            TcpListener::from_std(listener)
        };
        let socks = if socks5 { Some(bind()?) } else { None };
        let udp = match (&socks, udp) {
            (Some(socks), true) => {
                let port = socks.local_addr()?.port();
                let relay = std::net::UdpSocket::bind(("127.0.0.1", port))
                    .or_else(|_| std::net::UdpSocket::bind("127.0.0.1:0"))?;
                Some(relay)
            }
            _ => None,
        };
        Ok(Self { http: bind()?, socks, udp })
    }

    pub fn http_addr(&self) -> std::io::Result<SocketAddr> {
        self.http.local_addr()
    }

    pub fn socks_addr(&self) -> std::io::Result<Option<SocketAddr>> {
        self.socks.as_ref().map(TcpListener::local_addr).transpose()
    }
}

impl Proxy {
    pub fn new(
        config: ProxyConfig,
        events: NetworkEvents,
        masked: Option<MaskedSecrets>,
    ) -> Arc<Self> {
        let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let udp = std::sync::OnceLock::new();
        Arc::new(Self { config, events, connections, masked, udp })
    }

    /// Serves the connections `listeners` accept.
    pub fn serve_listeners(
        self: &Arc<Self>,
        mut listeners: HostListeners,
    ) -> std::io::Result<RunningProxy> {
        if let Some(relay) = listeners.udp.take() {
            self.take_relay(relay.into())?;
        }
        Ok(self.spawn(self.clone().serve_all(Source::Listeners(listeners))))
    }

    /// Makes `socket` this proxy's UDP relay, if it relays UDP and has none yet (a second
    /// hand-over, which only a command holding the inner stage's end could make, is closed).
    fn take_relay(&self, socket: OwnedFd) -> std::io::Result<()> {
        if !self.config.socks5_udp || self.udp.get().is_some() {
            return Ok(());
        }
        let relay = udp::Relay::new(socket, udp::queued_bytes_server_wide())?;
        let _ = self.udp.set(Arc::new(relay));
        Ok(())
    }

    /// Serves the connections a sandbox's inner stage hands over on `socket`, until it closes.
    pub fn serve_forwarded(self: &Arc<Self>, socket: OwnedFd) -> std::io::Result<RunningProxy> {
        let receiver = Receiver::new(socket)?;
        Ok(self.spawn(self.clone().serve_all(Source::Forwarded(receiver))))
    }

    /// Serves every connection `source` yields, at most [`MAX_CONNECTIONS`] at once (and
    /// within the server-wide share), until it yields no more; then lets those open finish.
    async fn serve_all(self: Arc<Self>, source: Source) {
        let mut connections = JoinSet::new();
        // The UDP relay's reader, once there is a relay; it ends with this serving.
        let mut relaying = self.udp.get().map(relay_reader);
        loop {
            let Ok(own) = self.connections.clone().acquire_owned().await else { return };
            let Ok(shared) = server_wide().acquire_owned().await else { return };
            let permit = (own, shared);
            let next = tokio::select! {
                next = source.next() => next,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            };
            let Some((entry, stream)) = next else { break };
            let stream = match (entry, stream) {
                (_, Handed::Stream(stream)) => stream,
                (Entry::Udp, Handed::Socket(socket)) => {
                    if let Err(error) = self.take_relay(socket) {
                        debug!(%error, "SOCKS5 UDP relay socket refused");
                    }
                    if relaying.is_none() {
                        relaying = self.udp.get().map(relay_reader);
                    }
                    continue;
                }
                (_, Handed::Socket(_)) => continue,
            };
            connections.spawn(self.clone().serve(entry, stream, permit));
        }
        while connections.join_next().await.is_some() {}
        drop(relaying);
    }

    fn spawn(&self, serving: impl Future<Output = ()> + Send + 'static) -> RunningProxy {
        RunningProxy::spawn(&self.config.process_id, serving)
    }

    async fn serve(
        self: Arc<Self>,
        entry: Entry,
        stream: TcpStream,
        _permits: (tokio::sync::OwnedSemaphorePermit, tokio::sync::OwnedSemaphorePermit),
    ) {
        let Ok(client) = stream.peer_addr() else { return };
        let _ = stream.set_nodelay(true);
        match entry {
            Entry::Http => http::serve(self, stream, client).await,
            Entry::Socks => socks::serve(self, stream, client).await,
            // Not a listener a managed proxy's sandbox has: a sandboxed command that took the
            // inner stage's end and sent one gets it closed.
            Entry::Bridged(_) | Entry::Udp => {}
        }
    }
}

/// Where a proxy's connections come from.
enum Source {
    /// Accepted on the host, for an unconfined process.
    Listeners(HostListeners),
    /// Handed over by a sandbox's inner stage.
    Forwarded(Receiver),
}

impl Source {
    /// The next connection; `None` once there will be no more (the sandbox is gone).
    async fn next(&self) -> Option<(Entry, Handed)> {
        match self {
            Source::Listeners(listeners) => loop {
                let accepted = tokio::select! {
                    accepted = listeners.http.accept() => {
                        accepted.map(|(s, _)| (Entry::Http, Handed::Stream(s)))
                    }
                    Some(accepted) = accept_optional(listeners.socks.as_ref()) => {
                        accepted.map(|(s, _)| (Entry::Socks, Handed::Stream(s)))
                    }
                };
                match accepted {
                    Ok(accepted) => return Some(accepted),
                    // A failed accept (descriptors running out) is the listener's, not the
                    // proxy's: the next one may succeed, once something has been closed.
                    Err(error) => {
                        debug!(%error, "proxy accept failed");
                        tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                    }
                }
            },
            Source::Forwarded(receiver) => loop {
                let (entry, fd) = match receiver.next().await {
                    Ok(Some(handed)) => handed,
                    // The sandbox is gone; what it had open ends with it.
                    Ok(None) => return None,
                    Err(error) => {
                        debug!(%error, "proxy hand-over failed");
                        return None;
                    }
                };
                if entry == Entry::Udp {
                    return Some((entry, Handed::Socket(fd)));
                }
                match stream_of(fd) {
                    Ok(stream) => return Some((entry, Handed::Stream(stream))),
                    Err(error) => debug!(%error, "handed-over descriptor is not a TCP connection"),
                }
            },
        }
    }
}

/// Runs `relay`'s reader until the handle is dropped.
fn relay_reader(relay: &Arc<udp::Relay>) -> AbortOnDropHandle<()> {
    let reading = relay.clone().serve().instrument(tracing::Span::current());
    AbortOnDropHandle::new(tokio::spawn(reading))
}

/// What a proxy's source gives it: a connection to serve, or (from a sandbox, once) the UDP
/// relay's socket.
enum Handed {
    Stream(TcpStream),
    Socket(OwnedFd),
}

async fn accept_optional(
    listener: Option<&TcpListener>,
) -> Option<std::io::Result<(TcpStream, SocketAddr)>> {
    match listener {
        Some(listener) => Some(listener.accept().await),
        None => std::future::pending().await,
    }
}

/// A handed-over descriptor as a Tokio stream, if it is a connected TCP socket.
fn stream_of(fd: OwnedFd) -> std::io::Result<TcpStream> {
    let stream = std::net::TcpStream::from(fd);
    stream.peer_addr()?;
    stream.set_nonblocking(true)?;
    TcpStream::from_std(stream)
}

/// Bytes a tunnel copies per read, each way: a download arrives in bursts of the socket's
/// receive window, and a buffer that takes a burst whole costs one read and one write where
/// tokio's default 8 KiB costs dozens. Two per open tunnel, so 256 tunnels hold 32 MiB at
/// most.
const TUNNEL_BUFFER_BYTES: usize = 64 * 1024;

/// Copies both ways until either side ends, then ends the other.
pub(crate) async fn splice<A, B>(mut a: A, mut b: B)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let size = TUNNEL_BUFFER_BYTES;
    let _ = tokio::io::copy_bidirectional_with_sizes(&mut a, &mut b, size, size).await;
}

/// A launch's proxy between its checks and its process's start: the pair a sandbox would
/// reach it through, made, and the ports the sandbox's forwarders would listen on.
pub struct PreparedProxy {
    config: ProxyConfig,
    proxy_end: OwnedFd,
    /// For the sandbox, if the start builds one; dropped once the process has started, so
    /// that the sandbox holds the only copy and its end is the proxy's end of input.
    pub route: ProxyRoute,
}

/// Where a sandbox's forwarders listen: a private namespace's loopback, so any port is free;
/// one taken at random from this range for each start, as a host's would be.
pub(crate) const FORWARDER_PORTS: std::ops::Range<u16> = 20_000..60_000;

impl PreparedProxy {
    pub fn new(config: ProxyConfig) -> std::io::Result<Self> {
        let (proxy_end, sandbox_end) = super::forward::pair()?;
        let random = std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            config.process_id.as_str(),
        );
        let span = u64::from(FORWARDER_PORTS.end - FORWARDER_PORTS.start);
        let http = FORWARDER_PORTS.start + (random % span) as u16;
        let socks = config.socks5.then(|| FORWARDER_PORTS.start + ((random >> 32) % span) as u16);
        // Two ports drawn alike would collide in the sandbox: the second moves on by one.
        let socks = socks.map(|port| if port == http { port + 1 } else { port });
        let transparent = config.transparent_tcp;
        let mut listeners = vec![(Entry::Http, http)];
        listeners.extend(socks.map(|socks| (Entry::Socks, socks)));
        // UDP ports are not TCP ports: the relay takes the SOCKS5 port's number, as a SOCKS5
        // server's relay often does.
        let udp = socks.filter(|_| config.socks5_udp);
        listeners.extend(udp.map(|socks| (Entry::Udp, socks)));
        Ok(Self { config, proxy_end, route: ProxyRoute { sandbox_end, listeners, transparent } })
    }

    /// Starts the proxy for a process about to be spawned with `env`, setting its proxy
    /// variables: reached through the sandbox's forwarders when `forwarded` (the launch took
    /// [`Self::route`]), else on host listeners.
    pub fn start(
        self,
        forwarded: bool,
        env: &mut BTreeMap<String, String>,
        events: NetworkEvents,
    ) -> std::io::Result<RunningProxy> {
        let allow_local = self.config.policy.allows_local();
        let masked = match &self.config.masking_home {
            Some(home) => {
                let authority = masking::ca::authority().map_err(std::io::Error::other)?;
                let bundle = authority.bundle(home)?;
                let providers = &self.config.providers;
                let masking = masking::Masking::apply(env, &bundle.to_string_lossy(), providers);
                Some(MaskedSecrets { authority, masking: Arc::new(masking) })
            }
            None => None,
        };
        let proxy = Proxy::new(self.config, events, masked);
        if forwarded {
            let local = |port| SocketAddr::from(([127, 0, 0, 1], port));
            let http = local(self.route.port(Entry::Http).expect("a managed proxy has HTTP"));
            let socks = self.route.port(Entry::Socks).map(local);
            super::proxy_env::apply(env, http, socks, allow_local);
            return proxy.serve_forwarded(self.proxy_end);
        }
        let listeners = HostListeners::bind(proxy.config.socks5, proxy.config.socks5_udp)?;
        super::proxy_env::apply(env, listeners.http_addr()?, listeners.socks_addr()?, allow_local);
        proxy.serve_listeners(listeners)
    }
}
