//! Whatever arrives on the wire — any bytes, any JSON — the decoder answers with a message or an
//! error, never a panic, and what the encoder writes decodes back to what was encoded.

use proptest::prelude::*;
use serde_json::{Value, json};
use tether_protocol::decode::parse_value;
use tether_protocol::envelope::{encode_notification, encode_request};
use tether_protocol::{Incoming, Message, RequestId, Response};

/// Any JSON value, a few levels deep, with the shapes JSON-RPC uses and the ones it does not.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        "[a-z/]{0,12}".prop_map(Value::String),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("id".to_owned()),
                    Just("method".to_owned()),
                    Just("params".to_owned()),
                    Just("result".to_owned()),
                    Just("error".to_owned()),
                    "[a-zA-Z]{1,8}",
                ],
                inner,
                0..6
            )
            .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_bytes_decode_or_fail_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = Message::decode(&bytes);
        same_as_message(&bytes)?;
    }

    #[test]
    fn any_json_decodes_or_fails_cleanly(value in json_value()) {
        let text = serde_json::to_vec(&value).unwrap();
        let _ = Message::decode(&text);
        same_as_message(&text)?;
    }

    #[test]
    fn any_answer_is_taken_as_text(id in any::<i64>(), result in json_value()) {
        let text = serde_json::to_vec(&json!({"id": id, "jsonrpc": "2.0", "result": result})).unwrap();
        let incoming = Incoming::decode(&text).unwrap();
        prop_assert!(result.is_null() || matches!(incoming, Incoming::Answer { .. }), "{incoming:?}");
        same_as_message(&text)?;
    }

    #[test]
    fn requests_and_notifications_round_trip(
        id in any::<i64>(),
        method in "[a-z]{1,10}/[a-zA-Z]{1,10}",
        params in json_value(),
    ) {
        let text = encode_request(&RequestId::Integer(id), &method, &params);
        match Message::decode(text.as_bytes()).unwrap() {
            Message::Request(request) => {
                prop_assert_eq!(request.id, RequestId::Integer(id));
                prop_assert_eq!(&request.method, &method);
                prop_assert_eq!(request.params.unwrap_or(Value::Null), params.clone());
            }
            other => prop_assert!(false, "decoded as {:?}", other),
        }
        let text = encode_notification(&method, &params);
        match Message::decode(text.as_bytes()).unwrap() {
            Message::Notification(notification) => {
                prop_assert_eq!(&notification.method, &method);
                prop_assert_eq!(notification.params.unwrap_or(Value::Null), params);
            }
            other => prop_assert!(false, "decoded as {:?}", other),
        }
    }
}

/// What [`Incoming::decode`] reads a frame as is what [`Message::decode`] does: the same error
/// text, the same message, or an answer whose result text parses to the response's result.
fn same_as_message(frame: &[u8]) -> Result<(), TestCaseError> {
    let message = Message::decode(frame).map_err(|e| e.to_string());
    match (Incoming::decode(frame).map_err(|e| e.to_string()), message) {
        (Ok(Incoming::Answer { id, result }), Ok(Message::Response(response))) => {
            let result = parse_value(&frame[result]).unwrap();
            prop_assert_eq!(Response { id: RequestId::Integer(id), result }, response);
        }
        (Ok(Incoming::Other(incoming)), Ok(message)) => prop_assert_eq!(incoming, message),
        (Err(incoming), Err(message)) => prop_assert_eq!(incoming, message),
        (incoming, message) => {
            prop_assert!(false, "Incoming {:?} but Message {:?}", incoming, message)
        }
    }
    Ok(())
}
