//! A WebSocket message too big for one frame, as the frames it goes out in (RFC 6455
//! fragments, which every WebSocket library reassembles into the message).
//!
//! Both ends cut their big messages: the server at 256 KiB, the client at 2 MiB, each for its
//! own reasons (see where they call [`fragments`]). The WebSocket library copies each frame
//! whole into a write buffer that keeps its room for the connection's life, and both servers
//! refuse frames over 16 MiB while taking messages up to 64 MiB.

use bytes::Bytes;
use tungstenite::protocol::frame::Frame;
use tungstenite::protocol::frame::coding::{Data, OpCode};

/// The frames of one message of `kind` (text or binary), `frame_max` bytes each but the last,
/// sharing the message's bytes. A text message may be cut inside a character: UTF-8 is
/// checked on the whole message, not on its frames. `frame_max` is not 0.
pub fn fragments(message: Bytes, kind: Data, frame_max: usize) -> impl Iterator<Item = Frame> {
    let len = message.len();
    (0..len).step_by(frame_max).map(move |start| {
        let end = (start + frame_max).min(len);
        let opcode = OpCode::Data(if start == 0 { kind } else { Data::Continue });
        Frame::message(message.slice(start..end), opcode, end == len)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_share_the_message_and_only_the_first_names_its_kind() {
        let frame_max = 256 * 1024;
        let bytes = Bytes::from(vec![3u8; 2 * frame_max + 1]);
        let frames: Vec<Frame> = fragments(bytes.clone(), Data::Binary, frame_max).collect();
        let shape: Vec<(OpCode, bool, usize)> = frames
            .iter()
            .map(|frame| (frame.header().opcode, frame.header().is_final, frame.len()))
            .collect();
        let header = 10; // a payload of 64 KiB or more has an 8-byte length
        assert_eq!(
            shape,
            [
                (OpCode::Data(Data::Binary), false, frame_max + header),
                (OpCode::Data(Data::Continue), false, frame_max + header),
                (OpCode::Data(Data::Continue), true, 1 + 2),
            ]
        );
        let joined: Vec<u8> = frames.iter().flat_map(|frame| frame.payload().to_vec()).collect();
        assert_eq!(joined, bytes);
    }
}
