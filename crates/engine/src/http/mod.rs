//! HTTP requests made from the executor's network position, as `http/request` exposes them.
//!
//! [`HttpClient`] is the one surface: [`LocalHttpClient`] implements it here (reqwest, used
//! in-process and behind the server's handler), and a remote implementation over the client
//! implements it the same way. A request is either buffered ([`HttpClient::request`], the whole
//! body in the result) or streamed ([`HttpClient::request_streamed`]: the result as soon as the
//! head arrives, then the body as an [`HttpBodyStream`] of chunks of at most
//! [`HTTP_BODY_DELTA_MAX_BYTES`]).
//!
//! - `prepare`: validation of the params, all of it before any network I/O.
//! - `redirect`: how a redirect is followed (method, body, headers that must not travel).
//! - `body`: the body stream, its chunking, and reading it whole under the buffered limit.
//! - `local`: the reqwest implementation.
//!
//! The `requestId` of the params is not the engine's business: it names a stream on one
//! connection, which the server keeps track of.

mod body;
mod local;
mod prepare;
mod redirect;

use async_trait::async_trait;
use tether_protocol::http::{HttpRequestParams, HttpRequestResponse};

pub use body::{HTTP_BUFFERED_BODY_MAX_BYTES, HttpBodyError, HttpBodyStream};
pub use local::LocalHttpClient;
pub use redirect::MAX_REDIRECTS;
pub use tether_protocol::http::HTTP_BODY_DELTA_MAX_BYTES;

/// HTTP requests made by the executor. `params.streamResponse` and `params.requestId` are not
/// read: the method called decides whether the body is buffered.
#[async_trait]
pub trait HttpClient: Send + Sync {
    /// Sends the request and reads the whole body into the result.
    async fn request(&self, params: HttpRequestParams) -> Result<HttpRequestResponse, HttpError>;

    /// Sends the request and returns once the response head has arrived: the result's body is
    /// empty and the body follows on the stream.
    async fn request_streamed(
        &self,
        params: HttpRequestParams,
    ) -> Result<(HttpRequestResponse, HttpBodyStream), HttpError>;
}

/// Why an `http/request` failed. The outer variant decides the JSON-RPC code (`Invalid`:
/// `-32602`; the others `-32603`); the messages are the reference's, word for word, because
/// clients show them and may match on their prefixes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The params are unacceptable; nothing was sent.
    #[error(transparent)]
    Invalid(#[from] InvalidHttpRequest),
    /// No response arrived: connection, TLS, timeout before the head, redirects.
    #[error("http/request failed: {0}")]
    Failed(HttpSendError),
    /// The head arrived but reading a buffered body failed (the peer broke off, or the timeout
    /// ran out while it was still coming).
    #[error("failed to read http/request response body: {0}")]
    Body(HttpBodyError),
    /// A remote executor's failure that said no more than its words (a server that does not
    /// send the kind): the message as it was.
    #[error("{0}")]
    Remote(String),
}

/// Invalid `http/request` params, checked in the reference's order: method, URL, scheme, then
/// each header in turn (name, environment variable, value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidHttpRequest {
    #[error("http/request method is invalid: {reason}")]
    Method { reason: String },
    #[error("http/request url is invalid: {reason}")]
    Url { reason: String },
    #[error("http/request only supports http and https URLs, got {scheme}")]
    Scheme { scheme: String },
    #[error("http/request header name is invalid: {reason}")]
    HeaderName { reason: String },
    /// `name` as the client spelt it.
    #[error("http/request header value is invalid for {name}: {reason}")]
    HeaderValue { name: String, reason: String },
    /// `valueEnvVar` names one of the executor's own credentials
    /// ([`tether_protocol::http::HTTP_HEADER_ENV_DENYLIST`]).
    #[error("http/request header {header} cannot use executor environment variable {var}")]
    DeniedEnvVar { header: String, var: String },
    #[error("http/request header {header} requires executor environment variable {var}")]
    MissingEnvVar { header: String, var: String },
    #[error(
        "http/request header {header} requires a non-empty executor environment variable {var}"
    )]
    EmptyEnvVar { header: String, var: String },
    /// A remote executor refused the params: its message, one of the above as it worded it.
    #[error("{0}")]
    Remote(String),
}

/// Why no response arrived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpSendError {
    /// The HTTP client's own text (`error sending request for url (…)`): connection refused,
    /// TLS, or the timeout running out before the head. It names the URL, which the client
    /// sent; it is never logged.
    #[error("{}", .0.message)]
    Transport(TransportFailure),
    /// The deadline had passed before a request (or a redirect's next request) could be sent.
    /// The text is the reference's.
    #[error("route-aware request timed out")]
    Timeout,
    /// More than [`MAX_REDIRECTS`] redirects in a row.
    #[error("too many redirects")]
    TooManyRedirects,
    #[error("redirect target uses unsupported URL scheme: {0}")]
    RedirectScheme(String),
}

/// A send that failed in the network: the reference's words (the same for a refused
/// connection and a timeout), and what they leave out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportFailure {
    pub message: String,
    pub cause: SendCause,
    /// The error's causes, without the URL (`client error (Connect): tcp connect error: …`),
    /// when known.
    pub detail: Option<String>,
}

impl TransportFailure {
    /// A failure known only by its text.
    pub fn other(message: impl Into<String>) -> Self {
        Self { message: message.into(), cause: SendCause::Other, detail: None }
    }
}

/// What kept a request from being answered, as far as the HTTP client can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendCause {
    /// No connection could be made (refused, unreachable, DNS, TLS handshake).
    Connect,
    /// The deadline ran out.
    Timeout,
    Other,
}

impl SendCause {
    pub fn as_str(self) -> &'static str {
        match self {
            SendCause::Connect => "connect",
            SendCause::Timeout => "timeout",
            SendCause::Other => "other",
        }
    }

    pub fn parse(text: &str) -> Self {
        match text {
            "connect" => SendCause::Connect,
            "timeout" => SendCause::Timeout,
            _ => SendCause::Other,
        }
    }
}

impl From<HttpSendError> for HttpError {
    fn from(error: HttpSendError) -> Self {
        HttpError::Failed(error)
    }
}
