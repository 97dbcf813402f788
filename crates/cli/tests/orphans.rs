//! Nothing a server started outlives it, however it ends (Tether only: the reference leaves
//! its commands to PID 1 when it is killed). `tether serve` runs as a guardian and the server
//! it forked (see the CLI's `guardian` module); killing either with SIGKILL leaves no command
//! running — pipe and PTY processes, background grandchildren, TERM-ignoring processes, and
//! orphans whose shell is gone.

use std::time::Duration;

use serde_json::json;
use tether_testkit::process_stats::serving_pid;
use tether_testkit::server::tether_binary;
use tether_testkit::{RpcClient, ServerProcess, Target, wait};

mod common;

/// Starts the commands a red team would leave behind and returns the pids of everything they
/// run, each announced on its stdout.
async fn commands_that_would_outlive_the_server(client: &mut RpcClient) -> Vec<u32> {
    let scripts = [
        ("pipe", "echo $$; exec sleep 1000", false),
        ("pty", "echo $$; exec sleep 1000", true),
        ("background", "sleep 1000 & echo $!; wait", false),
        ("ignores-term", "trap '' TERM; echo $$; while :; do sleep 1; done", false),
        // The shell exits at once; its child is an orphan the server never knew.
        ("orphan", "sleep 1000 >/dev/null 2>&1 & echo $!", false),
        // Announced once it has its own session: announced before `setsid` ran, a kill that
        // came first would find it still in the shell's group.
        (
            "daemon",
            "setsid sleep 1000 >/dev/null 2>&1 & \
             while [ \"$(cut -d' ' -f6 /proc/$!/stat)\" != \"$!\" ]; do :; done; echo $!",
            false,
        ),
    ];
    let mut pids = Vec::new();
    for (id, script, tty) in scripts {
        let mut params = common::exec(id, script);
        params["tty"] = json!(tty);
        client.ok("process/start", params).await.unwrap();
        let mut text = String::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !text.contains('\n') {
            let read = client.ok("process/read", json!({"processId": id, "waitMs": 1000})).await;
            text.push_str(&common::text(&read.unwrap()["chunks"]));
            assert!(tokio::time::Instant::now() < deadline, "{id} announced no pid");
        }
        let pid: u32 = text.trim().parse().unwrap_or_else(|_| panic!("{id}: {text:?}"));
        assert!(common::is_alive(pid), "{id} runs");
        pids.push(pid);
    }
    pids
}

async fn all_dead(pids: &[u32]) -> Vec<u32> {
    wait::still_running_after(pids, Duration::from_secs(15)).await
}

fn kill(pid: u32) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outlives_a_server_killed_with_sigkill() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let guardian = server.pid().unwrap();
    let serving = serving_pid(guardian);
    assert_ne!(serving, guardian, "the server runs under its guardian");
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let pids = commands_that_would_outlive_the_server(&mut client).await;
    kill(serving);
    assert_eq!(all_dead(&pids).await, Vec::<u32>::new(), "left running");
    assert_eq!(
        server.stop().await.unwrap().code(),
        Some(128 + 9),
        "the guardian says how it ended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_the_server_knows_outlives_its_guardian_killed_with_sigkill() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let guardian = server.pid().unwrap();
    let serving = serving_pid(guardian);
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let pids = commands_that_would_outlive_the_server(&mut client).await;
    kill(guardian);
    // The server hears of it (SIGTERM) and shuts down, killing every command's process group
    // (the orphan is in its shell's) but the one that made itself a daemon in a session of
    // its own: it was the guardian's, and is PID 1's now.
    let (known, daemon) = pids.split_at(pids.len() - 1);
    assert_eq!(all_dead(known).await, Vec::<u32>::new(), "left running");
    assert!(all_dead(&[serving]).await.is_empty(), "the server stopped");
    assert!(common::is_alive(daemon[0]), "the daemon is the documented exception");
    kill(daemon[0]);
}

/// A server whose stderr is a pipe nobody reads any more (its reader gone, as with `tether
/// serve 2>&1 | head -1`) still stops when its guardian is killed: a log line it cannot write
/// is dropped, never a panic in the task that would have stopped it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_a_closed_stderr_still_stops_when_its_guardian_is_killed() {
    use tokio::io::AsyncBufReadExt;
    for _ in 0..3 {
        let mut guardian = tokio::process::Command::new(tether_binary().unwrap())
            .args(["serve", "--listen", "ws://127.0.0.1:0"])
            .env_remove("TETHER_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(guardian.stderr.take().unwrap()).lines();
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("listening") {
                break;
            }
        }
        drop(lines);
        let serving = serving_pid(guardian.id().unwrap());
        guardian.start_kill().unwrap();
        guardian.wait().await.unwrap();
        assert!(all_dead(&[serving]).await.is_empty(), "the server serves on without its guardian");
    }
}

/// A session that ends (its client gone past the detach window) takes with it what its
/// finished commands left behind, as the server's shutdown does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_ends_takes_its_commands_leftovers_with_it() {
    let server =
        ServerProcess::start_with(Target::Tether, &["--session-ttl-secs", "1"]).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let start = common::exec("leaves", "sleep 1000 >/dev/null 2>&1 & echo $!");
    client.ok("process/start", start).await.unwrap();
    let read = client.ok("process/read", json!({"processId": "leaves", "waitMs": 5000})).await;
    let orphan: u32 = common::text(&read.unwrap()["chunks"]).trim().parse().unwrap();
    client.close().await;
    assert_eq!(all_dead(&[orphan]).await, Vec::<u32>::new(), "the orphan outlived its session");
}
