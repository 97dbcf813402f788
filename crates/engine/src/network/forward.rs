//! How a connection made inside a proxied sandbox reaches its process's proxy, which runs in
//! the server, outside the sandbox's network namespace.
//!
//! The sandbox has a network namespace of its own with only loopback, so nothing in it can
//! reach the host's `127.0.0.1`. Its inner stage (trusted, never filtered) listens on the
//! namespace's loopback at the ports the proxy variables name, and hands every connection it
//! accepts — the socket itself, as a descriptor ([`send`]) — to the proxy over a socket pair
//! made before the sandbox ([`pair`]). The proxy then serves that socket as if it had accepted
//! it ([`Receiver`]): no byte is copied by the inner stage, and the proxy never listens on any
//! host address, so no one but that sandbox can reach it.
//!
//! A message is one byte (which listener, [`Entry`]) with one descriptor, on a `SOCK_SEQPACKET`
//! pair so each arrives whole. A sandboxed command that took the inner stage's end could only
//! hand the proxy sockets of its own, which the proxy serves under the same policy.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Which of the sandbox's listeners a connection came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// The HTTP proxy (forward requests and `CONNECT`).
    Http,
    /// The SOCKS5 proxy.
    Socks,
    /// The SOCKS5 proxy's UDP relay (`UDP ASSOCIATE`): not a connection but the relay's socket
    /// itself, bound on the sandbox's loopback at the SOCKS5 port's number and handed over
    /// once, before the command starts. The proxy then reads and answers the command's
    /// datagrams on it from outside, so no byte of them passes through the inner stage
    /// either.
    Udp,
    /// The `n`th port of a proxy the caller runs on the host's loopback
    /// ([`super::bridge`]), below [`MAX_BRIDGED_PORTS`].
    Bridged(u8),
}

/// Ports of a caller's proxy one sandbox may be bridged to: a proxy has an HTTP and a SOCKS
/// port, and a caller with one per protocol has a handful; one digit each on the wire.
pub const MAX_BRIDGED_PORTS: usize = 10;

impl Entry {
    /// The byte that names this entry, in a hand-over and on the inner stage's command line.
    pub(crate) fn tag(self) -> u8 {
        match self {
            Entry::Http => b'h',
            Entry::Socks => b's',
            Entry::Udp => b'u',
            Entry::Bridged(n) => b'0' + n,
        }
    }

    pub(crate) fn from_tag(tag: u8) -> Option<Self> {
        match tag {
            b'h' => Some(Entry::Http),
            b's' => Some(Entry::Socks),
            b'u' => Some(Entry::Udp),
            b'0'..=b'9' => Some(Entry::Bridged(tag - b'0')),
            _ => None,
        }
    }
}

/// How a full sandbox reaches the way out it is given (a managed proxy, or the bridge to a
/// caller's proxy): the sandbox's end of the pair the server serves, and the ports its
/// forwarders listen on inside (what the proxy variables name), each with its entry.
#[derive(Debug)]
pub struct ProxyRoute {
    pub sandbox_end: OwnedFd,
    pub listeners: Vec<(Entry, u16)>,
    /// Whether every outbound TCP connection of the sandbox is carried to the SOCKS5 proxy
    /// ([`crate::sandbox::transparent`]), not only those the proxy variables send there.
    pub transparent: bool,
}

impl ProxyRoute {
    /// The port inside the sandbox that leads to `entry`.
    pub fn port(&self, entry: Entry) -> Option<u16> {
        self.listeners.iter().find(|(at, _)| *at == entry).map(|(_, port)| *port)
    }
}

/// A close-on-exec `SOCK_SEQPACKET` pair: the proxy's end, then the sandbox's.
pub fn pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Hands `connection` (or, for [`Entry::Udp`], the relay's socket) to the proxy at the other end of `socket` (blocking: for the inner
/// stage's forwarding thread).
pub fn send(
    socket: BorrowedFd<'_>,
    entry: Entry,
    connection: BorrowedFd<'_>,
) -> std::io::Result<()> {
    let fds = [connection];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&fds));
    let tag = [entry.tag()];
    rustix::net::sendmsg(socket, &[IoSlice::new(&tag)], &mut control, SendFlags::NOSIGNAL)?;
    Ok(())
}

/// The proxy's end: the connections the sandbox hands over, in order.
pub struct Receiver {
    socket: AsyncFd<OwnedFd>,
}

impl Receiver {
    /// Must be called within a Tokio runtime.
    pub fn new(socket: OwnedFd) -> std::io::Result<Self> {
        rustix::io::ioctl_fionbio(&socket, true)?;
        // SAFETY: the descriptor is owned here and moved into the `AsyncFd`, which
        // deregisters it before closing it.
        let socket = unsafe { AsyncFd::register_with_interest(socket, Interest::READABLE) }
            .map_err(|refused| refused.into_parts().1)?;
        Ok(Self { socket })
    }

    /// The next connection; `None` once the sandbox's end is closed (the sandbox is gone).
    /// A message without a descriptor or with an unknown tag is skipped.
    pub async fn next(&self) -> std::io::Result<Option<(Entry, OwnedFd)>> {
        loop {
            let mut guard = self.socket.readable().await?;
            let received = guard.try_io(|socket| receive(socket.get_ref().as_fd()));
            match received {
                Err(_would_block) => continue,
                Ok(Err(error)) => return Err(error),
                Ok(Ok(Received::Closed)) => return Ok(None),
                Ok(Ok(Received::Nothing)) => continue,
                Ok(Ok(Received::Connection(entry, fd))) => return Ok(Some((entry, fd))),
            }
        }
    }
}

enum Received {
    Closed,
    /// A message that carried no usable connection.
    Nothing,
    Connection(Entry, OwnedFd),
}

fn receive(socket: BorrowedFd<'_>) -> std::io::Result<Received> {
    let mut tag = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let message = rustix::net::recvmsg(
        socket,
        &mut [IoSliceMut::new(&mut tag)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
    )?;
    let mut fd = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            // More than one is not what the inner stage sends: each is closed as it drops.
            for received in fds {
                fd.get_or_insert(received);
            }
        }
    }
    if message.bytes == 0 && fd.is_none() {
        return Ok(Received::Closed);
    }
    Ok(match (Entry::from_tag(tag[0]), fd) {
        (Some(entry), Some(fd)) => Received::Connection(entry, fd),
        _ => Received::Nothing,
    })
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// A TCP connection handed over is the same connection: bytes written on the proxy's side
    /// of it reach the peer, and the end of the sandbox's side ends the receiver.
    #[tokio::test]
    async fn a_connection_crosses_whole_and_the_end_is_seen() {
        let (proxy_end, sandbox_end) = pair().unwrap();
        let receiver = Receiver::new(proxy_end).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        send(sandbox_end.as_fd(), Entry::Socks, accepted.as_fd()).unwrap();
        drop(accepted);
        let (entry, fd) = receiver.next().await.unwrap().unwrap();
        assert_eq!(entry, Entry::Socks);
        for entry in [Entry::Http, Entry::Socks, Entry::Udp, Entry::Bridged(0), Entry::Bridged(9)] {
            assert_eq!(Entry::from_tag(entry.tag()), Some(entry));
        }
        let mut handed = TcpStream::from(fd);
        handed.write_all(b"through").unwrap();
        drop(handed);
        let mut read = String::new();
        peer.read_to_string(&mut read).unwrap();
        assert_eq!(read, "through");
        drop(sandbox_end);
        assert!(receiver.next().await.unwrap().is_none());
    }
}
