//! A client that stops reading slows only itself (Tether only; the reference's memory is its
//! own business): its process blocks on a full pipe, the server's memory stays flat, and
//! another session streams at full speed meanwhile.

use std::time::{Duration, Instant};

use futures_util::SinkExt;
use serde_json::json;
use tether_client::{ClientOptions, ExecServerClient, ProcessUpdate};
use tether_engine::ProcessEvent;
use tether_testkit::{ServerProcess, Target, shell_params};
use tokio_tungstenite::tungstenite::Message;

fn rss_kb(pid: u32) -> u64 {
    tether_testkit::process_stats::server_rss_kib(pid).expect("the server is running")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_slows_only_itself() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let pid = server.pid().unwrap();

    // The stalled client: starts an endless producer, then never reads its socket again.
    let (mut stalled, _) = tokio_tungstenite::connect_async(server.url.as_str()).await.unwrap();
    for message in [
        json!({"id": 1, "method": "initialize", "params": {"clientName": "stalled"}}),
        json!({"method": "initialized", "params": {}}),
        json!({"id": 2, "method": "process/start", "params": {
            "processId": "flood", "argv": ["/usr/bin/yes", "flooding the stalled client"],
            "cwd": "file:///tmp", "env": {"PATH": "/usr/bin:/bin"}, "tty": false,
        }}),
    ] {
        stalled.send(Message::text(message.to_string())).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = rss_kb(pid);

    // Meanwhile, another session streams 50 MB and is not held up.
    let client = ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
    let started = Instant::now();
    let mut process =
        client.start(shell_params("other", "head -c 50000000 /dev/zero")).await.unwrap();
    let mut received = 0usize;
    while let Some(update) = process.next_update().await {
        match update {
            ProcessUpdate::Event(ProcessEvent::Output { chunk, .. }) => received += chunk.len(),
            ProcessUpdate::Failed(message) => panic!("{message}"),
            _ => {}
        }
    }
    assert_eq!(received, 50_000_000);
    assert!(started.elapsed() < Duration::from_secs(30), "held up: {:?}", started.elapsed());

    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kb(pid);
    // The stalled session holds at most its bounded queue and in-flight budget (a few MB),
    // however long `yes` keeps trying to write.
    assert!(after < before + 64 * 1024, "server RSS grew from {before} KB to {after} KB");
    drop(stalled);
}
