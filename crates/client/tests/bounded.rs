//! A caller that stops reading a handle costs the client a bounded window, never the whole
//! stream: real servers, real processes printing tens of megabytes. Then every byte arrives
//! in order once the caller reads again — held back on the server (a paused connection), or
//! caught up from what it retained (a handle that fell behind) — or the handle says plainly
//! that the server no longer holds what it missed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tether_client::flow::{HANDLE_MEMORY_BYTES, RESUME_BELOW_BYTES};
use tether_client::{ClientOptions, ExecServerClient, RemoteProcess};
use tether_testkit::shell_params as params;
use tether_testkit::{ServerProcess, Target, against_both, wait};

mod common;
use common::{assert_is_seq_output, drain, drain_within};

against_both!(a_paused_connection_holds_the_process_back_and_loses_nothing);

/// Lines of `seq` in these tests: 38.9 MB, more than the server retains (8 MiB by default).
const LINES: usize = 5_000_000;

/// Lines printed into a paused connection: 78.9 MB, more than everything between the process
/// and the handle can hold (the handle's bound, socket buffers, the server's queues: about
/// 50 MiB at most), so the process cannot finish while nobody reads.
const PAUSED_LINES: usize = 10_000_000;

/// The most a handle may hold, stalled or caught up: everything the client holds for one
/// process stays within it, the handle's updates among them.
const BOUND: usize = HANDLE_MEMORY_BYTES;

fn options(full_handle_pause: Option<Duration>) -> ClientOptions {
    ClientOptions { full_handle_pause, ..ClientOptions::default() }
}

/// A scratch directory for a test's marker files, removed with it.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("tether-bounded-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn marker(&self) -> PathBuf {
        self.0.join("printed-everything")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `seq 1 LINES`, then a marker file once all of it was written out.
fn printer(id: &str, lines: usize, marker: &Path) -> tether_protocol::process::ExecParams {
    params(id, &format!("seq 1 {lines}; touch {}", marker.display()))
}

/// Waits until the handle holds at least `bytes` for its caller, checking the bound meanwhile.
async fn wait_until_holding(process: &RemoteProcess, bytes: usize) {
    let holding = || {
        assert!(process.buffered_bytes() <= BOUND, "{} bytes held", process.buffered_bytes());
        process.buffered_bytes() >= bytes
    };
    wait::until("the handle to fill", Duration::from_secs(60), holding).await;
}

/// Waits for the marker (the process printed everything), checking the bound meanwhile.
async fn wait_for_marker(process: &RemoteProcess, marker: &Path) {
    let printed = || {
        assert!(process.buffered_bytes() <= BOUND, "{} bytes held", process.buffered_bytes());
        marker.exists()
    };
    wait::until("the process to print everything", Duration::from_secs(60), printed).await;
    assert!(process.buffered_bytes() <= BOUND, "{} bytes held", process.buffered_bytes());
}

/// Pausing as long as it takes (`tether exec`'s choice): the process cannot get ahead of its
/// reader by more than the pipeline holds, and every byte arrives once the reader reads.
async fn a_paused_connection_holds_the_process_back_and_loses_nothing(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let client = ExecServerClient::connect(&server.url, options(None)).await.unwrap();
    let scratch = Scratch::new(&format!("paused-{target:?}"));
    let mut process =
        client.start(printer("stalled", PAUSED_LINES, &scratch.marker())).await.unwrap();

    // The caller is away: the handle fills to its bound and stays there, and the process,
    // held back by the server, cannot finish. Staying is watched for 300 ms: an absence, which
    // an unbounded handle or server fails and a bounded one always passes.
    wait_until_holding(&process, RESUME_BELOW_BYTES).await;
    for _ in 0..30 {
        assert!(process.buffered_bytes() <= BOUND, "{} bytes held", process.buffered_bytes());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!scratch.marker().exists(), "the process printed everything while nobody read it");

    let (out, _, code, _) = drain_within(&mut process, BOUND).await.unwrap();
    assert_eq!(code, 0);
    assert_is_seq_output(&out, PAUSED_LINES);
}

/// Falling behind at once: other processes go on while one handle is unread, the unread one
/// stays within its bound, and, the server having retained everything, it catches up whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_that_fell_behind_catches_up_whole_and_holds_nobody_up() {
    let retain = (64 * 1024 * 1024).to_string();
    let args = ["--retain-output-bytes", retain.as_str()];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    let client =
        ExecServerClient::connect(&server.url, options(Some(Duration::ZERO))).await.unwrap();
    let scratch = Scratch::new("behind");
    let mut process = client.start(printer("unread", LINES, &scratch.marker())).await.unwrap();

    wait_for_marker(&process, &scratch.marker()).await;
    let mut other = client.start(params("other", "echo still-served")).await.unwrap();
    let (out, _, _, _) = drain(&mut other).await.unwrap();
    assert_eq!(out, b"still-served\n");
    assert!(process.buffered_bytes() <= BOUND, "{} bytes held", process.buffered_bytes());

    // Caught up in pages as its caller reads.
    let (out, _, code, seqs) = drain_within(&mut process, BOUND).await.unwrap();
    assert_eq!(code, 0);
    assert_is_seq_output(&out, LINES);
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "every sequence once, in order");
}

/// A pause that outlasts its patience gives way: the connection is read again (the process
/// can finish, which it could not while paused) and the handle falls behind, then catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_past_its_patience_falls_behind_and_still_loses_nothing() {
    let retain = (64 * 1024 * 1024).to_string();
    let args = ["--retain-output-bytes", retain.as_str()];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    let patience = Some(Duration::from_millis(200));
    let client = ExecServerClient::connect(&server.url, options(patience)).await.unwrap();
    let scratch = Scratch::new("patience");
    let mut process = client.start(printer("slow", LINES, &scratch.marker())).await.unwrap();

    wait_for_marker(&process, &scratch.marker()).await;

    let (out, _, code, _) = drain_within(&mut process, BOUND).await.unwrap();
    assert_eq!(code, 0);
    assert_is_seq_output(&out, LINES);
}

/// When the server no longer holds what a handle fell behind on, the handle fails and says
/// what happened and what to do; what it did deliver is the stream's true beginning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_too_far_behind_for_the_server_fails_plainly() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let client =
        ExecServerClient::connect(&server.url, options(Some(Duration::ZERO))).await.unwrap();
    let scratch = Scratch::new("lost");
    let mut process = client.start(printer("too-far", LINES, &scratch.marker())).await.unwrap();
    wait_for_marker(&process, &scratch.marker()).await;

    let mut delivered = Vec::new();
    let failure = loop {
        let update = tokio::time::timeout(Duration::from_secs(60), process.next_update())
            .await
            .expect("no update within 60 s")
            .expect("the stream ended without a failure");
        match update {
            tether_client::ProcessUpdate::Event(tether_engine::ProcessEvent::Output {
                chunk,
                ..
            }) => delivered.extend_from_slice(&chunk),
            tether_client::ProcessUpdate::Event(event) => panic!("unexpected {event:?}"),
            tether_client::ProcessUpdate::Failed(failure) => break failure,
        }
    };
    assert_eq!(failure.kind, tether_client::ProcessFailureKind::FellBehind, "{failure}");
    // What to do about it is the message's to say.
    assert!(failure.message.contains("--retain-output-bytes"), "{failure}");
    let expected: String = (1..=LINES).map(|i| format!("{i}\n")).collect();
    assert!(
        !delivered.is_empty() && expected.as_bytes().starts_with(&delivered),
        "delivered {} bytes that are not the output's beginning",
        delivered.len()
    );
}
