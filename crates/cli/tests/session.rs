//! Sessions outlive connections: detach, resume, takeover refusal, isolation, expiry, and the
//! stdio transport whose session ends with it.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::client::{b64decode, output_of};
use tether_testkit::{RpcClient, ServerProcess, Target, against_both, wait};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

mod common;
use common::{dies_soon, exec, is_alive, text};

against_both!(
    a_dropped_connection_detaches_and_resume_finds_the_process_running,
    resuming_an_attached_session_is_refused_as_retryable,
    process_ids_belong_to_their_session,
    stdio_serves_one_session_that_ends_with_stdin,
    sigterm_stops_the_server_and_its_processes,
);

async fn a_dropped_connection_detaches_and_resume_finds_the_process_running(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (mut first, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let session_id = init["sessionId"].as_str().unwrap().to_owned();
    let marker =
        std::env::temp_dir().join(format!("tether-detached-{}-{target:?}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let script = format!(
        "echo before; while [ ! -e {m}.closed ]; do sleep 0.02; done; echo during; touch {m}; sleep 30",
        m = marker.display()
    );
    first.ok("process/start", exec("p", &script)).await.unwrap();
    let read = first.ok("process/read", json!({"processId": "p", "waitMs": 10000})).await.unwrap();
    assert_eq!(text(&read["chunks"]), "before\n");
    first.close().await;

    // Output written while nobody is attached is retained: the command writes once the
    // connection is closed, and says it has.
    std::fs::write(marker.with_extension("closed"), "").unwrap();
    wait::until("the detached command's output", wait::DEADLINE, || marker.exists()).await;
    // Resumed once the server has seen the close (until then it is still held: -32010).
    let (mut second, resumed) = loop {
        let mut second = RpcClient::connect(&server.url).await.unwrap();
        match second.initialize(Some(&session_id)).await.unwrap() {
            Ok(resumed) => break (second, resumed),
            Err(error) if error.code == -32010 => continue,
            Err(error) => panic!("{error:?}"),
        }
    };
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_file(marker.with_extension("closed"));
    assert_eq!(resumed["sessionId"], session_id.as_str());
    let read = second.ok("process/read", json!({"processId": "p", "afterSeq": 0})).await.unwrap();
    assert_eq!(text(&read["chunks"]), "before\nduring\n");
    assert_eq!((read["exited"].clone(), read["closed"].clone()), (json!(false), json!(false)));

    // Notifications now reach the new connection.
    let terminated = second.ok("process/terminate", json!({"processId": "p"})).await.unwrap();
    assert_eq!(terminated, json!({"running": true}));
    let caught_up = read["nextSeq"].as_u64().unwrap() - 1;
    let events = second.process_events_after("p", caught_up).await.unwrap();
    assert!(events.iter().any(|e| e["method"] == "process/exited"));
}

async fn resuming_an_attached_session_is_refused_as_retryable(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (_holder, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let session_id = init["sessionId"].as_str().unwrap();
    let mut intruder = RpcClient::connect(&server.url).await.unwrap();
    let error = intruder.initialize(Some(session_id)).await.unwrap().unwrap_err();
    assert_eq!(error.code, -32010);
    assert_eq!(
        error.message,
        format!("session {session_id} is already attached to another connection")
    );
    // The refused connection may still start a session of its own.
    let fresh = intruder.initialize(None).await.unwrap().unwrap();
    assert_ne!(fresh["sessionId"], session_id);
}

async fn process_ids_belong_to_their_session(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (mut alice, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let (mut bob, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    alice.ok("process/start", exec("same", "echo alice; sleep 30")).await.unwrap();
    bob.ok("process/start", exec("same", "echo bob")).await.unwrap();
    let events = bob.process_events("same").await.unwrap();
    assert_eq!(output_of(&events, "stdout"), b"bob\n");
    let read =
        alice.ok("process/read", json!({"processId": "same", "waitMs": 10000})).await.unwrap();
    assert_eq!(text(&read["chunks"]), "alice\n");
    bob.ok("process/start", exec("bobs", "sleep 30")).await.unwrap();
    let error = alice.err("process/read", json!({"processId": "bobs"})).await.unwrap();
    assert_eq!(error.message, "unknown process id bobs");
    let terminate = alice.ok("process/terminate", json!({"processId": "bobs"})).await.unwrap();
    assert_eq!(terminate, json!({"running": false}), "another session's process is out of reach");
    alice.ok("process/terminate", json!({"processId": "same"})).await.unwrap();
    bob.ok("process/terminate", json!({"processId": "bobs"})).await.unwrap();
}

async fn stdio_serves_one_session_that_ends_with_stdin(target: Target) {
    let scratch = tempdir();
    let mut server = StdioServer::spawn(target, &scratch);
    // CRLF and blank lines are fine.
    server
        .send("\r\n{\"id\":1,\"method\":\"initialize\",\"params\":{\"clientName\":\"stdio\"}}\r")
        .await;
    let reply = server.next_message().await;
    assert!(reply["result"]["sessionId"].is_string(), "{reply}");
    server.send("{\"method\":\"initialized\",\"params\":{}}\n{bad").await;
    let reply = server.next_message().await;
    assert_eq!(reply["id"], -1);
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("failed to parse JSON-RPC message from exec-server stdio: "));

    let pid = server.start_sleeper().await;
    assert!(is_alive(pid));
    drop(server.stdin.take());
    let status =
        tokio::time::timeout(Duration::from_secs(10), server.child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "exits 0 at end of input: {status}");
    assert!(dies_soon(pid).await, "its processes are gone");
    let _ = std::fs::remove_dir_all(scratch);
}

async fn sigterm_stops_the_server_and_its_processes(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    client.ok("process/start", exec("p", "echo $$; sleep 60")).await.unwrap();
    let read = client.ok("process/read", json!({"processId": "p", "waitMs": 10000})).await.unwrap();
    let pid: u32 = text(&read["chunks"]).trim().parse().unwrap();
    let status = server.stop().await.unwrap();
    assert!(status.success(), "{status}");
    assert!(dies_soon(pid).await, "processes do not outlive the server");
}

/// Tether only: the detach TTL is a flag, so expiry can be tested in seconds (the reference's is
/// a fixed 80 s).
#[tokio::test]
async fn an_expired_session_is_gone_and_its_processes_killed() {
    let server =
        ServerProcess::start_with(Target::Tether, &["--session-ttl-secs", "1"]).await.unwrap();
    let (mut client, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let session_id = init["sessionId"].as_str().unwrap().to_owned();
    client.ok("process/start", exec("p", "echo $$; sleep 60")).await.unwrap();
    let read = client.ok("process/read", json!({"processId": "p", "waitMs": 10000})).await.unwrap();
    let pid: u32 = text(&read["chunks"]).trim().parse().unwrap();
    client.close().await;

    // Killed when the session expires, a second after the close.
    assert!(dies_soon(pid).await, "the expired session's process was killed");
    let mut late = RpcClient::connect(&server.url).await.unwrap();
    let error = late.initialize(Some(&session_id)).await.unwrap().unwrap_err();
    assert_eq!((error.code, error.message), (-32600, format!("unknown session id {session_id}")));
}

/// Tether only: a resume within the TTL cancels the expiry, and a later detach starts a new one.
#[tokio::test]
async fn resuming_restarts_the_detach_clock() {
    let server =
        ServerProcess::start_with(Target::Tether, &["--session-ttl-secs", "1"]).await.unwrap();
    let (mut client, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let session_id = init["sessionId"].as_str().unwrap().to_owned();
    client.ok("process/start", exec("p", "sleep 60")).await.unwrap();
    client.close().await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let mut client = RpcClient::connect(&server.url).await.unwrap();
        client.initialize(Some(&session_id)).await.unwrap().unwrap();
        let read = client.ok("process/read", json!({"processId": "p"})).await.unwrap();
        assert_eq!(read["exited"], false);
        client.close().await;
    }
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tether-stdio-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Tether only: a stdio server stopped by SIGTERM exits at once, even with stdin still open,
/// and takes its processes with it.
#[tokio::test]
async fn sigterm_stops_a_stdio_server_with_stdin_open() {
    let scratch = tempdir();
    let mut server = StdioServer::spawn(Target::Tether, &scratch);
    server.send("{\"id\":1,\"method\":\"initialize\",\"params\":{\"clientName\":\"stdio\"}}").await;
    server.next_message().await;
    server.send("{\"method\":\"initialized\"}").await;
    let pid = server.start_sleeper().await;
    let server_pid = rustix_pid(server.child.id().unwrap());
    rustix::process::kill_process(server_pid, rustix::process::Signal::TERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(5), server.child.wait())
        .await
        .expect("exits promptly")
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(dies_soon(pid).await);
    let _ = std::fs::remove_dir_all(scratch);
}

/// A server on `--listen stdio`, driven line by line.
struct StdioServer {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl StdioServer {
    fn spawn(target: Target, scratch: &std::path::Path) -> Self {
        let mut command = ServerProcess::command(target, scratch).unwrap();
        command.args(["--listen", "stdio"]).stdin(Stdio::piped()).stdout(Stdio::piped());
        command.stderr(Stdio::null()).kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, stdin, stdout }
    }

    /// Writes `line` and its newline.
    async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    }

    async fn next_message(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(20), self.stdout.next_line())
            .await
            .expect("a message within 20 s")
            .unwrap()
            .expect("stdout open");
        serde_json::from_str(&line).unwrap()
    }

    /// Starts a process that prints its pid and sleeps; returns the pid.
    async fn start_sleeper(&mut self) -> u32 {
        let start =
            json!({"id": 2, "method": "process/start", "params": exec("p", "echo $$; sleep 60")});
        self.send(&start.to_string()).await;
        loop {
            let message = self.next_message().await;
            if message["method"] == "process/output" {
                let text = String::from_utf8(b64decode(&message["params"]["chunk"])).unwrap();
                return text.trim().parse().unwrap();
            }
        }
    }
}

fn rustix_pid(pid: u32) -> rustix::process::Pid {
    rustix::process::Pid::from_raw(pid as i32).unwrap()
}

/// A session id is enough to take over a detached session, so logs above DEBUG never carry it:
/// they name sessions by a short digest, which still lets an operator follow one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_ids_stay_out_of_the_default_log() {
    let common::LoggingServer { child: mut server, url, log: mut stderr } =
        common::LoggingServer::start(&[], &[("TETHER_LOG", None)]).await;
    let (client, init) = RpcClient::connect_initialized(&url).await.unwrap();
    let session_id = init["sessionId"].as_str().unwrap().to_owned();
    drop(client);
    let mut log = String::new();
    // The detach is logged once the server has seen the connection go.
    while let Some(line) = stderr.next_line().await.unwrap() {
        log.push_str(&line);
        log.push('\n');
        if line.contains("session ended by its client") {
            break;
        }
    }
    server.kill().await.unwrap();
    assert!(log.contains("session created"), "{log}");
    assert!(!log.contains(&session_id), "the id is in the log:\n{log}");
    let tag = log.split("session=").nth(1).and_then(|rest| rest.get(..8)).unwrap_or_default();
    assert!(tag.chars().all(|c| c.is_ascii_hexdigit()) && tag.len() == 8, "{log}");
}

/// Every started process leaves one INFO line for an audit (`tether::audit`: its process id,
/// the client, argv, cwd, whether it was sandboxed — not its environment's values), written
/// as JSON with `TETHER_LOG_FORMAT=json`; a client that leaves with nothing running reads as
/// an end, not a detach. A `TETHER_LOG` that is no filter (`json`) is said in one line
/// instead of silencing every log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_process_leaves_an_audit_line_in_json() {
    let env = [("TETHER_LOG", Some("json")), ("TETHER_LOG_FORMAT", Some("json"))];
    let common::LoggingServer { child: mut server, url, log: mut stderr } =
        common::LoggingServer::start(&[], &env).await;
    let first = stderr.next_line().await.unwrap().unwrap();
    assert_eq!(
        first,
        "tether: TETHER_LOG takes a filter (info, debug, tether=debug, …), not \"json\"; the \
         default is used. For JSON lines, set TETHER_LOG_FORMAT=json"
    );
    let (mut client, init) = RpcClient::connect_initialized(&url).await.unwrap();
    let session_id = init["sessionId"].as_str().unwrap().to_owned();
    let mut params = json!({"processId": "audited", "argv": ["/bin/sh", "-c", "exit 0"],
        "cwd": "file:///tmp", "env": {"API_TOKEN": "not-for-the-log"}, "tty": false});
    params["sandbox"] = Value::Null;
    client.ok("process/start", params).await.unwrap();
    client.process_events("audited").await.unwrap();
    drop(client);
    let mut lines = Vec::new();
    let audit = loop {
        let line = stderr.next_line().await.unwrap().expect("the server logs on");
        let parsed: Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("{line}"));
        lines.push(line.clone());
        if parsed["target"] == "tether::audit" {
            break parsed;
        }
    };
    let fields = &audit["fields"];
    assert_eq!(audit["level"], "INFO");
    assert_eq!(fields["process_id"], "audited");
    assert_eq!(fields["client"], "address 127.0.0.1");
    assert_eq!(fields["argv"], r#"["/bin/sh", "-c", "exit 0"]"#);
    assert_eq!(fields["cwd"], "file:///tmp");
    assert_eq!(fields["sandboxed"], false);
    let ended = loop {
        let line = stderr.next_line().await.unwrap().expect("the server logs on");
        lines.push(line.clone());
        let parsed: Value = serde_json::from_str(&line).unwrap();
        let message = parsed["fields"]["message"].as_str().unwrap_or_default().to_owned();
        if message.starts_with("session ") && !message.contains("created") {
            break message;
        }
    };
    assert_eq!(ended, "session ended by its client, nothing running");
    server.kill().await.unwrap();
    let log = lines.join("\n");
    assert!(!log.contains(&session_id) && !log.contains("not-for-the-log"), "{log}");
}
