//! The SOCKS5 UDP relay (RFC 1928 §7) of a proxy launched with `enableSocks5Udp`: a command
//! asks for an association over a SOCKS5 connection (`UDP ASSOCIATE`), is told the relay's
//! address, and sends it datagrams, each with a header naming where it goes; the relay sends
//! each one on, if that destination is allowed, and sends back what answers, headed with who
//! answered. The association lasts as long as the SOCKS5 connection that asked for it.
//!
//! One relay socket per proxy ([`Relay`]): for a sandboxed command it is on the sandbox's own
//! loopback, bound by the inner stage and handed to the proxy (the only address in the
//! sandbox's namespace a datagram of its can reach); for an unconfined one, on the host's.
//! One task per association ([`associate`]) owns that association's socket towards its
//! destinations, so answers are told apart by association, never mixed.
//!
//! Held to the policy as a connection is: each destination (per association) is decided once
//! by [`super::gate`], reported once, and remembered; `limited` mode refuses UDP outright, as
//! the reference's does (its guard comes before any policy, for there is no method to read).
//! What the relay does not do: fragments (`FRAG` ≠ 0 is dropped, as the RFC allows), and
//! answers from anyone the association did not send to (dropped, so no one on the network
//! can write into the command's sockets by guessing a port).
//!
//! Bounded: [`MAX_ASSOCIATIONS`] per proxy, [`MAX_QUEUED_DATAGRAMS`] waiting per association
//! and [`MAX_QUEUED_BYTES_SERVER_WIDE`] waiting across every proxy of the server (past either a
//! datagram is dropped, as a full network drops it), [`MAX_DESTINATIONS`] remembered per
//! association.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use fast_socks5::util::target_addr::TargetAddr;
use tether_protocol::network::{Decision, DecisionScope, DecisionSource, ProxyProtocol};
use tether_protocol::network_proxy::NetworkMode;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tracing::debug;

use super::Proxy;
use super::gate::{self, Admission, Target};
use crate::network::blocked::BlockReason;

/// Associations one proxy holds at once. A command needs one per UDP socket it sends through
/// the proxy (a resolver, a game of ping): a handful. Each holds a socket and a queue, so a
/// command asking for more is told "general failure" past this.
pub(super) const MAX_ASSOCIATIONS: usize = 8;

/// Datagrams waiting for one association's task while it decides a destination or sends. A
/// datagram is at most 64 KiB, so an association holds 512 KiB at most, a proxy 4 MiB; a
/// command sending faster than its destinations are reached loses datagrams, as it would on a
/// congested network.
pub(super) const MAX_QUEUED_DATAGRAMS: usize = 8;

/// Bytes of datagrams waiting, across every association of every proxy of the server. Per
/// association the queue holds 512 KiB at most, but associations are bounded only through the
/// SOCKS5 connections that hold them ([`super::MAX_CONNECTIONS_SERVER_WIDE`]), which would let
/// commands flooding their relays together hold 128 MiB. 16 MiB is four proxies' worth at
/// their worst, far above what resolvers and games send; past it a datagram is dropped on
/// arrival, as a congested network drops it.
pub(super) const MAX_QUEUED_BYTES_SERVER_WIDE: usize = 16 * 1024 * 1024;

/// The server-wide budget of [`MAX_QUEUED_BYTES_SERVER_WIDE`], one permit a byte.
pub(super) fn queued_bytes_server_wide() -> Arc<Semaphore> {
    static SHARED: std::sync::OnceLock<Arc<Semaphore>> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| Arc::new(Semaphore::new(MAX_QUEUED_BYTES_SERVER_WIDE))).clone()
}

/// Destinations one association remembers the decision on. A resolver asks a few servers;
/// past this the memory is cleared and destinations are decided (and reported) again.
pub(super) const MAX_DESTINATIONS: usize = 64;

/// A datagram from the command on its way to its association: where it came from, and its
/// bytes (the SOCKS5 header included), holding their share of the server-wide budget until
/// the association has dealt with it.
struct Datagram {
    source: SocketAddr,
    bytes: Vec<u8>,
    _held: OwnedSemaphorePermit,
}

/// The largest datagram: UDP's length field is 16 bits.
const DATAGRAM_BYTES: usize = 64 * 1024;

/// A proxy's UDP relay: its socket, the associations datagrams arriving on it belong to, and
/// the budget waiting datagrams are held to.
pub(crate) struct Relay {
    socket: Arc<UdpSocket>,
    table: Mutex<Table>,
    queued: Arc<Semaphore>,
}

/// Which association each source belongs to.
#[derive(Default)]
struct Table {
    next: u64,
    open: HashMap<u64, Open>,
}

/// One association as the relay's reader sees it.
struct Open {
    /// Where its datagrams may come from: the address the command declared in its request,
    /// or, when it declared none (all zeros, as most clients do), the first source on its
    /// SOCKS5 connection's address that sends — after which only that one.
    source: Expected,
    datagrams: mpsc::Sender<Datagram>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Expected {
    /// Any port of this address, until one sends.
    Unclaimed(IpAddr),
    Exactly(SocketAddr),
}

impl Relay {
    /// The relay reading `socket` (a bound UDP socket), its waiting datagrams held to
    /// `queued` (one permit a byte: [`queued_bytes_server_wide`] but in tests); within a Tokio
    /// runtime.
    pub(crate) fn new(socket: OwnedFd, queued: Arc<Semaphore>) -> std::io::Result<Self> {
        let socket = std::net::UdpSocket::from(socket);
        socket.local_addr()?;
        socket.set_nonblocking(true)?;
        let socket = Arc::new(UdpSocket::from_std(socket)?);
        Ok(Self { socket, table: Mutex::new(Table::default()), queued })
    }

    /// The address the command sends its datagrams to.
    pub(super) fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Opens an association for a SOCKS5 connection from `peer` that declared `declared`; its
    /// datagrams arrive on the receiver. `None` past [`MAX_ASSOCIATIONS`].
    fn open(
        self: &Arc<Self>,
        peer: IpAddr,
        declared: Option<SocketAddr>,
    ) -> Option<(Registration, mpsc::Receiver<Datagram>)> {
        let mut table = self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if table.open.len() >= MAX_ASSOCIATIONS {
            return None;
        }
        let (datagrams, received) = mpsc::channel(MAX_QUEUED_DATAGRAMS);
        let source = match declared {
            Some(address) => Expected::Exactly(address),
            None => Expected::Unclaimed(peer.to_canonical()),
        };
        let id = table.next;
        table.next += 1;
        table.open.insert(id, Open { source, datagrams });
        Some((Registration { relay: self.clone(), id }, received))
    }

    /// Reads the relay's socket for as long as the proxy serves, handing each datagram to its
    /// association; one from a source no association expects is dropped, and so is one its
    /// association or the server has no room to hold.
    pub(super) async fn serve(self: Arc<Self>) {
        let mut buffer = vec![0u8; DATAGRAM_BYTES];
        loop {
            let (length, source) = match self.socket.recv_from(&mut buffer).await {
                Ok(received) => received,
                Err(error) => {
                    // An ICMP error for an earlier answer surfaces here; the socket is fine.
                    debug!(%error, "SOCKS5 UDP relay read failed");
                    continue;
                }
            };
            let Some(association) = self.claim(source) else {
                debug!(%source, "SOCKS5 UDP datagram from no association dropped");
                continue;
            };
            // At most 64 KiB, so the count fits.
            let Ok(held) = self.queued.clone().try_acquire_many_owned(length as u32) else {
                debug!(%source, "SOCKS5 UDP datagram dropped: the server holds all it may");
                continue;
            };
            let datagram = Datagram { source, bytes: buffer[..length].to_vec(), _held: held };
            if association.try_send(datagram).is_err() {
                debug!(%source, "SOCKS5 UDP datagram dropped: its association is behind");
            }
        }
    }

    /// The association `source` sends for: the one that expects exactly it, or else the first
    /// unclaimed one on its address, which it claims.
    fn claim(&self, source: SocketAddr) -> Option<mpsc::Sender<Datagram>> {
        let mut table = self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let canonical = SocketAddr::new(source.ip().to_canonical(), source.port());
        if let Some(open) =
            table.open.values().find(|open| open.source == Expected::Exactly(canonical))
        {
            return Some(open.datagrams.clone());
        }
        // The oldest association first: the order the command asked in.
        let (_, open) = table
            .open
            .iter_mut()
            .filter(|(_, open)| open.source == Expected::Unclaimed(canonical.ip()))
            .min_by_key(|(id, _)| **id)?;
        open.source = Expected::Exactly(canonical);
        Some(open.datagrams.clone())
    }
}

/// An association's place in its relay's table, given up when dropped.
struct Registration {
    relay: Arc<Relay>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut table = self.relay.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        table.open.remove(&self.id);
    }
}

/// Why an association could not be opened, as the command's SOCKS5 reply says it.
pub(super) enum NotOpened {
    /// This proxy relays no UDP.
    Unsupported,
    /// [`MAX_ASSOCIATIONS`] are open.
    Full,
}

/// An association opened for the SOCKS5 connection `control` (from `peer`, which declared
/// `declared`): the relay's address to reply with, and the association to run once replied.
pub(super) fn open(
    proxy: &Arc<Proxy>,
    peer: SocketAddr,
    declared: &TargetAddr,
) -> Result<(SocketAddr, Association), NotOpened> {
    let relay = proxy.udp.get().ok_or(NotOpened::Unsupported)?.clone();
    let declared = match declared {
        TargetAddr::Ip(address) if !address.ip().is_unspecified() && address.port() != 0 => {
            Some(SocketAddr::new(address.ip().to_canonical(), address.port()))
        }
        // All zeros (or a name, which a datagram's source never is): not known yet.
        _ => None,
    };
    let at = relay.local_addr().map_err(|_| NotOpened::Unsupported)?;
    let (registration, datagrams) = relay.open(peer.ip(), declared).ok_or(NotOpened::Full)?;
    Ok((at, Association { proxy: proxy.clone(), registration, datagrams }))
}

/// An open association, to be run once the command has been told where to send.
pub(super) struct Association {
    proxy: Arc<Proxy>,
    registration: Registration,
    datagrams: mpsc::Receiver<Datagram>,
}

/// What was decided on one destination.
enum Decided {
    /// Allowed: send to this address.
    Send(SocketAddr),
    Refused,
}

impl Association {
    /// Relays until `control` ends (closed, or anything at all arriving on it, which the RFC
    /// leaves no meaning to).
    pub(super) async fn run(mut self, mut control: TcpStream) {
        let mut outward: Option<UdpSocket> = None;
        let mut decided: HashMap<(String, u16), Decided> = HashMap::new();
        // Where this association sent, and the source its datagrams came from: only those
        // addresses' answers go back, and only to that source.
        let mut sent_to: HashMap<SocketAddr, SocketAddr> = HashMap::new();
        let mut answer = vec![0u8; DATAGRAM_BYTES];
        let mut ended = [0u8; 1];
        loop {
            tokio::select! {
                _ = control.read(&mut ended) => return,
                datagram = self.datagrams.recv() => {
                    let Some(Datagram { source, bytes: datagram, _held }) = datagram else {
                        return;
                    };
                    let Some((destination, payload)) =
                        self.destination(source, &datagram, &mut decided).await
                    else {
                        continue;
                    };
                    let socket = match &outward {
                        Some(socket) => socket,
                        None => match bind_outward() {
                            Ok(socket) => outward.insert(socket),
                            Err(error) => {
                                debug!(%error, "SOCKS5 UDP association has no socket out");
                                return;
                            }
                        },
                    };
                    if sent_to.len() >= MAX_DESTINATIONS && !sent_to.contains_key(&destination) {
                        sent_to.clear();
                    }
                    sent_to.insert(destination, source);
                    if let Err(error) = socket.send_to(payload, outward_form(socket, destination)).await {
                        debug!(%error, %destination, "SOCKS5 UDP datagram not sent");
                    }
                }
                received = recv_optional(outward.as_ref(), &mut answer) => {
                    let Ok((length, from)) = received else { continue };
                    let from = SocketAddr::new(from.ip().to_canonical(), from.port());
                    let Some(source) = sent_to.get(&from) else {
                        debug!(%from, "SOCKS5 UDP answer from where nothing was sent dropped");
                        continue;
                    };
                    let Ok(mut headed) = fast_socks5::new_udp_header(from) else { continue };
                    headed.extend_from_slice(&answer[..length]);
                    let relay = &self.registration.relay.socket;
                    if let Err(error) = relay.send_to(&headed, *source).await {
                        debug!(%error, "SOCKS5 UDP answer not delivered");
                    }
                }
            }
        }
    }

    /// Where `datagram` (from `source`) goes and what it carries, if it is well formed and its
    /// destination allowed; each destination decided once, and reported as it is decided.
    async fn destination<'d>(
        &self,
        source: SocketAddr,
        datagram: &'d [u8],
        decided: &mut HashMap<(String, u16), Decided>,
    ) -> Option<(SocketAddr, &'d [u8])> {
        let (fragment, target, payload) = match fast_socks5::parse_udp_request(datagram).await {
            Ok(parsed) => parsed,
            Err(error) => {
                debug!(%error, "malformed SOCKS5 UDP datagram dropped");
                return None;
            }
        };
        if fragment != 0 {
            debug!("fragmented SOCKS5 UDP datagram dropped");
            return None;
        }
        let (named, port) = match &target {
            TargetAddr::Ip(address) => (address.ip().to_string(), address.port()),
            TargetAddr::Domain(name, port) => (name.clone(), *port),
        };
        let host = gate::normalized(&named);
        let key = (host, port);
        if decided.len() >= MAX_DESTINATIONS && !decided.contains_key(&key) {
            decided.clear();
        }
        if let std::collections::hash_map::Entry::Vacant(vacant) = decided.entry(key.clone()) {
            vacant.insert(self.decide(&key.0, port, source).await);
        }
        match decided.get(&key)? {
            Decided::Send(address) => Some((*address, payload)),
            Decided::Refused => None,
        }
    }

    /// The decision on one destination: `limited` mode refuses UDP before any policy (there
    /// is no method to hold to it); otherwise the gate decides, as for a connection.
    async fn decide(&self, host: &str, port: u16, client: SocketAddr) -> Decided {
        let proxy = &self.proxy;
        let target =
            Target { protocol: ProxyProtocol::Socks5Udp, host, port, method: None, client };
        if proxy.config.mode == NetworkMode::Limited {
            let reason = BlockReason::MethodNotAllowed.reason();
            let refused =
                (Decision::Deny, DecisionSource::ModeGuard, reason, DecisionScope::NonDomain);
            proxy.report(target, refused, false).await;
            return Decided::Refused;
        }
        match proxy.admit(target).await {
            Admission::Go(addresses) => match addresses.first() {
                Some(address) => Decided::Send(*address),
                None => Decided::Refused,
            },
            Admission::Refused(..) => Decided::Refused,
        }
    }
}

/// The association's socket towards its destinations: IPv6 with IPv4 mapped, so one socket
/// reaches both; IPv4 alone where the host has no IPv6.
fn bind_outward() -> std::io::Result<UdpSocket> {
    let socket = std::net::UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0))
        .or_else(|_| std::net::UdpSocket::bind(("0.0.0.0", 0)))?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket)
}

/// `destination` as `socket` sends to it: an IPv4 address mapped into IPv6 on a dual socket.
fn outward_form(socket: &UdpSocket, destination: SocketAddr) -> SocketAddr {
    match (socket.local_addr(), destination.ip()) {
        (Ok(SocketAddr::V6(_)), IpAddr::V4(ip)) => {
            SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), destination.port())
        }
        _ => destination,
    }
}

async fn recv_optional(
    socket: Option<&UdpSocket>,
    buffer: &mut [u8],
) -> std::io::Result<(usize, SocketAddr)> {
    match socket {
        Some(socket) => socket.recv_from(buffer).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay() -> Arc<Relay> {
        relay_holding(MAX_QUEUED_BYTES_SERVER_WIDE)
    }

    /// A relay whose waiting datagrams may hold `bytes` in all.
    fn relay_holding(bytes: usize) -> Arc<Relay> {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        Arc::new(Relay::new(OwnedFd::from(socket), Arc::new(Semaphore::new(bytes))).unwrap())
    }

    /// A datagram as the relay's reader queues it, its bytes held to `relay`'s budget.
    fn datagram(relay: &Relay, source: SocketAddr, bytes: &[u8]) -> Datagram {
        let held = relay.queued.clone().try_acquire_many_owned(bytes.len() as u32).unwrap();
        Datagram { source, bytes: bytes.to_vec(), _held: held }
    }

    /// Where a queued datagram came from and what it carries.
    fn seen(datagram: Option<Datagram>) -> (SocketAddr, Vec<u8>) {
        let datagram = datagram.expect("a datagram");
        (datagram.source, datagram.bytes)
    }

    /// An association that declared no source belongs to the first that sends from its
    /// connection's address, and then to it alone; a declared source is held to exactly.
    /// Dropped, an association takes no more datagrams.
    #[tokio::test]
    async fn a_source_belongs_to_the_association_it_claimed_until_that_ends() {
        let relay = relay();
        let loopback: IpAddr = [127, 0, 0, 1].into();
        let first: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let second: SocketAddr = "127.0.0.1:4001".parse().unwrap();
        let declared: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let (open, mut datagrams) = relay.open(loopback, None).unwrap();
        let (exact, mut exactly) = relay.open(loopback, Some(declared)).unwrap();

        relay.claim(first).unwrap().try_send(datagram(&relay, first, b"one")).ok().unwrap();
        relay.claim(declared).unwrap().try_send(datagram(&relay, declared, b"two")).ok().unwrap();
        assert_eq!(seen(datagrams.recv().await), (first, b"one".to_vec()));
        assert_eq!(seen(exactly.recv().await), (declared, b"two".to_vec()));
        assert!(relay.claim(second).is_none(), "claimed by the first source already");
        assert!(relay.claim("10.0.0.1:4000".parse().unwrap()).is_none());

        drop(open);
        assert!(relay.claim(first).is_none());
        drop(exact);
        assert!(relay.claim(declared).is_none());
    }

    /// Past [`MAX_ASSOCIATIONS`] a proxy opens none, until one ends.
    #[tokio::test]
    async fn associations_are_bounded() {
        let relay = relay();
        let loopback: IpAddr = [127, 0, 0, 1].into();
        let mut open: Vec<_> =
            (0..MAX_ASSOCIATIONS).map(|_| relay.open(loopback, None).unwrap()).collect();
        assert!(relay.open(loopback, None).is_none());
        open.pop();
        assert!(relay.open(loopback, None).is_some());
    }

    /// Waiting datagrams hold their bytes of the server-wide budget: one arriving past it is
    /// dropped (and a smaller one after it that fits is not), and what the association has
    /// dealt with is given back.
    #[tokio::test]
    async fn waiting_datagrams_are_held_to_the_server_wide_budget() {
        let relay = relay_holding(10);
        let (_open, mut datagrams) = relay.open([127, 0, 0, 1].into(), None).unwrap();
        let reader = tokio::spawn(relay.clone().serve());
        let command = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let source = command.local_addr().unwrap();
        let to = relay.local_addr().unwrap();

        for bytes in [&b"aaaa"[..], b"bbbb", b"cccc", b"dd"] {
            command.send_to(bytes, to).unwrap();
        }
        let first = datagrams.recv().await;
        let second = datagrams.recv().await;
        // The last one sent arriving shows the one before it was read, and dropped: 4 + 4 + 4
        // bytes are more than 10, 4 + 4 + 2 are not.
        let last = datagrams.recv().await;
        assert_eq!(seen(first), (source, b"aaaa".to_vec()));
        assert_eq!(seen(second), (source, b"bbbb".to_vec()));
        assert_eq!(seen(last), (source, b"dd".to_vec()));
        assert!(datagrams.try_recv().is_err(), "the third was dropped");
        assert_eq!(relay.queued.available_permits(), 10, "dealt with, each gave its bytes back");

        command.send_to(b"eeeeeeeeee", to).unwrap();
        assert_eq!(seen(datagrams.recv().await), (source, b"eeeeeeeeee".to_vec()));
        reader.abort();
    }
}
