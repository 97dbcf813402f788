//! The surface suites: scenarios written once against the engine's traits
//! ([`ExecBackend`](tether_engine::exec::ExecBackend),
//! [`FileSystem`](tether_engine::fs::FileSystem), [`HttpClient`](tether_engine::http::HttpClient))
//! and run on every implementation — the engine in-process, and Tether and the reference through
//! the client — by [`scenarios!`](crate::scenarios).
//!
//! A scenario is a `pub async fn` that takes the implementation under test (and for HTTP, the
//! peer). What only one implementation has stays in that crate's tests.

pub mod exec;
pub mod fs;
pub mod http;
pub mod tree_copy;
