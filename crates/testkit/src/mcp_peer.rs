//! Real, independent MCP servers for tests: `@modelcontextprotocol/server-everything` from npm
//! (installed by the test command), and `tether-mcp-test-server`, built on rmcp's own server
//! side, with control endpoints to make it forget sessions and report what it received. Each
//! serves stdio (started by the code under test) or Streamable HTTP on a loopback port.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::server::{tether_binary, workspace_root};

/// A running `server-everything` in Streamable HTTP mode; killed when dropped.
pub struct McpEverything {
    /// `http://127.0.0.1:<port>/mcp`
    pub url: String,
    _child: Child,
}

impl McpEverything {
    /// The command line that serves it over stdio: `node <entry> stdio`.
    pub fn stdio_argv() -> anyhow::Result<Vec<String>> {
        Ok(vec!["node".into(), everything_entry()?.display().to_string(), "stdio".into()])
    }

    pub async fn start() -> anyhow::Result<Self> {
        let root = workspace_root().join("tests/reference");
        let entry = everything_entry()?;
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

fn everything_entry() -> anyhow::Result<std::path::PathBuf> {
    let root = workspace_root().join("tests/reference");
    let entry = root.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !entry.is_file() {
        bail!(
            "{} is not installed: run `scripts/test`, or `npm install --prefix tests/reference`",
            entry.display()
        );
    }
    Ok(entry)
}

/// A running `tether-mcp-test-server` in Streamable HTTP mode; killed when dropped.
pub struct McpTestServer {
    /// `http://127.0.0.1:<port>/mcp`
    pub url: String,
    addr: String,
    _child: Child,
}

/// What a [`McpTestServer`] received, from its `/control/stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McpTestServerStats {
    pub initializes: u64,
    pub posts: u64,
    pub deletes: u64,
    pub gets: u64,
    pub authorization_seen: bool,
    /// Runs of its `count_calls` tool, whatever became of their answers.
    pub count_calls: u64,
}

impl McpTestServer {
    /// The binary, next to `tether` in the build the tests belong to.
    pub fn binary() -> anyhow::Result<std::path::PathBuf> {
        let tether = tether_binary()?;
        let binary = tether.with_file_name("tether-mcp-test-server");
        if !binary.is_file() {
            bail!("{} not found: build the workspace first", binary.display());
        }
        Ok(binary)
    }

    /// The command line that serves it over stdio.
    pub fn stdio_argv() -> anyhow::Result<Vec<String>> {
        Ok(vec![Self::binary()?.display().to_string(), "stdio".into()])
    }

    /// Serves Streamable HTTP; with `token`, every request must carry it as a bearer token.
    pub async fn start(token: Option<&str>) -> anyhow::Result<Self> {
        let mut command = Command::new(Self::binary()?);
        command.arg("http").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
        command.kill_on_drop(true);
        match token {
            Some(token) => command.env("TETHER_MCP_TEST_TOKEN", token),
            None => command.env_remove("TETHER_MCP_TEST_TOKEN"),
        };
        let mut child = command.spawn().context("cannot start tether-mcp-test-server")?;
        let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
        let url = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(url) = line.strip_prefix("listening ") {
                    return Ok::<_, anyhow::Error>(url.trim().to_owned());
                }
            }
            bail!("the MCP test server exited before listening")
        })
        .await
        .context("the MCP test server did not listen within 20 s")??;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let addr = url
            .strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .context("unexpected URL")?
            .to_owned();
        Ok(Self { url, addr, _child: child })
    }

    /// Makes the server forget every session, as a restart would; returns how many it had.
    pub async fn forget_sessions(&self) -> anyhow::Result<usize> {
        let body = self.control("POST", "/control/forget-sessions").await?;
        Ok(body.trim().parse()?)
    }

    /// Lets one `held` tool call answer.
    pub async fn release(&self) -> anyhow::Result<()> {
        self.control("POST", "/control/release").await.map(drop)
    }

    pub async fn stats(&self) -> anyhow::Result<McpTestServerStats> {
        let body = self.control("GET", "/control/stats").await?;
        let stats: serde_json::Value = serde_json::from_str(&body)?;
        let count = |name: &str| stats[name].as_u64().context("missing count");
        Ok(McpTestServerStats {
            initializes: count("initializes")?,
            posts: count("posts")?,
            deletes: count("deletes")?,
            gets: count("gets")?,
            authorization_seen: stats["authorizationSeen"].as_bool().unwrap_or(false),
            count_calls: count("countCalls")?,
        })
    }

    /// One HTTP/1.1 request to a control endpoint; the body of a 200 answer.
    async fn control(&self, method: &str, path: &str) -> anyhow::Result<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(&self.addr).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.addr
        );
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        let (head, body) = response.split_once("\r\n\r\n").context("no HTTP head")?;
        if !head.starts_with("HTTP/1.1 200") {
            bail!("{method} {path}: {}", head.lines().next().unwrap_or_default());
        }
        Ok(body.to_owned())
    }
}
