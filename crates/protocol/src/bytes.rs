//! Byte payloads on the wire: standard base64 with padding.
//!
//! Output, file contents and stdin all travel as base64, so its speed is much of the
//! protocol's: both directions run on SIMD (`base64-simd`, chosen for the CPU at run time).
//! Refusals keep the `base64` crate's words (`Invalid symbol 33, offset 0.`), which are what
//! the reference reports: input the fast decoder refuses is decoded again by that crate.

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
        decode_base64(text.as_bytes()).map(Self)
    }

    pub fn to_base64(&self) -> String {
        let mut text = String::with_capacity(self.0.len().div_ceil(3) * 4);
        encode_base64_into(&self.0, &mut text);
        text
    }
}

/// Appends the padded standard base64 of `bytes` to `text`.
pub fn encode_base64_into(bytes: &[u8], text: &mut String) {
    base64_simd::STANDARD.encode_append(bytes, text);
}

/// Decodes padded standard base64, refusing exactly what the `base64` crate refuses, in its
/// words.
pub fn decode_base64(text: &[u8]) -> Result<bytes::Bytes, base64::DecodeError> {
    let mut decoded = Vec::with_capacity(text.len() / 4 * 3);
    match base64_simd::STANDARD.decode_append(text, &mut decoded) {
        Ok(()) => Ok(decoded.into()),
        Err(_) => STANDARD.decode(text).map(Into::into),
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

    /// The fast codec and the `base64` crate agree on every input: the same text out, the
    /// same bytes back or the same refusal.
    #[test]
    fn the_fast_codec_agrees_with_the_base64_crate() {
        use proptest::prelude::*;
        let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=!- \n";
        let texts = proptest::collection::vec(proptest::sample::select(alphabet.as_bytes()), 0..80);
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(&(texts, proptest::collection::vec(any::<u8>(), 0..300)), |(text, bytes)| {
                prop_assert_eq!(
                    decode_base64(&text).map_err(|e| e.to_string()),
                    STANDARD.decode(&text).map(bytes::Bytes::from).map_err(|e| e.to_string())
                );
                let encoded = ByteChunk::from(bytes.clone()).to_base64();
                prop_assert_eq!(&encoded, &STANDARD.encode(&bytes));
                prop_assert_eq!(&decode_base64(encoded.as_bytes()).unwrap()[..], &bytes[..]);
                Ok(())
            })
            .unwrap();
        // Valid text with one symbol changed: mostly still well-formed, sometimes not.
        let mutated = (proptest::collection::vec(any::<u8>(), 1..100), any::<usize>(), any::<u8>());
        runner
            .run(&mutated, |(bytes, at, symbol)| {
                let mut text = STANDARD.encode(&bytes).into_bytes();
                let at = at % text.len();
                text[at] = alphabet.as_bytes()[symbol as usize % alphabet.len()];
                prop_assert_eq!(
                    decode_base64(&text).map_err(|e| e.to_string()),
                    STANDARD.decode(&text).map(bytes::Bytes::from).map_err(|e| e.to_string())
                );
                Ok(())
            })
            .unwrap();
        // Final groups with stray low bits, which only a strict decoder refuses.
        for text in ["QR==", "QUJ=", "QUI=", "QQ==", "QUJD"] {
            assert_eq!(
                decode_base64(text.as_bytes()).map_err(|e| e.to_string()),
                STANDARD.decode(text).map(bytes::Bytes::from).map_err(|e| e.to_string()),
                "{text}"
            );
        }
    }

    #[test]
    fn rejects_invalid_base64_with_the_decoders_message() {
        let err = serde_json::from_value::<ByteChunk>(serde_json::json!("!!")).unwrap_err();
        assert_eq!(err.to_string(), "Invalid symbol 33, offset 0.");
    }
}
