//! A client that stops reading slows only itself (Tether only; the reference's memory is its
//! own business): its process blocks on a full pipe, the server's memory stays flat, and
//! another session streams all its output meanwhile.

use std::time::Duration;

use futures_util::SinkExt;
use serde_json::json;
use tether_client::{ClientOptions, ExecServerClient, ProcessUpdate};
use tether_engine::ProcessEvent;
use tether_testkit::{ServerProcess, Target, shell_params};
use tokio_tungstenite::tungstenite::Message;

/// How long the other session's stream may take before the test calls it held up: far
/// more than 50 MB takes on any machine that runs this suite, loaded or not, so only a
/// session stalled behind the other client's fails it (a hang, not a slow run).
const HELD_UP: Duration = Duration::from_secs(240);

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
    // Measured as the flood begins: whatever the stalled session comes to hold is growth.
    let before = rss_kb(pid);

    // Meanwhile, another session streams 50 MB, every byte of it.
    let client = ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
    let mut process =
        client.start(shell_params("other", "head -c 50000000 /dev/zero")).await.unwrap();
    let stream = async {
        let mut received = 0usize;
        while let Some(update) = process.next_update().await {
            match update {
                ProcessUpdate::Event(ProcessEvent::Output { chunk, .. }) => received += chunk.len(),
                ProcessUpdate::Failed(failure) => panic!("{failure}"),
                _ => {}
            }
        }
        received
    };
    let received = tokio::time::timeout(HELD_UP, stream)
        .await
        .expect("the other session was held up behind the client that stopped reading");
    assert_eq!(received, 50_000_000);

    let after = rss_kb(pid);
    // The stalled session holds at most its bounded queue and in-flight budget (a few MB),
    // however long `yes` has kept trying to write (all through the other stream).
    assert!(after < before + 64 * 1024, "server RSS grew from {before} KB to {after} KB");
    drop(stalled);
}
