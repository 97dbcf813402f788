//! A client's streamed `http/request` bodies: a fresh `requestId` per stream (`http-<n>`),
//! its route registered before the request is sent so no delta can arrive for a stream the
//! client does not know yet, each `http/request/bodyDelta` handed to its stream
//! ([`HttpStreams::deliver`]) which checks the frames are numbered contiguously and ends it at
//! the terminal frame (cleanly, or with the error the frame carries). Deltas for an id nobody
//! follows (a stream dropped early) are ignored. A stream cannot be resumed — the server's
//! stream ends with its connection — so when its connection drops the stream fails at once,
//! never ending as if the body were whole. Bounded: [`MAX_QUEUED_BODY_DELTAS`] per stream,
//! [`MAX_QUEUED_HTTP_BODY_BYTES`] for all of them.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use serde_json::Value;
use tether_engine::http::HttpBodyError;
use tether_protocol::http::{
    HTTP_BODY_DELTA_MAX_BASE64_LEN, HTTP_BODY_DELTA_MAX_BYTES, HttpRequestBodyDeltaNotification,
};
use tokio::sync::Notify;
use tracing::warn;

/// Most deltas one stream holds before its reader takes them. The server sends a stream's
/// deltas no faster than the connection carries them, so only a reader that stopped reading
/// fills this; its stream then fails rather than holding the connection's memory.
pub const MAX_QUEUED_BODY_DELTAS: usize = 256;

/// Most body bytes all of a client's streams hold, together, before their readers take them:
/// sixteen full deltas. Past it, the stream whose delta did not fit fails.
pub const MAX_QUEUED_HTTP_BODY_BYTES: usize = 16 * 1024 * 1024;

/// A client's streamed bodies in progress, by request id.
#[derive(Default)]
pub(crate) struct HttpStreams {
    next_id: AtomicU64,
    routes: Arc<Mutex<HashMap<String, Arc<Stream>>>>,
    /// Body bytes queued in every stream, against [`MAX_QUEUED_HTTP_BODY_BYTES`].
    queued_bytes: Arc<AtomicUsize>,
}

impl HttpStreams {
    /// `http-<n>`, from 1. Never reused while the client lives, so a late delta of an
    /// abandoned stream can never be taken for a new stream's.
    pub(crate) fn next_request_id(&self) -> String {
        format!("http-{}", self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Routes `request_id`'s deltas to the returned body, which removes the route when
    /// dropped.
    pub(crate) fn register(&self, request_id: &str, generation: u64) -> Body {
        let stream = Arc::new(Stream {
            request_id: request_id.to_owned(),
            generation,
            state: Mutex::new(StreamState { next_seq: 1, queue: VecDeque::new(), end: None }),
            wake: Notify::new(),
        });
        lock(&self.routes).insert(request_id.to_owned(), stream.clone());
        Body { stream, routes: self.routes.clone(), queued_bytes: self.queued_bytes.clone() }
    }

    /// Takes one `http/request/bodyDelta`'s params (from the connection's router). Returns
    /// `Err` for a delta larger than any server may send: a protocol violation, after which
    /// the connection that carried it is not to be trusted (its stream has failed already).
    pub(crate) fn deliver(&self, params: Value) -> Result<(), String> {
        // Checked before decoding: a frame too big to be one delta is not decoded at all.
        let text_len = params.get("deltaBase64").and_then(Value::as_str).map_or(0, str::len);
        if text_len > HTTP_BODY_DELTA_MAX_BASE64_LEN {
            let id = params.get("requestId").and_then(Value::as_str).unwrap_or_default();
            let stream = lock(&self.routes).get(id).cloned();
            let violation = format!(
                "http/request body delta of {text_len} base64 characters exceeds the {HTTP_BODY_DELTA_MAX_BYTES}-byte limit"
            );
            if let Some(stream) = stream {
                stream.end(Err(violation.clone()));
                self.unroute(&stream);
            }
            return Err(violation);
        }
        match serde_json::from_value::<HttpRequestBodyDeltaNotification>(params) {
            Ok(delta) => self.deliver_decoded(delta),
            Err(error) => warn!(%error, "malformed http/request/bodyDelta ignored"),
        }
        Ok(())
    }

    /// Takes one delta already decoded (by the connection's fast path,
    /// `HttpRequestBodyDeltaNotification::from_frame`, which leaves a delta too long to be one
    /// to [`Self::deliver`]).
    pub(crate) fn deliver_decoded(&self, delta: HttpRequestBodyDeltaNotification) {
        let Some(stream) = lock(&self.routes).get(&delta.request_id).cloned() else { return };
        if stream.push(delta, &self.queued_bytes) {
            self.unroute(&stream);
        }
    }

    /// Fails every stream of connection `generation`: it is gone, and their bodies with it.
    pub(crate) fn connection_closed(&self, generation: u64, reason: &str) {
        let ended: Vec<Arc<Stream>> = lock(&self.routes)
            .values()
            .filter(|stream| stream.generation == generation)
            .cloned()
            .collect();
        for stream in ended {
            stream.end(Err(format!(
                "exec-server connection dropped ({reason}); a streamed http/request body cannot be resumed"
            )));
            self.unroute(&stream);
        }
    }

    fn unroute(&self, stream: &Arc<Stream>) {
        unroute(&self.routes, stream);
    }
}

fn unroute(routes: &Mutex<HashMap<String, Arc<Stream>>>, stream: &Arc<Stream>) {
    let mut routes = lock(routes);
    if routes.get(&stream.request_id).is_some_and(|current| Arc::ptr_eq(current, stream)) {
        routes.remove(&stream.request_id);
    }
}

/// One stream, shared by the router (which fills it) and its [`Body`] (which drains it).
struct Stream {
    request_id: String,
    /// The connection the request went out on; the stream ends with it.
    generation: u64,
    state: Mutex<StreamState>,
    /// Woken when a delta or the end arrives. One reader, so a stored permit is never lost.
    wake: Notify,
}

struct StreamState {
    next_seq: u64,
    queue: VecDeque<Bytes>,
    /// Set once the stream's end is known. What was queued before it is still read first.
    end: Option<Result<(), String>>,
}

impl Stream {
    /// Queues a delta, or ends the stream; returns whether it has ended.
    fn push(&self, delta: HttpRequestBodyDeltaNotification, queued_bytes: &AtomicUsize) -> bool {
        let mut state = lock(&self.state);
        let ended = push(&mut state, delta, queued_bytes);
        drop(state);
        self.wake.notify_one();
        ended
    }

    fn end(&self, outcome: Result<(), String>) {
        lock(&self.state).end.get_or_insert(outcome);
        self.wake.notify_one();
    }
}

fn push(
    state: &mut StreamState,
    delta: HttpRequestBodyDeltaNotification,
    queued_bytes: &AtomicUsize,
) -> bool {
    if state.end.is_some() {
        return true;
    }
    let failure = if delta.seq != state.next_seq {
        Some(format!(
            "http/request body delta out of order: received seq {}, expected {}",
            delta.seq, state.next_seq
        ))
    } else if delta.delta_base64.len() > HTTP_BODY_DELTA_MAX_BYTES {
        Some(format!(
            "http/request body delta of {} bytes exceeds the {HTTP_BODY_DELTA_MAX_BYTES}-byte limit",
            delta.delta_base64.len()
        ))
    } else if !delta.delta_base64.is_empty() && state.queue.len() >= MAX_QUEUED_BODY_DELTAS {
        Some("body delta channel filled before delivery".to_owned())
    } else {
        None
    };
    if let Some(failure) = failure {
        state.end = Some(Err(failure));
        return true;
    }
    state.next_seq += 1;
    let chunk = delta.delta_base64.into_bytes();
    if !chunk.is_empty() {
        let len = chunk.len();
        let before = queued_bytes.fetch_add(len, Ordering::AcqRel);
        if before + len > MAX_QUEUED_HTTP_BODY_BYTES {
            queued_bytes.fetch_sub(len, Ordering::AcqRel);
            state.end =
                Some(Err(format!("queued body deltas exceed {MAX_QUEUED_HTTP_BODY_BYTES} bytes")));
            return true;
        }
        state.queue.push_back(chunk);
    }
    if delta.done {
        state.end = Some(delta.error.map_or(Ok(()), Err));
        return true;
    }
    false
}

/// The reading end of a stream.
pub(crate) struct Body {
    stream: Arc<Stream>,
    routes: Arc<Mutex<HashMap<String, Arc<Stream>>>>,
    queued_bytes: Arc<AtomicUsize>,
}

impl Body {
    /// The next chunk; `None` after a clean end; an error (once) after a failed one.
    pub(crate) async fn next(&self) -> Option<Result<Bytes, HttpBodyError>> {
        loop {
            {
                let mut state = lock(&self.stream.state);
                if let Some(chunk) = state.queue.pop_front() {
                    self.queued_bytes.fetch_sub(chunk.len(), Ordering::AcqRel);
                    return Some(Ok(chunk));
                }
                match &state.end {
                    Some(Ok(())) => return None,
                    Some(Err(error)) => return Some(Err(HttpBodyError(error.clone()))),
                    None => {}
                }
            }
            self.stream.wake.notified().await;
        }
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        unroute(&self.routes, &self.stream);
        let mut state = lock(&self.stream.state);
        // Ended, so a delta the router took before the route went is not queued (and counted
        // against the budget) for nobody.
        state.end.get_or_insert(Ok(()));
        let held: usize = state.queue.drain(..).map(|chunk| chunk.len()).sum();
        self.queued_bytes.fetch_sub(held, Ordering::AcqRel);
    }
}

/// Critical sections here are queue and map updates that cannot panic halfway: a poisoned lock
/// still guards consistent data.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tether_protocol::ByteChunk;

    use super::*;

    fn delta(id: &str, seq: u64, bytes: &[u8], done: bool, error: Option<&str>) -> Value {
        serde_json::to_value(HttpRequestBodyDeltaNotification {
            request_id: id.to_owned(),
            seq,
            delta_base64: ByteChunk::from(bytes),
            done,
            error: error.map(String::from),
        })
        .unwrap()
    }

    /// Everything the body yields, as text: `data`, or `error: …` last.
    async fn read(body: &Body) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let next = tokio::time::timeout(Duration::from_secs(5), body.next());
            match next.await.expect("the body ends") {
                Some(Ok(chunk)) => seen.push(String::from_utf8_lossy(&chunk).into_owned()),
                Some(Err(error)) => {
                    seen.push(format!("error: {error}"));
                    return seen;
                }
                None => return seen,
            }
        }
    }

    #[test]
    fn request_ids_are_fresh_for_every_stream() {
        let streams = HttpStreams::default();
        assert_eq!([streams.next_request_id(), streams.next_request_id()], ["http-1", "http-2"]);
    }

    #[tokio::test]
    async fn deltas_come_out_in_order_and_end_cleanly_at_done() {
        let streams = HttpStreams::default();
        let body = streams.register("http-1", 1);
        let _ = streams.deliver(delta("http-1", 1, b"one ", false, None));
        let _ = streams.deliver(delta("http-1", 2, b"two", false, None));
        let _ = streams.deliver(delta("http-1", 3, b"", true, None));

        assert_eq!(read(&body).await, ["one ", "two"]);
        assert!(lock(&streams.routes).is_empty(), "the route goes with the terminal frame");
    }

    #[tokio::test]
    async fn a_terminal_error_fails_the_stream_after_what_came_before() {
        let streams = HttpStreams::default();
        let body = streams.register("http-1", 1);
        let _ = streams.deliver(delta("http-1", 1, b"partial", false, None));
        let _ =
            streams.deliver(delta("http-1", 2, b"", true, Some("error decoding response body")));

        assert_eq!(read(&body).await, ["partial", "error: error decoding response body"]);
    }

    #[tokio::test]
    async fn a_gap_or_an_oversized_delta_fails_the_stream() {
        let streams = HttpStreams::default();
        let gap = streams.register("http-1", 1);
        let _ = streams.deliver(delta("http-1", 1, b"a", false, None));
        let _ = streams.deliver(delta("http-1", 3, b"c", false, None));
        let expected = "error: http/request body delta out of order: received seq 3, expected 2";
        assert_eq!(read(&gap).await, ["a", expected]);

        let oversized = streams.register("http-2", 1);
        let _ = streams.deliver(delta(
            "http-2",
            1,
            &vec![0; HTTP_BODY_DELTA_MAX_BYTES + 1],
            false,
            None,
        ));
        let seen = read(&oversized).await;
        assert!(seen[0].contains("exceeds the 1048576-byte limit"), "{seen:?}");
        // Far too big: refused before it is decoded.
        let huge = streams.register("http-3", 1);
        let violation = streams.deliver(delta(
            "http-3",
            1,
            &vec![0; 2 * HTTP_BODY_DELTA_MAX_BYTES],
            false,
            None,
        ));
        assert!(violation.is_err(), "reported, so the connection is dropped");
        let seen = read(&huge).await;
        assert!(seen[0].contains("base64 characters exceeds the 1048576-byte limit"), "{seen:?}");
    }

    #[tokio::test]
    async fn deltas_for_streams_nobody_follows_are_ignored() {
        let streams = HttpStreams::default();
        let dropped = streams.register("http-1", 1);
        drop(dropped);
        let live = streams.register("http-2", 1);

        let _ = streams.deliver(delta("http-1", 1, b"late", false, None));
        let _ = streams.deliver(delta("unknown", 1, b"stray", true, None));
        let _ = streams.deliver(json_without_id());
        let _ = streams.deliver(delta("http-2", 1, b"", true, None));
        assert!(read(&live).await.is_empty());
    }

    fn json_without_id() -> Value {
        serde_json::json!({"seq": 1, "deltaBase64": ""})
    }

    #[tokio::test]
    async fn a_reader_that_stops_reading_fails_its_own_stream() {
        let streams = HttpStreams::default();
        let stalled = streams.register("http-1", 1);
        let other = streams.register("http-2", 1);
        for seq in 1..=MAX_QUEUED_BODY_DELTAS as u64 + 1 {
            let _ = streams.deliver(delta("http-1", seq, b"x", false, None));
        }
        let _ = streams.deliver(delta("http-2", 1, b"fine", true, None));

        let seen = read(&stalled).await;
        assert_eq!(seen.len(), MAX_QUEUED_BODY_DELTAS + 1, "what was queued, then the failure");
        assert_eq!(seen.last().unwrap(), "error: body delta channel filled before delivery");
        assert_eq!(read(&other).await, ["fine"]);
    }

    #[tokio::test]
    async fn streams_share_one_queued_byte_budget_and_give_it_back() {
        let streams = HttpStreams::default();
        let full = vec![0; HTTP_BODY_DELTA_MAX_BYTES];
        let per_stream = MAX_QUEUED_HTTP_BODY_BYTES / HTTP_BODY_DELTA_MAX_BYTES / 2;
        let a = streams.register("http-1", 1);
        let b = streams.register("http-2", 1);
        for seq in 1..=per_stream as u64 {
            let _ = streams.deliver(delta("http-1", seq, &full, false, None));
            let _ = streams.deliver(delta("http-2", seq, &full, false, None));
        }
        assert_eq!(streams.queued_bytes.load(Ordering::Acquire), MAX_QUEUED_HTTP_BODY_BYTES);
        let _ = streams.deliver(delta("http-2", per_stream as u64 + 1, b"!", false, None));

        let seen = read(&b).await;
        let budget = format!("error: queued body deltas exceed {MAX_QUEUED_HTTP_BODY_BYTES} bytes");
        assert_eq!(seen.last().unwrap(), &budget);
        drop(a);
        drop(b);
        assert_eq!(streams.queued_bytes.load(Ordering::Acquire), 0, "dropped bodies give back");
    }

    #[tokio::test]
    async fn a_closed_connection_fails_its_own_streams_only() {
        let streams = HttpStreams::default();
        let old = streams.register("http-1", 1);
        let new = streams.register("http-2", 2);
        let _ = streams.deliver(delta("http-1", 1, b"before", false, None));

        streams.connection_closed(1, "connection closed");
        let _ = streams.deliver(delta("http-2", 1, b"", true, None));
        let seen = read(&old).await;
        assert_eq!(seen[0], "before");
        assert!(seen[1].starts_with("error: exec-server connection dropped (connection closed)"));
        assert!(read(&new).await.is_empty(), "the other connection's stream ended cleanly");
    }
}
