//! The one log line written when an MCP message could not be sent over HTTP at all.
//!
//! Success is not logged, nor is an HTTP error status (the caller gets those). What is logged
//! is enough to tell which server and which call failed, and how — never what was said: no
//! header values, bodies, tokens, session ids, query strings or full URLs. The endpoint is
//! reduced to its scheme, host and the shape of its path (segments that look like ids or
//! secrets replaced), and the error's text loses the URL the HTTP client puts in it.

use tether_engine::http::{HttpError, HttpSendError, SendCause, TransportFailure};
use tracing::warn;

/// What is known of a failed send, for [`log`].
pub(crate) struct SendFailure<'a> {
    /// `POST`, `GET` or `DELETE`.
    pub http_method: &'static str,
    pub endpoint: &'a str,
    /// The JSON-RPC method and id of a POSTed message (`<none>` for what has none).
    pub mcp_method: &'a str,
    pub mcp_request_id: &'a str,
    pub has_session_id: bool,
    pub has_authorization: bool,
    pub error: &'a HttpError,
}

pub(crate) fn log(failure: SendFailure<'_>) {
    let endpoint = Endpoint::of(failure.endpoint);
    let (is_timeout, is_connect) = classify(failure.error);
    warn!(
        http_method = failure.http_method,
        endpoint_scheme = %endpoint.scheme,
        endpoint_host = %endpoint.host,
        endpoint_path = %endpoint.path_shape,
        endpoint_has_query = endpoint.has_query,
        mcp_method = failure.mcp_method,
        mcp_request_id = failure.mcp_request_id,
        has_session_id = failure.has_session_id,
        has_authorization = failure.has_authorization,
        error_is_timeout = is_timeout,
        error_is_connect = is_connect,
        error = %sanitized(failure.error),
        "streamable HTTP send to an MCP server failed"
    );
}

struct Endpoint {
    scheme: String,
    host: String,
    path_shape: String,
    has_query: bool,
}

impl Endpoint {
    fn of(text: &str) -> Self {
        let Ok(url) = url::Url::parse(text) else {
            return Self {
                scheme: "<invalid>".into(),
                host: "<invalid>".into(),
                path_shape: "<invalid>".into(),
                has_query: false,
            };
        };
        let host = match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            (None, _) => "<none>".into(),
        };
        Self {
            scheme: url.scheme().to_owned(),
            host,
            path_shape: path_shape(url.path()),
            has_query: url.query().is_some(),
        }
    }
}

/// `/v1/servers/3f2a…/mcp` → `/v1/servers/:id/mcp`: a segment with several digits, or a long
/// one, may be an id or a key.
fn path_shape(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            let digits = segment.bytes().filter(u8::is_ascii_digit).count();
            let suspicious = segment.len() > 24 || digits >= 3;
            if suspicious { ":id" } else { segment }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// (timeout, connect), as the HTTP client that sent the request classified it (an executor
/// that does not say — the reference — leaves both false).
fn classify(error: &HttpError) -> (bool, bool) {
    match error {
        HttpError::Failed(HttpSendError::Timeout) => (true, false),
        HttpError::Failed(HttpSendError::Transport(failure)) => {
            (failure.cause == SendCause::Timeout, failure.cause == SendCause::Connect)
        }
        _ => (false, false),
    }
}

/// The error's text with every URL in it (HTTP clients name the one they were sending to)
/// replaced by `<url>`, followed by its causes when known.
pub(crate) fn sanitized(error: &HttpError) -> String {
    let mut text = error.to_string();
    if let HttpError::Failed(HttpSendError::Transport(TransportFailure {
        detail: Some(detail),
        ..
    })) = error
    {
        text.push_str(": ");
        text.push_str(detail);
    }
    without_urls(&text)
}

fn without_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(separator) = rest.find("://") {
        let scheme_start = rest[..separator]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || "+.-".contains(c)))
            .map_or(0, |at| at + 1);
        let after = &rest[separator + 3..];
        let end = after.find(|c: char| c.is_whitespace() || "()\"'<>".contains(c));
        out.push_str(&rest[..scheme_start]);
        out.push_str("<url>");
        rest = end.map_or("", |end| &after[end..]);
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_keep_their_shape_not_their_ids() {
        assert_eq!(path_shape("/mcp"), "/mcp");
        assert_eq!(path_shape("/v1/servers/abc123/mcp"), "/v1/servers/:id/mcp");
        assert_eq!(path_shape("/k/sk-livexxxxxxxxxxxxxxxxxxxxxxxx"), "/k/:id");
    }

    #[test]
    fn endpoints_lose_query_and_credentials() {
        let endpoint = Endpoint::of("https://user:pw@example.com:8443/a/b?key=secret");
        assert_eq!(endpoint.scheme, "https");
        assert_eq!(endpoint.host, "example.com:8443");
        assert_eq!(endpoint.path_shape, "/a/b");
        assert!(endpoint.has_query);
    }

    #[test]
    fn error_text_loses_the_url() {
        let error = HttpError::Failed(HttpSendError::Transport(TransportFailure {
            message: "error sending request for url (http://127.0.0.1:9/mcp?key=secret)".into(),
            cause: SendCause::Connect,
            detail: Some("tcp connect error: Connection refused".into()),
        }));
        let text = sanitized(&error);
        assert_eq!(
            text,
            "http/request failed: error sending request for url (<url>): tcp connect error: Connection refused"
        );
        assert_eq!(classify(&error), (false, true));
        let unknown = HttpError::Failed(HttpSendError::Transport(TransportFailure::other("x")));
        assert_eq!(classify(&unknown), (false, false));
    }
}
