//! A stand-in for the model API Codex talks to (the Responses API, streamed as server-sent
//! events), so that the real `codex exec` can be driven against an exec-server without a model.
//!
//! The model follows a script: on each turn it makes the next scripted tool call (run a command,
//! apply a patch, view an image); when the script is done it answers "done". The tool outputs
//! Codex sends back are kept, so a test can check what happened on the executor.
//!
//! It also stands in for Codex's approvals reviewer (`approvals_reviewer = "auto_review"`):
//! Codex asks the reviewer in requests of their own (header `x-openai-subagent: guardian`, a
//! JSON schema for the answer), which are kept apart from the script's turns and answered with
//! the scripted [`Verdict`].

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};

/// One tool call the stand-in model makes.
#[derive(Debug, Clone)]
pub enum ToolCall {
    /// Codex's `exec_command`: run a shell command.
    Exec { cmd: String },
    /// Codex's `apply_patch`: a patch in Codex's own format.
    ApplyPatch { patch: String },
    /// Codex's `view_image`: attach an image file to the conversation.
    ViewImage { path: String },
    /// A tool of an MCP server Codex is connected to (`namespace` is `mcp__<server>`).
    Mcp { namespace: String, name: String, arguments: Value },
    /// Any other function tool Codex offers, by name (such as `copy_file`).
    Function { name: String, arguments: Value },
}

impl ToolCall {
    fn item(&self, call_id: &str) -> Value {
        match self {
            ToolCall::Exec { cmd } => json!({"type": "function_call", "name": "exec_command",
                "call_id": call_id, "arguments": json!({"cmd": cmd, "yield_time_ms": 5000}).to_string()}),
            ToolCall::ApplyPatch { patch } => json!({"type": "custom_tool_call",
                "name": "apply_patch", "call_id": call_id, "input": patch}),
            ToolCall::ViewImage { path } => json!({"type": "function_call", "name": "view_image",
                "call_id": call_id, "arguments": json!({"path": path}).to_string()}),
            ToolCall::Mcp { namespace, name, arguments } => json!({"type": "function_call",
                "namespace": namespace, "name": name, "call_id": call_id,
                "arguments": arguments.to_string()}),
            ToolCall::Function { name, arguments } => json!({"type": "function_call",
                "name": name, "call_id": call_id, "arguments": arguments.to_string()}),
        }
    }
}

/// What the stand-in reviewer answers every review with: the assessment Codex's reviewer
/// must give (`{risk_level, user_authorization, outcome, rationale}`), its rationale as given.
/// Codex quotes a denial's rationale to the model (`Reason: …`).
#[derive(Debug, Clone)]
pub enum Verdict {
    Allow(String),
    Deny(String),
}

impl Verdict {
    fn assessment(&self) -> String {
        let (risk, authorization, outcome, rationale) = match self {
            Verdict::Allow(rationale) => ("low", "high", "allow", rationale),
            Verdict::Deny(rationale) => ("high", "unknown", "deny", rationale),
        };
        json!({"risk_level": risk, "user_authorization": authorization, "outcome": outcome,
               "rationale": rationale})
        .to_string()
    }
}

#[derive(Clone)]
struct Script {
    calls: Vec<ToolCall>,
    /// `None`: a review is answered with text that is no assessment, which Codex takes as a
    /// failed review (and refuses what was reviewed).
    verdict: Option<Verdict>,
    outputs: Arc<Mutex<Vec<Value>>>,
    requests: Arc<Mutex<Vec<Value>>>,
    reviews: Arc<Mutex<Vec<Value>>>,
}

/// A running mock model server on `127.0.0.1:0`; stops when dropped.
pub struct MockModel {
    pub base_url: String,
    outputs: Arc<Mutex<Vec<Value>>>,
    requests: Arc<Mutex<Vec<Value>>>,
    reviews: Arc<Mutex<Vec<Value>>>,
    server: tokio::task::JoinHandle<()>,
}

impl MockModel {
    /// Serves a model that runs `command` once through Codex's `exec_command` tool.
    pub async fn start(command: &str) -> anyhow::Result<Self> {
        Self::scripted(vec![ToolCall::Exec { cmd: command.to_owned() }]).await
    }

    /// Serves a model that makes `calls` one per turn, in order, then answers "done".
    pub async fn scripted(calls: Vec<ToolCall>) -> anyhow::Result<Self> {
        Self::serve(calls, None).await
    }

    /// As [`Self::scripted`], the reviewer answering every review with `verdict`.
    pub async fn scripted_reviewing(
        calls: Vec<ToolCall>,
        verdict: Verdict,
    ) -> anyhow::Result<Self> {
        Self::serve(calls, Some(verdict)).await
    }

    async fn serve(calls: Vec<ToolCall>, verdict: Option<Verdict>) -> anyhow::Result<Self> {
        let outputs = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let reviews = Arc::new(Mutex::new(Vec::new()));
        let script = Script {
            calls,
            verdict,
            outputs: outputs.clone(),
            requests: requests.clone(),
            reviews: reviews.clone(),
        };
        let app = Router::new()
            .route("/v1/responses", post(respond))
            .route(
                "/v1/models",
                get(|| async {
                    ([(header::CONTENT_TYPE, "application/json")], r#"{"models":[]}"#)
                }),
            )
            .with_state(script);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base_url = format!("http://{}/v1", listener.local_addr()?);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { base_url, outputs, requests, reviews, server })
    }

    /// The text of each tool output Codex sent back, in order.
    pub fn tool_outputs(&self) -> Vec<String> {
        self.tool_output_items()
            .iter()
            .map(|item| match &item["output"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .collect()
    }

    /// The tool output items Codex sent back, as it sent them.
    pub fn tool_output_items(&self) -> Vec<Value> {
        self.outputs.lock().unwrap().clone()
    }

    /// Every request Codex sent for the script's turns, in order: what the model was told
    /// (instructions, context, the tools it may call).
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }

    /// Every request Codex sent its reviewer, in order: what it was asked to assess.
    pub fn reviews(&self) -> Vec<Value> {
        self.reviews.lock().unwrap().clone()
    }

    /// A `config.toml` for `CODEX_HOME` that points Codex at this model, plus `extra` TOML.
    pub fn codex_config_with(&self, extra: &str) -> String {
        format!("{}\n{extra}", self.codex_config())
    }

    /// A `config.toml` for `CODEX_HOME` that points Codex at this model.
    pub fn codex_config(&self) -> String {
        format!(
            "model = \"gpt-5.5\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\nname = \"mock\"\n\
             base_url = \"{}\"\nwire_api = \"responses\"\nsupports_websockets = false\n",
            self.base_url
        )
    }
}

impl Drop for MockModel {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn respond(
    State(script): State<Script>,
    headers: HeaderMap,
    body: String,
) -> impl IntoResponse {
    let request: Value = serde_json::from_str(&body).unwrap_or_default();
    if headers.get("x-openai-subagent").is_some_and(|agent| agent == "guardian") {
        script.reviews.lock().unwrap().push(request);
        let text = match &script.verdict {
            Some(verdict) => verdict.assessment(),
            None => "no verdict scripted".to_owned(),
        };
        let item = json!({"type": "message", "role": "assistant", "id": "msg_review",
                          "content": [{"type": "output_text", "text": text}]});
        return stream("review", item);
    }
    script.requests.lock().unwrap().push(request.clone());
    let outputs: Vec<Value> = request["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| {
            matches!(
                item["type"].as_str(),
                Some("function_call_output" | "custom_tool_call_output")
            )
        })
        .cloned()
        .collect();
    let turn = outputs.len();
    *script.outputs.lock().unwrap() = outputs;
    let item = match script.calls.get(turn) {
        Some(call) => call.item(&format!("call_{turn}")),
        None => json!({"type": "message", "role": "assistant", "id": "msg_1",
                       "content": [{"type": "output_text", "text": "done"}]}),
    };
    stream(&turn.to_string(), item)
}

/// A streamed response (server-sent events) whose one output is `item`.
fn stream(id: &str, item: Value) -> ([(header::HeaderName, &'static str); 1], String) {
    let usage = json!({"input_tokens": 1, "input_tokens_details": null, "output_tokens": 1,
                       "output_tokens_details": null, "total_tokens": 2});
    let events = [
        json!({"type": "response.created", "response": {"id": format!("resp_{id}")}}),
        json!({"type": "response.output_item.done", "item": item}),
        json!({"type": "response.completed", "response": {"id": format!("resp_{id}"), "usage": usage}}),
    ];
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect();
    ([(header::CONTENT_TYPE, "text/event-stream")], body)
}
