//! The hardened JSON reader every inbound frame goes through.
//!
//! A frame may be up to 64 MiB, and a naive parse of `[[],[],[],…]` turns that into hundreds of
//! millions of heap nodes. This reader builds the same [`serde_json::Value`] while counting nodes
//! and refusing duplicate object keys (which `serde_json` would otherwise resolve silently, last
//! one wins — a classic way to smuggle a second `id` or `method` past a proxy). Long strings are
//! fine: they are one node each. Nesting depth is bounded by `serde_json`'s own recursion limit.
//!
//! [`check`] makes the same checks without building anything, for a reader that then decodes
//! the text straight into its own types: a small answer's tree costs more than the rest of its
//! decode put together.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashSet;
use std::fmt;

use serde::Deserialize;
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

/// Checks one JSON document as [`parse_value`] reads it — the value budget, no duplicate keys,
/// nothing after it — without building it.
pub fn check(bytes: &[u8]) -> Result<(), serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let budget = Cell::new(MAX_JSON_VALUES);
    Counted { budget: &budget }.deserialize(&mut deserializer)?;
    deserializer.end()
}

/// The key serde_json's `arbitrary_precision` feature uses to pass a number through a map.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Takes one value from what a message has left, or refuses the message.
fn spend<E: de::Error>(budget: &Cell<usize>) -> Result<(), E> {
    match budget.get() {
        0 => Err(E::custom(format_args!(
            "JSON-RPC message exceeds the limit of {MAX_JSON_VALUES} JSON values"
        ))),
        left => {
            budget.set(left - 1);
            Ok(())
        }
    }
}

fn duplicate_key<E: de::Error>(key: &str) -> E {
    E::custom(format_args!("duplicate JSON object key `{key}`"))
}

struct Limited<'a> {
    budget: &'a Cell<usize>,
}

impl Limited<'_> {
    fn spend<E: de::Error>(&self) -> Result<(), E> {
        spend(self.budget)
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
                return Err(duplicate_key(&key));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// [`Limited`] without the tree: it spends the same budget and refuses the same keys.
struct Counted<'a> {
    budget: &'a Cell<usize>,
}

impl<'de> DeserializeSeed<'de> for Counted<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Counted<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        spend(self.budget)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        spend(self.budget)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        spend(self.budget)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        spend(self.budget)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        spend(self.budget)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        spend(self.budget)
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        spend(self.budget)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        spend(self.budget)?;
        while seq.next_element_seed(Counted { budget: self.budget })?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        spend(self.budget)?;
        let mut keys = Keys::default();
        while let Some(Key(key)) = map.next_key()? {
            if keys.is_empty() && key == NUMBER_TOKEN {
                // A number, as `Limited::visit_map` reads it: one value, already spent.
                let Key(text) = map.next_value()?;
                return text.parse::<serde_json::Number>().map(drop).map_err(de::Error::custom);
            }
            map.next_value_seed(Counted { budget: self.budget })?;
            keys.insert(key).map_err(|key| duplicate_key(&key))?;
        }
        Ok(())
    }
}

/// An object's key, borrowed from the message unless it has escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Keys seen in one object: a short list scanned in turn, as most objects are small, then a
/// set, so that a huge object costs no quadratic scan.
#[derive(Default)]
struct Keys<'de> {
    list: Vec<Cow<'de, str>>,
    set: HashSet<Cow<'de, str>>,
}

/// Keys of an object compared one by one before they go into a set: a scan of 16 short
/// strings is cheaper than hashing each.
const KEYS_SCANNED_MAX: usize = 16;

impl<'de> Keys<'de> {
    fn is_empty(&self) -> bool {
        self.list.is_empty() && self.set.is_empty()
    }

    /// Adds `key`, or gives it back if the object had it already.
    fn insert(&mut self, key: Cow<'de, str>) -> Result<(), Cow<'de, str>> {
        if self.set.is_empty() && self.list.len() < KEYS_SCANNED_MAX {
            if self.list.contains(&key) {
                return Err(key);
            }
            self.list.push(key);
            return Ok(());
        }
        self.set.extend(self.list.drain(..));
        if self.set.contains(&key) {
            return Err(key);
        }
        self.set.insert(key);
        Ok(())
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

    /// `check` takes and refuses what `parse_value` does, with the same words.
    #[test]
    fn check_agrees_with_parse_value() {
        let many_keys = (0..40).map(|i| format!("\"k{i}\":{i}")).collect::<Vec<_>>().join(",");
        let over_budget = format!("[{}]", vec!["0"; MAX_JSON_VALUES].join(","));
        let at_budget = format!("[{}]", vec!["0"; MAX_JSON_VALUES - 1].join(","));
        let documents = [
            r#"{"id":1,"method":"x","params":{"a":[1,"two",null,true,-2.5,1e400]}}"#.to_owned(),
            format!("{{{many_keys}}}"),
            format!("{{{many_keys},\"k39\":0}}"),
            format!("{{{many_keys},\"k3\":0}}"),
            r#"{"id":1,"id":2}"#.to_owned(),
            r#"{"a":{"b":1,"b":1}}"#.to_owned(),
            r#"{"k\u0065y":1,"key":2}"#.to_owned(),
            r#"{"$serde_json::private::Number":"12"}"#.to_owned(),
            r#"{"$serde_json::private::Number":"x"}"#.to_owned(),
            r#"{"$serde_json::private::Number":[1]}"#.to_owned(),
            r#"{"a":1} {"b":2}"#.to_owned(),
            "{bad".to_owned(),
            "[1,2".to_owned(),
            over_budget,
            at_budget,
        ];
        for document in &documents {
            let parsed = parse_value(document.as_bytes()).map(drop).map_err(|e| e.to_string());
            let checked = check(document.as_bytes()).map_err(|e| e.to_string());
            let shown = &document[..document.len().min(80)];
            assert_eq!(checked, parsed, "{shown}");
        }
        assert!(check(br#"{"k\u0065y":1,"key":2}"#).unwrap_err().to_string().contains("`key`"));
    }
}
