//! The process suite, run on [`LocalExecBackend`]: the engine in-process.
//!
//! The scenarios (`exec_process/shared.rs`) take the backend under test as an argument; the
//! client's tests run the same ones on a server.

#[path = "exec_process/shared.rs"]
mod shared;

use tether_engine::exec::LocalExecBackend;

/// One test per scenario, each with a backend of its own.
macro_rules! on_local_backend {
    ($($scenario:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                shared::$scenario(&LocalExecBackend::default()).await
            }
        )*
    };
}

on_local_backend!(
    a_process_runs_to_its_exit_and_close,
    output_after_the_exit_comes_before_the_close,
    each_handle_follows_its_own_process,
    writes_reach_a_process_with_piped_stdin_in_order,
    a_pty_process_reads_what_is_typed,
    without_piped_stdin_writes_report_stdin_closed,
    interrupt_reaches_the_process_like_ctrl_c,
    a_terminate_signal_lets_the_process_clean_up,
    terminate_kills_a_running_process_and_says_whether_it_ran,
    reads_return_what_was_retained_after_a_sequence,
    a_read_can_wait_for_output,
    invalid_starts_are_refused_with_the_executors_words,
    a_process_id_is_not_reused,
);

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
