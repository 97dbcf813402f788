//! A resume (`GET` with `Last-Event-ID`) of a request's stream the MCP server no longer has: a
//! real rmcp server answers it with an empty stream, and rmcp's client would resume from the
//! same event again for ever, the request neither answered nor failed. The adapter refuses the
//! second resume from where an empty one began, which ends rmcp's reconnecting; the request
//! then fails as one whose response was lost, which a listing is sent again for.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use serde_json::json;
use tether_engine::http::LocalHttpClient;
use tether_mcp::HttpClientAdapter;
use tether_testkit::McpTestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_the_server_ended_empty_is_not_made_again() {
    let server = McpTestServer::start(None).await.unwrap();
    let adapter = HttpClientAdapter::new(Arc::new(LocalHttpClient::new()), Vec::new());
    let uri: Arc<str> = server.url.as_str().into();
    let initialize: ClientJsonRpcMessage = serde_json::from_value(json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "resume-test", "version": "0"}
        }
    }))
    .unwrap();
    let answer =
        adapter.post_message(uri.clone(), initialize, None, None, HashMap::new()).await.unwrap();
    let StreamableHttpPostResponse::Sse(_, Some(session)) = answer else {
        panic!("no session from initialize: {answer:?}");
    };
    let session: Option<Arc<str>> = Some(session.into());

    // A request the server has finished with (here: one it never had): nothing to resume.
    let resume = |event: &str| {
        adapter.get_stream(
            uri.clone(),
            session.clone(),
            Some(event.to_owned()),
            None,
            HashMap::new(),
        )
    };
    let first = resume("7/1").await.expect("the server answers a resume");
    assert_eq!(first.collect::<Vec<_>>().await.len(), 0, "an empty stream");

    // From the same event again: refused as a server with no stream to give, which rmcp's
    // reconnecting stops at.
    let again = resume("7/1").await.map(|_| ()).unwrap_err();
    assert!(matches!(again, StreamableHttpError::ServerDoesNotSupportSse), "{again:?}");

    // Any other event is still resumed.
    assert!(resume("8/1").await.is_ok());
}
