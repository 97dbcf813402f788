//! A stand-in for the model API Codex talks to (the Responses API, streamed as server-sent
//! events), so that the real `codex exec` can be driven against an exec-server without a model.
//!
//! The first turn asks Codex to run one command with its `exec_command` tool; once Codex sends
//! the command's output back, the model answers "done". Every tool output Codex sends is kept,
//! so a test can check what the command printed on the executor.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};

#[derive(Clone)]
struct Script {
    command: String,
    outputs: Arc<Mutex<Vec<String>>>,
}

/// A running mock model server on `127.0.0.1:0`; stops when dropped.
pub struct MockModel {
    pub base_url: String,
    outputs: Arc<Mutex<Vec<String>>>,
    server: tokio::task::JoinHandle<()>,
}

impl MockModel {
    /// Serves a model that runs `command` once through Codex's `exec_command` tool.
    pub async fn start(command: &str) -> anyhow::Result<Self> {
        let outputs = Arc::new(Mutex::new(Vec::new()));
        let script = Script { command: command.to_owned(), outputs: outputs.clone() };
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
        Ok(Self { base_url, outputs, server })
    }

    /// The tool outputs Codex sent back, in order.
    pub fn tool_outputs(&self) -> Vec<String> {
        self.outputs.lock().unwrap().clone()
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

async fn respond(State(script): State<Script>, body: String) -> impl IntoResponse {
    let request: Value = serde_json::from_str(&body).unwrap_or_default();
    let outputs: Vec<String> = request["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["type"] == "function_call_output")
        .map(|item| {
            item["output"].as_str().map(String::from).unwrap_or_else(|| item["output"].to_string())
        })
        .collect();
    let item = if outputs.is_empty() {
        json!({"type": "function_call", "name": "exec_command", "call_id": "call_1",
               "arguments": json!({"cmd": script.command, "yield_time_ms": 5000}).to_string()})
    } else {
        script.outputs.lock().unwrap().extend(outputs);
        json!({"type": "message", "role": "assistant", "id": "msg_1",
               "content": [{"type": "output_text", "text": "done"}]})
    };
    let usage = json!({"input_tokens": 1, "input_tokens_details": null, "output_tokens": 1,
                       "output_tokens_details": null, "total_tokens": 2});
    let events = [
        json!({"type": "response.created", "response": {"id": "resp_1"}}),
        json!({"type": "response.output_item.done", "item": item}),
        json!({"type": "response.completed", "response": {"id": "resp_1", "usage": usage}}),
    ];
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect();
    ([(header::CONTENT_TYPE, "text/event-stream")], body)
}
