//! `tether mcp` as a person uses it: list a server's tools, call one, see its progress; a stdio
//! server placed here or on an exec-server, an HTTP server reached from there.

use std::process::Stdio;
use std::time::Duration;

use tether_testkit::server::tether_binary;
use tether_testkit::{McpTestServer, ServerProcess, Target, against_both};

against_both!(stdio_and_http_servers_through_an_exec_server);

/// Runs `tether mcp ARGS…`, with `TETHER_MCP_TOKEN` set to `token` (or unset).
async fn tether_mcp(args: &[&str], token: Option<&str>) -> std::process::Output {
    let mut command = tokio::process::Command::new(tether_binary().unwrap());
    command.arg("mcp").args(args).stdin(Stdio::null()).kill_on_drop(true);
    match token {
        Some(token) => command.env("TETHER_MCP_TOKEN", token),
        None => command.env_remove("TETHER_MCP_TOKEN"),
    };
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("finished")
        .unwrap()
}

fn stdio_command() -> String {
    McpTestServer::stdio_argv().unwrap().join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_stdio_server_lists_its_tools() {
    let output = tether_mcp(&["--local", "--stdio", &stdio_command(), "tools"], None).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    for tool in ["echo", "add", "progress", "count_calls", "slow"] {
        assert!(stdout.lines().any(|line| line.starts_with(&format!("{tool}\t"))), "{stdout}");
    }
    let json = tether_mcp(&["--local", "--stdio", &stdio_command(), "--json", "tools"], None).await;
    let tools: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(tools.as_array().unwrap().iter().any(|tool| tool["name"] == "echo"));
}

async fn stdio_and_http_servers_through_an_exec_server(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let url = server.url.as_str();

    let stdio = stdio_command();
    let args = ["--url", url, "--stdio", &stdio, "call", "progress", "--args", r#"{"steps": 2}"#];
    let output = tether_mcp(&args, None).await;
    assert_eq!(String::from_utf8_lossy(&output.stdout), "done 2\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("[progress] 1/2") && stderr.contains("[progress] 2/2"), "{stderr}");
    assert_eq!(output.status.code(), Some(0));

    let mcp = McpTestServer::start(Some("cli-token")).await.unwrap();
    let http = ["--url", url, "--http", &mcp.url, "call", "add", "--args", r#"{"a": 2, "b": 3}"#];
    let output = tether_mcp(&http, Some("cli-token")).await;
    assert_eq!(String::from_utf8_lossy(&output.stdout), "5\n");
    assert_eq!(output.status.code(), Some(0));

    let refused = tether_mcp(&http, None).await;
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.starts_with("tether mcp: ") && stderr.contains("requires authorization"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mistakes_get_one_clear_line() {
    let stdio = stdio_command();
    let bad_json = ["--local", "--stdio", &stdio, "call", "add", "--args", "{"];
    let output = tether_mcp(&bad_json, None).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--args is not JSON"));

    let unknown = tether_mcp(&["--local", "--stdio", &stdio, "call", "no_such_tool"], None).await;
    assert_ne!(unknown.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(stderr.contains("no_such_tool"), "{stderr}");

    let missing = tether_mcp(&["--local", "--stdio", "/nonexistent/server", "tools"], None).await;
    assert_eq!(missing.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("cannot start the MCP server /nonexistent/server"), "{stderr}");
}
