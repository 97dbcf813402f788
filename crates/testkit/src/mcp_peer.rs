//! A real, independent MCP server for tests: `@modelcontextprotocol/server-everything` from npm
//! (installed by the test command), serving Streamable HTTP on a loopback port.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::server::workspace_root;

/// A running `server-everything` in Streamable HTTP mode; killed when dropped.
pub struct McpEverything {
    /// `http://127.0.0.1:<port>/mcp`
    pub url: String,
    _child: Child,
}

impl McpEverything {
    pub async fn start() -> anyhow::Result<Self> {
        let root = workspace_root().join("tests/reference");
        let entry = root.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        if !entry.is_file() {
            bail!(
                "{} is not installed: run `scripts/test`, or `npm install --prefix tests/reference`",
                entry.display()
            );
        }
        let mut child = Command::new("node")
            .arg("-r")
            .arg(root.join("loopback-listen.cjs"))
            .arg(entry)
            .arg("streamableHttp")
            .env("PORT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start node")?;
        let mut lines = BufReader::new(child.stderr.take().context("no stderr")?).lines();
        let port = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(port) = line.strip_prefix("tether-test-listening ") {
                    return Ok::<_, anyhow::Error>(port.trim().parse::<u16>()?);
                }
            }
            bail!("the MCP server exited before listening")
        })
        .await
        .context("the MCP server did not listen within 30 s")??;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self { url: format!("http://127.0.0.1:{port}/mcp"), _child: child })
    }
}
