//! A streamed response body, in chunks small enough to be one `http/request/bodyDelta` each.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use tether_protocol::http::HTTP_BODY_DELTA_MAX_BYTES;

/// Reading a response body failed after its head arrived. The text is the HTTP client's
/// (`error decoding response body`), which is what a streamed body's terminal delta carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HttpBodyError(pub String);

/// The largest body a buffered `http/request` answer carries: 32 MiB, which base64 makes 43 MiB,
/// inside the 64 MiB message an answer may be. A body without end would otherwise grow the
/// server until it is killed, and every session with it.
pub const HTTP_BUFFERED_BODY_MAX_BYTES: usize = 32 * 1024 * 1024;

/// Small chunks that are ready together are joined until they make this many bytes: 64 KiB.
/// A decoded gzip or zstd body comes from its decoder in chunks of 4 KiB, and each chunk is a
/// message to the client (a delta); joined, a body costs a sixteenth of the messages, and a
/// message's own cost (its frame, its JSON, waking the writer) stops mattering beside its bytes.
/// Chunks of this size or more pass as they are, uncopied.
const JOIN_BELOW_BYTES: usize = 64 * 1024;

/// The body of a streamed response: non-empty chunks of at most [`HTTP_BODY_DELTA_MAX_BYTES`],
/// in order, as they arrive. Small chunks that are ready together are joined (up to
/// [`JOIN_BELOW_BYTES`]), but a chunk is never held back to wait for another, so a server-sent
/// event reaches the client as soon as the peer sends it. Ends after the last chunk, or after
/// the first error (the chunks ready before it come first).
pub struct HttpBodyStream {
    inner: Pin<Box<dyn Stream<Item = Result<Bytes, HttpBodyError>> + Send>>,
    /// What is left of a chunk bigger than one delta.
    rest: Bytes,
    /// An error that came while joining chunks: it ends the stream once `rest` is handed out.
    failure: Option<HttpBodyError>,
    finished: bool,
    /// How long the peer said the body is (`content-length`), if it said: room a buffered
    /// reader makes at once, instead of growing its buffer (and copying it) as the body comes.
    length_hint: Option<u64>,
}

impl HttpBodyStream {
    /// Wraps any stream of body bytes, splitting bigger chunks and dropping empty ones.
    pub fn new(inner: impl Stream<Item = Result<Bytes, HttpBodyError>> + Send + 'static) -> Self {
        Self {
            inner: Box::pin(inner),
            rest: Bytes::new(),
            failure: None,
            finished: false,
            length_hint: None,
        }
    }

    /// The same stream, with the length its peer announced.
    pub fn with_length_hint(self, length_hint: Option<u64>) -> Self {
        Self { length_hint, ..self }
    }

    /// Reads the whole body onto the end of `out`, and says how many bytes it was; an error
    /// naming the limit once the body passes [`HTTP_BUFFERED_BODY_MAX_BYTES`] (the rest is not
    /// read). Room for the announced length is made first, at most the limit: a peer that
    /// announces more than it sends costs address space, not memory, and never more than one
    /// buffered body's.
    pub async fn read_whole_into(mut self, out: &mut Vec<u8>) -> Result<usize, HttpBodyError> {
        use futures_util::StreamExt as _;

        let announced = self.length_hint.unwrap_or(0).min(HTTP_BUFFERED_BODY_MAX_BYTES as u64);
        out.reserve(announced as usize);
        let mut read = 0;
        // Straight from the source: chunks joined for deltas would only be copied twice here.
        while let Some(chunk) = self.inner.next().await {
            let chunk = chunk?;
            if read + chunk.len() > HTTP_BUFFERED_BODY_MAX_BYTES {
                return Err(HttpBodyError(format!(
                    "the body exceeds the {HTTP_BUFFERED_BODY_MAX_BYTES}-byte limit of a \
                     buffered response; send the request with `streamResponse: true` to \
                     receive it in frames"
                )));
            }
            out.extend_from_slice(&chunk);
            read += chunk.len();
        }
        Ok(read)
    }

    /// The next chunk of `rest`, if any.
    fn take_rest(&mut self) -> Option<Bytes> {
        if self.rest.is_empty() {
            return None;
        }
        let len = self.rest.len().min(HTTP_BODY_DELTA_MAX_BYTES);
        Some(self.rest.split_to(len))
    }
}

impl Stream for HttpBodyStream {
    type Item = Result<Bytes, HttpBodyError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(chunk) = this.take_rest() {
            return Poll::Ready(Some(Ok(chunk)));
        }
        if let Some(failure) = this.failure.take() {
            return Poll::Ready(Some(Err(failure)));
        }
        if this.finished {
            return Poll::Ready(None);
        }
        let first = loop {
            match this.inner.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.finished = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(error))) => {
                    this.finished = true;
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(Some(Ok(chunk))) if chunk.is_empty() => continue,
                Poll::Ready(Some(Ok(chunk))) => break chunk,
            }
        };
        this.rest = match first.len() < JOIN_BELOW_BYTES {
            true => this.join_ready(first, cx),
            false => first,
        };
        Poll::Ready(this.take_rest().map(Ok))
    }
}

impl HttpBodyStream {
    /// `first` and the chunks ready after it, joined, until they make [`JOIN_BELOW_BYTES`] or
    /// nothing more is ready. The end or an error seen on the way is kept for the next polls.
    /// A `Pending` leaves the waker registered, so the next chunk still wakes the stream.
    fn join_ready(&mut self, first: Bytes, cx: &mut Context<'_>) -> Bytes {
        let mut joined: Option<BytesMut> = None;
        while joined.as_ref().map_or(first.len(), BytesMut::len) < JOIN_BELOW_BYTES {
            match self.inner.as_mut().poll_next(cx) {
                Poll::Pending => break,
                Poll::Ready(None) => {
                    self.finished = true;
                    break;
                }
                Poll::Ready(Some(Err(error))) => {
                    self.failure = Some(error);
                    self.finished = true;
                    break;
                }
                Poll::Ready(Some(Ok(chunk))) => {
                    let joined = joined.get_or_insert_with(|| {
                        let mut joined = BytesMut::with_capacity(JOIN_BELOW_BYTES);
                        joined.extend_from_slice(&first);
                        joined
                    });
                    joined.extend_from_slice(&chunk);
                }
            }
        }
        joined.map_or(first, BytesMut::freeze)
    }
}

impl std::fmt::Debug for HttpBodyStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpBodyStream")
            .field("finished", &self.finished)
            .field("length_hint", &self.length_hint)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use futures_util::stream;

    use super::*;

    async fn collect(
        chunks: Vec<Result<Bytes, HttpBodyError>>,
    ) -> Vec<Result<Bytes, HttpBodyError>> {
        HttpBodyStream::new(stream::iter(chunks)).collect().await
    }

    fn lens(chunks: &[Result<Bytes, HttpBodyError>]) -> Vec<usize> {
        chunks.iter().map(|c| c.as_ref().unwrap().len()).collect()
    }

    #[tokio::test]
    async fn big_chunks_are_split_at_the_delta_limit_and_empty_ones_dropped() {
        let big = Bytes::from(vec![7u8; 2 * HTTP_BODY_DELTA_MAX_BYTES + 5]);
        let chunks = collect(vec![Ok(Bytes::new()), Ok(big.clone()), Ok(Bytes::new())]).await;
        assert_eq!(lens(&chunks), [HTTP_BODY_DELTA_MAX_BYTES, HTTP_BODY_DELTA_MAX_BYTES, 5]);

        // A small chunk ready before a big one is joined to it, and the whole is split.
        let chunks = collect(vec![Ok(Bytes::from_static(b"a")), Ok(Bytes::new()), Ok(big)]).await;
        assert_eq!(lens(&chunks), [HTTP_BODY_DELTA_MAX_BYTES, HTTP_BODY_DELTA_MAX_BYTES, 6]);
        assert_eq!(chunks[0].as_ref().unwrap()[..2], [b'a', 7]);
    }

    #[tokio::test]
    async fn small_chunks_ready_together_are_joined_up_to_the_join_size() {
        // A decoder's 4 KiB chunks, all ready.
        let chunks: Vec<_> = (0..20u8).map(|n| Ok(Bytes::from(vec![n; 4096]))).collect();
        let joined = collect(chunks).await;
        assert_eq!(lens(&joined), [JOIN_BELOW_BYTES, 4 * 4096]);
        let bytes: Vec<u8> = joined.iter().flat_map(|c| c.as_ref().unwrap().to_vec()).collect();
        assert!(bytes.chunks(4096).enumerate().all(|(n, c)| c.iter().all(|&b| b == n as u8)));
    }

    #[tokio::test]
    async fn a_chunk_is_never_held_back_to_wait_for_the_next() {
        use futures_util::FutureExt;

        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let chunks =
            stream::unfold(receiver, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
        let mut body = HttpBodyStream::new(chunks);
        sender.send(Ok(Bytes::from_static(b"event 1\n"))).unwrap();
        let first = body.next().now_or_never().expect("handed out without waiting");
        assert_eq!(first.unwrap().unwrap(), "event 1\n");
        assert!(body.next().now_or_never().is_none(), "nothing more yet");

        // What arrived together goes together; the end comes after it.
        sender.send(Ok(Bytes::from_static(b"event 2\n"))).unwrap();
        sender.send(Ok(Bytes::from_static(b"event 3\n"))).unwrap();
        drop(sender);
        assert_eq!(body.next().await.unwrap().unwrap(), "event 2\nevent 3\n");
        assert!(body.next().await.is_none());
    }

    #[tokio::test]
    async fn a_chunk_of_exactly_the_limit_stays_whole() {
        let exact = Bytes::from(vec![1u8; HTTP_BODY_DELTA_MAX_BYTES]);
        let chunks = collect(vec![Ok(exact)]).await;
        assert_eq!(chunks.len(), 1);
    }

    #[tokio::test]
    async fn a_whole_body_goes_onto_the_end_in_room_made_for_its_announced_length() {
        let chunks = [Ok(Bytes::from_static(b"body")), Ok(Bytes::from_static(b"!"))];
        let mut message = b"head\0".to_vec();
        let announced = HttpBodyStream::new(stream::iter(chunks)).with_length_hint(Some(5));
        assert_eq!(announced.read_whole_into(&mut message).await, Ok(5));
        assert_eq!(message, b"head\0body!");
        assert!(message.capacity() >= 10);

        // A peer that announces more than a buffered body may be gets room for the limit, no
        // more.
        let mut message = b"head\0".to_vec();
        let chunks = [Ok(Bytes::from_static(b"small"))];
        let boastful = HttpBodyStream::new(stream::iter(chunks)).with_length_hint(Some(u64::MAX));
        assert_eq!(boastful.read_whole_into(&mut message).await, Ok(5));
        assert!(message.capacity() >= HTTP_BUFFERED_BODY_MAX_BYTES);
        assert!(message.capacity() <= HTTP_BUFFERED_BODY_MAX_BYTES + 64, "{}", message.capacity());
    }

    #[tokio::test]
    async fn a_whole_body_past_the_limit_is_refused_with_the_way_out() {
        let big = Bytes::from(vec![0u8; HTTP_BUFFERED_BODY_MAX_BYTES]);
        let chunks = [Ok(big), Ok(Bytes::from_static(b"1")), Ok(Bytes::from_static(b"never"))];
        let error = HttpBodyStream::new(stream::iter(chunks))
            .read_whole_into(&mut Vec::new())
            .await
            .unwrap_err();
        assert_eq!(
            error.0,
            "the body exceeds the 33554432-byte limit of a buffered response; send the request \
             with `streamResponse: true` to receive it in frames"
        );
    }

    #[tokio::test]
    async fn the_stream_ends_after_the_first_error() {
        let failure = HttpBodyError("error decoding response body".into());
        let chunks = collect(vec![
            Ok(Bytes::from_static(b"partial")),
            Err(failure.clone()),
            Ok(Bytes::from_static(b"never")),
        ])
        .await;
        assert_eq!(chunks, [Ok(Bytes::from_static(b"partial")), Err(failure)]);
    }
}
