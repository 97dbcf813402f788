//! Fitting the server's connections in its file-descriptor limit (`RLIMIT_NOFILE`).
//!
//! Every connection holds a descriptor, and so does every process pipe, open file, spill file
//! and watch of the sessions already running. If connections may take them all, an
//! authenticated session's next `process/start` fails with "Too many open files" — strangers'
//! sockets would break work in progress. So the server makes sure, before it serves, that
//! `--max-connections` upgraded connections, [`MAX_PENDING_CONNECTIONS`] not yet upgraded, and
//! [`DESCRIPTOR_HEADROOM`] for the sessions' own work all fit, raising the soft limit toward
//! the hard one as far as that needs (any process may) and no further, because children
//! inherit it and some programs misbehave with huge limits.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

use crate::config::MAX_PENDING_CONNECTIONS;

/// Descriptors kept for the sessions' own work beyond connections: a running command holds
/// three or four (its pipes or terminal, its pid), an open file or a watch one each. 1024 lets
/// some 250 commands run at once with every connection open; past it a start may fail with a
/// clear EMFILE, but only at the sessions' own doing, never because of idle strangers.
pub const DESCRIPTOR_HEADROOM: u64 = 1024;

/// Descriptors the server needs to hold `max_connections` WebSocket connections safely.
pub fn descriptors_needed(max_connections: usize) -> u64 {
    max_connections as u64 + MAX_PENDING_CONNECTIONS as u64 + DESCRIPTOR_HEADROOM
}

/// The most WebSocket connections a descriptor limit of `limit` can hold (0 when it cannot
/// even hold the pending connections and the headroom).
pub fn connections_within(limit: u64) -> usize {
    limit.saturating_sub(MAX_PENDING_CONNECTIONS as u64 + DESCRIPTOR_HEADROOM) as usize
}

/// The descriptor limit after [`fit_descriptor_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptorLimit {
    /// The soft limit in force now.
    pub soft: u64,
    /// The most the soft limit could be raised to.
    pub hard: u64,
}

/// Raises the soft `RLIMIT_NOFILE` so that `max_connections` fit (see [`descriptors_needed`]),
/// never above the hard limit and never lowering it. Returns the limit in force afterwards,
/// which may still be short of what is needed: the caller decides what to do then.
pub fn fit_descriptor_limit(max_connections: usize) -> DescriptorLimit {
    let current = getrlimit(Resource::Nofile);
    // `None` is "unlimited".
    let hard = current.maximum.unwrap_or(u64::MAX);
    let soft = current.current.unwrap_or(u64::MAX);
    let wanted = descriptors_needed(max_connections).min(hard);
    if wanted <= soft {
        return DescriptorLimit { soft, hard };
    }
    let raised = Rlimit { current: Some(wanted), maximum: current.maximum };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => DescriptorLimit { soft: wanted, hard },
        Err(_) => DescriptorLimit { soft, hard },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_needed_and_what_fits_are_inverse() {
        assert_eq!(descriptors_needed(1024), 1024 + 256 + 1024);
        assert_eq!(connections_within(descriptors_needed(1024)), 1024);
        assert_eq!(connections_within(1024), 0);
    }
}
