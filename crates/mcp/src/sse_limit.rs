//! Server-sent events from a body stream, with a bound on each event's size.
//!
//! A Streamable HTTP server answers a request with an SSE stream that may carry notifications
//! before the response. The parser (`sse-stream`, the one rmcp's trait speaks) buffers an
//! event until its blank line, so a server that never ends one would grow the client's memory
//! without end. The bytes are counted here first, per event, and the stream fails once an
//! event passes the limit.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use sse_stream::{Sse, SseStream};

/// The parsed events of `body`, failing once an event is larger than `max_event_bytes`.
pub(crate) fn sse_events<S>(
    body: S,
    max_event_bytes: usize,
) -> BoxStream<'static, Result<Sse, sse_stream::Error>>
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
{
    let bounded = EventSizeLimit {
        inner: Box::pin(body),
        limit: max_event_bytes,
        event_bytes: 0,
        line_bytes: 0,
        after_cr: false,
        failed: false,
    };
    SseStream::from_bytes_stream(bounded).boxed()
}

struct EventSizeLimit<S> {
    inner: Pin<Box<S>>,
    limit: usize,
    /// Bytes of the event in progress, line terminators excluded.
    event_bytes: usize,
    /// Bytes of the line in progress; a terminator after an empty line ends the event.
    line_bytes: usize,
    /// The last byte was `\r`, so a `\n` right after it belongs to the same terminator.
    after_cr: bool,
    failed: bool,
}

impl<S> EventSizeLimit<S> {
    /// Counts `chunk`; returns whether every event in it stayed within the limit.
    fn count(&mut self, chunk: &[u8]) -> bool {
        for &byte in chunk {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    if self.line_bytes == 0 {
                        self.event_bytes = 0;
                    }
                    self.line_bytes = 0;
                }
                _ => {
                    self.after_cr = false;
                    self.line_bytes += 1;
                    self.event_bytes += 1;
                    if self.event_bytes > self.limit {
                        return false;
                    }
                }
            }
        }
        true
    }
}

impl<S> Stream for EventSizeLimit<S>
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Send,
{
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.failed {
            return Poll::Ready(None);
        }
        match this.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) if !this.count(&chunk) => {
                this.failed = true;
                let message =
                    format!("an SSE event exceeds the maximum size of {} bytes", this.limit);
                Poll::Ready(Some(Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    message,
                ))))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::stream;

    use super::*;

    fn body(chunks: &[&'static str]) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
        stream::iter(
            chunks.iter().map(|c| Ok(Bytes::from_static(c.as_bytes()))).collect::<Vec<_>>(),
        )
    }

    #[tokio::test]
    async fn events_within_the_limit_are_parsed_across_chunks() {
        let mut events =
            sse_events(body(&["id: 1\ndata: {\"a\"", ":1}\n\r\n", "data: two\r\n\r\n"]), 18);
        let first = events.next().await.unwrap().unwrap();
        assert_eq!((first.id.as_deref(), first.data.as_deref()), (Some("1"), Some("{\"a\":1}")));
        let second = events.next().await.unwrap().unwrap();
        assert_eq!(second.data.as_deref(), Some("two"));
        assert!(events.next().await.is_none());
    }

    #[tokio::test]
    async fn an_event_over_the_limit_fails_the_stream() {
        // Each event alone fits; the limit is per event, not per stream.
        let mut fine = sse_events(body(&["data: 12345\n\n", "data: 12345\n\n"]), 11);
        assert!(fine.next().await.unwrap().is_ok());
        assert!(fine.next().await.unwrap().is_ok());

        let mut events = sse_events(body(&["data: 1234", "56789\n", "data: more\n\n"]), 16);
        let error = events.next().await.unwrap().unwrap_err();
        assert!(error.to_string().contains("maximum size of 16 bytes"), "{error}");
    }
}
