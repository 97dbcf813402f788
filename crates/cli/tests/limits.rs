//! Limits that keep one client from taking a server from everyone else (Tether only: the
//! reference has none of these flags): each refusal names the limit and what to do.

use std::time::Duration;

use serde_json::json;
use tether_testkit::{RpcClient, ServerProcess, Target};

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_per_session_are_bounded() {
    let server = ServerProcess::start_with(Target::Tether, &["--max-processes-per-session", "2"])
        .await
        .unwrap();
    let mut client = RpcClient::connect(&server.url).await.unwrap();
    client.initialize(None).await.unwrap().unwrap();
    client.ok("process/start", common::exec("a", "sleep 30")).await.unwrap();
    client.ok("process/start", common::exec("b", "sleep 30")).await.unwrap();
    let refused = client.err("process/start", common::exec("c", "true")).await.unwrap();
    assert_eq!(refused.code, -32600);
    assert!(
        refused.message.contains("too many processes")
            && refused.message.contains("--max-processes-per-session"),
        "{}",
        refused.message
    );
    // A finished process frees its place.
    client.ok("process/terminate", json!({"processId": "a"})).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match client.call("process/start", common::exec("c", "true")).await.unwrap() {
            Ok(_) => break,
            Err(error) => assert!(error.message.contains("too many"), "{}", error.message),
        }
        assert!(tokio::time::Instant::now() < deadline, "the place was never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_bounded_but_a_resume_is_not_a_new_one() {
    let server = ServerProcess::start_with(Target::Tether, &["--max-sessions", "1"]).await.unwrap();
    let mut first = RpcClient::connect(&server.url).await.unwrap();
    let session = first.initialize(None).await.unwrap().unwrap();
    let session_id = session["sessionId"].as_str().unwrap().to_owned();

    let mut second = RpcClient::connect(&server.url).await.unwrap();
    let refused = second.initialize(None).await.unwrap().unwrap_err();
    assert_eq!(refused.code, -32600);
    assert!(
        refused.message.contains("too many sessions") && refused.message.contains("--max-sessions"),
        "{}",
        refused.message
    );

    drop(first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = RpcClient::connect(&server.url).await.unwrap();
        match again.initialize(Some(&session_id)).await.unwrap() {
            Ok(_) => break,
            // Still attached to the first connection until the server notices it is gone.
            Err(error) => assert_eq!(error.code, -32010, "{}", error.message),
        }
        assert!(tokio::time::Instant::now() < deadline, "the session never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_bounded() {
    let server =
        ServerProcess::start_with(Target::Tether, &["--max-connections", "1"]).await.unwrap();
    let first = RpcClient::connect(&server.url).await.unwrap();
    let refused = tokio_tungstenite::connect_async(server.url.as_str()).await.err().unwrap();
    match refused {
        tokio_tungstenite::tungstenite::Error::Http(response) => {
            assert_eq!(response.status().as_u16(), 503);
            let body = String::from_utf8_lossy(response.body().as_deref().unwrap_or_default())
                .into_owned();
            assert!(
                body.contains("too many connections") && body.contains("--max-connections"),
                "{body}"
            );
        }
        other => panic!("{other}"),
    }
    drop(first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while RpcClient::connect(&server.url).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "the place was never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Six clients read an 11 MB file whole at once, on a server whose whole-file reads may hold
/// 16 MiB: the reads take turns, so the server's memory peaks at about one read's worth
/// (bytes, base64, frame: some 45 MB) instead of six — and every read is answered in full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_file_reads_take_turns_within_the_server_wide_budget() {
    let budget = (16 * 1024 * 1024).to_string();
    let server = ServerProcess::start_with(Target::Tether, &["--file-read-budget-bytes", &budget])
        .await
        .unwrap();
    let dir =
        std::path::PathBuf::from(format!("/var/tmp/tether-read-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("eleven.bin");
    std::fs::write(&file, vec![42u8; 11_000_000]).unwrap();
    let serving = tether_testkit::process_stats::serving_pid(server.pid().unwrap());
    let before = tether_testkit::process_stats::peak_rss_kib(serving).unwrap();

    let mut readers = Vec::new();
    for _ in 0..6 {
        let (url, uri) = (server.url.clone(), format!("file://{}", file.display()));
        readers.push(tokio::spawn(async move {
            let (mut client, _) = RpcClient::connect_initialized(&url).await.unwrap();
            let read = client.ok("fs/readFile", json!({"path": uri})).await.unwrap();
            read["dataBase64"].as_str().unwrap().len()
        }));
    }
    for reader in readers {
        assert_eq!(reader.await.unwrap(), 11_000_000usize.div_ceil(3) * 4, "answered in full");
    }
    let grew_mib = (tether_testkit::process_stats::peak_rss_kib(serving).unwrap() - before) / 1024;
    assert!(grew_mib < 120, "the server's memory peaked {grew_mib} MiB higher");

    // A file bigger than the whole budget is refused, with what to do instead.
    let small = ServerProcess::start_with(Target::Tether, &["--file-read-budget-bytes", "1048576"])
        .await
        .unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&small.url).await.unwrap();
    let uri = format!("file://{}", file.display());
    let refused = client.err("fs/readFile", json!({"path": uri})).await.unwrap();
    assert!(
        refused.message.contains("whole-file reads may hold 1048576 bytes at once (--file-read-budget-bytes); read it in blocks with fs/open and fs/readBlock"),
        "{}",
        refused.message
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
