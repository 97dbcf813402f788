//! MCP sessions through an executor keep working when the connection to the executor drops:
//! a stdio server is an exec process, which the client catches up (same process, no lost
//! line); an HTTP server's session lives on the MCP server, and only requests in flight at the
//! drop are lost — and those fail, rather than wait for an answer that will never come.

use std::time::Duration;

use serde_json::json;
use tether_client::{ClientOptions, Environment, ExecServerClient};
use tether_mcp::{McpClient, McpClientOptions, McpNotification};
use tether_testkit::{FaultProxy, McpTestServer, ServerProcess, Target, against_both};

mod common;
use common::{arguments, text};

against_both!(
    a_stdio_server_rides_through_a_drop,
    an_http_session_rides_through_a_drop,
    an_http_answer_lost_in_a_drop_fails_its_call
);

async fn behind_a_proxy(target: Target) -> (ServerProcess, FaultProxy, Environment) {
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    (server, proxy, Environment::remote(client))
}

/// An MCP session with the HTTP test server, through an exec-server behind a proxy.
async fn http_session_behind_a_proxy(
    target: Target,
) -> (ServerProcess, FaultProxy, McpTestServer, McpClient) {
    let (server, proxy, environment) = behind_a_proxy(target).await;
    let mcp = McpTestServer::start(None).await.unwrap();
    let client =
        McpClient::connect(&environment, &common::http(&mcp.url), McpClientOptions::default())
            .await
            .unwrap();
    (server, proxy, mcp, client)
}

async fn a_stdio_server_rides_through_a_drop(target: Target) {
    let (_server, proxy, environment) = behind_a_proxy(target).await;
    let config = common::stdio(McpTestServer::stdio_argv().unwrap());
    let client =
        McpClient::connect(&environment, &config, McpClientOptions::default()).await.unwrap();
    assert_eq!(text(&client.call_tool("count_calls", None).await.unwrap()), "1");

    // A call in flight across the drop: its answer is written while the client is away and
    // arrives with the catch-up. The cut comes once the exec-server has answered something
    // sent after the freeze — the write of the call to the MCP server's stdin.
    proxy.freeze_downstream();
    let slow = client.call_tool("slow", arguments(json!({"ms": 600})));
    let cut = async {
        proxy.wait_held_bytes(1).await.unwrap();
        proxy.cut();
    };
    let (slow, ()) = tokio::join!(slow, cut);
    assert_eq!(text(&slow.unwrap()), "slept 600");

    // The same process: its counter went on.
    assert_eq!(text(&client.call_tool("count_calls", None).await.unwrap()), "2");
    proxy.cut();
    assert!(client.list_tools().await.unwrap().len() >= 5);
    client.close().await;
}

async fn an_http_session_rides_through_a_drop(target: Target) {
    let (_server, proxy, mcp, client) = http_session_behind_a_proxy(target).await;
    assert_eq!(text(&client.call_tool("count_calls", None).await.unwrap()), "1");
    for round in 2..=4 {
        proxy.cut();
        // A request sent before the client noticed the drop gets no answer; a listing is sent
        // again (a tool call would not be), and goes out once the session is back.
        assert!(client.list_tools().await.unwrap().len() >= 5);
        let counted = client.call_tool("count_calls", None).await.unwrap();
        assert_eq!(text(&counted), round.to_string());
    }
    assert_eq!(mcp.stats().await.unwrap().initializes, 1, "one MCP session throughout");
    client.close().await;
}

/// At least what the answer of a `held` call takes on the way to the client: its SSE event
/// alone (the JSON-RPC result) is over 100 bytes, and it travels in a `bodyDelta` message of
/// about as many again. An SSE keep-alive comment, the only other thing a session's streams
/// could carry meanwhile, comes every 15 s and is less.
const HELD_ANSWER_BYTES: usize = 150;

/// Long enough for rmcp to resume the call's stream (after the server's 3 s retry interval)
/// and find nothing there; a call that neither answers nor fails within it never will.
const LOST_ANSWER_DEADLINE: Duration = Duration::from_secs(60);

/// The call's stream opened (its progress notification came), then its answer was sent by the
/// MCP server and lost in a drop. rmcp resumes the stream; the server, done with the call,
/// answers the resume with an empty stream. The call must fail as one that got no response —
/// not wait for ever while rmcp resumes from the same event again and again — and the session
/// goes on.
async fn an_http_answer_lost_in_a_drop_fails_its_call(target: Target) {
    let (_server, proxy, mcp, client) = http_session_behind_a_proxy(target).await;
    let mut notifications = client.subscribe();
    let call = client.call_tool("held", None);
    let lose_the_answer = async {
        while !matches!(notifications.recv().await.unwrap(), McpNotification::Progress(_)) {}
        proxy.freeze_downstream();
        mcp.release().await.unwrap();
        proxy.wait_held_bytes(HELD_ANSWER_BYTES).await.unwrap();
        proxy.cut();
    };
    let (called, ()) =
        tokio::time::timeout(LOST_ANSWER_DEADLINE, async { tokio::join!(call, lose_the_answer) })
            .await
            .expect("the call neither answered nor failed");
    let error = called.unwrap_err();
    assert!(error.is_no_response(), "{error}");
    assert!(client.list_tools().await.unwrap().len() >= 5);
    client.close().await;
}
