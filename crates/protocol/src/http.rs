//! `http/request`: an HTTP request made by the executor on the client's behalf, and the
//! `http/request/bodyDelta` notifications that stream a response body.
//!
//! The envelope is transport-shaped (method, URL, headers, bytes) rather than shaped for any one
//! use, so a client can run Streamable HTTP, OAuth discovery or a plain probe from the executor's
//! network position through one method. All validation errors are `-32602`; failures to send or
//! to read the body are `-32603`. A non-2xx status is a normal result.

use serde::{Deserialize, Serialize};

use crate::ByteChunk;

/// The most decoded bytes one `http/request/bodyDelta` frame carries: 1 MiB. Bigger network
/// reads are split, so one frame stays small next to the 64 MiB message limit and a client can
/// treat a larger delta as a protocol violation.
pub const HTTP_BODY_DELTA_MAX_BYTES: usize = 1024 * 1024;

/// The longest `deltaBase64` text a frame of [`HTTP_BODY_DELTA_MAX_BYTES`] encodes to (padded
/// standard base64): what a client checks before decoding.
pub const HTTP_BODY_DELTA_MAX_BASE64_LEN: usize = HTTP_BODY_DELTA_MAX_BYTES.div_ceil(3) * 4;

/// Executor environment variables a header's `valueEnvVar` may not name, compared
/// case-insensitively. `valueEnvVar` exists so a client can have the executor attach a credential
/// the client never sees; these are the executor's own credentials (model API keys, Codex and
/// cloud tokens, the Noise relay token, workload-identity launch context), which must not be sent
/// to whatever URL a client names. Refused with `-32602 http/request header <name> cannot use
/// executor environment variable <VAR>` before any network I/O.
pub const HTTP_HEADER_ENV_DENYLIST: &[&str] = &[
    "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN",
    "OPENAI_FEDERATION_RULE_ID",
    "OPENAI_IDENTITY_TOKEN_FILE",
    "OPENAI_WORKLOAD_IDENTITY_CONTEXT",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "CODEX_ACCESS_TOKEN",
    "CODEX_CONNECTORS_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_CLIENT_SECRET",
    "AZURE_FEDERATED_TOKEN_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// Whether `name` is on [`HTTP_HEADER_ENV_DENYLIST`], ignoring ASCII case (so `aws_secret_access_key`
/// is refused too: on Windows it names the same variable).
pub fn is_denied_header_env_var(name: &str) -> bool {
    HTTP_HEADER_ENV_DENYLIST.iter().any(|denied| denied.eq_ignore_ascii_case(name))
}

/// `http/request` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestParams {
    /// Any valid HTTP token, sent verbatim (case included; custom methods allowed).
    pub method: String,
    /// An absolute `http` or `https` URL. A `#fragment` is accepted and not sent.
    pub url: String,
    /// In order; repeated names are all sent.
    #[serde(default)]
    pub headers: Vec<HttpHeader>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<ByteChunk>,
    /// A deadline for the whole exchange, body included. Absent or `null` means no timeout at
    /// all: there is no default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub redirect_policy: HttpRedirectPolicy,
    /// The caller's id for this request's body deltas. Required even for a buffered request, so
    /// both modes share one envelope; only a streamed request reserves it (a second streamed
    /// request with an id still active is refused) until its terminal delta.
    pub request_id: String,
    /// Answer as soon as the headers arrive, with an empty `bodyBase64`, and stream the body as
    /// `http/request/bodyDelta` notifications.
    #[serde(default)]
    pub stream_response: bool,
    /// Tether extension (`attachedHttpBodies`): the body's bytes travel raw, attached to binary
    /// messages ([`crate::attached`]), instead of as base64 in the JSON. Buffered, the answer
    /// is such a message, its `bodyBase64` empty; streamed, each delta that carries bytes is,
    /// its `deltaBase64` empty, and the terminal frame stays text. WebSocket only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attach_body: bool,
}

/// A request header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpHeader {
    pub name: String,
    /// The value; with `valueEnvVar`, the prefix put in front of the variable's value
    /// (`"Bearer "`).
    pub value: String,
    /// Append the value of this executor environment variable, so a credential that lives on
    /// the executor never crosses the wire to the client. It must be set and non-empty, and not
    /// on [`HTTP_HEADER_ENV_DENYLIST`]. Sent only when the server advertises the
    /// `httpHeaderEnvVars` capability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_env_var: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HttpRedirectPolicy {
    /// Follow redirects within the HTTP client's usual limits.
    #[default]
    Follow,
    /// Return a 3xx response as it is, `location` header and body included.
    Stop,
}

/// `http/request` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestResponse {
    pub status: u16,
    /// In wire order, repeats kept, names lower-cased. Values that are not visible text are
    /// left out.
    pub headers: Vec<HttpResponseHeader>,
    /// The whole body; empty when the body is streamed.
    pub body_base64: ByteChunk,
}

impl HttpRequestResponse {
    /// The response to request `id` as JSON text, built directly: the body is base64-encoded
    /// straight into the message, with no intermediate string and no escape scan of it (a
    /// buffered body can be tens of MB). Byte for byte what serde would produce (see the
    /// tests).
    pub fn to_response_text(&self, id: &crate::RequestId) -> String {
        self.write_json(id, true)
    }

    /// The start of the response to request `id` as a binary message (`attachedHttpBodies`):
    /// its JSON with an empty `bodyBase64` and the NUL ([`crate::attached`]), whatever
    /// `body_base64` holds, for a server to read the body's bytes straight onto the end as
    /// they arrive — the head of an HTTP response is known before its body, and a buffered
    /// body of tens of MB is then copied once, not twice.
    pub fn attached_message_head(&self, id: &crate::RequestId) -> Vec<u8> {
        crate::attached::join(&self.write_json(id, false), &[])
    }

    /// The response's JSON, the body base64-encoded into it or left empty.
    fn write_json(&self, id: &crate::RequestId, with_body: bool) -> String {
        use std::fmt::Write as _;

        let id = serde_json::to_string(id).expect("an id serialises");
        let headers = serde_json::to_string(&self.headers).expect("headers serialise");
        let body_len = if with_body { self.body_base64.len().div_ceil(3) * 4 } else { 0 };
        let mut text = String::with_capacity(64 + id.len() + headers.len() + body_len);
        let _ = write!(
            text,
            r#"{{"id":{id},"result":{{"status":{},"headers":{headers},"bodyBase64":""#,
            self.status
        );
        if with_body {
            crate::bytes::encode_base64_into(&self.body_base64.0, &mut text);
        }
        text.push_str("\"}}");
        text
    }
}

/// A response header: unlike [`HttpHeader`], never anything but a name and a value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpResponseHeader {
    pub name: String,
    pub value: String,
}

/// `http/request/bodyDelta` notification: one frame of a streamed body. Always sent after the
/// request's result.
///
/// Frames are numbered from 1 per request, contiguously. Exactly one frame has `done: true`, and
/// its delta is empty: with `error` null for a clean end of body, with the error text when the
/// body failed (`error decoding response body`). A stream cut off by the connection ending gets
/// no terminal frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestBodyDeltaNotification {
    pub request_id: String,
    pub seq: u64,
    /// At most [`HTTP_BODY_DELTA_MAX_BYTES`] decoded.
    pub delta_base64: ByteChunk,
    #[serde(default)]
    pub done: bool,
    /// Always on the wire, `null` when there is no error, as the reference sends it.
    #[serde(default)]
    pub error: Option<String>,
}

impl HttpRequestBodyDeltaNotification {
    /// The whole notification as JSON text, built directly, as
    /// [`crate::process::ProcessOutputNotification::to_notification_text`] builds output: the
    /// delta is base64-encoded straight into the message, with no intermediate string and no
    /// escape scan of it. A streamed body is all deltas, so this is its hot path; the result is
    /// byte for byte what serde would produce (see the tests).
    pub fn to_notification_text(&self) -> String {
        self.write_json(true)
    }

    /// The notification as a binary message (`attachedHttpBodies`): its JSON with an empty
    /// `deltaBase64`, then the delta's bytes as they are ([`crate::attached`]). The bytes are
    /// copied once, into the message; nothing is encoded.
    pub fn to_attached_message(&self) -> Vec<u8> {
        crate::attached::join(&self.write_json(false), &self.delta_base64.0)
    }

    /// The notification's JSON, the delta base64-encoded into it or left empty.
    fn write_json(&self, with_delta: bool) -> String {
        use std::fmt::Write as _;

        let request_id = serde_json::to_string(&self.request_id).expect("a string serialises");
        let error = serde_json::to_string(&self.error).expect("a string serialises");
        let delta_len = if with_delta { self.delta_base64.len().div_ceil(3) * 4 } else { 0 };
        let mut text = String::with_capacity(112 + request_id.len() + error.len() + delta_len);
        text.push_str(r#"{"method":"http/request/bodyDelta","params":{"requestId":"#);
        text.push_str(&request_id);
        let _ = write!(text, r#","seq":{},"deltaBase64":""#, self.seq);
        if with_delta {
            crate::bytes::encode_base64_into(&self.delta_base64.0, &mut text);
        }
        let _ = write!(text, r#"","done":{},"error":{error}}}}}"#, self.done);
        text
    }

    /// A notification read from a binary message's two parts (`attachedHttpBodies`): `json`,
    /// read as [`Self::from_frame`] reads a text frame, whose `deltaBase64` must be empty, and
    /// the `attached` bytes, which become the delta without a copy. `None` for anything else,
    /// and for bytes beyond [`HTTP_BODY_DELTA_MAX_BYTES`]. JSON whose members come in another
    /// order than Tether writes them is read by the JSON parser instead.
    pub fn from_attached(json: &[u8], attached: bytes::Bytes) -> Option<Self> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Whole {
            #[serde(rename = "method")]
            _method: MethodIsDelta,
            params: HttpRequestBodyDeltaNotification,
        }
        #[derive(Deserialize)]
        enum MethodIsDelta {
            #[serde(rename = "http/request/bodyDelta")]
            Delta,
        }
        if attached.len() > HTTP_BODY_DELTA_MAX_BYTES {
            return None;
        }
        let mut delta = match Self::from_frame(json) {
            Some(delta) => delta,
            None => serde_json::from_slice::<Whole>(json).ok()?.params,
        };
        if !delta.delta_base64.is_empty() {
            return None;
        }
        delta.delta_base64 = ByteChunk(attached);
        Some(delta)
    }

    /// A notification read straight from its frame, as
    /// [`crate::process::ProcessOutputNotification::from_frame`] reads output: the delta's
    /// base64 is found by its key and decoded where it lies; only the small rest goes through
    /// the JSON parser (which refuses members the notification does not have, or repeated).
    /// The key can only be found where it is a key: the quote that opens it follows a comma,
    /// which no quote inside a JSON string does (there it is escaped).
    ///
    /// `None` for any other frame, and for one of unusual form (escapes in the delta, bad
    /// base64): the general decoder then reads it, and reports what is wrong with it.
    pub fn from_frame(frame: &[u8]) -> Option<Self> {
        const PREFIX: &[u8] = br#"{"method":"http/request/bodyDelta","params":{"#;
        const DELTA_KEY: &[u8] = br#","deltaBase64":""#;
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Head<'a> {
            #[serde(rename = "method")]
            _method: &'a str,
            params: HeadParams,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct HeadParams {
            request_id: String,
            seq: u64,
            #[serde(default)]
            done: bool,
            #[serde(default)]
            error: Option<String>,
        }
        let body = frame.strip_prefix(PREFIX)?;
        let key = memchr::memmem::find(body, DELTA_KEY)?;
        let open = key + DELTA_KEY.len();
        // Base64 holds no quote (nor an escape): the next quote closes the delta.
        let close = open + memchr::memchr(b'"', &body[open..])?;
        let delta = &body[open..close];
        // Too long to be a delta, or escaped: the general decoder says what is wrong.
        if delta.len() > HTTP_BODY_DELTA_MAX_BASE64_LEN || memchr::memchr(b'\\', delta).is_some() {
            return None;
        }
        let mut head = Vec::with_capacity(PREFIX.len() + body.len() - delta.len());
        head.extend_from_slice(PREFIX);
        head.extend_from_slice(&body[..key]);
        head.extend_from_slice(&body[close + 1..]);
        let head: Head<'_> = serde_json::from_slice(&head).ok()?;
        let delta = crate::bytes::decode_base64(delta).ok()?;
        Some(Self {
            request_id: head.params.request_id,
            seq: head.params.seq,
            delta_base64: ByteChunk(delta),
            done: head.params.done,
            error: head.params.error,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::fixtures::{Ordered, round_trip, round_trip_in_order};

    fn delta(
        request_id: &str,
        bytes: &[u8],
        done: bool,
        error: Option<&str>,
    ) -> HttpRequestBodyDeltaNotification {
        HttpRequestBodyDeltaNotification {
            request_id: request_id.to_owned(),
            seq: 7,
            delta_base64: ByteChunk(bytes::Bytes::copy_from_slice(bytes)),
            done,
            error: error.map(str::to_owned),
        }
    }

    /// The hand-built answer is what serde writes, escapes in the headers included.
    #[test]
    fn a_buffered_response_is_written_as_serde_writes_it() {
        let response = HttpRequestResponse {
            status: 404,
            headers: vec![
                HttpResponseHeader { name: "content-type".into(), value: "text/plain".into() },
                HttpResponseHeader { name: "x-quoted".into(), value: "a \"b\" \\ c".into() },
            ],
            body_base64: ByteChunk(bytes::Bytes::from_static(b"not \x00 found")),
        };
        for id in [crate::RequestId::Integer(42), crate::RequestId::String("a\"b".into())] {
            assert_eq!(
                response.to_response_text(&id),
                crate::envelope::encode_response(&id, &response)
            );
        }
        let empty =
            HttpRequestResponse { status: 200, headers: vec![], body_base64: ByteChunk::default() };
        let id = crate::RequestId::Integer(1);
        assert_eq!(empty.to_response_text(&id), crate::envelope::encode_response(&id, &empty));
    }

    /// The hand-built text is what serde writes, escapes in the id and the error included.
    #[test]
    fn a_body_delta_is_written_as_serde_writes_it() {
        for delta in [
            delta("http-1", b"some body \x00\xff bytes", false, None),
            delta("an \"id\" with \\ and \u{e9}", b"", true, Some("error \"decoding\"\n body")),
            delta("", &[0u8; 1000], false, None),
        ] {
            let serde = crate::envelope::encode_notification(
                crate::method::HTTP_REQUEST_BODY_DELTA,
                &delta,
            );
            assert_eq!(delta.to_notification_text(), serde);
            assert_eq!(HttpRequestBodyDeltaNotification::from_frame(serde.as_bytes()), Some(delta));
        }
    }

    /// What the fast reader does not take is left to the general decoder: another method,
    /// members it does not know, a delta with an escape, bad base64. An id that holds the
    /// delta's key is still only an id.
    #[test]
    fn a_body_delta_of_unusual_form_is_left_to_the_general_decoder() {
        let read = |text: &str| HttpRequestBodyDeltaNotification::from_frame(text.as_bytes());
        let wrong_method = r#"{"method":"process/output","params":{"requestId":"a","seq":1,"deltaBase64":"","done":false,"error":null}}"#;
        assert_eq!(read(wrong_method), None);
        let extra = r#"{"method":"http/request/bodyDelta","params":{"requestId":"a","seq":1,"deltaBase64":"","done":false,"error":null,"more":1}}"#;
        assert_eq!(read(extra), None);
        let escaped = r#"{"method":"http/request/bodyDelta","params":{"requestId":"a","seq":1,"deltaBase64":"QQ\u003d\u003d","done":false,"error":null}}"#;
        assert_eq!(read(escaped), None);
        let bad = r#"{"method":"http/request/bodyDelta","params":{"requestId":"a","seq":1,"deltaBase64":"!!!!","done":false,"error":null}}"#;
        assert_eq!(read(bad), None);
        let id = delta(r#"x","deltaBase64":"QUJD"#, b"real", false, None);
        assert_eq!(read(&id.to_notification_text()), Some(id));
    }

    /// Checks a captured exchange: the request decodes, the result and every notification
    /// decode and re-encode to the same JSON with members in the captured order.
    fn check_exchange(text: &str) -> (HttpRequestParams, HttpRequestResponse, Vec<Value>) {
        let fixture: Value = serde_json::from_str(text).unwrap();
        let ordered = Ordered::parse(text);
        let params: HttpRequestParams =
            serde_json::from_value(fixture["request"]["params"].clone()).unwrap();
        let result = round_trip_in_order::<HttpRequestResponse>(
            &fixture["response"]["result"],
            ordered.get("response").get("result"),
        );
        let notifications = fixture["notifications"].as_array().unwrap().clone();
        let Ordered::Array(ordered_notifications) = ordered.get("notifications") else {
            panic!("notifications is not an array");
        };
        for (notification, captured) in notifications.iter().zip(ordered_notifications) {
            assert_eq!(notification["method"], crate::method::HTTP_REQUEST_BODY_DELTA);
            round_trip_in_order::<HttpRequestBodyDeltaNotification>(
                &notification["params"],
                captured.get("params"),
            );
        }
        (params, result, notifications)
    }

    #[test]
    fn buffered_request_matches_the_reference() {
        let (params, result, notifications) = check_exchange(fixture!("http_request"));
        assert_eq!(params.method, "GET");
        assert_eq!(params.request_id, "r1");
        assert!(params.headers.is_empty() && params.body_base64.is_none());
        assert_eq!(params.redirect_policy, HttpRedirectPolicy::Follow);
        assert!(!params.stream_response && params.timeout_ms.is_none());
        assert_eq!(result.status, 200);
        assert_eq!(result.headers[2].name, "content-type");
        assert_eq!(&result.body_base64.0[..], b"hello world");
        assert!(notifications.is_empty());
    }

    #[test]
    fn streamed_request_matches_the_reference() {
        let (params, result, notifications) = check_exchange(fixture!("http_request_streamed"));
        assert!(params.stream_response);
        assert!(result.body_base64.is_empty());
        assert_eq!(notifications.len(), 2);
        let last: HttpRequestBodyDeltaNotification =
            serde_json::from_value(notifications[1]["params"].clone()).unwrap();
        assert_eq!((last.seq, last.done, last.error), (2, true, None));
        assert!(last.delta_base64.is_empty());
    }

    #[test]
    fn the_specs_full_request_round_trips() {
        let params = round_trip::<HttpRequestParams>(&json!({
            "method": "POST",
            "url": "https://example.test/mcp?x=1",
            "headers": [{"name": "authorization", "value": "Bearer ", "valueEnvVar": "LINEAR_API_KEY"}],
            "bodyBase64": "cmVxdWVzdC1ib2R5",
            "timeoutMs": 5000,
            "redirectPolicy": "follow",
            "requestId": "http-1",
            "streamResponse": false
        }));
        assert_eq!(params.headers[0].value_env_var.as_deref(), Some("LINEAR_API_KEY"));
        assert_eq!(&params.body_base64.unwrap().0[..], b"request-body");
    }

    #[test]
    fn request_id_is_required() {
        let err = serde_json::from_value::<HttpRequestParams>(
            json!({"method": "GET", "url": "http://x/"}),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "missing field `requestId`");
    }

    #[test]
    fn null_timeout_means_none_and_bad_redirect_policy_is_the_serde_message() {
        let params: HttpRequestParams = serde_json::from_value(
            json!({"method": "GET", "url": "http://x/", "requestId": "r", "timeoutMs": null, "redirectPolicy": "stop"}),
        )
        .unwrap();
        assert_eq!(params.timeout_ms, None);
        assert_eq!(params.redirect_policy, HttpRedirectPolicy::Stop);
        let err = serde_json::from_value::<HttpRequestParams>(
            json!({"method": "GET", "url": "http://x/", "requestId": "r", "redirectPolicy": "bogus"}),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "unknown variant `bogus`, expected `follow` or `stop`");
    }

    #[test]
    fn an_attached_delta_is_its_json_with_an_empty_delta_then_the_raw_bytes() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).chain([0, b'"', b'\\']).collect();
        let delta = HttpRequestBodyDeltaNotification {
            request_id: "id \"quoted\"".into(),
            seq: 7,
            delta_base64: ByteChunk::from(bytes.clone()),
            done: false,
            error: None,
        };
        let message = delta.to_attached_message();
        let (json, attached) = crate::attached::split(&message).unwrap();
        let value: serde_json::Value = serde_json::from_slice(json).unwrap();
        assert_eq!(
            value,
            json!({"method": "http/request/bodyDelta", "params": {"requestId": "id \"quoted\"",
                "seq": 7, "deltaBase64": "", "done": false, "error": null}})
        );
        assert_eq!(attached, &bytes[..]);
        let read = HttpRequestBodyDeltaNotification::from_attached(
            json,
            bytes::Bytes::copy_from_slice(attached),
        );
        assert_eq!(read, Some(delta));
        // Another order of members (`method` last, `params` shuffled) reads the same.
        let reordered = br#"{"params":{"error":null,"done":false,"deltaBase64":"","seq":7,"requestId":"id \"quoted\""},"method":"http/request/bodyDelta"}"#;
        let read = HttpRequestBodyDeltaNotification::from_attached(
            reordered,
            bytes::Bytes::copy_from_slice(attached),
        );
        assert_eq!(read.map(|read| read.delta_base64), Some(ByteChunk::from(bytes)));
    }

    #[test]
    fn an_attached_delta_is_refused_with_bytes_in_its_json_or_past_the_limit() {
        let with_base64 = br#"{"method":"http/request/bodyDelta","params":{"requestId":"r","seq":1,"deltaBase64":"aGk=","done":false,"error":null}}"#;
        let extra = bytes::Bytes::from_static(b"more");
        assert_eq!(HttpRequestBodyDeltaNotification::from_attached(with_base64, extra), None);
        let empty = br#"{"method":"http/request/bodyDelta","params":{"requestId":"r","seq":1,"deltaBase64":"","done":false,"error":null}}"#;
        let at_limit = bytes::Bytes::from(vec![1u8; HTTP_BODY_DELTA_MAX_BYTES]);
        let read = HttpRequestBodyDeltaNotification::from_attached(empty, at_limit).unwrap();
        assert_eq!(read.delta_base64.len(), HTTP_BODY_DELTA_MAX_BYTES);
        let past = bytes::Bytes::from(vec![1u8; HTTP_BODY_DELTA_MAX_BYTES + 1]);
        assert_eq!(HttpRequestBodyDeltaNotification::from_attached(empty, past), None);
        let other = br#"{"method":"process/output","params":{}}"#;
        let extra = bytes::Bytes::from_static(b"x");
        assert_eq!(HttpRequestBodyDeltaNotification::from_attached(other, extra.clone()), None);
        let reordered_other =
            br#"{"params":{"requestId":"r","seq":1,"deltaBase64":""},"method":"process/output"}"#;
        assert_eq!(HttpRequestBodyDeltaNotification::from_attached(reordered_other, extra), None);
    }

    #[test]
    fn an_attached_response_is_its_json_with_an_empty_body_then_the_raw_body() {
        let response = HttpRequestResponse {
            status: 201,
            headers: vec![HttpResponseHeader { name: "a".into(), value: "b\"c".into() }],
            body_base64: ByteChunk::from(b"\0raw\0body".to_vec()),
        };
        let mut message = response.attached_message_head(&crate::RequestId::Integer(4));
        message.extend_from_slice(&response.body_base64.0);
        let (json, attached) = crate::attached::split(&message).unwrap();
        let value: serde_json::Value = serde_json::from_slice(json).unwrap();
        assert_eq!(
            value,
            json!({"id": 4, "result": {"status": 201,
                "headers": [{"name": "a", "value": "b\"c"}], "bodyBase64": ""}})
        );
        assert_eq!(attached, b"\0raw\0body");
    }

    #[test]
    fn attach_body_is_left_out_unless_asked() {
        let params: HttpRequestParams =
            serde_json::from_value(json!({"method": "GET", "url": "http://x/", "requestId": "r"}))
                .unwrap();
        assert!(!params.attach_body);
        assert!(!serde_json::to_string(&params).unwrap().contains("attachBody"));
        let params: HttpRequestParams = serde_json::from_value(
            json!({"method": "GET", "url": "http://x/", "requestId": "r", "attachBody": true}),
        )
        .unwrap();
        assert!(params.attach_body);
    }

    #[test]
    fn body_delta_error_is_always_serialised_and_defaults_when_absent() {
        let frame = round_trip::<HttpRequestBodyDeltaNotification>(&json!({
            "requestId": "http-1", "seq": 3, "deltaBase64": "", "done": true,
            "error": "error decoding response body"
        }));
        assert_eq!(frame.error.as_deref(), Some("error decoding response body"));
        let frame: HttpRequestBodyDeltaNotification =
            serde_json::from_value(json!({"requestId": "r", "seq": 1, "deltaBase64": "aGk="}))
                .unwrap();
        assert!(!frame.done && frame.error.is_none());
        assert_eq!(
            serde_json::to_value(&frame).unwrap(),
            json!({"requestId": "r", "seq": 1, "deltaBase64": "aGk=", "done": false, "error": null})
        );
    }

    #[test]
    fn deny_list_is_case_insensitive() {
        assert!(is_denied_header_env_var("AWS_SECRET_ACCESS_KEY"));
        assert!(is_denied_header_env_var("openai_api_key"));
        assert!(!is_denied_header_env_var("LINEAR_API_KEY"));
        assert!(!is_denied_header_env_var("HOME"));
        assert_eq!(HTTP_HEADER_ENV_DENYLIST.len(), 14);
    }

    #[test]
    fn delta_limits() {
        assert_eq!(HTTP_BODY_DELTA_MAX_BYTES, 1_048_576);
        let chunk = ByteChunk::from(vec![0u8; HTTP_BODY_DELTA_MAX_BYTES]);
        assert_eq!(chunk.to_base64().len(), HTTP_BODY_DELTA_MAX_BASE64_LEN);
    }
}
