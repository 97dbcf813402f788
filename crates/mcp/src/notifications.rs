//! What a server says on its own — progress, log messages, changed lists — handed to whoever
//! listens on the client, in the order the server said it.
//!
//! rmcp hands each notification to its handler in a task of its own, so two of them can
//! arrive out of order. Listeners here are served from the transports instead (a stdio line,
//! an SSE event), before rmcp sees the message: in order, and a tool call's progress is
//! published before the call returns.

// Log messages are deprecated in the newest protocol revision, still sent under the ones with
// sessions that this client speaks.
#![allow(deprecated)]

use rmcp::model::{
    LoggingMessageNotificationParam, ProgressNotificationParam, ResourceUpdatedNotificationParam,
    ServerJsonRpcMessage, ServerNotification,
};
use serde::Deserialize;
use serde::de::IgnoredAny;
use tokio::sync::broadcast;

/// A notification from the server.
#[derive(Debug, Clone)]
pub enum McpNotification {
    Progress(ProgressNotificationParam),
    Log(LoggingMessageNotificationParam),
    ResourceUpdated(ResourceUpdatedNotificationParam),
    ToolListChanged,
    ResourceListChanged,
    PromptListChanged,
    /// Any other notification, as sent.
    Other {
        method: String,
        params: Option<serde_json::Value>,
    },
}

impl McpNotification {
    /// Its method, as MCP names it (`notifications/progress`, `notifications/message`, …).
    pub fn method(&self) -> &str {
        match self {
            McpNotification::Progress(_) => "notifications/progress",
            McpNotification::Log(_) => "notifications/message",
            McpNotification::ResourceUpdated(_) => "notifications/resources/updated",
            McpNotification::ToolListChanged => "notifications/tools/list_changed",
            McpNotification::ResourceListChanged => "notifications/resources/list_changed",
            McpNotification::PromptListChanged => "notifications/prompts/list_changed",
            McpNotification::Other { method, .. } => method,
        }
    }

    /// Its params in the wire's names, for a listener that hands them on (to another language,
    /// to a log) rather than reading them here.
    pub fn params(&self) -> Option<serde_json::Value> {
        match self {
            McpNotification::Progress(params) => serde_json::to_value(params).ok(),
            McpNotification::Log(params) => serde_json::to_value(params).ok(),
            McpNotification::ResourceUpdated(params) => serde_json::to_value(params).ok(),
            McpNotification::ToolListChanged
            | McpNotification::ResourceListChanged
            | McpNotification::PromptListChanged => None,
            McpNotification::Other { params, .. } => params.clone(),
        }
    }
}

/// Backlog of notifications kept for a slow listener; one that falls further behind is told
/// it lagged.
const BACKLOG: usize = 1024;

/// Where the transports offer every notification they carry.
#[derive(Clone)]
pub(crate) struct NotificationTap {
    sender: broadcast::Sender<McpNotification>,
}

impl NotificationTap {
    pub(crate) fn new() -> Self {
        Self { sender: broadcast::channel(BACKLOG).0 }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<McpNotification> {
        self.sender.subscribe()
    }

    /// A message read from a stdio server.
    pub(crate) fn offer(&self, message: &ServerJsonRpcMessage) {
        if let ServerJsonRpcMessage::Notification(notification) = message {
            // Nobody listening is fine: notifications are offered, not queued.
            let _ = self.sender.send(convert(&notification.notification));
        }
    }

    /// The data of an SSE event. Only a notification is decoded in full; a response (which
    /// can be large) is recognised by a cheap look at its top-level keys.
    pub(crate) fn offer_event_data(&self, data: &str) {
        #[derive(Deserialize)]
        struct Peek {
            method: Option<IgnoredAny>,
            id: Option<IgnoredAny>,
        }
        let Ok(Peek { method: Some(_), id: None }) = serde_json::from_str::<Peek>(data) else {
            return;
        };
        if let Ok(message) = serde_json::from_str::<ServerJsonRpcMessage>(data) {
            self.offer(&message);
        }
    }
}

fn convert(notification: &ServerNotification) -> McpNotification {
    match notification {
        ServerNotification::ProgressNotification(n) => McpNotification::Progress(n.params.clone()),
        ServerNotification::LoggingMessageNotification(n) => McpNotification::Log(n.params.clone()),
        ServerNotification::ResourceUpdatedNotification(n) => {
            McpNotification::ResourceUpdated(n.params.clone())
        }
        ServerNotification::ToolListChangedNotification(_) => McpNotification::ToolListChanged,
        ServerNotification::ResourceListChangedNotification(_) => {
            McpNotification::ResourceListChanged
        }
        ServerNotification::PromptListChangedNotification(_) => McpNotification::PromptListChanged,
        other => {
            let value = serde_json::to_value(other).unwrap_or_default();
            McpNotification::Other {
                method: value["method"].as_str().unwrap_or_default().to_owned(),
                params: value.get("params").cloned(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_data_is_offered_only_when_it_is_a_notification() {
        let tap = NotificationTap::new();
        let mut listener = tap.subscribe();
        tap.offer_event_data(r#"{"jsonrpc":"2.0","id":1,"result":{"method":"not this"}}"#);
        tap.offer_event_data("not json");
        tap.offer_event_data(
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":2}}"#,
        );
        tap.offer_event_data(
            r#"{"jsonrpc":"2.0","method":"notifications/custom","params":{"x":1}}"#,
        );
        match listener.try_recv().unwrap() {
            McpNotification::Progress(progress) => assert_eq!(progress.progress, 2.0),
            other => panic!("{other:?}"),
        }
        match listener.try_recv().unwrap() {
            McpNotification::Other { method, params } => {
                assert_eq!(method, "notifications/custom");
                assert_eq!(params, Some(serde_json::json!({"x": 1})));
            }
            other => panic!("{other:?}"),
        }
        assert!(listener.try_recv().is_err());
    }

    /// A notification read back into the wire's method and params is what the server sent.
    #[test]
    fn method_and_params_are_the_wires() {
        let tap = NotificationTap::new();
        let mut listener = tap.subscribe();
        let sent = [
            r#"{"method":"notifications/progress","params":{"progressToken":7,"progress":2.0,"total":3.0,"message":"two"}}"#,
            r#"{"method":"notifications/message","params":{"level":"info","logger":"x","data":"said"}}"#,
            r#"{"method":"notifications/tools/list_changed"}"#,
            r#"{"method":"notifications/custom","params":{"x":1}}"#,
        ];
        for data in sent {
            let message = format!(r#"{{"jsonrpc":"2.0",{}"#, &data[1..]);
            tap.offer_event_data(&message);
        }
        for data in sent {
            let sent: serde_json::Value = serde_json::from_str(data).unwrap();
            let received = listener.try_recv().unwrap();
            assert_eq!(received.method(), sent["method"], "{received:?}");
            assert_eq!(received.params(), sent.get("params").cloned(), "{received:?}");
        }
    }
}
