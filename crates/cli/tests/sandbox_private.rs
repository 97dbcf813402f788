//! The server's own files and its control, out of every sandbox's reach (Tether only: the
//! reference has no such files to hide).
//!
//! A sandboxed command reads the whole filesystem under both of Codex's intents. The file
//! that holds the server's token would let it connect back and start commands outside any
//! sandbox; the spill directory holds every session's output. Both are masked in every sandbox,
//! wherever they lie, and no sandboxed file call writes there.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tether_testkit::client::{b64encode, output_of};
use tether_testkit::{RpcClient, ServerProcess, Target};

mod common;
use common::{uri, workspace_write};

const TOKEN: &str = "private-token-5b1d";

/// A directory tree removed when dropped.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `script` under `sandbox`, in `cwd`; its output (stdout then stderr) and exit code.
async fn run(
    client: &mut RpcClient,
    id: &str,
    script: &str,
    cwd: &Path,
    sandbox: Value,
) -> (String, i64) {
    let start = json!({"processId": id, "argv": ["/bin/sh", "-c", script], "cwd": uri(cwd),
        "env": {"PATH": "/usr/bin:/bin"}, "tty": false, "sandbox": sandbox});
    client.ok("process/start", start).await.unwrap();
    let events = client.process_events(id).await.unwrap();
    let exited = events.iter().find(|e| e["method"] == "process/exited").unwrap();
    let mut output = String::from_utf8_lossy(&output_of(&events, "stdout")).into_owned();
    output.push_str(&String::from_utf8_lossy(&output_of(&events, "stderr")));
    (output, exited["params"]["exitCode"].as_i64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_own_files_are_hidden_from_every_sandbox() {
    // Setup: the token file outside every writable root, the spill directory inside the
    // project, which the sandbox binds writable.
    let base = Removed(PathBuf::from(format!("/var/tmp/tether-private-{}", std::process::id())));
    let project = base.0.join("project");
    let spill = project.join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let token = base.0.join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let home = base.0.join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let args = [
        "--ws-auth",
        "capability-token",
        "--ws-token-file",
        token.to_str().unwrap(),
        "--spill-output-dir",
        spill.to_str().unwrap(),
    ];
    let server = ServerProcess::start_with_env(
        Target::Tether,
        &args,
        &[("CODEX_HOME", home.to_str().unwrap())],
    )
    .await
    .unwrap();
    let mut client = RpcClient::connect_bearer(&server.url, TOKEN).await.unwrap();
    client.initialize(None).await.unwrap().unwrap();

    // Exercise and assert: under workspace-write and under read-only, the token reads as an
    // empty file nobody may open and the spill directory as an empty one nobody may list or
    // write; the project around them is as it was.
    let script = format!(
        "cat {token}; echo \"[cat $?]\"; ls {spill}; echo \"[ls $?]\"; \
         echo x > {spill}/planted; echo \"[write $?]\"; echo ok > {project}/beside; echo \"[beside $?]\"",
        token = token.display(),
        spill = spill.display(),
        project = project.display(),
    );
    let (output, code) =
        run(&mut client, "write", &script, &project, workspace_write(&project, false)).await;
    assert_eq!(code, 0, "{output}");
    for refused in ["[cat 1]", "[ls 2]", "[write 2]", "[beside 0]"] {
        assert!(output.contains(refused), "{refused} in {output}");
    }
    assert!(!output.contains(TOKEN), "{output}");
    assert!(output.contains("Permission denied"), "{output}");
    let mut read_only = workspace_write(&project, false);
    read_only["permissions"]["file_system"]["entries"] =
        json!([{"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}]);
    let (output, _) = run(&mut client, "read", &script, &project, read_only).await;
    assert!(output.contains("[cat 1]") && !output.contains(TOKEN), "{output}");

    // A sandboxed file call is refused there too, in place or through the helper.
    let write = json!({"path": uri(&spill.join("via-fs")), "dataBase64": b64encode(b"x"),
        "sandbox": workspace_write(&project, true)});
    let error = client.err("fs/writeFile", write).await.unwrap();
    assert_eq!((error.code, error.message.as_str()), (-32600, "Permission denied (os error 13)"));
    let names: Vec<_> =
        std::fs::read_dir(&spill).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, Vec::<std::ffi::OsString>::new(), "nothing planted in the spill directory");
    assert_eq!(std::fs::read_to_string(&token).unwrap(), TOKEN);
    assert_eq!(std::fs::read_to_string(project.join("beside")).unwrap(), "ok\n");
    server.stop().await.unwrap();
}

/// A sandbox with the network enabled shares the host's loopback; a command in it that
/// connects to the server (here unauthenticated, as on loopback by default) is closed on
/// before its upgrade is read, while the same probe from an unsandboxed command is upgraded.
/// So it is from a process the command orphaned (`( … & )`), in a pid namespace of the
/// sandbox's own and in the host's (`--linux-sandbox-pid-namespace inherit`), where no kernel
/// namespace keeps the orphan inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_command_cannot_connect_to_the_server_that_confines_it() {
    for mode in ["isolate", "inherit"] {
        cannot_connect_in(mode).await;
    }
}

async fn cannot_connect_in(mode: &str) {
    let base = Removed(PathBuf::from(format!("/var/tmp/tether-loopback-{}", std::process::id())));
    let project = base.0.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let home = base.0.join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let server = ServerProcess::start_with_env(
        Target::Tether,
        &["--linux-sandbox-pid-namespace", mode],
        &[("CODEX_HOME", home.to_str().unwrap())],
    )
    .await
    .unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let port = server.url.rsplit(':').next().unwrap().trim_end_matches('/');
    let request = "GET / HTTP/1.1\\r\\nHost: x\\r\\nUpgrade: websocket\\r\\n\
                   Connection: Upgrade\\r\\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\n\
                   Sec-WebSocket-Version: 13\\r\\n\\r\\n";
    let script = [
        "import socket".to_owned(),
        format!("s = socket.create_connection(('127.0.0.1', {port}))"),
        "try:".to_owned(),
        format!("    s.sendall(b'{request}')"),
        "    answer = s.recv(12)".to_owned(),
        "except (ConnectionResetError, BrokenPipeError):".to_owned(),
        "    answer = b''".to_owned(),
        "print('answer:', answer)".to_owned(),
    ];
    std::fs::write(project.join("probe.py"), script.join("\n")).unwrap();
    let probe = "python3 probe.py";
    let mut networked = workspace_write(&project, false);
    networked["permissions"]["network"] = json!("enabled");
    let (output, code) = run(&mut client, "inside", probe, &project, networked.clone()).await;
    assert_eq!((output.as_str(), code), ("answer: b''\n", 0), "{mode}");
    // The probe's parent exits at once; `cat` reads until the orphan's output ends.
    let orphaned = "( python3 probe.py & ) | cat";
    let (output, code) = run(&mut client, "orphan", orphaned, &project, networked).await;
    assert_eq!((output.as_str(), code), ("answer: b''\n", 0), "{mode}");
    let unconfined =
        json!({"permissions": {"type": "disabled"}, "windowsSandboxLevel": "disabled"});
    let (output, code) = run(&mut client, "outside", probe, &project, unconfined).await;
    assert_eq!((output.as_str(), code), ("answer: b'HTTP/1.1 101'\n", 0), "{mode}");
    server.stop().await.unwrap();
}
