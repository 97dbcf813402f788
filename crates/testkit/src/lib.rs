//! Test support: start Tether or the reference exec-server as a real child process, and talk
//! raw JSON-RPC to it over a real WebSocket.
//!
//! The same scenario runs against both servers ([`Target`]), which proves the tests encode the
//! protocol as the reference really speaks it, not as we imagine it.

pub mod client;
pub mod http_peer;
pub mod mcp_peer;
pub mod model;
pub mod params;
pub mod process_stats;
pub mod proxy;
pub mod server;

pub use client::{RpcClient, RpcError};
pub use http_peer::HttpPeer;
pub use mcp_peer::{McpEverything, McpTestServer, McpTestServerStats};
pub use model::{MockModel, ToolCall};
pub use params::shell_params;
pub use proxy::FaultProxy;
pub use server::{ServerProcess, Target};

/// Runs one async scenario against Tether and against the reference, as two tests named
/// `<scenario>::tether` and `<scenario>::reference`.
#[macro_export]
macro_rules! against_both {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn tether() {
                    super::$scenario($crate::Target::Tether).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn reference() {
                    super::$scenario($crate::Target::Reference).await
                }
            }
        )*
    };
}
