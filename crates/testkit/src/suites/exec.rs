//! The process scenarios, written against [`ExecBackend`] and [`ExecProcess`] so that they run
//! unchanged on the engine in-process and on a server through the client.
//!
//! Each scenario starts real processes (setup), drives them as a harness would (exercise), and
//! checks what the handle reported: the bytes, the order, the exit and the close (assert).

use std::time::{Duration, Instant};

pub use crate::shell_params as params;
use bytes::Bytes;
use tether_engine::exec::{ExecBackend, ExecErrorKind, ExecProcess};
use tether_engine::{ProcessEvent, ProcessUpdate};
use tether_protocol::process::{ExecOutputStream, ProcessSignal, WriteStatus};

/// Every scenario of this suite, once, with the targets it does not run on and why; runners
/// make their tests from it ([`scenarios!`](crate::scenarios)).
#[doc(hidden)]
#[macro_export]
macro_rules! __every_exec_scenario {
    ($($runner:tt)*) => {
        $crate::scenarios!(@each [$crate::suites::exec] [
            an_unread_handle_holds_a_bounded_window_then_delivers_everything,
            a_process_runs_to_its_exit_and_close,
            output_after_the_exit_comes_before_the_close [reference: "the reference reads each \
                stream and the exit in separate tasks, so it sometimes reports the exit first"],
            each_handle_follows_its_own_process,
            writes_reach_a_process_with_piped_stdin_in_order,
            a_pty_process_reads_what_is_typed,
            without_piped_stdin_writes_report_stdin_closed,
            interrupt_reaches_the_process_like_ctrl_c,
            a_terminate_signal_lets_the_process_clean_up [reference: "the reference delivers \
                only `interrupt`; signals beyond it are Tether's extension"],
            terminate_kills_a_running_process_and_says_whether_it_ran,
            reads_return_what_was_retained_after_a_sequence,
            a_read_can_wait_for_output,
            invalid_starts_are_refused_with_the_executors_words,
            a_process_id_is_not_reused,
        ] $($runner)*);
    };
}
pub use crate::__every_exec_scenario as every_scenario;

/// A handle that says nothing for this long is broken.
const QUIET_LIMIT: Duration = Duration::from_secs(20);

/// What a handle published until it closed.
#[derive(Debug, Default)]
pub struct Followed {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// PTY output: both streams, as the terminal merged them.
    pub pty: Vec<u8>,
    pub exit_code: Option<i32>,
    /// One entry per event: `out:<text>`, `err:<text>`, `pty:<text>`, `exit:<code>`, `close`.
    pub events: Vec<String>,
    pub seqs: Vec<u64>,
}

async fn next(process: &mut dyn ExecProcess) -> Option<ProcessUpdate> {
    tokio::time::timeout(QUIET_LIMIT, process.next_update()).await.expect("an update in time")
}

/// Follows `process` to its close and checks what every handle owes its caller: its own
/// process's events only, numbered 1, 2, 3… without a gap, the close last and nothing after.
pub async fn follow(process: &mut dyn ExecProcess) -> Followed {
    follow_after(process, 0).await
}

/// [`follow`], for a handle whose events up to `seen` were already taken.
async fn follow_after(process: &mut dyn ExecProcess, seen: u64) -> Followed {
    let mut followed = Followed::default();
    loop {
        let event = match next(process).await {
            Some(ProcessUpdate::Event(event)) => event,
            Some(ProcessUpdate::Failed(failure)) => panic!("the process failed: {failure}"),
            None => panic!("the stream ended before the close: {followed:?}"),
        };
        assert_eq!(event.process_id(), process.process_id());
        followed.seqs.push(event.seq());
        match event {
            ProcessEvent::Output { stream, chunk, .. } => {
                let (label, bytes) = match stream {
                    ExecOutputStream::Stdout => ("out", &mut followed.stdout),
                    ExecOutputStream::Stderr => ("err", &mut followed.stderr),
                    ExecOutputStream::Pty => ("pty", &mut followed.pty),
                };
                bytes.extend_from_slice(&chunk);
                followed.events.push(format!("{label}:{}", String::from_utf8_lossy(&chunk)));
            }
            ProcessEvent::Exited { exit_code, .. } => {
                followed.exit_code = Some(exit_code);
                followed.events.push(format!("exit:{exit_code}"));
            }
            ProcessEvent::Closed { .. } => {
                followed.events.push("close".into());
                break;
            }
        }
    }
    let expected: Vec<u64> = (seen + 1..=seen + followed.seqs.len() as u64).collect();
    assert_eq!(followed.seqs, expected, "every sequence once, in order");
    assert_eq!(next(process).await, None, "nothing after the close");
    followed
}

/// Waits until the process has printed `text`; returns the last sequence taken.
pub async fn wait_for_output(process: &mut dyn ExecProcess, text: &str) -> u64 {
    let (mut seen, mut last) = (Vec::new(), 0);
    while !String::from_utf8_lossy(&seen).contains(text) {
        match next(process).await {
            Some(ProcessUpdate::Event(ProcessEvent::Output { chunk, seq, .. })) => {
                assert_eq!(seq, last + 1);
                seen.extend_from_slice(&chunk);
                last = seq;
            }
            other => panic!("expected output `{text}`, got {other:?}"),
        }
    }
    last
}

// ---------------------------------------------------------------------------------------------
// Following a process

pub async fn a_process_runs_to_its_exit_and_close(exec: &dyn ExecBackend) {
    let mut process = exec.start(params("p", "printf out; printf err >&2; exit 3")).await.unwrap();

    let followed = follow(process.as_mut()).await;
    assert_eq!((&followed.stdout[..], &followed.stderr[..]), (&b"out"[..], &b"err"[..]));
    assert_eq!(followed.exit_code, Some(3));
    assert_eq!(followed.events.last().map(String::as_str), Some("close"));
}

/// A grandchild can hold the pipes after the child exits: its output comes after the exit,
/// and the close only once every stream ended.
pub async fn output_after_the_exit_comes_before_the_close(exec: &dyn ExecBackend) {
    let script = "echo early; (sleep 0.3; echo late) & exit 0";
    let mut process = exec.start(params("p", script)).await.unwrap();

    let followed = follow(process.as_mut()).await;
    assert_eq!(followed.events, ["out:early\n", "exit:0", "out:late\n", "close"]);
}

pub async fn each_handle_follows_its_own_process(exec: &dyn ExecBackend) {
    let script = |name: &str| format!("for i in 1 2 3 4 5; do echo {name}-$i; sleep 0.01; done");
    let mut a = exec.start(params("a", &script("a"))).await.unwrap();
    let mut b = exec.start(params("b", &script("b"))).await.unwrap();

    let (a, b) = tokio::join!(follow(a.as_mut()), follow(b.as_mut()));
    let lines = |name: &str| (1..=5).map(|i| format!("{name}-{i}\n")).collect::<String>();
    assert_eq!(String::from_utf8(a.stdout).unwrap(), lines("a"));
    assert_eq!(String::from_utf8(b.stdout).unwrap(), lines("b"));
}

// ---------------------------------------------------------------------------------------------
// Stdin

pub async fn writes_reach_a_process_with_piped_stdin_in_order(exec: &dyn ExecBackend) {
    let mut cat = params("cat", "head -n 3");
    cat.pipe_stdin = true;
    let mut process = exec.start(cat).await.unwrap();

    for line in ["one\n", "two\n", "three\n"] {
        let status = process.write(Bytes::from_static(line.as_bytes())).await.unwrap();
        assert_eq!(status, WriteStatus::Accepted);
    }
    let followed = follow(process.as_mut()).await;
    assert_eq!((&followed.stdout[..], followed.exit_code), (&b"one\ntwo\nthree\n"[..], Some(0)));
}

pub async fn a_pty_process_reads_what_is_typed(exec: &dyn ExecBackend) {
    let mut tty = params("tty", "read line; echo \"got:$line\"");
    tty.tty = true;
    let mut process = exec.start(tty).await.unwrap();

    process.write(Bytes::from_static(b"hello\n")).await.unwrap();
    let followed = follow(process.as_mut()).await;
    assert!(String::from_utf8_lossy(&followed.pty).contains("got:hello"), "{followed:?}");
    assert!(followed.stdout.is_empty() && followed.stderr.is_empty());
    assert_eq!(followed.exit_code, Some(0));
}

/// Without `pipeStdin` a pipe process's stdin is closed from the start: it reads end of file,
/// and writes are answered `stdinClosed`, not queued for nobody.
pub async fn without_piped_stdin_writes_report_stdin_closed(exec: &dyn ExecBackend) {
    let mut process = exec.start(params("p", "cat; echo \"cat ended $?\"")).await.unwrap();

    let status = process.write(Bytes::from_static(b"lost\n")).await.unwrap();
    assert_eq!(status, WriteStatus::StdinClosed);
    let followed = follow(process.as_mut()).await;
    assert_eq!(followed.stdout, b"cat ended 0\n");
}

// ---------------------------------------------------------------------------------------------
// Signals

pub async fn interrupt_reaches_the_process_like_ctrl_c(exec: &dyn ExecBackend) {
    let script = "trap 'echo trapped; exit 7' INT; echo ready; while :; do sleep 0.05; done";
    let mut process = exec.start(params("p", script)).await.unwrap();
    let seen = wait_for_output(process.as_mut(), "ready").await;

    process.interrupt().await.unwrap();
    let followed = follow_after(process.as_mut(), seen).await;
    assert_eq!((&followed.stdout[..], followed.exit_code), (&b"trapped\n"[..], Some(7)));
    // A finished process is left alone.
    process.interrupt().await.unwrap();
}

/// A Tether extension (the reference delivers only `interrupt`): a process asked to end with
/// SIGTERM gets to clean up first.
pub async fn a_terminate_signal_lets_the_process_clean_up(exec: &dyn ExecBackend) {
    let script = "trap 'echo cleaning up; exit 3' TERM; echo ready; while :; do sleep 0.05; done";
    let mut process = exec.start(params("p", script)).await.unwrap();
    let seen = wait_for_output(process.as_mut(), "ready").await;

    process.signal(ProcessSignal::Terminate).await.unwrap();
    let followed = follow_after(process.as_mut(), seen).await;
    assert_eq!((&followed.stdout[..], followed.exit_code), (&b"cleaning up\n"[..], Some(3)));
}

pub async fn terminate_kills_a_running_process_and_says_whether_it_ran(exec: &dyn ExecBackend) {
    let mut process = exec.start(params("p", "echo ready; sleep 30")).await.unwrap();
    let seen = wait_for_output(process.as_mut(), "ready").await;

    assert!(process.terminate().await.unwrap(), "it was running");
    let followed = follow_after(process.as_mut(), seen).await;
    assert_eq!(followed.exit_code, Some(128 + 9), "killed by SIGKILL");
    assert!(!process.terminate().await.unwrap(), "it was not running any more");
}

// ---------------------------------------------------------------------------------------------
// Reads

pub async fn reads_return_what_was_retained_after_a_sequence(exec: &dyn ExecBackend) {
    let mut process = exec.start(params("p", "echo one; echo two >&2; exit 4")).await.unwrap();
    let followed = follow(process.as_mut()).await;
    let last = *followed.seqs.last().unwrap();

    let all = process.read(0, None, None).await.unwrap();
    // Per stream: which of two streams written at once is numbered first is the server's choice.
    let text = |stream: ExecOutputStream| -> Vec<u8> {
        all.chunks.iter().filter(|c| c.stream == stream).flat_map(|c| c.chunk.0.to_vec()).collect()
    };
    assert_eq!(text(ExecOutputStream::Stdout), followed.stdout);
    assert_eq!(text(ExecOutputStream::Stderr), followed.stderr);
    assert!(all.chunks.iter().all(|chunk| followed.seqs.contains(&chunk.seq)));
    assert_eq!(
        (all.next_seq, all.exited, all.exit_code, all.closed),
        (last + 1, true, Some(4), true)
    );
    assert_eq!(all.failure, None);

    let nothing_new = process.read(last, None, None).await.unwrap();
    assert!(nothing_new.chunks.is_empty() && nothing_new.closed);
    // The first chunk comes whatever the budget; the budget stops the rest.
    let budgeted = process.read(0, Some(1), None).await.unwrap();
    assert_eq!(budgeted.chunks.len(), 1);
    assert_eq!(budgeted.chunks[0].chunk.0, all.chunks[0].chunk.0);
}

pub async fn a_read_can_wait_for_output(exec: &dyn ExecBackend) {
    let mut process = exec.start(params("p", "sleep 0.3; echo later; sleep 30")).await.unwrap();

    let started = Instant::now();
    let read = process.read(0, None, Some(10_000)).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(read.chunks.len(), 1);
    assert_eq!(read.chunks[0].chunk.0, "later\n");
    assert!(waited >= Duration::from_millis(200), "it waited for the output: {waited:?}");
    assert!(waited < Duration::from_secs(5), "and not for the whole wait: {waited:?}");
    // Without a wait, a read answers at once.
    let started = Instant::now();
    let read = process.read(read.next_seq - 1, None, None).await.unwrap();
    assert!(read.chunks.is_empty() && !read.exited);
    assert!(started.elapsed() < Duration::from_secs(2));
    process.terminate().await.unwrap();
    follow(process.as_mut()).await;
}

// ---------------------------------------------------------------------------------------------
// Refusals

pub async fn invalid_starts_are_refused_with_the_executors_words(exec: &dyn ExecBackend) {
    let mut empty = params("empty", "true");
    empty.argv.clear();
    let error = exec.start(empty).await.err().expect("refused");
    assert_eq!(
        (error.kind, error.message.as_str()),
        (ExecErrorKind::InvalidParams, "argv must not be empty")
    );

    let mut missing = params("missing", "true");
    missing.argv = vec!["/nonexistent/bin".into()];
    let error = exec.start(missing).await.err().expect("refused");
    assert_eq!(error.kind, ExecErrorKind::Internal);
    assert_eq!(error.message, std::io::Error::from_raw_os_error(2).to_string());

    // A refused start takes no id.
    exec.start(params("missing", "true")).await.unwrap();
}

/// A process's id stays taken while the executor keeps the process, closed or not.
pub async fn a_process_id_is_not_reused(exec: &dyn ExecBackend) {
    let mut first = exec.start(params("p", "true")).await.unwrap();
    follow(first.as_mut()).await;

    let error = exec.start(params("p", "true")).await.err().expect("refused");
    assert_eq!(
        (error.kind, error.message.as_str()),
        (ExecErrorKind::InvalidRequest, "process p already exists")
    );

    // While a handle follows it, a second start under its id is refused too, and the first
    // handle carries on undisturbed.
    let mut running = exec.start(params("q", "echo ready; sleep 30")).await.unwrap();
    assert!(exec.start(params("q", "true")).await.is_err());
    let seen = wait_for_output(running.as_mut(), "ready").await;
    running.terminate().await.unwrap();
    assert_eq!(follow_after(running.as_mut(), seen).await.exit_code, Some(137));
}

/// Most a handle nobody reads may hold: its buffer, and (remotely) what was already on its
/// way from the socket when it filled — 64 events of at most one 64 KiB chunk.
pub const UNREAD_BOUND: usize = tether_engine::exec::HANDLE_BUFFER_BYTES + 64 * (64 * 1024 + 64);

/// A handle nobody reads while its process prints 5.9 MB holds a bounded window, not the
/// stream; read again, it delivers every byte in order, the exit and the close after them.
pub async fn an_unread_handle_holds_a_bounded_window_then_delivers_everything(
    exec: &dyn ExecBackend,
) {
    let marker = std::env::temp_dir().join(format!(
        "tether-unread-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    ));
    let script = format!("seq 1 800000; touch {}", marker.display());
    let mut process = exec.start(params("unread", &script)).await.unwrap();
    let printed = || {
        assert!(process.buffered_bytes() <= UNREAD_BOUND, "{} held", process.buffered_bytes());
        marker.exists()
    };
    crate::wait::until("the process to print everything", QUIET_LIMIT, printed).await;
    assert!(process.buffered_bytes() <= UNREAD_BOUND, "{} held", process.buffered_bytes());
    let _ = std::fs::remove_file(&marker);

    let followed = follow(&mut *process).await;
    let expected: String = (1..=800_000).map(|i| format!("{i}\n")).collect();
    assert!(followed.stdout == expected.as_bytes(), "{} bytes, not `seq`'s", followed.stdout.len());
    assert_eq!(followed.exit_code, Some(0));
}
