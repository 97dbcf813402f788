//! The WebSocket handshake on `/`: the checks and answers of axum's `WebSocketUpgrade`, done
//! here so that the connection gets the `tokio_tungstenite` stream itself rather than axum's
//! wrapper around it. Only that stream can send a message as several frames, which is how a
//! big answer leaves without being copied whole into the library's write buffer (see
//! [`super::direct::FRAGMENT_BYTES`]).
//!
//! Refusals keep axum's status codes and words, so a client sees the same answers as before.

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tracing::debug;

/// An upgraded connection's WebSocket.
pub(crate) type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// A request that asks, correctly, to become a WebSocket.
pub(crate) struct Upgrade {
    key: HeaderValue,
    on_upgrade: OnUpgrade,
}

/// Why a request cannot become a WebSocket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    MethodNotGet,
    NoConnectionUpgrade,
    NoUpgradeWebsocket,
    WrongVersion,
    NoKey,
    /// The HTTP connection cannot be taken over (no upgrade was offered by hyper).
    NotUpgradable,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            Refusal::MethodNotGet => {
                (StatusCode::METHOD_NOT_ALLOWED, "Request method must be `GET`")
            }
            Refusal::NoConnectionUpgrade => {
                (StatusCode::BAD_REQUEST, "Connection header did not include 'upgrade'")
            }
            Refusal::NoUpgradeWebsocket => {
                (StatusCode::BAD_REQUEST, "`Upgrade` header did not include 'websocket'")
            }
            Refusal::WrongVersion => {
                (StatusCode::BAD_REQUEST, "`Sec-WebSocket-Version` header did not include '13'")
            }
            Refusal::NoKey => (StatusCode::BAD_REQUEST, "`Sec-WebSocket-Key` header missing"),
            Refusal::NotUpgradable => (
                StatusCode::UPGRADE_REQUIRED,
                "WebSocket request couldn't be upgraded since no upgrade state was present",
            ),
        };
        (status, body).into_response()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Upgrade {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Refusal> {
        if parts.method != Method::GET {
            return Err(Refusal::MethodNotGet);
        }
        if !header_contains(&parts.headers, header::CONNECTION, "upgrade") {
            return Err(Refusal::NoConnectionUpgrade);
        }
        if !header_is(&parts.headers, header::UPGRADE, "websocket") {
            return Err(Refusal::NoUpgradeWebsocket);
        }
        let key = parts.headers.get(header::SEC_WEBSOCKET_KEY).ok_or(Refusal::NoKey)?.clone();
        if !header_is(&parts.headers, header::SEC_WEBSOCKET_VERSION, "13") {
            return Err(Refusal::WrongVersion);
        }
        let on_upgrade = parts.extensions.remove::<OnUpgrade>().ok_or(Refusal::NotUpgradable)?;
        Ok(Upgrade { key, on_upgrade })
    }
}

impl Upgrade {
    /// Answers `101 Switching Protocols` and, once hyper hands the connection over, runs
    /// `serve` on it as a WebSocket with `config`'s limits. A connection lost during the
    /// hand-over is dropped with `serve` (and whatever it holds) unrun.
    pub(crate) fn accept<F, Fut>(self, config: WebSocketConfig, serve: F) -> Response
    where
        F: FnOnce(Socket) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let accept = derive_accept_key(self.key.as_bytes());
        let on_upgrade = self.on_upgrade;
        tokio::spawn(async move {
            let upgraded = match on_upgrade.await {
                Ok(upgraded) => upgraded,
                Err(error) => return debug!(%error, "websocket upgrade lost"),
            };
            let socket = WebSocketStream::from_raw_socket(
                TokioIo::new(upgraded),
                Role::Server,
                Some(config),
            )
            .await;
            serve(socket).await;
        });
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(
            header::SEC_WEBSOCKET_ACCEPT,
            HeaderValue::from_str(&accept).expect("base64 is a valid header value"),
        );
        response
    }
}

/// Whether `key`'s (first) value is `value`, ignoring case.
fn header_is(headers: &HeaderMap, key: HeaderName, value: &str) -> bool {
    headers.get(&key).is_some_and(|header| header.as_bytes().eq_ignore_ascii_case(value.as_bytes()))
}

/// Whether `key`'s (first) value holds `value` anywhere, ignoring case (`keep-alive, Upgrade`).
fn header_contains(headers: &HeaderMap, key: HeaderName, value: &str) -> bool {
    headers
        .get(&key)
        .and_then(|header| header.to_str().ok())
        .is_some_and(|header| header.to_ascii_lowercase().contains(value))
}

#[cfg(test)]
mod tests {
    use axum::http::Request;

    use super::*;

    async fn refusal(request: Request<()>) -> Option<Refusal> {
        let (mut parts, ()) = request.into_parts();
        Upgrade::from_request_parts(&mut parts, &()).await.err()
    }

    fn asking() -> axum::http::request::Builder {
        Request::get("/")
            .header("connection", "keep-alive, Upgrade")
            .header("upgrade", "WebSocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
    }

    #[tokio::test]
    async fn each_missing_part_of_an_upgrade_is_named() {
        let post = Request::post("/").body(()).unwrap();
        assert_eq!(refusal(post).await, Some(Refusal::MethodNotGet));
        let plain = Request::get("/").body(()).unwrap();
        assert_eq!(refusal(plain).await, Some(Refusal::NoConnectionUpgrade));
        let no_upgrade = Request::get("/").header("connection", "upgrade").body(()).unwrap();
        assert_eq!(refusal(no_upgrade).await, Some(Refusal::NoUpgradeWebsocket));
        let mut old = asking().body(()).unwrap();
        old.headers_mut().insert("sec-websocket-version", HeaderValue::from_static("8"));
        assert_eq!(refusal(old).await, Some(Refusal::WrongVersion));
        let mut keyless = asking().body(()).unwrap();
        keyless.headers_mut().remove("sec-websocket-key");
        assert_eq!(refusal(keyless).await, Some(Refusal::NoKey));
        // Well formed, but not from a connection hyper can hand over.
        assert_eq!(refusal(asking().body(()).unwrap()).await, Some(Refusal::NotUpgradable));
    }

    #[tokio::test]
    async fn a_refusal_is_an_http_error_in_axums_words() {
        let answer = |refusal: Refusal| async move {
            let response = refusal.into_response();
            let body = axum::body::to_bytes(response.into_body(), 1024).await.unwrap();
            String::from_utf8(body.to_vec()).unwrap()
        };
        assert_eq!(Refusal::WrongVersion.into_response().status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            answer(Refusal::WrongVersion).await,
            "`Sec-WebSocket-Version` header did not include '13'"
        );
        assert_eq!(Refusal::NotUpgradable.into_response().status(), StatusCode::UPGRADE_REQUIRED);
        assert_eq!(Refusal::MethodNotGet.into_response().status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(answer(Refusal::MethodNotGet).await, "Request method must be `GET`");
        assert_eq!(
            answer(Refusal::NoConnectionUpgrade).await,
            "Connection header did not include 'upgrade'"
        );
    }
}
