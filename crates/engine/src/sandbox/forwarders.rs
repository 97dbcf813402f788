//! The inner stage's forwarders for a proxied sandbox ([`super::seccomp::NetworkRule::Proxied`]):
//! listeners on the sandbox's own loopback, at the ports its proxy variables name, whose every
//! connection is handed to the process's proxy outside ([`crate::network::forward`]).
//!
//! They are bound before the command starts, so its first connection finds them, and served
//! by one thread of this stage after: `poll` on the listeners, `accept`, hand over, close.
//! The thread keeps no state per connection and copies no byte. Once the proxy is gone the
//! listeners close, so the command's next connection is refused rather than left waiting.
//!
//! The SOCKS5 UDP relay ([`Entry::Udp`]) is a socket, not a listener: bound here too, and
//! handed to the proxy at once, before any connection, so the proxy has it by the time a
//! command asks for an association. This stage keeps no copy of it.

use std::ffi::OsStr;
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use crate::network::forward::{self, Entry};

/// Where the forwarders listen and whom they hand connections to: `FD,ENTRY=PORT,…` on the
/// inner stage's command line (`h` the HTTP proxy, `s` the SOCKS5 one, a digit a bridged port
/// of the caller's proxy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The sandbox's end of the pair to the server, inherited.
    pub fd: i32,
    pub listeners: Vec<(Entry, u16)>,
}

impl Route {
    pub fn to_arg(&self) -> String {
        let mut arg = self.fd.to_string();
        for (entry, port) in &self.listeners {
            arg.push_str(&format!(",{}={port}", char::from(entry.tag())));
        }
        arg
    }

    pub fn parse(arg: &OsStr) -> Result<Self, String> {
        let bad = || format!("--proxy takes FD,ENTRY=PORT,…, got {arg:?}");
        let text = arg.to_str().ok_or_else(bad)?;
        let mut parts = text.split(',');
        let fd = parts.next().and_then(|n| n.parse::<i32>().ok()).filter(|fd| *fd > 2);
        let fd = fd.ok_or_else(bad)?;
        let mut listeners = Vec::new();
        for part in parts {
            let (tag, port) = part.split_once('=').ok_or_else(bad)?;
            let entry = match tag.as_bytes() {
                [tag] => Entry::from_tag(*tag).ok_or_else(bad)?,
                _ => return Err(bad()),
            };
            let port = port.parse::<u16>().ok().filter(|port| *port > 0).ok_or_else(bad)?;
            if listeners.iter().any(|(at, _)| *at == entry) {
                return Err(bad());
            }
            listeners.push((entry, port));
        }
        if listeners.is_empty() {
            return Err(bad());
        }
        Ok(Self { fd, listeners })
    }

    /// The port inside the sandbox that leads to `entry`.
    pub fn port(&self, entry: Entry) -> Option<u16> {
        self.listeners.iter().find(|(at, _)| *at == entry).map(|(_, port)| *port)
    }
}

/// The bound listeners, ready to serve.
pub struct Forwarders {
    proxy: OwnedFd,
    listeners: Vec<(Entry, TcpListener)>,
}

impl Forwarders {
    /// Binds the route's ports on the sandbox's loopback (close-on-exec: the command never
    /// holds them) and takes the pair's end.
    pub fn bind(route: &Route) -> std::io::Result<Self> {
        // SAFETY: the launcher passed this descriptor for this stage alone; nothing else in
        // this process uses it.
        let proxy = unsafe { OwnedFd::from_raw_fd(route.fd) };
        let bind = |port: u16| {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
            // A connection reset between `poll` and `accept` must not block the thread.
            listener.set_nonblocking(true)?;
            Ok::<_, std::io::Error>(listener)
        };
        let mut listeners = Vec::new();
        for (entry, port) in &route.listeners {
            match entry {
                Entry::Udp => {
                    let relay = UdpSocket::bind((Ipv4Addr::LOCALHOST, *port))?;
                    forward::send(proxy.as_fd(), Entry::Udp, relay.as_fd())?;
                }
                _ => listeners.push((*entry, bind(*port)?)),
            }
        }
        Ok(Self { proxy, listeners })
    }

    /// Serves on a thread of its own until the proxy is gone.
    pub fn start(self) {
        std::thread::spawn(move || self.serve());
    }

    fn serve(self) {
        let mut polled: Vec<libc::pollfd> = self
            .listeners
            .iter()
            .map(|(_, listener)| libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        loop {
            // SAFETY: `polled` holds valid entries for descriptors this value owns.
            let ready =
                unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) };
            if ready < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return;
            }
            for (at, (entry, listener)) in self.listeners.iter().enumerate() {
                if polled[at].revents == 0 {
                    continue;
                }
                polled[at].revents = 0;
                let Ok((connection, _)) = listener.accept() else { continue };
                match forward::send(self.proxy.as_fd(), *entry, connection.as_fd()) {
                    Ok(()) => {}
                    // The proxy is gone (its process closed): nothing will serve again.
                    Err(error) if proxy_gone(&error) => return,
                    // Too many descriptors in flight, or no memory for one more: this
                    // connection is closed, the next one may pass.
                    Err(_) => {}
                }
            }
        }
    }
}

/// Whether a failed hand-over means the proxy's end is closed.
fn proxy_gone(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EPIPE | libc::ECONNRESET | libc::ECONNREFUSED | libc::ENOTCONN)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_read_back_as_written() {
        for route in [
            Route { fd: 5, listeners: vec![(Entry::Http, 3128)] },
            Route { fd: 9, listeners: vec![(Entry::Http, 40001), (Entry::Socks, 40002)] },
            Route { fd: 8, listeners: vec![(Entry::Socks, 40002), (Entry::Udp, 40002)] },
            Route { fd: 7, listeners: vec![(Entry::Bridged(0), 3), (Entry::Bridged(9), 4)] },
        ] {
            assert_eq!(Route::parse(OsStr::new(&route.to_arg())), Ok(route));
        }
        for bad in ["", "5", "x,h=1", "5,h=1,h=2", "5,h=99999", "5,q=1", "5,h=0", "2,h=1", "5,1"] {
            assert!(Route::parse(OsStr::new(bad)).is_err(), "{bad}");
        }
    }
}
