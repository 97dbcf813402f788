//! The relay behind the TUN device: a user-space TCP stack (smoltcp) that accepts whatever
//! connection the command makes to any address, and carries each over a SOCKS5 connection to
//! the process's managed proxy (through the forwarder on the sandbox's loopback), where the
//! domain policy decides on it as on any proxied request.
//!
//! One thread, one `poll` loop: packets in from the device, bytes between each accepted
//! connection and its SOCKS5 connection, packets out. A connection is only carried once the
//! command's side is established, so a refusal always reaches the command as a reset of a
//! connection it had (as the reference's does), never as a refused connect.
//!
//! Bounds: [`MAX_FLOWS`] connections at once (a SYN beyond it is answered with a reset), each
//! with [`BUFFER_BYTES`] each way; a connection whose peer stops acknowledging for
//! [`STALL_TIMEOUT`] is dropped.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::wire::{
    HardwareAddress, IpAddress, IpCidr, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket,
};

use super::dns::FakeNames;
use super::tun::{KERNEL_ADDRESS, KERNEL_ADDRESS6, MTU};

/// Connections carried at once: the managed proxy serves 64 per process, so more here would
/// only wait there.
pub const MAX_FLOWS: usize = 64;

/// Each direction's buffer per connection: 64 KiB keeps a loopback-speed transfer flowing
/// (the window the command sees) while 64 connections hold at most 8 MiB.
pub const BUFFER_BYTES: usize = 64 * 1024;

/// How long a connection may go without its peer acknowledging what was sent before it is
/// dropped (smoltcp's timeout): a command that vanished mid-connection frees its place.
const STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long connecting to the sandbox's own SOCKS5 forwarder may take: it is a listener on
/// this namespace's loopback, served by another thread of this stage, so only a forwarder
/// that is gone (the proxy ended) makes it fail, and then at once.
const FORWARDER_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The stack's own address, with a route to the kernel's side: with "any IP" on, smoltcp
/// accepts packets for every destination, and answers from that destination.
const STACK_ADDRESS: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const STACK_ADDRESS6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

/// The largest SOCKS5 reply: version, code, reserved, type, a 255-byte name and its length,
/// the port, and the method answer before it.
const MAX_SOCKS_REPLY: usize = 2 + 4 + 1 + 255 + 2;

/// The TUN device as smoltcp sees it: one packet at a time, handed in by the loop (so the
/// loop can make a listener for a SYN before smoltcp sees it); what smoltcp sends is written
/// straight to the device.
struct Tun {
    device: OwnedFd,
    incoming: Option<Vec<u8>>,
}

struct Incoming(Vec<u8>);

impl RxToken for Incoming {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

struct Outgoing<'a>(BorrowedFd<'a>);

impl TxToken for Outgoing<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut packet = vec![0; len];
        let result = f(&mut packet);
        // A full device queue drops the packet, as a congested link would: TCP sends it again.
        let _ = rustix::io::write(self.0, &packet);
        result
    }
}

impl Device for Tun {
    type RxToken<'a> = Incoming;
    type TxToken<'a> = Outgoing<'a>;

    fn receive(&mut self, _: smoltcp::time::Instant) -> Option<(Incoming, Outgoing<'_>)> {
        let packet = self.incoming.take()?;
        Some((Incoming(packet), Outgoing(self.device.as_fd())))
    }

    fn transmit(&mut self, _: smoltcp::time::Instant) -> Option<Outgoing<'_>> {
        Some(Outgoing(self.device.as_fd()))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut capabilities = DeviceCapabilities::default();
        capabilities.medium = Medium::Ip;
        capabilities.max_transmission_unit = MTU;
        capabilities
    }
}

/// Where one carried connection is.
enum Phase {
    /// Accepted by the stack, not yet established with the command.
    Accepting,
    /// The SOCKS5 request is sent; its answer is being read.
    Asking { upstream: TcpStream, reply: Vec<u8> },
    /// Bytes flow both ways.
    Open(Open),
}

struct Open {
    upstream: TcpStream,
    /// What came from the proxy with its answer, not yet given to the command.
    early: Vec<u8>,
    /// The proxy's side has ended: the command's side is closed once `early` is out.
    upstream_done: bool,
    /// The command's side has ended, and the proxy's write side is shut.
    command_done: bool,
    /// Bytes from the command are waiting for the proxy's side to take them.
    blocked: bool,
}

struct Flow {
    handle: SocketHandle,
    phase: Phase,
}

/// The relay: the stack, its sockets, and the connections it carries.
pub struct Relay {
    tun: Tun,
    interface: Interface,
    sockets: SocketSet<'static>,
    /// One listening socket per port a SYN has come for, until it accepts.
    listening: HashMap<u16, SocketHandle>,
    flows: Vec<Flow>,
    socks: SocketAddr,
    names: Arc<Mutex<FakeNames>>,
    started: std::time::Instant,
}

impl Relay {
    /// A relay over `device` (made by [`super::tun::make`]) to the SOCKS5 forwarder at
    /// `socks` on the sandbox's loopback.
    pub fn new(device: OwnedFd, socks: u16, names: Arc<Mutex<FakeNames>>) -> Self {
        let mut tun = Tun { device, incoming: None };
        let started = std::time::Instant::now();
        let mut interface = Interface::new(
            Config::new(HardwareAddress::Ip),
            &mut tun,
            smoltcp::time::Instant::ZERO,
        );
        interface.set_any_ip(true);
        interface.update_ip_addrs(|addresses| {
            let _ = addresses.push(IpCidr::new(IpAddress::Ipv4(STACK_ADDRESS), 32));
            let _ = addresses.push(IpCidr::new(IpAddress::Ipv6(STACK_ADDRESS6), 128));
        });
        let _ = interface.routes_mut().add_default_ipv4_route(KERNEL_ADDRESS);
        let _ = interface.routes_mut().add_default_ipv6_route(KERNEL_ADDRESS6);
        Self {
            tun,
            interface,
            sockets: SocketSet::new(Vec::new()),
            listening: HashMap::new(),
            flows: Vec::new(),
            socks: SocketAddr::from((Ipv4Addr::LOCALHOST, socks)),
            names,
            started,
        }
    }

    fn now(&self) -> smoltcp::time::Instant {
        smoltcp::time::Instant::from_micros(self.started.elapsed().as_micros() as i64)
    }

    /// Runs until the device fails (it does not while the sandbox lives).
    pub fn run(mut self) {
        let mut packet = vec![0u8; MTU];
        loop {
            loop {
                match rustix::io::read(&self.tun.device, &mut packet) {
                    Ok(size) => self.take(&packet[..size]),
                    Err(rustix::io::Errno::AGAIN) => break,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => return,
                }
            }
            self.poll();
            self.carry();
            self.poll();
            self.reap();
            if self.wait().is_err() {
                return;
            }
        }
    }

    /// One packet from the command: a listener is made first if it opens a connection to a
    /// port none listens on, then the stack takes it.
    fn take(&mut self, packet: &[u8]) {
        // What the packets before this one ended no longer counts against the bound.
        self.reap();
        self.listen_for(packet);
        self.tun.incoming = Some(packet.to_vec());
        self.poll();
    }

    fn poll(&mut self) {
        let now = self.now();
        self.interface.poll(now, &mut self.tun, &mut self.sockets);
        self.accept();
    }

    /// Makes a listening socket for a SYN that opens a new connection, room allowing.
    fn listen_for(&mut self, packet: &[u8]) {
        let Some((from, to, segment)) = tcp_of(packet) else { return };
        let Ok(tcp) = TcpPacket::new_checked(segment) else { return };
        if !tcp.syn() || tcp.ack() || self.listening.contains_key(&tcp.dst_port()) {
            return;
        }
        // A SYN sent again for a connection already accepted belongs to that connection.
        let (source, destination) = ((from, tcp.src_port()), (to, tcp.dst_port()));
        let known = self.flows.iter().any(|flow| {
            let socket = self.sockets.get::<tcp::Socket>(flow.handle);
            socket.remote_endpoint().map(|e| (e.addr, e.port)) == Some(source)
                && socket.local_endpoint().map(|e| (e.addr, e.port)) == Some(destination)
        });
        if known || self.flows.len() + self.listening.len() >= MAX_FLOWS {
            return;
        }
        let buffer = || tcp::SocketBuffer::new(vec![0; BUFFER_BYTES]);
        let mut socket = tcp::Socket::new(buffer(), buffer());
        socket.set_nagle_enabled(false);
        socket.set_timeout(Some(smoltcp::time::Duration::from_millis(
            STALL_TIMEOUT.as_millis() as u64
        )));
        if socket.listen(tcp.dst_port()).is_ok() {
            let handle = self.sockets.add(socket);
            self.listening.insert(tcp.dst_port(), handle);
        }
    }

    /// Listeners that took a connection become flows.
    fn accept(&mut self) {
        let sockets = &self.sockets;
        let taken: Vec<u16> = self
            .listening
            .iter()
            .filter(|(_, handle)| {
                sockets.get::<tcp::Socket>(**handle).state() != tcp::State::Listen
            })
            .map(|(port, _)| *port)
            .collect();
        for port in taken {
            let handle = self.listening.remove(&port).expect("listed above");
            self.flows.push(Flow { handle, phase: Phase::Accepting });
        }
    }

    /// Moves every flow on as far as it can go now.
    fn carry(&mut self) {
        for at in 0..self.flows.len() {
            let handle = self.flows[at].handle;
            let phase = std::mem::replace(&mut self.flows[at].phase, Phase::Accepting);
            let socket = self.sockets.get_mut::<tcp::Socket>(handle);
            let next = match phase {
                Phase::Accepting => match socket.state() {
                    tcp::State::SynReceived => Some(Phase::Accepting),
                    tcp::State::Established | tcp::State::CloseWait => {
                        let destination = socket.local_endpoint().map(|e| (e.addr, e.port));
                        ask(destination, self.socks, &self.names)
                    }
                    _ => None,
                },
                Phase::Asking { upstream, reply } => match answered(upstream, reply) {
                    // What the command sent while the proxy was answering goes now: nothing
                    // else would wake the loop for it (the proxy waits for those bytes), and
                    // a proxy slower to answer than the command to write (a TCP upstream's
                    // `CONNECT` first) would leave the connection stalled until a timer.
                    Some(Phase::Open(open)) => relay(open, socket),
                    other => other,
                },
                Phase::Open(open) => relay(open, socket),
            };
            match next {
                Some(phase) => self.flows[at].phase = phase,
                // Refused, failed or over: the command's side is reset if still open.
                None => {
                    let socket = self.sockets.get_mut::<tcp::Socket>(handle);
                    if socket.is_open() {
                        socket.abort();
                    }
                    self.flows[at].phase = Phase::Accepting;
                }
            }
        }
    }

    /// Forgets flows whose connection with the command is over.
    fn reap(&mut self) {
        let sockets = &mut self.sockets;
        self.flows.retain(|flow| {
            let socket = sockets.get::<tcp::Socket>(flow.handle);
            let over = matches!(socket.state(), tcp::State::Closed | tcp::State::TimeWait);
            if over {
                sockets.remove(flow.handle);
            }
            !over
        });
    }

    /// Sleeps until the device has a packet, a flow's SOCKS5 side is ready for what the flow
    /// waits on, or the stack has a timer due.
    fn wait(&mut self) -> std::io::Result<()> {
        let mut polled = vec![libc::pollfd {
            fd: self.tun.device.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        for flow in &self.flows {
            let socket = self.sockets.get::<tcp::Socket>(flow.handle);
            let (fd, events) = match &flow.phase {
                Phase::Accepting => continue,
                Phase::Asking { upstream, .. } => (upstream.as_raw_fd(), libc::POLLIN),
                Phase::Open(open) => {
                    let mut events = 0;
                    if open.early.is_empty() && !open.upstream_done && socket.can_send() {
                        events |= libc::POLLIN;
                    }
                    if open.blocked {
                        events |= libc::POLLOUT;
                    }
                    // Nothing wanted: left out, or its hang-up would wake this loop for ever.
                    if events == 0 {
                        continue;
                    }
                    (open.upstream.as_raw_fd(), events)
                }
            };
            polled.push(libc::pollfd { fd, events, revents: 0 });
        }
        let now = self.now();
        let timeout = match self.interface.poll_delay(now, &self.sockets) {
            Some(delay) => delay.total_millis().min(i32::MAX as u64) as i32,
            None => -1,
        };
        // SAFETY: `polled` holds valid entries for descriptors held by this relay.
        let ready =
            unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, timeout) };
        if ready < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() != ErrorKind::Interrupted {
                return Err(error);
            }
        }
        Ok(())
    }
}

/// The source, destination and TCP segment of an IP packet of either family; `None` for any
/// other packet (the stack answers or drops those itself).
fn tcp_of(packet: &[u8]) -> Option<(IpAddress, IpAddress, &[u8])> {
    match packet.first()? >> 4 {
        4 => {
            let ip = Ipv4Packet::new_checked(packet).ok()?;
            (ip.next_header() == IpProtocol::Tcp).then(|| {
                (IpAddress::Ipv4(ip.src_addr()), IpAddress::Ipv4(ip.dst_addr()), ip.payload())
            })
        }
        6 => {
            let ip = Ipv6Packet::new_checked(packet).ok()?;
            // A segment behind extension headers is no SYN a command's connect sends.
            (ip.next_header() == IpProtocol::Tcp).then(|| {
                (IpAddress::Ipv6(ip.src_addr()), IpAddress::Ipv6(ip.dst_addr()), ip.payload())
            })
        }
        _ => None,
    }
}

/// Opens the SOCKS5 connection for a connection the command made to `destination`: to the
/// name a made-up address was given for, or to the address itself.
fn ask(
    destination: Option<(IpAddress, u16)>,
    socks: SocketAddr,
    names: &Mutex<FakeNames>,
) -> Option<Phase> {
    let (address, port) = destination?;
    let address = match address {
        IpAddress::Ipv4(v4) => IpAddr::V4(v4),
        IpAddress::Ipv6(v6) => IpAddr::V6(v6),
    };
    let mut request = vec![5, 1, 0, 5, 1, 0];
    match address {
        _ if super::dns::is_made_up(address) => {
            let names = names.lock().unwrap_or_else(|poison| poison.into_inner());
            // An address in the range that was never handed out names nothing.
            let name = names.name_of(address)?;
            request.push(3);
            request.push(name.len() as u8);
            request.extend_from_slice(name.as_bytes());
        }
        IpAddr::V4(v4) => {
            request.push(1);
            request.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            request.push(4);
            request.extend_from_slice(&v6.octets());
        }
    }
    request.extend_from_slice(&port.to_be_bytes());
    let mut upstream = TcpStream::connect_timeout(&socks, FORWARDER_CONNECT_TIMEOUT).ok()?;
    upstream.set_nodelay(true).ok()?;
    // A few hundred bytes into a new connection's empty buffer: written whole.
    upstream.write_all(&request).ok()?;
    upstream.set_nonblocking(true).ok()?;
    Some(Phase::Asking { upstream, reply: Vec::new() })
}

/// Reads the proxy's answers (method, then the request's); the flow opens when both are in
/// and say yes.
fn answered(mut upstream: TcpStream, mut reply: Vec<u8>) -> Option<Phase> {
    let mut chunk = [0u8; MAX_SOCKS_REPLY];
    match upstream.read(&mut chunk) {
        Ok(0) => return None,
        Ok(size) => reply.extend_from_slice(&chunk[..size]),
        Err(error) if error.kind() == ErrorKind::WouldBlock => {}
        Err(_) => return None,
    }
    if reply.len() < 2 + 5 {
        return Some(Phase::Asking { upstream, reply });
    }
    if reply[..2] != [5, 0] || reply[2] != 5 || reply[3] != 0 {
        return None;
    }
    let address = match reply[5] {
        1 => 4,
        4 => 16,
        3 => 1 + usize::from(reply[6]),
        _ => return None,
    };
    let whole = 2 + 4 + address + 2;
    if reply.len() < whole {
        return Some(Phase::Asking { upstream, reply });
    }
    let early = reply.split_off(whole);
    Some(Phase::Open(Open {
        upstream,
        early,
        upstream_done: false,
        command_done: false,
        blocked: false,
    }))
}

/// Carries bytes both ways as far as both sides allow; `None` once the flow is over or broken.
fn relay(mut open: Open, socket: &mut tcp::Socket<'_>) -> Option<Phase> {
    // The command's bytes to the proxy.
    open.blocked = false;
    while socket.can_recv() {
        let upstream = &mut open.upstream;
        let written = socket.recv(|bytes| match upstream.write(bytes) {
            Ok(size) => (size, Ok(size)),
            Err(error) => (0, Err(error)),
        });
        match written {
            Ok(Ok(_)) => {}
            Ok(Err(error)) if error.kind() == ErrorKind::WouldBlock => {
                open.blocked = true;
                break;
            }
            Ok(Err(_)) | Err(_) => return None,
        }
    }
    // The command has finished sending and all it sent is through: the proxy is told.
    let finished = matches!(
        socket.state(),
        tcp::State::CloseWait | tcp::State::LastAck | tcp::State::Closing | tcp::State::TimeWait
    );
    if finished && !socket.can_recv() && !open.command_done {
        let _ = open.upstream.shutdown(Shutdown::Write);
        open.command_done = true;
    }
    // The proxy's bytes to the command.
    if !open.early.is_empty() && socket.can_send() {
        let sent = socket.send_slice(&open.early).ok()?;
        open.early.drain(..sent);
    }
    while open.early.is_empty() && !open.upstream_done && socket.can_send() {
        let upstream = &mut open.upstream;
        let read = socket.send(|space| match upstream.read(space) {
            Ok(size) => (size, Ok(size)),
            Err(error) => (0, Err(error)),
        });
        match read {
            Ok(Ok(0)) => open.upstream_done = true,
            Ok(Ok(_)) => {}
            Ok(Err(error)) if error.kind() == ErrorKind::WouldBlock => break,
            Ok(Err(_)) | Err(_) => return None,
        }
    }
    if open.upstream_done && open.early.is_empty() && socket.may_send() {
        socket.close();
    }
    Some(Phase::Open(open))
}
