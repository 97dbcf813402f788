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
