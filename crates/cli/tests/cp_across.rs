//! `tether cp` from one executor to another: a tree goes from the executor of `--url` to a
//! named one, whole — bytes, modes, times and links — through this machine, and what is
//! refused names the executor it is about. Two Tether servers, each with a directory of its
//! own on this machine.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tether_testkit::scratch::Scratch;
use tether_testkit::server::tether_binary;
use tether_testkit::{ServerProcess, Target};

mod common;
use common::tree::describe;

/// Runs `tether cp --url URL ARGS…` with the named executors of `config_home`.
async fn tether_cp(url: &str, config_home: &Path, args: &[&str]) -> std::process::Output {
    let command = tokio::process::Command::new(tether_binary().unwrap())
        .args(["cp", "--url", url])
        .args(args)
        .env("XDG_CONFIG_HOME", config_home)
        .env_remove("TETHER_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(120), command).await.expect("finished").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_goes_from_one_executor_to_another_whole() {
    // Setup: two servers, the second named `other`; a tree on the first.
    let scratch = Scratch::new("across");
    for side in ["one", "other", "config/tether"] {
        scratch.dir(side);
    }
    let (one, other) = (
        ServerProcess::start(Target::Tether).await.unwrap(),
        ServerProcess::start(Target::Tether).await.unwrap(),
    );
    let config = format!("[executors.other]\nurl = \"{}\"\n", other.url);
    std::fs::write(scratch.path("config/tether/config.toml"), config).unwrap();
    let tree = scratch.path("one/tree");
    std::fs::create_dir_all(tree.join("bin")).unwrap();
    let big: Vec<u8> = (0..3_500_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(tree.join("big.bin"), &big).unwrap();
    std::fs::write(tree.join("bin/run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(tree.join("bin/run.sh"), std::fs::Permissions::from_mode(0o755))
        .unwrap();
    std::os::unix::fs::symlink("bin/run.sh", tree.join("link")).unwrap();
    let (from, to) =
        (format!(":{}", tree.display()), format!("other:{}/", scratch.path("other").display()));

    // Exercise: the tree across, then a source that is not there.
    let across = tether_cp(&one.url, &scratch.path("config"), &["-r", &from, &to]).await;
    let missing = format!(":{}", scratch.path("one/missing").display());
    let refused = tether_cp(&one.url, &scratch.path("config"), &[&missing, &to]).await;

    // Assert: the tree arrived whole and nothing was written here; the refusal names the
    // executor by its URL.
    let said = String::from_utf8_lossy(&across.stderr);
    assert_eq!((across.status.code(), said.as_ref()), (Some(0), ""));
    assert_eq!(describe(&scratch.path("other/tree")), describe(&tree));
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr).trim_end(),
        format!(
            "tether cp: {} on {}: no such file or directory",
            scratch.path("one/missing").display(),
            one.url
        )
    );
    assert_eq!(refused.status.code(), Some(1));
}
