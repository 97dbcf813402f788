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

/// Runs every scenario of a [`suites`] list on one implementation, one test per scenario and
/// target. The list is the suite's own (`every_scenario`, or for the filesystem suite one per
/// surface): it names each scenario once, with the targets it does not run on and why, so a
/// runner cannot leave a scenario out — one excluded on its target is made an ignored test that
/// gives the reason. The body builds the implementation under test and calls the scenario,
/// bound to the name given after the target (a function item, so `&client` coerces to the
/// trait it takes):
///
/// ```ignore
/// use tether_testkit::suites::fs;
///
/// scenarios!(fs::every_file_system_scenario, on [tether, reference], |target, scenario| {
///     let server = ServerProcess::start(target).await.unwrap();
///     scenario(&connected(&server.url).await).await
/// });
///
/// scenarios!(fs::every_file_system_scenario, on local, |scenario| {
///     scenario(&LocalFileSystem::new()).await
/// });
/// ```
///
/// With targets, the tests are `<scenario>::tether` and `<scenario>::reference`, as
/// [`against_both!`] names them; `on local` names them `<scenario>`.
///
/// A list is declared as `[name, other [reference: "why", local: "why"], …]`; the targets are
/// `local`, `tether` and `reference`.
#[macro_export]
macro_rules! scenarios {
    // The list's answer: each scenario with its exclusions, and the runner's targets and body.
    (@each $suite:tt [$($scenario:ident $([$($not:tt)*])?),* $(,)?]
        on local, |$bound:ident| $body:block $(,)?) => {
        $( $crate::scenarios!(@local $suite $scenario [$($($not)*)?], |$bound| $body); )*
    };
    (@each $suite:tt [$($scenario:ident $([$($not:tt)*])?),* $(,)?]
        on $targets:tt, |$on:ident, $bound:ident| $body:block $(,)?) => {
        $(
            $crate::scenarios!(@scenario $suite $scenario [$($($not)*)?] $targets,
                |$on, $bound| $body);
        )*
    };
    (@local [$($suite:tt)*] $scenario:ident $not:tt, |$bound:ident| $body:block) => {
        $crate::scenarios!(@pick local $not
            [#[tokio::test(flavor = "multi_thread", worker_threads = 2)]]
            [async fn $scenario() {
                let $bound = $($suite)*::$scenario;
                $body
            }]);
    };
    (@scenario $suite:tt $scenario:ident $not:tt [$($target:ident),+ $(,)?],
        |$on:ident, $bound:ident| $body:block) => {
        mod $scenario {
            #[allow(unused_imports)]
            use super::*;
            $( $crate::scenarios!(@on $suite $scenario $not $target, |$on, $bound| $body); )+
        }
    };
    (@on [$($suite:tt)*] $scenario:ident $not:tt $target:ident,
        |$on:ident, $bound:ident| $body:block) => {
        $crate::scenarios!(@pick $target $not
            [#[tokio::test(flavor = "multi_thread", worker_threads = 2)]]
            [async fn $target() {
                let $on = $crate::scenarios!(@target $target);
                let $bound = $($suite)*::$scenario;
                $body
            }]);
    };
    // A test, ignored with its reason where the list excludes its target.
    (@pick $target:ident [] [$($attr:tt)*] [$($item:tt)*]) => { $($attr)* $($item)* };
    (@pick local [local: $why:literal $(, $($rest:tt)*)?] [$($attr:tt)*] [$($item:tt)*]) => {
        $($attr)* #[ignore = $why] $($item)*
    };
    (@pick tether [tether: $why:literal $(, $($rest:tt)*)?] [$($attr:tt)*] [$($item:tt)*]) => {
        $($attr)* #[ignore = $why] $($item)*
    };
    (@pick reference [reference: $why:literal $(, $($rest:tt)*)?] [$($attr:tt)*] [$($item:tt)*]) => {
        $($attr)* #[ignore = $why] $($item)*
    };
    (@pick $target:ident [$other:ident: $why:literal $(, $($rest:tt)*)?] $attr:tt $item:tt) => {
        $crate::scenarios!(@pick $target [$($($rest)*)?] $attr $item);
    };
    (@target tether) => { $crate::Target::Tether };
    (@target reference) => { $crate::Target::Reference };
    // A runner: the list calls back with every scenario.
    ($($list:ident)::+, on $($runner:tt)*) => {
        $($list)::+! { on $($runner)* }
    };
}
