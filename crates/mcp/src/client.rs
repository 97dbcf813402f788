//! [`McpClient`]: one MCP session with a server placed by an [`Environment`].
//!
//! A stdio server runs as an executor process ([`ExecutorStdioTransport`]); a Streamable HTTP
//! server is reached through the environment's HTTP client ([`HttpClientAdapter`]). Local or
//! remote, the MCP flow above is the same rmcp client.
//!
//! Retries are narrow on purpose. A request that got no response at all may or may not have
//! reached the server, so only the handshake and listing tools — which change nothing — are
//! sent again (after 250 ms, then 1 s). A `tools/call` is never resent here: running a tool
//! twice is worse than reporting that it may have run. A server that forgot the session (HTTP
//! 404) did not run the call; rmcp re-initializes once and replays it once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    JsonObject, NumberOrString, ProgressToken, ProtocolVersion, RequestMetaObject, ServerPeerInfo,
    Tool,
};
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::SseRetryPolicy;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tether_client::Environment;
use tokio::sync::broadcast;
use tracing::{Instrument, debug, info_span};

use crate::error::McpError;
use crate::http_adapter::HttpClientAdapter;
use crate::notifications::{McpNotification, NotificationTap};
use crate::stdio_transport::{ExecutorStdioTransport, ServerEnd, StdioServerCommand};

/// Where the MCP server is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpServerConfig {
    /// Started as a process on the executor, spoken to over its stdin and stdout.
    Stdio(StdioServerCommand),
    /// Reached over Streamable HTTP from the executor.
    Http(HttpServerConfig),
}

#[derive(Clone, PartialEq, Eq)]
pub struct HttpServerConfig {
    /// The MCP endpoint, e.g. `http://127.0.0.1:3000/mcp`.
    pub url: String,
    /// Sent as `Authorization: Bearer …`.
    pub bearer_token: Option<String>,
    /// Sent with every request.
    pub headers: Vec<(String, String)>,
}

impl std::fmt::Debug for HttpServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token nor the header values.
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("HttpServerConfig")
            .field("has_bearer_token", &self.bearer_token.is_some())
            .field("header_names", &names)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
pub struct McpClientOptions {
    /// The protocol version offered. 2025-11-25 by default: the last revision with sessions
    /// and `initialize`, which every server still speaks (rmcp's own default, 2026-07-28, is
    /// sessionless and not yet widely served).
    pub protocol_version: ProtocolVersion,
    /// How long the handshake and each list may take.
    pub request_timeout: Duration,
    /// How long a tool call may take; `None` waits as long as the server works.
    pub call_timeout: Option<Duration>,
}

impl Default for McpClientOptions {
    fn default() -> Self {
        Self {
            protocol_version: ProtocolVersion::V_2025_11_25,
            request_timeout: Duration::from_secs(30),
            call_timeout: None,
        }
    }
}

/// Waits before the second and third attempt of a request that got no response.
const RETRY_DELAYS: [Duration; 2] = [Duration::from_millis(250), Duration::from_secs(1)];
/// Reconnections of the server's SSE stream before giving up on it.
const SSE_RECONNECTS: usize = 5;

/// Reconnects a dropped SSE stream every second, [`SSE_RECONNECTS`] times at most: rmcp's
/// default retries forever, with doubling delays, so a server that stays down would never be
/// given up on.
#[derive(Debug)]
struct BoundedReconnects;

impl SseRetryPolicy for BoundedReconnects {
    fn retry(&self, attempts: usize) -> Option<Duration> {
        (attempts < SSE_RECONNECTS).then_some(Duration::from_secs(1))
    }
}

/// A live MCP session. Dropping it ends the session (and a stdio server's process).
pub struct McpClient {
    service: RunningService<RoleClient, ClientConfig>,
    notifications: NotificationTap,
    /// A stdio server's end, to say why calls fail once it is gone.
    stdio_end: Option<Arc<Mutex<ServerEnd>>>,
    options: McpClientOptions,
    next_progress_token: std::sync::atomic::AtomicI64,
}

impl McpClient {
    /// Starts or reaches the server through `environment` and completes the MCP handshake.
    pub async fn connect(
        environment: &Environment,
        server: &McpServerConfig,
        options: McpClientOptions,
    ) -> Result<Self, McpError> {
        let placement = if environment.is_remote() { "remote" } else { "local" };
        let span = match server {
            McpServerConfig::Stdio(command) => {
                info_span!("mcp_connect", placement, transport = "stdio", program = %command.program)
            }
            McpServerConfig::Http(_) => info_span!("mcp_connect", placement, transport = "http"),
        };
        retry_if_no_response("initialize", || Self::connect_once(environment, server, &options))
            .instrument(span)
            .await
    }

    async fn connect_once(
        environment: &Environment,
        server: &McpServerConfig,
        options: &McpClientOptions,
    ) -> Result<Self, McpError> {
        let notifications = NotificationTap::new();
        let info = client_info(options);
        let timeout = options.request_timeout;
        let (service, stdio_end) = match server {
            McpServerConfig::Stdio(command) => {
                let exec = environment.exec.as_ref();
                let transport = ExecutorStdioTransport::launch_tapped(
                    exec,
                    command,
                    Some(notifications.clone()),
                )
                .await?;
                let end = transport.end();
                let started = tokio::time::timeout(timeout, info.clone().serve(transport)).await;
                let describe = || end.lock().unwrap().describe();
                let service = started
                    .map_err(|_| McpError::Timeout(timeout))?
                    .map_err(|e| McpError::from_initialize(e, describe()))?;
                (service, Some(end))
            }
            McpServerConfig::Http(http) => {
                if url::Url::parse(&http.url).is_err() {
                    return Err(McpError::InvalidConfig("the MCP server URL is not a URL".into()));
                }
                let adapter =
                    HttpClientAdapter::new(environment.http.clone(), http.headers.clone())
                        .with_notification_tap(notifications.clone());
                let mut config = StreamableHttpClientTransportConfig::with_uri(http.url.as_str());
                config.auth_header = http.bearer_token.clone();
                config.retry_config = Arc::new(BoundedReconnects);
                let transport = StreamableHttpClientTransport::with_client(adapter, config);
                let started = tokio::time::timeout(timeout, info.clone().serve(transport)).await;
                let service = started
                    .map_err(|_| McpError::Timeout(timeout))?
                    .map_err(|e| McpError::from_initialize(e, None))?;
                (service, None)
            }
        };
        Ok(Self {
            service,
            notifications,
            stdio_end,
            options: options.clone(),
            next_progress_token: std::sync::atomic::AtomicI64::new(1),
        })
    }

    /// What the server said of itself in the handshake.
    pub fn server_info(&self) -> Option<Arc<ServerPeerInfo>> {
        self.service.peer().peer_info()
    }

    /// Notifications from now on, in the order the server sent them (a tool call's progress
    /// among them, published before the call returns).
    pub fn subscribe(&self) -> broadcast::Receiver<McpNotification> {
        self.notifications.subscribe()
    }

    /// Every tool the server offers (all pages). Sent again, twice at most, if no response came.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, McpError> {
        let timeout = self.options.request_timeout;
        retry_if_no_response("tools/list", || async {
            match tokio::time::timeout(timeout, self.service.peer().list_all_tools()).await {
                Err(_) => Err(McpError::Timeout(timeout)),
                Ok(result) => result.map_err(|e| McpError::from_service(e, self.stdio_end())),
            }
        })
        .await
    }

    /// Calls a tool once. Its progress reaches [`subscribe`](Self::subscribe)rs. Never resent:
    /// if no response came, the error says so and the caller decides.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, McpError> {
        let token = self.next_progress_token.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = arguments;
        params.meta = Some(RequestMetaObject::with_progress_token(ProgressToken(
            NumberOrString::Number(token),
        )));
        let call = self.service.peer().call_tool(params);
        let result = match self.options.call_timeout {
            Some(timeout) => {
                tokio::time::timeout(timeout, call).await.map_err(|_| McpError::Timeout(timeout))?
            }
            None => call.await,
        };
        result.map_err(|e| McpError::from_service(e, self.stdio_end()))
    }

    /// Ends the session: an HTTP session is deleted, a stdio server's process terminated
    /// (returning once the executor has answered the terminate).
    pub async fn close(mut self) {
        let _ = self.service.close().await;
    }

    fn stdio_end(&self) -> Option<String> {
        self.stdio_end.as_ref().and_then(|end| end.lock().unwrap().describe())
    }
}

/// Runs `attempt`, and again after each of [`RETRY_DELAYS`] while it gets no response at all:
/// for requests that change nothing (`what` names it in the log).
async fn retry_if_no_response<T, F, Fut>(what: &str, mut attempt: F) -> Result<T, McpError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, McpError>>,
{
    let mut delays = RETRY_DELAYS.iter();
    loop {
        match attempt().await {
            Err(error) if error.is_no_response() => match delays.next() {
                Some(delay) => {
                    debug!(%error, what, "no response; retrying");
                    tokio::time::sleep(*delay).await;
                }
                None => return Err(error),
            },
            result => return result,
        }
    }
}

fn client_info(options: &McpClientOptions) -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("tether", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(options.protocol_version.clone())
}
