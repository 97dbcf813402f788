//! Managed network for sandboxed commands: what a process's proxy lets through.
//!
//! - [`domains`]: the domain policy of a `networkProxy` launch (allow and deny patterns, local
//!   and private addresses), deciding a destination as the reference's proxy decides it, with
//!   its reasons and words.
//! - [`blocked`]: the `403` a refused request gets, headers and body as the reference's.
//! - [`proxy_env`]: the variables that point a process at its proxies.

pub mod blocked;
pub mod domains;
pub mod proxy_env;
