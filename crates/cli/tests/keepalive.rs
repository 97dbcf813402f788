//! Keep-alive from the server's side (Tether only: the reference pings but never gives up): a
//! client that answers nothing, not even pings, loses its connection after the pong timeout,
//! and its session detaches — ready to be resumed, its processes still running.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tether_testkit::{RpcClient, ServerProcess, Target};
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_answers_no_pings_is_let_go_and_its_session_can_be_resumed() {
    let args = ["--ping-interval-secs", "1", "--pong-timeout-secs", "2"];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();

    // A client that initializes, reads the answer, then never polls its socket again: it
    // cannot answer a ping.
    let (mut silent, _) = tokio_tungstenite::connect_async(server.url.as_str()).await.unwrap();
    let initialize = json!({"id": 1, "method": "initialize", "params": {"clientName": "silent"}});
    silent.send(Message::text(initialize.to_string())).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), silent.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let answer: Value = serde_json::from_str(answer.to_text().unwrap()).unwrap();
    let session = answer["result"]["sessionId"].as_str().unwrap().to_owned();
    silent.send(Message::text(json!({"method": "initialized"}).to_string())).await.unwrap();

    // Refused while the silent client holds the session; accepted once the server let it go.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut refused_while_attached = false;
    loop {
        let mut again = RpcClient::connect(&server.url).await.unwrap();
        match again.initialize(Some(&session)).await.unwrap() {
            Ok(_) => break,
            Err(error) => {
                assert_eq!(error.code, -32010, "{}", error.message);
                refused_while_attached = true;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "the silent client was never let go");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(refused_while_attached, "the session was attached to the silent client at first");
    drop(silent);
}
