//! HTTP-mode hooks for tests: a gate in front of `/mcp` that counts requests and optionally
//! demands a bearer token, and `/control/*` endpoints to read those counts, to make the
//! server forget its sessions, as a restarted server would, and to let a `held` call answer.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::stats::{Stats, StatsSnapshot};

#[derive(Clone)]
pub struct ControlState {
    /// The manager the MCP service uses, so its sessions can be dropped from outside.
    pub sessions: Arc<LocalSessionManager>,
    pub stats: Arc<Stats>,
    /// When set, `/mcp` requires `Authorization: Bearer <token>`.
    pub token: Option<Arc<str>>,
}

pub fn router(state: ControlState) -> Router {
    Router::new()
        .route("/control/forget-sessions", post(forget_sessions))
        .route("/control/stats", get(stats))
        .route("/control/release", post(release))
        .with_state(state)
}

/// Runs before every `/mcp` request: counts it, then applies the bearer check.
pub async fn gate(State(state): State<ControlState>, request: Request, next: Next) -> Response {
    let authorization = request.headers().get(header::AUTHORIZATION);
    state.stats.record_request(request.method(), authorization.is_some());
    if let Some(token) = &state.token {
        let expected = format!("Bearer {token}");
        if authorization.is_none_or(|value| value.as_bytes() != expected.as_bytes()) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"test\""))],
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// Removes every session from the manager, so a request carrying one of their ids gets rmcp's
/// 404 and the client must initialize again. Each session is also closed, ending its streams as
/// a server restart would, rather than leaving them open for a session nobody can reach.
async fn forget_sessions(State(state): State<ControlState>) -> String {
    let forgotten: Vec<_> = state.sessions.sessions.write().await.drain().collect();
    for (id, handle) in &forgotten {
        if let Err(error) = handle.close().await {
            tracing::debug!(%id, %error, "session already gone");
        }
    }
    forgotten.len().to_string()
}

async fn stats(State(state): State<ControlState>) -> Json<StatsSnapshot> {
    Json(state.stats.snapshot())
}

/// Lets one `held` tool call answer.
async fn release(State(state): State<ControlState>) -> &'static str {
    state.stats.release();
    "released"
}
