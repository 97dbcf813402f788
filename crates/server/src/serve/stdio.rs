//! The stdio transport: newline-delimited JSON on stdin and stdout. Logs go to stderr.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span, warn};

use crate::config::MAX_MESSAGE_BYTES;
use crate::processor::{InboundFrame, serve_connection};
use crate::state::ServerState;
use crate::transport::{ConnectionId, Outbound, Payload, TransportKind};

/// Serves the one stdio connection until stdin ends; its session ends with it.
pub(crate) async fn serve(server: Arc<ServerState>, shutdown: CancellationToken) {
    let connection = ConnectionId::next();
    let span = info_span!(
        "connection",
        connection = connection.0,
        transport = "stdio",
        session = tracing::field::Empty
    );
    async move {
        let (outbound, mut queue) = Outbound::channel(server.metrics.clone());
        let writer = tokio::spawn(async move {
            let mut stdout = tokio::io::stdout();
            while let Some(outgoing) = queue.recv().await {
                // Nothing answers with attached bytes over stdio (`carries_binary`).
                let Payload::Text(mut text) = outgoing.payload else { continue };
                text.push('\n');
                if stdout.write_all(text.as_bytes()).await.is_err() || stdout.flush().await.is_err()
                {
                    break;
                }
            }
        });
        let (frames_tx, frames_rx) = mpsc::channel::<InboundFrame>(1);
        let reader = tokio::spawn(read_lines(frames_tx));
        let inbound = tokio_stream_from(frames_rx);
        serve_connection(server, connection, TransportKind::Stdio, inbound, outbound, shutdown)
            .await;
        reader.abort();
        let _ = writer.await;
    }
    .instrument(span)
    .await
}

fn tokio_stream_from(
    mut rx: mpsc::Receiver<InboundFrame>,
) -> std::pin::Pin<Box<dyn futures_util::Stream<Item = InboundFrame> + Send>> {
    Box::pin(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

/// Reads `\n`-terminated lines (a preceding `\r` stripped, blank lines skipped). A line longer
/// than the message limit ends the connection; an unterminated last line is not a message.
async fn read_lines(frames: mpsc::Sender<InboundFrame>) {
    let mut reader = BufReader::with_capacity(64 * 1024, tokio::io::stdin());
    let mut line = Vec::new();
    loop {
        line.clear();
        let found_newline = loop {
            let available = match reader.fill_buf().await {
                Ok([]) | Err(_) => return,
                Ok(available) => available,
            };
            match available.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    line.extend_from_slice(&available[..end]);
                    reader.consume(end + 1);
                    break true;
                }
                None => {
                    let taken = available.len();
                    line.extend_from_slice(available);
                    reader.consume(taken);
                }
            }
            if line.len() > MAX_MESSAGE_BYTES {
                break false;
            }
        };
        if !found_newline {
            warn!(limit = MAX_MESSAGE_BYTES, "stdio message exceeds the size limit; closing");
            return;
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if frames.send(InboundFrame::json(std::mem::take(&mut line).into())).await.is_err() {
            return;
        }
    }
}
