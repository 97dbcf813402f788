//! MCP sessions through an executor keep working when the connection to the executor drops:
//! a stdio server is an exec process, which the client catches up (same process, no lost
//! line); an HTTP server's session lives on the MCP server, and only requests in flight at the
//! drop are lost.

use serde_json::json;
use tether_client::{ClientOptions, Environment, ExecServerClient};
use tether_mcp::{McpClient, McpClientOptions};
use tether_testkit::{FaultProxy, McpTestServer, ServerProcess, Target, against_both};

mod common;
use common::{arguments, text};

against_both!(a_stdio_server_rides_through_a_drop, an_http_session_rides_through_a_drop);

async fn behind_a_proxy(target: Target) -> (ServerProcess, FaultProxy, Environment) {
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    (server, proxy, Environment::remote(client))
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
    let (_server, proxy, environment) = behind_a_proxy(target).await;
    let mcp = McpTestServer::start(None).await.unwrap();
    let client =
        McpClient::connect(&environment, &common::http(&mcp.url), McpClientOptions::default())
            .await
            .unwrap();
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
