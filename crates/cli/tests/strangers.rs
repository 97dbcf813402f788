//! Peers before their WebSocket upgrade, who may be anyone (Tether only: the reference holds
//! such connections forever). A connection that sends nothing, or trickles its request head,
//! is closed at the head deadline; past the cap on waiting connections the oldest is closed;
//! and however many strangers come, a running session keeps the descriptors its work needs,
//! and the connection limit fits the descriptor limit or the server says so at start-up.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tether_testkit::server::tether_binary;
use tether_testkit::{RpcClient, ServerProcess, Target};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

mod common;

/// Reads until the server closes the connection; returns what it sent. Panics if it has not
/// closed within 30 s (the deadlines under test are far shorter).
async fn closed_by_server(stream: &mut (impl AsyncReadExt + Unpin)) -> Vec<u8> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    });
    read.await.expect("the server closed the connection");
    received
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_trickling_connections_are_closed_at_the_head_deadline() {
    let server = ServerProcess::start_with(Target::Tether, &["--request-head-timeout-secs", "1"])
        .await
        .unwrap();
    // A session that was there first is untouched by any of it.
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();

    let mut silent = TcpStream::connect(server.addr()).await.unwrap();
    let trickling = TcpStream::connect(server.addr()).await.unwrap();
    let (mut trickle_reader, mut trickle_writer) = trickling.into_split();
    // One byte of a never-ending head every 100 ms: always active, never complete.
    let writer = tokio::spawn(async move {
        let head = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
        for byte in head.iter().chain(std::iter::repeat(&b'a')) {
            if trickle_writer.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    let answered = closed_by_server(&mut silent).await;
    assert!(answered.is_empty() || answered.starts_with(b"HTTP/1.1 408"), "{answered:?}");
    let answered = closed_by_server(&mut trickle_reader).await;
    assert!(!answered.starts_with(b"HTTP/1.1 101"), "the trickle was never upgraded");
    writer.abort();

    // The server counts a close once hyper gives the connection up, which may be just after
    // the peer has seen it: the count is awaited, not taken at once.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, metrics) = common::scrape(&server, None).await;
        let closed = common::sample(
            &metrics,
            r#"tether_connections_closed_before_upgrade_total{reason="deadline"}"#,
        );
        assert!(closed <= 2.0, "{closed} closed at the deadline, not 2");
        if closed == 2.0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "only {closed} closed at the deadline");
        tokio::task::yield_now().await;
    }
    client.ok("process/start", common::exec("after", "echo still-served")).await.unwrap();
    let (_, fresh) = RpcClient::connect_initialized(&server.url).await.unwrap();
    assert!(fresh["sessionId"].is_string(), "a newcomer is served too");
}

/// The red team's attack, on a server whose descriptor limit is 1,600: twice that many idle
/// TCP connections. Before, the server held each one forever and ran out of descriptors, and
/// the session already running got "Too many open files". Now at most 177 wait at once (the
/// default 256 scaled to the limit, as the connections and headroom are; the oldest are closed
/// to make room), so the session's commands and file reads go on, and a new client still gets
/// in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_strangers_cannot_exhaust_the_descriptors_of_a_running_session() {
    let server = ServerProcess::start_wrapped(
        Target::Tether,
        &["prlimit", "--nofile=1600:1600", "--"],
        &[],
        &[],
    )
    .await
    .unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();

    // This test's own end of each connection needs a descriptor too.
    let mut ours = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let hard = ours.maximum.unwrap_or(u64::MAX);
    assert!(hard >= 3500, "this test needs a hard descriptor limit of 3,500; it is {hard}");
    ours.current = Some(ours.current.unwrap_or(u64::MAX).max(3500));
    rustix::process::setrlimit(rustix::process::Resource::Nofile, ours).unwrap();
    let mut strangers = Vec::with_capacity(3200);
    for _ in 0..3200 {
        strangers.push(TcpStream::connect(server.addr()).await.unwrap());
    }
    // Every one of them was accepted (the server took the descriptor and gave it back), not
    // left in the kernel's backlog: the metrics count the evictions.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, metrics) = common::scrape(&server, None).await;
        let evicted = common::sample(
            &metrics,
            r#"tether_connections_closed_before_upgrade_total{reason="evicted"}"#,
        );
        if evicted >= (3200 - 177) as f64 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "only {evicted} evicted");
        tokio::task::yield_now().await;
    }

    let started = client.ok("process/start", common::exec("work", "echo still-served")).await;
    assert!(started.is_ok(), "{started:?}");
    let read = client.ok("fs/readFile", json!({"path": "file:///etc/passwd"})).await;
    assert!(read.is_ok(), "{read:?}");
    let (_, fresh) = RpcClient::connect_initialized(&server.url).await.unwrap();
    assert!(fresh["sessionId"].is_string(), "a newcomer is served too");
    drop(strangers);
}

/// An explicit `--max-connections` the descriptor limit cannot hold (with the fewest pending
/// connections and the least room for processes) is refused at start-up, naming what fits.
#[tokio::test]
async fn a_connection_limit_the_descriptor_limit_cannot_hold_is_refused() {
    for (limit, asked, message) in [
        (
            "1600",
            "5000",
            "--max-connections 5000 needs at least 5080 file descriptors, but the limit is 1600 (`ulimit -Hn`); use --max-connections 1520 or fewer, or raise the limit",
        ),
        (
            "256",
            "1000",
            "--max-connections 1000 needs at least 1080 file descriptors, but the limit is 256 (`ulimit -Hn`); use --max-connections 176 or fewer, or raise the limit",
        ),
    ] {
        let output = tokio::process::Command::new("prlimit")
            .arg(format!("--nofile={limit}:{limit}"))
            .arg("--")
            .arg(tether_binary().unwrap())
            .args(["serve", "--listen", "ws://127.0.0.1:0", "--max-connections", asked])
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.trim(), format!("tether: {message}"));
    }
}

/// A small container's descriptor limit (256, where the defaults need 2,304) does not stop the
/// server, as it does not stop the reference: the defaults are lowered to fit, in one warning
/// that says what became what and how to raise the limit, and a session runs a command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_descriptor_limit_lowers_the_defaults_with_one_warning() {
    let mut server = tokio::process::Command::new("prlimit")
        .arg("--nofile=256:256")
        .arg("--")
        .arg(tether_binary().unwrap())
        .args(["serve", "--listen", "ws://127.0.0.1:0"])
        .env_remove("TETHER_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap()).lines();
    let url = stdout.next_line().await.unwrap().expect("the server printed its URL");
    // Everything the server says before it listens, up to the line that says it does.
    let mut stderr = BufReader::new(server.stderr.take().unwrap()).lines();
    let mut said = Vec::new();
    while let Some(line) = stderr.next_line().await.unwrap() {
        let listening = line.contains("listening");
        said.push(line);
        if listening {
            break;
        }
    }
    let warnings: Vec<&String> = said.iter().filter(|line| line.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 1, "{said:#?}");
    assert!(
        warnings[0].ends_with(
            "the file-descriptor limit (256) is below the 2304 these settings need; lowered --max-connections 1024 to 115, connections waiting for their upgrade 256 to 28, descriptors kept for the sessions' work 1024 to 113; raise the hard limit to 2304 (`ulimit -Hn`, LimitNOFILE= under systemd) to serve them in full"
        ),
        "{}",
        warnings[0]
    );

    let (mut client, _) = RpcClient::connect_initialized(&url).await.unwrap();
    client.ok("process/start", common::exec("small", "echo served")).await.unwrap();
    let events = client.process_events("small").await.unwrap();
    assert_eq!(tether_testkit::client::output_of(&events, "stdout"), b"served\n");
    let exited = events.iter().find(|e| e["method"] == "process/exited").unwrap();
    assert_eq!(exited["params"]["exitCode"], 0);
}
