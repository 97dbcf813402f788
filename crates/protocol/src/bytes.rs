//! Byte payloads on the wire: standard base64 with padding.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Bytes that travel as a base64 string (process output, stdin writes, file contents).
///
/// Holds [`bytes::Bytes`] so that one chunk of process output can be retained, published to
/// subscribers and serialised without being copied.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ByteChunk(pub bytes::Bytes);

impl ByteChunk {
    pub fn new(bytes: impl Into<bytes::Bytes>) -> Self {
        Self(bytes.into())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_bytes(self) -> bytes::Bytes {
        self.0
    }

    /// Decodes a base64 string; the error text is the base64 decoder's own
    /// (`Invalid symbol 33, offset 0.`), which is what the reference reports.
    pub fn from_base64(text: &str) -> Result<Self, base64::DecodeError> {
        STANDARD.decode(text).map(|v| Self(v.into()))
    }

    pub fn to_base64(&self) -> String {
        STANDARD.encode(&self.0)
    }
}

impl fmt::Debug for ByteChunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ByteChunk({} bytes)", self.0.len())
    }
}

impl From<Vec<u8>> for ByteChunk {
    fn from(value: Vec<u8>) -> Self {
        Self(value.into())
    }
}

impl From<&[u8]> for ByteChunk {
    fn from(value: &[u8]) -> Self {
        Self(bytes::Bytes::copy_from_slice(value))
    }
}

impl Serialize for ByteChunk {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_base64())
    }
}

impl<'de> Deserialize<'de> for ByteChunk {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ByteChunk;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a base64 string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ByteChunk, E> {
                ByteChunk::from_base64(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_with_padding() {
        let chunk = ByteChunk::from(&b"hello\n"[..]);
        let json = serde_json::to_string(&chunk).unwrap();
        assert_eq!(json, "\"aGVsbG8K\"");
        assert_eq!(serde_json::from_str::<ByteChunk>(&json).unwrap(), chunk);
    }

    #[test]
    fn rejects_invalid_base64_with_the_decoders_message() {
        let err = serde_json::from_value::<ByteChunk>(serde_json::json!("!!")).unwrap_err();
        assert_eq!(err.to_string(), "Invalid symbol 33, offset 0.");
    }
}
