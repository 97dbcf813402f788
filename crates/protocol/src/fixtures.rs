//! Captured exchanges with the reference server (`tests/fixtures/reference/*.json`, each
//! `{request, response, notifications}` as the reference sent them), and the checks every
//! protocol type runs against them: decoding, re-encoding to the same JSON, and the same member
//! order.

use std::fmt;

use serde::de::{DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The text of a captured exchange with the reference server.
macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/reference/",
            $name,
            ".json"
        ))
    };
}

/// The shape of a JSON text with object members in the order they were written
/// (`serde_json::Value` sorts them), to check that struct field order is wire order.
#[derive(Debug, PartialEq)]
pub(crate) enum Ordered {
    Scalar,
    Array(Vec<Ordered>),
    Object(Vec<(String, Ordered)>),
}

impl Ordered {
    pub(crate) fn parse(text: &str) -> Ordered {
        serde_json::from_str(text).unwrap()
    }

    pub(crate) fn get(&self, key: &str) -> &Ordered {
        match self {
            Ordered::Object(members) => &members.iter().find(|(k, _)| k == key).unwrap().1,
            _ => panic!("not an object"),
        }
    }
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OrderedVisitor;
        impl<'de> Visitor<'de> for OrderedVisitor {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Ordered, E> {
                Ok(Ordered::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar)
            }
            fn visit_str<E>(self, _: &str) -> Result<Ordered, E> {
                Ok(Ordered::Scalar)
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Scalar)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ordered, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Ordered::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Ordered>()? {
                    members.push(member);
                }
                Ok(Ordered::Object(members))
            }
        }
        deserializer.deserialize_any(OrderedVisitor)
    }
}

/// Decodes `value` as `T` and checks that encoding it again gives back the same JSON.
pub(crate) fn round_trip<T: Serialize + DeserializeOwned>(value: &Value) -> T {
    let decoded: T = serde_json::from_value(value.clone()).unwrap();
    assert_eq!(&serde_json::to_value(&decoded).unwrap(), value);
    decoded
}

/// Decodes `value` (a member of a captured exchange) as `T` and checks that encoding it
/// again gives back the same JSON, with every object's members in the `captured` order.
pub(crate) fn round_trip_in_order<T: Serialize + DeserializeOwned>(
    value: &Value,
    captured: &Ordered,
) -> T {
    let decoded = round_trip::<T>(value);
    let encoded = serde_json::to_string(&decoded).unwrap();
    assert_eq!(&Ordered::parse(&encoded), captured, "member order differs from {value}");
    decoded
}

/// Decodes a fixture's request params as `P` (checking they re-encode identically) and its
/// result as `R` (checking the values and that member order is the reference's).
pub(crate) fn check_exchange<P, R>(text: &str) -> (P, R)
where
    P: Serialize + DeserializeOwned,
    R: Serialize + DeserializeOwned,
{
    let fixture: Value = serde_json::from_str(text).unwrap();
    let ordered = Ordered::parse(text);
    let params = decodes::<P>(&fixture["request"]["params"]);
    let result = round_trip_in_order::<R>(
        &fixture["response"]["result"],
        ordered.get("response").get("result"),
    );
    (params, result)
}

/// Decodes a captured request's params as `P`, and checks that what we would send for it decodes
/// to the same thing. (Requests need not re-encode byte for byte: absent and `null` optional
/// members mean the same to the server.)
pub(crate) fn decodes<P: Serialize + DeserializeOwned>(value: &Value) -> P {
    let decoded: P = serde_json::from_value(value.clone()).unwrap();
    let encoded = serde_json::to_value(&decoded).unwrap();
    let again: P = serde_json::from_value(encoded.clone()).unwrap();
    assert_eq!(serde_json::to_value(&again).unwrap(), encoded);
    decoded
}
