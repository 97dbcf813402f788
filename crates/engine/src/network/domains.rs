//! The domain policy of a managed network proxy (`networkProxy.proxy.domains`: host pattern →
//! `allow` or `deny`), deciding each destination as the reference's proxy decides it (measured
//! on the wire against Codex 0.171's; `managed-network.md` §5):
//!
//! - Patterns: `example.com` (that host), `*.example.com` (any name below it, at any depth, not
//!   the domain itself), `**.example.com` (the domain and any name below it), `*` (every name).
//!   Names compare without case and without a trailing dot. A pattern marked `none` decides
//!   nothing.
//! - A deny pattern wins over every allow.
//! - A local destination — `localhost`, a loopback, private, link-local or unspecified address —
//!   is refused as local (`not_allowed_local`) unless that very name or address is allowed
//!   exactly (a wildcard does not count), or local binding is allowed for the launch.
//! - Every destination, local ones included, must then match an allow pattern (`not_allowed`
//!   otherwise, which a decider may still approve). Local binding only lifts the refusal as
//!   local; it allows no destination of its own.
//! - A name that matches is then resolved, and refused as local when it resolves to a local
//!   address or not at all: a name the proxy cannot place could be anything, so it fails
//!   closed.
//!
//! The decision is split in two ([`DomainPolicy::decide`] on the name, then
//! [`DomainPolicy::admit_addresses`] on what it resolved to), so the proxy connects to exactly
//! the addresses that were checked, never resolving the name a second time.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// Why a destination was refused, as the reference names it in its decisions and 403 bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A deny pattern matched.
    Denied,
    /// No allow pattern matched.
    NotAllowed,
    /// A local or private destination, or a name that resolves to one (or to nothing).
    NotAllowedLocal,
}

impl Refusal {
    /// The decision's `reason`.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Denied => "denied",
            Refusal::NotAllowed => "not_allowed",
            Refusal::NotAllowedLocal => "not_allowed_local",
        }
    }

    /// The 403 body's `message`.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Denied => "Domain denied by the sandbox policy.",
            Refusal::NotAllowed => "Domain not in allowlist.",
            Refusal::NotAllowedLocal => "Sandbox policy blocks local/private network addresses.",
        }
    }
}

/// What a name is allowed to do before it is resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Refused without resolving anything.
    Refused(Refusal),
    /// An address, or a name allowed exactly as a local one: connect to it as it is.
    Connect,
    /// An allowed name: resolve it, then [`DomainPolicy::admit_addresses`].
    Resolve,
}

/// One host pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    /// `*`.
    Any,
    Exact(String),
    /// `*.domain`: names below `domain`.
    Below(String),
    /// `**.domain`: `domain` and names below it.
    AtOrBelow(String),
}

impl Pattern {
    fn parse(text: &str) -> Self {
        let text = normalized(text);
        if text == "*" {
            Pattern::Any
        } else if let Some(domain) = text.strip_prefix("**.") {
            Pattern::AtOrBelow(domain.to_owned())
        } else if let Some(domain) = text.strip_prefix("*.") {
            Pattern::Below(domain.to_owned())
        } else {
            Pattern::Exact(text)
        }
    }

    fn matches(&self, host: &str) -> bool {
        let below = |domain: &str| {
            host.len() > domain.len() + 1
                && host.ends_with(domain)
                && host.as_bytes()[host.len() - domain.len() - 1] == b'.'
        };
        match self {
            Pattern::Any => true,
            Pattern::Exact(name) => host == name,
            Pattern::Below(domain) => below(domain),
            Pattern::AtOrBelow(domain) => host == domain || below(domain),
        }
    }
}

/// A launch's domain policy.
#[derive(Debug, Clone, Default)]
pub struct DomainPolicy {
    allow: Vec<Pattern>,
    deny: Vec<Pattern>,
    /// `allowLocalBinding`: local destinations are not refused as local (an allow pattern must
    /// still match them).
    allow_local: bool,
}

/// A `domains` map the reference refuses, in its words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainsError {
    #[error("unknown variant `{0}`, expected one of `none`, `allow`, `deny`")]
    UnknownDecision(String),
    #[error("invalid network proxy config: domain pattern is empty")]
    EmptyPattern,
}

impl DomainPolicy {
    /// The policy of `domains` (absent: nothing is allowed), with local destinations allowed
    /// or not.
    pub fn new(
        domains: Option<&BTreeMap<String, String>>,
        allow_local: bool,
    ) -> Result<Self, DomainsError> {
        let mut policy = Self { allow_local, ..Self::default() };
        for (pattern, decision) in domains.into_iter().flatten() {
            let list = match decision.as_str() {
                "allow" => &mut policy.allow,
                "deny" => &mut policy.deny,
                "none" => continue,
                other => return Err(DomainsError::UnknownDecision(other.to_owned())),
            };
            if pattern.trim().is_empty() {
                return Err(DomainsError::EmptyPattern);
            }
            list.push(Pattern::parse(pattern));
        }
        Ok(policy)
    }

    /// Whether local destinations are allowed (`allowLocalBinding`).
    pub fn allows_local(&self) -> bool {
        self.allow_local
    }

    /// The verdict on `host` (a name or an address literal) before anything is resolved.
    ///
    /// `allowLocalBinding` is not an allow: the reference (Codex 0.171's proxy, measured on
    /// the wire) lets it lift only the refusal of a local destination as local. `127.0.0.1`,
    /// `localhost` or the host's own LAN address on no allow list is still `not_allowed` (and
    /// asked of a decider, when the launch has one), so a command reaches no service on the
    /// executor's side of the network that the policy, or its decider, did not name.
    pub fn decide(&self, host: &str) -> Verdict {
        let host = normalized(host);
        if self.deny.iter().any(|pattern| pattern.matches(&host)) {
            return Verdict::Refused(Refusal::Denied);
        }
        let literal = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().ok();
        let local_literal = host == "localhost" || literal.is_some_and(is_local);
        if local_literal && !self.allow_local {
            let exactly = self.allow.iter().any(|pattern| *pattern == Pattern::Exact(host.clone()));
            if !exactly {
                return Verdict::Refused(Refusal::NotAllowedLocal);
            }
        }
        if !self.allow.iter().any(|pattern| pattern.matches(&host)) {
            return Verdict::Refused(Refusal::NotAllowed);
        }
        // `localhost` is local by its name: it is reached as it is, never refused for what it
        // resolves to.
        match local_literal || literal.is_some() {
            true => Verdict::Connect,
            false => Verdict::Resolve,
        }
    }

    /// Whether an allowed name may be reached at `addresses` (what it resolved to): not when
    /// it resolved to nothing, nor to any local address unless local binding is allowed.
    pub fn admit_addresses(&self, addresses: &[IpAddr]) -> Result<(), Refusal> {
        let local = addresses.is_empty() || addresses.iter().copied().any(is_local);
        match local && !self.allow_local {
            true => Err(Refusal::NotAllowedLocal),
            false => Ok(()),
        }
    }
}

/// A host as policies compare it: lower case, no trailing dot.
fn normalized(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// An address that is not a public destination, as the reference's proxy counts them
/// (measured literal by literal against 0.171's): loopback, private, link-local, shared
/// (carrier-grade NAT), unspecified, `0/8`, the IETF protocol block `192.0.0/24`, the
/// documentation and benchmarking ranges, multicast, reserved `240/4` and broadcast; in IPv6,
/// loopback, unspecified, unique-local, link-local, multicast, and an IPv4 address mapped or
/// embedded (`::a.b.c.d`) that is one of those. Such an address is on the executor's own side
/// of the network (or nowhere), which a sandboxed command must not reach by a name.
pub fn is_local(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_multicast()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && c == 0)
                || (a == 198 && (b == 18 || b == 19))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_local(IpAddr::V4(v4));
            }
            let segments = v6.segments();
            if segments[..6].iter().all(|s| *s == 0) && !v6.is_loopback() && !v6.is_unspecified() {
                // `::a.b.c.d`, the deprecated IPv4-compatible form.
                let [.., high, low] = segments;
                let v4 = std::net::Ipv4Addr::from((u32::from(high) << 16) | u32::from(low));
                return is_local(IpAddr::V4(v4));
            }
            let first = segments[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The patterns of the probe these cases were measured with, against the reference's proxy.
    fn measured() -> DomainPolicy {
        let domains: BTreeMap<String, String> = [
            ("*.star.test", "allow"),
            ("**.dstar.test", "allow"),
            ("exact.test", "allow"),
            ("deny.exact.test", "deny"),
            ("*.both.test", "allow"),
            ("x.both.test", "deny"),
            ("127.0.0.1", "allow"),
        ]
        .into_iter()
        .map(|(pattern, decision)| (pattern.to_owned(), decision.to_owned()))
        .collect();
        DomainPolicy::new(Some(&domains), false).unwrap()
    }

    /// Address literals, each as the reference's proxy refused it as local (`403`) or let it
    /// through to a connection attempt, with `*` allowed and no local binding.
    #[test]
    fn addresses_are_local_as_the_reference_counts_them() {
        let local = [
            "192.0.2.1",
            "198.51.100.1",
            "203.0.113.1",
            "198.18.0.1",
            "198.19.255.1",
            "240.0.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "239.1.1.1",
            "100.64.0.1",
            "100.127.0.1",
            "169.254.1.1",
            "0.1.2.3",
            "192.0.0.1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "::",
            "::127.0.0.1",
            "::1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "127.8.8.8",
        ];
        let public = [
            "192.88.99.1",
            "1.1.1.1",
            "2001:db8::1",
            "64:ff9b::a00:1",
            "2002:a00:1::1",
            "100::1",
            "2001::1",
        ];
        for address in local {
            assert!(is_local(address.parse().unwrap()), "{address} is local");
        }
        for address in public {
            assert!(!is_local(address.parse().unwrap()), "{address} is public");
        }
    }

    /// Each host of the probe, and what the reference's proxy answered for it (a name it
    /// would resolve shows as `Resolve`: the probe's names resolve to nothing, which the
    /// reference then refused as local).
    #[test]
    fn names_are_decided_as_the_reference_decides_them() {
        let policy = measured();
        let refused = Verdict::Refused;
        let cases = [
            ("star.test", refused(Refusal::NotAllowed)),
            ("a.star.test", Verdict::Resolve),
            ("a.b.star.test", Verdict::Resolve),
            ("dstar.test", Verdict::Resolve),
            ("a.b.dstar.test", Verdict::Resolve),
            ("exact.test", Verdict::Resolve),
            ("EXACT.test", Verdict::Resolve),
            ("exact.test.", Verdict::Resolve),
            ("a.exact.test", refused(Refusal::NotAllowed)),
            ("deny.exact.test", refused(Refusal::Denied)),
            ("x.both.test", refused(Refusal::Denied)),
            ("y.both.test", Verdict::Resolve),
            ("other.test", refused(Refusal::NotAllowed)),
            ("localhost", refused(Refusal::NotAllowedLocal)),
            ("127.0.0.1", Verdict::Connect),
            ("10.0.0.1", refused(Refusal::NotAllowedLocal)),
            ("[::1]", refused(Refusal::NotAllowedLocal)),
            ("notstar.test", refused(Refusal::NotAllowed)),
        ];
        for (host, verdict) in cases {
            assert_eq!(policy.decide(host), verdict, "{host}");
        }
        assert_eq!(policy.admit_addresses(&[]), Err(Refusal::NotAllowedLocal), "unresolved");
    }

    #[test]
    fn resolved_addresses_are_refused_when_local_unless_local_binding_is_allowed() {
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        let private: IpAddr = "192.168.1.10".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        let policy = measured();
        assert_eq!(policy.admit_addresses(&[public]), Ok(()));
        assert_eq!(policy.admit_addresses(&[public, private]), Err(Refusal::NotAllowedLocal));
        assert_eq!(policy.admit_addresses(&[mapped]), Err(Refusal::NotAllowedLocal));
        let open = DomainPolicy::new(None, true).unwrap();
        assert_eq!(open.admit_addresses(&[private]), Ok(()));
    }

    #[test]
    fn local_and_private_addresses_are_told_apart_from_public_ones() {
        for local in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.0.1",
            "169.254.1.1",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_local(local.parse().unwrap()), "{local}");
        }
        for public in ["1.1.1.1", "172.32.0.1", "100.128.0.1", "2606:4700::1111"] {
            assert!(!is_local(public.parse().unwrap()), "{public}");
        }
    }

    fn policy(pairs: &[(&str, &str)]) -> Result<DomainPolicy, String> {
        let domains = pairs.iter().map(|(p, d)| (p.to_string(), d.to_string())).collect();
        DomainPolicy::new(Some(&domains), false).map_err(|error| error.to_string())
    }

    /// Patterns that allow, with local binding allowed or not.
    fn allowing(patterns: &[&str], allow_local: bool) -> DomainPolicy {
        let domains = patterns.iter().map(|p| (p.to_string(), "allow".to_owned())).collect();
        DomainPolicy::new(Some(&domains), allow_local).unwrap()
    }

    /// Local binding lifts only the refusal as local, as on the reference: a local destination
    /// must still match an allow pattern (a wildcard counts), or it is `not_allowed`, which a
    /// decider may approve; without local binding only an exact entry lets it through.
    #[test]
    fn local_binding_lifts_only_the_refusal_as_local() {
        let refused = Verdict::Refused;
        let local = ["127.0.0.1", "localhost", "192.168.1.10", "[::1]"];
        let unlisted = allowing(&["allowed.example.test"], true);
        for host in local {
            assert_eq!(unlisted.decide(host), refused(Refusal::NotAllowed), "{host}");
        }
        assert_eq!(unlisted.decide("allowed.example.test"), Verdict::Resolve);
        let nothing = DomainPolicy::new(None, true).unwrap();
        for host in local {
            assert_eq!(nothing.decide(host), refused(Refusal::NotAllowed), "{host}");
        }

        let wildcards = ["*.0.0.1", "**.localhost"];
        let bound = allowing(&wildcards, true);
        assert_eq!(bound.decide("127.0.0.1"), Verdict::Connect);
        assert_eq!(bound.decide("localhost"), Verdict::Connect);
        assert_eq!(bound.decide("192.168.1.10"), refused(Refusal::NotAllowed));
        let unbound = allowing(&wildcards, false);
        for host in ["127.0.0.1", "localhost", "192.168.1.10"] {
            assert_eq!(unbound.decide(host), refused(Refusal::NotAllowedLocal), "{host}");
        }

        for host in local {
            assert_eq!(allowing(&["*"], true).decide(host), Verdict::Connect, "{host}");
        }
        for allow_local in [false, true] {
            let exact = allowing(&["127.0.0.1", "localhost"], allow_local);
            assert_eq!(exact.decide("127.0.0.1"), Verdict::Connect, "{allow_local}");
            assert_eq!(exact.decide("localhost"), Verdict::Connect, "{allow_local}");
        }
    }

    /// `none` decides nothing, `*` allows every name (a local one is still refused as local),
    /// as on the reference.
    #[test]
    fn none_decides_nothing_and_a_star_allows_every_name() {
        let none = policy(&[("none.test", "none"), ("**.n.test", "allow"), ("a.n.test", "none")]);
        let none = none.unwrap();
        assert_eq!(none.decide("none.test"), Verdict::Refused(Refusal::NotAllowed));
        assert_eq!(none.decide("a.n.test"), Verdict::Resolve);
        let star = policy(&[("*", "allow")]).unwrap();
        assert_eq!(star.decide("other.test"), Verdict::Resolve);
        assert_eq!(star.decide("localhost"), Verdict::Refused(Refusal::NotAllowedLocal));
    }

    #[test]
    fn maps_the_reference_refuses_are_refused_in_its_words() {
        assert_eq!(
            policy(&[("x.test", "maybe")]).unwrap_err(),
            "unknown variant `maybe`, expected one of `none`, `allow`, `deny`"
        );
        assert_eq!(
            policy(&[("", "allow")]).unwrap_err(),
            "invalid network proxy config: domain pattern is empty"
        );
    }

    #[test]
    fn refusals_say_the_references_reasons_and_words() {
        assert_eq!(Refusal::NotAllowed.reason(), "not_allowed");
        assert_eq!(
            Refusal::NotAllowedLocal.message(),
            "Sandbox policy blocks local/private network addresses."
        );
        assert_eq!(Refusal::Denied.message(), "Domain denied by the sandbox policy.");
    }
}
