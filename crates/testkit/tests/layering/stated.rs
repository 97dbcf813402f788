//! The orders ARCHITECTURE.md states between a crate's top-level modules, each bottom up: a
//! module may import from its own rank and those below it, never from one above.
//!
//! Each order is written here as the document states it, with the words that open the passage
//! stating it; the document is checked to still list the modules in that order, so neither can
//! change without the other.

use std::collections::BTreeMap;

use crate::circles::Edges;
use crate::tree::Crate;

pub struct StatedOrder {
    /// The crate's directory under `crates/`.
    pub krate: &'static str,
    /// The words of ARCHITECTURE.md that open the passage stating the order…
    pub opens: &'static str,
    /// …and those that end it.
    pub ends: &'static str,
    /// The ranks, bottom up.
    pub ranks: &'static [&'static [&'static str]],
}

pub const STATED_ORDERS: &[StatedOrder] = &[
    StatedOrder {
        krate: "engine",
        opens: "`fs`, `capabilities` and `helper` import one way",
        ends: ".",
        ranks: &[&["fs"], &["capabilities"], &["helper"]],
    },
    StatedOrder {
        krate: "engine",
        opens: "`proc_stat`:",
        ends: "for it.",
        ranks: &[&["proc_stat"], &["process", "sandbox"]],
    },
    StatedOrder {
        krate: "server",
        opens: "Modules import one way, in this order:",
        ends: ".\n",
        ranks: &[
            &["config", "auth", "jwt", "managed_network", "metrics", "rpc_error"],
            &["transport"],
            &["session"],
            &["registry"],
            &["state"],
            &["drain"],
            &["signals"],
            &["handlers"],
            &["processor"],
            &["serve"],
        ],
    },
    StatedOrder {
        krate: "client",
        opens: "Modules bottom up (each imports only from those above it in",
        ends: "\n\n",
        ranks: &[
            &["error", "flow", "reorder", "reconcile", "tls", "options"],
            &["calls"],
            &["reader"],
            &["connection"],
            &["registration"],
            &["http_streams"],
            &["session"],
            &["catch_up"],
            &["recovery"],
            &["router"],
            &["starts"],
            &["process"],
            &["client"],
            &["fs_errors"],
            &["remote_exec", "remote_fs", "remote_http", "remote_write_stream"],
            &["environment"],
        ],
    },
];

impl StatedOrder {
    /// What the document no longer says of this order: the passage is gone, or does not name
    /// the ranked modules (in backticks) in their order.
    pub fn unstated_in(&self, document: &str) -> Option<String> {
        let Some(start) = document.find(self.opens) else {
            return Some(format!("no passage opens with {:?}", self.opens));
        };
        let passage = &document[start..];
        let passage = &passage[..passage.find(self.ends).map_or(passage.len(), |end| end)];
        let named: Vec<&str> = passage.split('`').skip(1).step_by(2).collect();
        let mut rest = named.iter();
        for &module in self.ranks.iter().flat_map(|rank| rank.iter()) {
            if !rest.any(|name| *name == module) {
                return Some(format!(
                    "the passage opening with {:?} does not name `{module}` where this order \
                     has it",
                    self.opens
                ));
            }
        }
        None
    }

    /// Each edge between top-level modules of `krate` that climbs this order, described; and
    /// each ranked module the crate does not have.
    pub fn broken_in(&self, krate: &Crate, edges: &Edges) -> Vec<String> {
        let top = &krate.modules[0].children;
        let rank: BTreeMap<&str, usize> = self
            .ranks
            .iter()
            .enumerate()
            .flat_map(|(at, modules)| modules.iter().map(move |module| (*module, at)))
            .collect();
        let mut broken: Vec<String> = rank
            .keys()
            .filter(|module| !top.contains_key(**module))
            .map(|module| format!("no top-level module `{module}`"))
            .collect();
        for ((from, to), why) in edges {
            let (Some(from_name), Some(to_name)) =
                (top_level_name(krate, *from), top_level_name(krate, *to))
            else {
                continue;
            };
            if let (Some(low), Some(high)) = (rank.get(from_name), rank.get(to_name))
                && low < high
            {
                broken.push(format!("`{from_name}` imports `{to_name}`, above it: {why}"));
            }
        }
        broken
    }
}

/// The name of `module` when it is a top-level module.
fn top_level_name(krate: &Crate, module: usize) -> Option<&str> {
    let path = &krate.modules[module].path;
    (path.len() == 1).then(|| path[0].as_str())
}
