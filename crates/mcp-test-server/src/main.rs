//! `tether-mcp-test-server`: an MCP server built only on the official rmcp SDK's server side.
//!
//! Tests of Tether's MCP client run against it so that the client is checked against an
//! implementation it shares no code with: a misreading of the protocol that is baked into the
//! client would otherwise be mirrored by a server written alongside it. The server offers a few
//! deterministic tools (see [`tools`]) and, in HTTP mode, control endpoints that let a test see
//! and disturb what the transport did (see [`control`]).

mod control;
mod http;
mod stats;
mod tools;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use rmcp::ServiceExt;
use tracing_subscriber::EnvFilter;

use crate::stats::Stats;
use crate::tools::TestServer;

#[derive(Parser)]
#[command(name = "tether-mcp-test-server", version, about = "MCP server for testing MCP clients")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over stdin/stdout as newline-delimited JSON.
    Stdio,
    /// Serve MCP over Streamable HTTP at `/mcp`, printing `listening <url>` once bound.
    Http {
        /// Address to bind. Only loopback addresses are accepted: this server has no business
        /// being reachable from elsewhere.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Logs go to stderr: stdout carries the MCP stream on stdio and the bound URL on HTTP.
    // Quiet by default so that a test which never drains stderr cannot fill the pipe.
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("TETHER_LOG").unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let stats = Arc::new(Stats::default());
    let result = runtime.block_on(async {
        match cli.command {
            Command::Stdio => serve_stdio(stats).await,
            Command::Http { listen } => http::serve(listen, stats).await,
        }
    });
    // A stdio server whose peer went away may still have a thread blocked reading stdin; do not
    // wait for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    result
}

/// Serves one MCP session on the process's standard streams until the client closes stdin.
async fn serve_stdio(stats: Arc<Stats>) -> anyhow::Result<()> {
    let service = TestServer::new(stats)
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP session did not initialize")?;
    service.waiting().await.context("the MCP session failed")?;
    Ok(())
}
