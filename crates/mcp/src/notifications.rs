//! What a server says on its own — progress, log messages, changed lists — handed to whoever
//! listens on the client.

// Log messages are deprecated in the newest protocol revision, still sent under the ones with
// sessions that this client speaks.
#![allow(deprecated)]

use rmcp::ClientHandler;
use rmcp::model::{
    ClientConfig, CustomNotification, LoggingMessageNotificationParam, ProgressNotificationParam,
    ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, RoleClient};
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
    Other(CustomNotification),
}

/// The client side of the MCP session: introduces the client and passes notifications on.
/// Requests from the server (sampling, elicitation, roots) get rmcp's default answers.
pub(crate) struct NotificationForwarder {
    pub info: ClientConfig,
    pub notifications: broadcast::Sender<McpNotification>,
}

impl NotificationForwarder {
    fn forward(&self, notification: McpNotification) -> std::future::Ready<()> {
        // Nobody listening is fine: notifications are offered, not queued.
        let _ = self.notifications.send(notification);
        std::future::ready(())
    }
}

impl ClientHandler for NotificationForwarder {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.forward(McpNotification::Progress(params))
    }

    fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.forward(McpNotification::Log(params))
    }

    fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.forward(McpNotification::ResourceUpdated(params))
    }

    fn on_tool_list_changed(
        &self,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.forward(McpNotification::ToolListChanged)
    }

    fn on_resource_list_changed(
        &self,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.forward(McpNotification::ResourceListChanged)
    }

    fn on_prompt_list_changed(
        &self,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.forward(McpNotification::PromptListChanged)
    }

    fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.forward(McpNotification::Other(notification))
    }
}
