//! The managed-network settings `codex exec-server` takes at startup
//! (`--linux-sandbox-transparent-tcp`, `--tcp-upstream-proxy HOST:PORT`,
//! `--proxy-private-ips-via-upstream`): checked as the reference checks them and kept in the
//! server's configuration. The first makes every sandboxed managed-proxy start transparent;
//! the other two are the upstream routing of every managed proxy
//! ([`ManagedNetwork::upstream_routing`], the engine's
//! [`tether_engine::network::proxy::upstream`]): every SOCKS5 connection through the TCP
//! upstream, private addresses through the executor's upstream proxies. The CLI hands both to
//! the process tables.

use std::fmt;
use std::net::Ipv6Addr;
use std::str::FromStr;

use tether_engine::network::proxy::upstream::{PrivateDestinations, TcpUpstream, UpstreamRouting};

/// Longest host name: DNS's limit on a name in text form, the reference's too.
const MAX_HOST_BYTES: usize = 253;

/// Longest label between dots (DNS's limit).
const MAX_LABEL_BYTES: usize = 63;

/// What the managed network is to do with sandboxed TCP, as the operator started the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManagedNetwork {
    /// Route sandboxed TCP through the managed SOCKS proxy.
    pub transparent_tcp: bool,
    /// The HTTP CONNECT proxy every connection from the managed SOCKS5 listener must go
    /// through; a start that would have no such listener of the executor's own is refused.
    pub tcp_upstream_proxy: Option<HostPort>,
    /// Send permitted private destinations through an upstream proxy that applies, instead of
    /// directly (loopback and link-local stay local).
    pub proxy_private_ips_via_upstream: bool,
}

impl ManagedNetwork {
    /// How the managed proxies reach past the executor, as these settings say.
    pub fn upstream_routing(&self) -> UpstreamRouting {
        let tcp = self.tcp_upstream_proxy.as_ref().map(|address| TcpUpstream {
            host: address.host.trim_start_matches('[').trim_end_matches(']').to_owned(),
            port: address.port,
        });
        let private = match self.proxy_private_ips_via_upstream {
            true => PrivateDestinations::ThroughUpstream,
            false => PrivateDestinations::Direct,
        };
        UpstreamRouting { tcp, private }
    }
}

/// A proxy's `HOST:PORT`: a host name (letters, digits, `-` and `_` between dots; a leading
/// `*.` or `.`, a trailing `.`) or a bracketed IPv6 address, and a port other than 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

/// Why a `HOST:PORT` was refused, in the words of the reference's parser (one line each).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostPortError {
    #[error("missing port")]
    MissingPort,
    #[error("parse port as u16: {0}")]
    Port(std::num::ParseIntError),
    #[error("TCP upstream proxy port must be nonzero")]
    ZeroPort,
    #[error("missing brackets for IPv6 address with port (in host-with-port)")]
    UnbracketedIpv6,
    #[error("parse host from host-with-port")]
    Host,
}

impl FromStr for HostPort {
    type Err = HostPortError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (host, port) = text.rsplit_once(':').ok_or(HostPortError::MissingPort)?;
        let port: u16 = port.parse().map_err(HostPortError::Port)?;
        if port == 0 {
            return Err(HostPortError::ZeroPort);
        }
        if host.parse::<Ipv6Addr>().is_ok() {
            return Err(HostPortError::UnbracketedIpv6);
        }
        let valid = match host.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
            Some(address) => address.parse::<Ipv6Addr>().is_ok(),
            None => is_host_name(host),
        };
        match valid {
            true => Ok(Self { host: host.to_owned(), port }),
            false => Err(HostPortError::Host),
        }
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// A host name as the reference takes one: ASCII labels of letters, digits, `-` (not at
/// either end) and `_`, none empty but for one leading `.` (or `*.`) and one trailing `.`.
fn is_host_name(host: &str) -> bool {
    let name = host.strip_prefix("*.").or_else(|| host.strip_prefix('.')).unwrap_or(host);
    let name = name.strip_suffix('.').unwrap_or(name);
    host.len() <= MAX_HOST_BYTES
        && !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= MAX_LABEL_BYTES
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_become_the_proxies_routing() {
        let settings = ManagedNetwork {
            transparent_tcp: false,
            tcp_upstream_proxy: Some("[fd00::1]:3128".parse().unwrap()),
            proxy_private_ips_via_upstream: true,
        };
        let routing = settings.upstream_routing();
        assert_eq!(routing.tcp, Some(TcpUpstream { host: "fd00::1".into(), port: 3128 }));
        assert_eq!(routing.private, PrivateDestinations::ThroughUpstream);
        assert_eq!(ManagedNetwork::default().upstream_routing(), UpstreamRouting::default());
    }

    /// What the reference accepts and refuses, as measured against Codex 0.171.
    #[test]
    fn host_and_port_are_read_as_the_reference_reads_them() {
        for accepted in [
            "proxy.internal:3128",
            "FOO:80",
            "foo_bar:80",
            "_:80",
            "1.2.3.4:80",
            "256.1.1.1:80",
            "foo.:80",
            ".foo:80",
            "*.foo:80",
            "foo:+80",
            "foo:080",
            "[::1]:80",
            "[::ffff:1.2.3.4]:80",
            "xn--nxasmq6b:65535",
        ] {
            assert!(accepted.parse::<HostPort>().is_ok(), "{accepted}");
        }
        let long_label = format!("{}:80", "a".repeat(64));
        let long_name = format!("{}x:80", format!("{}.", "a".repeat(63)).repeat(4));
        for (refused, why) in [
            ("foo", HostPortError::MissingPort),
            ("foo:0", HostPortError::ZeroPort),
            ("::1:80", HostPortError::UnbracketedIpv6),
            (":80", HostPortError::Host),
            ("http://foo:80", HostPortError::Host),
            ("foo bar:80", HostPortError::Host),
            ("é.com:80", HostPortError::Host),
            ("a..b:80", HostPortError::Host),
            ("foo..:80", HostPortError::Host),
            ("foo-:80", HostPortError::Host),
            ("a.-b:80", HostPortError::Host),
            ("foo*:80", HostPortError::Host),
            ("[1.2.3.4]:80", HostPortError::Host),
            ("[fe80::1%eth0]:80", HostPortError::Host),
            ("user@foo:80", HostPortError::Host),
            ("foo:80:90", HostPortError::Host),
            (long_label.as_str(), HostPortError::Host),
            (long_name.as_str(), HostPortError::Host),
        ] {
            assert_eq!(refused.parse::<HostPort>(), Err(why), "{refused}");
        }
        for bad_port in ["foo:99999", "foo:", "[::1]", "foo:80/x"] {
            assert!(
                matches!(bad_port.parse::<HostPort>(), Err(HostPortError::Port(_))),
                "{bad_port}"
            );
        }
        assert_eq!(
            HostPortError::Port("99999".parse::<u16>().unwrap_err()).to_string(),
            "parse port as u16: number too large to fit in target type"
        );
    }
}
