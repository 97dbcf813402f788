//! An MCP server built with rmcp's own server side (`tether-mcp-test-server`), which can forget
//! its sessions and count what it received: notifications, session expiry, the no-blind-retry
//! rule and authorization, placed here or on an executor.

use std::time::Duration;

use serde_json::json;
use tether_mcp::{
    HttpServerConfig, McpClient, McpClientOptions, McpError, McpNotification, McpServerConfig,
};
use tether_testkit::{FaultProxy, McpTestServer, wait};

mod common;
use common::{Placement, arguments, collect, place, progress, text};

everywhere!(
    stdio_progress_logs_and_structured_results,
    http_progress_and_log_notifications,
    a_forgotten_session_is_initialized_again_and_the_call_replayed_once,
    a_tool_call_that_got_no_response_is_not_sent_again,
    credentials_are_sent_and_their_absence_is_an_authorization_error,
);

fn log_lines(notifications: &[McpNotification]) -> Vec<String> {
    notifications
        .iter()
        .filter_map(|n| match n {
            #[allow(deprecated)]
            McpNotification::Log(log) => log.data.as_str().map(str::to_owned),
            _ => None,
        })
        .collect()
}

async fn stdio_progress_logs_and_structured_results(placement: Placement) {
    let placed = place(placement).await;
    let config = common::stdio(McpTestServer::stdio_argv().unwrap());
    let client = McpClient::connect(&placed.environment, &config, McpClientOptions::default())
        .await
        .unwrap();
    let echoed = client.call_tool("echo", arguments(json!({"message": "over stdio"}))).await;
    let echoed = echoed.unwrap();
    assert_eq!(text(&echoed), "over stdio");
    assert_eq!(echoed.structured_content, Some(json!({"echo": "over stdio"})));

    let mut notifications = client.subscribe();
    let result = client.call_tool("progress", arguments(json!({"steps": 3}))).await.unwrap();
    assert_eq!(text(&result), "done 3");
    let seen = collect(&mut notifications, Duration::from_secs(5), |seen| {
        progress(seen).len() == 3 && log_lines(seen).len() == 3
    })
    .await;
    assert_eq!(progress(&seen), [1.0, 2.0, 3.0]);
    assert_eq!(log_lines(&seen), ["step 1", "step 2", "step 3"]);
    client.close().await;
}

/// Over HTTP, progress rides the POST's SSE answer; log messages come on the session's own
/// event stream (the GET rmcp opens after the handshake).
async fn http_progress_and_log_notifications(placement: Placement) {
    let placed = place(placement).await;
    let server = McpTestServer::start(None).await.unwrap();
    let client =
        McpClient::connect(&placed.environment, &common::http(&server.url), Default::default())
            .await
            .unwrap();
    let mut notifications = client.subscribe();
    let result = client.call_tool("progress", arguments(json!({"steps": 4}))).await.unwrap();
    assert_eq!(text(&result), "done 4");
    let seen = collect(&mut notifications, Duration::from_secs(10), |seen| {
        progress(seen).len() == 4 && log_lines(seen).len() == 4
    })
    .await;
    assert_eq!(progress(&seen), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(log_lines(&seen), ["step 1", "step 2", "step 3", "step 4"]);
    let stats = server.stats().await.unwrap();
    assert!(stats.gets >= 1, "the session's event stream was opened: {stats:?}");
    client.close().await;
}

async fn a_forgotten_session_is_initialized_again_and_the_call_replayed_once(placement: Placement) {
    let placed = place(placement).await;
    let server = McpTestServer::start(None).await.unwrap();
    let client =
        McpClient::connect(&placed.environment, &common::http(&server.url), Default::default())
            .await
            .unwrap();
    let first = client.call_tool("count_calls", None).await.unwrap();
    assert_eq!(text(&first), "1");

    assert_eq!(server.forget_sessions().await.unwrap(), 1);
    // The server answers 404 to the old session: one new handshake, the call sent once more,
    // and run once (the 404 proves the first attempt never ran).
    let second = client.call_tool("count_calls", None).await.unwrap();
    assert_eq!(text(&second), "2");
    assert_eq!(server.stats().await.unwrap().initializes, 2);
    let third = client.call_tool("count_calls", None).await.unwrap();
    assert_eq!(text(&third), "3");
    assert_eq!(server.stats().await.unwrap().initializes, 2, "no more handshakes");
    client.close().await;
    assert_eq!(server.stats().await.unwrap().deletes, 1, "closing ends the session");
}

/// The server runs the call, but its answer never arrives (the connection breaks first): the
/// caller hears that no response came, and the call is not sent again behind its back. A
/// listing, which changes nothing, is.
async fn a_tool_call_that_got_no_response_is_not_sent_again(placement: Placement) {
    let placed = place(placement).await;
    let server = McpTestServer::start(None).await.unwrap();
    let upstream = server.url.trim_start_matches("http://").split('/').next().unwrap().to_owned();
    let proxy = FaultProxy::start(&upstream).await.unwrap();
    let url = format!("{}/mcp", proxy.url.replace("ws://", "http://"));
    let client = McpClient::connect(&placed.environment, &common::http(&url), Default::default())
        .await
        .unwrap();
    assert_eq!(text(&client.call_tool("count_calls", None).await.unwrap()), "1");

    proxy.freeze_downstream_including_new();
    let call = tokio::spawn(async move {
        let result = client.call_tool("count_calls", None).await;
        (client, result)
    });
    // The call has run once the server counts it; its answer is behind the freeze (bytes held
    // since the freeze would not show it: the end of the first answer's stream may be among
    // them).
    let ran = || async { server.stats().await.is_ok_and(|stats| stats.count_calls == 2) };
    wait::until_async("the server ran the second call", wait::DEADLINE, ran).await;
    proxy.cut();
    let (client, result) = call.await.unwrap();
    let error = result.unwrap_err();
    assert!(error.is_no_response(), "{error}");

    assert_eq!(text(&client.call_tool("count_calls", None).await.unwrap()), "3", "ran once");
    assert!(client.list_tools().await.unwrap().iter().any(|tool| tool.name == "count_calls"));
    client.close().await;
}

async fn credentials_are_sent_and_their_absence_is_an_authorization_error(placement: Placement) {
    let placed = place(placement).await;
    let server = McpTestServer::start(Some("s3cret-token")).await.unwrap();
    let refused =
        McpClient::connect(&placed.environment, &common::http(&server.url), Default::default())
            .await;
    let error = refused.err().unwrap();
    assert!(
        matches!(&error, McpError::Unauthorized { challenge } if challenge.contains("Bearer")),
        "{error}"
    );

    let config = McpServerConfig::Http(HttpServerConfig {
        url: server.url.clone(),
        bearer_token: Some("s3cret-token".into()),
        headers: vec![("x-client".into(), "tether-tests".into())],
    });
    let client =
        McpClient::connect(&placed.environment, &config, Default::default()).await.unwrap();
    let added = client.call_tool("add", arguments(json!({"a": 2, "b": 3}))).await.unwrap();
    assert_eq!(text(&added), "5");
    assert!(server.stats().await.unwrap().authorization_seen);
    client.close().await;
}
