//! Tether's extensions to the protocol, each advertised in `tetherExtensions` and each additive:
//! a client that sends only the reference's messages sees the reference's behaviour, on Tether
//! as on the reference.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::server::tether_binary;
use tether_testkit::{RpcClient, ServerProcess, Target, against_both, wait};
use tokio::io::AsyncReadExt;

mod common;

against_both!(a_client_that_knows_no_extension_sees_the_reference_protocol);

/// Everything a process printed, from its notifications.
async fn output_of(client: &mut RpcClient, process_id: &str) -> String {
    output_text(&client.process_events(process_id).await.unwrap())
}

/// The output among a process's notifications, as text.
fn output_text(events: &[Value]) -> String {
    let chunks: Vec<Value> = events
        .iter()
        .filter(|event| event["method"] == "process/output")
        .map(|event| event["params"].clone())
        .collect();
    common::text(&Value::Array(chunks))
}

fn tty(id: &str, script: &str) -> Value {
    let mut params = common::exec(id, script);
    params["tty"] = json!(true);
    params
}

async fn a_client_that_knows_no_extension_sees_the_reference_protocol(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (mut client, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let extensions = &init["environmentInfo"]["capabilities"]["tetherExtensions"];
    match target {
        Target::Tether => {
            assert_eq!(extensions["ptySize"], true, "{init}");
            assert_eq!(extensions["closeStdin"], true, "{init}");
        }
        Target::Reference => assert!(extensions.is_null(), "{init}"),
    }
    // A terminal is 24×80 unless a size is asked for.
    client.ok("process/start", tty("plain", "stty size")).await.unwrap();
    assert_eq!(output_of(&mut client, "plain").await.trim(), "24 80");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_starts_at_the_size_asked_and_follows_resizes() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let mut sized = tty("sized", "stty size");
    sized["ptySize"] = json!({"cols": 132, "rows": 40});
    client.ok("process/start", sized).await.unwrap();
    assert_eq!(output_of(&mut client, "sized").await.trim(), "40 132");

    let script = "trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.05; done";
    client.ok("process/start", tty("resized", script)).await.unwrap();
    let ready_seq = loop {
        let notification = client.notification().await.unwrap();
        if notification["method"] == "process/output" {
            break notification["params"]["seq"].as_u64().unwrap();
        }
    };
    client
        .ok("process/resize", json!({"processId": "resized", "cols": 100, "rows": 30}))
        .await
        .unwrap();
    let events = client.process_events_after("resized", ready_seq).await.unwrap();
    assert!(output_text(&events).contains("30 100"));

    let refused = client
        .err("process/resize", json!({"processId": "resized", "cols": 0, "rows": 5}))
        .await
        .unwrap();
    assert_eq!(refused.code, -32602, "{}", refused.message);
    client.ok("process/start", common::exec("piped", "sleep 5")).await.unwrap();
    let refused = client
        .err("process/resize", json!({"processId": "piped", "cols": 80, "rows": 24}))
        .await
        .unwrap();
    assert!(
        refused.code == -32602 && refused.message.contains("no terminal"),
        "{}",
        refused.message
    );
    let unknown = client
        .err("process/resize", json!({"processId": "nobody", "cols": 80, "rows": 24}))
        .await
        .unwrap();
    assert!(unknown.message.contains("unknown process id nobody"), "{}", unknown.message);
}

/// `tether exec --tty` inside a real terminal: the remote terminal gets its size at the start
/// and again whenever the window changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tether_exec_tty_carries_the_local_window_size() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let (pty, pts) = pty_process::open().unwrap();
    pty.resize(pty_process::Size::new(33, 111)).unwrap();
    let script =
        "stty size; trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.05; done";
    let mut child = pty_process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--tty", "--", "sh", "-c", script])
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn(pts)
        .unwrap();
    let (mut reader, writer) = pty.into_split();
    let mut seen = String::new();
    common::read_until(&mut reader, "ready", &mut seen).await;
    assert!(seen.contains("33 111"), "{seen:?}");
    writer.resize(pty_process::Size::new(44, 120)).unwrap();
    common::read_until(&mut reader, "44 120", &mut seen).await;
    let status =
        tokio::time::timeout(Duration::from_secs(20), child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// At a terminal (`--tty`), a link that drops and comes back is said on the terminal, as mosh
/// says it, rather than leaving a frozen screen; the command goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_is_told_when_the_link_drops_and_comes_back() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let proxy = tether_testkit::FaultProxy::start(server.addr()).await.unwrap();
    let scratch = tether_testkit::scratch::Scratch::new("link-told");
    let go_on = scratch.path("go-on");
    let script = format!(
        "echo ready; while [ ! -e {go} ]; do sleep 0.05; done; echo finished",
        go = go_on.display()
    );
    let (pty, pts) = pty_process::open().unwrap();
    let mut child = pty_process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &proxy.url, "--tty", "--", "sh", "-c", &script])
        .kill_on_drop(true)
        .spawn(pts)
        .unwrap();
    let (mut reader, _writer) = pty.into_split();
    let mut seen = String::new();
    common::read_until(&mut reader, "ready", &mut seen).await;
    proxy.cut();
    common::read_until(&mut reader, "[tether: reconnected]", &mut seen).await;
    std::fs::write(&go_on, "").unwrap();
    common::read_until(&mut reader, "finished", &mut seen).await;
    let status =
        tokio::time::timeout(Duration::from_secs(20), child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_stdin_ends_the_input_after_what_was_written() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let mut counter = common::exec("counter", "wc -c");
    counter["pipeStdin"] = json!(true);
    client.ok("process/start", counter).await.unwrap();
    let write = |id: &str| json!({"processId": "counter", "chunk": "aGVsbG8=", "writeId": id});
    let written = client.ok("process/write", write("1")).await.unwrap();
    assert_eq!(written["status"], "accepted");
    client.ok("process/closeStdin", json!({"processId": "counter"})).await.unwrap();
    client.ok("process/closeStdin", json!({"processId": "counter"})).await.unwrap();
    let late = client.ok("process/write", write("2")).await.unwrap();
    assert_eq!(late["status"], "stdinClosed");
    assert_eq!(output_of(&mut client, "counter").await.trim(), "5");

    client.ok("process/start", tty("terminal", "sleep 5")).await.unwrap();
    let refused = client.err("process/closeStdin", json!({"processId": "terminal"})).await.unwrap();
    assert!(refused.code == -32602 && refused.message.contains("Ctrl-D"), "{}", refused.message);
}

/// `tether exec` passes the end of its own input on: `printf hello | tether exec -- wc -c`
/// ends (on a server without `closeStdin`, `wc` would wait for more forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tether_exec_forwards_the_end_of_its_input() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let mut child = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--", "wc", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, b"hello").await.unwrap();
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "5");
    assert_eq!(output.status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lists_its_processes_and_reads_say_what_was_dropped() {
    let server = ServerProcess::start_with(Target::Tether, &["--retain-output-bytes", "1000"])
        .await
        .unwrap();
    let (mut client, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let extensions = &init["environmentInfo"]["capabilities"]["tetherExtensions"];
    assert_eq!(
        (&extensions["processList"], &extensions["oldestRetainedSeq"]),
        (&json!(true), &json!(true))
    );
    client.ok("process/start", common::exec("sleeper", "sleep 30")).await.unwrap();
    let talk = "for i in 1 2 3 4 5 6 7 8 9 10; do head -c 500 /dev/zero; sleep 0.02; done; exit 4";
    client.ok("process/start", common::exec("talker", talk)).await.unwrap();
    client.process_events("talker").await.unwrap();

    let list = client.ok("process/list", json!({})).await.unwrap();
    let processes = list["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2, "{list}");
    let sleeper = &processes[0];
    assert_eq!(sleeper["processId"], "sleeper");
    assert_eq!(sleeper["state"], "running");
    assert_eq!(sleeper["argv"], json!(["/bin/sh", "-c", "sleep 30"]));
    assert_eq!(sleeper["exitCode"], Value::Null);
    let talker = &processes[1];
    assert_eq!((&talker["state"], &talker["exitCode"]), (&json!("closed"), &json!(4)));

    // 5,000 bytes of output in ten writes, 1,000 retained: a read says where what is left
    // begins.
    let read =
        client.ok("process/read", json!({"processId": "talker", "afterSeq": 0})).await.unwrap();
    let oldest = read["oldestRetainedSeq"].as_u64().unwrap();
    let first_chunk = read["chunks"][0]["seq"].as_u64().unwrap();
    assert!(oldest > 1 && oldest == first_chunk, "oldest {oldest}, first chunk {first_chunk}");
    let fresh = client.ok("process/read", json!({"processId": "sleeper"})).await.unwrap();
    assert_eq!(fresh["oldestRetainedSeq"], 1, "nothing dropped");
}

/// The output of one process as it arrives, until `needle` has appeared in it.
async fn output_until(client: &mut RpcClient, process_id: &str, needle: &str, seen: &mut String) {
    while !seen.contains(needle) {
        let notification = client.notification().await.unwrap_or_else(|e| {
            panic!("{needle:?} never came from {process_id} ({e}); seen: {seen:?}")
        });
        if notification["method"] == "process/output"
            && notification["params"]["processId"] == process_id
        {
            seen.push_str(&common::text(&json!([notification["params"]])));
        }
    }
}

/// Each advertised signal reaches the whole process group (a grandchild a shell started in the
/// background too), `kill` ends it with 128 + 9, and a name outside the list is refused with
/// the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_advertised_signal_reaches_the_process_group() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let (mut client, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let advertised = &init["environmentInfo"]["capabilities"]["tetherExtensions"]["signals"];
    assert_eq!(
        advertised,
        &json!(["interrupt", "terminate", "kill", "hangup", "quit", "user1", "user2"])
    );
    let traps =
        |who: &str| format!("for s in TERM HUP QUIT USR1 USR2; do trap \"echo {who}-$s\" $s; done");
    let script = format!(
        "{}; sh -c '{}; echo grandchild-ready; while :; do sleep 0.05; done' & \
         echo leader-ready; while :; do sleep 0.05; done",
        traps("leader"),
        traps("grandchild"),
    );
    client.ok("process/start", common::exec("group", &script)).await.unwrap();
    let mut seen = String::new();
    output_until(&mut client, "group", "leader-ready", &mut seen).await;
    output_until(&mut client, "group", "grandchild-ready", &mut seen).await;
    for (name, trapped) in [
        ("terminate", "TERM"),
        ("hangup", "HUP"),
        ("quit", "QUIT"),
        ("user1", "USR1"),
        ("user2", "USR2"),
    ] {
        let answer = client
            .ok("process/signal", json!({"processId": "group", "signal": name}))
            .await
            .unwrap();
        assert_eq!(answer, json!({}));
        // A shell starts background jobs with SIGQUIT ignored, for good: only the leader
        // can trap it.
        let whom: &[&str] = if trapped == "QUIT" { &["leader"] } else { &["leader", "grandchild"] };
        for who in whom {
            output_until(&mut client, "group", &format!("{who}-{trapped}"), &mut seen).await;
        }
    }

    let refused = client
        .err("process/signal", json!({"processId": "group", "signal": "SIGTERM"}))
        .await
        .unwrap();
    assert_eq!(refused.code, -32602);
    assert_eq!(
        refused.message,
        "unknown variant `SIGTERM`, expected one of `interrupt`, `terminate`, `kill`, `hangup`, `quit`, `user1`, `user2`"
    );

    client.ok("process/signal", json!({"processId": "group", "signal": "kill"})).await.unwrap();
    let exited = loop {
        let notification = client.notification().await.unwrap();
        if notification["method"] == "process/exited" {
            break notification;
        }
    };
    assert_eq!(exited["params"]["exitCode"], 137);
}

/// `tether exec` passes SIGTERM (and the other forwarded signals) on to the command, which
/// decides what to do with it; `tether exec` exits with the command's code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tether_exec_forwards_a_terminate_signal_to_the_command() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let script = "trap 'echo cleaned-up; exit 3' TERM; echo ready; while :; do sleep 0.05; done";
    let mut child = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--no-stdin", "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buffer = [0u8; 256];
    while !seen.ends_with(b"ready\n") {
        let n = tokio::time::timeout(Duration::from_secs(20), stdout.read(&mut buffer))
            .await
            .expect("the command never said it was ready")
            .unwrap();
        assert!(n > 0, "tether exec ended early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buffer[..n]);
    }
    let pid = rustix::process::Pid::from_raw(child.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    stdout.read_to_end(&mut seen).await.unwrap();
    let status =
        tokio::time::timeout(Duration::from_secs(20), child.wait()).await.unwrap().unwrap();
    assert_eq!(String::from_utf8_lossy(&seen), "ready\ncleaned-up\n");
    assert_eq!(status.code(), Some(3));
}

/// A server that spills output (`--spill-output-dir`) still answers a reference client's read
/// the reference way: without `maxBytes`, at most what memory holds comes back, with `nextSeq`
/// after the last chunk, and reading on from there returns the rest without a gap. Closed
/// processes share one spill allowance: the oldest give theirs up first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spilled_output_reads_back_in_pieces_a_reference_client_can_follow() {
    let spill_dir = std::env::temp_dir();
    let server = ServerProcess::start_with(
        Target::Tether,
        &[
            "--retain-output-bytes",
            "65536",
            "--spill-output-dir",
            spill_dir.to_str().unwrap(),
            "--spill-output-bytes",
            "1048576",
        ],
    )
    .await
    .unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    for id in ["first", "second", "third"] {
        client.ok("process/start", common::exec(id, "seq 1 120000")).await.unwrap();
        client.process_events(id).await.unwrap();
    }
    let expected: String = (1..=120000).map(|i| format!("{i}\n")).collect();
    let (mut text, mut after, mut reads) = (String::new(), 0u64, 0);
    loop {
        let read = client
            .ok("process/read", json!({"processId": "third", "afterSeq": after}))
            .await
            .unwrap();
        assert_eq!(read["oldestRetainedSeq"], 1, "the newest closed process keeps its spill");
        let piece = common::text(&read["chunks"]);
        assert!(piece.len() <= 65536 + 65536, "a read carries about what memory holds");
        text += &piece;
        reads += 1;
        let next = read["nextSeq"].as_u64().unwrap();
        if read["chunks"].as_array().unwrap().is_empty() || next - 1 == after {
            break;
        }
        after = next - 1;
    }
    assert!(text == expected, "{} of {} bytes read back", text.len(), expected.len());
    assert!(reads > 5, "{reads} reads");
    let first =
        client.ok("process/read", json!({"processId": "first", "afterSeq": 0})).await.unwrap();
    assert!(first["oldestRetainedSeq"].as_u64().unwrap() > 1, "{}", first["oldestRetainedSeq"]);
    assert!(first["exited"].as_bool().unwrap() && first["closed"].as_bool().unwrap());
}

/// `tether exec --resume SESSION --list`: a harness that lost track of its processes finds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tether_exec_lists_a_sessions_processes() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let session = {
        let (mut client, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
        client.ok("process/start", common::exec("long-job", "sleep 30")).await.unwrap();
        init["sessionId"].as_str().unwrap().to_owned()
    };
    // The first client is gone; once the server notices, the session can be resumed.
    let (url, session) = (server.url.as_str(), session.as_str());
    let listed = move || async move {
        let output = tokio::process::Command::new(tether_binary().unwrap())
            .args(["exec", "--url", url, "--resume", session, "--list"])
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        output.status.success().then_some(output)
    };
    let output =
        wait::until_some_async("a listing of the resumed session", wait::DEADLINE, listed).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with("long-job\trunning\t-\t") && line.ends_with("sleep 30")),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Tether only (`binaryBlocks`): a block's bytes travel raw beside their JSON in a binary
/// message, both ways — NULs and all, byte for byte — a binary message of JSON alone is still
/// a request as the reference reads it, and attached bytes anywhere but on `fs/writeBlock`
/// are refused.
#[tokio::test]
async fn file_blocks_travel_as_raw_bytes_in_binary_messages() {
    use tether_protocol::attached::{join, split};
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let info = client.ok("environment/info", json!({})).await.unwrap();
    assert_eq!(info["capabilities"]["tetherExtensions"]["binaryBlocks"], true);
    let dir = tempfile_dir("binary-blocks");
    let path = format!("file://{}/blocks.bin", dir.display());
    let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).chain([0, 0, b'{']).collect();

    client.ok("fs/open", json!({"handleId": "w", "path": path, "mode": "replace"})).await.unwrap();
    let header = json!({"id": 900, "method": "fs/writeBlock",
        "params": {"handleId": "w", "offset": 3}});
    client.send_binary(join(&header.to_string(), &bytes)).await.unwrap();
    assert_eq!(client.response(900).await.unwrap().unwrap(), json!({}));
    client.ok("fs/close", json!({"handleId": "w"})).await.unwrap();
    let on_disk = std::fs::read(dir.join("blocks.bin")).unwrap();
    assert_eq!((&on_disk[..3], &on_disk[3..]), (&[0u8, 0, 0][..], &bytes[..]), "gap zero-filled");

    client.ok("fs/open", json!({"handleId": "r", "path": path})).await.unwrap();
    for (offset, len, eof) in [(0u64, 70_003u64, false), (70_000, 10, true)] {
        let read = json!({"handleId": "r", "offset": offset, "len": len, "attachChunk": true});
        let id = client.send_request("fs/readBlock", read).await.unwrap();
        let message = client.next_binary().await.unwrap();
        let (json, attached) = split(&message).unwrap();
        let answer: Value = serde_json::from_slice(json).unwrap();
        assert_eq!(answer, json!({"id": id, "result": {"eof": eof}}));
        let end = (offset + len).min(on_disk.len() as u64) as usize;
        assert!(attached == &on_disk[offset as usize..end], "the bytes at {offset}");
    }
    // Without `attachChunk`, the reference's answer.
    let plain = client.ok("fs/readBlock", json!({"handleId": "r", "offset": 0, "len": 2})).await;
    assert_eq!(plain.unwrap(), json!({"chunk": "AAA=", "eof": false}));
    // The whole file with its bytes attached, NULs and all; without `attachData`, in base64.
    let read = json!({"path": path, "attachData": true});
    let id = client.send_request("fs/readFile", read).await.unwrap();
    let message = client.next_binary().await.unwrap();
    let (json, attached) = split(&message).unwrap();
    let answer: Value = serde_json::from_slice(json).unwrap();
    assert_eq!(answer, json!({"id": id, "result": {}}));
    assert!(attached == on_disk.as_slice(), "the file's bytes, as they are");
    let plain = client.ok("fs/readFile", json!({"path": path})).await.unwrap();
    assert_eq!(plain["dataBase64"].as_str().unwrap().len(), on_disk.len().div_ceil(3) * 4);
    // A binary message with no NUL is JSON, as the reference reads it.
    let status = json!({"id": 901, "method": "environment/status", "params": {}});
    client.send_binary(status.to_string().into_bytes()).await.unwrap();
    assert_eq!(client.response(901).await.unwrap().unwrap(), json!({"status": "ready"}));

    let refused = json!({"id": 902, "method": "fs/readFile", "params": {"path": path}});
    client.send_binary(join(&refused.to_string(), b"x")).await.unwrap();
    let error = client.response(902).await.unwrap().unwrap_err();
    assert_eq!(
        (error.code, error.message.as_str()),
        (
            -32600,
            "fs/readFile takes no attached bytes: only fs/writeBlock does (Tether's binaryBlocks extension); send the request as JSON alone"
        )
    );
    let headless = json!({"id": 903, "method": "fs/writeBlock", "params": {"offset": 0}});
    client.send_binary(join(&headless.to_string(), b"x")).await.unwrap();
    let error = client.response(903).await.unwrap().unwrap_err();
    assert_eq!((error.code, error.message.as_str()), (-32602, "missing field `handleId`"));
    let _ = std::fs::remove_dir_all(dir);
}

/// Tether only (`attachedHttpBodies`): a body asked for with `attachBody` comes as binary
/// messages. Buffered, the answer: its JSON with an empty `bodyBase64`, a NUL, the body as it
/// is. Streamed, each delta: its JSON with an empty `deltaBase64`, a NUL, its bytes, at most
/// 1 MiB, after the text answer and numbered as base64 deltas are; the terminal frame stays
/// text, with the body's error when it broke off.
#[tokio::test]
async fn http_bodies_travel_as_raw_bytes_in_binary_messages() {
    use tether_protocol::attached::split;
    use tether_testkit::HttpPeer;
    use tether_testkit::http_peer::large_body;
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let peer = HttpPeer::start().await.unwrap();
    let info = client.ok("environment/info", json!({})).await.unwrap();
    assert_eq!(info["capabilities"]["tetherExtensions"]["attachedHttpBodies"], true);

    let len = 3 * 1024 * 1024 + 7;
    let url = peer.url(&format!("/large?bytes={len}"));
    let params = json!({"method": "GET", "url": url, "requestId": "b", "attachBody": true});
    let id = client.send_request("http/request", params).await.unwrap();
    let message = client.next_binary().await.unwrap();
    let (json, attached) = split(&message).unwrap();
    let answer: Value = serde_json::from_slice(json).unwrap();
    assert_eq!((&answer["id"], &answer["result"]["status"]), (&json!(id), &json!(200)));
    assert_eq!(answer["result"]["bodyBase64"], "");
    assert!(attached == large_body(len).as_slice(), "the peer's body, byte for byte");

    for (path, request_id, expected, error) in [
        (format!("/large?bytes={len}"), "big", large_body(len), Value::Null),
        ("/fail".to_owned(), "broken", b"partial".to_vec(), json!("error decoding response body")),
    ] {
        let params = json!({"method": "GET", "url": peer.url(&path), "requestId": request_id,
            "streamResponse": true, "attachBody": true});
        let id = client.send_request("http/request", params).await.unwrap();
        let answer = client.next_text_or_binary().await.unwrap().unwrap();
        assert_eq!((&answer["id"], &answer["result"]["bodyBase64"]), (&json!(id), &json!("")));
        let (mut body, mut seq) = (Vec::new(), 1);
        let terminal = loop {
            match client.next_text_or_binary().await.unwrap() {
                Err(message) => {
                    let (json, attached) = split(&message).unwrap();
                    let delta: Value = serde_json::from_slice(json).unwrap();
                    assert_eq!(
                        delta,
                        json!({"method": "http/request/bodyDelta", "params": {
                            "requestId": request_id, "seq": seq, "deltaBase64": "",
                            "done": false, "error": null}})
                    );
                    assert!(!attached.is_empty() && attached.len() <= 1024 * 1024, "{seq}");
                    body.extend_from_slice(attached);
                    seq += 1;
                }
                Ok(text) => break text,
            }
        };
        assert!(body == expected, "{path}: the peer's body, byte for byte");
        assert_eq!(
            terminal,
            json!({"method": "http/request/bodyDelta", "params": {"requestId": request_id,
                "seq": seq, "deltaBase64": "", "done": true, "error": error}})
        );
    }
}

against_both!(output_travels_raw_to_a_connection_that_asks_for_it);

/// `attachedOutput`: a connection that asks at `initialize` gets each `process/output` from
/// Tether as a binary message, the notification's JSON with an empty `chunk`, a NUL, then the
/// bytes as they are (NULs, bytes no UTF-8 allows); the reference ignores the member and sends
/// text. Either way the output is the same, byte for byte, in sequence. A client that resumes
/// the session without asking gets text again: each connection says for itself what it reads.
async fn output_travels_raw_to_a_connection_that_asks_for_it(target: Target) {
    use tether_protocol::attached::split;
    let server = ServerProcess::start(target).await.unwrap();
    let mut client = RpcClient::connect(&server.url).await.unwrap();
    let init = json!({"clientName": "raw-output", "attachOutput": true});
    let init = client.ok("initialize", init).await.unwrap();
    client.notify("initialized", json!({})).await.unwrap();
    let granted = target == Target::Tether;
    assert_eq!(init.get("attachedOutput"), granted.then_some(&json!(true)), "{init}");

    let script = r"printf 'a\000b\377'; printf '\n%.0s' $(seq 3000); printf end";
    let id = client.send_request("process/start", common::exec("raw", script)).await.unwrap();
    // By sequence number: the reference reports the exit from a task of its own, sometimes
    // before the output it follows.
    let (mut events, mut closed_seq, mut binary_messages) = (BTreeMap::new(), None, 0);
    while closed_seq.is_none_or(|closed| events.len() < closed) {
        let (message, chunk) = match client.next_text_or_binary().await.unwrap() {
            Ok(message) if message["id"] == id => continue,
            Ok(message) => {
                let chunk = message["params"]["chunk"]
                    .as_str()
                    .map(|chunk| tether_testkit::client::b64decode(&json!(chunk)));
                (message, chunk)
            }
            Err(binary) => {
                binary_messages += 1;
                let (json, attached) = split(&binary).unwrap();
                let message: Value = serde_json::from_slice(json).unwrap();
                assert_eq!(message["params"]["chunk"], "", "{message}");
                (message, Some(attached.to_vec()))
            }
        };
        let seq = message["params"]["seq"].as_u64().unwrap() as usize;
        if message["method"] == "process/closed" {
            closed_seq = Some(seq);
        }
        assert!(events.insert(seq, (message, chunk)).is_none(), "seq {seq} twice");
    }
    assert_eq!(
        events.keys().copied().collect::<Vec<_>>(),
        (1..=closed_seq.unwrap()).collect::<Vec<_>>()
    );
    let mut bytes = Vec::new();
    for (message, chunk) in events.into_values() {
        match message["method"].as_str().unwrap() {
            "process/output" => {
                assert_eq!(message["params"]["stream"], "stdout");
                bytes.extend(chunk.unwrap());
            }
            "process/exited" => assert_eq!(message["params"]["exitCode"], 0),
            "process/closed" => {}
            other => panic!("{other}"),
        }
    }
    let expected: Vec<u8> = [&b"a\0b\xff"[..], &[b'\n'; 3000][..], &b"end"[..]].concat();
    assert!(bytes == expected, "{} bytes: {:?}…", bytes.len(), &bytes[..bytes.len().min(8)]);
    assert_eq!(binary_messages > 0, granted, "{binary_messages} binary messages");
    if target == Target::Reference {
        return;
    }

    // Resumed by a connection that does not ask: text again.
    let session = init["sessionId"].as_str().unwrap().to_owned();
    client.close().await;
    let mut resumed = RpcClient::connect(&server.url).await.unwrap();
    let init = loop {
        match resumed.initialize(Some(&session)).await.unwrap() {
            Ok(init) => break init,
            // The first connection's end may not have been seen yet.
            Err(error) if error.code == -32010 => continue,
            Err(error) => panic!("{error}"),
        }
    };
    assert_eq!(init.get("attachedOutput"), None, "{init}");
    resumed.ok("process/start", common::exec("text", "printf plain")).await.unwrap();
    let events = resumed.process_events("text").await.unwrap();
    assert_eq!(output_text(&events), "plain");
}

/// Tether only: stdio carries lines of text, so there neither `binaryBlocks`,
/// `attachedHttpBodies` nor `attachedOutput` is advertised (nor output attached when asked),
/// and a read or a stream that asks for attached bytes is refused, saying why.
#[tokio::test]
async fn over_stdio_blocks_stay_in_the_json() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let dir = tempfile_dir("binary-blocks-stdio");
    std::fs::write(dir.join("f"), b"abc").unwrap();
    let mut child = tokio::process::Command::new(tether_binary().unwrap())
        .args(["serve", "--listen", "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let path = format!("file://{}/f", dir.display());
    let lines = [
        json!({"id": 1, "method": "initialize",
            "params": {"clientName": "stdio", "attachOutput": true}}),
        json!({"method": "initialized", "params": {}}),
        json!({"id": 2, "method": "environment/info", "params": {}}),
        json!({"id": 3, "method": "fs/open", "params": {"handleId": "r", "path": path}}),
        json!({"id": 4, "method": "fs/readBlock",
            "params": {"handleId": "r", "offset": 0, "len": 3, "attachChunk": true}}),
        json!({"id": 5, "method": "fs/readFile", "params": {"path": path, "attachData": true}}),
        json!({"id": 6, "method": "http/request", "params": {"method": "GET",
            "url": "http://127.0.0.1:9/", "requestId": "s", "streamResponse": true,
            "attachBody": true}}),
    ];
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    }
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut answers = Vec::new();
    while answers.len() < 6 {
        let line = tokio::time::timeout(Duration::from_secs(10), stdout.next_line()).await;
        answers.push(serde_json::from_str::<Value>(&line.unwrap().unwrap().unwrap()).unwrap());
    }
    // The http/request runs in a task of its own: its answer may come before others'.
    let by_id = |id: i64| answers.iter().find(|answer| answer["id"] == id).unwrap();
    let extensions = &by_id(2)["result"]["capabilities"]["tetherExtensions"];
    assert_eq!(
        (&extensions["binaryBlocks"], &extensions["attachedHttpBodies"]),
        (&json!(false), &json!(false))
    );
    assert_eq!(extensions["attachedOutput"], false);
    assert_eq!(by_id(1)["result"].get("attachedOutput"), None, "output stays text over stdio");
    assert_eq!(
        *by_id(4),
        json!({"error": {"code": -32600, "message": "attachChunk needs binary messages, which stdio does not carry: read the block without it"}, "id": 4})
    );
    assert_eq!(
        *by_id(5),
        json!({"error": {"code": -32600, "message": "attachData needs binary messages, which stdio does not carry: read the file without it"}, "id": 5})
    );
    assert_eq!(
        *by_id(6),
        json!({"error": {"code": -32600, "message": "attachBody needs binary messages, which stdio does not carry: send the request without it"}, "id": 6})
    );
    drop(stdin);
    let _ = child.wait().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A new directory for one test, under the temp dir.
fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tether-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `tether exec --detach` (Tether's `sessionTtl`): the command is left running with no input,
/// its ids on stdout; its session outlives the server's default wait — a session detached
/// beside it with the default expires first — and `--resume` follows it to its exit code. What
/// the server grants is capped by its `--max-session-ttl-secs` and said on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_command_outlives_the_default_wait_and_is_followed_later() {
    let args = ["--session-ttl-secs", "1", "--max-session-ttl-secs", "3600"];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    let dir = tempfile_dir("detach");
    let go = dir.join("go");
    let script = format!(
        "read line; echo \"input:[$line]\"; while [ ! -e {} ]; do sleep 0.05; done; echo done; exit 7",
        go.display()
    );
    let detached = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--detach", "--detach-ttl-secs", "999999"])
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(detached.status.code(), Some(0));
    let stdout = String::from_utf8(detached.stdout).unwrap();
    let (session, process) = stdout
        .trim_end()
        .strip_prefix("session=")
        .and_then(|rest| rest.split_once(" process="))
        .unwrap_or_else(|| panic!("{stdout:?}"));
    let stderr = String::from_utf8(detached.stderr).unwrap();
    let follow = format!(
        "tether exec: left running; the server keeps it 1 h. Follow it with: tether exec --url {} --resume {session} --process {process}\n",
        server.url
    );
    assert_eq!(stderr, follow);

    // A session left with the server's default wait (1 s), beside it: once it has expired,
    // the detached one has outlived the default.
    {
        let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
        client.ok("process/start", common::exec("plain", "sleep 30")).await.unwrap();
    }
    let detached_sessions = r#"tether_sessions{state="detached"}"#;
    let seen_both = std::cell::Cell::new(false);
    let (server, seen_both) = (&server, &seen_both);
    let expired = move || async move {
        let (_, metrics) = common::scrape(server, None).await;
        match common::sample(&metrics, detached_sessions) as u32 {
            2 => seen_both.set(true),
            1 => return seen_both.get(),
            _ => {}
        }
        false
    };
    wait::until_async("the plain session to expire", Duration::from_secs(30), expired).await;

    std::fs::write(&go, b"").unwrap();
    let followed = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--resume", session, "--process", process])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&followed.stdout);
    assert_eq!((followed.status.code(), stdout.as_ref()), (Some(7), "input:[]\ndone\n"));
    let _ = std::fs::remove_dir_all(dir);
}

/// For a script: `--detach --json` prints `{"sessionId", "processId"}`, and `--resume SESSION
/// --list --json` the session's processes as a JSON array, one object each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detach_and_list_speak_json_for_a_script() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let detached = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--detach", "--json", "--", "sleep", "30"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(detached.status.code(), Some(0), "{}", String::from_utf8_lossy(&detached.stderr));
    let ids: Value = serde_json::from_slice(&detached.stdout).unwrap();
    let (session, process) =
        (ids["sessionId"].as_str().unwrap(), ids["processId"].as_str().unwrap());
    let listed = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--resume", session, "--list", "--json"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(listed.status.code(), Some(0), "{}", String::from_utf8_lossy(&listed.stderr));
    let processes: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let processes = processes.as_array().unwrap();
    assert_eq!(processes.len(), 1, "{processes:?}");
    assert_eq!(processes[0]["processId"], process);
    assert_eq!(processes[0]["argv"], json!(["sleep", "30"]));
    assert_eq!(processes[0]["state"], "running");
}

/// Against the reference, which keeps no session past its own 80 s, `--detach` still leaves
/// the command running and says it could not ask for more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detaching_from_the_reference_says_the_wait_is_its_own() {
    let server = ServerProcess::start(Target::Reference).await.unwrap();
    let detached = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--detach", "--", "sleep", "30"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&detached.stderr);
    assert_eq!(detached.status.code(), Some(0), "{stderr}");
    assert!(String::from_utf8_lossy(&detached.stdout).starts_with("session="));
    assert!(
        stderr.starts_with("tether exec: left running; the server did not say how long it keeps it (it does not serve Tether's sessionTtl; the reference keeps a session 80 s). Follow it with: "),
        "{stderr}"
    );
}
