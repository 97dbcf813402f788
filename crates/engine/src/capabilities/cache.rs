//! The `capabilities/discoverV2` inventory, kept between calls for as long as nothing it was
//! read from changes.
//!
//! Codex asks at every session start, and the inventory reads every skill and plugin file, so
//! answering from memory is what makes the call cheap. The answer is only ever reused while an
//! inotify watch on every directory it depends on has seen nothing: any creation, removal,
//! rename, write or attribute change there, or a lost event, drops it, and the next call reads
//! everything again. Staleness is impossible by construction, not by timeout:
//!
//! 1. a first scan learns which directories the answer depends on;
//! 2. each gets a watch;
//! 3. a second scan, entirely under those watches, builds the answer that is kept — only if it
//!    depended on no directory left unwatched and no event arrived meanwhile.
//!
//! A tree too large to watch (past [`MAX_WATCHED_DIRECTORIES`]), or a host without inotify,
//! is simply read on every call.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustix::fd::OwnedFd;
use rustix::fs::inotify;
use tether_protocol::capabilities::DiscoverV2Response;

use super::inventory::{Locations, inventory_noting};

/// Directories one cached inventory may watch. A realistic executor has a few hundred (50
/// skills, a few plugins); the bound keeps a huge tree from using up the user's inotify
/// watches, which other programs on the executor need too.
pub const MAX_WATCHED_DIRECTORIES: usize = 4096;

/// What changes drop the inventory: anything that could change what a scan reads.
fn changes() -> inotify::WatchFlags {
    use inotify::WatchFlags as W;
    W::CREATE
        | W::DELETE
        | W::MODIFY
        | W::CLOSE_WRITE
        | W::ATTRIB
        | W::MOVED_FROM
        | W::MOVED_TO
        | W::DELETE_SELF
        | W::MOVE_SELF
        | W::ONLYDIR
}

/// One server's kept inventory.
#[derive(Default)]
pub struct InventoryCache {
    kept: Mutex<Option<Kept>>,
}

struct Kept {
    locations: Locations,
    /// Shared with the answers made from it: a reused inventory is not copied.
    inventory: Arc<DiscoverV2Response>,
    watch: Watch,
}

impl std::fmt::Debug for InventoryCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InventoryCache")
    }
}

impl InventoryCache {
    /// The inventory of `locations`, from memory when nothing changed since it was read.
    /// Blocks (it may read the whole tree): call it from the blocking pool.
    pub(crate) fn inventory(&self, locations: &Locations) -> Arc<DiscoverV2Response> {
        let mut kept = self.kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(inventory) = still_current(&mut kept, locations) {
            return inventory;
        }
        let mut learned = Vec::new();
        let first = inventory_noting(locations, &mut learned);
        let Some(watch) = Watch::on(learned) else { return Arc::new(first) };
        let mut read = Vec::new();
        let inventory = Arc::new(inventory_noting(locations, &mut read));
        if read.iter().all(|dir| watch.watched.contains(dir)) && !watch.saw_changes() {
            *kept = Some(Kept {
                locations: locations.clone(),
                inventory: Arc::clone(&inventory),
                watch,
            });
        }
        inventory
    }

    /// The kept inventory of `locations` if nothing changed since it was read; `None` when it
    /// must be read, or while another call holds the cache (reading the tree, perhaps). Never
    /// blocks — its check is one non-blocking read of the watch — so a connection's own thread
    /// may ask, and only go to the blocking pool when the answer is not at hand.
    pub(crate) fn current(&self, locations: &Locations) -> Option<Arc<DiscoverV2Response>> {
        let mut kept = match self.kept.try_lock() {
            Ok(kept) => kept,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        still_current(&mut kept, locations)
    }
}

/// The kept inventory, if it is of `locations` and its watch has seen nothing. One whose
/// watch saw a change is forgotten: its events are read now, and a later look would find none.
fn still_current(
    kept: &mut Option<Kept>,
    locations: &Locations,
) -> Option<Arc<DiscoverV2Response>> {
    let current = kept.as_ref().filter(|current| current.locations == *locations)?;
    if current.watch.saw_changes() {
        *kept = None;
        return None;
    }
    Some(Arc::clone(&current.inventory))
}

/// An inotify instance watching a set of directories.
struct Watch {
    fd: OwnedFd,
    watched: HashSet<PathBuf>,
}

impl Watch {
    /// Watches every directory in `directories`; none when there are too many or a watch
    /// cannot be added (a directory already gone is left out: the answer that depends on it
    /// will not be kept).
    fn on(directories: Vec<PathBuf>) -> Option<Watch> {
        let unique: HashSet<PathBuf> = directories.into_iter().collect();
        if unique.len() > MAX_WATCHED_DIRECTORIES {
            return None;
        }
        let fd =
            inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).ok()?;
        let mut watched = HashSet::with_capacity(unique.len());
        for dir in unique {
            match inotify::add_watch(&fd, &dir, changes()) {
                Ok(_) => {
                    watched.insert(dir);
                }
                Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => {}
                Err(_) => return None,
            }
        }
        Some(Watch { fd, watched })
    }

    /// Whether any event (or an overflow, which is one) has arrived.
    fn saw_changes(&self) -> bool {
        let mut buffer = [std::mem::MaybeUninit::uninit(); 1024];
        let mut reader = inotify::Reader::new(&self.fd, &mut buffer);
        reader.next().is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locations(root: &std::path::Path) -> Locations {
        Locations {
            codex_home: root.join("codex"),
            home: Some(root.join("home")),
            system_dir: root.join("etc"),
        }
    }

    fn skill(root: &std::path::Path, dir: &str, description: &str) {
        let dir = root.join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: s\ndescription: {description}\n---\n"),
        )
        .unwrap();
    }

    fn descriptions(inventory: &DiscoverV2Response) -> Vec<String> {
        inventory.skills.iter().map(|skill| skill.description.clone()).collect()
    }

    #[test]
    fn every_change_under_a_location_is_seen_by_the_next_call() {
        let root =
            std::env::temp_dir().join(format!("tether-inventory-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("codex")).unwrap();
        let cache = InventoryCache::default();
        let at = locations(&root);
        assert!(cache.inventory(&at).skills.is_empty());
        assert!(cache.kept.lock().unwrap().is_some(), "an empty inventory is kept too");

        // A skill root that did not exist, created.
        skill(&root, "codex/skills/a", "first");
        assert_eq!(descriptions(&cache.inventory(&at)), ["first"]);
        // A file rewritten in place.
        skill(&root, "codex/skills/a", "edited");
        assert_eq!(descriptions(&cache.inventory(&at)), ["edited"]);
        // Deep below, and in the other roots.
        skill(&root, "codex/skills/a/b/c", "deep");
        skill(&root, "home/.agents/skills/x", "agents");
        assert_eq!(descriptions(&cache.inventory(&at)), ["edited", "deep", "agents"]);
        // Unchanged: the kept answer, at hand without a read.
        let kept = cache.current(&at).expect("kept");
        assert_eq!(descriptions(&kept), ["edited", "deep", "agents"]);
        assert!(Arc::ptr_eq(&kept, &cache.inventory(&at)), "the kept answer, not a copy");
        // Not while another call holds the cache: that call may be reading the tree.
        {
            let _held = cache.kept.lock().unwrap();
            assert!(cache.current(&at).is_none());
        }
        // Nor for other locations.
        assert!(cache.current(&locations(&root.join("elsewhere"))).is_none());
        // Removed: not at hand any more, however often asked, until read again.
        assert!(cache.current(&at).is_some());
        std::fs::remove_dir_all(root.join("codex/skills/a/b")).unwrap();
        assert!(cache.current(&at).is_none());
        assert!(cache.current(&at).is_none(), "a change seen once is not forgotten");
        assert_eq!(descriptions(&cache.inventory(&at)), ["edited", "agents"]);
        // Renamed away, and a plugin installed.
        std::fs::rename(root.join("codex/skills"), root.join("codex/old-skills")).unwrap();
        let plugin = root.join("codex/plugins/cache/m/p/1.0.0/.codex-plugin");
        std::fs::create_dir_all(&plugin).unwrap();
        std::fs::write(plugin.join("plugin.json"), "{\"name\":\"p\"}").unwrap();
        let inventory = cache.inventory(&at);
        assert_eq!(descriptions(&inventory), ["agents"]);
        assert_eq!(inventory.plugins.len(), 1);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
