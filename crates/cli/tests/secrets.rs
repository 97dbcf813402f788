//! The server's secrets stay in the server: its environment does not reach commands under a
//! default policy, and its `/proc` entries cannot be read by them.

use std::process::Stdio;

use serde_json::json;
use tether_testkit::RpcClient;
use tether_testkit::client::b64decode;
use tokio::io::{AsyncBufReadExt, BufReader};

/// A server running as an unprivileged user (as on most executors) with a secret in its
/// environment: a command of the same user can read its own `/proc` entries but not the
/// server's, and its default-policy environment lacks the secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_cannot_read_the_servers_environment() {
    if !rustix::process::geteuid().is_root() {
        // Only root can start the server as another user; as a user, the run below is the
        // machine's own situation and the same checks apply to the server started by the suite.
        eprintln!("skipped: needs root to start the server as an unprivileged user");
        return;
    }
    let tether = tether_testkit::server::tether_binary().unwrap();
    let mut server = tokio::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&tether)
        .args(["serve", "--listen", "ws://127.0.0.1:0"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/tmp")
        .env("TETHER_CANARY_SECRET", "canary-4f7a")
        .env("PGPASSWORD", "canary-pg")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut url = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut url).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(url.trim()).await.unwrap();
    let script = "cat /proc/self/environ >/dev/null && echo own-readable; \
                  cat /proc/$PPID/environ 2>&1 | tr '\\0' '\\n'; env";
    let start = json!({
        "processId": "p", "argv": ["/bin/sh", "-c", script], "cwd": "file:///", "env": {},
        "envPolicy": {"inherit": "all", "ignoreDefaultExcludes": false, "exclude": [], "set": {},
            "includeOnly": []},
        "tty": false,
    });
    client.ok("process/start", start).await.unwrap();
    let events = client.process_events("p").await.unwrap();
    let output: String = events
        .iter()
        .filter(|e| e["method"] == "process/output")
        .map(|e| String::from_utf8(b64decode(&e["params"]["chunk"])).unwrap())
        .collect();
    server.kill().await.unwrap();
    assert!(output.starts_with("own-readable\n"), "the command reads its own entries: {output}");
    assert!(output.contains("Permission denied"), "{output}");
    assert!(!output.contains("canary"), "a secret reached the command: {output}");
}
