//! Why a connection ends, in its Close frame (Tether only: the reference drops TCP): 1001 when
//! the server stops, 1009 for a message too big, 1007 for a text frame that is not UTF-8, 1002
//! for a WebSocket protocol error, 1008 for a JSON-RPC protocol violation — each with a short
//! reason, so a client can tell "the server went away" from "the network broke".

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tether_testkit::{ServerProcess, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connected(server: &ServerProcess) -> Socket {
    tokio_tungstenite::connect_async(server.url.as_str()).await.unwrap().0
}

/// The code and reason of the Close frame that ends `socket`; panics if it ends without one.
async fn close_frame(socket: &mut Socket) -> (u16, String) {
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(Some(frame)))) => {
                    return (u16::from(frame.code), frame.reason.to_string());
                }
                Some(Ok(Message::Close(None))) => panic!("a Close frame without a code"),
                Some(Ok(_)) => continue,
                Some(Err(error)) => panic!("ended without a Close frame: {error}"),
                None => panic!("ended without a Close frame"),
            }
        }
    });
    closed.await.expect("the server closed the connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_says_it_is_going_away() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let mut socket = connected(&server).await;
    let initialize = json!({"id": 1, "method": "initialize", "params": {"clientName": "t"}});
    socket.send(Message::text(initialize.to_string())).await.unwrap();
    // Answered: nothing of ours is left unread on the server's side, which would make its
    // close a reset.
    let answer = tokio::time::timeout(Duration::from_secs(20), socket.next()).await.unwrap();
    assert!(matches!(answer, Some(Ok(Message::Text(_)))), "{answer:?}");
    let pid = rustix::process::Pid::from_raw(server.pid().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    assert_eq!(close_frame(&mut socket).await, (1001, "server is shutting down".into()));
}

/// A frame header that announces more than the 16 MiB a frame may carry, written by hand
/// after a real upgrade; the payload never follows, so nothing is left unread when the server
/// closes (which would turn its close into a reset).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_too_big_is_refused_with_1009() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let mut tcp = upgraded(&server).await;
    let mut header = vec![0x81, 0xff];
    header.extend_from_slice(&(17u64 * 1024 * 1024).to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    tcp.write_all(&header).await.unwrap();
    assert_eq!(
        raw_close_frame(&mut tcp).await,
        (1009, "message too big: at most 64 MiB, in frames of 16 MiB".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_frame_that_is_not_utf8_is_refused_with_1007() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let mut socket = connected(&server).await;
    let frame = Frame::message(vec![0xff, 0xfe, b'{'], OpCode::Data(Data::Text), true);
    socket.send(Message::Frame(frame)).await.unwrap();
    assert_eq!(close_frame(&mut socket).await, (1007, "text frame is not UTF-8".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_rpc_violation_is_refused_with_1008() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let mut socket = connected(&server).await;
    socket
        .send(Message::text(json!({"method": "no/such/notification"}).to_string()))
        .await
        .unwrap();
    assert_eq!(close_frame(&mut socket).await, (1008, "unknown notification".into()));
}

/// A frame with a reserved opcode, written by hand after a real upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_protocol_error_is_refused_with_1002() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let mut tcp = upgraded(&server).await;
    // FIN + reserved opcode 3, masked, empty.
    tcp.write_all(&[0x83, 0x80, 1, 2, 3, 4]).await.unwrap();
    assert_eq!(raw_close_frame(&mut tcp).await, (1002, "websocket protocol error".into()));
}

/// A TCP connection upgraded to a WebSocket by hand, for frames no client library would send.
async fn upgraded(server: &ServerProcess) -> tokio::net::TcpStream {
    let mut tcp = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let upgrade = format!(
        "GET / HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        server.addr()
    );
    tcp.write_all(upgrade.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(tcp.read_u8().await.unwrap());
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    tcp
}

/// The code and reason of the (unmasked, short) Close frame the server sends on `tcp`.
async fn raw_close_frame(tcp: &mut tokio::net::TcpStream) -> (u16, String) {
    let mut frame = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut frame)).await;
    assert!(frame.len() >= 4 && frame[0] == 0x88 && frame[1] < 126, "a Close frame: {frame:?}");
    let code = u16::from_be_bytes([frame[2], frame[3]]);
    (code, String::from_utf8_lossy(&frame[4..2 + frame[1] as usize]).into_owned())
}
