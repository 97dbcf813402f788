//! The inner stage's forwarders for a proxied sandbox ([`super::seccomp::NetworkRule::Proxied`]):
//! listeners on the sandbox's own loopback, at the ports its proxy variables name, whose every
//! connection is handed to the process's proxy outside ([`crate::network::forward`]).
//!
//! They are bound before the command starts, so its first connection finds them, and served
//! by one thread of this stage after: `poll` on the listeners, `accept`, hand over, close.
//! The thread keeps no state per connection and copies no byte. Once the proxy is gone the
//! listeners close, so the command's next connection is refused rather than left waiting.

use std::ffi::OsStr;
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use crate::network::forward::{self, Entry};

/// Where the forwarders listen and whom they hand connections to: `FD,HTTP[,SOCKS]` on the
/// inner stage's command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The sandbox's end of the pair to the proxy, inherited.
    pub fd: i32,
    pub http: u16,
    pub socks: Option<u16>,
}

impl Route {
    pub fn to_arg(self) -> String {
        match self.socks {
            Some(socks) => format!("{},{},{socks}", self.fd, self.http),
            None => format!("{},{}", self.fd, self.http),
        }
    }

    pub fn parse(arg: &OsStr) -> Result<Self, String> {
        let text = arg.to_str().ok_or("--proxy takes FD,HTTP[,SOCKS]")?;
        let numbers: Vec<&str> = text.split(',').collect();
        let port = |at: usize| numbers.get(at).and_then(|n| n.parse::<u16>().ok());
        let fd = numbers.first().and_then(|n| n.parse::<i32>().ok()).filter(|fd| *fd > 2);
        let (Some(fd), Some(http)) = (fd, port(1)) else {
            return Err(format!("--proxy takes FD,HTTP[,SOCKS], got {text:?}"));
        };
        let socks = match numbers.len() {
            2 => None,
            3 => Some(port(2).ok_or_else(|| format!("--proxy: bad SOCKS port in {text:?}"))?),
            _ => return Err(format!("--proxy takes FD,HTTP[,SOCKS], got {text:?}")),
        };
        Ok(Self { fd, http, socks })
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
    pub fn bind(route: Route) -> std::io::Result<Self> {
        // SAFETY: the launcher passed this descriptor for this stage alone; nothing else in
        // this process uses it.
        let proxy = unsafe { OwnedFd::from_raw_fd(route.fd) };
        let bind = |port: u16| {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
            // A connection reset between `poll` and `accept` must not block the thread.
            listener.set_nonblocking(true)?;
            Ok::<_, std::io::Error>(listener)
        };
        let mut listeners = vec![(Entry::Http, bind(route.http)?)];
        if let Some(socks) = route.socks {
            listeners.push((Entry::Socks, bind(socks)?));
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
            Route { fd: 5, http: 3128, socks: None },
            Route { fd: 9, http: 40001, socks: Some(40002) },
        ] {
            assert_eq!(Route::parse(OsStr::new(&route.to_arg())), Ok(route));
        }
        for bad in ["", "5", "x,1", "5,1,2,3", "5,99999"] {
            assert!(Route::parse(OsStr::new(bad)).is_err(), "{bad}");
        }
    }
}
