//! A graceful stop (Tether only): `tether serve --shutdown-grace-secs N` drains on its first
//! SIGTERM — `/readyz` says 503, new sessions are refused, resumes still work, running
//! processes finish and their clients hear every byte — and exits as soon as nothing runs, or
//! kills what is left when the grace runs out, or at once on a second signal.
//!
//! Each test starts its own `tether serve` (not `ServerProcess`, whose stop sends a SIGTERM of
//! its own, which would now cut the drain short) and signals the pid it started — the
//! guardian, as Kubernetes would — which passes the signal on to the serving process.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tether_testkit::RpcClient;
use tether_testkit::client::b64decode;
use tether_testkit::server::tether_binary;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

mod common;

/// Longest a test waits for any one thing it expects (a log line, an exit): a guard against a
/// hang, far longer than any of them takes.
const GUARD: Duration = Duration::from_secs(20);

/// A `tether serve --shutdown-grace-secs N`, killed (SIGKILL to its guardian) when dropped.
struct Drainable {
    child: tokio::process::Child,
    url: String,
    /// The server's stderr, a line at a time: the drain says in its log when it starts and
    /// why it ends.
    log: mpsc::UnboundedReceiver<String>,
}

impl Drainable {
    async fn start(grace_secs: &str) -> Self {
        let mut child = tokio::process::Command::new(tether_binary().unwrap())
            .args(["serve", "--listen", "ws://127.0.0.1:0", "--shutdown-grace-secs", grace_secs])
            .env_remove("TETHER_LOG")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = tokio::time::timeout(GUARD, stdout.next_line()).await.unwrap().unwrap().unwrap();
        tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
        let (lines, log) = mpsc::unbounded_channel();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                let _ = lines.send(line);
            }
        });
        Self { child, url, log }
    }

    fn addr(&self) -> &str {
        self.url.trim_start_matches("ws://")
    }

    fn terminate(&self) {
        let pid = rustix::process::Pid::from_raw(self.child.id().unwrap() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    }

    /// The first log line (from now) that contains `needle`.
    async fn logged(&mut self, needle: &str) -> String {
        let found = async {
            loop {
                let line = self.log.recv().await.expect("the server's stderr ended");
                if line.contains(needle) {
                    return line;
                }
            }
        };
        tokio::time::timeout(GUARD, found).await.unwrap_or_else(|_| panic!("no `{needle}` logged"))
    }

    async fn exited(&mut self) -> ExitStatus {
        tokio::time::timeout(GUARD, self.child.wait()).await.expect("the server exited").unwrap()
    }
}

/// The status line and body of a plain `GET path`.
async fn get(addr: &str, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(GUARD, stream.read_to_end(&mut response)).await.unwrap().unwrap();
    String::from_utf8_lossy(&response).into_owned()
}

/// Reads process `id`'s output with long polls until it contains `marker`.
async fn output_until(client: &mut RpcClient, id: &str, marker: &str) -> String {
    let mut text = String::new();
    let mut after = 0;
    let deadline = tokio::time::Instant::now() + GUARD;
    while !text.contains(marker) {
        assert!(tokio::time::Instant::now() < deadline, "{id} never printed {marker:?}: {text:?}");
        let params = json!({"processId": id, "afterSeq": after, "waitMs": 1000});
        let read = client.ok("process/read", params).await.unwrap();
        text.push_str(&common::text(&read["chunks"]));
        after = read["nextSeq"].as_u64().unwrap().saturating_sub(1);
    }
    text
}

/// The text of a process's `process/output` notifications.
fn output_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|event| event["method"] == "process/output")
        .map(|event| String::from_utf8(b64decode(&event["params"]["chunk"])).unwrap())
        .collect()
}

/// A drain lets a running command finish: meanwhile the server is not ready and refuses new
/// sessions, the command's client gets its last output, exit code and close, and the server
/// exits 0 once nothing runs — well before the grace is out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_lets_running_commands_finish_and_then_exits() {
    // Setup: a command that is running when the signal comes, and finishes 2 s later.
    let mut server = Drainable::start("30").await;
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let script = "echo started; sleep 2; echo finished; exit 7";
    client.ok("process/start", common::exec("p", script)).await.unwrap();
    output_until(&mut client, "p", "started").await;
    assert!(get(server.addr(), "/readyz").await.starts_with("HTTP/1.1 200"));

    // Exercise: SIGTERM to the pid a supervisor knows.
    server.terminate();
    let signalled = tokio::time::Instant::now();
    let started = server.logged("draining").await;
    assert!(started.contains("running=1") && started.contains("grace_s=30"), "{started}");

    // Assert: not ready, new sessions refused (and counted), the command's client served.
    let readyz = get(server.addr(), "/readyz").await;
    assert!(readyz.starts_with("HTTP/1.1 503"), "{readyz}");
    let mut newcomer = RpcClient::connect(&server.url).await.unwrap();
    let refused = newcomer.initialize(None).await.unwrap().unwrap_err();
    assert_eq!(refused.code, -32600);
    assert_eq!(
        refused.message,
        "this server is draining (shutting down): start the session on another executor; resuming a session still works"
    );
    let metrics = get(server.addr(), "/metrics").await;
    assert!(metrics.contains(r#"tether_sessions_refused_total{reason="draining"} 1"#), "{metrics}");
    let events = client.process_events("p").await.unwrap();
    assert!(output_text(&events).contains("finished"), "{events:?}");
    let exited = events.iter().find(|e| e["method"] == "process/exited").expect("exited");
    assert_eq!(exited["params"]["exitCode"], 7);
    assert_eq!(events.last().unwrap()["method"], "process/closed");
    // The server stops because the work is done, not because the grace ran out.
    server.logged("drain done: every process finished").await;
    assert!(server.exited().await.success());
    assert!(signalled.elapsed() < Duration::from_secs(15), "{:?}", signalled.elapsed());
}

/// A command that outlives the grace is killed with the server, its client is told the server
/// is going away (Close 1001), and the server still exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_outlives_the_grace_is_killed() {
    // Setup: a raw WebSocket, to see the Close frame; the command prints its pid.
    let mut server = Drainable::start("1").await;
    let (mut socket, _) = tokio_tungstenite::connect_async(server.url.as_str()).await.unwrap();
    let mut send = async |value: Value| socket.send(Message::text(value.to_string())).await;
    send(json!({"id": 1, "method": "initialize", "params": {"clientName": "t"}})).await.unwrap();
    send(json!({"method": "initialized", "params": {}})).await.unwrap();
    let start = common::exec("long", "echo $$; exec sleep 60");
    send(json!({"id": 2, "method": "process/start", "params": start})).await.unwrap();
    let mut printed = String::new();
    let read_pid = async {
        while !printed.contains('\n') {
            let Some(Ok(Message::Text(text))) = socket.next().await else { panic!("closed") };
            let message: Value = serde_json::from_str(&text).unwrap();
            if message["method"] == "process/output" {
                printed
                    .push_str(&String::from_utf8(b64decode(&message["params"]["chunk"])).unwrap());
            }
        }
    };
    tokio::time::timeout(GUARD, read_pid).await.expect("the command printed its pid");
    let pid: u32 = printed.trim().parse().unwrap();

    // Exercise.
    server.terminate();

    // Assert: the grace runs out, the client hears 1001, the command is gone, exit 0.
    let over = server.logged("grace ran out").await;
    assert!(over.contains("running=1"), "{over}");
    let close = async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(Some(frame)))) => {
                    return (u16::from(frame.code), frame.reason.to_string());
                }
                Some(Ok(_)) => continue,
                other => panic!("ended without a Close frame: {other:?}"),
            }
        }
    };
    let close = tokio::time::timeout(GUARD, close).await.expect("a Close frame");
    assert_eq!(close, (1001, "server is shutting down".into()));
    assert!(server.exited().await.success());
    assert!(common::dies_soon(pid).await, "the command {pid} outlived the server");
}

/// A second SIGTERM during a long grace stops the server at once, killing what runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_ends_the_drain_at_once() {
    // Setup: a command that would keep a ten-minute drain going.
    let mut server = Drainable::start("600").await;
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    client.ok("process/start", common::exec("long", "echo $$; exec sleep 60")).await.unwrap();
    let pid: u32 = output_until(&mut client, "long", "\n").await.trim().parse().unwrap();
    server.terminate();
    server.logged("draining").await;

    // Exercise.
    let second = tokio::time::Instant::now();
    server.terminate();

    // Assert.
    server.logged("cut short by a second signal").await;
    assert!(server.exited().await.success());
    assert!(second.elapsed() < Duration::from_secs(10), "{:?}", second.elapsed());
    assert!(common::dies_soon(pid).await, "the command {pid} outlived the server");
}

/// A client that dropped before the drain comes back during it: the resume is accepted and it
/// reads what its command printed while it was away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_can_be_resumed_during_a_drain() {
    // Setup: a command that waits for a line on stdin, its client gone.
    let mut server = Drainable::start("30").await;
    let (mut first, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let session = init["sessionId"].as_str().unwrap().to_owned();
    let mut start = common::exec("p", "echo before; read line; echo \"after $line\"");
    start["pipeStdin"] = json!(true);
    first.ok("process/start", start).await.unwrap();
    output_until(&mut first, "p", "before").await;
    first.close().await;
    server.logged("session detached").await;
    server.terminate();
    server.logged("draining").await;

    // Exercise: resume, and let the command finish.
    let mut second = RpcClient::connect(&server.url).await.unwrap();
    second.initialize(Some(&session)).await.unwrap().expect("a resume during a drain");
    let line = tether_testkit::client::b64encode(b"drain\n");
    let write = json!({"processId": "p", "chunk": line, "writeId": "1"});
    second.ok("process/write", write).await.unwrap();

    // Assert: everything it printed, then the server's own end.
    let text = output_until(&mut second, "p", "after drain").await;
    assert!(text.starts_with("before\n"), "{text:?}");
    server.logged("drain done: every process finished").await;
    assert!(server.exited().await.success());
}

/// A grace past the ceiling is refused in one line naming the flag, before anything is served.
#[test]
fn a_grace_past_an_hour_is_refused() {
    let output = std::process::Command::new(tether_binary().unwrap())
        .args(["serve", "--listen", "ws://127.0.0.1:0", "--shutdown-grace-secs", "3601"])
        .env_remove("TETHER_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty(), "nothing was served");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        stderr,
        "tether: --shutdown-grace-secs 3601 is more than the most a drain may last, 3600 (an hour); \
         give 3600 or less\n"
    );
}
