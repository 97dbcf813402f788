//! What the MCP client logs: one warning per HTTP send that got no response, saying which call
//! failed and how — and never a token, a header value, a body, a query or a full URL. Secrets
//! are planted in every place they could leak from, and the captured log is searched for them.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::json;
use tether_client::{ClientOptions, Environment, ExecServerClient};
use tether_mcp::{HttpServerConfig, McpClient, McpServerConfig};
use tether_testkit::{McpTestServer, ServerProcess, Target};

mod common;
use common::{arguments, text};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn take(&self) -> String {
        String::from_utf8(std::mem::take(&mut *self.0.lock().unwrap())).unwrap()
    }
}

const FAILED_SEND: &str = "streamable HTTP send to an MCP server failed";

/// One test (the log is global to this binary): a failing server, then a working one, each
/// reached from here and from an executor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_that_fail_are_logged_once_each_and_nothing_secret_is() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_env_filter("debug,rmcp=warn,hyper_util=info,reqwest=info,h2=info")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let session = ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };

    for environment in [Environment::local(), Environment::remote(session.clone())] {
        // Nobody listens: every attempt at the handshake fails to connect.
        let unreachable = McpServerConfig::Http(HttpServerConfig {
            url: format!(
                "http://127.0.0.1:{closed_port}/mcp/tenant-PLANTED-PATH-123?key=PLANTED-QUERY"
            ),
            bearer_token: Some("PLANTED-TOKEN".into()),
            headers: vec![("x-api-key".into(), "PLANTED-HEADER".into())],
        });
        let error = McpClient::connect(&environment, &unreachable, Default::default()).await;
        let error = error.err().unwrap();
        assert!(error.is_no_response(), "{error}");
        assert!(!error.to_string().contains("PLANTED"), "the error itself: {error}");

        let log = captured.take();
        let failures: Vec<&str> = log.lines().filter(|line| line.contains(FAILED_SEND)).collect();
        assert_eq!(failures.len(), 3, "one line per attempt (three attempts):\n{log}");
        for line in &failures {
            for expected in [
                "WARN",
                "http_method=\"POST\"",
                "endpoint_scheme=http",
                "endpoint_host=127.0.0.1:",
                "endpoint_path=/mcp/:id",
                "endpoint_has_query=true",
                "mcp_method=\"initialize\"",
                "has_session_id=false",
                "has_authorization=true",
                "error_is_connect=true",
            ] {
                assert!(line.contains(expected), "{expected} missing from {line}");
            }
        }
        assert!(!log.contains("PLANTED"), "a secret reached the log:\n{log}");
    }

    // A working server, with a token, a header and a body to keep quiet about: nothing about
    // them is logged, and no send failure either.
    let mcp = McpTestServer::start(Some("PLANTED-TOKEN-2")).await.unwrap();
    for environment in [Environment::local(), Environment::remote(session.clone())] {
        let config = McpServerConfig::Http(HttpServerConfig {
            url: mcp.url.clone(),
            bearer_token: Some("PLANTED-TOKEN-2".into()),
            headers: vec![("x-api-key".into(), "PLANTED-HEADER-2".into())],
        });
        let client = McpClient::connect(&environment, &config, Default::default()).await.unwrap();
        let echoed =
            client.call_tool("echo", arguments(json!({"message": "PLANTED-BODY"}))).await.unwrap();
        assert_eq!(text(&echoed), "PLANTED-BODY");
        client.close().await;
    }
    let log = captured.take();
    assert!(!log.contains(FAILED_SEND), "{log}");
    assert!(!log.contains("PLANTED"), "a secret reached the log:\n{log}");
}
