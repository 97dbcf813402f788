//! The HTTP suite, run through the client on Tether and on the reference: the same scenarios the
//! engine runs in-process (`tether_testkit::suites::http`), with the same peer.
//! Then what only a remote client has to get right: a dropped connection.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use tether_client::{ClientOptions, ConnectionStatus, ExecServerClient};
use tether_engine::http::{HttpClient, HttpError};
use tether_protocol::http::HttpRequestParams;
use tether_testkit::suites::http as shared;
use tether_testkit::{FaultProxy, HttpPeer, ServerProcess, Target, scenarios, wait};

// Two tests per scenario — on Tether and on the reference — each with a server, a session and
// a peer of its own.
scenarios!(shared::every_scenario, on [tether, reference], |target, scenario| {
    let server = ServerProcess::start(target).await.unwrap();
    let client = ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
    let peer = HttpPeer::start().await.unwrap();
    scenario(&client, &peer).await
});

fn get(url: &str) -> HttpRequestParams {
    serde_json::from_value(json!({"method": "GET", "url": url, "requestId": "r"})).unwrap()
}

async fn through_a_proxy() -> (ServerProcess, FaultProxy, ExecServerClient, HttpPeer) {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    let peer = HttpPeer::start().await.unwrap();
    (server, proxy, client, peer)
}

/// The server's stream ends with its connection, and nothing can resume it: when the
/// connection drops, the body fails at once — never a clean end that would pass a truncated
/// body off as whole — while the session recovers for what comes next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_fails_when_the_connection_drops() {
    let (_server, proxy, client, peer) = through_a_proxy().await;
    let slow = get(&peer.url("/slow-body?ms=30000"));
    let (head, mut body) = client.request_streamed(slow).await.unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(body.next().await.unwrap().unwrap(), "start");

    proxy.cut();
    let next = tokio::time::timeout(Duration::from_secs(10), body.next());
    let error = next.await.expect("at once, not after the peer's 30 s").unwrap().unwrap_err();
    assert!(error.to_string().contains("cannot be resumed"), "{error}");
    assert!(body.next().await.is_none(), "nothing after the failure");

    client.wait_connected().await.unwrap();
    assert_eq!(client.status(), ConnectionStatus::Connected);
    let (_, body) = client.request_streamed(get(&peer.url("/chunks"))).await.unwrap();
    let chunks: Vec<_> = body.map(Result::unwrap).collect().await;
    assert_eq!(chunks.concat(), b"one\ntwo\nthree\n");
}

/// A request may have reached its peer before the connection dropped: it is not sent again on
/// the resumed session, and the caller is told it may or may not have happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_request_is_not_resent_after_a_drop() {
    let (_server, proxy, client, peer) = through_a_proxy().await;
    let slow = client.request(get(&peer.url("/slow-head?ms=1000")));
    let cut = async {
        wait::until("the request at the peer", wait::DEADLINE, || !peer.requests().is_empty())
            .await;
        proxy.cut();
    };

    let (error, ()) = tokio::join!(slow, cut);
    let error = error.unwrap_err();
    assert!(matches!(error, HttpError::Failed(_)), "{error:?}");
    assert!(error.to_string().contains("may or may not have taken effect"), "{error}");
    client.wait_connected().await.unwrap();
    // A later request is answered, and the peer has seen only it since: the resumed session
    // sent nothing of its own before it (a resend would have gone first).
    let later = json!({"method": "GET", "url": peer.url("/status/200"), "requestId": "later"});
    let later = client.request(serde_json::from_value(later).unwrap()).await.unwrap();
    assert_eq!(later.status, 200);
    assert_eq!(peer.requests(), ["GET /slow-head?ms=1000", "GET /status/200"], "sent once");
}

/// A server that says it sends bodies attached (`attachedHttpBodies`) has its deltas read
/// whatever the order of their members, and one that then sends a delta the client cannot
/// read so — bytes both in its base64 and attached — breaks the connection
/// with a protocol error that the stream reports, instead of taking either half and losing the
/// other. The server is scripted: no real one sends such a message.
#[tokio::test]
async fn attached_deltas_in_any_member_order_are_read_but_base64_too_breaks_it() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let script = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(socket).await.unwrap();
        let next_text = async |ws: &mut tokio_tungstenite::WebSocketStream<_>| loop {
            if let Message::Text(text) = ws.next().await.unwrap().unwrap() {
                return serde_json::from_str::<serde_json::Value>(&text).unwrap();
            }
        };
        let initialize = next_text(&mut ws).await;
        let answer = json!({"id": initialize["id"], "result": {"sessionId": "scripted",
            "environmentInfo": {"shell": {"name": "sh", "path": "/bin/sh"},
                "capabilities": {"tetherExtensions": {"attachedHttpBodies": true}}}}});
        ws.send(Message::text(answer.to_string())).await.unwrap();
        assert_eq!(next_text(&mut ws).await["method"], "initialized");
        let request = next_text(&mut ws).await;
        let answer = json!({"id": request["id"],
            "result": {"status": 200, "headers": [], "bodyBase64": ""}});
        ws.send(Message::text(answer.to_string())).await.unwrap();
        // Members in another order than Tether writes them are read all the same.
        let reordered = format!(
            r#"{{"params":{{"done":false,"deltaBase64":"","seq":1,"requestId":{}}},"method":"http/request/bodyDelta"}}"#,
            request["params"]["requestId"]
        );
        let reordered = tether_protocol::attached::join(&reordered, b"first\0");
        ws.send(Message::binary(reordered)).await.unwrap();
        let delta = json!({"method": "http/request/bodyDelta", "params": {
            "requestId": request["params"]["requestId"], "seq": 2, "deltaBase64": "aGk=",
            "done": false, "error": null}});
        let message = tether_protocol::attached::join(&delta.to_string(), b"more");
        ws.send(Message::binary(message)).await.unwrap();
        // Until the client lets go of the connection.
        while let Some(Ok(_)) = ws.next().await {}
        request["params"].clone()
    });
    let options = ClientOptions { recovery_timeout: Duration::ZERO, ..ClientOptions::default() };
    let client = ExecServerClient::connect(&url, options).await.unwrap();
    let (head, mut body) = client.request_streamed(get("http://peer.invalid/")).await.unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(&body.next().await.unwrap().unwrap()[..], b"first\0");
    let error = body.next().await.unwrap().unwrap_err();
    assert_eq!(
        error.0,
        "exec-server connection dropped (malformed http/request/bodyDelta with attached bytes \
         from the server (at most 1048576 bytes, after JSON whose deltaBase64 is empty)); a \
         streamed http/request body cannot be resumed"
    );
    let sent = script.await.unwrap();
    assert_eq!((&sent["streamResponse"], &sent["attachBody"]), (&json!(true), &json!(true)));
}

/// Tether only (the reference has no limit): a buffered body with its bytes attached stops at
/// the buffered limit with the error a local client gives, which says how to get the body
/// instead; a body of exactly the limit comes whole, and the connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_buffered_body_stops_at_the_limit_with_the_way_out() {
    use tether_engine::http::HTTP_BUFFERED_BODY_MAX_BYTES as LIMIT;

    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let client = ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
    assert!(client.tether_extensions().attached_http_bodies);
    let peer = HttpPeer::start().await.unwrap();

    let over = client.request(get(&peer.url(&format!("/large?bytes={}", LIMIT + 1)))).await;
    let error = over.unwrap_err();
    assert!(matches!(error, HttpError::Body(_)), "{error:?}");
    assert_eq!(
        error.to_string(),
        "failed to read http/request response body: the body exceeds the 33554432-byte limit of \
         a buffered response; send the request with `streamResponse: true` to receive it in frames"
    );
    let whole = client.request(get(&peer.url(&format!("/large?bytes={LIMIT}")))).await.unwrap();
    assert_eq!(whole.body_base64.0, tether_testkit::http_peer::large_body(LIMIT));
}
