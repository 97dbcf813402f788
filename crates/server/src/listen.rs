//! Parsing `--listen`: `ws://HOST:PORT`, `wss://HOST:PORT` or `stdio`.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs as _};
use std::str::FromStr;

/// The default: loopback, an ephemeral port. Exposing an executor is a decision, not a default.
pub const DEFAULT_LISTEN: &str = "ws://127.0.0.1:0";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddress {
    /// A WebSocket listener; `tls` when the URL said `wss://` (the TLS settings must then be
    /// given: [`crate::Server::bind`] refuses otherwise).
    WebSocket {
        addr: SocketAddr,
        tls: bool,
    },
    Stdio,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenAddressError {
    #[error("invalid websocket --listen URL {0}; expected ws://HOST:PORT or wss://HOST:PORT")]
    InvalidWebSocket(String),
    #[error("--listen {url}: cannot resolve the host name {host}: {reason}")]
    UnresolvedHost { url: String, host: String, reason: String },
    #[error("unsupported --listen URL {0}; expected ws://HOST:PORT, wss://HOST:PORT or stdio")]
    Unsupported(String),
}

impl FromStr for ListenAddress {
    type Err = ListenAddressError;

    /// A host name is resolved here, once (`localhost` from `/etc/hosts`); of its addresses
    /// the first IPv4 one is taken, as most clients try it first.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "stdio" || text == "stdio://" {
            return Ok(ListenAddress::Stdio);
        }
        let (rest, tls) = match (text.strip_prefix("ws://"), text.strip_prefix("wss://")) {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            (None, None) => return Err(ListenAddressError::Unsupported(text.to_owned())),
        };
        let authority = rest.trim_end_matches('/');
        if let Ok(addr) = authority.parse() {
            return Ok(ListenAddress::WebSocket { addr, tls });
        }
        let invalid = || ListenAddressError::InvalidWebSocket(text.to_owned());
        let (host, port) = authority.rsplit_once(':').ok_or_else(invalid)?;
        let port: u16 = port.parse().map_err(|_| invalid())?;
        if host.is_empty() || host.contains(['/', '@', '[', ']']) {
            return Err(invalid());
        }
        let unresolved = |reason: String| ListenAddressError::UnresolvedHost {
            url: text.to_owned(),
            host: host.to_owned(),
            reason,
        };
        let addrs: Vec<SocketAddr> =
            (host, port).to_socket_addrs().map_err(|e| unresolved(e.to_string()))?.collect();
        let addr = addrs
            .iter()
            .find(|addr| addr.is_ipv4())
            .or(addrs.first())
            .copied()
            .ok_or_else(|| unresolved("it has no address".into()))?;
        Ok(ListenAddress::WebSocket { addr, tls })
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddress::WebSocket { addr, tls: false } => write!(f, "ws://{addr}"),
            ListenAddress::WebSocket { addr, tls: true } => write!(f, "wss://{addr}"),
            ListenAddress::Stdio => f.write_str("stdio"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn websocket(addr: &str, tls: bool) -> Result<ListenAddress, ListenAddressError> {
        Ok(ListenAddress::WebSocket { addr: addr.parse().unwrap(), tls })
    }

    #[test]
    fn parses_the_accepted_forms() {
        assert_eq!(DEFAULT_LISTEN.parse(), websocket("127.0.0.1:0", false));
        assert_eq!("stdio".parse(), Ok(ListenAddress::Stdio));
        assert_eq!("stdio://".parse(), Ok(ListenAddress::Stdio));
        assert_eq!("ws://[::1]:9000".parse(), websocket("[::1]:9000", false));
        assert_eq!("wss://127.0.0.1:8443/".parse(), websocket("127.0.0.1:8443", true));
        assert_eq!("ws://localhost:9000".parse(), websocket("127.0.0.1:9000", false));
        assert_eq!("wss://localhost:0".parse(), websocket("127.0.0.1:0", true));
    }

    #[test]
    fn refuses_malformed_addresses_and_other_schemes() {
        for (text, message) in [
            (
                "ws://localhost",
                "invalid websocket --listen URL ws://localhost; expected ws://HOST:PORT or wss://HOST:PORT",
            ),
            (
                "ws://user@localhost:1",
                "invalid websocket --listen URL ws://user@localhost:1; expected ws://HOST:PORT or wss://HOST:PORT",
            ),
            (
                "tcp://127.0.0.1:1",
                "unsupported --listen URL tcp://127.0.0.1:1; expected ws://HOST:PORT, wss://HOST:PORT or stdio",
            ),
        ] {
            assert_eq!(text.parse::<ListenAddress>().unwrap_err().to_string(), message);
        }
        let error = "ws://no-such-host.invalid:1".parse::<ListenAddress>().unwrap_err();
        assert!(matches!(error, ListenAddressError::UnresolvedHost { .. }), "{error}");
    }
}
