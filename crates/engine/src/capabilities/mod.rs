//! What is installed on the executor for Codex: skills and plugins.
//!
//! - [`discover_roots`] (`capabilityRoots/discoverV1`): the raw capability files under roots the
//!   client names, one bounded [`scan`] per root.
//! - [`discover_installed`] (`capabilities/discoverV2`): the parsed [`inventory`](mod@inventory) of the
//!   executor's plugin cache ([`plugin_cache`]) and skill roots, with each skill's
//!   [`front_matter`] and [`skill_metadata`].
//!
//! Both only read, and every read is bounded. Under a sandbox intent that hides something the
//! work runs in the fs helper inside that sandbox, so discovery sees what a command would.

mod cache;
mod front_matter;
mod inventory;
mod plugin_cache;
pub(crate) mod sandboxed;
mod scan;
mod skill_metadata;

use std::sync::Arc;

use tether_protocol::capabilities::{
    CAPABILITY_ROOTS_MAX, CapabilityRootDiscovery, CapabilityRootRequest, DiscoverRootsParams,
    DiscoverRootsResponse, DiscoverV2Params, DiscoverV2Response,
};

pub use cache::InventoryCache;
use inventory::Locations;

use crate::codex_config::Sources;
use crate::fs::FsError;
use crate::fs::blocking::blocking;
use crate::fs::request::{Admission, Work, admit};
use sandboxed::DiscoveryOp;

/// The encoded size of one `capabilityRoots/discoverV1` answer, so it stays one frame below
/// the 64 MiB message bound whatever the roots hold: a root that would pass it is answered
/// with an error instead of its files.
pub const MAX_ROOTS_RESPONSE_BYTES: usize = 48 * 1024 * 1024;

/// Why discovery gave no answer at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DiscoveryError {
    pub kind: DiscoveryErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryErrorKind {
    /// More roots than [`CAPABILITY_ROOTS_MAX`]: `-32600`.
    TooManyRoots,
    /// A sandbox intent that cannot apply here: `-32602`.
    InvalidParams,
    /// The work itself failed (the sandbox helper could not run): `-32603`.
    Failed,
}

impl From<FsError> for DiscoveryError {
    fn from(error: FsError) -> Self {
        let kind = match error.kind {
            crate::fs::FsErrorKind::InvalidInput => DiscoveryErrorKind::InvalidParams,
            _ => DiscoveryErrorKind::Failed,
        };
        DiscoveryError { kind, message: error.message }
    }
}

/// `capabilities/discoverV2`: the executor's installed plugins and standalone skills, from
/// `cache` unless an intent confines the reads (each confined call reads afresh, in the
/// sandbox).
pub async fn discover_installed(
    params: DiscoverV2Params,
    sources: &Sources,
    cache: &Arc<InventoryCache>,
) -> Result<Arc<DiscoverV2Response>, DiscoveryError> {
    let locations = Locations::of(sources);
    match admit(params.sandbox.as_ref(), Work::Read)? {
        Admission::InProcess => {
            let cache = Arc::clone(cache);
            Ok(blocking(move || Ok(cache.inventory(&locations))).await?)
        }
        confined => Ok(Arc::new(confined.perform(DiscoveryOp::Inventory { locations }).await?)),
    }
}

/// `capabilities/discoverV2` answered at once, from `cache`, when it holds the inventory and
/// the intent lets it be read in-process; `None` when the call must go to
/// [`discover_installed`] (a first call, a change since, a confined read, another call reading
/// now). Never blocks, so a server may answer on the connection's own thread, without the hop
/// to the blocking pool that most of a kept answer's time was.
pub fn discover_installed_now(
    params: &DiscoverV2Params,
    sources: &Sources,
    cache: &InventoryCache,
) -> Option<Arc<DiscoverV2Response>> {
    let Ok(Admission::InProcess) = admit(params.sandbox.as_ref(), Work::Read) else {
        return None;
    };
    cache.current(&Locations::of(sources))
}

/// `capabilityRoots/discoverV1`: each root's files, in the request's order. A root that cannot
/// be read, or whose sandbox cannot apply, carries its own `error`; only too many roots fail
/// the call. Roots run one after another, so a connection that goes away stops the work at the
/// next root.
pub async fn discover_roots(
    params: DiscoverRootsParams,
) -> Result<DiscoverRootsResponse, DiscoveryError> {
    if params.roots.len() > CAPABILITY_ROOTS_MAX {
        return Err(DiscoveryError {
            kind: DiscoveryErrorKind::TooManyRoots,
            message: format!(
                "capability root discovery accepts at most {CAPABILITY_ROOTS_MAX} roots"
            ),
        });
    }
    let mut roots = Vec::with_capacity(params.roots.len());
    let mut budget = MAX_ROOTS_RESPONSE_BYTES;
    for root in params.roots {
        let discovered = discover_root(root).await;
        match budget.checked_sub(encoded_len(&discovered)) {
            Some(left) => {
                budget = left;
                roots.push(discovered);
            }
            None => roots.push(over_budget(discovered)),
        }
    }
    Ok(DiscoverRootsResponse { roots })
}

async fn discover_root(root: CapabilityRootRequest) -> CapabilityRootDiscovery {
    let CapabilityRootRequest { id, path, sandbox } = root;
    let failed = |id: String, path: tether_protocol::PathUri, error: FsError| {
        let message = format!("failed to inspect capability root {path}: {}", error.message);
        CapabilityRootDiscovery { error: Some(message), ..CapabilityRootDiscovery::empty(id, path) }
    };
    let admission = match admit(sandbox.as_ref(), Work::Read) {
        Ok(admission) => admission,
        Err(error) => return failed(id, path, error),
    };
    let op = DiscoveryOp::Root { id: id.clone(), path: path.clone() };
    match admission.perform::<_, CapabilityRootDiscovery>(op).await {
        Ok(discovered) => discovered,
        Err(error) => failed(id, path, error),
    }
}

/// A root whose files would not fit in the answer: its error says so, and nothing else is kept.
fn over_budget(discovered: CapabilityRootDiscovery) -> CapabilityRootDiscovery {
    let message = format!(
        "capability root {} was not returned: the answer would exceed its \
         {MAX_ROOTS_RESPONSE_BYTES}-byte limit; ask for fewer roots at once",
        discovered.path
    );
    let empty = CapabilityRootDiscovery::empty(discovered.id, discovered.path);
    CapabilityRootDiscovery { error: Some(message), ..empty }
}

/// What `value` costs in an answer: its JSON length, and a separator. Counted without building
/// the text (a root may hold 16 MiB of it).
pub(crate) fn encoded_len(value: &impl serde::Serialize) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0 + 1,
        Err(_) => usize::MAX,
    }
}
