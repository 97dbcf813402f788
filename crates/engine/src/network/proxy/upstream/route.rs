//! Which destinations an upstream proxy may carry, as the reference's proxy decides it
//! (Codex 0.171, measured on the wire):
//!
//! - a name goes through an upstream that applies, whatever it resolves to — but `localhost`,
//!   which is the executor itself;
//! - an address that is not public ([`is_local`]: loopback, link-local, documentation,
//!   multicast, …) is the executor's own side of the network, which an upstream proxy
//!   elsewhere would take for its own: it is reached directly;
//! - a private network address (RFC 1918, carrier-grade NAT `100.64/10`, IPv6 unique-local,
//!   and those written as IPv4-mapped IPv6) is reached directly too, unless the operator
//!   routes private addresses through the upstream (`--proxy-private-ips-via-upstream`), for
//!   networks the executor reaches only that way.
//!
//! Only what the request names counts: a name that resolves to a private address is a name.
//! Routing decides where an allowed connection goes, never whether it is allowed: the policy
//! has decided by then.

use std::net::IpAddr;

use crate::network::domains::is_local;

/// Where a private network address goes when an upstream applies to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PrivateDestinations {
    /// Directly, as every address on the executor's side of the network (the reference's
    /// default).
    #[default]
    Direct,
    /// Through the upstream (`--proxy-private-ips-via-upstream`).
    ThroughUpstream,
}

/// Whether a connection to `host` (as policies compare it: lower case, no trailing dot, an
/// address without brackets) may go through an upstream proxy.
pub fn may_go_upstream(host: &str, private: PrivateDestinations) -> bool {
    match host.parse::<IpAddr>() {
        Ok(address) => may_carry_address(address, private),
        Err(_) => host != "localhost",
    }
}

/// Whether an upstream may carry a connection to `address`.
pub fn may_carry_address(address: IpAddr, private: PrivateDestinations) -> bool {
    !is_local(address)
        || (private == PrivateDestinations::ThroughUpstream && is_private_network(address))
}

/// A private network address: RFC 1918's three blocks, carrier-grade NAT (`100.64.0.0/10`),
/// IPv6 unique-local (`fc00::/7`), or one of those mapped into IPv6 (`::ffff:10.0.0.1`).
/// Loopback and link-local are not: they never leave the executor's host or link.
pub fn is_private_network(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_private() || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_private_network(IpAddr::V4(v4)),
            None => (v6.segments()[0] & 0xfe00) == 0xfc00,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each destination, and whether it goes through the upstream without and with
    /// `--proxy-private-ips-via-upstream`, as the reference routes it (the ranges measured
    /// on the wire, the rest from the table of its own routing tests).
    #[test]
    fn destinations_are_routed_as_the_reference_routes_them() {
        let cases = [
            ("10.0.0.1", false, true),
            ("172.16.0.1", false, true),
            ("192.168.0.1", false, true),
            ("100.64.0.1", false, true),
            ("100.127.255.255", false, true),
            ("fd00::1", false, true),
            ("fc00::1", false, true),
            ("::ffff:10.0.0.1", false, true),
            ("::ffff:100.68.58.50", false, true),
            ("127.0.0.1", false, false),
            ("::1", false, false),
            ("::ffff:127.0.0.1", false, false),
            ("169.254.169.254", false, false),
            ("fe80::1", false, false),
            ("0.0.0.0", false, false),
            ("224.0.0.1", false, false),
            ("192.0.2.1", false, false),
            ("240.0.0.1", false, false),
            ("localhost", false, false),
            ("example.test", true, true),
            ("foo.localhost", true, true),
            ("8.8.4.4", true, true),
            ("100.63.255.255", true, true),
            ("100.128.0.0", true, true),
        ];
        for (host, by_default, with_flag) in cases {
            let through = |private| may_go_upstream(host, private);
            assert_eq!(through(PrivateDestinations::Direct), by_default, "{host}");
            assert_eq!(through(PrivateDestinations::ThroughUpstream), with_flag, "{host} (flag)");
        }
    }
}
