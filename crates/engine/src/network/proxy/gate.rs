//! The decision on one destination, as the reference's proxy makes it, reported as it is made:
//!
//! 1. the launch's policy on the name ([`DomainPolicy::decide`]); a name the allow list
//!    misses goes to the client's decider when the launch has one (`network/policyRequest`),
//!    whose answer stands in for the policy's (`source: decider`; an approval keeps the
//!    reason `not_allowed`, with `policyOverride`);
//! 2. the name resolved, once, and the addresses checked ([`DomainPolicy::admit_addresses`]):
//!    the proxy connects to exactly these, so a name that resolves differently a moment later
//!    changes nothing;
//! 3. `limited` mode: only GET, HEAD and OPTIONS (a tunnel could carry anything, so `CONNECT`
//!    and SOCKS5 are refused there too), reported as a second decision of its own.
//!
//! Every decision, either way, is a `network/policyDecision` to the client.

use std::net::{IpAddr, SocketAddr};
use std::time::{SystemTime, UNIX_EPOCH};

use tether_protocol::network::{
    ClientDecision, Decision, DecisionScope, DecisionSource, PolicyDecisionNotification,
    PolicyRequestParams, PolicyRequestTarget, ProxyProtocol,
};
use tether_protocol::network_proxy::NetworkMode;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::{CONNECT_TIMEOUT, DECISION_SLACK, NetworkEvent, Proxy, RESOLVE_TIMEOUT};
use crate::network::blocked::BlockReason;
use crate::network::domains::{Refusal, Verdict};

/// The longest `reason` a client's denial may carry into a report (the reference's bound).
const MAX_CLIENT_REASON: usize = 1024;

/// Methods `limited` mode lets through.
const LIMITED_METHODS: [&str; 3] = ["GET", "HEAD", "OPTIONS"];

/// A connection's destination, and how it asked for it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Target<'a> {
    pub protocol: ProxyProtocol,
    /// As the request named it, without an IPv6 literal's brackets.
    pub host: &'a str,
    pub port: u16,
    /// The HTTP method; `None` for SOCKS5.
    pub method: Option<&'a str>,
    /// The process's end of the connection to its proxy.
    pub client: SocketAddr,
}

/// Go to these addresses, in order; or refuse, for this reason, decided by this source.
#[derive(Debug)]
pub(super) enum Admission {
    Go(Vec<SocketAddr>),
    Refused(BlockReason, DecisionSource),
}

/// How a domain decision came about.
struct Decided {
    verdict: Verdict,
    source: DecisionSource,
    overridden: bool,
}

/// What a request naming a Unix socket (`x-unix-socket`) is refused with and reported as,
/// in the reference's words: on Linux its proxy reaches no Unix socket, whatever the launch's
/// `unixSockets` allow.
pub(super) const UNIX_SOCKET_UNSUPPORTED: &str = "unix_socket_unsupported";

impl Proxy {
    /// Reports the refusal of a request that names a Unix socket (`method`, from `client`):
    /// the proxy's own state refuses it before any policy, as the reference's does.
    pub(super) async fn refuse_unix_socket(&self, method: &str, client: SocketAddr) {
        let target = Target {
            protocol: ProxyProtocol::Http,
            host: "unix-socket",
            port: 0,
            method: Some(method),
            client,
        };
        let refused = (
            Decision::Deny,
            DecisionSource::ProxyState,
            UNIX_SOCKET_UNSUPPORTED,
            DecisionScope::NonDomain,
        );
        self.report(target, refused, false).await;
    }

    /// Decides `target`, reporting each decision.
    pub(super) async fn admit(&self, target: Target<'_>) -> Admission {
        let decided = self.decide_domain(target).await;
        let addresses = match decided.verdict {
            Verdict::Refused(refusal) => {
                return self.refuse(target, BlockReason::Domain(refusal), decided.source).await;
            }
            Verdict::Connect | Verdict::Resolve => {
                let addresses = resolve(target.host, target.port).await;
                let ips: Vec<IpAddr> = addresses.iter().map(SocketAddr::ip).collect();
                let checked = match decided.verdict {
                    // An address allowed exactly (or `localhost`) is reached as it is.
                    Verdict::Connect if !ips.is_empty() => Ok(()),
                    _ => self.config.policy.admit_addresses(&ips),
                };
                if let Err(refusal) = checked {
                    let reason = BlockReason::Domain(refusal);
                    return self.refuse(target, reason, DecisionSource::BaselinePolicy).await;
                }
                addresses
            }
        };
        // A decider's approval is reported with the reason the policy refused for (the only
        // one a decider is asked about, `not_allowed`), `policyOverride` saying it was
        // overridden: the reference's report of it.
        let reason = match decided.overridden {
            true => Refusal::NotAllowed.reason(),
            false => "allow",
        };
        let allowed = (Decision::Allow, decided.source, reason, DecisionScope::Domain);
        self.report(target, allowed, decided.overridden).await;
        if self.config.mode == NetworkMode::Limited
            && !target.method.is_some_and(|method| LIMITED_METHODS.contains(&method))
        {
            let reason = BlockReason::MethodNotAllowed;
            let refused = (
                Decision::Deny,
                DecisionSource::ModeGuard,
                reason.reason(),
                DecisionScope::NonDomain,
            );
            self.report(target, refused, false).await;
            return Admission::Refused(reason, DecisionSource::ModeGuard);
        }
        Admission::Go(addresses)
    }

    /// The policy's verdict on the name, or the decider's where the allow list says nothing.
    async fn decide_domain(&self, target: Target<'_>) -> Decided {
        let verdict = self.config.policy.decide(target.host);
        let baseline =
            Decided { verdict, source: DecisionSource::BaselinePolicy, overridden: false };
        if verdict != Verdict::Refused(Refusal::NotAllowed) {
            return baseline;
        }
        let Some(timeout) = self.config.ask_timeout else { return baseline };
        let source = DecisionSource::Decider;
        match self.ask(target, timeout + DECISION_SLACK).await {
            ClientDecision::Allow => {
                let verdict = match target.host.parse::<IpAddr>() {
                    Ok(_) => Verdict::Connect,
                    Err(_) => Verdict::Resolve,
                };
                Decided { verdict, source, overridden: true }
            }
            ClientDecision::Deny { .. } => Decided {
                verdict: Verdict::Refused(Refusal::NotAllowed),
                source,
                overridden: false,
            },
        }
    }

    /// Asks the client; no answer in time, or no client to ask, is a denial.
    async fn ask(&self, target: Target<'_>, within: std::time::Duration) -> ClientDecision {
        let denied = || ClientDecision::Deny { reason: Refusal::NotAllowed.reason().into() };
        let Some(events) = &self.events else { return denied() };
        let (answer, answered) = oneshot::channel();
        let request = PolicyRequestParams {
            process_id: self.config.process_id.clone(),
            request: PolicyRequestTarget {
                protocol: target.protocol,
                host: target.host.to_owned(),
                port: target.port,
            },
        };
        if events.send(NetworkEvent::Ask { request, answer }).await.is_err() {
            return denied();
        }
        match tokio::time::timeout(within, answered).await {
            Ok(Ok(ClientDecision::Deny { mut reason })) => {
                let mut end = reason.len().min(MAX_CLIENT_REASON);
                while !reason.is_char_boundary(end) {
                    end -= 1;
                }
                reason.truncate(end);
                ClientDecision::Deny { reason }
            }
            Ok(Ok(ClientDecision::Allow)) => ClientDecision::Allow,
            _ => denied(),
        }
    }

    async fn refuse(
        &self,
        target: Target<'_>,
        reason: BlockReason,
        source: DecisionSource,
    ) -> Admission {
        self.report(
            target,
            (Decision::Deny, source, reason.reason(), DecisionScope::Domain),
            false,
        )
        .await;
        Admission::Refused(reason, source)
    }

    /// Sends one `network/policyDecision`; waits while the session's queue is full.
    pub(super) async fn report(
        &self,
        target: Target<'_>,
        (decision, source, reason, scope): (Decision, DecisionSource, &str, DecisionScope),
        policy_override: bool,
    ) {
        let Some(events) = &self.events else { return };
        let millis = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
        let notification = PolicyDecisionNotification {
            process_id: self.config.process_id.clone(),
            timestamp: tether_protocol::time::rfc3339_millis(millis as i64),
            scope,
            decision,
            source,
            reason: reason.to_owned(),
            protocol: target.protocol,
            host: target.host.to_owned(),
            port: target.port,
            method: target.method.map(str::to_owned),
            client: target.client.to_string(),
            policy_override,
        };
        let _ = events.send(NetworkEvent::Decided(notification)).await;
    }
}

/// A name as decisions report it and policies compare it: lower case, no trailing dot.
pub(super) fn normalized(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Names resolved at once, server-wide. Each resolution holds a thread of the blocking pool
/// (the system resolver blocks) for up to [`RESOLVE_TIMEOUT`]; commands naming hosts that
/// never answer must not take the threads every file operation of every session needs.
const MAX_CONCURRENT_RESOLUTIONS: usize = 64;

/// The addresses `host` reaches at `port`: an address literal as it is, a name as the
/// executor's resolver answers within [`RESOLVE_TIMEOUT`], waiting for a turn included
/// (nothing, if it does not).
async fn resolve(host: &str, port: u16) -> Vec<SocketAddr> {
    static RESOLVING: std::sync::OnceLock<std::sync::Arc<tokio::sync::Semaphore>> =
        std::sync::OnceLock::new();
    if let Ok(ip) = host.parse::<IpAddr>() {
        return vec![SocketAddr::new(ip, port)];
    }
    let turns = RESOLVING
        .get_or_init(|| {
            std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_RESOLUTIONS))
        })
        .clone();
    let host = host.to_owned();
    let resolved = async move {
        let turn = turns.acquire_owned().await.ok()?;
        // The turn is held by the thread until the resolver returns, even past the timeout:
        // what is bounded is threads, not waiting callers.
        let lookup = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
                .map(|found| found.collect::<Vec<_>>())
        });
        lookup.await.ok()?.ok()
    };
    tokio::time::timeout(RESOLVE_TIMEOUT, resolved).await.ok().flatten().unwrap_or_default()
}

/// A connection to the first of `addresses` that answers within [`CONNECT_TIMEOUT`].
pub(super) async fn connect(addresses: &[SocketAddr]) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address to connect to");
    for address in addresses {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(error)) => last = error,
            Err(_) => last = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
        }
    }
    Err(last)
}
