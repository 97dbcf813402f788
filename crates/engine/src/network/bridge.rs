//! A sandbox held to a managed network whose proxy the caller runs (`enforceManagedNetwork`
//! without `networkProxy`): the caller's proxy variables name that proxy on the host's
//! loopback, which a sandbox with a network namespace of its own cannot reach. So the
//! sandbox's inner stage listens on ports of its own loopback ([`crate::sandbox::forwarders`]),
//! the variables are pointed there, and the server joins each connection handed over to the
//! caller's port on the host — as the reference's "host proxy routing bridge" does, in its
//! words when it refuses.
//!
//! What is bridged: every proxy variable the caller set ([`super::proxy_env`]'s names), each a
//! URL on a loopback address with a port; with `managedNetwork.loopbackPorts`, only those
//! ports. One port inside per port outside. Anything else, or no variable at all, and the
//! sandbox runs nothing.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tether_protocol::ProcessId;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::debug;

use super::forward::{self, Entry, MAX_BRIDGED_PORTS, ProxyRoute, Receiver};
use super::proxy::{FORWARDER_PORTS, MAX_CONNECTIONS, RunningProxy, server_wide, splice};

/// How long joining a connection to the caller's port may take: it is on this host's
/// loopback, so a port that does not answer at once is not listening.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a sandbox cannot be bridged to the caller's proxy: the reference's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BridgeRefusal {
    #[error("managed proxy mode requires proxy environment variables")]
    NoVariables,
    #[error("managed proxy mode requires parseable loopback proxy endpoints")]
    NotLoopback,
    #[error("proxy endpoint is outside the managed sandbox context")]
    OutsideContext,
    #[error("a managed proxy bridge reaches at most {MAX_BRIDGED_PORTS} ports")]
    TooManyPorts,
}

/// One variable to point inside: the URL around its authority, and which port it named.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rewrite {
    name: String,
    scheme: String,
    userinfo: String,
    rest: String,
    upstream: usize,
}

/// What a start's variables ask to be bridged: the caller's ports (in order; the `n`th is
/// [`Entry::Bridged`]`(n)`) and the variables naming them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgePlan {
    upstream: Vec<u16>,
    rewrites: Vec<Rewrite>,
}

/// The bridge `env` (the child's environment) asks for, within `managed`'s `loopbackPorts`
/// when it names them.
pub fn plan(
    env: &BTreeMap<String, String>,
    managed: Option<&Value>,
) -> Result<BridgePlan, BridgeRefusal> {
    let allowed: Option<Vec<u16>> = managed
        .and_then(|managed| managed.get("loopbackPorts"))
        .and_then(Value::as_array)
        .map(|ports| {
            ports.iter().filter_map(Value::as_u64).filter_map(|p| u16::try_from(p).ok()).collect()
        });
    let mut upstream: Vec<u16> = Vec::new();
    let mut rewrites = Vec::new();
    for name in super::proxy_env::proxy_variables() {
        let Some(value) = env.get(name).filter(|value| !value.trim().is_empty()) else {
            continue;
        };
        let (rewrite, port) = endpoint(name, value).ok_or(BridgeRefusal::NotLoopback)?;
        if allowed.as_ref().is_some_and(|allowed| !allowed.contains(&port)) {
            return Err(BridgeRefusal::OutsideContext);
        }
        let index = match upstream.iter().position(|known| *known == port) {
            Some(index) => index,
            None if upstream.len() < MAX_BRIDGED_PORTS => {
                upstream.push(port);
                upstream.len() - 1
            }
            None => return Err(BridgeRefusal::TooManyPorts),
        };
        rewrites.push(Rewrite { upstream: index, ..rewrite });
    }
    if rewrites.is_empty() {
        return Err(BridgeRefusal::NoVariables);
    }
    Ok(BridgePlan { upstream, rewrites })
}

/// A proxy URL on a loopback address with a port, taken apart; `None` for anything else.
fn endpoint(name: &str, value: &str) -> Option<(Rewrite, u16)> {
    let url = url::Url::parse(value).ok()?;
    let loopback = match url.host()? {
        // `socks5h://` is not a scheme the URL standard knows, so its host stays text.
        url::Host::Domain(domain) => {
            domain.eq_ignore_ascii_case("localhost")
                || domain.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
        url::Host::Ipv4(address) => address.is_loopback(),
        url::Host::Ipv6(address) => address.is_loopback(),
    };
    let port = url.port_or_known_default()?;
    if !loopback {
        return None;
    }
    // The text after the authority, as the caller wrote it (a trailing `/` kept or not).
    let (scheme, after) = value.split_once("://")?;
    let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, rest) = after.split_at(authority_end);
    let userinfo =
        authority.rsplit_once('@').map(|(info, _)| format!("{info}@")).unwrap_or_default();
    let rewrite = Rewrite {
        name: name.to_owned(),
        scheme: scheme.to_owned(),
        userinfo,
        rest: rest.to_owned(),
        upstream: 0,
    };
    Some((rewrite, port))
}

/// A bridge between a plan and its process's start: the pair made, and the ports inside.
pub struct PreparedBridge {
    plan: BridgePlan,
    server_end: OwnedFd,
    /// For the sandbox; dropped once the process has started.
    pub route: ProxyRoute,
}

impl PreparedBridge {
    pub fn new(plan: BridgePlan, process_id: &ProcessId) -> std::io::Result<Self> {
        let (server_end, sandbox_end) = forward::pair()?;
        let random = std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            process_id.as_str(),
        );
        let span = u64::from(FORWARDER_PORTS.end - FORWARDER_PORTS.start);
        let first = (random % span) as u16;
        // Consecutive ports from a random start, wrapping within the range: all distinct.
        let listeners = (0..plan.upstream.len())
            .map(|n| {
                let port = FORWARDER_PORTS.start + ((u64::from(first) + n as u64) % span) as u16;
                (Entry::Bridged(n as u8), port)
            })
            .collect();
        Ok(Self {
            plan,
            server_end,
            route: ProxyRoute { sandbox_end, listeners, transparent: false },
        })
    }

    /// Points `env`'s proxy variables at the ports inside and joins what comes through them to
    /// the caller's ports, until stopped. Only for a start whose sandbox took [`Self::route`]:
    /// otherwise the variables are left as the caller set them and nothing is served.
    pub fn start(
        self,
        forwarded: bool,
        env: &mut BTreeMap<String, String>,
        process_id: &ProcessId,
    ) -> std::io::Result<Option<RunningProxy>> {
        if !forwarded {
            return Ok(None);
        }
        for rewrite in &self.plan.rewrites {
            let inside = self.route.listeners[rewrite.upstream].1;
            let value = format!(
                "{}://{}127.0.0.1:{inside}{}",
                rewrite.scheme, rewrite.userinfo, rewrite.rest
            );
            env.insert(rewrite.name.clone(), value);
        }
        let receiver = Receiver::new(self.server_end)?;
        let upstream = self.plan.upstream;
        Ok(Some(RunningProxy::spawn(process_id, serve(receiver, upstream))))
    }
}

/// Joins each connection the sandbox hands over to the caller's port it came for, at most
/// [`MAX_CONNECTIONS`] at once (within the server-wide share), until the sandbox's end closes.
async fn serve(receiver: Receiver, upstream: Vec<u16>) {
    let own = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        let Ok(mine) = own.clone().acquire_owned().await else { return };
        let Ok(shared) = server_wide().acquire_owned().await else { return };
        let next = tokio::select! {
            next = receiver.next() => next,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (entry, fd) = match next {
            Ok(Some(handed)) => handed,
            Ok(None) | Err(_) => break,
        };
        // Another entry is not one this sandbox has: closed.
        let Entry::Bridged(n) = entry else { continue };
        let Some(port) = upstream.get(usize::from(n)).copied() else { continue };
        connections.spawn(async move {
            let _permits = (mine, shared);
            let Ok(inside) = stream_of(fd) else { return };
            let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
                Ok(Ok(outside)) => splice(inside, outside).await,
                Ok(Err(error)) => {
                    debug!(%error, port, "the caller's proxy refused a bridged connection")
                }
                Err(_) => debug!(port, "the caller's proxy did not answer a bridged connection"),
            }
        });
    }
    while connections.join_next().await.is_some() {}
}

fn stream_of(fd: OwnedFd) -> std::io::Result<TcpStream> {
    let stream = std::net::TcpStream::from(fd);
    stream.peer_addr()?;
    stream.set_nonblocking(true)?;
    TcpStream::from_std(stream)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn each_port_is_bridged_once_and_each_variable_pointed_inside() {
        let env = env(&[
            ("HTTP_PROXY", "http://127.0.0.1:18999"),
            ("https_proxy", "http://localhost:18999/"),
            ("ALL_PROXY", "socks5h://127.0.0.1:18997"),
            ("FOO_PROXY", "http://127.0.0.1:1"),
            ("NO_PROXY", "example.org"),
        ]);
        let plan = plan(&env, Some(&json!({"loopbackPorts": [18999, 18997]}))).unwrap();
        assert_eq!(plan.upstream, [18999, 18997]);
        let process_id = ProcessId::from("p".to_owned());
        let bridge = PreparedBridge::new(plan, &process_id).unwrap();
        let ports: Vec<u16> = bridge.route.listeners.iter().map(|(_, port)| *port).collect();
        assert_eq!(ports.len(), 2);
        assert_ne!(ports[0], ports[1]);
        let mut child = env.clone();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let _running = runtime.block_on(async { bridge.start(true, &mut child, &process_id) });
        assert_eq!(child["HTTP_PROXY"], format!("http://127.0.0.1:{}", ports[0]));
        assert_eq!(child["https_proxy"], format!("http://127.0.0.1:{}/", ports[0]));
        assert_eq!(child["ALL_PROXY"], format!("socks5h://127.0.0.1:{}", ports[1]));
        assert_eq!(child["FOO_PROXY"], "http://127.0.0.1:1", "not a proxy variable");
        assert_eq!(child["NO_PROXY"], "example.org");
    }

    #[test]
    fn refusals_are_the_references() {
        let one = |value: &str| env(&[("HTTP_PROXY", value)]);
        let ports = json!({"loopbackPorts": [18999]});
        assert_eq!(plan(&env(&[]), None), Err(BridgeRefusal::NoVariables));
        assert_eq!(plan(&env(&[("HTTP_PROXY", " ")]), None), Err(BridgeRefusal::NoVariables));
        for bad in
            ["garbage", "http://192.0.2.2:18999", "http://example.com:3128", "socks5h://127.0.0.1"]
        {
            assert_eq!(plan(&one(bad), None), Err(BridgeRefusal::NotLoopback), "{bad}");
        }
        assert_eq!(
            plan(&one("http://127.0.0.1:18996"), Some(&ports)),
            Err(BridgeRefusal::OutsideContext)
        );
        // No `managedNetwork`: any loopback port.
        assert!(plan(&one("http://127.0.0.1:18996"), None).is_ok());
        assert!(plan(&one("http://user:pw@[::1]:18999/"), Some(&ports)).is_ok());
        let many: Vec<(String, String)> = super::super::proxy_env::proxy_variables()
            .enumerate()
            .map(|(n, name)| (name.to_owned(), format!("http://127.0.0.1:{}", 1000 + n)))
            .collect();
        let many: BTreeMap<String, String> = many.into_iter().collect();
        assert_eq!(plan(&many, None), Err(BridgeRefusal::TooManyPorts));
    }
}
