//! The MCP handler: a handful of tools whose results are fully determined by their arguments
//! (or by an explicit counter), so a client test can assert exact outputs.

// MCP logging (`logging/setLevel`, `notifications/message`) is part of the 2025-11-25 revision
// this server speaks, but rmcp marks its types deprecated because a later revision drops it.
#![allow(deprecated)]

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, InitializeRequestParams, InitializeResult,
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProtocolVersion,
    RequestMetaObject, ServerCapabilities, ServerConfig, SetLevelRequestParams,
};
use rmcp::schemars::JsonSchema;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::json;

use crate::stats::Stats;

/// Time between the notifications of consecutive `progress` steps, so that a client sees them
/// arrive over time rather than in one burst.
const PROGRESS_STEP_INTERVAL: Duration = Duration::from_millis(10);

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct EchoArgs {
    /// Text returned unchanged.
    message: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct AddArgs {
    a: f64,
    b: f64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ProgressArgs {
    /// Number of progress and log notifications to send before the result.
    steps: u32,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct SlowArgs {
    /// Milliseconds to wait before answering.
    ms: u64,
}

/// One instance per MCP session: the HTTP service builds one for each `initialize`.
pub struct TestServer {
    stats: Arc<Stats>,
    tool_router: ToolRouter<Self>,
}

impl TestServer {
    pub fn new(stats: Arc<Stats>) -> Self {
        Self { stats, tool_router: Self::tool_router() }
    }
}

#[tool_router]
impl TestServer {
    #[tool(
        description = "Return `message` as text, and as structured content `{\"echo\": message}`."
    )]
    async fn echo(&self, Parameters(EchoArgs { message }): Parameters<EchoArgs>) -> CallToolResult {
        let mut result = CallToolResult::success(vec![ContentBlock::text(message.clone())]);
        result.structured_content = Some(json!({ "echo": message }));
        result
    }

    #[tool(description = "Return the sum of `a` and `b` as text.")]
    async fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }

    /// Exercises the notification paths a client must route back to a pending call: one
    /// `notifications/progress` (against the request's `progressToken`, when it sent one) and
    /// one `notifications/message` per step.
    ///
    /// On stdio all of them share the one stream. Over Streamable HTTP, rmcp's session manager
    /// routes each message by kind: progress for a token the request registered rides that
    /// POST's SSE response, while `notifications/message` goes to the session's standalone GET
    /// stream (kept in a small cache and replayed when that stream opens).
    #[tool(
        description = "Send `steps` progress and log notifications, about 10 ms apart, then return `done <steps>`."
    )]
    async fn progress(
        &self,
        Parameters(ProgressArgs { steps }): Parameters<ProgressArgs>,
        meta: RequestMetaObject,
        peer: Peer<RoleServer>,
    ) -> Result<String, ErrorData> {
        let token = meta.get_progress_token();
        for step in 1..=steps {
            if step > 1 {
                tokio::time::sleep(PROGRESS_STEP_INTERVAL).await;
            }
            if let Some(token) = &token {
                let progress = ProgressNotificationParam::new(token.clone(), f64::from(step))
                    .with_total(f64::from(steps))
                    .with_message(format!("step {step}"));
                peer.notify_progress(progress).await.map_err(notify_failed)?;
            }
            let log = LoggingMessageNotificationParam::new(
                LoggingLevel::Info,
                json!(format!("step {step}")),
            )
            .with_logger("progress");
            peer.notify_logging_message(log).await.map_err(notify_failed)?;
        }
        Ok(format!("done {steps}"))
    }

    #[tool(description = "Return how many times this tool has been called in this server process.")]
    async fn count_calls(&self) -> String {
        self.stats.count_call().to_string()
    }

    /// For a test that must hold the answer back until it is ready for it: the progress
    /// notification tells it the call's stream is open, `/control/release` lets it answer.
    #[tool(
        description = "Send one progress notification, wait for `POST /control/release`, then return `released`."
    )]
    async fn held(
        &self,
        meta: RequestMetaObject,
        peer: Peer<RoleServer>,
    ) -> Result<String, ErrorData> {
        if let Some(token) = meta.get_progress_token() {
            let progress = ProgressNotificationParam::new(token, 1.0).with_message("held");
            peer.notify_progress(progress).await.map_err(notify_failed)?;
        }
        self.stats.wait_for_release().await;
        Ok("released".to_owned())
    }

    #[tool(description = "Wait `ms` milliseconds, then return `slept <ms>`.")]
    async fn slow(&self, Parameters(SlowArgs { ms }): Parameters<SlowArgs>) -> String {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        format!("slept {ms}")
    }
}

fn notify_failed(error: rmcp::ServiceError) -> ErrorData {
    ErrorData::internal_error(format!("cannot notify the client: {error}"), None)
}

// The router is built once per session rather than on every call.
#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_logging().build())
            .with_server_info(Implementation::new(
                "tether-mcp-test-server",
                env!("CARGO_PKG_VERSION"),
            ))
    }

    /// Only the revisions with an `initialize` handshake and sessions: the client under test
    /// speaks those, and a narrower server keeps every test on the session path.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    /// Counts the handshake so a test can tell whether the client re-initialized.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.stats.record_initialize();
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    /// Accepted so clients that set a level work; the level is not applied, so a test always
    /// sees every `progress` log message.
    async fn set_level(
        &self,
        _request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }
}
