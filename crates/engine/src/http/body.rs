//! A streamed response body, in chunks small enough to be one `http/request/bodyDelta` each.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use tether_protocol::http::HTTP_BODY_DELTA_MAX_BYTES;

/// Reading a response body failed after its head arrived. The text is the HTTP client's
/// (`error decoding response body`), which is what a streamed body's terminal delta carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HttpBodyError(pub String);

/// The body of a streamed response: non-empty chunks of at most [`HTTP_BODY_DELTA_MAX_BYTES`],
/// in order, as they arrive (a chunk is never held back to fill a bigger one, so a server-sent
/// event reaches the client as soon as the peer sends it). Ends after the last chunk, or after
/// the first error.
pub struct HttpBodyStream {
    inner: Pin<Box<dyn Stream<Item = Result<Bytes, HttpBodyError>> + Send>>,
    /// What is left of a chunk bigger than one delta.
    rest: Bytes,
    finished: bool,
}

impl HttpBodyStream {
    /// Wraps any stream of body bytes, splitting bigger chunks and dropping empty ones.
    pub fn new(inner: impl Stream<Item = Result<Bytes, HttpBodyError>> + Send + 'static) -> Self {
        Self { inner: Box::pin(inner), rest: Bytes::new(), finished: false }
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
        if this.finished {
            return Poll::Ready(None);
        }
        loop {
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
                Poll::Ready(Some(Ok(chunk))) => {
                    this.rest = chunk;
                    return Poll::Ready(this.take_rest().map(Ok));
                }
            }
        }
    }
}

impl std::fmt::Debug for HttpBodyStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpBodyStream").field("finished", &self.finished).finish_non_exhaustive()
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

    #[tokio::test]
    async fn big_chunks_are_split_at_the_delta_limit_and_empty_ones_dropped() {
        let big = Bytes::from(vec![7u8; 2 * HTTP_BODY_DELTA_MAX_BYTES + 5]);
        let chunks = collect(vec![Ok(Bytes::from_static(b"a")), Ok(Bytes::new()), Ok(big)]).await;
        let lens: Vec<usize> = chunks.iter().map(|c| c.as_ref().unwrap().len()).collect();
        assert_eq!(lens, [1, HTTP_BODY_DELTA_MAX_BYTES, HTTP_BODY_DELTA_MAX_BYTES, 5]);
    }

    #[tokio::test]
    async fn a_chunk_of_exactly_the_limit_stays_whole() {
        let exact = Bytes::from(vec![1u8; HTTP_BODY_DELTA_MAX_BYTES]);
        let chunks = collect(vec![Ok(exact)]).await;
        assert_eq!(chunks.len(), 1);
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
