//! A sandboxed command racing the server while it builds the next sandbox (Tether only: the
//! reference binds what a path leads to when bubblewrap mounts it, and loses this race).
//!
//! Under workspace-write a project below `/tmp` sits inside another writable root. A command
//! there can exchange the directory above the project, as often as it likes, with one whose
//! `work` is a relative link to a directory outside every root. If the server checks the paths
//! of a sandbox and then hands bubblewrap the paths, some sandboxes are built between the two
//! and bind the link's target writable. Tether hands bubblewrap descriptors opened as it checks
//! them, so what was checked is what is mounted: no attempt may write outside.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::json;
use tether_testkit::client::b64encode;
use tether_testkit::{RpcClient, ServerProcess, Target};

mod common;
use common::{uri, workspace_write};

/// Sandboxed starts raced against the swap; with as many sandboxed file calls beside them.
/// Enough that a server which checks paths and then mounts them loses many times over (one
/// sandbox in five, measured), few enough to run in well under a minute.
const ATTEMPTS: usize = 1_000;

/// Connections starting sandboxes at once, each its own session.
const IN_FLIGHT: usize = 4;

/// A directory tree removed when dropped.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Exchanges `a` and `b` until told to stop; counts the exchanges.
fn swapper(a: PathBuf, b: PathBuf, stop: Arc<AtomicBool>, swaps: Arc<AtomicUsize>) {
    while !stop.load(Ordering::Relaxed) {
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            &a,
            rustix::fs::CWD,
            &b,
            rustix::fs::RenameFlags::EXCHANGE,
        )
        .unwrap();
        swaps.fetch_add(1, Ordering::Relaxed);
    }
}

/// One connection's share of the attempts: a sandboxed command that writes into the project
/// and straight into the victim (whichever its sandbox made writable), then a sandboxed
/// `fs/writeFile` and `fs/copy` into the project, each made by the server's sandboxed helper
/// or in place. Every answer is accepted: a refusal or a failure is the race lost safely.
async fn attempts(url: String, project: PathBuf, victim: PathBuf, lane: usize) {
    let (mut client, _) = RpcClient::connect_initialized(&url).await.unwrap();
    for attempt in (lane..ATTEMPTS).step_by(IN_FLIGHT) {
        let id = format!("race-{attempt}");
        let script = format!(
            "for d in {} {}; do echo x > \"$d/cmd-{attempt}\"; done 2>/dev/null; exit 0",
            project.display(),
            victim.display()
        );
        let start = json!({
            "processId": id,
            "argv": ["/bin/sh", "-c", script],
            "cwd": uri(&project),
            "env": {"PATH": "/usr/bin:/bin"},
            "tty": false,
            "sandbox": workspace_write(&project, false),
        });
        if client.ok("process/start", start).await.is_ok() {
            client.process_events(&id).await.unwrap();
        }
        let sandbox = workspace_write(&project, true);
        let write = json!({"path": uri(&project.join(format!("write-{attempt}"))),
            "dataBase64": b64encode(b"x"), "sandbox": sandbox});
        let _ = client.call("fs/writeFile", write).await.unwrap();
        let copy = json!({"sourcePath": uri(&project.join("seed")),
            "destinationPath": uri(&project.join(format!("copy-{attempt}"))),
            "recursive": false, "sandbox": sandbox});
        let _ = client.call("fs/copy", copy).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_swapped_for_a_link_never_binds_the_link_target_writable() {
    // Setup: /tmp/<base>/a/work is the project; /tmp/<base>/x/work a relative link to a
    // directory below /var/tmp, which workspace-write does not make writable.
    let unique = std::process::id();
    let base = Removed(PathBuf::from(format!("/tmp/tether-race-{unique}")));
    let victim = Removed(PathBuf::from(format!("/var/tmp/tether-race-victim-{unique}")));
    let _ = std::fs::remove_dir_all(&base.0);
    let project = base.0.join("a/work");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("seed"), "x").unwrap();
    std::fs::create_dir_all(base.0.join("x")).unwrap();
    std::fs::create_dir_all(&victim.0).unwrap();
    let up = "../".repeat(base.0.join("x").components().count() - 1);
    let target = format!("{up}{}", victim.0.strip_prefix("/").unwrap().display());
    std::os::unix::fs::symlink(&target, base.0.join("x/work")).unwrap();
    assert_eq!(std::fs::canonicalize(base.0.join("x/work")).unwrap(), victim.0);

    let home = Removed(PathBuf::from(format!("/var/tmp/tether-race-home-{unique}")));
    std::fs::create_dir_all(&home.0).unwrap();
    let home_path = home.0.display().to_string();
    let server = ServerProcess::start_with_env(Target::Tether, &[], &[("CODEX_HOME", &home_path)])
        .await
        .unwrap();
    // A sandboxed file call first, before the swapping starts: it proves this host can
    // sandbox, after which Tether makes some file calls in place.
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let first = json!({"path": uri(&project.join("first")), "dataBase64": b64encode(b"x"),
        "sandbox": workspace_write(&project, true)});
    assert_eq!(client.ok("fs/writeFile", first).await.unwrap(), json!({}));

    // Exercise: the swap runs on a thread of its own while the attempts run.
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapping = {
        let (a, b) = (base.0.join("a"), base.0.join("x"));
        let (stop, swaps) = (stop.clone(), swaps.clone());
        std::thread::spawn(move || swapper(a, b, stop, swaps))
    };
    let lanes: Vec<_> = (0..IN_FLIGHT)
        .map(|lane| {
            let (url, project, victim) = (server.url.clone(), project.clone(), victim.0.clone());
            tokio::spawn(attempts(url, project, victim, lane))
        })
        .collect();
    for lane in lanes {
        lane.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    swapping.join().unwrap();
    assert!(swaps.load(Ordering::Relaxed) > ATTEMPTS, "the swap ran throughout");

    // Assert: nothing was written where the link leads, by a command or by a file call.
    let escaped: Vec<String> = std::fs::read_dir(&victim.0)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        escaped.is_empty(),
        "{} of {ATTEMPTS} attempts (each a command and two file calls) wrote outside: {escaped:?}",
        escaped.len()
    );
    drop(client);
    server.stop().await.unwrap();
}
