//! `http/request` over the wire: buffered and streamed bodies, validation, `valueEnvVar`,
//! timeouts, redirects, broken bodies, compressed bodies and stream ids — each scenario run
//! against Tether and against the reference, with a real HTTP peer ([`HttpPeer`]) on loopback.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_testkit::client::{b64decode, b64encode};
use tether_testkit::http_peer::{BROTLI_BODY, encode, large_body, text_body};
use tether_testkit::process_stats::{peak_rss_kib, serving_pid};
use tether_testkit::{HttpPeer, RpcClient, ServerProcess, Target, against_both};

against_both!(
    header_values_from_executor_variables_are_advertised,
    buffered_requests_send_what_was_asked_and_return_everything,
    methods_are_sent_verbatim,
    statuses_and_response_headers_come_back_as_sent,
    streamed_bodies_follow_their_response_in_order,
    large_bodies_arrive_whole_in_bounded_deltas,
    invalid_requests_are_refused_before_anything_is_sent,
    protected_executor_variables_are_refused_in_any_case,
    unreachable_peers_fail_the_request,
    timeouts_are_optional_and_cover_the_body,
    redirects_are_followed_or_returned,
    a_body_that_breaks_off_fails_the_request_or_the_stream,
    an_active_stream_id_cannot_be_reused_until_its_stream_ends,
    stream_ids_belong_to_their_connection,
    fragments_are_not_sent,
    gzip_and_zstd_are_asked_for_unless_the_caller_names_a_coding,
    gzip_and_zstd_bodies_arrive_decoded_and_other_codings_untouched,
    damaged_compressed_bodies_fail_the_request_or_the_stream,
);

/// The executor environment the servers run with: a credential a header may use, an empty
/// variable, and one of the executor's own secrets that a header must never carry.
const SERVER_ENV: &[(&str, &str)] = &[
    ("TETHER_TEST_TOKEN", "tok-123"),
    ("TETHER_TEST_EMPTY", ""),
    ("AWS_SECRET_ACCESS_KEY", "must-not-leak"),
];

const BODY_DELTA: &str = "http/request/bodyDelta";

async fn started(target: Target) -> (ServerProcess, RpcClient, HttpPeer) {
    let server = ServerProcess::start_with_env(target, &[], SERVER_ENV).await.unwrap();
    let (client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let peer = HttpPeer::start().await.unwrap();
    (server, client, peer)
}

/// A GET of `url` with request id `r`, with `extra` members added or replaced.
fn request(url: &str, extra: Value) -> Value {
    let mut params = json!({"method": "GET", "url": url, "requestId": "r"});
    params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    params
}

fn body_of(result: &Value) -> Vec<u8> {
    b64decode(&result["bodyBase64"])
}

/// The echo of what reached the peer.
fn echo_of(result: &Value) -> Value {
    serde_json::from_slice(&body_of(result)).unwrap()
}

/// The response headers named `name`, in order.
fn header_values(result: &Value, name: &str) -> Vec<String> {
    result["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["name"] == name)
        .map(|h| h["value"].as_str().unwrap().to_owned())
        .collect()
}

/// The `[name, value]` pairs the peer received, without the ones the HTTP client adds itself.
fn sent_headers(echo: &Value) -> Vec<(String, String)> {
    let mut headers = received_headers(echo);
    headers.retain(|(name, _)| !matches!(name.as_str(), "accept" | "host"));
    headers
}

/// Every `[name, value]` pair the peer received, in the order it received them.
fn received_headers(echo: &Value) -> Vec<(String, String)> {
    echo["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| (pair[0].as_str().unwrap().to_owned(), pair[1].as_str().unwrap().to_owned()))
        .collect()
}

/// The response's headers as `(name, value)`, in order, with the value of `date` (which
/// changes every second) left out.
fn response_headers(result: &Value) -> Vec<(String, String)> {
    result["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let name = h["name"].as_str().unwrap().to_owned();
            let value = if name == "date" { "…" } else { h["value"].as_str().unwrap() };
            (name, value.to_owned())
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect()
}

/// Every body delta of stream `request_id` up to and including its terminal frame, checked
/// for the invariants every stream keeps: seqs 1..=n without gaps, one terminal frame (the
/// last, with an empty delta), `error` always present.
async fn stream_frames(client: &mut RpcClient, request_id: &str) -> Vec<Value> {
    let mut frames = Vec::new();
    loop {
        let notification = client.notification().await.unwrap();
        assert_eq!(notification["method"], BODY_DELTA, "{notification}");
        let params = notification["params"].clone();
        if params["requestId"] != request_id {
            continue;
        }
        let done = params["done"] == true;
        frames.push(params);
        if done {
            break;
        }
    }
    let seqs: Vec<u64> = frames.iter().map(|f| f["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=frames.len() as u64).collect::<Vec<_>>(), "contiguous from 1");
    let terminal = frames.last().unwrap();
    assert_eq!(terminal["deltaBase64"], "", "the terminal frame carries no bytes");
    for frame in &frames {
        assert!(frame.as_object().unwrap().contains_key("error"), "error always sent: {frame}");
    }
    for frame in &frames[..frames.len() - 1] {
        assert_eq!((&frame["done"], &frame["error"]), (&json!(false), &Value::Null), "{frame}");
    }
    frames
}

fn streamed_bytes(frames: &[Value]) -> Vec<u8> {
    frames.iter().flat_map(|f| b64decode(&f["deltaBase64"])).collect()
}

async fn header_values_from_executor_variables_are_advertised(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (_client, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    assert_eq!(init["environmentInfo"]["capabilities"]["httpHeaderEnvVars"], true, "{init}");
}

async fn buffered_requests_send_what_was_asked_and_return_everything(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    let params = request(
        &peer.url("/echo/a/b?x=1&y=%20"),
        json!({
            "method": "POST",
            "headers": [
                {"name": "X-A", "value": "1"},
                {"name": "x-b", "value": "2"},
                {"name": "x-a", "value": "3"},
                {"name": "Authorization", "value": "Bearer ", "valueEnvVar": "TETHER_TEST_TOKEN"},
            ],
            "bodyBase64": b64encode(b"request-body"),
        }),
    );
    let result = client.ok("http/request", params).await.unwrap();

    assert_eq!(result["status"], 200);
    assert_eq!(header_values(&result, "content-type"), ["application/json"]);
    let echo = echo_of(&result);
    assert_eq!((&echo["method"], &echo["path"]), (&json!("POST"), &json!("/echo/a/b")));
    assert_eq!(echo["query"], "x=1&y=%20");
    assert_eq!(b64decode(&echo["bodyBase64"]), b"request-body");
    // Names lower-cased, repeats kept (grouped under the first occurrence, as the HTTP library
    // keeps them), the variable's value appended to the prefix, the body's length added.
    let expected: Vec<(String, String)> = [
        ("x-a", "1"),
        ("x-a", "3"),
        ("x-b", "2"),
        ("authorization", "Bearer tok-123"),
        ("accept-encoding", "zstd,gzip"),
        ("content-length", "12"),
    ]
    .iter()
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect();
    assert_eq!(sent_headers(&echo), expected);
}

async fn methods_are_sent_verbatim(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    for method in ["get", "FOO", "DELETE"] {
        let params = request(&peer.url("/echo/m"), json!({"method": method}));
        let result = client.ok("http/request", params).await.unwrap();
        assert_eq!(echo_of(&result)["method"], method);
    }
}

async fn statuses_and_response_headers_come_back_as_sent(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    let created = client.ok("http/request", request(&peer.url("/status/201"), json!({}))).await;
    let created = created.unwrap();
    assert_eq!(created["status"], 201);
    assert_eq!(body_of(&created), b"status 201");
    assert_eq!(header_values(&created, "x-peer"), ["status"]);
    let missing = client.ok("http/request", request(&peer.url("/status/404"), json!({}))).await;
    assert_eq!(missing.unwrap()["status"], 404, "a non-2xx status is a result, not an error");

    let cookies = client.ok("http/request", request(&peer.url("/cookies"), json!({}))).await;
    let cookies = cookies.unwrap();
    assert_eq!(header_values(&cookies, "set-cookie"), ["a=1; Path=/", "b=2; Path=/"]);
    assert_eq!(header_values(&cookies, "x-plain"), ["plain"]);
    assert!(
        header_values(&cookies, "x-not-text").is_empty(),
        "a value that is not text is left out"
    );
    for header in cookies["headers"].as_array().unwrap() {
        let name = header["name"].as_str().unwrap();
        assert_eq!(name, name.to_ascii_lowercase());
        assert_eq!(header.as_object().unwrap().len(), 2, "name and value only: {header}");
    }
}

async fn streamed_bodies_follow_their_response_in_order(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    let params = request(&peer.url("/chunks"), json!({"requestId": "s1", "streamResponse": true}));
    let id = client.send_request("http/request", params).await.unwrap();

    // Exercise: the very first message is the response, before any delta.
    let first = client.next_message().await.unwrap();
    assert_eq!(first["id"], id, "the response comes first: {first}");
    let result = &first["result"];
    assert_eq!(result["status"], 200);
    assert_eq!(result["bodyBase64"], "");
    assert_eq!(header_values(result, "content-type"), ["text/plain"]);

    let frames = stream_frames(&mut client, "s1").await;
    assert_eq!(streamed_bytes(&frames), b"one\ntwo\nthree\n");
    assert!(frames.len() >= 3, "chunks 100 ms apart are not held back: {frames:?}");
    assert_eq!(frames.last().unwrap()["error"], Value::Null);
}

async fn large_bodies_arrive_whole_in_bounded_deltas(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    let len = 3 * 1024 * 1024 + 7;
    let url = peer.url(&format!("/large?bytes={len}"));

    let params = request(&url, json!({"requestId": "big", "streamResponse": true}));
    let result = client.ok("http/request", params).await.unwrap();
    assert_eq!(header_values(&result, "content-length"), [len.to_string()]);
    let frames = stream_frames(&mut client, "big").await;
    for frame in &frames {
        assert!(b64decode(&frame["deltaBase64"]).len() <= 1024 * 1024, "≤ 1 MiB per delta");
    }
    assert!(streamed_bytes(&frames) == large_body(len), "the streamed body is the peer's");

    let buffered = client.ok("http/request", request(&url, json!({}))).await.unwrap();
    assert!(body_of(&buffered) == large_body(len), "the buffered body is the peer's");
}

async fn invalid_requests_are_refused_before_anything_is_sent(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    let url = peer.url("/echo");
    let header = |name: &str, value: &str| json!({"headers": [{"name": name, "value": value}]});
    let from_env = |var: &str| json!({"headers": [{"name": "Authorization", "value": "Bearer ", "valueEnvVar": var}]});
    let cases = [
        (
            request(&url, json!({"method": "G ET"})),
            "http/request method is invalid: invalid HTTP method",
        ),
        (
            request(&url, json!({"method": ""})),
            "http/request method is invalid: invalid HTTP method",
        ),
        (request("nope", json!({})), "http/request url is invalid: relative URL without a base"),
        (request("http://", json!({})), "http/request url is invalid: empty host"),
        (
            request("file:///etc/passwd", json!({})),
            "http/request only supports http and https URLs, got file",
        ),
        (
            request("ftp://127.0.0.1/", json!({})),
            "http/request only supports http and https URLs, got ftp",
        ),
        (
            request(&url, header("bad name", "x")),
            "http/request header name is invalid: invalid HTTP header name",
        ),
        (
            request(&url, header("X-Bad", "a\nb")),
            "http/request header value is invalid for X-Bad: failed to parse header value",
        ),
        (
            request(&url, from_env("TETHER_TEST_UNSET")),
            "http/request header Authorization requires executor environment variable TETHER_TEST_UNSET",
        ),
        (
            request(&url, from_env("TETHER_TEST_EMPTY")),
            "http/request header Authorization requires a non-empty executor environment variable TETHER_TEST_EMPTY",
        ),
        (
            request(&url, json!({"redirectPolicy": "bogus"})),
            "unknown variant `bogus`, expected `follow` or `stop`",
        ),
        (json!({"method": "GET", "url": url}), "missing field `requestId`"),
    ];
    for (params, message) in cases {
        for stream in [false, true] {
            let mut params = params.clone();
            params["streamResponse"] = json!(stream);
            let error = client.err("http/request", params.clone()).await.unwrap();
            assert_eq!((error.code, error.message.as_str()), (-32602, message), "{params}");
        }
    }
    assert_eq!(peer.connections(), 0, "nothing reached the peer: {:?}", peer.requests());
}

async fn protected_executor_variables_are_refused_in_any_case(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    for var in ["AWS_SECRET_ACCESS_KEY", "aws_secret_access_key", "OpenAI_API_Key", "CODEX_API_KEY"]
    {
        let params = request(
            &peer.url("/echo"),
            json!({"headers": [{"name": "Authorization", "value": "Bearer ", "valueEnvVar": var}]}),
        );
        let error = client.err("http/request", params).await.unwrap();
        let message = format!(
            "http/request header Authorization cannot use executor environment variable {var}"
        );
        assert_eq!((error.code, error.message), (-32602, message));
    }
    assert_eq!(peer.connections(), 0, "nothing reached the peer: {:?}", peer.requests());
}

async fn unreachable_peers_fail_the_request(target: Target) {
    let (_server, mut client, _peer) = started(target).await;
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://user:secret@127.0.0.1:{port}/x?y=1#frag");
    for stream in [false, true] {
        let params = request(&url, json!({"streamResponse": stream}));
        let error = client.err("http/request", params).await.unwrap();
        // The HTTP client's text: the URL without its credentials, fragment and all.
        let message = format!(
            "http/request failed: error sending request for url (http://127.0.0.1:{port}/x?y=1#frag)"
        );
        assert_eq!((error.code, error.message), (-32603, message));
    }
}

async fn timeouts_are_optional_and_cover_the_body(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    let slow_head = peer.url("/slow-head?ms=1200");

    // No timeout (absent or null) waits as long as the peer takes.
    for timeout in [json!({}), json!({"timeoutMs": null})] {
        let started = Instant::now();
        let result = client.ok("http/request", request(&slow_head, timeout)).await.unwrap();
        assert_eq!(body_of(&result), b"slow");
        assert!(started.elapsed() >= Duration::from_millis(1150));
    }

    // So does a timeout too long to ever run out.
    let params = request(&peer.url("/echo"), json!({"timeoutMs": u64::MAX}));
    assert_eq!(client.ok("http/request", params).await.unwrap()["status"], 200);

    // A timeout before the head fails the request.
    let started = Instant::now();
    let error =
        client.err("http/request", request(&slow_head, json!({"timeoutMs": 200}))).await.unwrap();
    assert_eq!(error.code, -32603);
    assert!(error.message.starts_with("http/request failed: "), "{}", error.message);
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(190) && elapsed < Duration::from_millis(1000),
        "{elapsed:?}"
    );

    // A zero timeout has run out before anything can be sent.
    let error =
        client.err("http/request", request(&slow_head, json!({"timeoutMs": 0}))).await.unwrap();
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32603, "http/request failed: route-aware request timed out")
    );

    // The timeout covers the body too: buffered, the request fails...
    let slow_body = peer.url("/slow-body?ms=1500");
    let started = Instant::now();
    let error =
        client.err("http/request", request(&slow_body, json!({"timeoutMs": 500}))).await.unwrap();
    let reference = "failed to read http/request response body: error decoding response body";
    // Tether adds what happened to the reference's words, which read like a malformed body.
    let expected = match target {
        Target::Reference => reference.to_owned(),
        Target::Tether => format!(
            "{reference} (timed out: the request's timeoutMs ran out while its body was read)"
        ),
    };
    assert_eq!((error.code, error.message.as_str()), (-32603, expected.as_str()));
    assert!(started.elapsed() < Duration::from_millis(1400), "{:?}", started.elapsed());

    // ...streamed, the stream ends with the error.
    let params = request(&slow_body, json!({"timeoutMs": 500, "streamResponse": true}));
    let result = client.ok("http/request", params).await.unwrap();
    assert_eq!(result["status"], 200);
    let frames = stream_frames(&mut client, "r").await;
    assert_eq!(streamed_bytes(&frames), b"start");
    let streamed = expected.trim_start_matches("failed to read http/request response body: ");
    assert_eq!(frames.last().unwrap()["error"], streamed);
}

async fn redirects_are_followed_or_returned(target: Target) {
    let (_server, mut client, peer) = started(target).await;

    // Followed by default, to the end of the chain.
    let result = client.ok("http/request", request(&peer.url("/redirect/3"), json!({}))).await;
    let result = result.unwrap();
    assert_eq!((result["status"].clone(), body_of(&result)), (json!(200), b"landed".to_vec()));
    let chain = ["GET /redirect/3", "GET /redirect/2", "GET /redirect/1", "GET /redirect/0"];
    assert_eq!(peer.requests(), chain);

    // Stopped: the redirect itself is the result and its target is never fetched.
    let params = request(&peer.url("/redirect/3"), json!({"redirectPolicy": "stop"}));
    let stopped = client.ok("http/request", params).await.unwrap();
    assert_eq!(stopped["status"], 302);
    assert_eq!(header_values(&stopped, "location"), ["/redirect/2"]);
    assert_eq!(body_of(&stopped), b"redirecting");
    assert_eq!(peer.requests()[4..], ["GET /redirect/3"]);

    // Ten redirects are followed; the eleventh is one too many.
    let ten = client.ok("http/request", request(&peer.url("/redirect/10"), json!({}))).await;
    assert_eq!(body_of(&ten.unwrap()), b"landed");
    let error = client.err("http/request", request(&peer.url("/redirect/11"), json!({}))).await;
    let error = error.unwrap();
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32603, "http/request failed: too many redirects")
    );

    // A redirect may only lead to http or https.
    let params = request(&peer.url("/redirect-to?location=ftp://127.0.0.1/x"), json!({}));
    let error = client.err("http/request", params).await.unwrap();
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32603, "http/request failed: redirect target uses unsupported URL scheme: ftp")
    );

    // A 303 turns a POST into a GET without its body, and names where it came from.
    let from = peer.url("/redirect-to?status=303&location=/echo/after");
    let params = request(
        &from,
        json!({"method": "POST", "bodyBase64": b64encode(b"payload"),
               "headers": [{"name": "authorization", "value": "same-origin"}]}),
    );
    let echo = echo_of(&client.ok("http/request", params).await.unwrap());
    assert_eq!((&echo["method"], &echo["path"]), (&json!("GET"), &json!("/echo/after")));
    assert_eq!(echo["bodyBase64"], "");
    let sent = sent_headers(&echo);
    assert!(sent.contains(&("authorization".into(), "same-origin".into())), "{sent:?}");
    assert!(sent.contains(&("referer".into(), from.clone())), "{sent:?}");
    assert!(!sent.iter().any(|(name, _)| name == "content-length"), "{sent:?}");
}

async fn a_body_that_breaks_off_fails_the_request_or_the_stream(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    let error = client.err("http/request", request(&peer.url("/fail"), json!({}))).await.unwrap();
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32603, "failed to read http/request response body: error decoding response body")
    );

    let params =
        request(&peer.url("/fail"), json!({"requestId": "broken", "streamResponse": true}));
    let result = client.ok("http/request", params).await.unwrap();
    assert_eq!(result["status"], 200);
    let frames = stream_frames(&mut client, "broken").await;
    assert_eq!(streamed_bytes(&frames), b"partial");
    assert_eq!(frames.last().unwrap()["error"], "error decoding response body");
}

/// How Tether refuses a buffered body past its 32 MiB ceiling, saying how to get it instead.
const BUFFERED_LIMIT_EXCEEDED: &str = "failed to read http/request response body: the body \
    exceeds the 33554432-byte limit of a buffered response; send the request with \
    `streamResponse: true` to receive it in frames";

/// A buffered answer has a ceiling in Tether (the reference buffers bodies of any size, so an
/// endless one grows it until it is killed): past 32 MiB the request fails, saying how to get
/// the body, and the connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_body_past_its_limit_fails_with_the_way_out() {
    let (_server, mut client, peer) = started(Target::Tether).await;
    let url = peer.url(&format!("/large?bytes={}", 32 * 1024 * 1024 + 1));
    let error = client.err("http/request", request(&url, json!({}))).await.unwrap();
    assert_eq!((error.code, error.message.as_str()), (-32603, BUFFERED_LIMIT_EXCEEDED));
    let small = client.ok("http/request", request(&peer.url("/large?bytes=3"), json!({})));
    assert_eq!(small.await.unwrap()["status"], 200);
}

async fn an_active_stream_id_cannot_be_reused_until_its_stream_ends(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    let slow = peer.url("/slow-body?ms=800");
    let streamed = |url: &str| request(url, json!({"requestId": "dup", "streamResponse": true}));
    client.ok("http/request", streamed(&slow)).await.unwrap();

    let refused = "http/request streamResponse requestId `dup` is already active";
    let error = client.err("http/request", streamed(&peer.url("/echo"))).await.unwrap();
    assert_eq!((error.code, error.message.as_str()), (-32602, refused));
    // The id is checked first: even a request that is invalid otherwise gets this error.
    let mut bad_method = streamed(&peer.url("/echo"));
    bad_method["method"] = json!("G ET");
    let error = client.err("http/request", bad_method).await.unwrap();
    assert_eq!((error.code, error.message.as_str()), (-32602, refused));
    // Buffered requests neither check nor reserve the id; other ids are free.
    let buffered = request(&peer.url("/echo"), json!({"requestId": "dup"}));
    client.ok("http/request", buffered).await.unwrap();
    let other = request(&peer.url("/echo"), json!({"requestId": "other", "streamResponse": true}));
    client.ok("http/request", other).await.unwrap();

    // Once the first stream has ended, the id can be used again.
    let frames = stream_frames(&mut client, "dup").await;
    assert_eq!(streamed_bytes(&frames), b"startend");
    client.ok("http/request", streamed(&peer.url("/echo"))).await.unwrap();
    let again = stream_frames(&mut client, "dup").await;
    assert_eq!(
        echo_of(&json!({"bodyBase64": b64encode(&streamed_bytes(&again))}))["path"],
        "/echo"
    );
}

async fn stream_ids_belong_to_their_connection(target: Target) {
    let (server, mut first, peer) = started(target).await;
    let (mut second, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let params =
        request(&peer.url("/slow-body?ms=300"), json!({"requestId": "s", "streamResponse": true}));
    first.ok("http/request", params.clone()).await.unwrap();
    second.ok("http/request", params).await.unwrap();
    for client in [&mut first, &mut second] {
        assert_eq!(streamed_bytes(&stream_frames(client, "s").await), b"startend");
    }
}

async fn fragments_are_not_sent(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    let result = client.ok("http/request", request(&peer.url("/echo/page?q=1#secret"), json!({})));
    let echo = echo_of(&result.await.unwrap());
    assert_eq!((&echo["path"], &echo["query"]), (&json!("/echo/page"), &json!("q=1")));
    assert_eq!(peer.requests(), ["GET /echo/page?q=1"]);
}

/// What reaches the peer, header for header: `accept-encoding: zstd,gzip` unless the caller
/// sent an `Accept-Encoding` of its own.
async fn gzip_and_zstd_are_asked_for_unless_the_caller_names_a_coding(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    let host = peer.base_url.trim_start_matches("http://");
    let received = |result: Value| received_headers(&echo_of(&result));
    let ask = |headers: Value| request(&peer.url("/echo"), json!({"headers": headers}));

    // No coding named: the executor asks for the two it decodes, after the HTTP client's own
    // `accept`.
    let result = client.ok("http/request", ask(json!([]))).await.unwrap();
    let expected = pairs(&[("accept", "*/*"), ("accept-encoding", "zstd,gzip"), ("host", host)]);
    assert_eq!(received(result), expected);

    // A coding the caller names is sent as it is, in its place, and nothing is added.
    for coding in ["identity", "br"] {
        let result =
            client.ok("http/request", ask(json!([{"name": "Accept-Encoding", "value": coding}])));
        let expected = pairs(&[("accept-encoding", coding), ("accept", "*/*"), ("host", host)]);
        assert_eq!(received(result.await.unwrap()), expected);
    }

    // A range does not stop the executor from asking for compressed bytes.
    let ranged = client.ok("http/request", ask(json!([{"name": "Range", "value": "bytes=0-3"}])));
    let expected = pairs(&[
        ("range", "bytes=0-3"),
        ("accept", "*/*"),
        ("accept-encoding", "zstd,gzip"),
        ("host", host),
    ]);
    assert_eq!(received(ranged.await.unwrap()), expected);
}

/// gzip and zstd bodies arrive decoded, without the headers that described the encoded bytes;
/// deflate and br bodies arrive as the peer sent them, headers and all.
async fn gzip_and_zstd_bodies_arrive_decoded_and_other_codings_untouched(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    let text = text_body(10_000);
    // The coding and the length of the encoded bytes are gone; the HTTP library's header map
    // fills each hole with its last header.
    let decoded_head = pairs(&[
        ("content-type", "text/plain"),
        ("x-before", "1"),
        ("date", "…"),
        ("x-after", "2"),
    ]);

    for coding in ["gzip", "zstd"] {
        let url = peer.url(&format!("/encoded/{coding}"));
        let buffered = client.ok("http/request", request(&url, json!({}))).await.unwrap();
        assert_eq!(response_headers(&buffered), decoded_head, "{coding}");
        assert!(body_of(&buffered) == text, "{coding}: the decoded text");

        // Even when the caller asked for no coding and the peer used one anyway.
        let identity = json!({"headers": [{"name": "Accept-Encoding", "value": "identity"}]});
        let buffered = client.ok("http/request", request(&url, identity)).await.unwrap();
        assert!(body_of(&buffered) == text, "{coding}: decoded though not asked for");

        // Streamed: the same head, the decoded text in deltas — also when the encoded bytes
        // arrive in two parts, chunked.
        let mut chunked_head = decoded_head.clone();
        chunked_head.extend(pairs(&[("transfer-encoding", "chunked")]));
        for (url, head) in [(url.clone(), &decoded_head), (format!("{url}?parts=2"), &chunked_head)]
        {
            let params = request(&url, json!({"requestId": "z", "streamResponse": true}));
            let result = client.ok("http/request", params).await.unwrap();
            assert_eq!(&response_headers(&result), head, "{url}");
            let frames = stream_frames(&mut client, "z").await;
            assert!(streamed_bytes(&frames) == text, "{url}: the decoded text");
            assert_eq!(frames.last().unwrap()["error"], Value::Null);
        }

        // HEAD: no body to decode, and the coding headers are gone all the same.
        let head = client.ok("http/request", request(&url, json!({"method": "HEAD"}))).await;
        let head = head.unwrap();
        assert_eq!(response_headers(&head), decoded_head, "{coding}");
        assert_eq!(body_of(&head), b"");
    }

    // The codings the executor does not decode: the bytes and the head as the peer sent them.
    let deflated = encode("deflate", &text_body(10_000));
    for (coding, bytes) in [("deflate", deflated.as_slice()), ("br", BROTLI_BODY)] {
        let url = peer.url(&format!("/encoded/{coding}"));
        let length = bytes.len().to_string();
        let head = pairs(&[
            ("content-type", "text/plain"),
            ("x-before", "1"),
            ("content-encoding", coding),
            ("x-after", "2"),
            ("content-length", &length),
            ("date", "…"),
        ]);
        let buffered = client.ok("http/request", request(&url, json!({}))).await.unwrap();
        assert_eq!(response_headers(&buffered), head);
        assert!(body_of(&buffered) == bytes, "{coding}: the bytes as the peer sent them");

        let params = request(&url, json!({"requestId": "p", "streamResponse": true}));
        let streamed = client.ok("http/request", params).await.unwrap();
        assert_eq!(response_headers(&streamed), head);
        let frames = stream_frames(&mut client, "p").await;
        assert!(streamed_bytes(&frames) == bytes, "{coding}: the bytes as the peer sent them");
    }
}

async fn damaged_compressed_bodies_fail_the_request_or_the_stream(target: Target) {
    let (_server, mut client, peer) = started(target).await;
    let text = text_body(10_000);
    for coding in ["gzip", "zstd"] {
        for damage in ["corrupt", "truncate"] {
            let url = peer.url(&format!("/encoded/{coding}?damage={damage}"));
            let error = client.err("http/request", request(&url, json!({}))).await.unwrap();
            assert_eq!(
                (error.code, error.message.as_str()),
                (-32603, "failed to read http/request response body: error decoding response body"),
                "{coding} {damage}"
            );

            // Streamed, what decoded before the damage arrives (nothing, when the damage starts
            // the body), then the stream fails.
            let params = request(&url, json!({"requestId": "d", "streamResponse": true}));
            assert_eq!(client.ok("http/request", params).await.unwrap()["status"], 200);
            let frames = stream_frames(&mut client, "d").await;
            let decoded = streamed_bytes(&frames);
            match damage {
                "corrupt" => assert_eq!(frames.len(), 1, "{coding}: only the failure"),
                _ => assert!(text.starts_with(&decoded) && decoded.len() < text.len(), "{coding}"),
            }
            assert_eq!(frames.last().unwrap()["error"], "error decoding response body");
        }
    }
}

/// A small compressed body that decodes to far more than a buffered answer may hold (128 MiB of
/// zeros in 600 KiB of gzip) fails at the buffered limit, as a body that big always does: the
/// decoded bytes count, not the bytes on the wire, and nothing past the limit is decoded, so the
/// server's memory never grows past it. (The reference buffers a decoded body of any size.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_body_that_decodes_past_the_limit_fails_with_the_way_out() {
    let (server, mut client, peer) = started(Target::Tether).await;
    let url = peer.url(&format!("/encoded/gzip?zeros={}", 128 * 1024 * 1024));
    let error = client.err("http/request", request(&url, json!({}))).await.unwrap();
    assert_eq!((error.code, error.message.as_str()), (-32603, BUFFERED_LIMIT_EXCEEDED));
    let serving = serving_pid(server.pid().unwrap());
    let peak_mib = peak_rss_kib(serving).unwrap() / 1024;
    // The limit's 32 MiB and the server's own memory (about 25 MiB), with room to spare; a
    // server that decoded the whole body would have held 128 MiB of it.
    assert!(peak_mib < 96, "the server's memory peaked at {peak_mib} MiB");
}
