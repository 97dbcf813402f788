//! The HTTP scenarios, written against [`HttpClient`] so that they run unchanged on the engine
//! in-process and on a server through the client, each with a real HTTP peer on loopback
//! ([`HttpPeer`]).
//!
//! Setup is the peer's routes; the exercise is one or a few requests as a harness would make
//! them; the asserts are on what the peer received and what came back, errors by their text,
//! which is the same wherever the request was made.

use std::time::Duration;

use crate::HttpPeer;
use crate::http_peer::{encode, large_body, text_body};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tether_engine::http::{
    HTTP_BODY_DELTA_MAX_BYTES, HttpBodyError, HttpBodyStream, HttpClient, HttpError,
};
use tether_protocol::ByteChunk;
use tether_protocol::http::{HttpRequestParams, HttpRequestResponse};

/// Every scenario of this suite, once, with the targets it does not run on and why; runners
/// make their tests from it ([`scenarios!`](crate::scenarios)).
#[doc(hidden)]
#[macro_export]
macro_rules! __every_http_scenario {
    ($($runner:tt)*) => {
        $crate::scenarios!(@each [$crate::suites::http] [
            buffered_requests_send_what_was_asked_and_return_everything,
            statuses_and_headers_come_back_as_sent,
            redirects_are_followed_or_returned,
            invalid_requests_are_refused_before_anything_is_sent,
            timeouts_fail_the_request,
            a_body_that_breaks_off_fails_the_request_or_the_stream,
            gzip_and_zstd_bodies_arrive_decoded,
            streamed_bodies_follow_their_head_in_order,
            large_streamed_bodies_come_whole_in_bounded_chunks,
            concurrent_streams_keep_their_bodies_apart,
            a_stream_dropped_early_leaves_the_client_usable,
        ] $($runner)*);
    };
}
pub use crate::__every_http_scenario as every_scenario;

/// A request as a harness writes it: JSON with every default left out, `extra` members added.
fn request(method: &str, url: &str, extra: Value) -> HttpRequestParams {
    let mut params = json!({"method": method, "url": url, "requestId": "r"});
    params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    crate::params::strict(params)
}

pub fn get(url: &str) -> HttpRequestParams {
    request("GET", url, json!({}))
}

/// Every chunk of a body, and the error it ended with, if any. Nothing may follow an error.
pub async fn drain(mut body: HttpBodyStream) -> (Vec<Bytes>, Option<String>) {
    let mut chunks = Vec::new();
    while let Some(chunk) = next_chunk(&mut body).await {
        match chunk {
            Ok(chunk) => chunks.push(chunk),
            Err(error) => {
                assert!(next_chunk(&mut body).await.is_none(), "nothing after an error");
                return (chunks, Some(error.to_string()));
            }
        }
    }
    (chunks, None)
}

async fn next_chunk(body: &mut HttpBodyStream) -> Option<Result<Bytes, HttpBodyError>> {
    tokio::time::timeout(Duration::from_secs(20), body.next()).await.expect("a chunk in time")
}

pub fn concat(chunks: &[Bytes]) -> Vec<u8> {
    chunks.iter().flat_map(|chunk| chunk.to_vec()).collect()
}

fn header<'a>(response: &'a HttpRequestResponse, name: &str) -> Vec<&'a str> {
    response.headers.iter().filter(|h| h.name == name).map(|h| h.value.as_str()).collect()
}

// ---------------------------------------------------------------------------------------------
// Buffered

pub async fn buffered_requests_send_what_was_asked_and_return_everything(
    http: &dyn HttpClient,
    peer: &HttpPeer,
) {
    let headers = json!([{"name": "x-twice", "value": "1"}, {"name": "x-twice", "value": "2"}]);
    let body = ByteChunk::from(&b"payload"[..]);
    let extra = json!({"headers": headers, "bodyBase64": body, "timeoutMs": 10_000});

    let response = http.request(request("POST", &peer.url("/echo?q=1"), extra)).await.unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(header(&response, "content-type"), ["application/json"]);
    let echo: Value = serde_json::from_slice(&response.body_base64.0).unwrap();
    assert_eq!(
        (&echo["method"], &echo["path"], &echo["query"]),
        (&json!("POST"), &json!("/echo"), &json!("q=1"))
    );
    assert_eq!(ByteChunk::from_base64(echo["bodyBase64"].as_str().unwrap()).unwrap(), body);
    let sent: Vec<&Value> =
        echo["headers"].as_array().unwrap().iter().filter(|pair| pair[0] == "x-twice").collect();
    assert_eq!(
        sent,
        [&json!(["x-twice", "1"]), &json!(["x-twice", "2"])],
        "repeats kept, in order"
    );
}

pub async fn statuses_and_headers_come_back_as_sent(http: &dyn HttpClient, peer: &HttpPeer) {
    let missing = http.request(get(&peer.url("/status/404"))).await.unwrap();
    assert_eq!((missing.status, &missing.body_base64.0[..]), (404, &b"status 404"[..]));
    assert_eq!(header(&missing, "x-peer"), ["status"]);

    let cookies = http.request(get(&peer.url("/cookies"))).await.unwrap();
    assert_eq!(header(&cookies, "set-cookie"), ["a=1; Path=/", "b=2; Path=/"]);
    assert!(header(&cookies, "x-not-text").is_empty(), "values that are not text are left out");
}

pub async fn redirects_are_followed_or_returned(http: &dyn HttpClient, peer: &HttpPeer) {
    let followed = http.request(get(&peer.url("/redirect/3"))).await.unwrap();
    assert_eq!((followed.status, &followed.body_base64.0[..]), (200, &b"landed"[..]));

    let before = peer.requests().len();
    let stop = json!({"redirectPolicy": "stop"});
    let stopped = http.request(request("GET", &peer.url("/redirect/2"), stop)).await.unwrap();
    assert_eq!(stopped.status, 302);
    assert_eq!(header(&stopped, "location"), ["/redirect/1"]);
    assert_eq!(peer.requests()[before..], ["GET /redirect/2"], "the target was not fetched");
}

pub async fn invalid_requests_are_refused_before_anything_is_sent(
    http: &dyn HttpClient,
    peer: &HttpPeer,
) {
    let refused = [
        (get("ftp://127.0.0.1/x"), "http/request only supports http and https URLs, got ftp"),
        (get("not a url"), "http/request url is invalid: relative URL without a base"),
        (request("BAD METHOD", &peer.url("/"), json!({})), "http/request method is invalid: "),
    ];
    for (params, message) in refused {
        let buffered = http.request(params.clone()).await.unwrap_err();
        assert!(matches!(buffered, HttpError::Invalid(_)), "{buffered:?}");
        assert!(buffered.to_string().starts_with(message), "{buffered}");
        let streamed = http.request_streamed(params).await.unwrap_err();
        assert!(streamed.to_string().starts_with(message), "{streamed}");
    }
    assert_eq!(peer.connections(), 0, "nothing left the executor");
}

pub async fn timeouts_fail_the_request(http: &dyn HttpClient, peer: &HttpPeer) {
    let slow = request("GET", &peer.url("/slow-head?ms=3000"), json!({"timeoutMs": 100}));

    let error = http.request(slow.clone()).await.unwrap_err();
    assert!(matches!(error, HttpError::Failed(_)), "{error:?}");
    assert!(error.to_string().starts_with("http/request failed: "), "{error}");
    let error = http.request_streamed(slow).await.unwrap_err();
    assert!(error.to_string().starts_with("http/request failed: "), "{error}");
}

pub async fn a_body_that_breaks_off_fails_the_request_or_the_stream(
    http: &dyn HttpClient,
    peer: &HttpPeer,
) {
    let error = http.request(get(&peer.url("/fail"))).await.unwrap_err();
    assert!(matches!(error, HttpError::Body(_)), "{error:?}");
    assert!(error.to_string().starts_with("failed to read http/request response body: "));

    let (head, body) = http.request_streamed(get(&peer.url("/fail"))).await.unwrap();
    assert_eq!(head.status, 200);
    let (chunks, failure) = drain(body).await;
    assert_eq!(concat(&chunks), b"partial");
    let failure = failure.expect("the stream fails: a broken body is not a whole one");
    assert_eq!(
        failure,
        error.to_string().trim_start_matches("failed to read http/request response body: ")
    );
}

/// gzip and zstd bodies arrive decoded, buffered or streamed, without the headers that
/// described the encoded bytes; a deflate body arrives as the peer sent it.
pub async fn gzip_and_zstd_bodies_arrive_decoded(http: &dyn HttpClient, peer: &HttpPeer) {
    let text = text_body(10_000);
    let gzip = http.request(get(&peer.url("/encoded/gzip"))).await.unwrap();
    assert!(gzip.body_base64.0 == text, "the decoded text");
    assert_eq!(
        (header(&gzip, "content-encoding"), header(&gzip, "content-length")),
        (vec![], vec![])
    );

    let (head, body) =
        http.request_streamed(get(&peer.url("/encoded/zstd?parts=2"))).await.unwrap();
    assert_eq!(header(&head, "content-encoding"), Vec::<&str>::new());
    let (chunks, failure) = drain(body).await;
    assert_eq!((concat(&chunks) == text, failure), (true, None), "the decoded text");

    let deflate = http.request(get(&peer.url("/encoded/deflate"))).await.unwrap();
    assert_eq!(header(&deflate, "content-encoding"), ["deflate"]);
    assert!(deflate.body_base64.0 == encode("deflate", &text), "the bytes as sent");
}

// ---------------------------------------------------------------------------------------------
// Streamed

pub async fn streamed_bodies_follow_their_head_in_order(http: &dyn HttpClient, peer: &HttpPeer) {
    let (head, body) = http.request_streamed(get(&peer.url("/chunks"))).await.unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(header(&head, "content-type"), ["text/plain"]);
    assert!(head.body_base64.is_empty(), "the body follows on the stream");

    let (chunks, failure) = drain(body).await;
    assert_eq!((concat(&chunks), failure), (b"one\ntwo\nthree\n".to_vec(), None));
    assert!(chunks.len() >= 3, "chunks arrive as the peer sends them: {chunks:?}");
}

pub async fn large_streamed_bodies_come_whole_in_bounded_chunks(
    http: &dyn HttpClient,
    peer: &HttpPeer,
) {
    let len = 3 * HTTP_BODY_DELTA_MAX_BYTES + 17;
    let (_, body) =
        http.request_streamed(get(&peer.url(&format!("/large?bytes={len}")))).await.unwrap();

    let (chunks, failure) = drain(body).await;
    assert_eq!(failure, None);
    assert!(chunks.iter().all(|c| !c.is_empty() && c.len() <= HTTP_BODY_DELTA_MAX_BYTES));
    assert!(concat(&chunks) == large_body(len), "every byte, in order");
}

/// Streams in flight at once keep their bodies apart, whatever request ids the caller gave
/// them (the same one here).
pub async fn concurrent_streams_keep_their_bodies_apart(http: &dyn HttpClient, peer: &HttpPeer) {
    let small = 100_000;
    let open = |path: String| http.request_streamed(get(&peer.url(&path)));
    let (a, b, c) = tokio::join!(
        open("/chunks".into()),
        open(format!("/large?bytes={small}")),
        open("/slow-body?ms=200".into()),
    );

    let (a, b, c) = tokio::join!(drain(a.unwrap().1), drain(b.unwrap().1), drain(c.unwrap().1));
    assert_eq!((concat(&a.0), a.1), (b"one\ntwo\nthree\n".to_vec(), None));
    assert_eq!((concat(&b.0) == large_body(small), b.1), (true, None));
    assert_eq!((concat(&c.0), c.1), (b"startend".to_vec(), None));
}

pub async fn a_stream_dropped_early_leaves_the_client_usable(
    http: &dyn HttpClient,
    peer: &HttpPeer,
) {
    let (_, mut body) = http.request_streamed(get(&peer.url("/slow-body?ms=300"))).await.unwrap();
    assert_eq!(body.next().await.unwrap().unwrap(), "start");
    drop(body);

    let (_, body) = http.request_streamed(get(&peer.url("/chunks"))).await.unwrap();
    assert_eq!(concat(&drain(body).await.0), b"one\ntwo\nthree\n");
    // The abandoned stream's late end reaches nobody: the peer is done with it (sent its
    // end, or saw its connection go) by the time the next request goes.
    let over = || peer.slow_bodies_over() == 1;
    crate::wait::until("the peer done with the abandoned body", crate::wait::DEADLINE, over).await;
    let buffered = http.request(get(&peer.url("/status/200"))).await.unwrap();
    assert_eq!(buffered.status, 200);
}
