//! Helpers the scenario files share.
#![allow(dead_code)]

use serde_json::{Value, json};
use tether_testkit::client::b64decode;

/// `process/start` params for a `/bin/sh -c` script in pipe mode.
pub fn exec(id: &str, script: &str) -> Value {
    json!({
        "processId": id,
        "argv": ["/bin/sh", "-c", script],
        "cwd": "file:///tmp",
        "env": {"PATH": "/usr/bin:/bin"},
        "tty": false,
    })
}

/// Whether an OS process is alive (a zombie is dead, only not yet reaped).
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

/// Whether `pid` is dead within two seconds: a killed process closes its pipes a moment
/// before it finishes dying.
pub async fn dies_soon(pid: u32) -> bool {
    for _ in 0..100 {
        if !is_alive(pid) {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    false
}

/// The text of a `process/read` result's chunks, concatenated.
pub fn text(chunks: &Value) -> String {
    chunks
        .as_array()
        .unwrap()
        .iter()
        .map(|c| String::from_utf8(b64decode(&c["chunk"])).unwrap())
        .collect()
}
