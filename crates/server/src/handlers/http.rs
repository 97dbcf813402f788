//! `http/request`: requests made from the executor's side, buffered or with the body streamed
//! as `http/request/bodyDelta` notifications.
//!
//! A streamed request answers as soon as the response head arrives, then sends its body as
//! deltas numbered from 1, ending with exactly one `done: true` frame. The answer is queued
//! before the first delta, on the same queue, so a client always knows the stream before its
//! data. A stream belongs to its connection: it ends with it, without a terminal frame.
//!
//! With `attachBody` (Tether's `attachedHttpBodies`, WebSocket only) the body's bytes go
//! attached to binary messages — the buffered answer, or each delta — instead of base64 in the
//! JSON: a third fewer bytes on the wire, and no encoding here nor decoding at the client.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use tether_engine::http::{HttpBodyStream, HttpClient, HttpError};
use tether_protocol::envelope::encode_response;
use tether_protocol::http::{HttpRequestBodyDeltaNotification, HttpRequestParams};
use tether_protocol::{ByteChunk, RequestId};
use tracing::debug;

use crate::rpc_error::{from_http_error, invalid_params, invalid_request};
use crate::transport::{Outbound, Payload};

/// One connection's HTTP requests: the client they go through and the `requestId`s of its
/// streams in progress.
pub(crate) struct HttpConnection {
    client: Arc<dyn HttpClient>,
    /// The ids of the streamed requests that have not ended, each reserved from the moment the
    /// request is accepted, so two streams can never share an id. Buffered requests neither
    /// reserve nor check.
    active: Mutex<HashSet<String>>,
    /// Whether deltas may go as binary messages (`attachBody`): WebSocket, not stdio.
    carries_binary: bool,
}

impl HttpConnection {
    pub(crate) fn new(client: Arc<dyn HttpClient>, carries_binary: bool) -> Self {
        Self { client, active: Mutex::new(HashSet::new()), carries_binary }
    }

    /// Runs one request to completion, answering on `outbound` (and, for a streamed body,
    /// sending its deltas after the answer). Runs in its own task: a slow peer must not hold up
    /// the connection's other requests. A streamed request's task lasts until its body ends,
    /// so it counts against the connection's concurrent requests for that long.
    pub(crate) async fn run(&self, id: RequestId, params: HttpRequestParams, outbound: Outbound) {
        if params.attach_body && !self.carries_binary {
            let message = "attachBody needs binary messages, which stdio does not carry: send \
                           the request without it";
            let _ = outbound.send_error(&id, &invalid_request(message)).await;
            return;
        }
        let attach = params.attach_body;
        if !params.stream_response && attach {
            let _ = match attached_answer(self.client.as_ref(), &id, params).await {
                Ok(message) => outbound.send_payload(Payload::Binary(message), None).await,
                Err(error) => outbound.send_error(&id, &from_http_error(error)).await,
            };
            return;
        }
        if !params.stream_response {
            let _ = match self.client.request(params).await {
                Ok(response) => outbound.send(response.to_response_text(&id)).await,
                Err(error) => outbound.send_error(&id, &from_http_error(error)).await,
            };
            return;
        }
        // The id is checked before the params, as the reference does.
        let request_id = params.request_id.clone();
        let Some(claim) = StreamClaim::new(&self.active, &request_id) else {
            let message =
                format!("http/request streamResponse requestId `{request_id}` is already active");
            let _ = outbound.send_error(&id, &invalid_params(message)).await;
            return;
        };
        match self.client.request_streamed(params).await {
            Err(error) => {
                drop(claim);
                let _ = outbound.send_error(&id, &from_http_error(error)).await;
            }
            Ok((response, body)) => {
                if outbound.send(encode_response(&id, &response)).await.is_ok() {
                    stream_body(claim, body, attach, &outbound).await;
                }
            }
        }
    }
}

/// The buffered answer to request `id` with its body attached (`attachBody`), built around the
/// body as it arrives: the message's JSON is known once the response's head is, so the body is
/// read straight onto its end, in room made for the length the peer announced. Reading the
/// body whole and then joining it to the JSON would copy a buffered body (up to 32 MiB) twice,
/// into two fresh buffers. Limits and errors are a buffered request's.
async fn attached_answer(
    client: &dyn HttpClient,
    id: &RequestId,
    params: HttpRequestParams,
) -> Result<Vec<u8>, HttpError> {
    let (head, body) = client.request_streamed(params).await?;
    let mut message = head.attached_message_head(id);
    let bytes = body.read_whole_into(&mut message).await.map_err(HttpError::Body)?;
    debug!(bytes, "http body read");
    Ok(message)
}

/// Sends `body` as deltas after the response (with their bytes `attach`ed to binary messages,
/// or in base64), then the one terminal frame. Stops quietly if the connection goes away.
async fn stream_body(
    claim: StreamClaim<'_>,
    mut body: HttpBodyStream,
    attach: bool,
    outbound: &Outbound,
) {
    let request_id = claim.request_id.to_owned();
    let delta = |seq, chunk: ByteChunk, done, error| HttpRequestBodyDeltaNotification {
        request_id: request_id.clone(),
        seq,
        delta_base64: chunk,
        done,
        error,
    };
    let (mut seq, mut bytes) = (1, 0);
    let error = loop {
        match body.next().await {
            Some(Ok(chunk)) => {
                bytes += chunk.len();
                let delta = delta(seq, ByteChunk(chunk), false, None);
                let payload = match attach {
                    true => Payload::Binary(delta.to_attached_message()),
                    false => Payload::Text(delta.to_notification_text()),
                };
                if outbound.send_output_payload(payload).await.is_err() {
                    return;
                }
                seq += 1;
            }
            Some(Err(error)) => break Some(error.0),
            None => break None,
        }
    };
    debug!(request_id = %request_id, deltas = seq, bytes, failed = error.is_some(), "http body streamed");
    // Released before the terminal frame is queued: a client that reuses the id as soon as it
    // sees that frame must never be told the id is still active.
    drop(claim);
    let _ =
        outbound.send(delta(seq, ByteChunk::default(), true, error).to_notification_text()).await;
}

/// A reserved stream `requestId`, released when dropped: at the stream's end, or when the
/// connection's end aborts the task.
struct StreamClaim<'a> {
    active: &'a Mutex<HashSet<String>>,
    request_id: &'a str,
}

impl<'a> StreamClaim<'a> {
    /// Reserves `request_id`, or `None` if a stream in progress has it.
    fn new(active: &'a Mutex<HashSet<String>>, request_id: &'a str) -> Option<Self> {
        // Only a claim that inserted the id may exist: dropping one releases it.
        if !lock(active).insert(request_id.to_owned()) {
            return None;
        }
        Some(Self { active, request_id })
    }
}

impl Drop for StreamClaim<'_> {
    fn drop(&mut self) {
        lock(self.active).remove(self.request_id);
    }
}

/// The set is only touched in short critical sections that cannot panic halfway, so a
/// poisoned lock still holds a consistent set.
fn lock(active: &Mutex<HashSet<String>>) -> std::sync::MutexGuard<'_, HashSet<String>> {
    active.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_reserved_until_its_claim_is_dropped() {
        let active = Mutex::new(HashSet::new());
        let first = StreamClaim::new(&active, "s").unwrap();
        // A refused claim must not release the id it was refused for.
        assert!(StreamClaim::new(&active, "s").is_none());
        assert!(StreamClaim::new(&active, "s").is_none());
        let other = StreamClaim::new(&active, "t").unwrap();
        drop(first);
        assert!(StreamClaim::new(&active, "s").is_some());
        drop(other);
        assert!(lock(&active).is_empty());
    }
}
