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
pub mod private_network;
pub mod process_stats;
pub mod proxy;
pub mod scratch;
pub mod server;
pub mod sshd;
pub mod suites;
pub mod wait;

pub use client::{RpcClient, RpcError};
pub use http_peer::HttpPeer;
pub use mcp_peer::{McpEverything, McpTestServer, McpTestServerStats};
pub use model::{MockModel, ToolCall, Verdict};
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

/// Runs scenarios of a [`suites`] module (named by a `use` in scope) on one implementation, one
/// test per scenario and target. The body builds the implementation under test and calls the scenario, bound to the
/// name given after the target (a function item, so `&client` coerces to the trait it takes):
///
/// ```ignore
/// use tether_testkit::suites::fs;
///
/// scenarios!(fs, on [tether, reference], |target, scenario| {
///     let server = ServerProcess::start(target).await.unwrap();
///     scenario(&connected(&server.url).await).await
/// }, [read_file_returns_whole_regular_files, walk_bounds_set_truncated]);
///
/// scenarios!(fs, on local, |scenario| {
///     scenario(&LocalFileSystem::new()).await
/// }, [read_file_returns_whole_regular_files]);
/// ```
///
/// With targets, the tests are `<scenario>::tether` and `<scenario>::reference`, as
/// [`against_both!`] names them; `on local` names them `<scenario>`.
#[macro_export]
macro_rules! scenarios {
    (
        $suite:ident, on local, |$bound:ident| $body:block,
        [$($scenario:ident),* $(,)?] $(,)?
    ) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                let $bound = $suite::$scenario;
                $body
            }
        )*
    };
    (
        $suite:ident, on $targets:tt, |$on:ident, $bound:ident| $body:block,
        [$($scenario:ident),* $(,)?] $(,)?
    ) => {
        $( $crate::scenarios!(@scenario $suite, $scenario, $targets, |$on, $bound| $body); )*
    };
    (@scenario $suite:ident, $scenario:ident, [$($target:ident),+ $(,)?],
        |$on:ident, $bound:ident| $body:block) => {
        mod $scenario {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $target() {
                    let $on = $crate::scenarios!(@target $target);
                    let $bound = $suite::$scenario;
                    $body
                }
            )+
        }
    };
    (@target tether) => { $crate::Target::Tether };
    (@target reference) => { $crate::Target::Reference };
}
