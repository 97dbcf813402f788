//! Recovery's edge cases, made deterministic over real sockets: the proxy decides exactly which
//! bytes get through (a request that reaches the server while its answer is lost, a server that
//! still holds the old connection, a network that swallows everything), so each case happens
//! the same way on every run, against Tether and against the reference.
//!
//! The cases: a start lost before the server saw it is sent again; an ambiguous start is
//! terminated and reported, never adopted; recovery waits for starts in flight but never for
//! starts waiting on it; `-32010` is retried until the server
//! lets the old connection go; a mutating request whose answer is lost is resent only if the
//! server applies it once (a write, by its `writeId`) and otherwise reported (an interrupt);
//! calls made while recovering complete after the resume; and when the session is lost, every
//! waiting and later call gets the same error and every handle a terminal failure, within the
//! recovery deadline.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tether_client::{
    ClientError, ClientOptions, ConnectionStatus, ExecServerClient, ProcessFailureKind,
    ProcessUpdate, RemoteProcess,
};
use tether_engine::ProcessEvent;
use tether_protocol::error::SESSION_ALREADY_ATTACHED;
use tether_protocol::process::WriteStatus;
use tether_testkit::shell_params as params;
use tether_testkit::{FaultProxy, RpcClient, ServerProcess, Target, against_both, wait};
use tokio::time::{Instant, sleep, timeout};

mod common;
use common::drain;

against_both!(
    a_start_whose_answer_is_lost_fails_and_its_process_is_terminated,
    a_start_its_caller_abandons_is_terminated_and_its_id_released,
    recovery_waits_for_starts_in_flight_but_not_for_starts_waiting_on_it,
    resume_is_retried_while_the_server_still_holds_the_old_connection,
    a_write_whose_answer_is_lost_is_applied_exactly_once,
    an_interrupt_whose_answer_is_lost_is_reported_not_resent,
    calls_made_while_recovering_complete_after_the_resume,
    a_refused_resume_fails_every_waiting_and_later_call_alike,
    the_recovery_deadline_bounds_an_attempt_that_hangs,
    a_start_lost_before_the_server_saw_it_is_sent_again,
);

// ---------------------------------------------------------------------------------------------
// Ambiguous starts

/// The start reaches the server, which runs the process and answers, but the answer is lost
/// with the connection. The caller learns the start may or may not have run; the process,
/// which did run, is terminated once the session is back.
async fn a_start_whose_answer_is_lost_fails_and_its_process_is_terminated(target: Target) {
    // Setup.
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    let scratch = Scratch::new();

    // Exercise: the server answers into a frozen connection, which is then cut.
    proxy.freeze_downstream();
    let start = tokio::spawn({
        let client = client.clone();
        let params = params("ambiguous", &records_pid_then_sleeps(&scratch.path("pid")));
        async move { client.start(params).await.map(|_| ()) }
    });
    let pid = scratch.wait_for_pid("pid").await;
    proxy.wait_held_bytes(1).await.unwrap();
    proxy.cut();

    // Assert: the caller gets the ambiguity, the process does not survive the recovery.
    let error = start.await.unwrap().unwrap_err();
    assert!(
        matches!(&error, ClientError::Disconnected(message)
            if message.to_string().contains("may or may not have run") && message.to_string().contains("it is being terminated")),
        "{error}"
    );
    client.wait_connected().await.unwrap();
    wait_until_dead(pid).await;
    assert_eq!(client.status(), ConnectionStatus::Connected);
}

/// The start's request never reaches the server: it is lost with the connection. Once the
/// session is back it is sent again (a process id is never reused, so a server that had run
/// it would refuse), and the process runs once, its handle like any other.
async fn a_start_lost_before_the_server_saw_it_is_sent_again(target: Target) {
    // Setup.
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    let scratch = Scratch::new();
    let ran = scratch.path("ran");

    // Exercise: the request is on the wire but held back from the server, then cut.
    proxy.freeze_upstream();
    let start = tokio::spawn({
        let client = client.clone();
        let script = format!("echo once >> {}; echo ran", ran.display());
        async move { client.start(params("lost", &script)).await }
    });
    proxy.wait_held_upstream_bytes(1).await.unwrap();
    proxy.cut();

    // Assert: the caller gets a handle, the process ran once.
    let mut process = start.await.unwrap().unwrap();
    let (out, _, code, _) = drain(&mut process).await.unwrap();
    assert_eq!((out.as_slice(), code), (&b"ran\n"[..], 0));
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "once\n");
}

/// A caller that stops waiting for a start (a timeout drops the future) leaves a process that
/// may be running with no handle to follow it. The client terminates it, and releases the id
/// once the server has confirmed.
async fn a_start_its_caller_abandons_is_terminated_and_its_id_released(target: Target) {
    // Setup.
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    let scratch = Scratch::new();

    // Exercise: the process runs, its start's answer is held back, and the caller gives up.
    proxy.freeze_downstream();
    let pid = {
        let start =
            client.start(params("abandoned", &records_pid_then_sleeps(&scratch.path("pid"))));
        tokio::pin!(start);
        tokio::select! {
            outcome = &mut start => panic!("the answer cannot arrive: {:?}", outcome.err()),
            pid = scratch.wait_for_pid("pid") => pid,
        }
        // The start future is dropped here.
    };

    // Assert: the terminate goes out at once (its answer is held back too, so it is resent
    // after the cut: terminating is idempotent) ...
    wait_until_dead(pid).await;
    proxy.cut();
    client.wait_connected().await.unwrap();
    // ... and once it is answered, the id is the server's to judge again, not refused by the
    // client as still open.
    let client = &client;
    let released = move || async move {
        match client.start(params("abandoned", "true")).await {
            Err(ClientError::Protocol(message)) if message.contains("already open") => false,
            // The server may still hold the closed process under that id; either way the
            // client no longer does.
            Ok(_) | Err(ClientError::Server { .. }) => true,
            Err(error) => panic!("unexpected: {error}"),
        }
    };
    wait::until_async("the id released", Duration::from_secs(20), released).await;
}

/// A start in flight when the connection drops settles before recovery catches processes up,
/// so a start that succeeded is never half-registered. A start made during the recovery waits
/// for it; it must not in turn hold the recovery up (which would then run out of time).
async fn recovery_waits_for_starts_in_flight_but_not_for_starts_waiting_on_it(target: Target) {
    // Setup.
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let options =
        ClientOptions { recovery_timeout: Duration::from_secs(8), ..ClientOptions::default() };
    let client = ExecServerClient::connect(&proxy.url, options).await.unwrap();
    let scratch = Scratch::new();

    // Exercise: start A runs on the server, its answer is held back, and the connection is
    // cut. A's caller has not looked at the outcome yet, so A is still in flight.
    proxy.freeze_downstream();
    let a = client.start(params("a", &records_pid_then_sleeps(&scratch.path("pid"))));
    tokio::pin!(a);
    tokio::select! {
        outcome = &mut a => panic!("the answer cannot arrive: {:?}", outcome.err()),
        held = proxy.wait_held_bytes(1) => held.unwrap(),
    }
    let pid = scratch.wait_for_pid("pid").await;
    proxy.cut();

    // Assert: recovery holds back while A is unsettled (not even a reconnect attempt). A
    // recovery that waits shows nothing a test can wait for, so an attempt is given half a
    // second to show: an absence, which a wrong client fails and a right one always passes.
    sleep(Duration::from_millis(500)).await;
    assert_eq!(client.status(), ConnectionStatus::Recovering);
    assert_eq!(proxy.connections(), 1, "no reconnect while a start is unsettled");

    // Exercise: B is made during the recovery (polled once, so it waits on it); then A's
    // caller looks.
    let b = client.start(params("b", "echo b"));
    tokio::pin!(b);
    tokio::select! {
        biased;
        outcome = &mut b => panic!("B cannot start during the recovery: {:?}", outcome.err()),
        () = std::future::ready(()) => {}
    }
    let error = a.await.err().unwrap();
    assert!(
        matches!(&error, ClientError::Disconnected(m) if m.to_string().contains("may or may not have run"))
    );

    // Assert: recovery goes on, B starts on the new connection, A's process is terminated.
    let mut b = b.await.unwrap();
    let (out, _, code, _) = drain(&mut b).await.unwrap();
    assert_eq!((out.as_slice(), code), (&b"b\n"[..], 0));
    wait_until_dead(pid).await;
}

// ---------------------------------------------------------------------------------------------
// Resuming

/// The client's side of the connection ends while the server's stays open: the server still
/// holds the session attached and refuses a resume with `-32010`. The client keeps trying,
/// resumes as soon as the server lets the old connection go, and loses or repeats nothing.
async fn resume_is_retried_while_the_server_still_holds_the_old_connection(target: Target) {
    // Setup: a process printing through the outage.
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    let script = "i=1; while [ $i -le 40 ]; do echo line-$i; i=$((i+1)); sleep 0.05; done";
    let mut process = client.start(params("counter", script)).await.unwrap();

    // Exercise: once output flows, the client's side is cut.
    let first = match timeout(Duration::from_secs(20), process.next_update()).await {
        Ok(Some(ProcessUpdate::Event(ProcessEvent::Output { chunk, seq: 1, .. }))) => {
            String::from_utf8(chunk.to_vec()).unwrap()
        }
        other => panic!("expected the first output, got {other:?}"),
    };
    proxy.cut_client_side(Duration::from_millis(1500));

    // Assert: meanwhile the server refuses the session to anyone (checked directly) ...
    wait_for_status(&client, ConnectionStatus::Recovering).await;
    let mut other = RpcClient::connect(&server.url).await.unwrap();
    let refused = other.initialize(Some(client.session_id())).await.unwrap().unwrap_err();
    assert_eq!(refused.code, SESSION_ALREADY_ATTACHED, "{refused}");
    drop(other);
    assert_eq!(client.status(), ConnectionStatus::Recovering);
    // ... and the client comes back once it is released, with every line once, in order.
    let (out, _, code, seqs) = drain(&mut process).await.unwrap();
    assert_eq!(first + &String::from_utf8(out).unwrap(), lines(40, "line"));
    assert_eq!(code, 0);
    assert_eq!(seqs, (2..=seqs.len() as u64 + 1).collect::<Vec<_>>());
    assert!(proxy.connections() >= 3, "refused resumes were retried: {}", proxy.connections());
    assert_eq!(client.status(), ConnectionStatus::Connected);
}

// ---------------------------------------------------------------------------------------------
// Mutating requests in flight

/// A write reaches the server and is applied; its answer is lost. The client resends it after
/// the resume with the same `writeId`, and the server does not apply it again.
async fn a_write_whose_answer_is_lost_is_applied_exactly_once(target: Target) {
    // Setup.
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    let mut head = params("head", "head -n 2");
    head.pipe_stdin = true;
    let mut process = client.start(head).await.unwrap();

    // Exercise: the write is answered into a frozen connection, which is then cut.
    proxy.freeze_downstream();
    {
        let write = process.write(&b"first\n"[..]);
        tokio::pin!(write);
        tokio::select! {
            outcome = &mut write => panic!("the answer cannot arrive: {outcome:?}"),
            held = proxy.wait_held_bytes(1) => held.unwrap(),
        }
        proxy.cut();
        // Assert: the write completes through the recovery.
        assert_eq!(write.await.unwrap(), WriteStatus::Accepted);
    }
    process.write(&b"second\n"[..]).await.unwrap();

    // Assert: each line once.
    let (out, _, code, _) = drain(&mut process).await.unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), "first\nsecond\n");
    assert_eq!(code, 0);
}

/// An interrupt reaches the server and is delivered; its answer is lost. A second interrupt is
/// not the same as one, so the client reports the ambiguity instead of resending it.
async fn an_interrupt_whose_answer_is_lost_is_reported_not_resent(target: Target) {
    // Setup: a process that reports each SIGINT and carries on.
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    // Each line of input is echoed back: a line written after the recovery is the marker
    // before which a resent interrupt would have shown.
    let script = "trap 'echo interrupted' INT; echo ready; while :; do read -r line && echo \"got $line\"; done";
    let mut trapper = params("trapper", script);
    trapper.pipe_stdin = true;
    let mut process = client.start(trapper).await.unwrap();
    let mut out = String::new();
    read_until(&mut process, &mut out, "ready\n").await;

    // Exercise: the interrupt is answered into a frozen connection, which is then cut.
    proxy.freeze_downstream();
    let error = {
        let interrupt = process.interrupt();
        tokio::pin!(interrupt);
        tokio::select! {
            outcome = &mut interrupt => panic!("the answer cannot arrive: {outcome:?}"),
            held = proxy.wait_held_bytes(1) => held.unwrap(),
        }
        proxy.cut();
        interrupt.await.unwrap_err()
    };

    // Assert: the caller learns it may have taken effect; it did, exactly once.
    assert!(
        matches!(&error, ClientError::Disconnected(m) if m.to_string().contains("may or may not have taken effect")),
        "{error}"
    );
    client.wait_connected().await.unwrap();
    read_until(&mut process, &mut out, "interrupted\n").await;
    // A write sent after the recovery comes back after anything the recovery resent.
    process.write(&b"marker\n"[..]).await.unwrap();
    read_until(&mut process, &mut out, "got marker\n").await;
    assert_eq!(out, "ready\ninterrupted\ngot marker\n");
    assert!(process.terminate().await.unwrap());
}

// ---------------------------------------------------------------------------------------------
// Waiting calls, and the end of a session

/// Calls made while the client is recovering wait for it, then complete on the new
/// connection; a handle's stream ends after its close.
async fn calls_made_while_recovering_complete_after_the_resume(target: Target) {
    // Setup.
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await.unwrap();
    let mut head = params("head", "head -n 1");
    head.pipe_stdin = true;
    let mut process = client.start(head).await.unwrap();

    // Exercise: the network goes down; calls are made; it comes back.
    proxy.set_down(true);
    wait_for_status(&client, ConnectionStatus::Recovering).await;
    let (write, read, late, connected, ()) = tokio::join!(
        process.write(&b"during\n"[..]),
        process.read(0, None, None),
        client.start(params("late", "echo late")),
        client.wait_connected(),
        // Polled after the calls above, each of which is waiting by then.
        async {
            assert_eq!(client.status(), ConnectionStatus::Recovering);
            proxy.set_down(false);
        },
    );

    // Assert: every call went through once the session was back.
    assert_eq!(write.unwrap(), WriteStatus::Accepted);
    assert!(read.unwrap().failure.is_none());
    connected.unwrap();
    let (out, _, code, _) = drain(&mut late.unwrap()).await.unwrap();
    assert_eq!((out.as_slice(), code), (&b"late\n"[..], 0));
    let (out, _, code, _) = drain(&mut process).await.unwrap();
    assert_eq!((out.as_slice(), code), (&b"during\n"[..], 0));
    let after_close = timeout(Duration::from_secs(5), process.next_update()).await;
    assert_eq!(after_close, Ok(None), "the stream ends after the close");
}

/// The server no longer knows the session (here: another server answers), so the resume is
/// refused for good. The client gives up at once, not at its deadline; every call waiting
/// gets the same error, so does every later call, and the handle a terminal failure.
async fn a_refused_resume_fails_every_waiting_and_later_call_alike(target: Target) {
    // Setup.
    let server = ServerProcess::start(target).await.unwrap();
    let other_server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let options =
        ClientOptions { recovery_timeout: Duration::from_secs(60), ..ClientOptions::default() };
    let client = ExecServerClient::connect(&proxy.url, options).await.unwrap();
    let mut process = client.start(params("sleeper", "sleep 30")).await.unwrap();

    // Exercise: calls wait through an outage, after which the wrong server answers.
    proxy.set_down(true);
    wait_for_status(&client, ConnectionStatus::Recovering).await;
    let began = Instant::now();
    let (write, interrupt, terminate, start, connected, ()) = tokio::join!(
        process.write(&b"x"[..]),
        process.interrupt(),
        process.terminate(),
        client.start(params("late", "true")),
        client.wait_connected(),
        // Polled after the calls above, each of which is waiting by then.
        async {
            proxy.set_upstream(other_server.addr());
            proxy.set_down(false);
        },
    );

    // Assert: one error for all, given at once.
    assert!(began.elapsed() < Duration::from_secs(20), "gave up at the refusal, not the deadline");
    let ConnectionStatus::Failed(lost) = client.status() else { panic!("not failed") };
    assert!(lost.reason.contains("unknown session id"), "{lost}");
    assert!(!lost.server_went_away, "the server never said it was going");
    let is_lost = |error: ClientError| matches!(error, ClientError::Failed(l) if l == lost);
    assert!(is_lost(write.unwrap_err()));
    assert!(is_lost(interrupt.unwrap_err()));
    assert!(is_lost(terminate.unwrap_err()));
    assert!(is_lost(start.err().unwrap()));
    assert!(is_lost(connected.unwrap_err()));
    // Later calls too.
    assert!(is_lost(client.start(params("later", "true")).await.err().unwrap()));
    assert!(is_lost(process.write(&b"y"[..]).await.unwrap_err()));
    // The handle: one terminal failure, then the end of its stream.
    assert_terminal_failure(&mut process).await;
}

/// The network swallows everything, so a reconnect attempt hangs rather than fails. The
/// recovery deadline still holds: the session is given up on time (not after the connect and
/// initialize timeouts, or never), with the same error for everything that waited — a read in
/// flight at the drop included.
async fn the_recovery_deadline_bounds_an_attempt_that_hangs(target: Target) {
    // Setup.
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let options =
        ClientOptions { recovery_timeout: Duration::from_secs(1), ..ClientOptions::default() };
    let client = ExecServerClient::connect(&proxy.url, options).await.unwrap();
    let mut process = client.start(params("sleeper", "sleep 30")).await.unwrap();

    // Exercise: a long-poll read is in flight when the network starts swallowing packets.
    let began = Instant::now();
    let (read, connected) = {
        let sent_before = proxy.forwarded_upstream_bytes();
        let read = process.read(0, None, Some(20_000));
        tokio::pin!(read);
        tokio::select! {
            outcome = &mut read => panic!("nothing to read yet: {outcome:?}"),
            () = proxy.wait_forwarded_upstream_bytes(sent_before + 1) => {}
        }
        proxy.set_unresponsive(true);
        proxy.cut();
        wait_for_status(&client, ConnectionStatus::Recovering).await;
        tokio::join!(read, client.wait_connected())
    };

    // Assert: given up within the deadline (plus scheduling slack), one error for all.
    assert!(began.elapsed() < Duration::from_secs(5), "took {:?}", began.elapsed());
    let ConnectionStatus::Failed(lost) = client.status() else { panic!("not failed") };
    assert!(!lost.server_went_away, "the server never said it was going");
    let is_lost = |error: ClientError| matches!(error, ClientError::Failed(l) if l == lost);
    assert!(is_lost(read.unwrap_err()));
    assert!(is_lost(connected.unwrap_err()));
    assert_terminal_failure(&mut process).await;
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// A script that leaves its pid in `pid_file` (atomically) and becomes a long `sleep`.
fn records_pid_then_sleeps(pid_file: &Path) -> String {
    let file = pid_file.display();
    format!("echo $$ > {file}.tmp && mv {file}.tmp {file} && exec sleep 60")
}

/// A directory of its own for each test, removed afterwards.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tether-edge-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The pid a process left in `name`.
    async fn wait_for_pid(&self, name: &str) -> u32 {
        let path = self.path(name);
        let what = format!("a pid in {}", path.display());
        let text = wait::until_some(&what, wait::DEADLINE, || std::fs::read_to_string(&path).ok());
        text.await.trim().parse().unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn wait_until_dead(pid: u32) {
    let ended = tether_testkit::process_stats::ends_within(pid, wait::DEADLINE).await;
    assert!(ended, "process {pid} is still running");
}

async fn wait_for_status(client: &ExecServerClient, status: ConnectionStatus) {
    // Each change is seen: a wait returns the latest status.
    let mut changes = client.status_changes();
    let reached = async { while client.status() != status && changes.next().await.is_some() {} };
    let _ = timeout(wait::DEADLINE, reached).await;
    assert_eq!(client.status(), status, "the client never became {status:?}");
}

/// Reads stdout into `out` until it ends with `suffix`.
async fn read_until(process: &mut RemoteProcess, out: &mut String, suffix: &str) {
    while !out.ends_with(suffix) {
        let update = timeout(Duration::from_secs(20), process.next_update()).await;
        match update {
            Ok(Some(ProcessUpdate::Event(ProcessEvent::Output { chunk, .. }))) => {
                out.push_str(std::str::from_utf8(&chunk).unwrap())
            }
            other => panic!("waiting for {suffix:?} after {out:?}, got {other:?}"),
        }
    }
}

/// One `Failed` update saying the session is lost (the server never said it was going
/// away), then the end of the stream; reads are answered by the handle itself.
async fn assert_terminal_failure(process: &mut RemoteProcess) {
    let update = timeout(Duration::from_secs(5), process.next_update()).await.unwrap();
    let lost = ProcessFailureKind::SessionLost { server_went_away: false };
    assert!(
        matches!(&update, Some(ProcessUpdate::Failed(failure)) if failure.kind == lost),
        "{update:?}"
    );
    let after = timeout(Duration::from_secs(5), process.next_update()).await;
    assert_eq!(after, Ok(None), "nothing follows a failure");
    let read = process.read(0, None, None).await.unwrap();
    assert!(read.closed && read.failure.is_some());
}

fn lines(count: usize, prefix: &str) -> String {
    (1..=count).map(|i| format!("{prefix}-{i}\n")).collect()
}
