//! Managed network for sandboxed commands: what a process's proxy lets through.
//!
//! - [`domains`]: the domain policy of a `networkProxy` launch (allow and deny patterns, local
//!   and private addresses), deciding a destination as the reference's proxy decides it, with
//!   its reasons and words.
//! - [`blocked`]: the `403` a refused request gets, headers and body as the reference's.
//! - [`proxy_env`]: the variables that point a process at its proxies.
//! - [`proxy`]: the proxy itself, one per launch (HTTP forward and `CONNECT`, SOCKS5), every
//!   decision reported, open questions asked of the client, and what it goes through past the
//!   executor ([`proxy::upstream`]: the executor's own proxies, the operator's TCP upstream).
//! - [`masking`]: credential masking — placeholders in the child, the real secret put back
//!   only in what goes to the hosts it is bound to, over TLS the proxy terminates with a CA
//!   of its own.
//! - [`forward`]: how a sandbox with a network namespace of its own hands its connections to
//!   that proxy (descriptors over a socket pair; the proxy listens nowhere).
//! - [`bridge`]: the same way out to a proxy the caller runs on the host's loopback
//!   (`enforceManagedNetwork` without `networkProxy`), its variables pointed inside.

pub mod blocked;
pub mod bridge;
pub mod domains;
pub mod forward;
pub mod masking;
pub mod proxy;
pub mod proxy_env;
