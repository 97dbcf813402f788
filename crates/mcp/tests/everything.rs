//! The MCP reference server from npm (`@modelcontextprotocol/server-everything`), over stdio
//! and Streamable HTTP, placed here or on an executor (Tether's or the reference's): the same
//! handshake, tools, results and progress notifications everywhere.

use std::time::Duration;

use serde_json::json;
use tether_mcp::{McpClient, McpClientOptions, McpServerConfig};
use tether_testkit::McpEverything;

mod common;
use common::{Placement, arguments, collect, place, progress, text};

everywhere!(stdio_server, http_server);

async fn stdio_server(placement: Placement) {
    let config = common::stdio(McpEverything::stdio_argv().unwrap());
    exercise(placement, &config).await;
}

async fn http_server(placement: Placement) {
    let server = McpEverything::start().await.unwrap();
    exercise(placement, &common::http(&server.url)).await;
}

/// Handshake, tool list, a plain call, and a call that reports progress as it goes (over HTTP,
/// on the POST's SSE stream).
async fn exercise(placement: Placement, config: &McpServerConfig) {
    let placed = place(placement).await;
    let client =
        McpClient::connect(&placed.environment, config, McpClientOptions::default()).await.unwrap();
    let info = client.server_info().unwrap();
    assert!(info.capabilities.tools.is_some(), "{info:?}");

    let tools = client.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    for expected in ["echo", "get-sum", "trigger-long-running-operation"] {
        assert!(names.contains(&expected), "{names:?}");
    }

    let echoed = client.call_tool("echo", arguments(json!({"message": "hé, there"}))).await;
    assert_eq!(text(&echoed.unwrap()), "Echo: hé, there");
    let sum = client.call_tool("get-sum", arguments(json!({"a": 2, "b": 40}))).await.unwrap();
    assert!(text(&sum).contains("42"), "{}", text(&sum));

    let mut notifications = client.subscribe();
    let long = arguments(json!({"duration": 0.3, "steps": 3}));
    let result = client.call_tool("trigger-long-running-operation", long).await.unwrap();
    assert!(text(&result).contains("completed"), "{}", text(&result));
    let seen =
        collect(&mut notifications, Duration::from_secs(5), |seen| progress(seen).len() == 3).await;
    assert_eq!(progress(&seen), [1.0, 2.0, 3.0]);

    client.close().await;
}
