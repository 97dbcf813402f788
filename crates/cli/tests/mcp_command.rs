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

/// `tether mcp … tools | head -1`: a reader that goes away ends the command quietly, as a
/// program killed by SIGPIPE (exit 141, nothing on stderr), after it has ended its server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_the_listing_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut command = tokio::process::Command::new(tether_binary().unwrap());
    command.args(["mcp", "--local", "--stdio", &stdio_command(), "tools"]);
    command.stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped()).kill_on_drop(true);
    // Spawned, not `output()`, which would make stdout a pipe of its own.
    let child = command.spawn().unwrap();
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("finished")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!((output.status.code(), stderr.as_ref()), (Some(141), ""));
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
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.trim_end().ends_with("; set TETHER_MCP_TOKEN, or pass --http-token-file FILE"),
        "{stderr}"
    );
}

/// The executor's token is `--token-file`, as for `tether exec` (the MCP server's is
/// `--http-token-file`); flags that do not apply to the server kind given are refused, not
/// ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executors_token_and_flags_that_do_not_apply() {
    let dir = std::env::temp_dir().join(format!("tether-mcp-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "executor-token\n").unwrap();
    let token = token.to_str().unwrap();
    let auth = ["--ws-auth", "capability-token", "--ws-token-file", token];
    let server = ServerProcess::start_with(Target::Tether, &auth).await.unwrap();
    let stdio = stdio_command();
    let url = server.url.as_str();

    let output =
        tether_mcp(&["--url", url, "--token-file", token, "--stdio", &stdio, "tools"], None).await;
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).lines().any(|l| l.starts_with("echo\t")));

    let output = tether_mcp(&["--url", url, "--stdio", &stdio, "tools"], None).await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr
            .trim_end()
            .ends_with("; the server wants a token: pass --token-file FILE or set TETHER_TOKEN"),
        "{stderr}"
    );

    for (flag, value) in [("--header", "X-A=b"), ("--http-token-file", token)] {
        let output = tether_mcp(&["--local", "--stdio", &stdio, flag, value, "tools"], None).await;
        // 1, never 2, which says the tool reported an error.
        assert_eq!(output.status.code(), Some(1), "{flag}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.starts_with(&format!(
                "error: the argument '--stdio <COMMAND_LINE>' cannot be used with '{flag} "
            )),
            "{stderr}"
        );
    }
    let output =
        tether_mcp(&["--local", "--http", "http://127.0.0.1:9/mcp", "-e", "A=1", "tools"], None)
            .await;
    assert_eq!(output.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(&dir);
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
    assert!(
        stderr.trim_end().ends_with("; install it on this machine, or give its full path there"),
        "{stderr}"
    );
    // A program that may not be run (a directory) is told apart from a missing one.
    let refused = tether_mcp(&["--local", "--stdio", "/", "tools"], None).await;
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr
            .trim_end()
            .ends_with("; make it executable on this machine, or name the program that runs it"),
        "{stderr}"
    );

    // Nothing listens on port 9 (discard) here.
    let absent = ["--local", "--http", "http://127.0.0.1:9/mcp?key=secret", "tools"];
    let unreachable = tether_mcp(&absent, None).await;
    assert_eq!(unreachable.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert!(stderr.starts_with("tether mcp: the MCP server cannot be reached: "), "{stderr}");
    assert!(
        stderr.trim_end().ends_with(
            "; check that it serves http://127.0.0.1:9/mcp and that this machine can reach it"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("secret"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
