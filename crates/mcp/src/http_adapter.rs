//! rmcp's Streamable HTTP client trait over Tether's [`HttpClient`]: one adapter for MCP
//! servers reached from here (the engine's client, in-process) or from the executor (the
//! session's `http/request`, bodies streamed as `bodyDelta`s).
//!
//! The adapter only carries HTTP. Sessions, re-initialization after a 404, SSE reconnection
//! and OAuth stay rmcp's decisions; what is decided here is what each HTTP outcome means to
//! rmcp, the same way wherever the request ran:
//!
//! | outcome                                   | to rmcp                                  |
//! |-------------------------------------------|------------------------------------------|
//! | no response (connect, TLS, timeout)       | `Client(NoResponse)`, logged once        |
//! | 401 / 403 with `WWW-Authenticate`         | `AuthRequired` / `InsufficientScope`     |
//! | 401 / 403 without                         | `UnexpectedServerResponse("HTTP 401 …")` |
//! | 202 / 204, or a 2xx to a notification     | `Accepted`                               |
//! | 404 to a request that carried a session   | `SessionExpired` (rmcp re-initializes)   |
//! | 429 / 5xx that is not a JSON-RPC error    | `HttpStatus` (with `Retry-After`)        |
//! | other non-2xx with a JSON-RPC error body  | that error, as the answer                |
//! | 2xx `text/event-stream`                   | `Sse` (events bounded in size)           |
//! | 2xx `application/json`                    | `Json` (body bounded in size)            |
//! | GET 405 / DELETE 405                      | no SSE stream / nothing to delete        |
//! | a resume the server already ended empty   | no SSE stream (rmcp stops resuming)      |
//!
//! Bodies are never collected without a bound, header values that are not text are refused
//! rather than dropped, and custom headers cannot override the ones the protocol owns.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, SseError, StreamableHttpClient,
    StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::Sse;
use tether_engine::http::{HttpBodyStream, HttpClient, HttpError};
use tether_protocol::ByteChunk;
use tether_protocol::http::{
    HttpHeader, HttpRedirectPolicy, HttpRequestParams, HttpRequestResponse,
};

use crate::notifications::NotificationTap;
use crate::send_failure::{self, SendFailure};
use crate::sse_limit::sse_events;

const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";
const SESSION_ID: &str = "mcp-session-id";
const LAST_EVENT_ID: &str = "last-event-id";
/// Headers the transport sets itself; a custom header of one of these names is refused.
/// (`MCP-Protocol-Version` is not among them: rmcp passes it as a custom header.)
const RESERVED: &[&str] = &["accept", "content-type", SESSION_ID, LAST_EVENT_ID];
/// Longest `Retry-After` kept (as rmcp does).
const MAX_RETRY_AFTER_BYTES: usize = 128;
/// Resumes remembered as ended empty ([`EmptyResumes`]): a resume is retried within seconds,
/// so only the latest few matter; past this the oldest is forgotten.
const EMPTY_RESUMES_KEPT: usize = 64;

/// Why the HTTP exchange itself failed (rather than the server answering with an error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpTransportError {
    /// No response arrived: connection, TLS or timeout. Nothing says whether the server acted
    /// on the request, so only requests that change nothing may be retried.
    #[error("no response from the MCP server: {0}")]
    NoResponse(String),
    /// The response started but its body broke off.
    #[error("the MCP server's response broke off: {0}")]
    Body(String),
    /// The request could not be made as asked (a bad URL or header); nothing was sent.
    #[error("cannot send this request to the MCP server: {0}")]
    Invalid(String),
}

type AdapterError = StreamableHttpError<HttpTransportError>;
type SseEvents = BoxStream<'static, Result<Sse, SseError>>;

/// A Streamable HTTP client over any [`HttpClient`]. Cheap to clone.
#[derive(Clone)]
pub struct HttpClientAdapter {
    http: Arc<dyn HttpClient>,
    /// Sent with every request, before what rmcp adds (an API-key header, say).
    default_headers: Arc<Vec<(String, String)>>,
    /// Offered every notification the SSE streams carry, in order.
    tap: Option<NotificationTap>,
    empty_resumes: Arc<EmptyResumes>,
}

/// The resumes (`GET` with `Last-Event-ID`) a server answered with a stream that ended before
/// any event, by session and event id.
///
/// An rmcp server answers a resume of a request's stream it no longer has (its response was
/// sent, and lost with the connection that carried it) with an empty `200`, to end the
/// client's reconnecting. rmcp's client takes every stream that ends cleanly as one to resume
/// again, from the same event, with its retry policy asked for a first attempt each time: it
/// would resume every second or so for ever, and the request, neither answered nor failed,
/// would wait for ever too. So a second resume from where an empty one began is refused here
/// as a server with no stream to give, which is what ends rmcp's reconnecting at once; the
/// request then fails as one whose response stream closed before its response.
#[derive(Default)]
struct EmptyResumes(Mutex<VecDeque<(Option<Arc<str>>, String)>>);

impl EmptyResumes {
    fn contains(&self, session: &Option<Arc<str>>, event: &str) -> bool {
        self.lock().iter().any(|(s, e)| s == session && e == event)
    }

    fn note(&self, session: Option<Arc<str>>, event: String) {
        let mut kept = self.lock();
        if kept.len() == EMPTY_RESUMES_KEPT {
            kept.pop_front();
        }
        kept.push_back((session, event));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(Option<Arc<str>>, String)>> {
        // Each change is one step, so the list stays whole whatever panicked.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl HttpClientAdapter {
    pub fn new(http: Arc<dyn HttpClient>, default_headers: Vec<(String, String)>) -> Self {
        Self {
            http,
            default_headers: Arc::new(default_headers),
            tap: None,
            empty_resumes: Arc::default(),
        }
    }

    pub(crate) fn with_notification_tap(mut self, tap: NotificationTap) -> Self {
        self.tap = Some(tap);
        self
    }

    /// The events of an SSE body, each notification offered to the tap as it passes.
    fn events(&self, body: HttpBodyStream, max_event_bytes: usize) -> SseEvents {
        let events = sse_events(byte_stream(body), max_event_bytes);
        match self.tap.clone() {
            None => events,
            Some(tap) => events
                .inspect(move |event| {
                    if let Ok(Sse { data: Some(data), .. }) = event {
                        tap.offer_event_data(data);
                    }
                })
                .boxed(),
        }
    }

    fn headers(
        &self,
        accept: &str,
        auth_token: Option<&str>,
        session_id: Option<&str>,
        custom_headers: &HashMap<HeaderName, HeaderValue>,
    ) -> Result<Vec<HttpHeader>, AdapterError> {
        let mut headers = Vec::new();
        let mut add = |name: &str, value: &str| {
            headers.push(HttpHeader {
                name: name.to_owned(),
                value: value.to_owned(),
                value_env_var: None,
            })
        };
        for (name, value) in self.default_headers.iter() {
            if RESERVED.iter().any(|reserved| reserved.eq_ignore_ascii_case(name)) {
                return Err(StreamableHttpError::ReservedHeaderConflict(name.clone()));
            }
            add(name, value);
        }
        add("accept", accept);
        if let Some(token) = auth_token {
            add("authorization", &format!("Bearer {token}"));
        }
        if let Some(session_id) = session_id {
            add(SESSION_ID, session_id);
        }
        for (name, value) in custom_headers {
            let name = name.as_str();
            if RESERVED.contains(&name) {
                return Err(StreamableHttpError::ReservedHeaderConflict(name.to_owned()));
            }
            let value = value.to_str().map_err(|_| {
                StreamableHttpError::Client(HttpTransportError::Invalid(format!(
                    "the value of header {name} is not text"
                )))
            })?;
            add(name, value);
        }
        Ok(headers)
    }

    /// Sends `params` and returns the head, with the body to follow; a failure to get a head
    /// is logged (see [`send_failure`]) and becomes the transport's error.
    async fn send(
        &self,
        params: HttpRequestParams,
        carrying: Carrying<'_>,
    ) -> Result<(HttpRequestResponse, HttpBodyStream), AdapterError> {
        let has_session_id = has_header(&params.headers, SESSION_ID);
        let has_authorization = has_header(&params.headers, "authorization");
        let url = params.url.clone();
        let http_method = match params.method.as_str() {
            "GET" => "GET",
            "DELETE" => "DELETE",
            _ => "POST",
        };
        self.http.request_streamed(params).await.map_err(|error| {
            let invalid = matches!(error, HttpError::Invalid(_));
            if !invalid {
                // Worked out only now: a failed send is rare, and every message would pay.
                let (mcp_method, mcp_request_id) = match carrying {
                    Carrying::Message(message) => mcp_identity(message),
                    Carrying::Nothing(what) => (what.to_owned(), "<none>".to_owned()),
                };
                send_failure::log(SendFailure {
                    http_method,
                    endpoint: &url,
                    mcp_method: &mcp_method,
                    mcp_request_id: &mcp_request_id,
                    has_session_id,
                    has_authorization,
                    error: &error,
                });
            }
            let text = send_failure::sanitized(&error);
            StreamableHttpError::Client(if invalid {
                HttpTransportError::Invalid(text)
            } else {
                HttpTransportError::NoResponse(text)
            })
        })
    }
}

fn request(
    method: &str,
    uri: &str,
    headers: Vec<HttpHeader>,
    body: Option<Vec<u8>>,
) -> HttpRequestParams {
    HttpRequestParams {
        method: method.to_owned(),
        url: uri.to_owned(),
        headers,
        body_base64: body.map(ByteChunk::from),
        // No deadline: an SSE stream and a long tool call both outlive any fixed one. rmcp
        // and the caller bound how long they wait.
        timeout_ms: None,
        redirect_policy: HttpRedirectPolicy::Follow,
        // Replaced by the session with one of its own for streamed requests.
        request_id: "mcp".to_owned(),
        stream_response: true,
        attach_body: false,
    }
}

fn has_header(headers: &[HttpHeader], name: &str) -> bool {
    headers.iter().any(|header| header.name.eq_ignore_ascii_case(name))
}

/// The first value of a response header, by case-insensitive name.
fn header<'a>(response: &'a HttpRequestResponse, name: &str) -> Option<&'a str> {
    response.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value.as_str())
}

/// Whether `content_type` is `expected`, parameters and case aside.
fn media_type_is(content_type: Option<&str>, expected: &str) -> bool {
    content_type
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(expected))
}

/// What a request carries, for the failure log: a message, or nothing (an event stream, the
/// session's end).
#[derive(Clone, Copy)]
enum Carrying<'a> {
    Message(&'a ClientJsonRpcMessage),
    Nothing(&'static str),
}

/// The MCP method and request id of a message, for the failure log.
fn mcp_identity(message: &ClientJsonRpcMessage) -> (String, String) {
    let value = serde_json::to_value(message).unwrap_or_default();
    let method = value.get("method").and_then(|m| m.as_str()).unwrap_or("<none>").to_owned();
    let id = match value.get("id") {
        Some(id) if id.is_string() => id.as_str().unwrap_or_default().to_owned(),
        Some(id) if !id.is_null() => id.to_string(),
        _ => "<none>".to_owned(),
    };
    (method, id)
}

/// 401 and 403 with a challenge are rmcp's auth errors; without one they are plain failures.
fn auth_failure(response: &HttpRequestResponse) -> Option<AdapterError> {
    let challenge = header(response, "www-authenticate");
    match (response.status, challenge) {
        (401, Some(challenge)) => {
            Some(StreamableHttpError::AuthRequired(AuthRequiredError::new(challenge.to_owned())))
        }
        (403, Some(challenge)) => Some(StreamableHttpError::InsufficientScope(
            InsufficientScopeError::new(challenge.to_owned(), scope_of(challenge)),
        )),
        (401 | 403, None) => Some(StreamableHttpError::UnexpectedServerResponse(
            format!("HTTP {}: the MCP server refused the credentials", response.status).into(),
        )),
        _ => None,
    }
}

/// The `scope` parameter of a `WWW-Authenticate` challenge, quoted or not.
fn scope_of(challenge: &str) -> Option<String> {
    let at = challenge.to_ascii_lowercase().find("scope=")? + "scope=".len();
    let value = &challenge[at..];
    let scope = match value.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => &value[..value.find([',', ';', ' ']).unwrap_or(value.len())],
    };
    (!scope.is_empty()).then(|| scope.to_owned())
}

/// 429 and 5xx carry their status (and `Retry-After`) to rmcp's retry decisions.
fn status_failure(response: &HttpRequestResponse) -> Option<HttpStatusError> {
    if response.status != 429 && !(500..600).contains(&response.status) {
        return None;
    }
    let retry_after = header(response, "retry-after")
        .filter(|value| value.len() <= MAX_RETRY_AFTER_BYTES)
        .map(str::to_owned);
    Some(HttpStatusError::new(response.status, retry_after))
}

/// The whole body, failing once it passes `limit` bytes.
async fn read_bounded(mut body: HttpBodyStream, limit: usize) -> Result<Vec<u8>, AdapterError> {
    let mut bytes = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk
            .map_err(|e| StreamableHttpError::Client(HttpTransportError::Body(e.to_string())))?;
        if chunk.len() > limit - bytes.len() {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: limit });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// At most `limit` bytes of the body, for a diagnostic; the rest is not waited for.
async fn read_prefix(mut body: HttpBodyStream, limit: usize) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < limit {
        match body.next().await {
            Some(Ok(chunk)) => {
                bytes.extend_from_slice(&chunk[..chunk.len().min(limit - bytes.len())])
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn byte_stream(
    body: HttpBodyStream,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    body.map(|chunk| chunk.map_err(std::io::Error::other))
}

impl StreamableHttpClient for HttpClientAdapter {
    type Error = HttpTransportError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, AdapterError> {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, AdapterError> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, AdapterError> {
        let accept = format!("{EVENT_STREAM}, {JSON}");
        let mut headers =
            self.headers(&accept, auth_header.as_deref(), session_id.as_deref(), &custom_headers)?;
        headers.push(HttpHeader {
            name: "content-type".into(),
            value: JSON.into(),
            value_env_var: None,
        });
        let body = serde_json::to_vec(&message)?;
        let params = request("POST", &uri, headers, Some(body));
        let (response, body) = self.send(params, Carrying::Message(&message)).await?;

        if let Some(error) = auth_failure(&response) {
            return Err(error);
        }
        let status = response.status;
        if status == 202 || status == 204 {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == 404 && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        let content_type = header(&response, "content-type");
        let is_json = media_type_is(content_type, JSON);
        let new_session_id = header(&response, SESSION_ID).map(str::to_owned);
        let awaits_no_response = !matches!(message, ClientJsonRpcMessage::Request(_));
        if !(200..300).contains(&status) {
            if let Some(error) = status_failure(&response).filter(|_| !is_json || status == 429) {
                return Err(error.into());
            }
            if is_json {
                let bytes = read_bounded(body, limits.max_json_response_size).await?;
                if let Ok(error @ ServerJsonRpcMessage::Error(_)) = serde_json::from_slice(&bytes) {
                    return Ok(StreamableHttpPostResponse::Json(error, new_session_id));
                }
                if let Some(error) = status_failure(&response) {
                    return Err(error.into());
                }
                let preview = preview(&bytes, limits.max_error_response_size);
                return Err(unexpected(status, &preview));
            }
            let preview = read_prefix(body, limits.max_error_response_size).await;
            return Err(unexpected(status, &preview));
        }
        if awaits_no_response {
            // Nothing in the answer to a notification or a response matters; some servers
            // send 200 with an empty body instead of 202.
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if media_type_is(content_type, EVENT_STREAM) {
            let events = self.events(body, limits.max_sse_event_size);
            return Ok(StreamableHttpPostResponse::Sse(events, new_session_id));
        }
        if is_json {
            let bytes = read_bounded(body, limits.max_json_response_size).await?;
            let message = serde_json::from_slice(&bytes).map_err(|error| {
                StreamableHttpError::UnexpectedServerResponse(
                    format!("the MCP server's JSON answer is no JSON-RPC message: {error}").into(),
                )
            })?;
            return Ok(StreamableHttpPostResponse::Json(message, new_session_id));
        }
        Err(StreamableHttpError::UnexpectedContentType(content_type.map(str::to_owned)))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), AdapterError> {
        let headers =
            self.headers(JSON, auth_header.as_deref(), Some(&session_id), &custom_headers)?;
        let params = request("DELETE", &uri, headers, None);
        let (response, _) = self.send(params, Carrying::Nothing("<session end>")).await?;
        match response.status {
            // Not offered, or the session is already gone: either way nothing is left to end.
            200..=299 | 404 | 405 => Ok(()),
            status => Err(unexpected(status, "")),
        }
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, AdapterError> {
        let limit = StreamableHttpResponseLimits::default().max_sse_event_size;
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            limit,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, AdapterError> {
        if let Some(event) = &last_event_id
            && self.empty_resumes.contains(&session_id, event)
        {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        let accept = format!("{EVENT_STREAM}, {JSON}");
        let mut headers =
            self.headers(&accept, auth_header.as_deref(), session_id.as_deref(), &custom_headers)?;
        if let Some(last_event_id) = &last_event_id {
            headers.push(HttpHeader {
                name: LAST_EVENT_ID.into(),
                value: last_event_id.clone(),
                value_env_var: None,
            });
        }
        let params = request("GET", &uri, headers, None);
        let (response, body) = self.send(params, Carrying::Nothing("<event stream>")).await?;
        if response.status == 405 {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if let Some(error) = auth_failure(&response) {
            return Err(error);
        }
        if response.status == 404 && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        if let Some(error) = status_failure(&response) {
            return Err(error.into());
        }
        if !(200..300).contains(&response.status) {
            return Err(unexpected(response.status, ""));
        }
        let content_type = header(&response, "content-type");
        if !media_type_is(content_type, EVENT_STREAM) && !media_type_is(content_type, JSON) {
            return Err(StreamableHttpError::UnexpectedContentType(
                content_type.map(str::to_owned),
            ));
        }
        let events = self.events(body, max_sse_event_size);
        Ok(match last_event_id {
            Some(event) => noting_if_empty(events, self.empty_resumes.clone(), session_id, event),
            None => events,
        })
    }
}

/// `events`, noting in `resumes` that the resume from `event` ended empty if it ends before
/// yielding anything.
fn noting_if_empty(
    events: SseEvents,
    resumes: Arc<EmptyResumes>,
    session: Option<Arc<str>>,
    event: String,
) -> SseEvents {
    let yielded = Arc::new(AtomicBool::new(false));
    let seen = yielded.clone();
    let mut end = Some((session, event));
    let ended = futures_util::stream::poll_fn(move |_| {
        if let Some((session, event)) = end.take()
            && !yielded.load(Ordering::Relaxed)
        {
            resumes.note(session, event);
        }
        Poll::Ready(None)
    });
    events.inspect(move |_| seen.store(true, Ordering::Relaxed)).chain(ended).boxed()
}

fn preview(bytes: &[u8], limit: usize) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(limit)]).into_owned()
}

fn unexpected(status: u16, preview: &str) -> AdapterError {
    let text = if preview.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {preview}")
    };
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_read_quoted_or_not() {
        assert_eq!(
            scope_of(r#"Bearer error="insufficient_scope", scope="a b""#).as_deref(),
            Some("a b")
        );
        assert_eq!(scope_of("Bearer scope=read:x, realm=y").as_deref(), Some("read:x"));
        assert_eq!(scope_of("Bearer realm=y"), None);
    }

    #[test]
    fn media_types_ignore_case_and_parameters() {
        assert!(media_type_is(Some("Application/JSON; charset=utf-8"), JSON));
        assert!(!media_type_is(Some("application/jsonl"), JSON));
        assert!(!media_type_is(None, JSON));
    }
}
