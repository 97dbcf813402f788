//! The executor's own proxies, which a launch's proxy goes through when it allows them
//! (`allowUpstreamProxy`), as the reference's does: a forward request to `HTTP_PROXY` in
//! absolute form, a tunnel through `HTTPS_PROXY` with a `CONNECT` of its own, `NO_PROXY`'s
//! destinations directly, SOCKS5 always directly. Read from the executor's environment when
//! the launch is checked, never from the command's.
//!
//! Only `http://` upstreams are used (a TLS connection to the proxy itself is not made: such
//! a variable is ignored, with a debug line); credentials in the URL go as
//! `Proxy-Authorization: Basic`.

use std::net::IpAddr;

use base64::Engine as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::debug;

use super::{CONNECT_TIMEOUT, HANDSHAKE_TIMEOUT};

/// The longest answer head an upstream may give a `CONNECT`: far above any real proxy's, and
/// a proxy that sends more is not one.
const MAX_CONNECT_ANSWER_BYTES: usize = 16 * 1024;

/// One upstream proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub host: String,
    pub port: u16,
    /// `Basic …` for `Proxy-Authorization`, from the URL's user and password.
    pub authorization: Option<String>,
}

/// The executor's upstream proxies and the destinations that go around them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Upstreams {
    http: Option<Upstream>,
    https: Option<Upstream>,
    /// `NO_PROXY`'s entries, lower case: `*`, a name (and the names below it), an address.
    exempt: Vec<String>,
}

impl Upstreams {
    /// From the executor's environment: `HTTP_PROXY`/`http_proxy`, `HTTPS_PROXY`/
    /// `https_proxy`, `NO_PROXY`/`no_proxy` (the lower-case name first, as curl reads them).
    pub fn from_env(env: &[(String, String)]) -> Self {
        let get = |names: [&str; 2]| {
            names.iter().find_map(|name| {
                env.iter()
                    .find(|(key, value)| key == name && !value.is_empty())
                    .map(|(_, v)| v.as_str())
            })
        };
        let exempt = get(["no_proxy", "NO_PROXY"])
            .unwrap_or_default()
            .split(',')
            .map(|entry| entry.trim().trim_start_matches('.').to_ascii_lowercase())
            .filter(|entry| !entry.is_empty())
            .collect();
        Self {
            http: get(["http_proxy", "HTTP_PROXY"]).and_then(parse),
            https: get(["https_proxy", "HTTPS_PROXY"]).and_then(parse),
            exempt,
        }
    }

    /// The upstream a forward request to `host` goes through, if any.
    pub fn for_request(&self, host: &str) -> Option<&Upstream> {
        self.http.as_ref().filter(|_| !self.is_exempt(host))
    }

    /// The upstream a tunnel to `host` goes through, if any.
    pub fn for_tunnel(&self, host: &str) -> Option<&Upstream> {
        self.https.as_ref().filter(|_| !self.is_exempt(host))
    }

    fn is_exempt(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        self.exempt.iter().any(|entry| {
            entry == "*"
                || *entry == host
                || (host.ends_with(entry.as_str())
                    && host.as_bytes().get(host.len() - entry.len() - 1) == Some(&b'.')
                    && host.parse::<IpAddr>().is_err())
        })
    }
}

/// An upstream from `http://[user[:password]@]host[:port]`; `None` for anything else.
fn parse(value: &str) -> Option<Upstream> {
    let with_scheme =
        if value.contains("://") { value.to_owned() } else { format!("http://{value}") };
    let url = url::Url::parse(&with_scheme).ok()?;
    if url.scheme() != "http" {
        debug!(scheme = url.scheme(), "upstream proxy ignored: only http:// upstreams are used");
        return None;
    }
    let host = url.host_str()?.trim_start_matches('[').trim_end_matches(']').to_owned();
    let authorization = (!url.username().is_empty()).then(|| {
        let user = percent_decoded(url.username());
        let password = percent_decoded(url.password().unwrap_or_default());
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {credentials}")
    });
    Some(Upstream { host, port: url.port().unwrap_or(80), authorization })
}

fn percent_decoded(text: &str) -> String {
    url::form_urlencoded::parse(format!("x={text}").as_bytes())
        .next()
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default()
}

/// A connection to `upstream` itself.
pub async fn connect(upstream: &Upstream) -> std::io::Result<TcpStream> {
    let address = (upstream.host.as_str(), upstream.port);
    let stream =
        tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await.map_err(
            |_| std::io::Error::new(std::io::ErrorKind::TimedOut, "upstream connect timed out"),
        )??;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// A tunnel to `host:port` through `upstream` (`CONNECT`, answered 2xx).
pub async fn tunnel(upstream: &Upstream, host: &str, port: u16) -> std::io::Result<TcpStream> {
    let mut stream = connect(upstream).await?;
    let authority = match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(_)) => format!("[{host}]:{port}"),
        _ => format!("{host}:{port}"),
    };
    let mut request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
    if let Some(authorization) = &upstream.authorization {
        request.push_str(&format!("Proxy-Authorization: {authorization}\r\n"));
    }
    request.push_str("\r\n");
    let answered = async {
        stream.write_all(request.as_bytes()).await?;
        read_connect_answer(&mut stream).await
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, answered).await.map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::TimedOut, "upstream CONNECT timed out")
    })??;
    Ok(stream)
}

/// Reads the answer head to a `CONNECT` byte by byte (nothing of the tunnel is read past it)
/// and fails unless its status is 2xx.
async fn read_connect_answer(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(256);
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_CONNECT_ANSWER_BYTES {
            return Err(std::io::Error::other("upstream CONNECT answer head too long"));
        }
        head.push(stream.read_u8().await?);
    }
    let status = head.split(|b| *b == b' ').nth(1).and_then(|s| std::str::from_utf8(s).ok());
    match status.and_then(|s| s.parse::<u16>().ok()) {
        Some(200..=299) => Ok(()),
        other => Err(std::io::Error::other(format!("upstream refused CONNECT: {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn upstreams_come_from_the_executors_variables() {
        let upstreams = Upstreams::from_env(&env(&[
            ("HTTP_PROXY", "http://proxy.test:3128"),
            ("https_proxy", "http://user:p%40ss@secure.test"),
            ("HTTPS_PROXY", "http://ignored.test:1"),
            ("NO_PROXY", "internal.test, .corp.test,10.0.0.1"),
        ]));
        let http = upstreams.for_request("example.test").unwrap();
        assert_eq!(
            (http.host.as_str(), http.port, http.authorization.as_deref()),
            ("proxy.test", 3128, None)
        );
        let https = upstreams.for_tunnel("example.test").unwrap();
        assert_eq!((https.host.as_str(), https.port), ("secure.test", 80));
        assert_eq!(https.authorization.as_deref(), Some("Basic dXNlcjpwQHNz"));
        for exempt in ["internal.test", "a.internal.test", "x.corp.test", "corp.test", "10.0.0.1"] {
            assert!(upstreams.for_tunnel(exempt).is_none(), "{exempt}");
        }
        for through in ["notinternal.test", "10.0.0.10", "example.test"] {
            assert!(upstreams.for_tunnel(through).is_some(), "{through}");
        }
        assert!(
            Upstreams::from_env(&env(&[("HTTPS_PROXY", "https://tls.test:443")]))
                .for_tunnel("a")
                .is_none()
        );
        assert!(
            Upstreams::from_env(&env(&[("NO_PROXY", "*"), ("HTTP_PROXY", "p:1")]))
                .for_request("a")
                .is_none()
        );
        assert_eq!(
            Upstreams::from_env(&env(&[("HTTP_PROXY", "p.test:8080")]))
                .for_request("a")
                .unwrap()
                .port,
            8080
        );
    }
}
