//! The bound on output retained in memory by every process of a server together.
//!
//! Each process keeps its own newest output ([`super::RetainedOutput`], 8 MiB by default), and
//! a server may run thousands of processes in hundreds of sessions: without a shared bound,
//! what one client's processes print could take the machine's memory from everyone. One
//! [`OutputBudget`] is shared by every retained buffer of a server. Its accounting is a single
//! atomic counter; no lock is shared between processes on the output path.
//!
//! When the total goes over the limit, **the largest holders give up their oldest output
//! first**: every process is brought down to one common level, the highest at which all of
//! them together fit (a water level). A process holding less than the level keeps everything;
//! the one that printed most pays most. Dropping the oldest output server-wide instead would
//! take a quiet process's only output (the error a build printed an hour ago, that its client
//! has not read yet) because a noisy neighbour prints on, and that is exactly the output a
//! client comes back for.
//!
//! Two parts enforce it:
//! - a process that adds output while the total is over the limit and holds more than the
//!   last level computed sheds its own oldest output down to that level, under its own lock;
//! - a reclaimer task, woken when a push leaves the total over the limit, computes the level
//!   from what every process holds and sheds each one above it, one process's lock at a time.
//!   It reaches processes that hold much and print no more (idle, or exited), which the first
//!   part never would.
//!
//! What is shed goes where a process's own limit sends output: to its spill with
//! `--spill-output-dir` (written at once, so that at most a spill batch per process waits in
//! memory outside the budget), dropped without. A dropped chunk moves the process's
//! `oldestRetainedSeq`, so a reader is told; nothing is lost silently.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

/// Default for the server-wide bound on output retained in memory: 512 MiB.
///
/// A client that reconnects needs from retention only what its connection lost in flight (the
/// connection's 1 MiB output budget plus the kernel's socket buffer, some 5 MiB), which is per
/// connection, not per process; 512 MiB covers a hundred connections dropping at once, and 64
/// processes holding their full 8 MiB each. On a 24 GiB executor it leaves over 97% of the
/// memory to the commands themselves, which is what the machine is for.
pub const DEFAULT_MAX_RETAINED_OUTPUT_BYTES: usize = 512 * 1024 * 1024;

/// Most reclaiming passes one wake-up makes before it waits for the next push: each pass
/// brings every process to the level it computed, so a second is needed only for output
/// added meanwhile, and a push past the limit wakes the reclaimer again anyway.
const PASSES_PER_WAKE: usize = 4;

/// Registered holders at which the registry is first swept of processes that are gone; each
/// sweep doubles the threshold, so the sweeps cost amortised O(1) per start.
const FIRST_SWEEP_AT: usize = 64;

/// A process whose retained output the budget can shed.
pub(crate) trait Holder: Send + Sync {
    /// Bytes it retains in memory now.
    fn held(&self) -> usize;
    /// Lets its oldest output go until it retains at most `level` bytes.
    fn shed_to(self: Arc<Self>, level: usize);
}

/// Output retained in memory by all the processes that share it, and its limit. See the
/// module's documentation.
pub struct OutputBudget {
    limit: usize,
    /// Bytes retained in memory now, by all the buffers counted here.
    held: AtomicUsize,
    /// What a process over the limit keeps at most: the last water level the reclaimer found
    /// (`usize::MAX` until it first runs).
    level: AtomicUsize,
    /// Bytes let go of to stay within the limit, since the server started.
    shed: AtomicU64,
    /// Every process counted here, for the reclaimer. Taken when a process starts and by the
    /// reclaimer, never on the output path.
    holders: Mutex<Holders>,
    /// Wakes the reclaimer.
    pressure: Arc<Notify>,
    reclaimer_started: AtomicBool,
}

#[derive(Default)]
struct Holders {
    list: Vec<Weak<dyn Holder>>,
    sweep_at: usize,
}

impl std::fmt::Debug for OutputBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputBudget")
            .field("limit", &self.limit)
            .field("held", &self.held())
            .finish()
    }
}

impl Default for OutputBudget {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_RETAINED_OUTPUT_BYTES)
    }
}

impl OutputBudget {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            held: AtomicUsize::new(0),
            level: AtomicUsize::new(usize::MAX),
            shed: AtomicU64::new(0),
            holders: Mutex::new(Holders { list: Vec::new(), sweep_at: FIRST_SWEEP_AT }),
            pressure: Arc::new(Notify::new()),
            reclaimer_started: AtomicBool::new(false),
        }
    }

    /// The most output all processes together retain in memory.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Output all processes retain in memory now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Output bytes let go of to stay within the limit so far (dropped, or moved to a spill).
    pub fn shed_bytes(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }

    pub(crate) fn add(&self, bytes: usize) {
        self.held.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn remove(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Counts bytes a process let go of for this budget (already removed from `held`).
    pub(crate) fn count_shed(&self, bytes: usize) {
        self.shed.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// What a process that adds output may keep: `None` while the total is within the limit,
    /// else the last level.
    pub(crate) fn over_limit_level(&self) -> Option<usize> {
        (self.held() > self.limit).then(|| self.level.load(Ordering::Relaxed))
    }

    /// Asks the reclaimer for a pass (the total is over the limit).
    pub(crate) fn wake_reclaimer(&self) {
        self.pressure.notify_one();
    }

    /// Counts a new process for the reclaimer, and starts the reclaimer with the first.
    pub(crate) fn register(self: &Arc<Self>, holder: Weak<dyn Holder>) {
        {
            let mut holders = self.holders.lock().unwrap_or_else(|p| p.into_inner());
            if holders.list.len() >= holders.sweep_at {
                holders.list.retain(|h| h.strong_count() > 0);
                holders.sweep_at = (holders.list.len() * 2).max(FIRST_SWEEP_AT);
            }
            holders.list.push(holder);
        }
        if !self.reclaimer_started.swap(true, Ordering::AcqRel) {
            tokio::spawn(reclaim(Arc::downgrade(self), self.pressure.clone()));
        }
    }

    /// One pass: the level from what every process holds now, and every process above it
    /// brought down to it. Each process's lock is taken on its own, briefly.
    fn reclaim_pass(&self) {
        let holders: Vec<Arc<dyn Holder>> = {
            let mut holders = self.holders.lock().unwrap_or_else(|p| p.into_inner());
            holders.list.retain(|h| h.strong_count() > 0);
            holders.list.iter().filter_map(Weak::upgrade).collect()
        };
        let sizes: Vec<usize> = holders.iter().map(|h| h.held()).collect();
        let Some(level) = water_level(&sizes, self.limit) else { return };
        self.level.store(level, Ordering::Relaxed);
        for (holder, size) in holders.into_iter().zip(sizes) {
            if size > level {
                holder.shed_to(level);
            }
        }
    }
}

impl Drop for OutputBudget {
    fn drop(&mut self) {
        // The reclaimer holds no strong reference: woken, it finds the budget gone and ends.
        self.pressure.notify_one();
    }
}

/// The reclaimer: a pass whenever a push leaves the total over the limit, until the budget is
/// gone.
async fn reclaim(budget: Weak<OutputBudget>, pressure: Arc<Notify>) {
    loop {
        pressure.notified().await;
        let Some(budget) = budget.upgrade() else { return };
        for _ in 0..PASSES_PER_WAKE {
            if budget.held() <= budget.limit {
                break;
            }
            budget.reclaim_pass();
        }
    }
}

/// The highest level at which holders of `sizes`, each keeping at most the level, fit within
/// `limit` together; `None` when they fit already.
fn water_level(sizes: &[usize], limit: usize) -> Option<usize> {
    let total: usize = sizes.iter().sum();
    if total <= limit {
        return None;
    }
    let mut ascending = sizes.to_vec();
    ascending.sort_unstable();
    let mut room = limit;
    for (at, &size) in ascending.iter().enumerate() {
        let share = room / (ascending.len() - at);
        if size > share {
            return Some(share);
        }
        room -= size;
    }
    Some(room)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_level_spares_small_holders_and_levels_large_ones() {
        assert_eq!(water_level(&[10, 20], 30), None);
        // 5 fits whole; the other two share what is left.
        assert_eq!(water_level(&[5, 100, 100], 45), Some(20));
        assert_eq!(water_level(&[100, 100, 100, 100], 100), Some(25));
        assert_eq!(water_level(&[1, 2, 1000], 10), Some(7));
        assert_eq!(water_level(&[50, 50], 0), Some(0));
    }

    struct Fake(Mutex<usize>);

    impl Holder for Fake {
        fn held(&self) -> usize {
            *self.0.lock().unwrap()
        }
        fn shed_to(self: Arc<Self>, level: usize) {
            let mut held = self.0.lock().unwrap();
            *held = (*held).min(level);
        }
    }

    #[tokio::test]
    async fn a_pass_brings_every_holder_to_the_level() {
        let budget = Arc::new(OutputBudget::new(60));
        let holders: Vec<Arc<Fake>> =
            [10, 100, 40].into_iter().map(|n| Arc::new(Fake(Mutex::new(n)))).collect();
        for holder in &holders {
            let holder: Arc<dyn Holder> = holder.clone();
            budget.register(Arc::downgrade(&holder));
        }
        budget.reclaim_pass();
        let held: Vec<usize> = holders.iter().map(|h| h.held()).collect();
        assert_eq!(held, [10, 25, 25]);
        assert_eq!(budget.level.load(Ordering::Relaxed), 25);
    }
}
