//! A big answer over WebSocket (Tether only: the reference sends each message as one frame
//! and keeps its write buffer): it reaches a client that takes frames no bigger than its
//! WebSocket library's default (16 MiB), and the server's memory is back where it was once
//! the answer is out, with the connection still open.

use serde_json::json;
use tether_testkit::client::b64decode;
use tether_testkit::scratch::Scratch;
use tether_testkit::{RpcClient, ServerProcess, Target};

/// The file read: its answer (base64 in JSON, 53 MB) is over three times the client's largest
/// frame and under its largest message (64 MiB).
const FILE_BYTES: usize = 40_000_000;

/// How much the server may have grown once the answer is out: its heap keeps some freed memory
/// for reuse (a few MiB) and a connection keeps a frame's worth of write buffer; the answer
/// itself, held on to, would be 53 MB.
const GROWTH_MAX_KIB: u64 = 16 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_answer_comes_in_frames_and_leaves_the_servers_memory_as_it_was() {
    let scratch = Scratch::new("big-answers");
    let contents: Vec<u8> = (0..FILE_BYTES).map(|i| (i % 253) as u8).collect();
    scratch.file("big.bin", &contents);
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let pid = server.pid().unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    client.ok("environment/info", json!({})).await.unwrap();
    let before = tether_testkit::process_stats::server_rss_kib(pid).unwrap();

    let answer = client.ok("fs/readFile", json!({"path": scratch.uri("big.bin")})).await.unwrap();
    assert!(b64decode(&answer["dataBase64"]) == contents, "the file came back changed");
    // Answered after the big one was written and let go.
    client.ok("environment/info", json!({})).await.unwrap();
    let after = tether_testkit::process_stats::server_rss_kib(pid).unwrap();
    assert!(
        after < before + GROWTH_MAX_KIB,
        "the server grew from {before} KiB to {after} KiB after a {FILE_BYTES}-byte read"
    );
}
