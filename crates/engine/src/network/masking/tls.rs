//! A tunnel to a host a secret is bound to, opened: TLS terminated with a certificate of the
//! proxy's authority, each request's headers unmasked ([`super::Masking::unmask_request`]), and the
//! request sent on over TLS of the proxy's own to the real host, verified against the
//! executor's roots. Requests of one tunnel share one connection to the host, made when the
//! first comes (again if the host closed it).

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tracing::debug;

use super::Masking;
use super::ca::Authority;
use super::providers::Outgoing;

type Body = BoxBody<Bytes, hyper::Error>;

/// How long the command may take to send a request's head inside the tunnel.
const HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves the command's side of a tunnel to `host` (already answered `200`), reaching the
/// host through `connect` (a connection to it, direct or through an upstream) for each
/// connection it needs.
pub async fn serve<C, F>(
    client: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    host: String,
    port: u16,
    authority: Arc<Authority>,
    masking: Arc<Masking>,
    connect: C,
) where
    C: Fn() -> F + Send + Sync + 'static,
    F: Future<Output = std::io::Result<TcpStream>> + Send,
{
    let config = match authority.server_config(&host) {
        Ok(config) => config,
        Err(error) => return debug!(%error, "no certificate for a masked host"),
    };
    let tls = match tokio_rustls::TlsAcceptor::from(config).accept(client).await {
        Ok(tls) => tls,
        Err(error) => return debug!(%error, "masked tunnel: the command's TLS handshake failed"),
    };
    let origin: Arc<tokio::sync::Mutex<Option<SendRequest<Incoming>>>> = Arc::default();
    let connect = Arc::new(connect);
    let service = service_fn(move |request: Request<Incoming>| {
        let (host, masking, origin, connect) =
            (host.clone(), masking.clone(), origin.clone(), connect.clone());
        async move {
            let mut origin = origin.lock().await;
            let response = forward(request, (&host, port), &masking, &mut origin, &*connect).await;
            Ok::<_, std::convert::Infallible>(response.unwrap_or_else(|error| {
                debug!(%error, "masked request failed");
                let body = Full::new(Bytes::from_static(b"upstream failure"));
                let mut response = Response::new(body.map_err(|never| match never {}).boxed());
                *response.status_mut() = StatusCode::BAD_GATEWAY;
                response
            }))
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .preserve_header_case(true)
        .serve_connection(TokioIo::new(tls), service)
        .await;
    if let Err(error) = served {
        debug!(%error, "masked tunnel ended");
    }
}

async fn forward<C, F>(
    mut request: Request<Incoming>,
    (host, port): (&str, u16),
    masking: &Masking,
    origin: &mut Option<SendRequest<Incoming>>,
    connect: &C,
) -> Result<Response<Body>, Box<dyn std::error::Error + Send + Sync>>
where
    C: Fn() -> F,
    F: Future<Output = std::io::Result<TcpStream>>,
{
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let to = Outgoing { secure: true, host, port, path: &path };
    masking.unmask_request(to, request.headers_mut());
    if origin.as_ref().is_none_or(|sender| sender.is_closed()) {
        let stream = connect().await?;
        let name = ServerName::try_from(host.to_owned())?;
        let tls = tokio_rustls::TlsConnector::from(client_config()?).connect(name, stream).await?;
        let (sender, connection) = hyper::client::conn::http1::Builder::new()
            .preserve_header_case(true)
            .handshake(TokioIo::new(tls))
            .await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                debug!(%error, "masked origin connection ended");
            }
        });
        *origin = Some(sender);
    }
    let sender = origin.as_mut().ok_or("no origin connection")?;
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    Ok(response.map(|body| body.boxed()))
}

/// The TLS client configuration the proxy reaches masked hosts with: the executor's roots
/// (its `SSL_CERT_FILE` if set), HTTP/1.1.
fn client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: std::sync::OnceLock<Result<Arc<rustls::ClientConfig>, String>> =
        std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(super::ca::native_roots().iter().cloned());
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
}
