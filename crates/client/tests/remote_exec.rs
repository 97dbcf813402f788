//! The process suite, run through the client on Tether and on the reference: the same
//! scenarios the engine runs in-process (`tether_testkit::suites::exec`), so a remote
//! `ExecProcess` is held to the local one's order, bytes, exits and refusals.

use std::time::Duration;

use tether_client::{ClientError, ClientOptions, ExecServerClient};
use tether_protocol::process::ProcessSignal;
use tether_testkit::suites::exec as shared;
use tether_testkit::{ServerProcess, Target, against_both, scenarios, shell_params};

// Two tests per scenario — on Tether and on the reference — each with a server and a session
// of its own.
scenarios!(shared::every_scenario, on [tether, reference], |target, scenario| {
    let server = ServerProcess::start(target).await.unwrap();
    let client = ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
    scenario(&client).await
});

/// The reference delivers only `interrupt`: asking it for another signal fails in the client,
/// unsent, saying so, and the process goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_the_server_does_not_deliver_is_refused_before_sending() {
    let server = ServerProcess::start(Target::Reference).await.unwrap();
    let client = ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
    let params = shared::params("p", "echo ready; sleep 30");
    let process = client.start(params).await.unwrap();
    let error = process.signal(ProcessSignal::Terminate).await.unwrap_err();
    assert!(matches!(error, ClientError::Unsupported(_)), "{error:?}");
    assert!(error.to_string().contains("`terminate`"), "{error}");
    assert!(process.terminate().await.unwrap(), "the process was still running");
}

against_both!(environment_info_is_asked_again);

/// `environment/info` asked again, as Codex asks once per connection: the same shell the
/// session started with, from either server.
async fn environment_info_is_asked_again(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let client = ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
    let asked = client.request_environment_info().await.unwrap();
    assert!(asked.shell.path.starts_with('/'), "{asked:?}");
    assert!(!asked.shell.name.is_empty(), "{asked:?}");
    let at_start = client.environment_info().expect("told at initialize");
    assert_eq!(asked.shell, at_start.shell);
}

/// The client asks for output with its bytes attached (`attachOutput`) and takes a chunk so,
/// NULs and all (here with its members in serde's order, not the one Tether writes); a server
/// that then sends output with bytes both in its base64 and attached fails the process with a
/// protocol error that says so, instead of taking either half and losing the other. The server
/// is scripted: no real one sends such a message.
#[tokio::test]
async fn attached_output_is_read_raw_in_any_member_order_and_a_malformed_one_fails_the_process() {
    use futures_util::{SinkExt, StreamExt};
    use serde_json::{Value, json};
    use tether_client::{ConnectionStatus, ProcessFailureKind, ProcessUpdate};
    use tether_engine::ProcessEvent;
    use tokio_tungstenite::tungstenite::Message;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    // Output is sent once the client holds the process's handle: output that overtakes the
    // start's answer is held for it, and a failure meanwhile ends the process without it.
    let (started, handle_held) = tokio::sync::oneshot::channel::<()>();
    let script = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(socket).await.unwrap();
        let next_text = async |ws: &mut tokio_tungstenite::WebSocketStream<_>| loop {
            if let Message::Text(text) = ws.next().await.unwrap().unwrap() {
                return serde_json::from_str::<Value>(&text).unwrap();
            }
        };
        let initialize = next_text(&mut ws).await;
        let answer = json!({"id": initialize["id"], "result": {"sessionId": "scripted",
            "environmentInfo": {"shell": {"name": "sh", "path": "/bin/sh"},
                "capabilities": {"tetherExtensions": {"attachedOutput": true}}},
            "attachedOutput": true}});
        ws.send(Message::text(answer.to_string())).await.unwrap();
        assert_eq!(next_text(&mut ws).await["method"], "initialized");
        let start = next_text(&mut ws).await;
        let process_id = start["params"]["processId"].clone();
        let answer = json!({"id": start["id"], "result": {"processId": process_id}});
        ws.send(Message::text(answer.to_string())).await.unwrap();
        handle_held.await.unwrap();
        let output = |seq: u64, chunk: &str| {
            json!({"method": "process/output", "params": {"processId": process_id, "seq": seq,
                "stream": "stdout", "chunk": chunk}})
            .to_string()
        };
        let good = tether_protocol::attached::join(&output(1, ""), b"hi\0there");
        ws.send(Message::binary(good)).await.unwrap();
        // Members in another order than Tether writes them are read all the same.
        let reordered = format!(
            r#"{{"params":{{"chunk":"","stream":"stdout","seq":2,"processId":{process_id}}},"method":"process/output"}}"#
        );
        let reordered = tether_protocol::attached::join(&reordered, b"\xffagain");
        ws.send(Message::binary(reordered)).await.unwrap();
        let bad = tether_protocol::attached::join(&output(3, "aGk="), b"more");
        ws.send(Message::binary(bad)).await.unwrap();
        // Until the client lets go of the connection.
        while let Some(Ok(_)) = ws.next().await {}
        initialize["params"].clone()
    });
    let options = ClientOptions { recovery_timeout: Duration::ZERO, ..ClientOptions::default() };
    let client = ExecServerClient::connect(&url, options).await.unwrap();
    let mut process = client.start(shell_params("scripted", "true")).await.unwrap();
    started.send(()).unwrap();
    let update = process.next_update().await.unwrap();
    let ProcessUpdate::Event(ProcessEvent::Output { seq: 1, chunk, .. }) = update else {
        panic!("{update:?}")
    };
    assert_eq!(&chunk[..], b"hi\0there");
    let update = process.next_update().await.unwrap();
    let ProcessUpdate::Event(ProcessEvent::Output { seq: 2, chunk, .. }) = update else {
        panic!("{update:?}")
    };
    assert_eq!(&chunk[..], b"\xffagain");
    let Some(ProcessUpdate::Failed(failure)) = process.next_update().await else {
        panic!("the process did not fail")
    };
    // The connection was let go (recovery is off, so the session with it), and why.
    let lost = ProcessFailureKind::SessionLost { server_went_away: false };
    assert_eq!(failure.kind, lost, "{failure}");
    let ConnectionStatus::Failed(lost) = client.status() else { panic!("not failed") };
    assert!(
        lost.reason.contains(
            "malformed process/output with attached bytes from the server (its JSON's chunk must \
             be empty)"
        ),
        "{lost}"
    );
    let asked = script.await.unwrap();
    assert_eq!(asked["attachOutput"], true);
}

against_both!(writes_through_a_later_handle_reach_the_process);

/// A handle that follows a process another handle already wrote to — the program restarted
/// and resumed its session, say — writes with ids of its own: every write reaches the process
/// once, and none is taken for one of the earlier handle's (the server forgets nothing it was
/// sent under an id it has seen).
async fn writes_through_a_later_handle_reach_the_process(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let first = ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
    let mut params = shared::params("cat", "read a; echo \"$a\"; read b; echo \"$b\"");
    params.pipe_stdin = true;
    let mut process = first.start(params).await.unwrap();
    process.write(bytes::Bytes::from_static(b"one\n")).await.unwrap();
    shared::wait_for_output(&mut process, "one\n").await;
    let session = first.session_id().to_owned();
    drop(process);
    first.disconnect();
    drop(first);
    let second =
        ExecServerClient::resume(&server.url, &session, ClientOptions::default()).await.unwrap();
    let (mut again, _) = second.attach("cat").await.unwrap();
    again.write(bytes::Bytes::from_static(b"two\n")).await.unwrap();
    let followed = shared::follow(&mut again).await;
    assert_eq!((&followed.stdout[..], followed.exit_code), (&b"one\ntwo\n"[..], Some(0)));
}
