//! Counters a test reads to learn what actually reached the server, rather than trusting what
//! the client under test reports about itself.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::Serialize;

/// Shared by the HTTP gate (request counts, `Authorization`) and every session's handler
/// (`initialize` count), so one snapshot covers both layers.
#[derive(Debug, Default)]
pub struct Stats {
    initializes: AtomicU64,
    posts: AtomicU64,
    deletes: AtomicU64,
    gets: AtomicU64,
    authorization_seen: AtomicBool,
    /// Runs of the `count_calls` tool. Process-wide, not per session: a test that reconnects
    /// or re-initializes still learns whether one `tools/call` ran once or twice, and a test
    /// can wait for a call to have run whatever became of its answer.
    count_calls: AtomicU64,
    /// `POST /control/release` lets the waiting (or the next) `held` call answer.
    releases: tokio::sync::Notify,
}

/// The body of `GET /control/stats`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatsSnapshot {
    pub initializes: u64,
    pub posts: u64,
    pub deletes: u64,
    pub gets: u64,
    pub authorization_seen: bool,
    pub count_calls: u64,
}

impl Stats {
    /// Lets one `held` call answer.
    pub fn release(&self) {
        self.releases.notify_one();
    }

    /// Waits for a release.
    pub async fn wait_for_release(&self) {
        self.releases.notified().await;
    }

    /// Counts one run of `count_calls`; how many there have been, this one included.
    pub fn count_call(&self) -> u64 {
        self.count_calls.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Counted by the handler, so it covers `initialize` requests on any transport.
    pub fn record_initialize(&self) {
        self.initializes.fetch_add(1, Ordering::SeqCst);
    }

    /// Records one HTTP request to the MCP endpoint, before any check can turn it away: a test
    /// asking "did the client retry?" wants every attempt, rejected or not.
    pub fn record_request(&self, method: &axum::http::Method, has_authorization: bool) {
        use axum::http::Method;
        let counter = match *method {
            Method::POST => Some(&self.posts),
            Method::DELETE => Some(&self.deletes),
            Method::GET => Some(&self.gets),
            _ => None,
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::SeqCst);
        }
        if has_authorization {
            self.authorization_seen.store(true, Ordering::SeqCst);
        }
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            initializes: self.initializes.load(Ordering::SeqCst),
            posts: self.posts.load(Ordering::SeqCst),
            deletes: self.deletes.load(Ordering::SeqCst),
            gets: self.gets.load(Ordering::SeqCst),
            authorization_seen: self.authorization_seen.load(Ordering::SeqCst),
            count_calls: self.count_calls.load(Ordering::SeqCst),
        }
    }
}
