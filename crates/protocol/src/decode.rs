//! The hardened JSON reader every inbound frame goes through.
//!
//! A frame may be up to 64 MiB, and a naive parse of `[[],[],[],…]` turns that into hundreds of
//! millions of heap nodes. This reader builds the same [`serde_json::Value`] while counting nodes
//! and refusing duplicate object keys (which `serde_json` would otherwise resolve silently, last
//! one wins — a classic way to smuggle a second `id` or `method` past a proxy). Long strings are
//! fine: they are one node each. Nesting depth is bounded by `serde_json`'s own recursion limit.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Most JSON values (objects, arrays, strings, numbers, literals) one message may hold.
///
/// 256 Ki is the reference's bound. It is why a `process/read` replay is capped at 50,000
/// chunks: each chunk costs four values, and a full replay must fit.
pub const MAX_JSON_VALUES: usize = 262_144;

/// Parses one JSON document under the value budget, rejecting duplicate keys and trailing data.
pub fn parse_value(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let budget = Cell::new(MAX_JSON_VALUES);
    let value = Limited { budget: &budget }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// The key serde_json's `arbitrary_precision` feature uses to pass a number through a map.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

struct Limited<'a> {
    budget: &'a Cell<usize>,
}

impl Limited<'_> {
    fn spend<E: de::Error>(&self) -> Result<(), E> {
        match self.budget.get() {
            0 => Err(E::custom(format_args!(
                "JSON-RPC message exceeds the limit of {MAX_JSON_VALUES} JSON values"
            ))),
            left => {
                self.budget.set(left - 1);
                Ok(())
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Limited<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Limited<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.spend()?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.spend()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Limited { budget: self.budget })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.spend()?;
        let mut object = Map::new();
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            // With `arbitrary_precision`, serde_json hands a number over as a one-member map
            // under this private key, holding the number's text.
            if first && key == NUMBER_TOKEN {
                let text = map.next_value::<String>()?;
                return text.parse().map(Value::Number).map_err(de::Error::custom);
            }
            first = false;
            let value = map.next_value_seed(Limited { budget: self.budget })?;
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate JSON object key `{key}`")));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ordinary_documents() {
        let value =
            parse_value(br#"{"id":1,"method":"x","params":{"a":[1,"two",null,true,-2.5]}}"#)
                .unwrap();
        assert_eq!(value["params"]["a"][1], "two");
        assert_eq!(value["params"]["a"][0], 1);
        assert_eq!(value["params"]["a"][4], -2.5);
        assert_eq!(value["id"].as_i64(), Some(1));
    }

    #[test]
    fn rejects_duplicate_keys() {
        let err = parse_value(br#"{"id":1,"id":2}"#).unwrap_err();
        assert!(err.to_string().starts_with("duplicate JSON object key `id`"), "{err}");
    }

    #[test]
    fn rejects_documents_over_the_value_budget() {
        let body = vec!["0"; MAX_JSON_VALUES].join(",");
        let err = parse_value(format!("[{body}]").as_bytes()).unwrap_err();
        assert!(err.to_string().contains("exceeds the limit of 262144 JSON values"), "{err}");
        // One fewer element (the array itself is a value too) fits exactly.
        let body = vec!["0"; MAX_JSON_VALUES - 1].join(",");
        parse_value(format!("[{body}]").as_bytes()).unwrap();
    }

    #[test]
    fn large_scalars_are_one_value() {
        let big = "x".repeat(8 << 20);
        let value = parse_value(format!("{{\"s\":\"{big}\"}}").as_bytes()).unwrap();
        assert_eq!(value["s"].as_str().unwrap().len(), 8 << 20);
    }

    #[test]
    fn rejects_trailing_characters() {
        let err = parse_value(br#"{"a":1} {"b":2}"#).unwrap_err();
        assert!(err.to_string().starts_with("trailing characters"), "{err}");
    }
}
