//! Streamable HTTP mode: rmcp's `StreamableHttpService` in its default stateful configuration
//! (an `Mcp-Session-Id` per `initialize`, POST answers as `text/event-stream`), mounted at
//! `/mcp` beside the test control endpoints.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, ensure};
use axum::Router;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::control::{self, ControlState};
use crate::stats::Stats;
use crate::tools::TestServer;

/// Names the variable holding the bearer token `/mcp` requires; unset means no check.
const TOKEN_ENV: &str = "TETHER_MCP_TEST_TOKEN";

/// Binds `listen`, announces the endpoint on stdout, and serves until the process is killed.
pub async fn serve(listen: SocketAddr, stats: Arc<Stats>) -> anyhow::Result<()> {
    ensure!(listen.ip().is_loopback(), "refusing to listen on {listen}: only loopback is allowed");
    let sessions = Arc::new(LocalSessionManager::default());
    let mcp = StreamableHttpService::new(
        {
            let stats = stats.clone();
            move || Ok(TestServer::new(stats.clone()))
        },
        sessions.clone(),
        StreamableHttpServerConfig::default(),
    );
    let token = std::env::var(TOKEN_ENV).ok();
    let state = ControlState { sessions, stats, token: token.map(Arc::from) };
    let app = Router::new()
        .route_service("/mcp", mcp)
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), control::gate))
        .merge(control::router(state));

    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot bind {listen}"))?;
    let addr = listener.local_addr()?;
    // The one line a test waits for; everything else goes to stderr.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening http://{addr}/mcp")?;
    stdout.flush()?;
    drop(stdout);

    axum::serve(listener, app).await.context("the HTTP server failed")
}
