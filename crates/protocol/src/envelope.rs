//! The JSON-RPC envelope in the exec-server dialect.
//!
//! Shapes are JSON-RPC 2.0 without the `"jsonrpc": "2.0"` member (a peer that sends it is
//! tolerated; the member is ignored). Messages are classified by their members, not by a tag:
//! `id` + `method` is a request, `method` alone a notification, `id` + `error` an error and
//! `id` + `result` a response.

use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeOwned, Error as _};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decode;

/// A request id: an `i64` or a string, echoed back verbatim. `null`, floats and integers past
/// `i64::MAX` are not ids.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    Integer(i64),
    String(String),
}

impl RequestId {
    /// The id errors about unparseable frames carry: the frame's own id is unknown.
    pub const UNKNOWN: RequestId = RequestId::Integer(-1);
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Integer(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// W3C trace context a caller may attach to a request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub id: RequestId,
    pub method: String,
    /// Absent params are read as `null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub id: RequestId,
    pub result: Value,
}

/// An error reply. The reference writes `error` before `id`; so do we.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorResponse {
    pub error: JsonRpcError,
    pub id: RequestId,
}

/// A JSON-RPC error, its members in the reference's order: `code`, `data` (when there is one),
/// `message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonRpcError {
    pub code: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    pub message: String,
}

impl JsonRpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }
}

impl fmt::Display for JsonRpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}

impl std::error::Error for JsonRpcError {}

/// One inbound or outbound message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Message {
    Request(Request),
    Notification(Notification),
    Response(Response),
    Error(ErrorResponse),
}

impl Message {
    /// Decodes one frame (a WebSocket message or a stdio line) under the hardened reader's
    /// limits. The error's text is what the server puts after its "failed to parse …" prefix.
    pub fn decode(frame: &[u8]) -> Result<Message, serde_json::Error> {
        Self::from_value(decode::parse_value(frame)?)
    }

    /// Classifies an already parsed JSON value.
    pub fn from_value(value: Value) -> Result<Message, serde_json::Error> {
        let Value::Object(object) = &value else {
            return Err(serde_json::Error::custom("expected a JSON-RPC object"));
        };
        let has = |key: &str| object.contains_key(key);
        if has("method") {
            if has("id") {
                serde_json::from_value(value).map(Message::Request)
            } else {
                serde_json::from_value(value).map(Message::Notification)
            }
        } else if has("id") && has("error") {
            serde_json::from_value(value).map(Message::Error)
        } else if has("id") && has("result") {
            serde_json::from_value(value).map(Message::Response)
        } else {
            Err(serde_json::Error::custom(
                "expected a JSON-RPC request, notification, response or error",
            ))
        }
    }
}

/// A frame as a client's reader takes it: an answer's result left as text, for the caller to
/// decode straight into the type it expects (a small answer's [`Value`] tree costs more than
/// the rest of its decode), anything else as [`Message::decode`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A response to an integer id, and where its `result` lies in the frame: JSON that passed
    /// the hardened reader's checks with the rest of the frame.
    Answer {
        id: i64,
        result: Range<usize>,
    },
    Other(Message),
}

impl Incoming {
    /// Takes what [`Message::decode`] takes and refuses what it refuses, with the same words;
    /// an answer it would read as a [`Response`] with an integer id comes as
    /// [`Incoming::Answer`] (but for a `null` result, which comes as the response).
    pub fn decode(frame: &[u8]) -> Result<Incoming, serde_json::Error> {
        /// The members that tell an answer from the rest, the others skipped unread.
        #[derive(Deserialize)]
        struct Shape<'a> {
            id: Option<i64>,
            #[serde(borrow)]
            result: Option<&'a serde_json::value::RawValue>,
            #[serde(default)]
            method: Present,
            #[serde(default)]
            error: Present,
        }
        /// Whether a member is there at all: `"error": null` makes an error, not an answer.
        #[derive(Default)]
        struct Present(bool);
        impl<'de> Deserialize<'de> for Present {
            fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                de::IgnoredAny::deserialize(deserializer).map(|_| Present(true))
            }
        }
        decode::check(frame)?;
        // An object: serde would read a struct from an array too.
        let object = frame.trim_ascii_start().starts_with(b"{");
        if object
            && let Ok(Shape {
                id: Some(id),
                result: Some(result),
                method: Present(false),
                error: Present(false),
            }) = serde_json::from_slice(frame)
        {
            // The raw value borrows from the frame: its place is where it lies.
            let start = result.get().as_ptr() as usize - frame.as_ptr() as usize;
            return Ok(Incoming::Answer { id, result: start..start + result.get().len() });
        }
        Message::decode(frame).map(Incoming::Other)
    }
}

/// Decodes a method's params. Absent params are `null`, so a struct-typed method without params
/// fails with serde's own message (`invalid type: null, expected struct …`), as the reference
/// answers.
pub fn decode_params<T: DeserializeOwned>(params: Option<Value>) -> Result<T, serde_json::Error> {
    serde_json::from_value(params.unwrap_or(Value::Null))
}

/// Serialises a success response without building an intermediate [`Value`].
pub fn encode_response<T: Serialize>(id: &RequestId, result: &T) -> String {
    #[derive(Serialize)]
    struct Out<'a, T> {
        id: &'a RequestId,
        result: &'a T,
    }
    to_json(&Out { id, result })
}

/// Serialises an error response.
pub fn encode_error(id: &RequestId, error: &JsonRpcError) -> String {
    #[derive(Serialize)]
    struct Out<'a> {
        error: &'a JsonRpcError,
        id: &'a RequestId,
    }
    to_json(&Out { error, id })
}

/// Serialises a notification.
pub fn encode_notification<T: Serialize>(method: &str, params: &T) -> String {
    #[derive(Serialize)]
    struct Out<'a, T> {
        method: &'a str,
        params: &'a T,
    }
    to_json(&Out { method, params })
}

/// Serialises a request (used by clients).
pub fn encode_request<T: Serialize>(id: &RequestId, method: &str, params: &T) -> String {
    #[derive(Serialize)]
    struct Out<'a, T> {
        id: &'a RequestId,
        method: &'a str,
        params: &'a T,
    }
    to_json(&Out { id, method, params })
}

fn to_json<T: Serialize>(value: &T) -> String {
    // Serialising plain structs of strings, numbers and maps with string keys cannot fail.
    serde_json::to_string(value).expect("protocol types always serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Codex 0.171's exec-server writes a spawn failure's `data` between `code` and
    /// `message`.
    #[test]
    fn an_errors_data_comes_between_its_code_and_its_message() {
        let error = JsonRpcError {
            data: Some(serde_json::json!({"kind": "spawnNotFound"})),
            ..JsonRpcError::new(-32603, "No such file or directory (os error 2)")
        };
        assert_eq!(
            serde_json::to_string(&error).unwrap(),
            r#"{"code":-32603,"data":{"kind":"spawnNotFound"},"message":"No such file or directory (os error 2)"}"#
        );
        let plain = serde_json::to_string(&JsonRpcError::new(-32602, "argv must not be empty"));
        assert_eq!(plain.unwrap(), r#"{"code":-32602,"message":"argv must not be empty"}"#);
    }
    use serde_json::json;

    fn decode(text: &str) -> Result<Message, String> {
        Message::decode(text.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn classifies_the_four_kinds() {
        assert!(matches!(decode(r#"{"id":1,"method":"m"}"#), Ok(Message::Request(_))));
        assert!(matches!(decode(r#"{"method":"m","params":{}}"#), Ok(Message::Notification(_))));
        assert!(matches!(decode(r#"{"id":"a","result":{}}"#), Ok(Message::Response(_))));
        assert!(matches!(
            decode(r#"{"id":1,"error":{"code":-32600,"message":"x"}}"#),
            Ok(Message::Error(_))
        ));
    }

    #[test]
    fn accepts_string_and_extreme_integer_ids() {
        for (text, id) in [
            (r#"{"id":"","method":"m"}"#, RequestId::String(String::new())),
            (r#"{"id":0,"method":"m"}"#, RequestId::Integer(0)),
            (r#"{"id":-5,"method":"m"}"#, RequestId::Integer(-5)),
            (r#"{"id":9223372036854775807,"method":"m"}"#, RequestId::Integer(i64::MAX)),
        ] {
            let Ok(Message::Request(request)) = decode(text) else { panic!("{text}") };
            assert_eq!(request.id, id);
        }
    }

    #[test]
    fn rejects_null_float_and_oversized_ids() {
        for text in [
            r#"{"id":null,"method":"m"}"#,
            r#"{"id":1.5,"method":"m"}"#,
            r#"{"id":9223372036854775808,"method":"m"}"#,
        ] {
            let err = decode(text).unwrap_err();
            assert!(err.contains("untagged enum RequestId"), "{text}: {err}");
        }
    }

    #[test]
    fn rejects_non_objects_and_shapeless_objects() {
        assert_eq!(decode("[]").unwrap_err(), "expected a JSON-RPC object");
        assert_eq!(decode("3").unwrap_err(), "expected a JSON-RPC object");
        assert!(decode(r#"{"id":1}"#).is_err());
        assert!(decode("{bad").unwrap_err().starts_with("key must be a string"));
    }

    #[test]
    fn tolerates_a_jsonrpc_member_and_rejects_a_malformed_trace() {
        assert!(decode(r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#).is_ok());
        assert!(decode(r#"{"id":1,"method":"m","trace":"x"}"#).is_err());
    }

    #[test]
    fn encodes_error_before_id_and_omits_absent_data() {
        let text = encode_error(&RequestId::Integer(7), &JsonRpcError::new(-32600, "nope"));
        assert_eq!(text, r#"{"error":{"code":-32600,"message":"nope"},"id":7}"#);
        let text = encode_response(&RequestId::String("a".into()), &json!({}));
        assert_eq!(text, r#"{"id":"a","result":{}}"#);
    }

    #[test]
    fn absent_params_decode_as_null() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Params {
            a: u8,
        }
        let err = decode_params::<Params>(None).unwrap_err().to_string();
        assert_eq!(err, "invalid type: null, expected struct Params");
        assert!(decode_params::<()>(None).is_ok());
    }
}
