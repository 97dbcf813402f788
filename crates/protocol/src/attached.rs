//! Tether's `binaryBlocks` extension: a file block's bytes beside its JSON, not inside it.
//!
//! On the reference's protocol every block travels as base64 inside a JSON string, which
//! costs a third more bytes and, on both sides, an encoding, an escape scan, a UTF-8 check
//! and a copy or two per byte. With the extension (advertised in
//! [`TetherExtensions::binary_blocks`](crate::session::TetherExtensions::binary_blocks), over
//! WebSocket only) a block may instead travel in a binary WebSocket message: the JSON-RPC
//! message, one NUL byte, then the block's bytes as they are. JSON text never holds a raw NUL
//! (inside strings it must be escaped, outside them it is not a token), so the first NUL ends
//! the JSON without any length to agree on.
//!
//! Three messages use it: an `fs/writeBlock` request whose params leave out `chunk`
//! ([`FsWriteBlockAttachedParams`](crate::fs::FsWriteBlockAttachedParams)), the answer to an
//! `fs/readBlock` that asked for it with `attachChunk: true`, whose result is `{eof}`, and the
//! answer to an `fs/readFile` that asked for it with `attachData: true`, whose result is `{}`.
//! A fourth, under its own flag (`attachedHttpBodies`): an `http/request/bodyDelta` of a
//! stream that asked for it with `attachBody: true`, whose `deltaBase64` is then empty. A
//! fifth, under `attachedOutput`: a `process/output` to a connection that asked for it with
//! `initialize {attachOutput: true}`, whose `chunk` is then empty.

/// The byte between the JSON and the attached bytes.
pub const SEPARATOR: u8 = 0;

/// A binary message split into its JSON and the bytes attached after the first NUL; `None`
/// when there is no NUL (a binary message that holds JSON alone, as the reference reads it).
pub fn split(message: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = memchr_nul(message)?;
    Some((&message[..at], &message[at + 1..]))
}

/// The binary message carrying `json` with `bytes` attached.
pub fn join(json: &str, bytes: &[u8]) -> Vec<u8> {
    let mut message = Vec::with_capacity(json.len() + 1 + bytes.len());
    message.extend_from_slice(json.as_bytes());
    message.push(SEPARATOR);
    message.extend_from_slice(bytes);
    message
}

/// Where the first NUL is. The JSON part is small (a few hundred bytes), so a plain scan is
/// as fast as anything.
fn memchr_nul(message: &[u8]) -> Option<usize> {
    message.iter().position(|&byte| byte == SEPARATOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_nul_ends_the_json_and_the_bytes_may_hold_more() {
        let message = join(r#"{"id":1}"#, b"\0raw\0bytes");
        assert_eq!(split(&message), Some((&br#"{"id":1}"#[..], &b"\0raw\0bytes"[..])));
        assert_eq!(split(br#"{"id":1}"#), None);
        assert_eq!(split(&join("{}", b"")), Some((&b"{}"[..], &b""[..])));
    }
}
