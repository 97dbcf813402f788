//! Peers for managed-network tests: an upstream forward proxy standing in for the
//! executor's own or the operator's, and an HTTPS origin standing in for a real API host.

/// A forward proxy of the test's own standing in for the executor's (`HTTP_PROXY`,
/// `HTTPS_PROXY`) or the operator's TCP upstream: it takes forward requests and `CONNECT`s,
/// sends each on as [`Onward`] says, and writes down each request line it got. A destination
/// it cannot reach gets a `502`.
pub struct UpstreamProxy {
    pub port: u16,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

/// Where an [`UpstreamProxy`] sends what it takes.
#[derive(Clone)]
pub enum Onward {
    /// Everything to this port on `127.0.0.1`, whatever was asked.
    To(u16),
    /// Where each request asked: these names to these addresses, any other host as it is.
    AsAsked(Vec<(&'static str, std::net::SocketAddr)>),
}

impl UpstreamProxy {
    /// On `127.0.0.1`, everything to `origin`.
    pub async fn start(origin: u16) -> Self {
        Self::start_at(std::net::Ipv4Addr::LOCALHOST.into(), Onward::To(origin)).await
    }

    /// On `address`, sending on as `onward` says.
    pub async fn start_at(address: std::net::IpAddr, onward: Onward) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind((address, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { return };
                let (log, onward) = (log.clone(), onward.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    while !head.ends_with(b"\r\n\r\n") {
                        let Ok(byte) = client.read_u8().await else { return };
                        head.push(byte);
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    let line = text.lines().next().unwrap_or_default().to_owned();
                    log.lock().unwrap().push(line.clone());
                    let reached = match &onward {
                        Onward::To(port) => {
                            tokio::net::TcpStream::connect(("127.0.0.1", *port)).await
                        }
                        Onward::AsAsked(names) => {
                            let (host, port) = asked(&line);
                            match names.iter().find(|(name, _)| *name == host) {
                                Some((_, address)) => tokio::net::TcpStream::connect(address).await,
                                None => tokio::net::TcpStream::connect((host.as_str(), port)).await,
                            }
                        }
                    };
                    let Ok(mut origin) = reached else {
                        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                        return;
                    };
                    if line.starts_with("CONNECT ") {
                        client
                            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                            .await
                            .unwrap();
                    } else {
                        origin.write_all(&head).await.unwrap();
                    }
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut origin).await;
                });
            }
        });
        Self { port, seen, task }
    }

    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// The host (an IPv6 address without brackets) and port a request line asks for:
/// `CONNECT host:port HTTP/1.1`, or `GET http://host[:port]/… HTTP/1.1`.
fn asked(line: &str) -> (String, u16) {
    let target = line.split(' ').nth(1).unwrap_or_default();
    let authority = target.split_once("://").map_or(target, |(_, rest)| rest);
    let authority = authority.split('/').next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse().unwrap_or(80)),
        _ => (authority, 80),
    };
    (host.trim_start_matches('[').trim_end_matches(']').to_owned(), port)
}

impl Drop for UpstreamProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An HTTPS origin standing in for `api.github.com`, its certificate signed by a CA of the
/// test's own (written to `ca.pem` in `dir`): it answers each request with the request's
/// `authorization` header.
pub struct TlsOrigin {
    pub port: u16,
    pub ca: std::path::PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl TlsOrigin {
    pub async fn start(dir: &std::path::Path, host: &str) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "test origin CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec![host.to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, ca_cert.pem()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else { return };
                    let mut head = Vec::new();
                    while !head.ends_with(b"\r\n\r\n") {
                        let Ok(byte) = tls.read_u8().await else { return };
                        head.push(byte);
                    }
                    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                    let seen = text
                        .lines()
                        .find_map(|line| line.strip_prefix("authorization: "))
                        .unwrap_or("none")
                        .to_owned();
                    // The header's value as sent (the lower-casing above was for the name).
                    let original = String::from_utf8_lossy(&head);
                    let at = text.find(&seen).unwrap_or(0);
                    let seen = &original[at..at + seen.len()];
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{seen}",
                        seen.len()
                    );
                    let _ = tls.write_all(answer.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        Self { port, ca, task }
    }
}

impl Drop for TlsOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A host a masked secret is bound to, as masking tests stage it: a [`TlsOrigin`] standing in
/// for `host`, behind an [`UpstreamProxy`] that the executor reaches it through.
pub struct MaskedHost {
    pub origin: TlsOrigin,
    pub upstream: UpstreamProxy,
    proxy_url: String,
    ca: String,
}

impl MaskedHost {
    pub async fn start(dir: &std::path::Path, host: &str) -> Self {
        let origin = TlsOrigin::start(dir, host).await;
        let upstream = UpstreamProxy::start(origin.port).await;
        let proxy_url = format!("http://127.0.0.1:{}", upstream.port);
        let ca = origin.ca.display().to_string();
        Self { origin, upstream, proxy_url, ca }
    }

    /// The executor's environment: the upstream as its `HTTPS_PROXY` (loopback exempt), the
    /// origin's CA as its `SSL_CERT_FILE`, and `secret` as `variable`.
    pub fn executor_env<'a>(
        &'a self,
        variable: &'a str,
        secret: &'a str,
    ) -> Vec<(&'a str, &'a str)> {
        vec![
            ("HTTPS_PROXY", self.proxy_url.as_str()),
            ("NO_PROXY", "127.0.0.1"),
            ("SSL_CERT_FILE", self.ca.as_str()),
            (variable, secret),
        ]
    }
}
