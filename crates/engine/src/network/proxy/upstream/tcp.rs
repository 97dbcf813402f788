//! The operator's mandatory TCP upstream (`--tcp-upstream-proxy HOST:PORT`): every connection
//! a launch's SOCKS5 listener carries (transparent TCP's included) goes through this HTTP
//! `CONNECT` proxy, or does not go at all. The HTTP listener is not held to it: its forward
//! requests and tunnels go as [`super::executor`] says, as the reference's do.
//!
//! A connection the policy allowed is checked again here, in the reference's order (Codex
//! 0.171, measured on the wire), each refusal in its words (logged; the command gets a SOCKS5
//! "connection refused", as from the reference):
//!
//! 1. the launch does not allow upstream proxies (`allowUpstreamProxy`): nothing can go, since
//!    nothing may go directly;
//! 2. the destination is the upstream itself (its name or address, and its port): a tunnel
//!    into the proxy through the proxy. An address is compared again, once connected, with
//!    the address the upstream's name reached;
//! 3. an address an upstream may not carry ([`super::route`]: the executor's own side of the
//!    network; a private one unless the operator routes those through the upstream): it could
//!    be reached only directly;
//! 4. a name, unless the launch allows local destinations (`allowLocalBinding`): the upstream
//!    resolves it, so the proxy could not hold the connection to public addresses; and
//!    `localhost` or a name under it always, which names the executor itself;
//! 5. the upstream's answer to the `CONNECT` is not 2xx.
//!
//! The `CONNECT` names the destination as the command did (a name keeps its case and a
//! trailing dot; an IPv6 address is bracketed). The upstream is named by the operator and
//! trusted to be what the flag says: no credentials, plain HTTP.

use std::net::{IpAddr, SocketAddr};

use tokio::net::TcpStream;

use super::route::{PrivateDestinations, may_carry_address};
use super::{TunnelError, authority, connect_to, open_tunnel};

/// The refusal of a start that would have no proxy of the executor's own to hold to the
/// upstream (`enforceManagedNetwork` or `managedNetwork` without `networkProxy`), in the
/// reference's words (`-32602`).
pub const NEEDS_EXECUTOR_LOCAL_PROXY: &str =
    "a mandatory TCP upstream requires an executor-local managed proxy";

/// Where the mandatory TCP upstream is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpUpstream {
    /// A name, or an address without brackets.
    pub host: String,
    pub port: u16,
}

/// The mandatory TCP upstream as one launch goes through it.
#[derive(Debug, Clone)]
pub struct TcpRoute {
    pub upstream: TcpUpstream,
    /// `allowUpstreamProxy`.
    pub allow_upstream: bool,
    /// `allowLocalBinding`.
    pub allow_local: bool,
    pub private: PrivateDestinations,
}

/// A SOCKS5 connection's destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination<'a> {
    Address(SocketAddr),
    /// As the command named it.
    Name {
        name: &'a str,
        port: u16,
    },
}

impl<'a> Destination<'a> {
    /// `host` as the command named it: an address (a name that is an address literal counts
    /// as one), or a name.
    pub fn of(host: &'a str, port: u16) -> Self {
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        match literal.parse::<IpAddr>() {
            Ok(address) => Self::Address(SocketAddr::new(address, port)),
            Err(_) => Self::Name { name: host, port },
        }
    }

    fn authority(&self) -> String {
        match self {
            Self::Address(address) => address.to_string(),
            Self::Name { name, port } => authority(name, *port),
        }
    }
}

/// Why a connection did not go through the TCP upstream, in the reference's words. Logged,
/// never told to the command beyond its SOCKS5 reply.
#[derive(Debug, thiserror::Error)]
pub enum TcpUpstreamError {
    #[error("upstream proxies are disabled by network policy")]
    Disabled,
    #[error("cannot tunnel back into the TCP upstream proxy")]
    Loop,
    #[error("IP destination cannot use the TCP upstream proxy")]
    AddressStaysLocal,
    #[error("destination requires local address enforcement")]
    NeedsLocalEnforcement,
    #[error("connect to the TCP upstream proxy")]
    Connect(#[source] std::io::Error),
    #[error("missing TCP upstream peer address")]
    NoPeer(#[source] std::io::Error),
    #[error("TCP upstream tunnel not opened")]
    Tunnel(#[source] TunnelError),
}

impl TcpRoute {
    /// A tunnel to `destination` through the upstream, or why there is none.
    pub async fn open(&self, destination: Destination<'_>) -> Result<TcpStream, TcpUpstreamError> {
        self.check(destination)?;
        let stream = connect_to(&self.upstream.host, self.upstream.port)
            .await
            .map_err(TcpUpstreamError::Connect)?;
        if let Destination::Address(address) = destination {
            let peer = stream.peer_addr().map_err(TcpUpstreamError::NoPeer)?;
            if same_endpoint(peer, address) {
                return Err(TcpUpstreamError::Loop);
            }
        }
        open_tunnel(stream, &destination.authority(), None).await.map_err(TcpUpstreamError::Tunnel)
    }

    /// What can be refused before the upstream is reached (the module's steps 1 to 4).
    fn check(&self, destination: Destination<'_>) -> Result<(), TcpUpstreamError> {
        if !self.allow_upstream {
            return Err(TcpUpstreamError::Disabled);
        }
        if self.is_upstream(destination) {
            return Err(TcpUpstreamError::Loop);
        }
        match destination {
            Destination::Address(address) if !may_carry_address(address.ip(), self.private) => {
                Err(TcpUpstreamError::AddressStaysLocal)
            }
            Destination::Address(_) => Ok(()),
            Destination::Name { name, .. } if !self.allow_local || names_localhost(name) => {
                Err(TcpUpstreamError::NeedsLocalEnforcement)
            }
            Destination::Name { .. } => Ok(()),
        }
    }

    /// Whether `destination` is the upstream as the operator named it.
    fn is_upstream(&self, destination: Destination<'_>) -> bool {
        let upstream = &self.upstream;
        match (destination, upstream.host.parse::<IpAddr>()) {
            (Destination::Address(address), Ok(ip)) => {
                same_endpoint(address, SocketAddr::new(ip, upstream.port))
            }
            (Destination::Name { name, port }, Err(_)) => {
                port == upstream.port && normalized(name) == normalized(&upstream.host)
            }
            _ => false,
        }
    }
}

/// The same address and port, an IPv4 address and its IPv4-mapped IPv6 form alike.
fn same_endpoint(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && a.ip().to_canonical() == b.ip().to_canonical()
}

/// A name as names are compared: lower case, no trailing dot.
fn normalized(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// `localhost` or a name under it (`*.localhost`), which resolve to the executor itself.
fn names_localhost(name: &str) -> bool {
    let name = normalized(name);
    name == "localhost" || name.ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(allow_upstream: bool, allow_local: bool, private: PrivateDestinations) -> TcpRoute {
        let upstream = TcpUpstream { host: "proxy.test".into(), port: 3128 };
        TcpRoute { upstream, allow_upstream, allow_local, private }
    }

    /// Each destination, and what the reference did with it under a mandatory TCP upstream
    /// (`None`: went through), by the launch's `allowUpstreamProxy` and `allowLocalBinding`
    /// and the operator's routing of private addresses.
    #[test]
    fn connections_are_refused_in_the_references_order() {
        use PrivateDestinations::{Direct, ThroughUpstream};
        use TcpUpstreamError as E;
        let refusal = |route: &TcpRoute, host: &str, port: u16| {
            route.check(Destination::of(host, port)).err().map(|e| e.to_string())
        };
        let words = |e: E| Some(e.to_string());
        let open = route(true, true, Direct);
        assert_eq!(refusal(&open, "example.test", 80), None);
        assert_eq!(refusal(&open, "Example.Test.", 80), None);
        assert_eq!(refusal(&open, "8.8.4.4", 80), None);
        assert_eq!(refusal(&open, "::ffff:8.8.4.4", 80), None);
        for local in ["10.0.0.1", "100.64.0.1", "fd00::77", "::ffff:10.0.0.1"] {
            assert_eq!(refusal(&open, local, 80), words(E::AddressStaysLocal), "{local}");
            let flagged = route(true, true, ThroughUpstream);
            assert_eq!(refusal(&flagged, local, 80), None, "{local} (flag)");
        }
        for local in ["127.0.0.1", "::1", "169.254.7.7", "192.0.2.77", "[::1]"] {
            let flagged = route(true, true, ThroughUpstream);
            assert_eq!(refusal(&flagged, local, 80), words(E::AddressStaysLocal), "{local}");
        }
        for name in ["localhost", "LOCALHOST", "localhost.", "foo.localhost"] {
            assert_eq!(refusal(&open, name, 80), words(E::NeedsLocalEnforcement), "{name}");
        }
        let unbound = route(true, false, ThroughUpstream);
        assert_eq!(refusal(&unbound, "example.test", 80), words(E::NeedsLocalEnforcement));
        assert_eq!(refusal(&unbound, "8.8.4.4", 80), None);
        let disabled = route(false, true, ThroughUpstream);
        assert_eq!(refusal(&disabled, "example.test", 80), words(E::Disabled));
        assert_eq!(refusal(&disabled, "proxy.test", 3128), words(E::Disabled));
        assert_eq!(refusal(&open, "PROXY.test", 3128), words(E::Loop));
        assert_eq!(refusal(&open, "proxy.test", 3129), None);
        let by_address = TcpRoute {
            upstream: TcpUpstream { host: "127.0.0.1".into(), port: 3128 },
            ..route(true, true, Direct)
        };
        assert_eq!(refusal(&by_address, "127.0.0.1", 3128), words(E::Loop));
        assert_eq!(refusal(&by_address, "::ffff:127.0.0.1", 3128), words(E::Loop));
        assert_eq!(refusal(&by_address, "127.0.0.1", 3129), words(E::AddressStaysLocal));
    }

    #[test]
    fn a_connect_names_the_destination_as_the_command_did() {
        let authority = |host: &str| Destination::of(host, 443).authority();
        assert_eq!(authority("Example.Test."), "Example.Test.:443");
        assert_eq!(authority("fd00::77"), "[fd00::77]:443");
        assert_eq!(authority("[fd00::77]"), "[fd00::77]:443");
        assert_eq!(authority("8.8.4.4"), "8.8.4.4:443");
    }
}
