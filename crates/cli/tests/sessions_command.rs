//! `tether sessions` and `tether kill`, run as a person runs them against a server with signed
//! tokens: each person (a token's subject) sees and ends their own sessions — a detached
//! command among them — and never another's.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tether_testkit::scratch::Scratch;
use tether_testkit::server::tether_binary;
use tether_testkit::{ServerProcess, Target};

const SECRET: &str = "a shared secret of at least 32 bytes, for session tests\n";

/// Runs `tether ARGS…` with `token` in `TETHER_TOKEN`.
async fn tether(args: &[&str], token: &str) -> std::process::Output {
    let command = tokio::process::Command::new(tether_binary().unwrap())
        .args(args)
        .env("TETHER_TOKEN", token)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(30), command).await.unwrap().unwrap()
}

async fn mint(secret: &std::path::Path, subject: &str) -> String {
    let secret = secret.to_str().unwrap();
    let args =
        ["token", "mint", "--shared-secret-file", secret, "--ttl", "10m", "--subject", subject];
    let minted = tether(&args, "").await;
    assert_eq!(minted.status.code(), Some(0), "{}", String::from_utf8_lossy(&minted.stderr));
    String::from_utf8(minted.stdout).unwrap().trim().to_owned()
}

async fn listed(url: &str, token: &str) -> Vec<Value> {
    let output = tether(&["sessions", "--url", url, "--json"], token).await;
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice::<Value>(&output.stdout).unwrap().as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_person_finds_and_ends_only_their_own_sessions() {
    let scratch = Scratch::new("sessions");
    let secret = scratch.file("secret", SECRET.as_bytes());
    let args =
        ["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", secret.to_str().unwrap()];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    let url = server.url.as_str();
    let (alice, bob) = (mint(&secret, "alice").await, mint(&secret, "bob").await);

    let detached =
        tether(&["exec", "--url", url, "--detach", "--json", "--", "sleep", "60"], &alice).await;
    assert_eq!(detached.status.code(), Some(0), "{}", String::from_utf8_lossy(&detached.stderr));
    let ids: Value = serde_json::from_slice(&detached.stdout).unwrap();
    let session = ids["sessionId"].as_str().unwrap();

    let mine = listed(url, &alice).await;
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0]["sessionId"], session);
    assert_eq!(
        (mine[0]["attached"].as_bool(), mine[0]["running"].as_u64()),
        (Some(false), Some(1))
    );
    assert!(mine[0]["expiresInMs"].as_u64().unwrap() > 0);
    let table = tether(&["sessions", "--url", url], &alice).await;
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.starts_with("SESSION\tSTATE\tRUNNING\tPROCESSES\tEXPIRES\n"), "{table}");
    assert!(table.contains(&format!("{session}\tdetached\t1\t1\tin ")), "{table}");

    // Another person sees nothing of it and cannot end it.
    assert!(listed(url, &bob).await.is_empty());
    let refused = tether(&["kill", "--url", url, session], &bob).await;
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr).trim_end(),
        format!(
            "tether: no session {session} of yours on this executor; `tether sessions --url {url}` lists yours"
        )
    );
    assert_eq!(listed(url, &alice).await.len(), 1, "still there");

    let ended = tether(&["kill", "--url", url, session], &alice).await;
    assert_eq!(ended.status.code(), Some(0), "{}", String::from_utf8_lossy(&ended.stderr));
    assert!(listed(url, &alice).await.is_empty());
    let resume = tether(&["exec", "--url", url, "--resume", session, "--list"], &alice).await;
    assert_eq!(resume.status.code(), Some(255), "the session is gone");
}
