//! Helpers the MCP tests share: where the server is placed, and what it said.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use tether_client::{ClientOptions, Environment, ExecServerClient};
use tether_mcp::rmcp::model::CallToolResult;
use tether_mcp::{HttpServerConfig, McpNotification, McpServerConfig, StdioServerCommand};
use tether_testkit::{ServerProcess, Target};
use tokio::sync::broadcast;

/// Where the MCP server runs: here, or through an exec-server.
#[derive(Debug, Clone, Copy)]
pub enum Placement {
    Local,
    Remote(Target),
}

/// An environment for a placement, and what keeps it alive.
pub struct Placed {
    pub environment: Environment,
    pub server: Option<ServerProcess>,
}

pub async fn place(placement: Placement) -> Placed {
    match placement {
        Placement::Local => Placed { environment: Environment::local(), server: None },
        Placement::Remote(target) => {
            let server = ServerProcess::start(target).await.unwrap();
            let client =
                ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
            Placed { environment: Environment::remote(client), server: Some(server) }
        }
    }
}

/// Runs a scenario in every placement: here, through Tether, through the reference.
#[macro_export]
macro_rules! everywhere {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                use $crate::common::Placement;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn local() {
                    super::$scenario(Placement::Local).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn tether() {
                    super::$scenario(Placement::Remote(tether_testkit::Target::Tether)).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn reference() {
                    super::$scenario(Placement::Remote(tether_testkit::Target::Reference)).await
                }
            }
        )*
    };
}

pub fn stdio(argv: Vec<String>) -> McpServerConfig {
    let mut argv = argv.into_iter();
    McpServerConfig::Stdio(StdioServerCommand {
        program: argv.next().unwrap(),
        args: argv.collect(),
        env: Default::default(),
        cwd: PathBuf::from("/tmp"),
    })
}

pub fn http(url: &str) -> McpServerConfig {
    McpServerConfig::Http(HttpServerConfig {
        url: url.to_owned(),
        bearer_token: None,
        headers: Vec::new(),
    })
}

/// The text of a tool's result, its text contents joined.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|content| content.as_text().map(|text| text.text.as_str()))
        .collect::<Vec<_>>()
        .join("")
}

pub fn arguments(value: serde_json::Value) -> Option<serde_json::Map<String, serde_json::Value>> {
    match value {
        serde_json::Value::Object(map) => Some(map),
        _ => panic!("arguments must be an object"),
    }
}

/// Notifications received within `wait` until `done` says enough.
pub async fn collect(
    notifications: &mut broadcast::Receiver<McpNotification>,
    wait: Duration,
    mut done: impl FnMut(&[McpNotification]) -> bool,
) -> Vec<McpNotification> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    while !done(&seen) {
        match tokio::time::timeout_at(deadline, notifications.recv()).await {
            Ok(Ok(notification)) => seen.push(notification),
            Ok(Err(error)) => panic!("notifications: {error}"),
            Err(_) => break,
        }
    }
    seen
}

/// The progress values among `notifications`, in order.
pub fn progress(notifications: &[McpNotification]) -> Vec<f64> {
    notifications
        .iter()
        .filter_map(|n| match n {
            McpNotification::Progress(p) => Some(p.progress),
            _ => None,
        })
        .collect()
}
