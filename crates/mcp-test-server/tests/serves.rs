//! Starts the built server and speaks raw MCP to it, so the fixture other crates' tests rely on
//! is itself known to answer, to hand out sessions, and to forget them on request.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_tether-mcp-test-server");
const STARTUP: Duration = Duration::from_secs(30);

/// The server in HTTP mode; killed when dropped.
struct HttpServer {
    /// `http://127.0.0.1:<port>/mcp`
    url: String,
    http: reqwest::Client,
    _child: Child,
}

impl HttpServer {
    async fn start(token: Option<&str>) -> anyhow::Result<Self> {
        let mut command = Command::new(BIN);
        command
            .args(["http", "--listen", "127.0.0.1:0"])
            .env_remove("TETHER_MCP_TEST_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if let Some(token) = token {
            command.env("TETHER_MCP_TEST_TOKEN", token);
        }
        let mut child = command.spawn().context("cannot start the server")?;
        let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
        let line = tokio::time::timeout(STARTUP, lines.next_line())
            .await
            .context("the server did not listen in time")??
            .context("the server exited before listening")?;
        let Some(url) = line.strip_prefix("listening ") else {
            bail!("unexpected first line {line:?}");
        };
        assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"), "{url}");
        // The proxy settings of the environment must not capture loopback traffic.
        let http = reqwest::Client::builder().no_proxy().build()?;
        Ok(Self { url: url.to_owned(), http, _child: child })
    }

    fn control(&self, path: &str) -> String {
        format!("{}/control/{path}", self.url.strip_suffix("/mcp").expect("url ends in /mcp"))
    }

    async fn stats(&self) -> anyhow::Result<Value> {
        let body =
            self.http.get(self.control("stats")).send().await?.error_for_status()?.text().await?;
        Ok(serde_json::from_str(&body)?)
    }

    /// POSTs one JSON-RPC message to `/mcp` as a Streamable HTTP client would.
    async fn post(
        &self,
        session: Option<&str>,
        message: &Value,
    ) -> anyhow::Result<reqwest::Response> {
        let mut request = self
            .http
            .post(&self.url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .body(message.to_string());
        if let Some(session) = session {
            request = request
                .header("Mcp-Session-Id", session)
                .header("MCP-Protocol-Version", "2025-11-25");
        }
        Ok(request.send().await?)
    }
}

fn initialize_request() -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": { "name": "serves-test", "version": "0" }
        }
    })
}

/// The JSON-RPC messages in an SSE body, skipping priming events with empty data.
fn sse_messages(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .filter(|data| !data.is_empty())
        .map(|data| serde_json::from_str(data).expect("SSE data is JSON"))
        .collect()
}

#[tokio::test]
async fn http_sessions_are_issued_and_forgotten() -> anyhow::Result<()> {
    let server = HttpServer::start(None).await?;

    let response = server.post(None, &initialize_request()).await?;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"].to_str()?.starts_with("text/event-stream"),
        "stateful POST answers stream"
    );
    let session = response.headers()["mcp-session-id"].to_str()?.to_owned();
    let messages = sse_messages(&response.text().await?);
    assert_eq!(messages.last().context("no response")?["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(messages.last().unwrap()["result"]["serverInfo"]["name"], "tether-mcp-test-server");

    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    assert_eq!(server.post(Some(&session), &initialized).await?.status(), 202);

    let echo = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "echo", "arguments": { "message": "hi" } }
    });
    let response = server.post(Some(&session), &echo).await?;
    assert_eq!(response.status(), 200);
    let result = &sse_messages(&response.text().await?).pop().context("no response")?["result"];
    assert_eq!(result["content"][0]["text"], "hi");
    assert_eq!(result["structuredContent"], json!({ "echo": "hi" }));

    let count = json!({
        "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": { "name": "count_calls", "arguments": {} }
    });
    let response = server.post(Some(&session), &count).await?;
    let result = &sse_messages(&response.text().await?).pop().context("no response")?["result"];
    assert_eq!(result["content"][0]["text"], "1");

    let forgotten = server.http.post(server.control("forget-sessions")).send().await?;
    assert_eq!(forgotten.status(), 200);
    assert_eq!(forgotten.text().await?, "1");

    let list = json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/list" });
    assert_eq!(server.post(Some(&session), &list).await?.status(), 404);

    let stats = server.stats().await?;
    assert_eq!(
        stats,
        json!({ "initializes": 1, "posts": 5, "deletes": 0, "gets": 0, "authorizationSeen": false,
                "countCalls": 1 })
    );
    Ok(())
}

#[tokio::test]
async fn http_token_is_required_when_configured() -> anyhow::Result<()> {
    let server = HttpServer::start(Some("sesame")).await?;

    let response = server.post(None, &initialize_request()).await?;
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["www-authenticate"], "Bearer realm=\"test\"");

    let response = server
        .http
        .post(&server.url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("Authorization", "Bearer sesame")
        .body(initialize_request().to_string())
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("mcp-session-id"));

    let stats = server.stats().await?;
    assert_eq!(stats["posts"], 2);
    assert_eq!(stats["initializes"], 1);
    assert_eq!(stats["authorizationSeen"], true);
    Ok(())
}

#[tokio::test]
async fn stdio_answers_initialize() -> anyhow::Result<()> {
    let mut child = Command::new(BIN)
        .arg("stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start the server")?;
    let mut stdin = child.stdin.take().context("no stdin")?;
    let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();

    stdin.write_all(format!("{}\n", initialize_request()).as_bytes()).await?;
    stdin.flush().await?;
    let line = tokio::time::timeout(STARTUP, lines.next_line())
        .await
        .context("no answer in time")??
        .context("the server closed stdout")?;
    assert!(line.contains("\"serverInfo\""), "{line}");
    let response: Value = serde_json::from_str(&line)?;
    assert_eq!(response["id"], 1);
    assert_eq!(response["result"]["serverInfo"]["name"], "tether-mcp-test-server");
    Ok(())
}
