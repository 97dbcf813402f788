//! A forwarded connection (`process/connect`, the `portForward` extension): a TCP connection
//! from the executor to a port on its own loopback, served as a process.
//!
//! Being a process is what gives a forwarded connection everything the process machinery
//! guarantees: its bytes are numbered and retained, so a client that lost its connection
//! resumes and catches up without losing one; the pump waits for the session's consumer, so a
//! slow client slows the peer (TCP's own flow control), never the server's memory; it is
//! listed, counted against the session's limit, and ended with the session. What the peer
//! sends is the process's stdout; its stdin goes to the peer, and closing it half-closes the
//! connection; the exit is the peer's end of sending (0) or a broken connection
//! ([`BROKEN_EXIT_CODE`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tether_protocol::process::{ExecOutputStream, SpawnFailureKind};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::pump::Pump;
use super::{LocalProcess, ProcessError, ProcessEvent, READ_CHUNK_BYTES};

/// How long a connect may wait. On loopback a connect is answered at once — accepted, or
/// refused when nothing listens; only a listener whose accept queue is full leaves it waiting
/// (the kernel retries the handshake after 1 s, then 3 s). The connect holds its place in the
/// order of the connection's requests, so it is bounded well below a client's patience.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The exit code of a connection that broke (reset, or any read error) rather than ended with
/// the peer's end of sending (0).
pub const BROKEN_EXIT_CODE: i32 = 1;

/// The exit code of a connection its client ended (`process/terminate`, a signal, the
/// session's end): the code of a process killed by SIGKILL, which is how a process ends there.
pub const STOPPED_EXIT_CODE: i32 = 128 + 9;

/// Why a forwarded connection could not be made. The kind travels to the client as
/// `error.data.kind` ([`SpawnFailureKind::ConnectRefused`] or `ConnectFailed`).
#[derive(Debug, thiserror::Error)]
pub enum ConnectFailure {
    #[error(
        "nothing listens on {0} on the executor: start the server there first, or check the port"
    )]
    Refused(SocketAddr, #[source] std::io::Error),
    #[error("cannot connect to {0} on the executor: no answer within {1:?}")]
    TimedOut(SocketAddr, Duration),
    #[error("cannot connect to {0} on the executor")]
    Failed(SocketAddr, #[source] std::io::Error),
}

impl ConnectFailure {
    pub fn kind(&self) -> SpawnFailureKind {
        match self {
            ConnectFailure::Refused(..) => SpawnFailureKind::ConnectRefused,
            ConnectFailure::TimedOut(..) | ConnectFailure::Failed(..) => {
                SpawnFailureKind::ConnectFailed
            }
        }
    }
}

/// Where `process/connect {host, port}` goes: the executor's own loopback only, `127.0.0.1`
/// (the default) or `::1`. Anything else is refused: a forward opens the executor's own
/// servers to its client, never a way into the executor's network.
pub(crate) fn destination(host: Option<&str>, port: u16) -> Result<SocketAddr, ProcessError> {
    let ip = match host {
        None => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Some(host) => match host.parse::<IpAddr>() {
            Ok(ip) if ip == Ipv4Addr::LOCALHOST || ip == Ipv6Addr::LOCALHOST => ip,
            _ => {
                return Err(ProcessError::InvalidParams(format!(
                    "process/connect reaches the executor's loopback only (127.0.0.1 or ::1), not {host}"
                )));
            }
        },
    };
    if port == 0 {
        return Err(ProcessError::InvalidParams("process/connect needs a port above 0".into()));
    }
    Ok(SocketAddr::new(ip, port))
}

/// Connects to `destination`, within [`CONNECT_TIMEOUT`].
pub(crate) async fn connect(destination: SocketAddr) -> Result<TcpStream, ConnectFailure> {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(destination)).await {
        Ok(Ok(stream)) => {
            // Bytes are forwarded as they come; the client batches them already.
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(ConnectFailure::Refused(destination, error))
        }
        Ok(Err(error)) => Err(ConnectFailure::Failed(destination, error)),
        Err(_) => Err(ConnectFailure::TimedOut(destination, CONNECT_TIMEOUT)),
    }
}

/// The connection's pump: what the peer sends, as `stdout` chunks, until the peer's end of
/// sending, a broken connection or `stop`; then the exit and the close. Sending waits for the
/// session's consumer, and meanwhile nothing is read: the peer is held back by TCP.
pub(crate) async fn run_connection_pump(
    process: Arc<LocalProcess>,
    mut reader: OwnedReadHalf,
    stop: CancellationToken,
    events: mpsc::Sender<ProcessEvent>,
) {
    let pump = Pump { process, events };
    let mut buffer = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let code = loop {
        buffer.reserve(READ_CHUNK_BYTES);
        let read = tokio::select! {
            biased;
            () = stop.cancelled() => break STOPPED_EXIT_CODE,
            read = reader.read_buf(&mut buffer) => read,
        };
        match read {
            Ok(0) => break 0,
            Err(_) => break BROKEN_EXIT_CODE,
            // As the process pump keeps its chunks: a large read is the chunk itself, a
            // small one is copied out so that a retained chunk costs its size.
            Ok(n) if n >= READ_CHUNK_BYTES / 2 => {
                pump.output(ExecOutputStream::Stdout, buffer.split().freeze()).await;
            }
            Ok(n) => {
                let chunk = Bytes::copy_from_slice(&buffer[..n]);
                buffer.clear();
                pump.output(ExecOutputStream::Stdout, chunk).await;
            }
        }
    };
    drop(reader);
    pump.exit(code).await;
    pump.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_loopback_is_a_destination() {
        assert_eq!(destination(None, 3000).unwrap(), "127.0.0.1:3000".parse().unwrap());
        assert_eq!(destination(Some("::1"), 80).unwrap(), "[::1]:80".parse().unwrap());
        for host in ["10.0.0.1", "127.0.0.2", "0.0.0.0", "localhost", "example.com", ""] {
            let refused = destination(Some(host), 3000).unwrap_err().to_string();
            assert!(refused.contains("loopback only"), "{host}: {refused}");
        }
        assert!(destination(None, 0).is_err());
    }

    #[tokio::test]
    async fn a_port_nobody_listens_on_is_refused_by_kind() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let free = listener.local_addr().unwrap();
        drop(listener);
        let failure = connect(free).await.unwrap_err();
        assert_eq!(failure.kind(), SpawnFailureKind::ConnectRefused);
        assert!(failure.to_string().starts_with(&format!("nothing listens on {free}")));
    }
}
