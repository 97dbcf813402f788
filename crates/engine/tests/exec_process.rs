//! The process suite, run on [`LocalExecBackend`]: the engine in-process.
//!
//! The scenarios (`tether_testkit::suites::exec`) take the backend under test as an argument;
//! the client's tests run the same ones on Tether and on the reference.

use tether_engine::exec::LocalExecBackend;
use tether_testkit::scenarios;
use tether_testkit::suites::exec as shared;

scenarios!(shared::every_scenario, on local, |scenario| {
    scenario(&LocalExecBackend::default()).await
});

/// Local only: a handle keeps its process alive after the backend that started it is gone,
/// and the process ends with the last of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_outlives_its_backend() {
    let backend = LocalExecBackend::default();
    let mut process = tether_engine::exec::ExecBackend::start(
        &backend,
        shared::params("p", "sleep 0.2; echo done"),
    )
    .await
    .unwrap();
    drop(backend);

    let followed = shared::follow(process.as_mut()).await;
    assert_eq!((&followed.stdout[..], followed.exit_code), (&b"done\n"[..], Some(0)));
}

/// A handle that fell further behind than its process retains (8 MiB by default) fails, and
/// says so, instead of skipping what it missed; what it delivered is the output's beginning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_behind_by_more_than_is_retained_fails_plainly() {
    use tether_engine::exec::ExecBackend as _;
    use tether_engine::{ProcessEvent, ProcessFailureKind, ProcessUpdate};
    let backend = LocalExecBackend::default();
    let marker = std::env::temp_dir().join(format!("tether-too-far-{}", std::process::id()));
    let script = format!("seq 1 3000000; touch {}", marker.display());
    let mut process = backend.start(shared::params("too-far", &script)).await.unwrap();
    let printed = || {
        assert!(process.buffered_bytes() <= shared::UNREAD_BOUND);
        marker.exists()
    };
    let within = std::time::Duration::from_secs(60);
    tether_testkit::wait::until("the process to print everything", within, printed).await;
    let _ = std::fs::remove_file(&marker);
    let mut delivered = Vec::new();
    let failure = loop {
        match process.next_update().await.expect("a failure before the stream ends") {
            ProcessUpdate::Event(ProcessEvent::Output { chunk, .. }) => {
                delivered.extend_from_slice(&chunk)
            }
            ProcessUpdate::Event(event) => panic!("unexpected {event:?}"),
            ProcessUpdate::Failed(failure) => break failure,
        }
    };
    assert_eq!(failure.kind, ProcessFailureKind::FellBehind, "{failure}");
    let expected: String = (1..=3_000_000).map(|i| format!("{i}\n")).collect();
    assert!(!delivered.is_empty() && expected.as_bytes().starts_with(&delivered));
}
