//! Waiting on something a test can observe: a file a command wrote, a counter, a process's
//! state, a status. A test never waits a fixed time for something to have happened; it names
//! what it waits for, checks it as often as is cheap, and fails naming it when it does not
//! come within a deadline generous enough for a loaded machine.
//!
//! The deadline only bounds a failure: a condition that holds returns at once, so a long one
//! costs nothing when the test passes.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// The deadline most waits use: far beyond what any condition takes when it holds, on a
/// machine running the whole suite under CPU hogs.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The first pause between two checks; each pause doubles up to [`LONGEST_PAUSE`], so a
/// condition that is almost there is seen at once and a slow one costs few checks.
const FIRST_PAUSE: Duration = Duration::from_millis(1);

/// The longest pause between two checks.
const LONGEST_PAUSE: Duration = Duration::from_millis(20);

/// Waits until `condition` holds; panics naming `what` if it does not within `within`.
pub async fn until(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    until_some(what, within, || condition().then_some(())).await
}

/// Waits until `condition` returns `Some`, and returns what it held; panics naming `what` if
/// it does not within `within`.
pub async fn until_some<T>(
    what: &str,
    within: Duration,
    mut condition: impl FnMut() -> Option<T>,
) -> T {
    until_some_async(what, within, || std::future::ready(condition())).await
}

/// Waits until the asynchronous `condition` holds (each check is awaited before the next);
/// panics naming `what` if it does not within `within`.
pub async fn until_async<F: Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut condition: impl FnMut() -> F,
) {
    until_some_async(what, within, || {
        let check = condition();
        async move { check.await.then_some(()) }
    })
    .await
}

/// Waits until the asynchronous `condition` returns `Some`, and returns what it held; panics
/// naming `what` if it does not within `within`.
pub async fn until_some_async<T, F: Future<Output = Option<T>>>(
    what: &str,
    within: Duration,
    mut condition: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + within;
    let mut pause = FIRST_PAUSE;
    loop {
        if let Some(value) = condition().await {
            return value;
        }
        assert!(Instant::now() < deadline, "waited {within:?} for {what}, in vain");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// The live processes among `pids` once none is, or [`DEADLINE`] has passed (a zombie has
/// ended): for a test to assert that the list is empty, naming what outlived it.
pub async fn still_running_after(pids: &[u32], within: Duration) -> Vec<u32> {
    let alive = || pids.iter().copied().filter(|&pid| crate::process_stats::is_alive(pid));
    let deadline = Instant::now() + within;
    let mut pause = FIRST_PAUSE;
    loop {
        let alive: Vec<u32> = alive().collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}
