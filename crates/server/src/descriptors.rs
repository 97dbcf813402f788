//! Fitting the server's connections in its file-descriptor limit (`RLIMIT_NOFILE`).
//!
//! Every connection holds a descriptor, and so does every process pipe, open file, spill file
//! and watch of the sessions already running. If connections may take them all, an
//! authenticated session's next `process/start` fails with "Too many open files" — strangers'
//! sockets would break work in progress. So before it serves, the server splits its limit
//! three ways: upgraded connections (`--max-connections`), connections not yet upgraded
//! ([`DEFAULT_MAX_PENDING_CONNECTIONS`]) and [`DESCRIPTOR_HEADROOM`] for the sessions' own
//! work. It raises the soft limit toward the hard one as far as the full defaults need (any
//! process may) and no further, because children inherit it and some programs misbehave with
//! huge limits.
//!
//! Where the hard limit is smaller (`ulimit -n 1024` is common, small containers have 256),
//! the server still starts: [`budget`] scales the three shares down to the limit, never
//! below [`MIN_PENDING_CONNECTIONS`] and [`MIN_DESCRIPTOR_HEADROOM`]. Only an explicit
//! `--max-connections` that leaves no room for those minimums is refused.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

use crate::config::{DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_PENDING_CONNECTIONS};

/// Descriptors kept for the sessions' own work beyond connections: a running command holds
/// three or four (its pipes or terminal, its pid), an open file or a watch one each. 1024 lets
/// some 250 commands run at once with every connection open; past it a start may fail with a
/// clear EMFILE, but only at the sessions' own doing, never because of idle strangers.
pub const DESCRIPTOR_HEADROOM: u64 = 1024;

/// The least headroom a small limit leaves the sessions: the server itself holds about a dozen
/// descriptors (its listener, runtime and standard streams), and 64 leaves room beside them
/// for a dozen commands running at once.
pub const MIN_DESCRIPTOR_HEADROOM: u64 = 64;

/// The fewest connections a small limit lets wait for their upgrade. The oldest is closed to
/// make room past the cap, and a real client's upgrade takes a round trip, so 16 still lets
/// honest clients in while a stranger fills the rest.
pub const MIN_PENDING_CONNECTIONS: usize = 16;

/// Descriptors the server needs to hold `max_connections` WebSocket connections with the
/// default pending cap and headroom: what it raises its soft limit toward.
pub fn descriptors_needed(max_connections: usize) -> u64 {
    (max_connections as u64)
        .saturating_add(DEFAULT_MAX_PENDING_CONNECTIONS as u64 + DESCRIPTOR_HEADROOM)
}

/// The least a descriptor limit must be for any connections with the smallest pending cap and
/// headroom, beyond the connections themselves.
const MIN_RESERVED: u64 = MIN_PENDING_CONNECTIONS as u64 + MIN_DESCRIPTOR_HEADROOM;

/// How a descriptor limit is shared out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptorBudget {
    /// Upgraded WebSocket connections held at once (`--max-connections`).
    pub max_connections: usize,
    /// Connections held before their upgrade; past it the oldest is closed.
    pub max_pending_connections: usize,
    /// Descriptors left for the sessions' processes, files and watches.
    pub headroom: u64,
}

impl DescriptorBudget {
    /// The shares when the limit holds everything: `max_connections` with the default pending
    /// cap and headroom.
    pub fn full(max_connections: usize) -> Self {
        Self {
            max_connections,
            max_pending_connections: DEFAULT_MAX_PENDING_CONNECTIONS,
            headroom: DESCRIPTOR_HEADROOM,
        }
    }
}

/// Why a descriptor limit cannot serve WebSocket connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// Not even one connection fits beside the smallest pending cap and headroom.
    #[error(
        "the file-descriptor limit ({limit}) is too low to serve WebSocket connections: one needs {least}"
    )]
    LimitTooLow { limit: u64, least: u64 },
    /// An explicit `--max-connections` leaves no room for the smallest pending cap and
    /// headroom; `fits` connections would.
    #[error(
        "--max-connections {requested} needs at least {least} file descriptors, but the limit is {limit}"
    )]
    ConnectionsDoNotFit { requested: usize, least: u64, limit: u64, fits: usize },
}

/// Shares `limit` descriptors out. The full shares when they fit; else, for the default
/// connection limit, all three scaled down in the proportions of the defaults; for an explicit
/// `requested`, which is kept as it is, the pending cap and headroom share what is left in
/// their default proportion. Neither goes below its minimum.
pub fn budget(limit: u64, requested: Option<usize>) -> Result<DescriptorBudget, BudgetError> {
    let wanted = requested.unwrap_or(DEFAULT_MAX_CONNECTIONS);
    if descriptors_needed(wanted) <= limit {
        return Ok(DescriptorBudget::full(wanted));
    }
    let too_low = BudgetError::LimitTooLow { limit, least: MIN_RESERVED + 1 };
    let Some(requested) = requested else {
        let whole = descriptors_needed(DEFAULT_MAX_CONNECTIONS);
        let scaled =
            |share: u64| (u128::from(share) * u128::from(limit) / u128::from(whole)) as u64;
        let pending =
            scaled(DEFAULT_MAX_PENDING_CONNECTIONS as u64).max(MIN_PENDING_CONNECTIONS as u64);
        let headroom = scaled(DESCRIPTOR_HEADROOM).max(MIN_DESCRIPTOR_HEADROOM);
        let connections =
            limit.checked_sub(pending + headroom).filter(|&n| n > 0).ok_or(too_low)?;
        return Ok(DescriptorBudget {
            max_connections: (connections as usize).min(DEFAULT_MAX_CONNECTIONS),
            max_pending_connections: pending as usize,
            headroom,
        });
    };
    let left = limit.saturating_sub(requested as u64);
    if left < MIN_RESERVED {
        let fits = limit.saturating_sub(MIN_RESERVED) as usize;
        if fits == 0 {
            return Err(too_low);
        }
        let least = (requested as u64).saturating_add(MIN_RESERVED);
        return Err(BudgetError::ConnectionsDoNotFit { requested, least, limit, fits });
    }
    let default_reserved = DEFAULT_MAX_PENDING_CONNECTIONS as u64 + DESCRIPTOR_HEADROOM;
    let pending = (left * DEFAULT_MAX_PENDING_CONNECTIONS as u64 / default_reserved)
        .max(MIN_PENDING_CONNECTIONS as u64);
    Ok(DescriptorBudget {
        max_connections: requested,
        max_pending_connections: pending as usize,
        headroom: left - pending,
    })
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
/// which may still be short of what is needed: [`budget`] shares out what there is.
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

/// Raises the limit as far as `requested` connections (or the default) with the default
/// pending cap and headroom need, then shares out what there is ([`budget`]); where the hard
/// limit is lower, the shares are lowered to fit and one warning says what was lowered to
/// what, and how to serve them in full. Only an explicit `requested` that leaves no room for
/// the rest is an error. The server's policy for its limit, in one call, so that every
/// embedder fits it alike.
pub fn fit_connections(requested: Option<usize>) -> Result<DescriptorBudget, BudgetError> {
    let wanted = requested.unwrap_or(DEFAULT_MAX_CONNECTIONS);
    let limit = fit_descriptor_limit(wanted);
    let budget = budget(limit.soft, requested)?;
    let full = DescriptorBudget::full(wanted);
    if budget != full {
        let lowered = [
            ("--max-connections", full.max_connections as u64, budget.max_connections as u64),
            (
                "connections waiting for their upgrade",
                full.max_pending_connections as u64,
                budget.max_pending_connections as u64,
            ),
            ("descriptors kept for the sessions' work", full.headroom, budget.headroom),
        ]
        .into_iter()
        .filter(|(_, from, to)| from != to)
        .map(|(what, from, to)| format!("{what} {from} to {to}"))
        .collect::<Vec<_>>()
        .join(", ");
        let needed = descriptors_needed(wanted);
        tracing::warn!(
            "the file-descriptor limit ({}) is below the {needed} these settings need; lowered {lowered}; raise the hard limit to {needed} (`ulimit -Hn`, LimitNOFILE= under systemd) to serve them in full",
            limit.soft
        );
    }
    Ok(budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_that_holds_the_defaults_gets_them() {
        assert_eq!(descriptors_needed(1024), 1024 + 256 + 1024);
        assert_eq!(budget(2304, None), Ok(DescriptorBudget::full(1024)));
        assert_eq!(budget(1_000_000, None), Ok(DescriptorBudget::full(1024)));
        assert_eq!(budget(1290, Some(10)), Ok(DescriptorBudget::full(10)));
    }

    #[test]
    fn the_defaults_scale_down_to_a_small_limit_in_their_proportions() {
        let at_1024 = budget(1024, None).unwrap();
        assert_eq!(
            at_1024,
            DescriptorBudget { max_connections: 456, max_pending_connections: 113, headroom: 455 }
        );
        let at_256 = budget(256, None).unwrap();
        assert_eq!(
            at_256,
            DescriptorBudget { max_connections: 115, max_pending_connections: 28, headroom: 113 }
        );
        for limit in [81, 100, 256, 1024, 2303] {
            let shares = budget(limit, None).unwrap();
            let used = shares.max_connections as u64
                + shares.max_pending_connections as u64
                + shares.headroom;
            assert!(used <= limit, "{limit}: {shares:?}");
            assert!(shares.max_connections >= 1, "{limit}: {shares:?}");
            assert!(shares.max_pending_connections >= MIN_PENDING_CONNECTIONS, "{limit}");
            assert!(shares.headroom >= MIN_DESCRIPTOR_HEADROOM, "{limit}");
        }
    }

    #[test]
    fn an_explicit_connection_limit_is_kept_and_the_rest_shared() {
        assert_eq!(
            budget(1024, Some(10)),
            Ok(DescriptorBudget {
                max_connections: 10,
                max_pending_connections: 202,
                headroom: 812
            })
        );
        assert_eq!(
            budget(256, Some(176)),
            Ok(DescriptorBudget {
                max_connections: 176,
                max_pending_connections: 16,
                headroom: 64
            })
        );
    }

    #[test]
    fn an_explicit_connection_limit_that_leaves_too_little_is_refused_with_what_fits() {
        assert_eq!(
            budget(256, Some(1000)),
            Err(BudgetError::ConnectionsDoNotFit {
                requested: 1000,
                least: 1080,
                limit: 256,
                fits: 176
            })
        );
        assert_eq!(
            budget(256, Some(177)),
            Err(BudgetError::ConnectionsDoNotFit {
                requested: 177,
                least: 257,
                limit: 256,
                fits: 176
            })
        );
    }

    #[test]
    fn a_connection_limit_past_any_descriptor_limit_is_refused_not_overflowed() {
        assert_eq!(descriptors_needed(usize::MAX), u64::MAX);
        assert_eq!(
            budget(1024, Some(usize::MAX)),
            Err(BudgetError::ConnectionsDoNotFit {
                requested: usize::MAX,
                least: u64::MAX,
                limit: 1024,
                fits: 944
            })
        );
    }

    #[test]
    fn a_limit_below_one_connection_and_the_minimums_is_refused() {
        assert_eq!(budget(80, None), Err(BudgetError::LimitTooLow { limit: 80, least: 81 }));
        assert_eq!(budget(80, Some(1)), Err(BudgetError::LimitTooLow { limit: 80, least: 81 }));
        assert_eq!(budget(81, Some(1)).unwrap().max_connections, 1);
    }
}
