//! `GET /metrics` (Tether only: the reference has none) says what an operator needs to know:
//! connections, sessions, processes, bytes streamed, resumes and errors — and, on a server with
//! `--ws-auth`, only to whoever holds the credential.

use std::time::Duration;

use tether_testkit::{RpcClient, ServerProcess, Target, wait};

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_happens() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let mut client = RpcClient::connect(&server.url).await.unwrap();
    client.initialize(None).await.unwrap().unwrap();
    let talker = common::exec("talker", "head -c 5000 /dev/zero; sleep 30");
    client.ok("process/start", talker).await.unwrap();
    let error = client.err("no/such/method", serde_json::json!({})).await.unwrap();
    assert_eq!(error.code, -32601);

    let server = &server;
    // All 5,000 bytes read and sent (they may come in more than one chunk).
    let counted = || async move {
        let (status, text) = common::scrape(server, None).await;
        assert_eq!(status, 200);
        let retained = common::sample(&text, r#"tether_retained_output_bytes{where="memory"}"#);
        (retained == 5000.0 && common::sample(&text, "tether_output_bytes_total") >= 5000.0)
            .then_some(text)
    };
    let text = wait::until_some_async("the output counted", Duration::from_secs(10), counted).await;
    assert_eq!(common::sample(&text, "tether_connections"), 1.0);
    assert_eq!(common::sample(&text, r#"tether_sessions{state="attached"}"#), 1.0);
    assert_eq!(common::sample(&text, r#"tether_processes{state="running"}"#), 1.0);
    assert_eq!(common::sample(&text, r#"tether_retained_output_bytes{where="disk"}"#), 0.0);
    assert_eq!(common::sample(&text, r#"tether_rpc_errors_total{code="-32601"}"#), 1.0);
    assert_eq!(common::sample(&text, "tether_sessions_created_total"), 1.0);

    // The client goes: its connection closes and its session waits for a resume (the two
    // counters change a moment apart).
    drop(client);
    let detached = || async move {
        let (_, text) = common::scrape(server, None).await;
        let detached = common::sample(&text, r#"tether_sessions{state="detached"}"#);
        (detached == 1.0 && common::sample(&text, "tether_connections") == 0.0).then_some(text)
    };
    let text = wait::until_some_async("the session to detach", Duration::from_secs(10), detached);
    assert_eq!(common::sample(&text.await, r#"tether_sessions{state="attached"}"#), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_credential_when_the_server_has_one() {
    let dir = std::env::temp_dir().join(format!("tether-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "metrics-token").unwrap();
    let args = ["--ws-auth", "capability-token", "--ws-token-file", token.to_str().unwrap()];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    assert_eq!(common::scrape(&server, None).await, (401, "missing websocket bearer token".into()));
    let (status, text) = common::scrape(&server, Some("Bearer metrics-token")).await;
    assert_eq!(status, 200);
    let refused = |text: &str, reason: &str| {
        common::sample(text, &format!("tether_upgrades_refused_total{{reason=\"{reason}\"}}"))
    };
    for reason in ["unauthorized", "origin", "too_many_connections", "not_websocket"] {
        assert_eq!(refused(&text, reason), 0.0, "{reason}");
    }
    let refusal = RpcClient::connect(&server.url).await.err().expect("refused without a token");
    let refusal = format!("{refusal:#}");
    assert!(refusal.contains("401"), "{refusal}");
    // A browser's request, with the credential; and a plain GET that is no upgrade.
    let address = server.url.trim_start_matches("ws://").to_owned();
    let mut browser = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Authorization: Bearer metrics-token\r\nOrigin: http://evil.example\r\n\r\n"
    );
    tokio::io::AsyncWriteExt::write_all(&mut browser, request.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    tokio::io::AsyncReadExt::read_exact(&mut browser, &mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 403");
    let mut plain = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request =
        format!("GET / HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer metrics-token\r\n\r\n");
    tokio::io::AsyncWriteExt::write_all(&mut plain, request.as_bytes()).await.unwrap();
    tokio::io::AsyncReadExt::read_exact(&mut plain, &mut head).await.unwrap();
    assert!(head.starts_with(b"HTTP/1.1 4"), "{}", String::from_utf8_lossy(&head));
    let (_, text) = common::scrape(&server, Some("Bearer metrics-token")).await;
    assert_eq!(refused(&text, "unauthorized"), 1.0);
    assert_eq!(refused(&text, "origin"), 1.0);
    assert_eq!(refused(&text, "not_websocket"), 1.0);
    std::fs::remove_dir_all(dir).unwrap();
}

/// `--metrics-listen`: a scraper that holds no token reads `/metrics` (and `/readyz`) on a
/// port of its own, over plain HTTP, while the main port still asks for the credential; the
/// metrics port serves nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metrics_port_serves_a_scraper_without_a_token() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let dir = std::env::temp_dir().join(format!("tether-metrics-port-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "metrics-token").unwrap();
    let args = ["--metrics-listen", "127.0.0.1:0", "--ws-auth", "capability-token"];
    let args = [&args[..], &["--ws-token-file", token.to_str().unwrap()]].concat();
    let env = [("TETHER_LOG_FORMAT", Some("json")), ("TETHER_LOG", None)];
    let common::LoggingServer { child: mut server, url, log: mut stderr } =
        common::LoggingServer::start(&args, &env).await;
    let metrics_url = loop {
        let line = stderr.next_line().await.unwrap().expect("the server says where");
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        if parsed["fields"]["message"] == "serving metrics" {
            break parsed["fields"]["url"].as_str().unwrap().to_owned();
        }
    };
    let address = metrics_url.trim_start_matches("http://").trim_end_matches("/metrics").to_owned();
    let get = |address: String, path: &'static str| async move {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    };
    let metrics = get(address.clone(), "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("tether_sessions "), "{metrics}");
    assert!(get(address.clone(), "/readyz").await.starts_with("HTTP/1.1 200"));
    assert!(get(address, "/").await.starts_with("HTTP/1.1 404"), "no WebSocket there");
    let main = url.trim_start_matches("ws://").to_owned();
    let guarded = get(main, "/metrics").await;
    assert!(guarded.starts_with("HTTP/1.1 401"), "the main port still asks: {guarded}");
    server.kill().await.unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}
