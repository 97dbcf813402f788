//! One physical connection to an exec-server: a WebSocket, its sending half, and the calls in
//! flight on it (`crate::calls`); its reading half is `crate::reader`'s. A logical client
//! outlives many of these ("generations").

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tether_protocol::RequestId;
use tether_protocol::envelope::{encode_notification, encode_request};
use tether_protocol::fragments::fragments;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::http::header::AUTHORIZATION;
use tokio_tungstenite::tungstenite::protocol::frame::coding::Data;

use crate::calls::{Answer, Calls};
use crate::error::{ClientError, ConnectError, ConnectErrorKind, Disconnect, DisconnectKind};
use crate::flow::PauseGate;
use crate::options::ClientOptions;
use crate::reader::{ConnectionEvent, Reader, Shared};

/// One WebSocket connection and its calls in flight.
pub(crate) struct Connection {
    pub generation: u64,
    writer: Arc<Writer>,
    /// Frames the reader and [`Connection::close`] send, which must not wait for the socket
    /// (see [`CONTROL_QUEUED_FRAMES`]): written by a task of their own.
    control: mpsc::Sender<Frame>,
    calls: Arc<Calls>,
    next_id: AtomicI64,
    reader: tokio::task::JoinHandle<()>,
    /// Whether the session's pause gate applies to this connection's reader: from when it is
    /// the session's current connection. Before that (a resume in progress) the reader must
    /// read on, or the answers the resume waits for would never be read.
    gated: Arc<AtomicBool>,
}

/// Control frames (pings, the close, the answer to a request the server made) waiting for
/// the socket. The reader never waits on a write — a reader blocked behind a full socket
/// would stop taking the server's messages, and a server that waits for room to write them
/// would never read ours — so these go through a queue of their own, and one that is full
/// already holds a ping as good as the one dropped. Eight covers a ping, the close, and a
/// few answers to requests this client does not serve.
const CONTROL_QUEUED_FRAMES: usize = 8;

/// The largest frame this client sends; a bigger message goes out as several (RFC 6455
/// fragments). Both servers refuse frames over 16 MiB while taking messages of up to 64 MiB
/// (Tether closes the connection with 1009 "in frames of 16 MiB", the reference drops it), so
/// a `fs/writeFile` of more than 12 MB could not be sent as one frame at all. And the
/// WebSocket library copies each frame whole into its write buffer, which keeps its room for
/// the connection's life: sent whole, one big write would be held for as long as the
/// connection lasts. 2 MiB keeps a block of `fs/writeBlock` or `fs/putFile` (1 MiB with its
/// JSON) in one frame, written where it is made; a bigger message goes through a task of its
/// own ([`Writer::write`]).
pub(crate) const FRAME_MAX_BYTES: usize = 2 * 1024 * 1024;

type Sink = futures_util::stream::SplitSink<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    Frame,
>;

/// The socket's sending half. Requests are written by the task that makes them, under the
/// lock, rather than handed to a writing task: the hand-over (and the thread it may wake)
/// would cost a small request more than its write. The lock keeps frames whole and in the
/// order their writers took it.
struct Writer {
    sink: Arc<tokio::sync::Mutex<Sink>>,
    /// Tells the reader that a write failed, which ends the connection at once: the reader
    /// may not notice a broken socket for a while, and calls meanwhile must not be sent into
    /// the void.
    failed: mpsc::Sender<Disconnect>,
}

impl Writer {
    /// Writes `frame` and flushes it. A frame is taken whole into the socket's buffer or not
    /// at all, so a caller that gives up mid-write (its future dropped) leaves nothing torn:
    /// what it buffered goes out with the next write. A message over [`FRAME_MAX_BYTES`] goes
    /// in frames of that size, each waiting for room in the socket, by a task that finishes
    /// it whether or not its caller still waits: a message cut off after some of its frames
    /// would make everything after it a protocol error.
    async fn write(&self, frame: Frame) -> Result<(), ()> {
        if let Some((bytes, kind)) = fragmentable(&frame) {
            let (sink, failed) = (self.sink.clone(), self.failed.clone());
            let whole = tokio::spawn(async move {
                let mut sink = sink.lock_owned().await;
                let mut sent = Ok(());
                for part in fragments(bytes, kind, FRAME_MAX_BYTES) {
                    sent = sink.feed(Frame::Frame(part)).await;
                    if sent.is_err() {
                        break;
                    }
                }
                if sent.is_ok() {
                    sent = sink.flush().await;
                }
                Self::settle(&mut sink, &failed, sent)
            });
            return whole.await.unwrap_or(Err(()));
        }
        let mut sink = self.sink.lock().await;
        let sent = sink.send(frame).await;
        Self::settle(&mut sink, &self.failed, sent)
    }

    /// After a write: tells the reader of a failure, or leaves no writer registered.
    fn settle(
        sink: &mut Sink,
        failed: &mpsc::Sender<Disconnect>,
        sent: Result<(), tungstenite::Error>,
    ) -> Result<(), ()> {
        match sent {
            Ok(()) => {
                forget_writer(sink);
                Ok(())
            }
            Err(error) => {
                let message = format!("transport error: {error}");
                let end = Disconnect::new(DisconnectKind::Transport, message).caused_by(error);
                let _ = failed.try_send(end);
                Err(())
            }
        }
    }
}

/// The bytes and kind of a data message too big for one frame; `None` for any other frame.
fn fragmentable(frame: &Frame) -> Option<(Bytes, Data)> {
    match frame {
        Frame::Text(text) if text.len() > FRAME_MAX_BYTES => {
            Some((Bytes::from(text.clone()), Data::Text))
        }
        Frame::Binary(bytes) if bytes.len() > FRAME_MAX_BYTES => {
            Some((bytes.clone(), Data::Binary))
        }
        _ => None,
    }
}

/// Leaves no task registered to be woken for the socket's writes once a write is done.
///
/// The WebSocket wakes the task that last wrote whenever the socket has something to read,
/// not only when it has room to write. That task is a caller now waiting for its answer: woken
/// for nothing by the answer's arrival, alongside the reader that takes it, it makes two tasks
/// ready at once, and the runtime hands one of them to another thread — a thread woken per
/// call (1.4 futex calls and context switches per call measured). A flush with nothing
/// to flush, under a waker that does nothing, takes the caller's place. Should it find bytes
/// it cannot write yet (a pong the reader queued), the reader is the one woken for them.
fn forget_writer(sink: &mut Sink) {
    use futures_util::Sink as _;
    let mut nobody = std::task::Context::from_waker(std::task::Waker::noop());
    let _ = std::pin::Pin::new(sink).poll_flush(&mut nobody);
}

/// Writes the control frames until every sender is gone, then closes the socket.
async fn write_control(writer: Arc<Writer>, mut frames: mpsc::Receiver<Frame>) {
    while let Some(frame) = frames.recv().await {
        if writer.write(frame).await.is_err() {
            break;
        }
    }
    let _ = writer.sink.lock().await.close().await;
}

impl Connection {
    /// Opens a connection; its notifications and its end go to `events`. Its reader stops
    /// reading while `gate` says a full handle pauses the connection, once [`Self::apply_gate`]
    /// (at once if `gated`).
    pub(crate) async fn open(
        url: &str,
        generation: u64,
        options: &ClientOptions,
        token: Option<&str>,
        events: mpsc::Sender<ConnectionEvent>,
        gate: Arc<PauseGate>,
        gated: bool,
    ) -> Result<Arc<Self>, ClientError> {
        let timeout = options.connect_timeout;
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(options.max_message_bytes))
            .max_frame_size(Some(options.max_message_bytes))
            .read_buffer_size(crate::options::WEBSOCKET_READ_BYTES);
        let mut request = url.into_client_request().map_err(|e| {
            ConnectError::new(ConnectErrorKind::InvalidUrl, format!("invalid exec-server URL: {e}"))
                .caused_by(e)
        })?;
        if let Some(token) = token {
            let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                ConnectError::new(
                    ConnectErrorKind::InvalidToken,
                    "the bearer token is not a valid header value",
                )
            })?;
            request.headers_mut().insert(AUTHORIZATION, value);
        }
        let connector = if request.uri().scheme_str() == Some("wss") {
            Some(tokio_tungstenite::Connector::Rustls(crate::tls::client_config(
                options.tls_ca_file.as_deref(),
                options.tls_fingerprint,
            )?))
        } else {
            None
        };
        let connect = tokio_tungstenite::connect_async_tls_with_config(
            request,
            Some(config),
            true,
            connector,
        );
        let (socket, _) = tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| {
                ConnectError::new(
                    ConnectErrorKind::Timeout,
                    format!("no answer within {timeout:?}"),
                )
            })?
            .map_err(connect_error)?;
        let (sink, stream) = socket.split();
        let (write_failed, writer_gone) = mpsc::channel::<Disconnect>(1);
        let sink = Arc::new(tokio::sync::Mutex::new(sink));
        let writer = Arc::new(Writer { sink, failed: write_failed });
        let (control, control_frames) = mpsc::channel::<Frame>(CONTROL_QUEUED_FRAMES);
        tokio::spawn(write_control(writer.clone(), control_frames));
        let calls = Arc::new(Calls::default());
        let gated = Arc::new(AtomicBool::new(gated));
        let shared = Shared {
            generation,
            calls: calls.clone(),
            control: control.clone(),
            writer_gone,
            events,
            gate,
            gated: gated.clone(),
        };
        let reader = tokio::spawn(Reader::new(stream, shared, options).run());
        Ok(Arc::new(Self {
            generation,
            writer,
            control,
            calls,
            next_id: AtomicI64::new(1),
            reader,
            gated,
        }))
    }

    /// From now on, a full handle pauses this connection's reader: it is the current one.
    pub(crate) fn apply_gate(&self) {
        self.gated.store(true, Ordering::Release);
    }

    /// Sends a request and waits for its answer.
    pub(crate) async fn call<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<R, ClientError> {
        self.call_encoded(method, |id| encode_request(id, method, params)).await
    }

    /// [`Connection::call`] with the request's text written by `encode`, given the id it is to
    /// carry: for requests whose text is cheaper to write by hand than through serde (a
    /// block's megabyte of base64 needs no escape check).
    pub(crate) async fn call_encoded<R: DeserializeOwned>(
        &self,
        method: &str,
        encode: impl FnOnce(&RequestId) -> String,
    ) -> Result<R, ClientError> {
        let answer = self.exchange(|id| Frame::text(encode(id))).await?;
        decode_result(method, &answer.result)
    }

    /// Sends the binary message `encode` makes (Tether's `binaryBlocks`: a request with a
    /// block's bytes attached) and waits for its answer.
    pub(crate) async fn call_binary<R: DeserializeOwned>(
        &self,
        method: &str,
        encode: impl FnOnce(&RequestId) -> Vec<u8>,
    ) -> Result<R, ClientError> {
        let answer = self.exchange(|id| Frame::binary(encode(id))).await?;
        decode_result(method, &answer.result)
    }

    /// Sends a request whose answer comes with attached bytes (`binaryBlocks`), and returns
    /// both. An answer without them breaks the extension's promise.
    pub(crate) async fn call_for_attached<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<(R, Bytes), ClientError> {
        let answer = self.exchange(|id| Frame::text(encode_request(id, method, params))).await?;
        let Some(attached) = answer.attached else {
            return Err(ClientError::Protocol(format!(
                "`{method}` was answered without the attached bytes it asked for"
            )));
        };
        Ok((decode_result(method, &answer.result)?, attached))
    }

    /// Sends the frame `encode` makes for a fresh request id and waits for the answer.
    async fn exchange(
        &self,
        encode: impl FnOnce(&RequestId) -> Frame,
    ) -> Result<Answer, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let answer = self.calls.register(id)?;
        let frame = encode(&RequestId::Integer(id));
        if self.writer.write(frame).await.is_err() {
            self.calls.unsent(id);
            return Err(Disconnect::closed().into());
        }
        answer.await.map_err(|_| ClientError::from(Disconnect::closed()))?
    }

    /// Sends a notification.
    pub(crate) async fn notify<P: Serialize>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<(), ClientError> {
        let frame = Frame::text(encode_notification(method, params));
        self.writer.write(frame).await.map_err(|()| Disconnect::closed().into())
    }

    /// Whether the connection has ended.
    pub(crate) fn is_closed(&self) -> bool {
        self.calls.is_closed()
    }

    /// Ends the connection (its end is reported like any other).
    pub(crate) fn close(&self) {
        // Through the control queue, so that the caller never waits on the socket; behind a
        // full queue, a task waits its turn for it.
        if self.control.try_send(Frame::Close(None)).is_err() {
            let control = self.control.clone();
            tokio::spawn(async move { control.send(Frame::Close(None)).await });
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A call's result as the type the caller expects, read straight from its text. A type that
/// reads a number only from a JSON value (serde buffers what a flattened field holds, and with
/// `arbitrary_precision` a buffered fraction read from text is no longer a number) is read
/// through one, so that the client takes every answer it took when it read them all that way.
fn decode_result<R: DeserializeOwned>(method: &str, result: &[u8]) -> Result<R, ClientError> {
    serde_json::from_slice(result)
        .or_else(|_| tether_protocol::decode::parse_value(result).and_then(serde_json::from_value))
        .map_err(|e| ClientError::Protocol(format!("unexpected `{method}` result: {e}")))
}

/// A failed upgrade in words that say what to do, and of a kind to act on: a refusal's
/// status and the server's reason (a `401` names what was wrong with the credential), TLS
/// apart from the rest of the network.
fn connect_error(error: tungstenite::Error) -> ClientError {
    let error = match error {
        tungstenite::Error::Http(response) => {
            let status = response.status();
            let reason = response
                .body()
                .as_deref()
                .map(|body| String::from_utf8_lossy(body).trim().to_owned())
                .filter(|body| !body.is_empty())
                .unwrap_or_else(|| status.canonical_reason().unwrap_or_default().to_owned());
            ConnectError::new(
                ConnectErrorKind::Refused { status: status.as_u16() },
                format!("the server refused the connection: HTTP {status}: {reason}"),
            )
        }
        tungstenite::Error::Io(io) => {
            // rustls reports a failed handshake as an I/O error that carries its own.
            let tls = io.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>());
            match tls {
                Some(tls) => tls_error(tls),
                None => ConnectError::new(ConnectErrorKind::Network, io.to_string()),
            }
            .caused_by(io)
        }
        tungstenite::Error::Tls(tls) => {
            let error = match &tls {
                tungstenite::error::TlsError::Rustls(inner) => tls_error(inner),
                other => ConnectError::new(ConnectErrorKind::Tls, other.to_string()),
            };
            error.caused_by(tls)
        }
        tungstenite::Error::Protocol(tungstenite::error::ProtocolError::HttparseError(http)) => {
            ConnectError::new(
                ConnectErrorKind::NotHttp,
                format!("the server's answer is not HTTP ({http})"),
            )
            .caused_by(http)
        }
        tungstenite::Error::HttpFormat(http) => ConnectError::new(
            ConnectErrorKind::NotHttp,
            format!("the server's answer is not HTTP ({http})"),
        )
        .caused_by(http),
        tungstenite::Error::Url(url) => {
            ConnectError::new(ConnectErrorKind::InvalidUrl, url.to_string()).caused_by(url)
        }
        other => ConnectError::new(ConnectErrorKind::Handshake, other.to_string()).caused_by(other),
    };
    error.into()
}

/// A failed TLS handshake, by what rustls says went wrong.
fn tls_error(error: &rustls::Error) -> ConnectError {
    match error {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other))
            if let Some(mismatch) = other.0.downcast_ref::<crate::tls::FingerprintMismatch>() =>
        {
            ConnectError::new(ConnectErrorKind::WrongFingerprint, other.0.to_string())
                .presenting(Some(mismatch.presented.0))
        }
        rustls::Error::InvalidCertificate(why) => {
            use rustls::CertificateError as Why;
            let (why, presented) = match why {
                Why::Other(other)
                    if let Some(untrusted) = other.0.downcast_ref::<crate::tls::Untrusted>() =>
                {
                    (&untrusted.why, Some(untrusted.presented))
                }
                why => (why, None),
            };
            // What ssh does with a host key it does not know: show it, so the person can
            // check it against the server's and pin it.
            let pin = presented
                .map_or(String::new(), |fingerprint| format!(" (it presented {fingerprint})"));
            let what = match why {
                // A CA of the same name but another key fails on its signature.
                Why::UnknownIssuer | Why::BadSignature => {
                    "is not signed by a CA this client trusts".to_owned()
                }
                Why::NotValidForName | Why::NotValidForNameContext { .. } => {
                    "is not for the host name connected to".to_owned()
                }
                Why::Expired | Why::ExpiredContext { .. } => "has expired".to_owned(),
                Why::NotValidYet | Why::NotValidYetContext { .. } => "is not valid yet".to_owned(),
                Why::Revoked => "is revoked".to_owned(),
                other => format!("is not trusted ({other:?})"),
            };
            ConnectError::new(
                ConnectErrorKind::UntrustedCertificate,
                format!("the server's certificate {what}{pin}"),
            )
            .presenting(presented.map(|fingerprint| fingerprint.0))
        }
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            ConnectError::new(
                ConnectErrorKind::NotTls,
                "the server does not speak TLS (its answer was not a TLS record)",
            )
        }
        other => ConnectError::new(ConnectErrorKind::Tls, format!("TLS failed: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::{Context, Poll, Wake, Waker};

    use futures_util::FutureExt;
    use tokio::sync::Notify;

    use super::*;

    /// A waker that counts its wake-ups and tells the test of each.
    #[derive(Default)]
    struct Counting {
        wakes: AtomicUsize,
        woken: Notify,
    }

    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.wakes.fetch_add(1, Ordering::SeqCst);
            self.woken.notify_one();
        }
    }

    /// How often the task that wrote a frame is woken when the peer's answer arrives: the
    /// write is made and the read awaited as `Connection` does, each under a waker of its own,
    /// with [`forget_writer`] after the write or not. On a current-thread runtime the
    /// socket's wake-ups all happen before the test goes on from the reader's.
    async fn writer_wakes_on_an_answer(forget: bool) -> usize {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let peer = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let mut peer = tokio_tungstenite::accept_async(socket).await.unwrap();
            let request = peer.next().await.unwrap().unwrap();
            peer.send(Frame::text(format!("answer to {request}"))).await.unwrap();
            peer
        });
        let (socket, _) =
            tokio_tungstenite::connect_async(format!("ws://{address}")).await.unwrap();
        let (mut sink, mut stream) = socket.split();

        let writer = Arc::new(Counting::default());
        let mut send = sink.send(Frame::text("request"));
        while send.poll_unpin(&mut Context::from_waker(&Waker::from(writer.clone()))).is_pending() {
            writer.woken.notified().await;
        }
        drop(send);
        let wakes_writing = writer.wakes.load(Ordering::SeqCst);
        if forget {
            forget_writer(&mut sink);
        }

        let reader = Arc::new(Counting::default());
        let mut next = stream.next();
        let reader_waker = Waker::from(reader.clone());
        let mut reading = Context::from_waker(&reader_waker);
        assert!(next.poll_unpin(&mut reading).is_pending(), "an answer before the request");
        reader.woken.notified().await;
        let Poll::Ready(Some(Ok(answer))) = next.poll_unpin(&mut reading) else {
            panic!("the reader was woken without the answer");
        };
        assert_eq!(answer, Frame::text("answer to request"));
        drop(peer.await.unwrap());
        writer.wakes.load(Ordering::SeqCst) - wakes_writing
    }

    #[tokio::test]
    async fn a_finished_write_leaves_the_writer_asleep_when_the_answer_comes() {
        // The socket's behaviour this works around: the last writer is woken by a read.
        assert!(writer_wakes_on_an_answer(false).await > 0);
        assert_eq!(writer_wakes_on_an_answer(true).await, 0);
    }

    /// A result type serde reads through a buffer (a flattened field) cannot read a
    /// fractional number straight from text under `arbitrary_precision`; it is read through a
    /// value instead.
    #[test]
    fn a_result_that_needs_a_value_still_decodes() {
        #[derive(Debug, PartialEq, serde::Deserialize)]
        struct Outer {
            #[serde(flatten)]
            inner: Inner,
        }
        #[derive(Debug, PartialEq, serde::Deserialize)]
        struct Inner {
            f: f64,
        }
        let text = br#"{"f":1.5}"#;
        assert!(serde_json::from_slice::<Outer>(text).is_err(), "read straight after all");
        let outer = decode_result::<Outer>("m", text).unwrap();
        assert_eq!(outer, Outer { inner: Inner { f: 1.5 } });
        let error = decode_result::<Outer>("m", br#"{"g":1}"#).unwrap_err().to_string();
        assert!(error.contains("unexpected `m` result"), "{error}");
    }

    /// A refused certificate's fingerprint travels as a value, for a caller to show and pin.
    #[test]
    fn a_refused_certificate_carries_its_fingerprint() {
        use crate::tls::{FingerprintMismatch, TlsFingerprint, Untrusted};
        let refused = |other: Arc<dyn std::error::Error + Send + Sync>| {
            tls_error(&rustls::Error::InvalidCertificate(rustls::CertificateError::Other(
                rustls::OtherError(other),
            )))
        };
        let (presented, expected) = (TlsFingerprint([1; 32]), TlsFingerprint([2; 32]));
        let untrusted = refused(Arc::new(Untrusted {
            why: rustls::CertificateError::UnknownIssuer,
            presented,
        }));
        assert_eq!(untrusted.kind, ConnectErrorKind::UntrustedCertificate);
        assert_eq!(untrusted.presented(), Some(presented));
        let mismatch = refused(Arc::new(FingerprintMismatch { expected, presented }));
        assert_eq!(mismatch.kind, ConnectErrorKind::WrongFingerprint);
        assert_eq!(mismatch.presented(), Some(presented));
        let expired =
            tls_error(&rustls::Error::InvalidCertificate(rustls::CertificateError::Expired));
        assert_eq!(expired.presented(), None);
    }
}
