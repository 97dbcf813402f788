//! Processes over the wire: start, stream, read, write, signal, terminate — each scenario run
//! against Tether and against the reference.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_testkit::client::{b64decode, b64encode, output_of};
use tether_testkit::{RpcClient, ServerProcess, Target, against_both};

mod common;
use common::{dies_soon, exec};

against_both!(
    output_exit_and_close_share_one_gap_free_sequence,
    pty_processes_have_one_pty_stream,
    read_replays_retained_output_with_byte_budgets,
    long_poll_reads_wake_on_output_or_time_out,
    retried_write_ids_are_applied_once,
    stdin_is_closed_unless_piped,
    unknown_processes_are_reported_not_fatal,
    interrupt_reaches_the_process,
    terminate_kills_the_process_group,
    close_waits_for_output_written_after_exit,
    the_environment_is_exactly_what_was_sent,
    arg0_is_what_the_program_sees,
    bare_program_names_are_found_with_an_empty_env,
    signal_deaths_report_128_plus_the_signal,
    pipe_processes_lead_their_own_session,
    pipe_processes_start_with_default_signals,
    executables_without_an_interpreter_line_are_refused,
    a_missing_working_directory_is_an_error,
    an_empty_program_name_is_refused,
    a_nul_byte_is_refused_in_the_references_words,
    a_failed_spawn_says_its_kind,
);

async fn started(target: Target) -> (ServerProcess, RpcClient) {
    let server = ServerProcess::start(target).await.unwrap();
    let (client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    (server, client)
}

fn seq(event: &Value) -> u64 {
    event["params"]["seq"].as_u64().unwrap()
}

fn exit_code(events: &[Value]) -> i64 {
    let exited: Vec<_> = events.iter().filter(|e| e["method"] == "process/exited").collect();
    assert_eq!(exited.len(), 1, "exactly one exit: {events:?}");
    exited[0]["params"]["exitCode"].as_i64().unwrap()
}

/// Every event's seq, 1..=n with no gap and no repeat; `process/closed` has the highest. Tether
/// also sends them in sequence order (the reference may not).
fn assert_one_sequence(target: Target, events: &[Value]) {
    let seqs: BTreeSet<u64> = events.iter().map(seq).collect();
    assert_eq!(seqs.len(), events.len(), "no repeated seq: {events:?}");
    assert_eq!(seqs, (1..=events.len() as u64).collect(), "gap-free from 1: {events:?}");
    let closed = events.iter().find(|e| e["method"] == "process/closed").unwrap();
    assert_eq!(seq(closed), events.len() as u64);
    if target == Target::Tether {
        let arrival: Vec<u64> = events.iter().map(seq).collect();
        assert_eq!(arrival, (1..=events.len() as u64).collect::<Vec<_>>(), "in order");
    }
}

async fn output_exit_and_close_share_one_gap_free_sequence(target: Target) {
    let (_server, mut client) = started(target).await;
    let result =
        client.ok("process/start", exec("p1", "printf out; printf err >&2; exit 3")).await.unwrap();
    assert_eq!(result, json!({"processId": "p1", "sandboxType": "none"}));
    let events = client.process_events("p1").await.unwrap();
    assert_one_sequence(target, &events);
    assert_eq!(output_of(&events, "stdout"), b"out");
    assert_eq!(output_of(&events, "stderr"), b"err");
    assert_eq!(exit_code(&events), 3);
    for event in &events {
        if event["method"] == "process/exited" {
            assert_eq!(event["params"]["sandboxDenied"], false);
        }
    }
}

async fn pty_processes_have_one_pty_stream(target: Target) {
    let (_server, mut client) = started(target).await;
    let mut params = exec("t1", "printf hi; printf there >&2; stty size");
    params["tty"] = json!(true);
    client.ok("process/start", params).await.unwrap();
    let events = client.process_events("t1").await.unwrap();
    assert_one_sequence(target, &events);
    let output = String::from_utf8(output_of(&events, "pty")).unwrap();
    assert!(output.starts_with("hithere"), "{output:?}");
    assert!(output.contains("24 80"), "a 24x80 terminal: {output:?}");
    assert!(output_of(&events, "stdout").is_empty() && output_of(&events, "stderr").is_empty());
    assert_eq!(exit_code(&events), 0);
}

async fn read_replays_retained_output_with_byte_budgets(target: Target) {
    let (_server, mut client) = started(target).await;
    client.ok("process/start", exec("p", "printf abcdef; sleep 0.1; printf ghij")).await.unwrap();
    let events = client.process_events("p").await.unwrap();
    // The reference may send the close before the exit: find it, not the last to arrive.
    let closed = events.iter().find(|e| e["method"] == "process/closed").unwrap();
    let closed_seq = seq(closed);
    let chunks: Vec<u64> =
        events.iter().filter(|e| e["method"] == "process/output").map(seq).collect();
    assert_eq!(chunks.len(), 2, "{events:?}");

    let all = client.ok("process/read", json!({"processId": "p"})).await.unwrap();
    assert_eq!(all["nextSeq"], closed_seq + 1);
    assert_eq!(
        (all["exited"].clone(), all["exitCode"].clone(), all["closed"].clone()),
        (json!(true), json!(0), json!(true))
    );
    assert_eq!(all["failure"], Value::Null);
    let bytes: Vec<u8> =
        all["chunks"].as_array().unwrap().iter().flat_map(|c| b64decode(&c["chunk"])).collect();
    assert_eq!(bytes, b"abcdefghij");

    // The first chunk always comes, even over budget; chunks are never split.
    let one = client
        .ok("process/read", json!({"processId": "p", "afterSeq": 0, "maxBytes": 1}))
        .await
        .unwrap();
    assert_eq!(one["chunks"].as_array().unwrap().len(), 1);
    assert_eq!(one["nextSeq"], chunks[0] + 1);
    let seven = client.ok("process/read", json!({"processId": "p", "maxBytes": 7})).await.unwrap();
    assert_eq!(seven["chunks"].as_array().unwrap().len(), 1);
    let ten = client.ok("process/read", json!({"processId": "p", "maxBytes": 10})).await.unwrap();
    assert_eq!(ten["chunks"].as_array().unwrap().len(), 2);
    // With a budget, reading continues after the last chunk returned, even when it was the last.
    assert_eq!(ten["nextSeq"], chunks[1] + 1);
    assert_eq!(ten["exited"], true);

    // After the last chunk: nothing, and nextSeq still counts exit and close.
    let tail =
        client.ok("process/read", json!({"processId": "p", "afterSeq": chunks[1]})).await.unwrap();
    assert_eq!(tail["chunks"], json!([]));
    assert_eq!(tail["nextSeq"], closed_seq + 1);
    let past = client.ok("process/read", json!({"processId": "p", "afterSeq": 99})).await.unwrap();
    assert_eq!(past["chunks"], json!([]));
}

async fn long_poll_reads_wake_on_output_or_time_out(target: Target) {
    let (_server, mut client) = started(target).await;
    client.ok("process/start", exec("p", "sleep 0.3; echo x; sleep 30")).await.unwrap();
    let started = Instant::now();
    let read = client
        .ok("process/read", json!({"processId": "p", "afterSeq": 0, "waitMs": 10000}))
        .await
        .unwrap();
    assert_eq!(b64decode(&read["chunks"][0]["chunk"]), b"x\n");
    assert!(started.elapsed() < Duration::from_secs(5), "woke on output: {:?}", started.elapsed());
    assert_eq!(read["exited"], false);

    let after = read["nextSeq"].as_u64().unwrap() - 1;
    let started = Instant::now();
    let quiet = client
        .ok("process/read", json!({"processId": "p", "afterSeq": after, "waitMs": 200}))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(190), "waited: {:?}", started.elapsed());
    assert_eq!(quiet["chunks"], json!([]));
    assert_eq!(quiet["nextSeq"], after + 1);
    client.ok("process/terminate", json!({"processId": "p"})).await.unwrap();
}

async fn retried_write_ids_are_applied_once(target: Target) {
    let (_server, mut client) = started(target).await;
    let mut params = exec("p", "head -c 3");
    params["pipeStdin"] = json!(true);
    client.ok("process/start", params).await.unwrap();
    for (write_id, text) in [("w1", "A"), ("w2", "B"), ("w1", "C"), ("w3", "D")] {
        let result = client
            .ok(
                "process/write",
                json!({"processId": "p", "chunk": b64encode(text.as_bytes()), "writeId": write_id}),
            )
            .await
            .unwrap();
        assert_eq!(result, json!({"status": "accepted"}));
    }
    let events = client.process_events("p").await.unwrap();
    assert_eq!(output_of(&events, "stdout"), b"ABD");
    assert_eq!(exit_code(&events), 0);
}

async fn stdin_is_closed_unless_piped(target: Target) {
    let (_server, mut client) = started(target).await;
    client.ok("process/start", exec("p", "cat; echo eof")).await.unwrap();
    let result = client
        .ok("process/write", json!({"processId": "p", "chunk": "eA==", "writeId": "1"}))
        .await
        .unwrap();
    assert_eq!(result, json!({"status": "stdinClosed"}));
    let events = client.process_events("p").await.unwrap();
    assert_eq!(output_of(&events, "stdout"), b"eof\n");
}

async fn unknown_processes_are_reported_not_fatal(target: Target) {
    let (_server, mut client) = started(target).await;
    let write = client
        .ok("process/write", json!({"processId": "nope", "chunk": "eA==", "writeId": "1"}))
        .await
        .unwrap();
    assert_eq!(write, json!({"status": "unknownProcess"}));
    let error = client.err("process/read", json!({"processId": "nope"})).await.unwrap();
    assert_eq!((error.code, error.message.as_str()), (-32600, "unknown process id nope"));
    let terminate = client.ok("process/terminate", json!({"processId": "nope"})).await.unwrap();
    assert_eq!(terminate, json!({"running": false}));
    let signal = client
        .ok("process/signal", json!({"processId": "nope", "signal": "interrupt"}))
        .await
        .unwrap();
    assert_eq!(signal, json!({}));
}

async fn interrupt_reaches_the_process(target: Target) {
    let (_server, mut client) = started(target).await;
    let script = "trap 'echo interrupted; exit 7' INT; echo ready; while :; do sleep 0.05; done";
    client.ok("process/start", exec("p", script)).await.unwrap();
    let ready =
        client.ok("process/read", json!({"processId": "p", "waitMs": 10000})).await.unwrap();
    assert_eq!(b64decode(&ready["chunks"][0]["chunk"]), b"ready\n");
    let result = client
        .ok("process/signal", json!({"processId": "p", "signal": "interrupt"}))
        .await
        .unwrap();
    assert_eq!(result, json!({}));
    let events = client.process_events("p").await.unwrap();
    assert_eq!(output_of(&events, "stdout"), b"ready\ninterrupted\n");
    assert_eq!(exit_code(&events), 7);
}

async fn terminate_kills_the_process_group(target: Target) {
    let (_server, mut client) = started(target).await;
    client.ok("process/start", exec("p", "sleep 60 & echo $!; wait")).await.unwrap();
    let read = client.ok("process/read", json!({"processId": "p", "waitMs": 10000})).await.unwrap();
    let grandchild: u32 =
        String::from_utf8(b64decode(&read["chunks"][0]["chunk"])).unwrap().trim().parse().unwrap();
    let result = client.ok("process/terminate", json!({"processId": "p"})).await.unwrap();
    assert_eq!(result, json!({"running": true}));
    let events = client.process_events("p").await.unwrap();
    assert_eq!(exit_code(&events), 137, "SIGKILL");
    assert!(dies_soon(grandchild).await, "the grandchild died with its group");
    let again = client.ok("process/terminate", json!({"processId": "p"})).await.unwrap();
    assert_eq!(again, json!({"running": false}));
    // A closed process stays readable.
    let read = client.ok("process/read", json!({"processId": "p"})).await.unwrap();
    assert_eq!(read["closed"], true);
}

async fn close_waits_for_output_written_after_exit(target: Target) {
    let (_server, mut client) = started(target).await;
    client.ok("process/start", exec("p", "(sleep 0.4; echo late) & echo early")).await.unwrap();
    let events = client.process_events("p").await.unwrap();
    assert_one_sequence(target, &events);
    assert_eq!(output_of(&events, "stdout"), b"early\nlate\n");
    let exit_seq = events.iter().find(|e| e["method"] == "process/exited").map(seq).unwrap();
    let late_seq =
        events.iter().filter(|e| e["method"] == "process/output").map(seq).max().unwrap();
    assert!(late_seq > exit_seq, "the late line is numbered after the exit: {events:?}");
}

async fn the_environment_is_exactly_what_was_sent(target: Target) {
    let (_server, mut client) = started(target).await;
    let params = json!({"processId": "p", "argv": ["/usr/bin/env"], "cwd": "file:///tmp", "env": {"FOO": "bar"}, "tty": false});
    client.ok("process/start", params).await.unwrap();
    let events = client.process_events("p").await.unwrap();
    assert_eq!(output_of(&events, "stdout"), b"FOO=bar\n");

    let policy = json!({"inherit": "none", "ignoreDefaultExcludes": false, "exclude": [], "set": {"A": "set", "B": "set"}, "includeOnly": []});
    let params = json!({"processId": "q", "argv": ["/usr/bin/env"], "cwd": "file:///tmp", "env": {"B": "env"}, "envPolicy": policy, "tty": false});
    client.ok("process/start", params).await.unwrap();
    let events = client.process_events("q").await.unwrap();
    let mut lines: Vec<String> = String::from_utf8(output_of(&events, "stdout"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    assert_eq!(lines, ["A=set", "B=env"], "the request's env wins over the policy's set");
}

async fn arg0_is_what_the_program_sees(target: Target) {
    let (_server, mut client) = started(target).await;
    let mut params = exec("p", "tr '\\0' ' ' < /proc/$$/cmdline");
    params["arg0"] = json!("myname");
    client.ok("process/start", params).await.unwrap();
    let events = client.process_events("p").await.unwrap();
    let cmdline = String::from_utf8(output_of(&events, "stdout")).unwrap();
    assert!(cmdline.starts_with("myname -c "), "{cmdline:?}");
}

async fn bare_program_names_are_found_with_an_empty_env(target: Target) {
    let (_server, mut client) = started(target).await;
    let params = json!({"processId": "p", "argv": ["sh", "-c", "echo found"], "cwd": "file:///tmp", "env": {}, "tty": false});
    client.ok("process/start", params).await.unwrap();
    let events = client.process_events("p").await.unwrap();
    assert_eq!(output_of(&events, "stdout"), b"found\n");
}

async fn signal_deaths_report_128_plus_the_signal(target: Target) {
    let (_server, mut client) = started(target).await;
    for (id, signal, code) in [("term", "TERM", 143), ("kill", "KILL", 137), ("hup", "HUP", 129)] {
        client.ok("process/start", exec(id, &format!("kill -{signal} $$"))).await.unwrap();
        let events = client.process_events(id).await.unwrap();
        assert_eq!(exit_code(&events), code, "{signal}");
    }
}

against_both!(pipelined_writes_are_applied_in_the_order_sent);

async fn pipelined_writes_are_applied_in_the_order_sent(target: Target) {
    let (_server, mut client) = started(target).await;
    let mut params = exec("p", "head -c 2000");
    params["pipeStdin"] = json!(true);
    client.ok("process/start", params).await.unwrap();
    let mut ids = Vec::new();
    let mut expected = Vec::new();
    for n in 0..200 {
        let text = format!("{n:09}\n");
        expected.extend_from_slice(text.as_bytes());
        let write = json!({"processId": "p", "chunk": b64encode(text.as_bytes()), "writeId": n.to_string()});
        ids.push(client.send_request("process/write", write).await.unwrap());
    }
    for id in ids {
        assert_eq!(client.response(id).await.unwrap().unwrap(), json!({"status": "accepted"}));
    }
    let events = client.process_events("p").await.unwrap();
    assert_eq!(output_of(&events, "stdout"), expected);
}

/// Tether only: a long-polling read does not hold up the requests behind it (the reference, by
/// default, answers them after the read returns).
#[tokio::test]
async fn a_long_poll_does_not_block_the_connection() {
    let (_server, mut client) = started(Target::Tether).await;
    client.ok("process/start", exec("quiet", "sleep 30")).await.unwrap();
    let read = client
        .send_request("process/read", json!({"processId": "quiet", "waitMs": 20000}))
        .await
        .unwrap();
    let started = Instant::now();
    client.ok("environment/status", json!(null)).await.unwrap();
    client.ok("process/start", exec("other", "echo hi")).await.unwrap();
    let events = client.process_events("other").await.unwrap();
    assert_eq!(output_of(&events, "stdout"), b"hi\n");
    assert!(started.elapsed() < Duration::from_secs(5), "answered while the read waits");
    // Terminating the quiet process ends the read: it exited.
    client.ok("process/terminate", json!({"processId": "quiet"})).await.unwrap();
    let result = client.response(read).await.unwrap().unwrap();
    assert_eq!(result["exited"], true);
}

/// A pipe child leads its own session as well as its group (the reference calls `setsid`), so
/// it has no controlling terminal: a command that opens `/dev/tty` cannot reach the server's.
async fn pipe_processes_lead_their_own_session(target: Target) {
    let (_server, mut client) = started(target).await;
    // Fields 5 and 6 of /proc/PID/stat: the group and the session (`sh`'s name has no space).
    let script = "set -- $(cat /proc/$$/stat); echo \"$1 $5 $6\"; \
        if (: > /dev/tty) 2>/dev/null; then echo has-a-terminal; else echo no-terminal; fi";
    client.ok("process/start", exec("s", script)).await.unwrap();
    let events = client.process_events("s").await.unwrap();
    let out = String::from_utf8(output_of(&events, "stdout")).unwrap();
    let mut lines = out.lines();
    let ids: Vec<&str> = lines.next().unwrap().split(' ').collect();
    assert_eq!(ids[1], ids[0], "the group is the child's own: {out}");
    assert_eq!(ids[2], ids[0], "the session is the child's own: {out}");
    assert_eq!(lines.next(), Some("no-terminal"));
}

/// A pipe child starts with no signal blocked and `SIGPIPE` at its default, whatever the
/// server itself ignores: `yes | head -1` ends because `yes` dies of the closed pipe.
async fn pipe_processes_start_with_default_signals(target: Target) {
    let (_server, mut client) = started(target).await;
    let script = "grep -E '^Sig(Blk|Ign)' /proc/self/status; yes | head -1";
    client.ok("process/start", exec("s", script)).await.unwrap();
    let events = client.process_events("s").await.unwrap();
    let out = String::from_utf8(output_of(&events, "stdout")).unwrap();
    let field = |name: &str| {
        let line = out.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{out}"));
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    assert_eq!(field("SigBlk:"), 0, "nothing blocked: {out}");
    let sigpipe = 1 << (13 - 1);
    assert_eq!(field("SigIgn:") & sigpipe, 0, "SIGPIPE not ignored: {out}");
    assert!(out.ends_with("y\n"), "{out}");
    assert_eq!(exit_code(&events), 0);
}

/// An executable file with no `#!` line is not run (a shell would run it with itself): the
/// start fails with the kernel's reason, as the reference's does.
async fn executables_without_an_interpreter_line_are_refused(target: Target) {
    let (_server, mut client) = started(target).await;
    let script = std::env::temp_dir()
        .join(format!("tether-test-no-interpreter-{}-{target:?}", std::process::id()));
    std::fs::write(&script, "echo ran by sh\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut errors = Vec::new();
    for tty in [false, true] {
        let params = json!({"processId": format!("p{tty}"), "argv": [script], "cwd": "file:///tmp",
            "env": {"PATH": "/usr/bin:/bin"}, "tty": tty});
        errors.push(client.err("process/start", params).await);
    }
    std::fs::remove_file(&script).unwrap();
    for error in errors {
        let error = error.unwrap();
        assert_eq!(error.message, "Exec format error (os error 8)", "{error:?}");
    }
}

/// Tether only: a PTY process's last output, still on its way through the terminal when the
/// process exits, is numbered before the exit, which waits for the terminal to be read to the
/// end. The reference often numbers its exit before the last few hundred KiB. (On an idle
/// machine the output has usually arrived anyway; under load it often has not.)
#[tokio::test]
async fn a_pty_processs_last_output_comes_before_its_exit() {
    let (_server, mut client) = started(Target::Tether).await;
    for round in 0..5 {
        let id = format!("p{round}");
        let mut params = exec(&id, "head -c 300000 /dev/zero; printf last; exit 3");
        params["tty"] = json!(true);
        client.ok("process/start", params).await.unwrap();
        let events = client.process_events(&id).await.unwrap();
        assert_eq!(exit_code(&events), 3);
        let exited = events.iter().find(|e| e["method"] == "process/exited").unwrap();
        let before: Vec<Value> = events
            .iter()
            .filter(|e| e["method"] == "process/output" && seq(e) < seq(exited))
            .cloned()
            .collect();
        let output = output_of(&before, "pty");
        assert_eq!(output.len(), 300_004, "round {round}: all of it before the exit");
        assert!(output.ends_with(b"last"), "round {round}");
    }
}

/// An empty program name fails the start with the reference's words.
async fn an_empty_program_name_is_refused(target: Target) {
    let (_server, mut client) = started(target).await;
    for (tty, kind) in [(false, "pipe"), (true, "PTY")] {
        let params = json!({"processId": format!("p{tty}"), "argv": [""], "cwd": "file:///tmp",
            "env": {"PATH": "/usr/bin:/bin"}, "tty": tty});
        let error = client.err("process/start", params).await.unwrap();
        assert_eq!(error.message, format!("missing program for {kind} spawn"), "{error:?}");
    }
}

/// A NUL in an argument or in the environment fails the start (`-32603`), in the words of
/// what the reference starts the process with: `std::process::Command`'s for the environment,
/// `CString`'s for an argument, in pipe and PTY mode alike. (Under an intent a PTY start's
/// environment gets `CString`'s words too: the sandbox scenarios check that.)
async fn a_nul_byte_is_refused_in_the_references_words(target: Target) {
    let (_server, mut client) = started(target).await;
    for tty in [false, true] {
        for (what, argv, env, message) in [
            (
                "env",
                json!(["/bin/echo"]),
                json!({"A": "x\u{0}y"}),
                "data provided contains a nul byte",
            ),
            (
                "key",
                json!(["/bin/echo"]),
                json!({"A\u{0}B": "x"}),
                "data provided contains a nul byte",
            ),
            ("arg", json!(["/bin/echo", "h\u{0}i"]), json!({}), "nul byte found in provided data"),
        ] {
            let params = json!({"processId": format!("{what}-{tty}"), "argv": argv,
                "cwd": "file:///tmp", "env": env, "tty": tty});
            let error = client.err("process/start", params).await.unwrap();
            assert_eq!((error.code, error.message.as_str()), (-32603, message), "{what} tty {tty}");
        }
    }
}

/// A working directory that does not exist fails the start with the system's reason. In PTY
/// mode too, on Tether; the reference's PTY runs the command in the server's home directory
/// instead (a deliberate difference: a command meant for one directory never runs in another,
/// see `pty_program`).
async fn a_missing_working_directory_is_an_error(target: Target) {
    let (_server, mut client) = started(target).await;
    let mut params = exec("p", "pwd");
    params["cwd"] = json!("file:///nonexistent-tether-directory");
    let error = client.err("process/start", params.clone()).await.unwrap();
    assert!(error.message.contains("No such file or directory (os error 2)"), "{error:?}");

    params["processId"] = json!("t");
    params["tty"] = json!(true);
    match target {
        Target::Tether => {
            let error = client.err("process/start", params).await.unwrap();
            assert!(error.message.contains("No such file or directory (os error 2)"), "{error:?}");
        }
        Target::Reference => {
            client.ok("process/start", params).await.unwrap();
            let events = client.process_events("t").await.unwrap();
            let home = std::env::var("HOME").unwrap();
            assert_eq!(
                String::from_utf8(output_of(&events, "pty")).unwrap(),
                format!("{home}\r\n")
            );
        }
    }
}

/// A start whose program cannot be started says what kind of failure it was in `error.data`,
/// as Codex 0.171's exec-server does: a missing program or working directory, a program that
/// may not be executed or is a directory, any other failure. A refused request carries none.
/// A terminal start looks up a bare name on the child's own `PATH` and says which candidates
/// it rejected, as the reference's terminal layer does (a pipe start falls back to the
/// server's `PATH`, see `bare_program_names_are_found_with_an_empty_env`).
async fn a_failed_spawn_says_its_kind(target: Target) {
    let (_server, mut client) = started(target).await;
    let scratch =
        std::env::temp_dir().join(format!("tether-spawn-kinds-{}-{target:?}", std::process::id()));
    std::fs::create_dir_all(scratch.join("bin/a-directory")).unwrap();
    let plain = scratch.join("bin/not-executable");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    let bin = scratch.join("bin").display().to_string();
    let (plain, dir) = (plain.display().to_string(), scratch.display().to_string());
    let path = |value: &str| json!({"PATH": value});
    let usual = path("/usr/bin:/bin");
    let missing_program = json!(["/nonexistent-tether-program"]);
    let missing_cwd = "file:///nonexistent-tether-directory".to_owned();
    let tmp = "file:///tmp".to_owned();
    let (not_found, denied) =
        ("No such file or directory (os error 2)", "Permission denied (os error 13)");
    // (what, argv, cwd, env, tty, kind, message)
    let mut cases = vec![
        ("missing cwd", json!(["/bin/true"]), missing_cwd, usual.clone(), false, "spawnNotFound", not_found.to_owned()),
        ("cwd a file", json!(["/bin/true"]), format!("file://{plain}"), usual.clone(), false, "spawnFailed", "Not a directory (os error 20)".to_owned()),
        ("bare name nowhere", json!(["no-such-tether-program"]), tmp.clone(), usual.clone(), false, "spawnNotFound", not_found.to_owned()),
        ("bare name nowhere", json!(["no-such-tether-program"]), tmp.clone(), usual.clone(), true, "spawnFailed",
            "Unable to spawn no-such-tether-program because:\nNo viable candidates found in PATH \"/usr/bin:/bin\"".to_owned()),
        ("bare name without PATH", json!(["sh", "-c", "true"]), tmp.clone(), json!({}), true, "spawnFailed",
            "Unable to spawn sh because:\nUnable to resolve the PATH".to_owned()),
        ("bare name rejected", json!(["not-executable"]), tmp.clone(), path(&bin), true, "spawnFailed",
            format!("Unable to spawn not-executable because:\n{bin}/not-executable exists but is not executable.\nNo viable candidates found in PATH \"{bin}\"")),
        ("bare directory name", json!(["a-directory"]), tmp.clone(), path(&bin), true, "spawnFailed",
            format!("Unable to spawn a-directory because:\n{bin}/a-directory exists but is a directory.\nNo viable candidates found in PATH \"{bin}\"")),
        ("relative to cwd", json!(["./nothing-here"]), format!("file://{dir}"), usual.clone(), true, "spawnFailed",
            format!("Unable to spawn {dir}/./nothing-here because it does not exist")),
    ];
    for tty in [false, true] {
        cases.push((
            "missing program",
            missing_program.clone(),
            tmp.clone(),
            usual.clone(),
            tty,
            "spawnNotFound",
            not_found.to_owned(),
        ));
        cases.push((
            "not executable",
            json!([plain]),
            tmp.clone(),
            usual.clone(),
            tty,
            "spawnPermissionDenied",
            denied.to_owned(),
        ));
        cases.push((
            "a directory",
            json!([dir]),
            tmp.clone(),
            usual.clone(),
            tty,
            "spawnPermissionDenied",
            denied.to_owned(),
        ));
    }
    for (n, (what, argv, cwd, env, tty, kind, message)) in cases.into_iter().enumerate() {
        let params = json!({"processId": format!("kind-{n}"), "argv": argv, "cwd": cwd,
            "env": env, "tty": tty});
        let error = client.err("process/start", params).await.unwrap();
        let seen = (error.code, error.data.clone(), error.message.as_str());
        assert_eq!(
            seen,
            (-32603, Some(json!({"kind": kind})), message.as_str()),
            "{what}, tty {tty}"
        );
    }
    let empty = json!({"processId": "empty", "argv": [], "cwd": "file:///tmp", "env": {},
        "tty": false});
    let error = client.err("process/start", empty).await.unwrap();
    assert_eq!((error.code, error.data), (-32602, None));
    std::fs::remove_dir_all(scratch).unwrap();
}
