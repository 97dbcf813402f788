//! The HTTP suite, run on [`LocalHttpClient`]: requests made from this process.
//!
//! The scenarios (`tether_testkit::suites::http`) take the client under test as an argument;
//! the client crate's tests run the same ones through Tether and the reference.

use tether_engine::http::{HttpClient, HttpError, LocalHttpClient};
use tether_testkit::HttpPeer;
use tether_testkit::scenarios;
use tether_testkit::suites::http::{self as shared, concat, drain, get};

scenarios!(shared::every_scenario, on local, |scenario| {
    let peer = HttpPeer::start().await.unwrap();
    scenario(&LocalHttpClient::new(), &peer).await
});

/// (Here only: the remote client streams the requests it buffers.) A buffered body stops at its limit with an error that says how to get it instead; the same
/// body streams whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_body_past_its_limit_is_refused_with_the_way_out() {
    let (http, peer) = (LocalHttpClient::new(), HttpPeer::start().await.unwrap());
    let over = 32 * 1024 * 1024 + 1;
    let url = peer.url(&format!("/large?bytes={over}"));
    let error = http.request(get(&url)).await.unwrap_err();
    assert!(matches!(error, HttpError::Body(_)), "{error:?}");
    assert_eq!(
        error.to_string(),
        "failed to read http/request response body: the body exceeds the 33554432-byte limit of \
         a buffered response; send the request with `streamResponse: true` to receive it in frames"
    );
    let (head, body) = http.request_streamed(get(&url)).await.unwrap();
    assert_eq!(head.status, 200);
    let (chunks, failure) = drain(body).await;
    assert_eq!((concat(&chunks).len(), failure), (over, None));
    // The client is still usable.
    let small = http.request(get(&peer.url("/large?bytes=10"))).await.unwrap();
    assert_eq!(small.body_base64.0.len(), 10);
}
