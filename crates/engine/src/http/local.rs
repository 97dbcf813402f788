//! [`LocalHttpClient`]: requests sent from this machine, with reqwest (rustls, HTTP/1.1 and
//! HTTP/2, the system's proxy settings, gzip and zstd bodies decoded).

use std::sync::OnceLock;

use async_trait::async_trait;
use futures_util::StreamExt;
use reqwest::{Request, Response};
use tether_protocol::ByteChunk;
use tether_protocol::http::{
    HttpRedirectPolicy, HttpRequestParams, HttpRequestResponse, HttpResponseHeader,
};
use tokio::time::Instant;
use tracing::debug;

use super::prepare::{PreparedRequest, prepare};
use super::redirect::{MAX_REDIRECTS, redirected};
use super::{
    HttpBodyError, HttpBodyStream, HttpClient, HttpError, HttpSendError, SendCause,
    TransportFailure,
};

/// The executor's HTTP client. Holds one reqwest client, so every request of a server shares
/// one connection pool (and one TLS configuration).
#[derive(Default)]
pub struct LocalHttpClient {
    /// Built on first use: a server that never sends HTTP never loads TLS roots, and a machine
    /// whose TLS setup is broken still serves everything else (its HTTP requests fail with the
    /// reason).
    client: OnceLock<Result<reqwest::Client, String>>,
}

impl LocalHttpClient {
    pub fn new() -> Self {
        Self::default()
    }

    fn client(&self) -> Result<&reqwest::Client, HttpSendError> {
        let client = self.client.get_or_init(|| {
            reqwest::Client::builder()
                // Redirects are followed by hand (see `redirect`), so one client serves both
                // redirect policies and one deadline covers every hop.
                .redirect(reqwest::redirect::Policy::none())
                // As the reference does: `accept-encoding: zstd,gzip` unless the caller names a
                // coding, and gzip and zstd bodies decoded as they stream in (whatever the
                // caller asked for), without the `content-encoding` and `content-length` that
                // described the encoded bytes. Every limit downstream counts decoded bytes, so a
                // small body that decodes to a large one stops where a large one would. deflate
                // and br are not decoded (their features are not built), as in the reference.
                .gzip(true)
                .zstd(true)
                .build()
                .map_err(|e| format!("cannot build the HTTP client: {e}"))
        });
        client.as_ref().map_err(|e| HttpSendError::Transport(TransportFailure::other(e.clone())))
    }

    /// Validates and sends `params`, following redirects as asked; returns once a final
    /// response head has arrived.
    async fn send(&self, params: HttpRequestParams) -> Result<Response, HttpError> {
        let prepared = prepare(params, |name| std::env::var(name).ok())?;
        let client = self.client()?;
        let started = Instant::now();
        debug!(
            method = %prepared.method,
            scheme = prepared.url.scheme(),
            host = prepared.url.host_str().unwrap_or_default(),
            "http request"
        );
        let result = follow(client, prepared).await;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        match &result {
            Ok((response, redirects)) => {
                debug!(status = response.status().as_u16(), redirects, elapsed_ms, "http response")
            }
            Err(error) => debug!(elapsed_ms, error = error.kind(), "http request failed"),
        }
        Ok(result?.0)
    }
}

#[async_trait]
impl HttpClient for LocalHttpClient {
    async fn request(&self, params: HttpRequestParams) -> Result<HttpRequestResponse, HttpError> {
        let response = self.send(params).await?;
        let (status, headers) = head(&response);
        let mut body = Vec::new();
        body_stream(response).read_whole_into(&mut body).await.map_err(HttpError::Body)?;
        debug!(bytes = body.len(), "http body read");
        Ok(HttpRequestResponse { status, headers, body_base64: ByteChunk(body.into()) })
    }

    async fn request_streamed(
        &self,
        params: HttpRequestParams,
    ) -> Result<(HttpRequestResponse, HttpBodyStream), HttpError> {
        let response = self.send(params).await?;
        let (status, headers) = head(&response);
        let body = body_stream(response);
        let response = HttpRequestResponse { status, headers, body_base64: ByteChunk::default() };
        Ok((response, body))
    }
}

/// The response's body as a stream, with the length the peer announced.
fn body_stream(response: Response) -> HttpBodyStream {
    let length = response.content_length();
    let chunks = response.bytes_stream().map(|chunk| chunk.map_err(body_error));
    HttpBodyStream::new(chunks).with_length_hint(length)
}

impl HttpSendError {
    /// Why a send failed, in a word, for the logs (the error's text names the URL).
    fn kind(&self) -> &'static str {
        match self {
            HttpSendError::Transport(_) => "transport",
            HttpSendError::Timeout => "timeout",
            HttpSendError::TooManyRedirects => "too many redirects",
            HttpSendError::RedirectScheme(_) => "redirect scheme",
        }
    }
}

/// Sends the request, then each redirect's next request while the policy says follow. One
/// deadline covers every hop and, through the last request's own timeout, its body. Returns
/// the final response and how many redirects led to it.
async fn follow(
    client: &reqwest::Client,
    prepared: PreparedRequest,
) -> Result<(Response, usize), HttpSendError> {
    let mut builder = client.request(prepared.method, prepared.url).headers(prepared.headers);
    if let Some(body) = prepared.body {
        builder = builder.body(body);
    }
    let mut request = builder.build().map_err(transport)?;
    // A deadline too far away to be represented is no deadline.
    let deadline = prepared.timeout.and_then(|timeout| Instant::now().checked_add(timeout));
    let mut redirects = 0;
    loop {
        if let Some(deadline) = deadline {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(HttpSendError::Timeout);
            }
            *request.timeout_mut() = Some(remaining);
        }
        // A body given as bytes can always be replayed, so `try_clone` only fails for bodies
        // this client never sends.
        let previous = match prepared.redirect {
            HttpRedirectPolicy::Follow => request.try_clone(),
            HttpRedirectPolicy::Stop => None,
        };
        let response = client.execute(request).await.map_err(transport)?;
        let Some(next) = previous.and_then(|previous| redirected(previous, &response)) else {
            return Ok((response, redirects));
        };
        check_redirect(&next, redirects)?;
        request = next;
        redirects += 1;
    }
}

fn check_redirect(next: &Request, redirects_so_far: usize) -> Result<(), HttpSendError> {
    let scheme = next.url().scheme();
    if !matches!(scheme, "http" | "https") {
        return Err(HttpSendError::RedirectScheme(scheme.to_owned()));
    }
    if redirects_so_far >= MAX_REDIRECTS {
        return Err(HttpSendError::TooManyRedirects);
    }
    Ok(())
}

/// The HTTP client's own text for the client; the logs get the causes without the URL.
fn transport(error: reqwest::Error) -> HttpSendError {
    let message = error.to_string();
    let error = error.without_url();
    let cause = if error.is_timeout() {
        SendCause::Timeout
    } else if error.is_connect() {
        SendCause::Connect
    } else {
        SendCause::Other
    };
    let detail = causes(&error);
    debug!(cause = cause.as_str(), error = %detail, "http send failed");
    HttpSendError::Transport(TransportFailure { message, cause, detail: Some(detail) })
}

/// The HTTP client's text without the URL (`error decoding response body`), as the reference
/// reports it — and, when it was the request's `timeoutMs` that ran out while the body was
/// read, a word saying so (the reference's text alone reads like a malformed body).
fn body_error(error: reqwest::Error) -> HttpBodyError {
    let error = error.without_url();
    debug!(error = %causes(&error), "http body failed");
    match error.is_timeout() {
        true => HttpBodyError(format!(
            "{error} (timed out: the request's timeoutMs ran out while its body was read)"
        )),
        false => HttpBodyError(error.to_string()),
    }
}

/// An error and its sources, `: `-separated.
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The status and the headers a client sees: names lower-case (as the HTTP library keeps
/// them), in the library's order with every repeat, values that are not visible ASCII left
/// out.
fn head(response: &Response) -> (u16, Vec<HttpResponseHeader>) {
    let headers = response
        .headers()
        .iter()
        .filter_map(|(name, value)| {
            let value = value.to_str().ok()?;
            Some(HttpResponseHeader { name: name.as_str().to_owned(), value: value.to_owned() })
        })
        .collect();
    (response.status().as_u16(), headers)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use tokio::net::TcpListener;

    use super::*;
    use crate::http::InvalidHttpRequest;

    fn params(url: &str, extra: serde_json::Value) -> HttpRequestParams {
        let mut params = json!({"method": "GET", "url": url, "requestId": "r"});
        params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(params).unwrap()
    }

    /// Whether anything connects to `listener` within 200 ms.
    async fn was_contacted(listener: &TcpListener) -> bool {
        tokio::time::timeout(Duration::from_millis(200), listener.accept()).await.is_ok()
    }

    #[tokio::test]
    async fn a_zero_timeout_has_run_out_before_anything_is_sent() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let error = LocalHttpClient::new()
            .request(params(&url, json!({"timeoutMs": 0})))
            .await
            .unwrap_err();
        assert_eq!(error, HttpError::Failed(HttpSendError::Timeout));
        assert_eq!(error.to_string(), "http/request failed: route-aware request timed out");
        assert!(!was_contacted(&listener).await);
    }

    #[tokio::test]
    async fn invalid_params_are_refused_without_connecting() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let header = json!({"headers": [{"name": "x", "value": "v", "valueEnvVar": "TETHER_SURELY_UNSET_VAR"}]});
        let error =
            LocalHttpClient::new().request_streamed(params(&url, header)).await.unwrap_err();
        assert!(matches!(error, HttpError::Invalid(InvalidHttpRequest::MissingEnvVar { .. })));
        assert!(!was_contacted(&listener).await);
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_url_as_given() {
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            listener.local_addr().unwrap().port()
        };
        let url = format!("http://user:secret@127.0.0.1:{port}/x?y=1#frag");
        let error = LocalHttpClient::new().request(params(&url, json!({}))).await.unwrap_err();
        // The reference's text: credentials taken out of the URL, the fragment left in.
        let expected = format!(
            "http/request failed: error sending request for url (http://127.0.0.1:{port}/x?y=1#frag)"
        );
        assert_eq!(error.to_string(), expected);
    }
}
