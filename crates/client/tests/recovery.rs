//! Process handles ride through network drops: a real server, a real proxy that cuts the
//! connection, real processes. Every byte arrives once and in order, or the one affected
//! process fails loudly.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tether_client::{
    ClientError, ClientOptions, ConnectionStatus, ExecServerClient, ProcessFailureKind,
};
use tether_testkit::shell_params as params;
use tether_testkit::{FaultProxy, ServerProcess, Target, against_both};

mod common;
use common::{Signals, assert_is_seq_output, drain, expected_lines};

/// How much output comes down between two cuts of `output_survives_repeated_cuts_byte_exact`.
const CUT_EVERY_BYTES: usize = 1024;

against_both!(
    a_silent_connection_is_noticed_and_replaced,
    output_survives_repeated_cuts_byte_exact,
    stdin_writes_are_applied_once_across_cuts,
    an_outage_longer_than_the_recovery_deadline_fails_every_handle,
);

async fn output_survives_repeated_cuts_byte_exact(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = Arc::new(FaultProxy::start(server.addr()).await.unwrap());
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    let script = |name: &str| {
        format!(
            "i=1; while [ $i -le 300 ]; do echo {name}-$i; echo err-$i >&2; i=$((i+1)); sleep 0.005; done; exit 5"
        )
    };
    let mut a = client.start(params("a", &script("a"))).await.unwrap();
    let mut b = client.start(params("b", &script("b"))).await.unwrap();
    // Each cut comes once another kilobyte has come down since the last, so the cuts fall
    // while the output flows (the two commands print 8.4 KB, however it is batched), however
    // fast or slow the machine runs them.
    let cuts = Cuts::new();
    let cutter = tokio::spawn({
        let (proxy, client, cuts) = (proxy.clone(), client.clone(), cuts.clone());
        async move {
            for round in 0..6 {
                proxy.wait_forwarded_bytes(proxy.forwarded_bytes() + CUT_EVERY_BYTES).await;
                // Alternate an abrupt network failure with a clean close of the WebSocket.
                if round % 2 == 0 {
                    proxy.cut()
                } else {
                    client.disconnect()
                }
                cuts.one_more();
            }
        }
    });
    for (process, name) in [(&mut a, "a"), (&mut b, "b")] {
        let (out, err, code, seqs) = drain(process).await.unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            String::from_utf8(expected_lines(300, name)).unwrap()
        );
        assert_eq!(err, expected_lines(300, "err"));
        assert_eq!(code, 5);
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "every sequence once, in order"
        );
    }
    cutter.abort();
    assert!(cuts.made() >= 1, "no cut fell while the output flowed");
    client.wait_connected().await.unwrap();
    assert_eq!(client.status(), ConnectionStatus::Connected);
}

/// The cuts a test's cutter has made so far.
#[derive(Clone)]
struct Cuts(Arc<AtomicUsize>);

impl Cuts {
    fn new() -> Self {
        Self(Arc::new(AtomicUsize::new(0)))
    }

    fn one_more(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn made(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

async fn stdin_writes_are_applied_once_across_cuts(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    let mut cat = params("cat", "head -n 40");
    cat.pipe_stdin = true;
    let mut process = client.start(cat).await.unwrap();
    for i in 1..=40 {
        if i % 8 == 0 {
            proxy.cut();
        }
        process.write(format!("line-{i}\n").into_bytes()).await.unwrap();
    }
    let (out, _, code, _) = drain(&mut process).await.unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        String::from_utf8(expected_lines(40, "line")).unwrap()
    );
    assert_eq!(code, 0);
}

async fn an_outage_longer_than_the_recovery_deadline_fails_every_handle(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let options =
        ClientOptions { recovery_timeout: Duration::from_millis(600), ..ClientOptions::default() };
    let client = ExecServerClient::connect(&proxy.url, options).await.unwrap();
    let mut process = client.start(params("long", "sleep 30")).await.unwrap();
    proxy.set_down(true);
    let failure = drain(&mut process).await.unwrap_err();
    assert_eq!(
        failure.kind,
        ProcessFailureKind::SessionLost { server_went_away: false },
        "{failure}"
    );
    let ConnectionStatus::Failed(lost) = client.status() else { panic!("not failed") };
    assert!(!lost.server_went_away, "the server never said it was going");
    let error = client.start(params("after", "true")).await.err().unwrap();
    assert!(matches!(error, ClientError::Failed(ref l) if *l == lost), "{error}");
    let read = process.read(0, None, None).await.unwrap();
    assert!(read.failure.is_some() && read.closed, "a failed handle answers reads itself");
}

/// Tether only (the reference stops without a word): a server stopped while a command runs
/// says it is going away, so the client gives the session up after a short grace, and both
/// its status and the process's failure say the server went away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_is_a_session_lost_because_the_server_went_away() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let client = ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
    let mut process = client.start(params("long", "echo ready; sleep 30")).await.unwrap();
    let mut out = Vec::new();
    while !out.ends_with(b"ready\n") {
        match process.next_update().await {
            Some(tether_client::ProcessUpdate::Event(tether_engine::ProcessEvent::Output {
                chunk,
                ..
            })) => out.extend_from_slice(&chunk),
            other => panic!("{other:?}"),
        }
    }
    server.stop().await.unwrap();
    let failure = drain(&mut process).await.unwrap_err();
    assert_eq!(failure.kind, ProcessFailureKind::SessionLost { server_went_away: true });
    let ConnectionStatus::Failed(lost) = client.status() else { panic!("not failed") };
    assert!(lost.server_went_away, "{lost}");
    let error = client.start(params("after", "true")).await.err().unwrap();
    assert!(matches!(error, ClientError::Failed(ref l) if *l == lost), "{error}");
}

/// Tether only (retention is a flag there): output the server could not keep while the client
/// was away fails that process alone; the others carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_lost_during_an_outage_fails_only_that_process() {
    let server = ServerProcess::start_with(Target::Tether, &["--retain-output-bytes", "4096"])
        .await
        .unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    // Each command writes once the network is down, and says when it has.
    let signals = Signals::new("lost");
    let chatty = format!(
        "{}; head -c 200000 /dev/zero | tr '\\0' x; {}; sleep 30",
        signals.wait_for("down"),
        signals.raise("chatty-wrote")
    );
    let mut chatty = client.start(params("chatty", &chatty)).await.unwrap();
    let quiet =
        format!("{}; echo still-here; {}", signals.wait_for("down"), signals.raise("quiet-wrote"));
    let mut quiet = client.start(params("quiet", &quiet)).await.unwrap();
    proxy.set_down(true);
    signals.set("down");
    signals.wait("chatty-wrote").await;
    signals.wait("quiet-wrote").await;
    let mut link = client.status_changes();
    proxy.set_down(false);
    let failure = drain(&mut chatty).await.unwrap_err();
    assert_eq!(failure.kind, ProcessFailureKind::OutputLost, "{failure}");
    let (out, _, code, _) = drain(&mut quiet).await.unwrap();
    assert_eq!((out.as_slice(), code), (&b"still-here\n"[..], 0));
    // The session comes back whole (its processes are caught up before it is Connected, so
    // the drains may end first).
    let mut status = client.status();
    while status != ConnectionStatus::Connected {
        assert!(!matches!(status, ConnectionStatus::Failed(_)), "{status:?}");
        status = link.next().await.expect("the session lives");
    }
}

/// Tether only (`--spill-output-dir`): the same outage with output spilled to disk loses
/// nothing. Memory keeps 64 KiB per process; the 4.6 MB a process wrote meanwhile comes back
/// from the spill, byte for byte. A process that wrote more than its spill holds still fails
/// alone and loudly, and the spill directory stays empty (the files have no names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_spilled_to_disk_outlasts_an_outage() {
    let spill_dir = std::env::temp_dir().join(format!("tether-spill-test-{}", std::process::id()));
    std::fs::create_dir_all(&spill_dir).unwrap();
    let server = ServerProcess::start_with(
        Target::Tether,
        &[
            "--retain-output-bytes",
            "65536",
            "--spill-output-dir",
            spill_dir.to_str().unwrap(),
            "--spill-output-bytes",
            "8388608",
        ],
    )
    .await
    .unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let options =
        ClientOptions { recovery_timeout: Duration::from_secs(20), ..ClientOptions::default() };
    let client = ExecServerClient::connect(&proxy.url, options).await.unwrap();
    let signals = Signals::new("spilled");
    let kept =
        format!("{}; seq 1 600000; {}", signals.wait_for("down"), signals.raise("kept-wrote"));
    let mut kept = client.start(params("kept", &kept)).await.unwrap();
    let overflowing = format!(
        "{}; head -c 12000000 /dev/zero; {}; sleep 30",
        signals.wait_for("down"),
        signals.raise("overflowing-wrote")
    );
    let mut overflowing = client.start(params("overflowing", &overflowing)).await.unwrap();
    proxy.set_down(true);
    signals.set("down");
    signals.wait("kept-wrote").await;
    signals.wait("overflowing-wrote").await;
    assert_eq!(std::fs::read_dir(&spill_dir).unwrap().count(), 0, "spill files have no names");
    proxy.set_down(false);

    let (out, _, code, _) = drain(&mut kept).await.unwrap();
    assert_is_seq_output(&out, 600000);
    assert_eq!(code, 0);
    let failure = drain(&mut overflowing).await.unwrap_err();
    assert_eq!(failure.kind, ProcessFailureKind::OutputLost, "{failure}");
    drop(server);
    let _ = std::fs::remove_dir_all(&spill_dir);
}

/// Tether only: a fast producer (no pauses at all) keeps every byte through cuts. The server
/// bounds the output in flight per connection below what it retains per process, so a drop
/// never loses more than it can replay. (The reference, with 1 MiB retained and up to 128
/// notifications queued, loses output here and the client rightly fails the process.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_producer_keeps_every_byte_through_cuts() {
    // The client holds a bounded window of a process's output; what a cut loses in flight,
    // and what the process prints while its session is detached, comes back from the
    // server's retained output — here more than the 9.2 MB printed, so that what is tested is
    // the catch-up, not how far a loaded machine's reader falls behind (past the retention the
    // process fails plainly: `output_lost_during_an_outage_fails_only_that_process`).
    let retain = (32 * 1024 * 1024).to_string();
    let args = ["--retain-output-bytes", retain.as_str()];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    let proxy = Arc::new(FaultProxy::start(server.addr()).await.unwrap());
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    let script = "head -c 3000000 /dev/urandom | od -An -tx1 -v";
    let mut process = client.start(params("fast", script)).await.unwrap();
    // A cut each time another 512 KB has come down (up to eight), so the cuts fall while the
    // 9.2 MB printed comes down.
    let cuts = Cuts::new();
    let cutter = tokio::spawn({
        let (proxy, cuts) = (proxy.clone(), cuts.clone());
        async move {
            for _ in 0..8 {
                proxy.wait_forwarded_bytes(proxy.forwarded_bytes() + 512 * 1024).await;
                proxy.cut();
                cuts.one_more();
            }
        }
    });
    let drained = drain(&mut process).await;
    cutter.abort();
    assert!(cuts.made() >= 1, "no cut fell while the output flowed");
    let (out, _, code, _) = drained.unwrap();
    assert_eq!(code, 0);
    assert_eq!(out.len(), 3000000 / 16 * 49, "every line of od's output arrived");
}

/// Tether only (the reference retains 1 MiB per process, less than this backlog): a backlog
/// larger than any one connection carries before it is cut is caught up in pages, each kept
/// when the next connection drops, so recovery makes progress instead of starting over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_larger_than_any_connection_carries_is_caught_up_in_pages() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let options =
        ClientOptions { recovery_timeout: Duration::from_secs(20), ..ClientOptions::default() };
    let client = ExecServerClient::connect(&proxy.url, options).await.unwrap();
    let signals = Signals::new("backlog");
    let backlog = format!("{}; seq 1 600000; {}", signals.wait_for("down"), signals.raise("wrote"));
    let mut process = client.start(params("backlog", &backlog)).await.unwrap();
    proxy.set_down(true);
    signals.set("down");
    signals.wait("wrote").await;
    // About 4.6 MB of output (6.2 MB as base64) waits; each connection now carries 2 MB.
    proxy.set_downstream_limit(Some(2_000_000));
    let connections_before = proxy.connections();
    proxy.set_down(false);
    let (out, _, code, _) = drain(&mut process).await.unwrap();
    assert_is_seq_output(&out, 600000);
    assert_eq!(code, 0);
    assert!(
        proxy.connections() - connections_before >= 3,
        "the backlog took several connections: {}",
        proxy.connections() - connections_before
    );
}

/// A connection that goes silent without closing (answers held back somewhere on the way) is
/// declared dead after the keep-alive timeout and replaced; the process streams on, byte-exact.
/// Without pings the client would wait for TCP, which here never gives up.
async fn a_silent_connection_is_noticed_and_replaced(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let options = ClientOptions {
        keepalive_interval: Some(Duration::from_millis(100)),
        keepalive_timeout: Duration::from_millis(600),
        ..ClientOptions::default()
    };
    let client = ExecServerClient::connect(&proxy.url, options).await.unwrap();
    let script = "i=1; while [ $i -le 100 ]; do echo line-$i; i=$((i+1)); sleep 0.02; done";
    let mut process = client.start(params("steady", script)).await.unwrap();
    // The process streams (some lines have come down) when the connection goes silent.
    proxy.wait_forwarded_bytes(proxy.forwarded_bytes() + 1024).await;
    let connections = proxy.connections();
    proxy.freeze_downstream();
    let (out, _, code, _) = drain(&mut process).await.unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        String::from_utf8(expected_lines(100, "line")).unwrap()
    );
    assert_eq!(code, 0);
    assert!(proxy.connections() > connections, "a new connection replaced the silent one");
}
