//! Bad input gets a clear JSON-RPC error — the reference's — and never costs anyone else their
//! connection.

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::{RpcClient, ServerProcess, Target, against_both};

mod common;
use common::exec;

against_both!(
    process_start_params_are_validated,
    spawn_failures_are_internal_errors_with_the_os_message,
    write_signal_and_read_params_are_validated,
    process_ids_are_at_most_256_bytes,
    oversized_frames_end_only_their_own_connection,
    hostile_json_is_refused_with_id_minus_one,
);

async fn started(target: Target) -> (ServerProcess, RpcClient) {
    let server = ServerProcess::start(target).await.unwrap();
    let (client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    (server, client)
}

fn without(mut params: Value, key: &str) -> Value {
    params.as_object_mut().unwrap().remove(key);
    params
}

fn with(mut params: Value, key: &str, value: Value) -> Value {
    params[key] = value;
    params
}

async fn process_start_params_are_validated(target: Target) {
    let (_server, mut client) = started(target).await;
    let base = exec("p", "true");
    let cases = [
        (without(base.clone(), "env"), -32602, "missing field `env`"),
        (without(base.clone(), "tty"), -32602, "missing field `tty`"),
        (without(base.clone(), "argv"), -32602, "missing field `argv`"),
        (
            with(base.clone(), "processId", json!(5)),
            -32602,
            "invalid type: number, expected a string",
        ),
        (with(base.clone(), "argv", json!([])), -32602, "argv must not be empty"),
        (
            with(base.clone(), "cwd", json!("tmp")),
            -32602,
            "invalid URI: relative URL without a base",
        ),
        (
            with(base.clone(), "cwd", json!("/tmp")),
            -32602,
            "invalid URI: relative URL without a base",
        ),
        (
            with(base.clone(), "cwd", json!("http://x/tmp")),
            -32602,
            "unsupported path URI scheme `http`",
        ),
    ];
    for (params, code, message) in cases {
        let error = client.err("process/start", params.clone()).await.unwrap();
        assert_eq!((error.code, error.message.as_str()), (code, message), "{params}");
    }
    let error = client.err("process/start", json!(null)).await.unwrap();
    assert_eq!(error.code, -32602);

    client.ok("process/start", exec("dup", "sleep 30")).await.unwrap();
    let error = client.err("process/start", exec("dup", "true")).await.unwrap();
    assert_eq!((error.code, error.message.as_str()), (-32600, "process dup already exists"));
    client.ok("process/terminate", json!({"processId": "dup"})).await.unwrap();
}

async fn spawn_failures_are_internal_errors_with_the_os_message(target: Target) {
    let (_server, mut client) = started(target).await;
    let not_executable =
        std::env::temp_dir().join(format!("tether-noexec-{}-{target:?}", std::process::id()));
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    let cases = [
        (
            with(exec("a", "true"), "cwd", json!("file:///nonexistent-dir")),
            "No such file or directory (os error 2)",
        ),
        (
            with(exec("b", "true"), "cwd", json!("file:///etc/hostname")),
            "Not a directory (os error 20)",
        ),
        (
            with(exec("c", ""), "argv", json!(["/nonexistent/binary"])),
            "No such file or directory (os error 2)",
        ),
        (
            with(exec("d", ""), "argv", json!(["no-such-program-anywhere"])),
            "No such file or directory (os error 2)",
        ),
        (
            with(exec("e", ""), "argv", json!([not_executable.to_str().unwrap()])),
            "Permission denied (os error 13)",
        ),
    ];
    for (params, message) in cases {
        let error = client.err("process/start", params.clone()).await.unwrap();
        assert_eq!((error.code, error.message.as_str()), (-32603, message), "{params}");
    }
    // A failed start leaves its id free.
    client.ok("process/start", exec("a", "true")).await.unwrap();
    let _ = std::fs::remove_file(not_executable);
}

async fn write_signal_and_read_params_are_validated(target: Target) {
    let (_server, mut client) = started(target).await;
    client.ok("process/start", exec("p", "sleep 30")).await.unwrap();
    let cases = [
        ("process/write", json!({"processId": "p", "chunk": "eA=="}), "missing field `writeId`"),
        (
            "process/write",
            json!({"processId": "p", "chunk": "eA==", "writeId": ""}),
            "writeId must not be empty",
        ),
        (
            "process/write",
            json!({"processId": "p", "chunk": "!!", "writeId": "1"}),
            "Invalid symbol 33, offset 0.",
        ),
        (
            "process/signal",
            json!({"processId": "p", "signal": "SIGINT"}),
            // Tether delivers more signals (an extension) and lists them all.
            match target {
                Target::Reference => "unknown variant `SIGINT`, expected `interrupt`",
                Target::Tether => {
                    "unknown variant `SIGINT`, expected one of `interrupt`, `terminate`, `kill`, `hangup`, `quit`, `user1`, `user2`"
                }
            },
        ),
        ("process/read", json!({"processId": 1}), "invalid type: number, expected a string"),
        ("process/terminate", json!({}), "missing field `processId`"),
    ];
    for (method, params, message) in cases {
        let error = client.err(method, params.clone()).await.unwrap();
        assert_eq!((error.code, error.message.as_str()), (-32602, message), "{method} {params}");
    }
    let error =
        client.err("process/read", json!({"processId": "p", "afterSeq": -1})).await.unwrap();
    assert_eq!(error.code, -32602);
    // The reference keeps ids of any length; Tether bounds what it must remember.
    let long = json!({"processId": "p", "chunk": "eA==", "writeId": "w".repeat(8 << 20)});
    match target {
        Target::Reference => {
            client.ok("process/write", long).await.unwrap();
        }
        Target::Tether => {
            let error = client.err("process/write", long).await.unwrap();
            assert_eq!(
                (error.code, error.message.as_str()),
                (-32602, "writeId must be at most 256 bytes; send a shorter idempotency key")
            );
        }
    }
    let longest = json!({"processId": "p", "chunk": "eA==", "writeId": "w".repeat(256)});
    client.ok("process/write", longest).await.unwrap();
    client.ok("process/terminate", json!({"processId": "p"})).await.unwrap();
}

/// A `processId` is repeated in every notification of its process, so Tether bounds it (256
/// bytes) on every method that takes one. A deliberate difference: the reference takes ids of
/// any length, so against it the longer id starts a process like any other.
async fn process_ids_are_at_most_256_bytes(target: Target) {
    let (_server, mut client) = started(target).await;
    let longest = "p".repeat(256);
    client.ok("process/start", exec(&longest, "sleep 30")).await.unwrap();
    client.ok("process/terminate", json!({"processId": longest})).await.unwrap();

    let long = "p".repeat(257);
    match target {
        Target::Reference => {
            client.ok("process/start", exec(&long, "sleep 30")).await.unwrap();
            client.ok("process/terminate", json!({"processId": long})).await.unwrap();
        }
        Target::Tether => {
            let cases = [
                ("process/start", exec(&long, "true")),
                ("process/read", json!({"processId": long, "afterSeq": 0})),
                ("process/write", json!({"processId": long, "chunk": "eA==", "writeId": "1"})),
                ("process/signal", json!({"processId": long, "signal": "interrupt"})),
                ("process/terminate", json!({"processId": long})),
                ("process/resize", json!({"processId": long, "cols": 80, "rows": 24})),
                ("process/closeStdin", json!({"processId": long})),
            ];
            for (method, params) in cases {
                let error = client.err(method, params).await.unwrap();
                assert_eq!(
                    (error.code, error.message.as_str()),
                    (-32602, "processId must be at most 256 bytes; send a shorter id"),
                    "{method}"
                );
            }
            let listed = client.ok("process/list", json!({})).await.unwrap();
            let ids: Vec<&str> = listed["processes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["processId"].as_str().unwrap())
                .collect();
            assert_eq!(ids, [longest.as_str()], "nothing was started under the long id");
        }
    }
}

async fn oversized_frames_end_only_their_own_connection(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (mut bystander, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let (mut offender, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    // One frame over the 16 MiB frame limit.
    let padding = "x".repeat(16 * 1024 * 1024 + 1);
    let _ = offender
        .send_text(&format!(r#"{{"id":1,"method":"environment/status","pad":"{padding}"}}"#))
        .await;
    assert!(offender.is_closed_within(Duration::from_secs(10)).await);
    let status = bystander.ok("environment/status", json!(null)).await.unwrap();
    assert_eq!(status["status"], "ready");
    RpcClient::connect_initialized(&server.url).await.unwrap();
}

async fn hostile_json_is_refused_with_id_minus_one(target: Target) {
    let (_server, mut client) = started(target).await;
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let wide = format!(
        r#"{{"id":1,"method":"environment/status","params":[{}]}}"#,
        vec!["0"; 300_000].join(",")
    );
    for (name, text) in [("deep nesting", deep), ("too many values", wide)] {
        client.send_text(&text).await.unwrap();
        let error = client.response_to(&json!(-1)).await.unwrap().unwrap_err();
        assert_eq!(error.code, -32600, "{name}: {}", error.message);
    }
    let status = client.ok("environment/status", json!(null)).await.unwrap();
    assert_eq!(status["status"], "ready");
}
