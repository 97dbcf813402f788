//! A real HTTP server for `http/request` tests, on `127.0.0.1:0`: the peer the executor talks
//! to. It echoes what reached it, and it can misbehave on purpose (slow heads, slow or broken
//! bodies, redirect chains). It counts the TCP connections it accepts, so a test can prove that
//! a refused request never left the executor.
//!
//! Routes:
//! - anything not listed below: echo — `{method, path, query, headers: [[name, value]…],
//!   bodyBase64}` as JSON, headers in the order the server's HTTP library reports them;
//! - `/status/{code}`: that status, body `status <code>`;
//! - `/cookies`: two `set-cookie` headers, one header whose value is not ASCII text;
//! - `/redirect/{n}`: a chain of `n` 302s ending in `/redirect/0` (200, `landed`);
//! - `/redirect-to?status=S&location=L`: one redirect;
//! - `/slow-head?ms=N`: the head after `N` ms;
//! - `/slow-body?ms=N`: `start` at once, `end` after `N` ms;
//! - `/chunks`: `one\n`, `two\n`, `three\n`, 100 ms apart;
//! - `/large?bytes=N`: `N` bytes of a known pattern ([`large_body`]);
//! - `/fail`: `partial`, then the connection is dropped in the middle of the body;
//! - `/encoded/{coding}?bytes=N`: `N` bytes of text ([`text_body`], 10 000 unless said) encoded
//!   as `coding` says ([`encode`]: `gzip`, `zstd`, `deflate`, or `br`, which always serves
//!   [`BROTLI_BODY`]), with `content-encoding: {coding}` between two marker headers
//!   (`x-before`, `x-after`) and its encoded length. With `zeros=N`, `N` zero bytes instead of
//!   the text; `damage=corrupt` (every byte after the first four, the format's signature,
//!   inverted) or `damage=truncate` (the first half, announced as all there is); `parts=2`,
//!   the encoded bytes in two chunks 100 ms apart, with no length announced.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use futures_util::stream;
use serde_json::json;

use crate::client::b64encode;

/// The host's IPv4 address on its default route: an address that is the host's own, reached
/// from a network namespace only by way out of it (its `127.0.0.1` is its own). `Err` on a
/// host with no route off loopback.
pub fn host_address() -> anyhow::Result<std::net::Ipv4Addr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
    // Connecting a datagram socket sends nothing: it only picks the route and its source.
    socket.connect("203.0.113.1:9").map_err(|error| {
        anyhow::anyhow!("this host has no IPv4 route off loopback ({error}); the test needs one")
    })?;
    match socket.local_addr()?.ip() {
        std::net::IpAddr::V4(address) if !address.is_loopback() => Ok(address),
        other => {
            anyhow::bail!("the default route's source is {other}, not an address off loopback")
        }
    }
}

/// A running peer; stops when dropped.
pub struct HttpPeer {
    /// `http://ADDRESS:PORT` (`127.0.0.1` unless started elsewhere), no trailing slash.
    pub base_url: String,
    connections: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
    /// `/slow-body` responses the peer is done with.
    slow_bodies_over: Arc<AtomicUsize>,
    server: tokio::task::JoinHandle<()>,
}

impl HttpPeer {
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_at(std::net::Ipv4Addr::LOCALHOST).await
    }

    /// A peer listening on `address` (port chosen by the kernel): one of the host's own
    /// addresses other than loopback, for a client in a network namespace of its own, or one
    /// of a [`crate::private_network`]'s.
    pub async fn start_at(address: impl Into<std::net::IpAddr>) -> anyhow::Result<Self> {
        let address = address.into();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let slow_bodies_over = Arc::new(AtomicUsize::new(0));
        let ended = slow_bodies_over.clone();
        let app = Router::new()
            .route("/status/{code}", get(status))
            .route("/cookies", get(cookies))
            .route("/redirect/{n}", get(redirect_chain))
            .route("/redirect-to", axum::routing::any(redirect_to))
            .route("/slow-head", get(slow_head))
            .route("/slow-body", get(move |query| slow_body(query, ended)))
            .route("/chunks", get(chunks))
            .route("/large", get(large))
            .route("/fail", get(fail))
            .route("/encoded/{coding}", axum::routing::any(encoded))
            .fallback(echo)
            .layer(middleware::from_fn_with_state(requests.clone(), record));
        let counter = connections.clone();
        let listener = tokio::net::TcpListener::bind((address, 0)).await?;
        let base_url = format!("http://{}", listener.local_addr()?);
        let listener = listener.tap_io(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { base_url, connections, requests, slow_bodies_over, server })
    }

    /// The absolute URL of `path_and_query` (which starts with `/`).
    pub fn url(&self, path_and_query: &str) -> String {
        format!("{}{path_and_query}", self.base_url)
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// `/slow-body` responses the peer is done with: sent whole (`end` included), or dropped
    /// with their connection.
    pub fn slow_bodies_over(&self) -> usize {
        self.slow_bodies_over.load(Ordering::SeqCst)
    }

    /// Every request that reached the peer, as `METHOD /path?query`, in arrival order.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for HttpPeer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The body `/large?bytes=N` serves.
pub fn large_body(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// The text `/encoded/{coding}?bytes=N` encodes: words from a small vocabulary, in lines, in
/// an order that repeats nowhere near as often as [`large_body`]'s, so it compresses about as
/// much as source code or a page of prose does and decoding it is work of the usual kind.
pub fn text_body(len: usize) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "the", "executor", "decodes", "gzip", "and", "zstd", "bodies", "for", "its", "client",
        "while", "deflate", "or", "brotli", "pass", "through",
    ];
    let mut text = Vec::with_capacity(len + 16);
    // xorshift64: the same words every time, for every peer.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut words_on_line = 0;
    while text.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        text.extend_from_slice(WORDS[(state % 16) as usize].as_bytes());
        words_on_line += 1;
        text.push(if words_on_line % 12 == 0 { b'\n' } else { b' ' });
    }
    text.truncate(len);
    text
}

/// `plain` as `/encoded/{coding}` encodes it: `gzip` (no file name, no time, so the same bytes
/// every time), `zstd`, `deflate` (zlib's format, which is what HTTP calls deflate), at the
/// codecs' fastest levels; `br` is [`BROTLI_BODY`] whatever `plain` is (the peer has no brotli
/// encoder); anything else is `plain` as it is.
pub fn encode(coding: &str, plain: &[u8]) -> Vec<u8> {
    use std::io::Write as _;

    use flate2::Compression;
    use flate2::write::{GzEncoder, ZlibEncoder};

    let finished = |result: std::io::Result<Vec<u8>>| result.expect("encoding into memory");
    match coding {
        "gzip" => {
            let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
            encoder.write_all(plain).expect("encoding into memory");
            finished(encoder.finish())
        }
        "deflate" => {
            let mut encoder = ZlibEncoder::new(Vec::new(), Compression::fast());
            encoder.write_all(plain).expect("encoding into memory");
            finished(encoder.finish())
        }
        "zstd" => finished(zstd::bulk::compress(plain, 1)),
        "br" => BROTLI_BODY.to_vec(),
        _ => plain.to_vec(),
    }
}

/// A brotli body (`brotli is passed through as it came\n`), made with Google's encoder once:
/// the peer has no brotli encoder of its own.
pub const BROTLI_BODY: &[u8] = &[
    0x1b, 0x23, 0x00, 0xf8, 0x1d, 0x09, 0x36, 0x4e, 0xf2, 0xb9, 0x8f, 0xc5, 0x50, 0x25, 0x26, 0xd7,
    0x69, 0x20, 0x6c, 0x6f, 0x5b, 0x01, 0x64, 0x8e, 0x4e, 0x2a, 0xa2, 0x89, 0x50, 0x85, 0x4b, 0x47,
    0x83, 0x7f, 0x54, 0x27, 0xcf, 0x19, 0x00,
];

async fn record(
    State(requests): State<Arc<Mutex<Vec<String>>>>,
    request: Request,
    next: Next,
) -> Response {
    let target = request.uri().path_and_query().map(|pq| pq.as_str()).unwrap_or("/");
    requests.lock().unwrap().push(format!("{} {target}", request.method()));
    next.run(request).await
}

async fn echo(method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let headers: Vec<_> = headers
        .iter()
        .map(|(name, value)| json!([name.as_str(), String::from_utf8_lossy(value.as_bytes())]))
        .collect();
    let echo = json!({
        "method": method.as_str(),
        "path": uri.path(),
        "query": uri.query(),
        "headers": headers,
        "bodyBase64": b64encode(&body),
    });
    ([(header::CONTENT_TYPE, "application/json")], echo.to_string()).into_response()
}

async fn status(Path(code): Path<u16>) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    (status, [("x-peer", "status")], format!("status {code}")).into_response()
}

async fn cookies() -> Response {
    let mut response = "cookies".into_response();
    let headers = response.headers_mut();
    headers.append(header::SET_COOKIE, HeaderValue::from_static("a=1; Path=/"));
    headers.append("x-plain", HeaderValue::from_static("plain"));
    headers.append(header::SET_COOKIE, HeaderValue::from_static("b=2; Path=/"));
    headers.append("x-not-text", HeaderValue::from_bytes("café".as_bytes()).unwrap());
    response
}

async fn redirect_chain(Path(n): Path<u32>) -> Response {
    if n == 0 {
        return "landed".into_response();
    }
    let location = format!("/redirect/{}", n - 1);
    (StatusCode::FOUND, [(header::LOCATION, location)], "redirecting").into_response()
}

async fn redirect_to(Query(query): Query<HashMap<String, String>>) -> Response {
    let status = query.get("status").and_then(|s| s.parse().ok()).unwrap_or(302);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::FOUND);
    let location = query.get("location").cloned().unwrap_or_default();
    (status, [(header::LOCATION, location)], "redirecting").into_response()
}

fn millis(query: &HashMap<String, String>) -> Duration {
    Duration::from_millis(query.get("ms").and_then(|ms| ms.parse().ok()).unwrap_or(1000))
}

async fn slow_head(Query(query): Query<HashMap<String, String>>) -> Response {
    tokio::time::sleep(millis(&query)).await;
    "slow".into_response()
}

async fn slow_body(
    Query(query): Query<HashMap<String, String>>,
    ended: Arc<AtomicUsize>,
) -> Response {
    let pause = millis(&query);
    // Counts the response as over when the body goes: sent whole, or dropped with its
    // connection.
    let over = Over(ended);
    let parts = stream::unfold(0, move |step| {
        let _over = &over;
        async move {
            match step {
                0 => Some((Ok::<_, std::io::Error>(Bytes::from_static(b"start")), 1)),
                1 => {
                    tokio::time::sleep(pause).await;
                    Some((Ok(Bytes::from_static(b"end")), 2))
                }
                _ => None,
            }
        }
    });
    Body::from_stream(parts).into_response()
}

/// Adds one to its count when dropped.
struct Over(Arc<AtomicUsize>);

impl Drop for Over {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

async fn chunks() -> Response {
    let parts = stream::unfold(0, |step| async move {
        let chunk: &'static [u8] = match step {
            0 => b"one\n",
            1 => b"two\n",
            2 => b"three\n",
            _ => return None,
        };
        if step > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Some((Ok::<_, std::io::Error>(Bytes::from_static(chunk)), step + 1))
    });
    ([(header::CONTENT_TYPE, "text/plain")], Body::from_stream(parts)).into_response()
}

async fn large(Query(query): Query<HashMap<String, String>>) -> Response {
    let len = query.get("bytes").and_then(|n| n.parse().ok()).unwrap_or(3 * 1024 * 1024);
    // The last body made is kept and sent again while the size asked for is the same: making
    // 100 MB of the pattern takes longer than sending it, and a benchmark would otherwise
    // time the peer making it.
    static LAST: Mutex<Option<Bytes>> = Mutex::new(None);
    let body = {
        let mut last = LAST.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match last.as_ref().filter(|body| body.len() == len) {
            Some(body) => body.clone(),
            None => last.insert(Bytes::from(large_body(len))).clone(),
        }
    };
    body.into_response()
}

async fn encoded(
    Path(coding): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let number = |name: &str| query.get(name).and_then(|n| n.parse::<usize>().ok());
    let mut body = match number("zeros") {
        Some(zeros) => Bytes::from(encode(&coding, &vec![0; zeros])),
        None => encoded_text(&coding, number("bytes").unwrap_or(10_000)),
    };
    match query.get("damage").map(String::as_str) {
        Some("corrupt") => {
            body = body.iter().enumerate().map(|(i, &b)| if i < 4 { b } else { !b }).collect()
        }
        Some("truncate") => body.truncate(body.len() / 2),
        _ => {}
    }
    let headers = [
        (header::CONTENT_TYPE, "text/plain".to_owned()),
        (header::HeaderName::from_static("x-before"), "1".to_owned()),
        (header::CONTENT_ENCODING, coding),
        (header::HeaderName::from_static("x-after"), "2".to_owned()),
    ];
    if number("parts") != Some(2) {
        return (headers, body).into_response();
    }
    let mut second = body;
    let first = second.split_to(second.len() / 2);
    let parts = stream::unfold(0, move |step| {
        let (first, second) = (first.clone(), second.clone());
        async move {
            match step {
                0 => Some((Ok::<_, std::io::Error>(first), 1)),
                1 => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Some((Ok(second), 2))
                }
                _ => None,
            }
        }
    });
    (headers, Body::from_stream(parts)).into_response()
}

/// [`text_body`] of `len` bytes encoded as `coding` says. The last one made is kept and sent
/// again while the same is asked for, as [`large`] keeps its body: encoding 100 MB takes
/// longer than decoding it, and a benchmark would otherwise time the peer encoding it.
fn encoded_text(coding: &str, len: usize) -> Bytes {
    static LAST: Mutex<Option<(String, usize, Bytes)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match last.as_ref() {
        Some((made_as, made_len, body)) if made_as == coding && *made_len == len => body.clone(),
        _ => {
            let body = Bytes::from(encode(coding, &text_body(len)));
            last.insert((coding.to_owned(), len, body)).2.clone()
        }
    }
}

/// A chunked body that errors after its first chunk: the HTTP library then drops the
/// connection without ending the body.
async fn fail() -> Response {
    let parts = stream::unfold(0, |step| async move {
        match step {
            0 => Some((Ok(Bytes::from_static(b"partial")), 1)),
            1 => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Some((Err(std::io::Error::other("the peer broke off")), 2))
            }
            _ => None,
        }
    });
    Body::from_stream(parts).into_response()
}
