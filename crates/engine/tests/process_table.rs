//! The process engine in-process, without any server: real children, real pipes and PTYs.

use std::sync::Arc;
use std::time::Duration;

use tether_engine::{ProcessEvent, ProcessTable, ProcessTableConfig};
use tether_protocol::process::{ExecOutputStream, ReadParams, WriteStatus};
use tether_protocol::{ByteChunk, ProcessId};
use tether_testkit::shell_params as params;
use tether_testkit::wait;
use tokio::sync::mpsc;

fn table() -> (Arc<ProcessTable>, mpsc::Receiver<ProcessEvent>) {
    let (tx, rx) = mpsc::channel(128);
    (ProcessTable::new(ProcessTableConfig::default(), tx), rx)
}

/// Collects events until the process closes; returns (stdout, stderr, exit code, seqs).
async fn until_closed(rx: &mut mpsc::Receiver<ProcessEvent>) -> (Vec<u8>, Vec<u8>, i32, Vec<u64>) {
    let (mut out, mut err, mut code, mut seqs) = (Vec::new(), Vec::new(), None, Vec::new());
    loop {
        let event =
            tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.unwrap().unwrap();
        seqs.push(event.seq());
        match event {
            ProcessEvent::Output { stream: ExecOutputStream::Stderr, chunk, .. } => {
                err.extend(&chunk)
            }
            ProcessEvent::Output { chunk, .. } => out.extend(&chunk),
            ProcessEvent::Exited { exit_code, .. } => code = Some(exit_code),
            ProcessEvent::Closed { .. } => return (out, err, code.unwrap(), seqs),
        }
    }
}

#[tokio::test]
async fn pipes_keep_streams_apart_and_number_events_in_order() {
    let (table, mut rx) = table();
    table.start(params("p", "printf out; printf err >&2; exit 3")).unwrap();
    let (out, err, code, seqs) = until_closed(&mut rx).await;
    assert_eq!((out.as_slice(), err.as_slice(), code), (&b"out"[..], &b"err"[..], 3));
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "one gap-free sequence");
}

#[tokio::test]
async fn output_after_exit_is_numbered_after_it_and_close_waits_for_it() {
    let (table, mut rx) = table();
    table.start(params("p", "(sleep 0.3; echo late) & echo early")).unwrap();
    let mut order = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.unwrap().unwrap() {
            ProcessEvent::Output { chunk, .. } => {
                order.push(String::from_utf8_lossy(&chunk).trim().to_string())
            }
            ProcessEvent::Exited { .. } => order.push("exit".into()),
            ProcessEvent::Closed { .. } => break,
        }
    }
    assert_eq!(order, ["early", "exit", "late"]);
}

#[tokio::test]
async fn read_replays_retained_output_with_exit_and_close() {
    let (table, mut rx) = table();
    table.start(params("p", "echo one; echo two >&2")).unwrap();
    until_closed(&mut rx).await;
    let read = table
        .read(ReadParams {
            process_id: "p".into(),
            after_seq: None,
            max_bytes: None,
            wait_ms: None,
        })
        .await
        .unwrap();
    assert_eq!(read.chunks.len(), 2);
    assert!(read.exited && read.closed);
    assert_eq!(read.exit_code, Some(0));
    assert_eq!(read.next_seq, 5);
}

#[tokio::test]
async fn long_poll_wakes_on_output() {
    let (table, _rx) = table();
    table.start(params("p", "sleep 0.2; echo hi; sleep 5")).unwrap();
    let started = std::time::Instant::now();
    let read = table
        .read(ReadParams {
            process_id: "p".into(),
            after_seq: Some(0),
            max_bytes: None,
            wait_ms: Some(5000),
        })
        .await
        .unwrap();
    assert_eq!(read.chunks[0].chunk.0.as_ref(), b"hi\n");
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(table.terminate(&"p".into()));
}

#[tokio::test]
async fn writes_are_applied_once_per_write_id() {
    let (table, mut rx) = table();
    let mut p = params("p", "head -c 6");
    p.pipe_stdin = true;
    table.start(p).unwrap();
    let id = ProcessId::from("p");
    for (write_id, text) in [("1", "ab"), ("1", "XX"), ("2", "cd"), ("3", "ef")] {
        let status = table.write(&id, ByteChunk::from(text.as_bytes()), write_id).unwrap();
        assert_eq!(status, WriteStatus::Accepted);
    }
    let (out, _, code, _) = until_closed(&mut rx).await;
    assert_eq!((out.as_slice(), code), (&b"abcdef"[..], 0));
}

#[tokio::test]
async fn stdin_is_closed_without_pipe_stdin() {
    let (table, mut rx) = table();
    table.start(params("p", "cat; echo done")).unwrap();
    let status = table.write(&"p".into(), ByteChunk::from(&b"x"[..]), "1").unwrap();
    assert_eq!(status, WriteStatus::StdinClosed);
    let (out, _, _, _) = until_closed(&mut rx).await;
    assert_eq!(out, b"done\n");
}

#[tokio::test]
async fn pty_merges_output_and_echoes_input() {
    let (table, mut rx) = table();
    let mut p = params("p", "stty size; read line; echo got:$line");
    p.tty = true;
    table.start(p).unwrap();
    table.write(&"p".into(), ByteChunk::from(&b"hi\n"[..]), "1").unwrap();
    let (out, err, code, _) = until_closed(&mut rx).await;
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("24 80"), "{out}");
    assert!(out.contains("got:hi"), "{out}");
    assert!(err.is_empty());
    assert_eq!(code, 0);
}

/// A process of the test's own, killed when the test ends however it ends.
struct KilledOnDrop(i32);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill(2) of a pid the test started; no memory is involved.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// Threads of this process named `name` (the engine's PTY readers are `tether-pty`).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

#[tokio::test]
async fn a_streaming_terminal_is_carried_in_few_chunks_and_every_byte_arrives() {
    let (table, mut rx) = table();
    let bytes = 4_000_000u64;
    let mut p = params("p", &format!("head -c {bytes} /dev/zero; echo; echo last"));
    p.tty = true;
    let started = std::time::Instant::now();
    table.start(p).unwrap();
    let (mut out, mut chunks) = (Vec::new(), 0u64);
    loop {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.unwrap().unwrap() {
            ProcessEvent::Output { chunk, .. } => {
                chunks += 1;
                out.extend(&chunk);
            }
            ProcessEvent::Exited { .. } => {}
            ProcessEvent::Closed { .. } => break,
        }
    }
    let elapsed_ms = started.elapsed().as_millis() as u64;
    // The terminal turns each "\n" into "\r\n".
    assert_eq!(out.len() as u64, bytes + 8, "every byte, then the two lines");
    assert!(out.ends_with(b"\r\nlast\r\n"), "the last line last");
    assert!(out[..bytes as usize].iter().all(|&b| b == 0));
    // A chunk is a whole one (64 KiB), or the first in a millisecond: never one per read of
    // a few KiB, which would be a thousand here.
    let bound = bytes / (64 * 1024) + elapsed_ms + 4;
    assert!(chunks <= bound, "{chunks} chunks in {elapsed_ms} ms (at most {bound})");
}

#[tokio::test]
async fn a_terminal_given_up_to_a_background_job_stops_its_reading_thread() {
    let (table, mut rx) = table();
    assert_eq!(threads_named("tether-pty"), 0);
    // The background job keeps the terminal open, quiet, long after the shell exits.
    let mut p = params("p", "sleep 30 & echo job=$!");
    p.tty = true;
    table.start(p).unwrap();
    let (out, _, code, _) = until_closed(&mut rx).await;
    let out = String::from_utf8_lossy(&out);
    let job: i32 = out.trim().strip_prefix("job=").expect("the job's pid").parse().unwrap();
    let _job = KilledOnDrop(job);
    assert_eq!(code, 0);
    // Closed means the pump let the terminal go; its thread ends as soon as it sees that.
    tokio::time::timeout(Duration::from_secs(10), async {
        while threads_named("tether-pty") > 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the PTY's reading thread is still running after the process closed");
}

#[tokio::test]
async fn terminate_kills_the_whole_group() {
    let (table, mut rx) = table();
    table.start(params("p", "sleep 100 & echo $!; wait")).unwrap();
    let read = table
        .read(ReadParams {
            process_id: "p".into(),
            after_seq: Some(0),
            max_bytes: None,
            wait_ms: Some(5000),
        })
        .await
        .unwrap();
    let grandchild: i32 = String::from_utf8_lossy(&read.chunks[0].chunk.0).trim().parse().unwrap();
    assert!(table.terminate(&"p".into()));
    let (_, _, code, _) = until_closed(&mut rx).await;
    assert_eq!(code, 137);
    assert!(dies_soon(grandchild).await, "the grandchild died with its group");
    assert!(!table.terminate(&"p".into()), "an exited process is not running");
}

#[tokio::test]
async fn duplicate_ids_and_bad_params_are_refused() {
    let (table, _rx) = table();
    table.start(params("p", "sleep 5")).unwrap();
    let err = table.start(params("p", "true")).unwrap_err();
    assert_eq!(err.to_string(), "process p already exists");
    let mut empty = params("q", "");
    empty.argv.clear();
    assert_eq!(table.start(empty).unwrap_err().to_string(), "argv must not be empty");
    let mut missing = params("r", "");
    missing.argv = vec!["/nonexistent/binary".into()];
    assert_eq!(
        table.start(missing).unwrap_err().to_string(),
        "No such file or directory (os error 2)"
    );
    table.shutdown();
}

/// Waits for `condition`, the table's own state, named `what`.
async fn until(what: &str, condition: impl Fn() -> bool) {
    wait::until(what, wait::DEADLINE, condition).await
}

/// Whether `pid` ends (or is a zombie awaiting its reaper) within ten seconds, seen on its
/// pidfd: a killed process closes its pipes a moment before it finishes dying.
async fn dies_soon(pid: i32) -> bool {
    tether_testkit::process_stats::ends_within(pid as u32, Duration::from_secs(10)).await
}

/// A long session runs command after command: closed processes keep their output only within
/// the session's budget, the first closed forgotten first, so memory stays bounded.
#[tokio::test]
async fn closed_processes_are_forgotten_oldest_first_past_the_output_budget() {
    let (tx, mut rx) = mpsc::channel(128);
    let config = ProcessTableConfig { closed_output_budget: 1000, ..ProcessTableConfig::default() };
    let table = ProcessTable::new(config, tx);
    for id in ["first", "second", "third"] {
        table.start(params(id, "head -c 600 /dev/zero")).unwrap();
        until_closed(&mut rx).await;
        // The close is recorded right after it is published: wait for the record.
        until("no unfinished process", || table.unfinished() == 0).await;
    }
    assert!(table.get(&"first".into()).is_none(), "forgotten first");
    assert!(table.get(&"second".into()).is_none(), "1,200 bytes is over the budget");
    assert!(table.get(&"third".into()).is_some(), "the newest is kept");
    // A process still running is never forgotten, whatever it retains.
    table.start(params("running", "head -c 5000 /dev/zero; sleep 30")).unwrap();
    table.start(params("fourth", "head -c 600 /dev/zero")).unwrap();
    // Once "fourth" is closed and recorded (only "running" is left unfinished), the budget
    // has been applied with "running"'s 5,000 bytes in view.
    until("the fourth closed", || table.get(&"fourth".into()).is_some_and(|p| p.is_closed())).await;
    until("one unfinished process", || table.unfinished() == 1).await;
    assert!(table.get(&"third".into()).is_none(), "the older closed one made room");
    assert!(table.get(&"running".into()).is_some());
    table.shutdown();
}
