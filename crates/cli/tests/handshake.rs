//! The handshake and the envelope, against Tether and the reference alike: every assertion here
//! holds for `codex exec-server` 0.169 too.

use std::time::Duration;

use serde_json::json;
use tether_testkit::{RpcClient, ServerProcess, Target, against_both};

against_both!(
    initialize_returns_a_session_and_the_environment,
    requests_before_the_handshake_are_refused_in_wire_order,
    initialize_is_accepted_once_per_connection,
    unknown_methods_are_not_found_in_any_state,
    malformed_messages_get_an_error_with_id_minus_one_and_the_connection_lives,
    binary_frames_carry_json_too,
    ids_are_echoed_verbatim,
    unknown_notifications_close_the_connection,
    initialized_before_initialize_closes_the_connection,
    a_failed_resume_leaves_initialize_available,
    environment_methods_take_no_params,
    http_readiness_and_browser_origins,
    client_pings_are_answered,
);

async fn client_pings_are_answered(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    client.ping(b"are you there").await.unwrap();
    client.ok("environment/status", json!(null)).await.unwrap();
}

/// Tether only: the ping interval is a flag (the reference's is a fixed 30 s).
#[tokio::test]
async fn the_server_pings_every_interval() {
    let server =
        ServerProcess::start_with(Target::Tether, &["--ping-interval-secs", "1"]).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let started = std::time::Instant::now();
    client.server_ping().await.unwrap();
    client.server_ping().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
}

async fn initialize_returns_a_session_and_the_environment(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (mut client, init) = RpcClient::connect_initialized(&server.url).await.unwrap();

    let session_id = init["sessionId"].as_str().unwrap();
    assert_eq!(session_id.len(), 36, "a UUID: {session_id}");
    assert_eq!(session_id.chars().filter(|c| *c == '-').count(), 4);
    let info = &init["environmentInfo"];
    assert!(info["shell"]["path"].as_str().unwrap().starts_with('/'), "{info}");
    assert_eq!(info["platformOs"], "linux");
    assert!(info["cwd"].as_str().unwrap().starts_with("file:///"));
    assert!(info["capabilities"].is_object());

    // environment/info is the same object the handshake returned.
    let again = client.ok("environment/info", json!(null)).await.unwrap();
    assert_eq!(&again, info);
}

async fn requests_before_the_handshake_are_refused_in_wire_order(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let mut client = RpcClient::connect(&server.url).await.unwrap();

    let read = json!({"processId": "p"});
    let early = client.send_request("process/read", read.clone()).await.unwrap();
    let init = client.send_request("initialize", json!({"clientName": "t"})).await.unwrap();
    let between =
        client.send_request("fs/readFile", json!({"path": "file:///etc/hostname"})).await.unwrap();
    let between_env = client.send_request("environment/status", json!(null)).await.unwrap();

    let error = client.response(early).await.unwrap().unwrap_err();
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32600, "client must call initialize before using exec methods")
    );
    client.response(init).await.unwrap().unwrap();
    let error = client.response(between).await.unwrap().unwrap_err();
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32600, "client must send initialized before using filesystem methods")
    );
    let error = client.response(between_env).await.unwrap().unwrap_err();
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32600, "client must send initialized before using environment status methods")
    );

    client.notify("initialized", json!({})).await.unwrap();
    let status = client.ok("environment/status", json!(null)).await.unwrap();
    assert_eq!(status, json!({"status": "ready"}));
}

async fn initialize_is_accepted_once_per_connection(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let error = client.err("initialize", json!({"clientName": "again"})).await.unwrap();
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32600, "initialize may only be sent once per connection")
    );
}

async fn unknown_methods_are_not_found_in_any_state(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let mut client = RpcClient::connect(&server.url).await.unwrap();
    let error = client.err("process/resizePty", json!({})).await.unwrap();
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32601, "exec-server stub does not implement `process/resizePty` yet")
    );
    client.initialize(None).await.unwrap().unwrap();
    for method in ["process/kill", "", "initialized", "shutdown"] {
        let error = client.err(method, json!({})).await.unwrap();
        assert_eq!(error.code, -32601, "{method}");
        assert_eq!(error.message, format!("exec-server stub does not implement `{method}` yet"));
    }
}

async fn malformed_messages_get_an_error_with_id_minus_one_and_the_connection_lives(
    target: Target,
) {
    let server = ServerProcess::start(target).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let prefix = "failed to parse websocket JSON-RPC message from exec-server websocket 127.0.0.1:";
    for text in [
        "{bad",
        "[]",
        "3",
        r#"{"id":1}"#,
        r#"{"id":null,"method":"environment/status"}"#,
        r#"{"id":1.5,"method":"environment/status"}"#,
        r#"{"id":9223372036854775808,"method":"environment/status"}"#,
        r#"{"id":1,"method":"environment/status","trace":"x"}"#,
    ] {
        client.send_text(text).await.unwrap();
        let error = client.response_to(&json!(-1)).await.unwrap().unwrap_err();
        assert_eq!(error.code, -32600, "{text}");
        assert!(error.message.starts_with(prefix), "{text}: {}", error.message);
    }
    let error = {
        client.send_text("{bad").await.unwrap();
        client.response_to(&json!(-1)).await.unwrap().unwrap_err()
    };
    assert!(
        error.message.ends_with(": key must be a string at line 1 column 2"),
        "{}",
        error.message
    );
    // Still serving.
    let status = client.ok("environment/status", json!(null)).await.unwrap();
    assert_eq!(status["status"], "ready");
}

async fn binary_frames_carry_json_too(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let mut client = RpcClient::connect(&server.url).await.unwrap();
    client
        .send_binary(br#"{"id":"b","method":"initialize","params":{"clientName":"bin"}}"#.to_vec())
        .await
        .unwrap();
    let result = client.response_to(&json!("b")).await.unwrap().unwrap();
    assert!(result["sessionId"].is_string());
}

async fn ids_are_echoed_verbatim(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    for id in [json!(0), json!(-7), json!(i64::MAX), json!(""), json!("x".repeat(1000))] {
        client.send_json(&json!({"id": id, "method": "environment/status"})).await.unwrap();
        client.response_to(&id).await.unwrap().unwrap();
    }
    // A "jsonrpc" member is tolerated.
    client
        .send_json(&json!({"jsonrpc": "2.0", "id": 99, "method": "environment/status"}))
        .await
        .unwrap();
    client.response(99).await.unwrap().unwrap();
}

async fn unknown_notifications_close_the_connection(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    client.notify("process/kill", json!({})).await.unwrap();
    assert!(client.is_closed_within(Duration::from_secs(5)).await);
    // Others are still served.
    RpcClient::connect_initialized(&server.url).await.unwrap();
}

async fn initialized_before_initialize_closes_the_connection(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let mut client = RpcClient::connect(&server.url).await.unwrap();
    client.notify("initialized", json!({})).await.unwrap();
    assert!(client.is_closed_within(Duration::from_secs(5)).await);
}

async fn a_failed_resume_leaves_initialize_available(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let mut client = RpcClient::connect(&server.url).await.unwrap();
    let unknown = "00000000-0000-4000-8000-000000000000";
    let error = client.initialize(Some(unknown)).await.unwrap().unwrap_err();
    assert_eq!((error.code, error.message), (-32600, format!("unknown session id {unknown}")));
    let error =
        client.err("initialize", json!({"clientName": "t", "resumeSessionId": 5})).await.unwrap();
    assert_eq!(error.code, -32602);
    let error = client.err("initialize", json!(null)).await.unwrap();
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32602, "invalid type: null, expected struct InitializeParams")
    );
    client.initialize(None).await.unwrap().unwrap();
}

async fn environment_methods_take_no_params(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    client.ok("environment/info", json!({})).await.unwrap();
    client.send_json(&json!({"id": 50, "method": "environment/status"})).await.unwrap();
    client.response(50).await.unwrap().unwrap();
    let error = client.err("environment/info", json!({"a": 1})).await.unwrap();
    assert_eq!((error.code, error.message.as_str()), (-32602, "invalid type: map, expected unit"));
}

async fn http_readiness_and_browser_origins(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let status =
        raw_http(server.addr(), "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let status =
        raw_http(server.addr(), "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");
    let upgrade = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
        Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let status =
        raw_http(server.addr(), &format!("{upgrade}Origin: https://evil.example\r\n\r\n")).await;
    assert!(status.starts_with("HTTP/1.1 403"), "{status}");
    let status = raw_http(server.addr(), &format!("{upgrade}\r\n")).await;
    assert!(status.starts_with("HTTP/1.1 101"), "{status}");
}

/// Sends a raw HTTP request and returns the response head.
async fn raw_http(addr: &str, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buffer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&buffer[..n]).into_owned()
}
