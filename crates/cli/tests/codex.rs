//! The real Codex CLI (0.169.0), pointed at the server with `CODEX_EXEC_SERVER_URL`, runs a
//! command through it end to end. The model is a local stand-in ([`MockModel`]); everything
//! else — Codex, its exec-server client, the server, the process — is real.

use std::time::Duration;

use tether_testkit::server::reference_binary;
use tether_testkit::{MockModel, ServerProcess, Target, against_both};

against_both!(codex_exec_runs_a_command_on_the_executor);

async fn codex_exec_runs_a_command_on_the_executor(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let scratch =
        std::env::temp_dir().join(format!("tether-codex-{}-{target:?}", std::process::id()));
    let (home, work) = (scratch.join("home"), scratch.join("work"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let marker = work.join("created-on-the-executor");
    let model =
        MockModel::start(&format!("echo hello-from-the-executor; pwd; touch {}", marker.display()))
            .await
            .unwrap();
    std::fs::write(home.join("config.toml"), model.codex_config()).unwrap();

    let run = tokio::process::Command::new(reference_binary().unwrap())
        .args(["exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "run it"])
        .current_dir(&work)
        .env("CODEX_HOME", &home)
        .env("CODEX_EXEC_SERVER_URL", &server.url)
        .kill_on_drop(true)
        .output();
    let output =
        tokio::time::timeout(Duration::from_secs(120), run).await.expect("codex finished").unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "codex exec failed: {stderr}");

    let tool_outputs = model.tool_outputs();
    assert_eq!(tool_outputs.len(), 1, "{tool_outputs:?}\n{stderr}");
    let reported = &tool_outputs[0];
    assert!(reported.contains("Process exited with code 0"), "{reported}");
    assert!(reported.contains("hello-from-the-executor"), "{reported}");
    assert!(reported.contains(work.to_str().unwrap()), "ran in the requested cwd: {reported}");
    assert!(marker.exists(), "the command ran for real");
    let _ = std::fs::remove_dir_all(scratch);
}
