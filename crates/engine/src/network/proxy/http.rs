//! The HTTP side of a process's proxy: forward requests (`GET http://host/…`) and `CONNECT`
//! tunnels, on hyper's HTTP/1 server and client.
//!
//! A forward request goes to its origin in origin form on a connection of its own, with the
//! hop-by-hop headers (`Proxy-*`, `Connection` and what it lists, `Keep-Alive`) dropped both
//! ways, bodies streamed. A `CONNECT` is answered `200` once its destination has been reached,
//! then the bytes are copied both ways. A refusal is the reference's `403`
//! ([`crate::network::blocked`]); a destination that cannot be reached is `502`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tether_protocol::network::ProxyProtocol;
use tokio::net::TcpStream;
use tracing::debug;

use super::gate::{self, Admission, Target};
use super::upstream;
use super::{HANDSHAKE_TIMEOUT, Proxy, splice};
use crate::network::blocked::Blocked;
use crate::network::masking;

type Body = BoxBody<Bytes, hyper::Error>;

/// Headers that belong to one hop, never passed on.
const HOP_BY_HOP: [&str; 5] =
    ["proxy-connection", "proxy-authorization", "proxy-authenticate", "keep-alive", "connection"];

/// What a connection becomes once its `CONNECT` is answered: a tunnel, run by the same task
/// as the connection (so it holds the connection's place in the proxy's bounds, and ends with
/// the proxy), after hyper has handed the connection over.
type Tunnel = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;
type TunnelSlot = Arc<std::sync::Mutex<Option<Tunnel>>>;

/// Serves one connection from the process until it closes, its tunnel included.
pub(super) async fn serve(proxy: Arc<Proxy>, stream: TcpStream, client: SocketAddr) {
    let slot = TunnelSlot::default();
    let tunnel = slot.clone();
    let service = service_fn(move |request| handle(proxy.clone(), client, request, tunnel.clone()));
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT)
        .preserve_header_case(true)
        .title_case_headers(false)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
    if let Err(error) = served {
        debug!(%error, "proxy connection ended");
    }
    let tunnel = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
    if let Some(tunnel) = tunnel {
        tunnel.await;
    }
}

async fn handle(
    proxy: Arc<Proxy>,
    client: SocketAddr,
    request: Request<Incoming>,
    slot: TunnelSlot,
) -> Result<Response<Body>, Infallible> {
    Ok(match request.method() == Method::CONNECT {
        true => tunnel(&proxy, client, request, &slot).await,
        false if request.headers().contains_key(UNIX_SOCKET_HEADER) => {
            proxy.refuse_unix_socket(request.method().as_str(), client).await;
            text(StatusCode::NOT_IMPLEMENTED, "unix sockets unsupported")
        }
        false => forward(&proxy, client, request).await,
    })
}

/// The header a request names a Unix socket to reach with (the reference's); such a request
/// is refused ([`super::gate::UNIX_SOCKET_UNSUPPORTED`]), never sent on with it.
const UNIX_SOCKET_HEADER: &str = "x-unix-socket";

/// `CONNECT host:port`: answered here; the tunnel is left in `slot` for the connection's task.
async fn tunnel(
    proxy: &Proxy,
    client: SocketAddr,
    request: Request<Incoming>,
    slot: &TunnelSlot,
) -> Response<Body> {
    let Some((host, port)) =
        request.uri().authority().and_then(|a| Some((unbracketed(a.host()), a.port_u16()?)))
    else {
        return plain(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
    };
    let target = Target {
        protocol: ProxyProtocol::HttpsConnect,
        host: &host,
        port,
        method: Some("CONNECT"),
        client,
    };
    let addresses = match proxy.admit(target).await {
        Admission::Go(addresses) => addresses,
        Admission::Refused(reason, source) => {
            let blocked = Blocked { host: &host, port, reason, source, protocol: target.protocol };
            return refusal(&blocked);
        }
    };
    let through = proxy.config.routes.for_tunnel(&host).cloned();
    let reach = move |host: String| {
        let (through, addresses) = (through.clone(), addresses.clone());
        async move {
            match through {
                Some(through) => {
                    upstream::tunnel(&through, &host, port).await.map_err(std::io::Error::other)
                }
                None => gate::connect(&addresses).await,
            }
        }
    };
    // A host a masked secret is bound to: the tunnel is opened here, and the secret put back
    // in what goes to the host ([`crate::network::masking`]).
    let run = |tunnel: Tunnel| {
        *slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(tunnel);
    };
    if let Some(masked) = proxy.masked.as_ref().filter(|m| m.masking.binds(&host, port)).cloned() {
        run(Box::pin(async move {
            match hyper::upgrade::on(request).await {
                Ok(upgraded) => {
                    let named = host.clone();
                    let connect = move || reach(named.clone());
                    let client = TokioIo::new(upgraded);
                    let (authority, masking) = (masked.authority, masked.masking);
                    masking::tls::serve(client, host, port, authority, masking, connect).await;
                }
                Err(error) => debug!(%error, "CONNECT upgrade failed"),
            }
        }));
        return Response::new(empty());
    }
    let upstream = match reach(host.clone()).await {
        Ok(upstream) => upstream,
        Err(error) => return unreachable(&host, port, &error),
    };
    run(Box::pin(async move {
        match hyper::upgrade::on(request).await {
            Ok(upgraded) => splice(TokioIo::new(upgraded), upstream).await,
            Err(error) => debug!(%error, "CONNECT upgrade failed"),
        }
    }));
    Response::new(empty())
}

/// A request in absolute form, `METHOD http://host[:port]/path`.
async fn forward(proxy: &Proxy, client: SocketAddr, request: Request<Incoming>) -> Response<Body> {
    let uri = request.uri().clone();
    if uri.scheme_str() != Some("http") {
        return plain(
            StatusCode::BAD_REQUEST,
            "this proxy takes absolute http:// requests, and CONNECT for anything else",
        );
    }
    let Some(authority) = uri.authority() else {
        return plain(StatusCode::BAD_REQUEST, "the request names no host");
    };
    let host = unbracketed(authority.host());
    let port = authority.port_u16().unwrap_or(80);
    let method = request.method().as_str().to_owned();
    let target =
        Target { protocol: ProxyProtocol::Http, host: &host, port, method: Some(&method), client };
    let addresses = match proxy.admit(target).await {
        Admission::Go(addresses) => addresses,
        Admission::Refused(reason, source) => {
            let blocked = Blocked { host: &host, port, reason, source, protocol: target.protocol };
            return refusal(&blocked);
        }
    };
    let through = proxy.config.routes.for_request(&host);
    let reached = match through {
        Some(through) => upstream::connect(through).await,
        None => gate::connect(&addresses).await,
    };
    let upstream = match reached {
        Ok(upstream) => upstream,
        Err(error) => return unreachable(&host, port, &error),
    };
    let (mut parts, body) = request.into_parts();
    drop_hop_by_hop(&mut parts.headers);
    // A custom provider's `http://` destination on loopback: its secret goes back in here.
    if let Some(masked) = proxy.masked.as_ref().filter(|m| m.masking.binds_plain(&host, port)) {
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let to = masking::providers::Outgoing { secure: false, host: &host, port, path };
        masked.masking.unmask_request(to, &mut parts.headers);
    }
    match through {
        // An upstream proxy takes the request in absolute form, with its own credentials.
        Some(through) => {
            if let Some(value) =
                through.authorization.as_deref().and_then(|a| HeaderValue::from_str(a).ok())
            {
                parts.headers.insert(header::PROXY_AUTHORIZATION, value);
            }
        }
        None => parts.uri = origin_form(&uri),
    }
    if !parts.headers.contains_key(header::HOST)
        && let Ok(value) = HeaderValue::from_str(authority.as_str())
    {
        parts.headers.insert(header::HOST, value);
    }
    let handshake = hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .handshake(TokioIo::new(upstream))
        .await;
    let (mut sender, connection) = match handshake {
        Ok(pair) => pair,
        Err(error) => return unreachable(&host, port, &std::io::Error::other(error)),
    };
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            debug!(%error, "proxied origin connection ended");
        }
    });
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            drop_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, body.boxed())
        }
        Err(error) => unreachable(&host, port, &std::io::Error::other(error)),
    }
}

/// `/path?query` of an absolute URI.
fn origin_form(uri: &Uri) -> Uri {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    path.parse().unwrap_or_else(|_| Uri::from_static("/"))
}

/// Removes the headers of one hop, and those `Connection` names.
fn drop_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// A host as reports and policies name it: lower case, no trailing dot, an IPv6 literal
/// without its brackets.
fn unbracketed(host: &str) -> String {
    super::gate::normalized(host.trim_start_matches('[').trim_end_matches(']'))
}

fn refusal(blocked: &Blocked<'_>) -> Response<Body> {
    let answer = blocked.answer();
    let mut response = Response::new(full(answer.body));
    *response.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::FORBIDDEN);
    for (name, value) in answer.headers {
        response.headers_mut().insert(name, HeaderValue::from_static(value));
    }
    response
}

/// `502` with the reference's words: the destination was allowed but did not answer (what
/// went wrong is logged, not told: the command learns nothing of the executor's network).
fn unreachable(host: &str, port: u16, error: &std::io::Error) -> Response<Body> {
    debug!(%error, %host, port, "proxied destination unreachable");
    text(StatusCode::BAD_GATEWAY, "upstream failure")
}

fn plain(status: StatusCode, words: &str) -> Response<Body> {
    text(status, &format!("{words}\n"))
}

fn text(status: StatusCode, body: &str) -> Response<Body> {
    let mut response = Response::new(full(body.as_bytes().to_vec()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

fn full(bytes: Vec<u8>) -> Body {
    Full::new(Bytes::from(bytes)).map_err(|never| match never {}).boxed()
}

fn empty() -> Body {
    full(Vec::new())
}
