//! `tether port-forward` and the `process/connect` it is built on: connections to a local port
//! reach a server of the test's own on the executor's loopback, byte for byte, both ways,
//! several at once, through a connection that drops; a refused port, a taken local port and
//! a server without the extension are each said in one line; Ctrl-C leaves nothing running.
//! The executor is this machine, so "the executor's loopback" is this test's loopback too.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::client::{b64encode, output_of};
use tether_testkit::server::tether_binary;
use tether_testkit::{FaultProxy, RpcClient, ServerProcess, Target};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Every wait of these tests is on an event; this only bounds a test that would hang.
const PATIENCE: Duration = Duration::from_secs(60);

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future).await.unwrap_or_else(|_| panic!("{what}: timed out"))
}

/// An echo server on the executor's loopback: each connection gets back what it sends, and
/// when it has finished sending, the echo finishes too (a half-close each way). Each
/// connection's end is reported on `ended`.
struct EchoServer {
    port: u16,
    ended: mpsc::UnboundedReceiver<()>,
}

impl EchoServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (report, ended) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let report = report.clone();
                tokio::spawn(async move {
                    let (mut from, mut to) = socket.split();
                    let _ = tokio::io::copy(&mut from, &mut to).await;
                    let _ = to.shutdown().await;
                    let _ = report.send(());
                });
            }
        });
        Self { port, ended }
    }
}

/// A running `tether port-forward`, once it has said where it listens.
struct Forward {
    child: tokio::process::Child,
    local: SocketAddr,
    /// Its stderr's later lines.
    lines: mpsc::UnboundedReceiver<String>,
}

impl Forward {
    /// `tether port-forward --url URL 0:REMOTE_PORT`, waited for until it prints its line.
    async fn start(url: &str, remote_port: u16) -> Self {
        let mut child = tokio::process::Command::new(tether_binary().unwrap())
            .args(["port-forward", "--url", url, &format!("0:{remote_port}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = within("the Forwarding line", stderr.next_line()).await.unwrap();
        let first = first.expect("tether port-forward said nothing before it ended");
        let expected_tail = format!(" -> executor 127.0.0.1:{remote_port}");
        let local = first
            .strip_prefix("Forwarding ")
            .and_then(|rest| rest.strip_suffix(&expected_tail))
            .unwrap_or_else(|| panic!("unexpected first line: {first}"))
            .parse()
            .unwrap();
        let (send, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                let _ = send.send(line);
            }
        });
        Self { child, local, lines }
    }

    async fn next_line(&mut self) -> String {
        within("a line on stderr", self.lines.recv()).await.expect("stderr ended")
    }

    /// Ctrl-C, and the exit status.
    async fn interrupt(mut self) -> std::process::ExitStatus {
        let pid = rustix::process::Pid::from_raw(self.child.id().unwrap() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
        within("the exit after Ctrl-C", self.child.wait()).await.unwrap()
    }
}

/// Sends `data` through a new connection to `local` and returns what comes back once the far
/// side has finished: written and read at once, the sending side shut down after the last byte.
async fn round_trip(local: SocketAddr, data: &[u8]) -> Vec<u8> {
    let socket = TcpStream::connect(local).await.unwrap();
    let (mut from, mut to) = socket.into_split();
    let writing = async {
        to.write_all(data).await.unwrap();
        to.shutdown().await.unwrap();
    };
    let reading = async {
        let mut back = Vec::new();
        from.read_to_end(&mut back).await.unwrap();
        back
    };
    within("the echo", async { tokio::join!(writing, reading).1 }).await
}

/// Bytes that show where a misplaced or lost block came from.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as u8
        })
        .collect()
}

/// A port nothing listens on (bound for a moment, then let go).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Eight connections at once, each echoed whole and separately: each is its own forwarded
/// connection, and a half-close travels through each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_connections_at_once_are_each_echoed_whole() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let echo = EchoServer::start().await;
    let forward = Forward::start(&server.url, echo.port).await;
    let messages: Vec<Vec<u8>> =
        (0..8).map(|n| format!("hello from connection {n}\n").repeat(n + 1).into()).collect();
    let echoed = futures_util::future::join_all(
        messages.iter().map(|message| round_trip(forward.local, message)),
    )
    .await;
    assert_eq!(echoed, messages);
    assert_eq!(forward.interrupt().await.code(), Some(0));
}

/// 16 MiB up and the same 16 MiB back at once, the sender's end of sending passed on (a
/// half-close), then the echo's: byte-identical both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_transfer_is_byte_identical_both_ways() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let echo = EchoServer::start().await;
    let forward = Forward::start(&server.url, echo.port).await;
    let data = pattern(16 * 1024 * 1024, 1);
    let back = round_trip(forward.local, &data).await;
    assert_eq!(back.len(), data.len());
    assert!(back == data, "the echo differs");
    assert_eq!(forward.interrupt().await.code(), Some(0));
}

/// A connection whose port on the executor has nothing listening is closed here and said in
/// one line; the forward goes on, and once something listens there, connections reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_remote_port_closes_that_connection_and_the_forward_goes_on() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let port = free_port();
    let mut forward = Forward::start(&server.url, port).await;
    let mut refused = TcpStream::connect(forward.local).await.unwrap();
    let mut nothing = Vec::new();
    within("the refused connection's close", refused.read_to_end(&mut nothing)).await.unwrap();
    assert!(nothing.is_empty());
    let line = forward.next_line().await;
    assert!(
        line.contains(&format!("nothing listens on 127.0.0.1:{port} on the executor")),
        "{line}"
    );
    // Now something listens there.
    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let serving = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        socket.write_all(b"served\n").await.unwrap();
    });
    assert_eq!(round_trip(forward.local, b"").await, b"served\n");
    serving.await.unwrap();
    assert_eq!(forward.interrupt().await.code(), Some(0));
}

/// The reference has no `portForward`: refused in one line, before any connection is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_is_refused_in_one_line() {
    let server = ServerProcess::start(Target::Reference).await.unwrap();
    let output = tokio::process::Command::new(tether_binary().unwrap())
        .args(["port-forward", "--url", &server.url, "0:3000"])
        .stdin(Stdio::null())
        .output();
    let output = within("the refusal", output).await.unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        stderr,
        "tether: this exec-server cannot forward ports (the portForward extension): point --url at a Tether server\n"
    );
}

/// A local port already taken is said in one line that names it and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_local_port_is_said_in_one_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let output = tokio::process::Command::new(tether_binary().unwrap())
        .args(["port-forward", "--url", "ws://127.0.0.1:9", &format!("{port}:3000")])
        .stdin(Stdio::null())
        .output();
    let output = within("the refusal", output).await.unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{port} is already in use here")), "{stderr}");
    assert!(stderr.contains("or 0 for any free one"), "{stderr}");
}

/// The session's connection is cut in the middle of an 8 MiB echo (after its first bytes
/// came back): the client resumes the session, the forwarded connection goes on, and every
/// byte arrives once, in order, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_mid_transfer_is_survived_byte_identical() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let echo = EchoServer::start().await;
    let forward = Forward::start(&proxy.url, echo.port).await;
    let data = pattern(8 * 1024 * 1024, 2);
    let socket = TcpStream::connect(forward.local).await.unwrap();
    let (mut from, mut to) = socket.into_split();
    let writing = async {
        to.write_all(&data).await.unwrap();
        to.shutdown().await.unwrap();
    };
    let reading = async {
        let mut back = vec![0u8; 64 * 1024];
        let n = from.read(&mut back).await.unwrap();
        assert!(n > 0);
        back.truncate(n);
        proxy.cut();
        from.read_to_end(&mut back).await.unwrap();
        back
    };
    let back = within("the echo through the cut", async { tokio::join!(writing, reading).1 }).await;
    assert_eq!(back.len(), data.len());
    assert!(back == data, "the echo differs");
    assert!(proxy.connections() > 1, "the session was resumed on a new connection");
    assert_eq!(forward.interrupt().await.code(), Some(0));
}

/// Ctrl-C while a connection is open: exit 0, the connection on the executor closed (the
/// server there sees its end), and nothing left running in any session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_ends_it_with_0_and_leaves_nothing_running() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let mut echo = EchoServer::start().await;
    let forward = Forward::start(&server.url, echo.port).await;
    let mut open = TcpStream::connect(forward.local).await.unwrap();
    open.write_all(b"still here\n").await.unwrap();
    let mut back = [0u8; 11];
    within("the echo", open.read_exact(&mut back)).await.unwrap();
    assert_eq!(&back, b"still here\n");
    assert_eq!(forward.interrupt().await.code(), Some(0));
    within("the executor's side closed", echo.ended.recv()).await.unwrap();
    let listed = tokio::process::Command::new(tether_binary().unwrap())
        .args(["sessions", "--url", &server.url, "--json", "--all"])
        .output();
    let listed = within("tether sessions", listed).await.unwrap();
    assert_eq!(listed.status.code(), Some(0), "{}", String::from_utf8_lossy(&listed.stderr));
    let sessions: Vec<Value> = serde_json::from_slice(&listed.stdout).unwrap();
    assert!(sessions.iter().all(|s| s["running"] == 0), "{sessions:?}");
}

/// `process/connect` as a client speaks it: bytes written reach the peer, the peer's come back
/// as `stdout`, `closeStdin` is the peer's end of input, and the peer's close is exit 0; the
/// connection is listed with its destination. A destination off the loopback, a `sandbox`, and
/// a port nothing listens on are refused, each by its kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_connect_speaks_the_process_protocol() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let echo = EchoServer::start().await;
    let (mut client, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let extensions = &init["environmentInfo"]["capabilities"]["tetherExtensions"];
    assert_eq!(extensions["portForward"], true, "{init}");

    let started = client.ok("process/connect", json!({"processId": "c1", "port": echo.port}));
    assert_eq!(started.await.unwrap(), json!({"processId": "c1"}));
    let listed = client.ok("process/list", json!({})).await.unwrap();
    let entry = &listed["processes"][0];
    assert_eq!(entry["connect"], format!("127.0.0.1:{}", echo.port), "{listed}");
    assert_eq!(entry["argv"], json!([]));
    let write = json!({"processId": "c1", "chunk": b64encode(b"ping\n"), "writeId": "w1"});
    assert_eq!(client.ok("process/write", write).await.unwrap(), json!({"status": "accepted"}));
    client.ok("process/closeStdin", json!({"processId": "c1"})).await.unwrap();
    let events = within("the connection's events", client.process_events("c1")).await.unwrap();
    assert_eq!(output_of(&events, "stdout"), b"ping\n");
    let exited = events.iter().find(|e| e["method"] == "process/exited").unwrap();
    assert_eq!(exited["params"]["exitCode"], 0, "{events:?}");

    let off_loopback = json!({"processId": "c2", "port": 22, "host": "10.0.0.1"});
    let refused = client.err("process/connect", off_loopback).await.unwrap();
    assert_eq!(refused.code, -32602);
    assert!(refused.message.contains("loopback only"), "{}", refused.message);
    let sandboxed = json!({"processId": "c3", "port": echo.port, "sandbox": {"type": "readOnly"}});
    let refused = client.err("process/connect", sandboxed).await.unwrap();
    assert_eq!(refused.code, -32602);
    assert!(refused.message.contains("sandbox"), "{}", refused.message);
    let port = free_port();
    let nobody = json!({"processId": "c4", "port": port});
    let refused = client.err("process/connect", nobody).await.unwrap();
    assert_eq!(refused.data, Some(json!({"kind": "connectRefused"})), "{refused:?}");
    assert!(refused.message.starts_with(&format!("nothing listens on 127.0.0.1:{port}")));
    let listed = client.ok("process/list", json!({})).await.unwrap();
    assert_eq!(listed["processes"].as_array().unwrap().len(), 1, "only c1: {listed}");
}
