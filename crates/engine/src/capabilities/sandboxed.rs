//! Discovery inside a sandbox: the work `capabilityRoots/discoverV1` and
//! `capabilities/discoverV2` hand to a helper when the caller's intent hides something, so
//! discovery sees what a command under that intent would. The helper mode is `discover`
//! (`tether __tether-sandbox … discover`); the transport, the mounts and the answer are the fs
//! helper's ([`crate::fs::sandboxed`]), which this module plugs into as one more
//! [`HelperOp`].

use std::io;

use serde::{Deserialize, Serialize};
use tether_protocol::PathUri;

use super::inventory::{Locations, inventory};
use super::scan::{MAX_ROOT_BYTES, ROOT_RULES, scan_root};
use crate::fs::sandboxed::{HelperOp, Outcome};

/// One discovery, as the helper receives it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub(crate) enum DiscoveryOp {
    /// Scans one capability root (`capabilityRoots/discoverV1`).
    Root { id: String, path: PathUri },
    /// Inventories the installed plugins and skills (`capabilities/discoverV2`).
    Inventory { locations: Locations },
}

impl HelperOp for DiscoveryOp {
    const MODE: &'static str = "discover";
    /// A root's files: 16 MiB of text, escaped at up to six bytes a byte, and its paths. An
    /// inventory's answer is bounded at 4 MiB, below it.
    const MAX_ANSWER_BYTES: usize = MAX_ROOT_BYTES as usize * 6 + 4 * 1024 * 1024;

    fn apply(self) -> io::Result<Outcome> {
        Ok(match self {
            DiscoveryOp::Root { id, path } => {
                Outcome::Root(Box::new(scan_root(id, path, ROOT_RULES)))
            }
            DiscoveryOp::Inventory { locations } => {
                Outcome::Inventory(Box::new(inventory(&locations)))
            }
        })
    }
}

/// The `discover` helper: one discovery from stdin, its answer on stdout. Never returns.
pub(crate) fn serve_one() -> ! {
    crate::fs::sandboxed::serve_one::<DiscoveryOp>()
}
