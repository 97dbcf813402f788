//! Beyond the executor: the HTTP proxies a launch's proxy goes through, chosen as the
//! reference's proxy chooses them.
//!
//! - [`executor`]: the executor's own `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY`, which forward
//!   requests and `CONNECT` tunnels go through when the launch allows it
//!   (`allowUpstreamProxy`).
//! - [`route`]: which destinations an upstream may carry at all — names, public addresses,
//!   and private ones only when the operator says so (`--proxy-private-ips-via-upstream`);
//!   every other address is the executor's own side of the network, reached directly.
//! - [`tcp`]: the operator's mandatory TCP upstream (`--tcp-upstream-proxy`), which every
//!   SOCKS5 connection (transparent TCP's included) goes through, or is refused.
//! - Here: one upstream proxy, the `CONNECT` that opens a tunnel through it, and [`Routes`],
//!   what one launch's proxy goes through.
//!
//! Read from the executor's environment and the server's flags when a launch is checked,
//! never from the command's. An upstream that fails is a failed connection: nothing falls back
//! to a direct one.

pub mod executor;
pub mod route;
pub mod tcp;

use std::net::IpAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub use executor::Upstreams;
pub use route::PrivateDestinations;
pub use tcp::{TcpRoute, TcpUpstream};

use super::{CONNECT_TIMEOUT, HANDSHAKE_TIMEOUT};

/// The longest answer head an upstream may give a `CONNECT`: far above any real proxy's, and
/// a proxy that sends more is not one.
const MAX_CONNECT_ANSWER_BYTES: usize = 16 * 1024;

/// One upstream proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// A name, or an address without brackets.
    pub host: String,
    pub port: u16,
    /// `Basic …` for `Proxy-Authorization`, from the URL's user and password.
    pub authorization: Option<String>,
}

/// How a server's managed proxies reach past the executor, as the operator started it: the
/// same for every launch, whatever the client asks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamRouting {
    /// `--tcp-upstream-proxy`: the HTTP `CONNECT` proxy every SOCKS5 connection must go
    /// through.
    pub tcp: Option<TcpUpstream>,
    /// `--proxy-private-ips-via-upstream`: whether a private address goes through an upstream
    /// that applies.
    pub private: PrivateDestinations,
}

/// What one launch's proxy goes through: the executor's proxies for HTTP (when the launch
/// allows them), the operator's TCP upstream for SOCKS5 (when there is one).
#[derive(Debug, Clone, Default)]
pub struct Routes {
    /// `None`: the launch does not allow upstream proxies; HTTP goes directly.
    executor: Option<Upstreams>,
    private: PrivateDestinations,
    /// `None`: SOCKS5 goes directly.
    pub tcp: Option<TcpRoute>,
}

impl Routes {
    /// The routes of a launch that allows upstream proxies or not (`allowUpstreamProxy`) and
    /// local destinations or not (`allowLocalBinding`), on a server routing as `routing`
    /// says, whose environment is `executor_env`.
    pub fn new(
        routing: &UpstreamRouting,
        allow_upstream: bool,
        allow_local: bool,
        executor_env: &[(String, String)],
    ) -> Self {
        let tcp = routing.tcp.clone().map(|upstream| TcpRoute {
            upstream,
            allow_upstream,
            allow_local,
            private: routing.private,
        });
        Self {
            executor: allow_upstream.then(|| Upstreams::from_env(executor_env)),
            private: routing.private,
            tcp,
        }
    }

    /// The upstream a forward request to `host` goes through, if any (`host` as policies
    /// compare it: lower case, an address without brackets).
    pub fn for_request(&self, host: &str) -> Option<&Upstream> {
        let upstream = self.executor.as_ref()?.for_request()?;
        route::may_go_upstream(host, self.private).then_some(upstream)
    }

    /// The upstream a tunnel to `host` goes through, if any.
    pub fn for_tunnel(&self, host: &str) -> Option<&Upstream> {
        let upstream = self.executor.as_ref()?.for_tunnel()?;
        route::may_go_upstream(host, self.private).then_some(upstream)
    }
}

/// Why a tunnel through an upstream was not opened. Logged, never told to the command: what
/// it learns is that its connection failed.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error("connect to the upstream proxy")]
    Connect(#[source] std::io::Error),
    #[error("upstream CONNECT timed out")]
    TimedOut,
    #[error("upstream CONNECT answer unreadable")]
    Answer(#[source] std::io::Error),
    #[error("upstream CONNECT answer head too long")]
    AnswerTooLong,
    /// The status line's code and reason, as the proxy gave them.
    #[error("upstream refused CONNECT ({0})")]
    Refused(String),
}

/// A connection to `upstream` itself.
pub async fn connect(upstream: &Upstream) -> std::io::Result<TcpStream> {
    connect_to(&upstream.host, upstream.port).await
}

/// A connection to the proxy at `host:port` (resolved by the executor), within
/// [`CONNECT_TIMEOUT`].
async fn connect_to(host: &str, port: u16) -> std::io::Result<TcpStream> {
    let stream =
        tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, port))).await.map_err(
            |_| std::io::Error::new(std::io::ErrorKind::TimedOut, "upstream connect timed out"),
        )??;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// A tunnel to `host:port` through `upstream` (`CONNECT`, answered 2xx).
pub async fn tunnel(upstream: &Upstream, host: &str, port: u16) -> Result<TcpStream, TunnelError> {
    let stream = connect(upstream).await.map_err(TunnelError::Connect)?;
    open_tunnel(stream, &authority(host, port), upstream.authorization.as_deref()).await
}

/// `host:port` as a `CONNECT` names it: an IPv6 address in brackets.
fn authority(host: &str, port: u16) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(_)) => format!("[{host}]:{port}"),
        _ => format!("{host}:{port}"),
    }
}

/// Asks the proxy at the other end of `stream` for a tunnel to `authority`, and returns the
/// stream once it is one.
async fn open_tunnel(
    mut stream: TcpStream,
    authority: &str,
    authorization: Option<&str>,
) -> Result<TcpStream, TunnelError> {
    let mut request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
    if let Some(authorization) = authorization {
        request.push_str(&format!("Proxy-Authorization: {authorization}\r\n"));
    }
    request.push_str("\r\n");
    let answered = async {
        stream.write_all(request.as_bytes()).await.map_err(TunnelError::Answer)?;
        read_connect_answer(&mut stream).await
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, answered)
        .await
        .map_err(|_| TunnelError::TimedOut)??;
    Ok(stream)
}

/// Reads the answer head to a `CONNECT` byte by byte (nothing of the tunnel is read past it)
/// and fails unless its status is 2xx.
async fn read_connect_answer(stream: &mut TcpStream) -> Result<(), TunnelError> {
    let mut head = Vec::with_capacity(256);
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_CONNECT_ANSWER_BYTES {
            return Err(TunnelError::AnswerTooLong);
        }
        head.push(stream.read_u8().await.map_err(TunnelError::Answer)?);
    }
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let status = line.split_once(' ').map_or("", |(_, status)| status.trim());
    match status.split(' ').next().and_then(|code| code.parse::<u16>().ok()) {
        Some(200..=299) => Ok(()),
        _ => Err(TunnelError::Refused(status.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Names and public addresses go through the executor's proxies; the executor's own side
    /// of the network does not, private addresses only when the server routes them so; a
    /// launch that does not allow upstream proxies goes through none.
    #[test]
    fn a_launch_goes_through_the_executors_proxies_where_its_routes_allow() {
        let env = env(&[("HTTP_PROXY", "http://proxy.test:3128")]);
        let direct = UpstreamRouting::default();
        let routes = Routes::new(&direct, true, false, &env);
        for through in ["example.test", "foo.localhost", "93.184.216.34"] {
            assert!(routes.for_request(through).is_some(), "{through}");
            assert!(routes.for_tunnel(through).is_some(), "{through}");
        }
        for direct in ["localhost", "127.0.0.1", "10.0.0.1", "fd00::1", "169.254.169.254"] {
            assert!(routes.for_request(direct).is_none(), "{direct}");
            assert!(routes.for_tunnel(direct).is_none(), "{direct}");
        }
        let private =
            UpstreamRouting { private: PrivateDestinations::ThroughUpstream, ..direct.clone() };
        let routes = Routes::new(&private, true, false, &env);
        assert!(routes.for_tunnel("10.0.0.1").is_some());
        assert!(routes.for_request("fd00::1").is_some());
        assert!(routes.for_tunnel("127.0.0.1").is_none(), "loopback stays local");
        assert!(Routes::new(&private, false, false, &env).for_tunnel("example.test").is_none());
        assert!(routes.tcp.is_none());
    }

    /// A `CONNECT` answer's status decides; the tunnel's first bytes are left unread.
    #[tokio::test]
    async fn a_connect_is_answered_by_its_status_line() {
        let cases: [(&[u8], Result<(), &str>); 3] = [
            (b"HTTP/1.1 200 Connection established\r\n\r\nfirst", Ok(())),
            (b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n", Err("502 Bad Gateway")),
            (
                b"HTTP/1.0 407 Proxy Authentication Required\r\n\r\n",
                Err("407 Proxy Authentication Required"),
            ),
        ];
        for (answer, expected) in cases {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let proxy = tokio::spawn(async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    head.push(stream.read_u8().await.unwrap());
                }
                stream.write_all(answer).await.unwrap();
                head
            });
            let upstream = Upstream { host: "127.0.0.1".into(), port, authorization: None };
            let opened = tunnel(&upstream, "fd00::1", 443).await;
            let head = proxy.await.unwrap();
            assert_eq!(head, b"CONNECT [fd00::1]:443 HTTP/1.1\r\nHost: [fd00::1]:443\r\n\r\n");
            match (opened, expected) {
                (Ok(mut stream), Ok(())) => {
                    let mut first = [0; 5];
                    stream.read_exact(&mut first).await.unwrap();
                    assert_eq!(&first, b"first");
                }
                (Err(TunnelError::Refused(status)), Err(words)) => assert_eq!(status, words),
                (other, _) => panic!("{answer:?}: {other:?}"),
            }
        }
    }
}
