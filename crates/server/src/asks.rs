//! The questions a session's managed proxies ask its client (`network/policyRequest`, the one
//! request a server sends), by the ids the server gave them.
//!
//! Ids are the session's own, from 1, never reused. An answer goes to whoever asked; an
//! answer to a question already given up on (timed out, or asked on a connection since lost)
//! is ignored, while a response to an id the server never gave is the client's error (the
//! connection is closed, as the reference closes it). A question nobody can answer — no
//! connection, too many waiting, the connection lost — is a denial: the asker sees its
//! answer dropped.

use std::collections::HashMap;

use tether_protocol::network::{ClientDecision, PolicyRequestResult};
use tokio::sync::oneshot;

/// Questions waiting for the client at once, per session. A proxy asks once per connection
/// to a destination its policy leaves open; past this many, more are denied at once rather
/// than queued (the reference's bound).
pub(crate) const MAX_PENDING_ASKS: usize = 256;

/// What became of a response from the client.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answered {
    /// Handed to the asker (or the asker had given up: ignored).
    Delivered,
    /// The server never sent this id.
    Unknown,
}

#[derive(Debug)]
pub(crate) struct PendingAsks {
    /// The next id to give.
    next: i64,
    waiting: HashMap<i64, oneshot::Sender<ClientDecision>>,
}

impl Default for PendingAsks {
    fn default() -> Self {
        Self { next: 1, waiting: HashMap::new() }
    }
}

impl PendingAsks {
    /// An id for a question whose answer goes to `answer`; `None` (and `answer` dropped: a
    /// denial) when [`MAX_PENDING_ASKS`] still wait.
    pub(crate) fn register(&mut self, answer: oneshot::Sender<ClientDecision>) -> Option<i64> {
        if self.waiting.len() >= MAX_PENDING_ASKS {
            self.waiting.retain(|_, waiting| !waiting.is_closed());
            if self.waiting.len() >= MAX_PENDING_ASKS {
                return None;
            }
        }
        let id = self.next;
        self.next += 1;
        self.waiting.insert(id, answer);
        Some(id)
    }

    /// The client's answer to question `id`: its result, or `None` for an error response (a
    /// denial). A result that is not a decision is a denial too.
    pub(crate) fn answer(&mut self, id: i64, result: Option<&serde_json::Value>) -> Answered {
        if id < 1 || id >= self.next {
            return Answered::Unknown;
        }
        if let Some(asker) = self.waiting.remove(&id)
            && let Some(result) = result
            && let Ok(answer) = serde_json::from_value::<PolicyRequestResult>(result.clone())
        {
            let _ = asker.send(answer.decision);
        }
        Answered::Delivered
    }

    /// The connection the questions went out on is gone: every one is denied.
    pub(crate) fn forget_all(&mut self) {
        self.waiting.clear();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ids_start_at_one_and_answers_reach_their_askers() {
        let mut asks = PendingAsks::default();
        let (first, mut first_answer) = oneshot::channel();
        let (second, mut second_answer) = oneshot::channel();
        assert_eq!(asks.register(first), Some(1));
        assert_eq!(asks.register(second), Some(2));
        let allow = json!({"decision": {"type": "allow"}});
        assert_eq!(asks.answer(2, Some(&allow)), Answered::Delivered);
        assert_eq!(second_answer.try_recv().unwrap(), ClientDecision::Allow);
        // An error response, or a result that is no decision, denies.
        assert_eq!(asks.answer(1, Some(&json!({"nonsense": 1}))), Answered::Delivered);
        assert!(first_answer.try_recv().is_err());
        // Late (already answered) is ignored; never issued is unknown.
        assert_eq!(asks.answer(2, Some(&allow)), Answered::Delivered);
        assert_eq!(asks.answer(3, Some(&allow)), Answered::Unknown);
        assert_eq!(asks.answer(0, None), Answered::Unknown);
    }

    #[test]
    fn past_the_bound_a_question_is_denied_unless_an_asker_gave_up() {
        let mut asks = PendingAsks::default();
        let mut kept = Vec::new();
        for _ in 0..MAX_PENDING_ASKS {
            let (answer, answered) = oneshot::channel();
            assert!(asks.register(answer).is_some());
            kept.push(answered);
        }
        let (answer, _answered) = oneshot::channel();
        assert_eq!(asks.register(answer), None);
        drop(kept.pop());
        let (answer, _answered) = oneshot::channel();
        assert_eq!(asks.register(answer), Some(MAX_PENDING_ASKS as i64 + 1));
    }

    #[test]
    fn a_lost_connection_denies_every_waiting_question() {
        let mut asks = PendingAsks::default();
        let (answer, mut answered) = oneshot::channel();
        asks.register(answer);
        asks.forget_all();
        assert!(matches!(answered.try_recv(), Err(oneshot::error::TryRecvError::Closed)));
    }
}
