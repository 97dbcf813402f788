//! A short soak, as part of the suite: a few clients and processes for a few seconds through
//! frequent cuts — and once more with attackers beside them. Long runs are for people (see the
//! binary's docs and the README).

use std::time::Duration;

/// Runs `tether-soak ARGS…`, which must succeed; returns its report.
async fn soak(args: &[&str]) -> String {
    let output = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_tether-soak"))
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the soak finished")
    .unwrap();
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{report}\n{errors}");
    for row in ["| runs with lost or repeated bytes | 0 |", "| runs failed loudly | 0 |"] {
        assert!(report.contains(row), "{row}\n{report}");
    }
    report
}

/// The number in the report's row named `name`.
fn count(report: &str, name: &str) -> u64 {
    report
        .lines()
        .find_map(|line| line.strip_prefix(&format!("| {name} | ")))
        .and_then(|rest| rest.trim_end_matches(" |").parse().ok())
        .unwrap_or_else(|| panic!("no `{name}` in:\n{report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_loses_and_repeats_nothing() {
    let report = soak(&[
        "--clients",
        "6",
        "--processes",
        "3",
        "--lines",
        "50000",
        "--duration-secs",
        "8",
        "--min-cut-ms",
        "100",
        "--max-cut-ms",
        "500",
    ])
    .await;
    let cuts = count(&report, "connection cuts");
    assert!(cuts >= 5, "the connections were cut ({cuts} times):\n{report}");
}

/// With attackers beside the honest clients (`--hostile`): idle and trickling pre-upgrade
/// sockets, stalled readers, vanishing clients. The honest clients lose nothing, every stalled
/// session is released, and SIGKILL of the server leaves nothing running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_hostile_soak_breaks_nothing_and_leaves_nothing() {
    let report = soak(&[
        "--hostile",
        "--clients",
        "2",
        "--processes",
        "2",
        "--lines",
        "20000",
        "--duration-secs",
        "8",
        "--min-cut-ms",
        "200",
        "--max-cut-ms",
        "800",
    ])
    .await;
    assert_eq!(count(&report, "attacks that broke what they should not"), 0, "{report}");
    assert_eq!(count(&report, "processes left running after SIGKILL of the server"), 0);
    let stalled = count(&report, "stalled readers");
    assert!(stalled >= 1, "a stalled reader was let go and its session resumed:\n{report}");
}
