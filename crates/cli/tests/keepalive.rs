//! Keep-alive from the server's side (Tether only: the reference pings but never gives up): a
//! client that answers nothing, not even pings, loses its connection after the pong timeout,
//! and its session detaches — ready to be resumed, its processes still running. That holds
//! while output is blocked on the client's full socket too; and a live client whose requests
//! wait for the server is never taken for a silent one.

use std::time::Duration;

use serde_json::json;
use tether_testkit::{RpcClient, ServerProcess, Target, wait};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_answers_no_pings_is_let_go_and_its_session_can_be_resumed() {
    let args = ["--ping-interval-secs", "1", "--pong-timeout-secs", "2"];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();

    // A client that initializes, then never polls its socket again: it cannot answer a ping.
    let (silent, session) = session_then_silence(&server).await;

    // Refused while the silent client holds the session; accepted once the server let it go.
    let refused_while_attached = std::cell::Cell::new(false);
    let (url, session, refused) = (server.url.as_str(), session.as_str(), &refused_while_attached);
    let let_go = move || async move {
        let mut again = RpcClient::connect(url).await.unwrap();
        match again.initialize(Some(session)).await.unwrap() {
            Ok(_) => true,
            Err(error) => {
                assert_eq!(error.code, -32010, "{}", error.message);
                refused.set(true);
                false
            }
        }
    };
    wait::until_async("the silent client to be let go", Duration::from_secs(15), let_go).await;
    let refused_while_attached = refused_while_attached.get();
    assert!(refused_while_attached, "the session was attached to the silent client at first");
    drop(silent);
}

/// A session on a connection of its own; the client reads its socket only when told to, so
/// from here on it reads nothing (and answers no ping).
async fn session_then_silence(server: &ServerProcess) -> (RpcClient, String) {
    let (client, result) = RpcClient::connect_initialized(&server.url).await.unwrap();
    (client, result["sessionId"].as_str().unwrap().to_owned())
}

/// Resumes `session` on fresh connections until the server has let its old connection go;
/// panics if that takes 30 s (the pong timeouts under test are 2 s).
async fn resumed_once_let_go(server: &ServerProcess, session: &str) -> RpcClient {
    let url = server.url.as_str();
    let let_go = move || async move {
        let mut again = RpcClient::connect(url).await.unwrap();
        match again.initialize(Some(session)).await.unwrap() {
            Ok(_) => Some(again),
            Err(error) => {
                assert_eq!(error.code, -32010, "{}", error.message);
                None
            }
        }
    };
    wait::until_some_async("the stalled client to be let go", Duration::from_secs(30), let_go).await
}

/// The red team's stalled reader: a client whose command prints without end stops reading its
/// socket. The server's writes block on the full socket; the server still lets the client go
/// after the pong timeout (it used to hold the session for as long as the writer was blocked,
/// 300 s and more), and the session resumes with its process still running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_while_output_flows_is_let_go() {
    let args = ["--ping-interval-secs", "1", "--pong-timeout-secs", "2"];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    let (mut stalled, session) = session_then_silence(&server).await;
    let start = json!({"processId": "flood", "argv": ["yes", "output that never ends"],
        "cwd": "file:///tmp", "env": {"PATH": "/usr/bin:/bin"}, "tty": false});
    stalled.send_request("process/start", start).await.unwrap();
    // From here on the client reads nothing.

    let mut resumed = resumed_once_let_go(&server, &session).await;
    let listed = resumed.ok("process/read", json!({"processId": "flood", "maxBytes": 16})).await;
    assert!(listed.unwrap()["exited"] == json!(false), "the process runs on");
    drop(stalled);
}

/// A live client whose long-polls hold the connection's only request permit, with another
/// request waiting behind them: it answers the server's pings all along, and the server keeps
/// reading them, so the connection stays and every request is answered (the server used to
/// stop reading the socket, miss the pongs and close after the pong timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_client_whose_requests_wait_for_a_permit_is_not_taken_for_silent() {
    let args =
        ["--concurrent-requests", "1", "--ping-interval-secs", "1", "--pong-timeout-secs", "2"];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let start = json!({"processId": "slow", "argv": ["/bin/sh", "-c", "sleep 5; echo done"],
        "cwd": "file:///tmp", "env": {"PATH": "/usr/bin:/bin"}, "tty": false});
    client.ok("process/start", start).await.unwrap();
    let read = json!({"processId": "slow", "waitMs": 10000});
    let first = client.send_request("process/read", read.clone()).await.unwrap();
    // Waits for the permit the first holds, holding up the processor.
    let second = client.send_request("process/read", read).await.unwrap();
    let behind = client.send_request("environment/info", json!({})).await.unwrap();
    for id in [first, second, behind] {
        let answer = client.response(id).await.unwrap();
        assert!(answer.is_ok(), "request {id}: {answer:?}");
    }
}
