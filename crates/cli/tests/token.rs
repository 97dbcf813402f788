//! `tether token mint` and `tether token inspect`, run as a person runs them, against a real
//! `tether serve --ws-auth signed-bearer-token`: what `mint` prints opens a connection, its
//! claims are the ones the server checks, and `inspect` shows them and checks the signature
//! only when given the secret.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use tether_testkit::scratch::Scratch;
use tether_testkit::server::tether_binary;
use tether_testkit::{ServerProcess, Target, wait};
use tokio::io::AsyncWriteExt as _;

mod common;
use common::upgrade;

const SECRET: &str = "a shared secret of at least 32 bytes, for token tests\n";

/// Runs `tether ARGS…` to its end, with `stdin` (if any) as its input.
async fn tether(args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut command = tokio::process::Command::new(tether_binary().unwrap());
    command.args(args).env_remove("TETHER_TOKEN").kill_on_drop(true);
    command.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await.unwrap().unwrap()
}

/// `tether token mint ARGS…`'s token: exit 0, one newline-terminated line, nothing on stderr.
async fn mint(secret: &Path, args: &[&str]) -> String {
    let mut full = vec!["token", "mint", "--shared-secret-file", secret.to_str().unwrap()];
    full.extend(args);
    let output = tether(&full, None).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{full:?}: {stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let token = stdout.strip_suffix('\n').expect("newline-terminated");
    assert!(!token.contains('\n'), "one line: {stdout}");
    token.to_owned()
}

/// A token's claims, decoded here, independently of `tether`.
fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// Returns once the whole-second clock is past `exp`: a token expiring is the event, and the
/// server, which refuses a token once its own clock is past its `exp`, reads the clock after
/// this does.
async fn past(exp: i64) {
    wait::until("the clock past the token's expiry", wait::DEADLINE, || now() > exp).await
}

/// A server taking signed tokens with no clock skew, so a token is refused the second it
/// expires.
async fn strict_server(secret: &Path) -> ServerProcess {
    let args = [
        "--ws-auth",
        "signed-bearer-token",
        "--ws-shared-secret-file",
        secret.to_str().unwrap(),
        "--ws-max-clock-skew-seconds",
        "0",
    ];
    ServerProcess::start_with(Target::Tether, &args).await.unwrap()
}

/// A minted token with the server's issuer and audience opens a connection — by hand and
/// through `tether exec` with `TETHER_TOKEN`, as the README shows — and one for another
/// audience is refused with the server's own words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minted_token_is_accepted_and_a_wrong_audience_is_not() {
    let scratch = Scratch::new("token-accept");
    let secret = scratch.file("secret", SECRET.as_bytes());
    let secret_arg = secret.to_str().unwrap();
    let server = ServerProcess::start_with(
        Target::Tether,
        &[
            "--ws-auth",
            "signed-bearer-token",
            "--ws-shared-secret-file",
            secret_arg,
            "--ws-issuer",
            "control-plane",
            "--ws-audience",
            "executor",
        ],
    )
    .await
    .unwrap();

    let before = now();
    let good = mint(
        &secret,
        &["--ttl", "10m", "--issuer", "control-plane", "--audience", "executor", "--subject", "ci"],
    )
    .await;
    let after = now();
    let header = URL_SAFE_NO_PAD.decode(good.split('.').next().unwrap()).unwrap();
    assert_eq!(header, br#"{"alg":"HS256","typ":"JWT"}"#);
    let seen = claims(&good);
    let iat = seen["iat"].as_i64().unwrap();
    assert!((before..=after).contains(&iat), "{seen}");
    assert_eq!(seen["exp"].as_i64(), Some(iat + 600), "{seen}");
    assert_eq!(
        (&seen["iss"], &seen["aud"], &seen["sub"]),
        (&"control-plane".into(), &"executor".into(), &"ci".into())
    );
    assert_eq!(upgrade(&server.url, Some(&format!("Bearer {good}"))).await, (101, String::new()));

    let mut exec = tokio::process::Command::new(tether_binary().unwrap());
    exec.args(["exec", "--url", &server.url, "--", "echo", "hi"]).env("TETHER_TOKEN", &good);
    exec.stdin(Stdio::null()).kill_on_drop(true);
    let ran = tokio::time::timeout(Duration::from_secs(30), exec.output()).await.unwrap().unwrap();
    assert_eq!((ran.status.code(), ran.stdout.as_slice()), (Some(0), &b"hi\n"[..]));

    let elsewhere =
        mint(&secret, &["--ttl", "10m", "--issuer", "control-plane", "--audience", "elsewhere"])
            .await;
    assert_eq!(
        upgrade(&server.url, Some(&format!("Bearer {elsewhere}"))).await,
        (401, "websocket jwt audience mismatch".to_owned())
    );
}

/// `--ttl 1s` is one second: once the clock has passed the token's `exp`, a server with no
/// clock skew refuses it as expired. Real time passing is the event, so the test watches the
/// clock rather than sleeping a fixed while.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_expires_when_its_ttl_has_passed() {
    let scratch = Scratch::new("token-expiry");
    let secret = scratch.file("secret", SECRET.as_bytes());
    let server = strict_server(&secret).await;
    let token = mint(&secret, &["--ttl", "1s"]).await;
    let seen = claims(&token);
    let exp = seen["exp"].as_i64().unwrap();
    assert_eq!(exp - seen["iat"].as_i64().unwrap(), 1, "{seen}");

    past(exp).await;
    assert_eq!(
        upgrade(&server.url, Some(&format!("Bearer {token}"))).await,
        (401, "expired websocket jwt".to_owned())
    );
}

/// `inspect` shows the header, the claims and the times, from the argument or stdin; it checks
/// the signature only with a secret, and a wrong secret or a malformed token is a one-line
/// failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_claims_and_checks_the_signature_only_with_a_secret() {
    let scratch = Scratch::new("token-inspect");
    let secret = scratch.file("secret", SECRET.as_bytes());
    let wrong = scratch.file("wrong", b"another shared secret, also long enough to sign\n");
    let token =
        mint(&secret, &["--ttl", "2h", "--issuer", "control-plane", "--subject", "ci"]).await;

    let unchecked = tether(&["token", "inspect", &token], None).await;
    assert_eq!(unchecked.status.code(), Some(0));
    let shown = String::from_utf8(unchecked.stdout).unwrap();
    for expected in [
        "\"alg\": \"HS256\"",
        "\"typ\": \"JWT\"",
        "\"iss\": \"control-plane\"",
        "\"sub\": \"ci\"",
        &format!("\"exp\": {}", claims(&token)["exp"]),
        "more)\n",
        "\niat: ",
        "\nsignature: not checked (no --shared-secret-file)\n",
    ] {
        assert!(shown.contains(expected), "{expected}: {shown}");
    }
    let exp_line = shown.lines().find(|line| line.starts_with("exp: ")).unwrap();
    assert!(exp_line.contains("Z (valid for ") && exp_line.ends_with(" more)"), "{exp_line}");
    assert!(!shown.contains(SECRET.trim()), "the secret is never shown");

    for stdin_args in [vec!["token", "inspect"], vec!["token", "inspect", "-"]] {
        let piped = tether(&stdin_args, Some(&format!("{token}\n"))).await;
        assert_eq!(piped.status.code(), Some(0), "{stdin_args:?}");
        assert!(String::from_utf8(piped.stdout).unwrap().contains("\"sub\": \"ci\""));
    }

    let secret_arg = secret.to_str().unwrap();
    let checked =
        tether(&["token", "inspect", "--shared-secret-file", secret_arg, &token], None).await;
    assert_eq!(checked.status.code(), Some(0));
    let shown = String::from_utf8(checked.stdout).unwrap();
    assert!(shown.ends_with("\nsignature: valid\n"), "{shown}");
    assert!(!shown.contains(SECRET.trim()), "the secret is never shown");

    let wrong_arg = wrong.to_str().unwrap();
    let refused =
        tether(&["token", "inspect", "--shared-secret-file", wrong_arg, &token], None).await;
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("tether: signature: invalid"), "{stderr}");
    assert!(!String::from_utf8(refused.stdout).unwrap().contains("signature: valid"));

    for malformed in ["a.b", "not-base64!.e30.", "e30.W10.AA"] {
        let output = tether(&["token", "inspect", malformed], None).await;
        assert_eq!(output.status.code(), Some(1), "{malformed}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{malformed}: {stderr}");
        assert!(stderr.starts_with("tether: cannot inspect the token: "), "{stderr}");
        assert!(output.stdout.is_empty(), "{malformed}");
    }
}

/// A secret the server would refuse is refused by `mint` too, in one line that says what to
/// do; a zero or malformed `--ttl` is refused before anything is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mint_refuses_a_short_secret_and_a_bad_ttl() {
    let scratch = Scratch::new("token-refusals");
    let short = scratch.file("short", b"too short\n");
    let empty = scratch.file("empty", b" \n");
    for (file, expected) in [(&short, "shorter than 32 bytes"), (&empty, "is empty")] {
        let args = ["token", "mint", "--shared-secret-file", file.to_str().unwrap(), "--ttl", "1m"];
        let output = tether(&args, None).await;
        assert_eq!(output.status.code(), Some(1), "{file:?}");
        assert!(output.stdout.is_empty());
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("tether: the shared secret ") && stderr.contains(expected));
        assert!(stderr.contains(file.to_str().unwrap()), "names the file: {stderr}");
    }

    let secret = scratch.file("secret", SECRET.as_bytes());
    for ttl in ["0", "0s", "10x", "1h30m", "-1m", ""] {
        let ttl = format!("--ttl={ttl}");
        let args = ["token", "mint", "--shared-secret-file", secret.to_str().unwrap(), &ttl];
        let output = tether(&args, None).await;
        assert_eq!(output.status.code(), Some(2), "{ttl:?}");
        assert!(output.stdout.is_empty());
        let stderr = String::from_utf8(output.stderr).unwrap();
        let first = stderr.lines().next().unwrap();
        assert!(first.starts_with("error: ") && first.contains("--ttl"), "{ttl:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mint_help_names_the_secret_file_and_the_ttl() {
    let help = tether(&["token", "mint", "--help"], None).await;
    assert_eq!(help.status.code(), Some(0));
    let help = String::from_utf8(help.stdout).unwrap();
    for flag in ["--shared-secret-file", "--ttl", "--issuer", "--audience", "--subject"] {
        assert!(help.contains(flag), "{flag}: {help}");
    }
}

/// Writes `token` into `file` whole (a new file renamed over the old, as a sidecar renews one).
fn renew(file: &Path, token: &str) {
    let staged = file.with_extension("renewing");
    std::fs::write(&staged, format!("{token}\n")).unwrap();
    std::fs::rename(staged, file).unwrap();
}

/// A `tether exec` running under a short-lived token (`--token-file`), whose connection drops
/// after the token has expired and the file holds a renewed one: the recovery reads the file
/// again and sends the renewed token, and the command finishes as if nothing happened. Once
/// the file holds only the expired token, a drop ends the run at once, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_renewed_while_a_command_runs_carries_its_recovery() {
    use tether_testkit::proxy::FaultProxy;
    use tokio::io::AsyncBufReadExt as _;

    let scratch = Scratch::new("token-renewal");
    let secret = scratch.file("secret", SECRET.as_bytes());
    let server = strict_server(&secret).await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let token_file = scratch.path("token");
    let go_on = scratch.path("go-on");
    let script = format!(
        "echo ready; while [ ! -e {go} ]; do sleep 0.05; done; echo done",
        go = go_on.display()
    );

    for renewed in [true, false] {
        let _ = std::fs::remove_file(&go_on);
        let short = mint(&secret, &["--ttl", "1s"]).await;
        renew(&token_file, &short);
        let mut command = tokio::process::Command::new(tether_binary().unwrap());
        command
            .args(["exec", "--url", &proxy.url, "--token-file", token_file.to_str().unwrap()])
            .args(["--", "sh", "-c", &script])
            .env_remove("TETHER_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("ready"));
        if renewed {
            renew(&token_file, &mint(&secret, &["--ttl", "10m"]).await);
        }
        past(claims(&short)["exp"].as_i64().unwrap()).await;
        proxy.cut();
        std::fs::write(&go_on, "").unwrap();
        let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let mut rest = String::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            rest.push_str(&line);
            rest.push('\n');
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        if renewed {
            assert_eq!((output.status.code(), rest.as_str()), (Some(0), "done\n"), "{stderr}");
        } else {
            assert_eq!(output.status.code(), Some(255), "{stderr}");
            assert!(stderr.contains("expired websocket jwt"), "{stderr}");
            assert!(stderr.contains("renew it and reattach"), "{stderr}");
            assert!(stderr.contains("--token-file"), "the reattach command is whole: {stderr}");
        }
    }
}

/// What `--detach` prints to follow the command runs as pasted: it names the executor as the
/// person did and the token file they gave, so it reaches a server that requires a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_follow_up_command_runs_as_pasted() {
    let scratch = Scratch::new("token-follow-up");
    let secret = scratch.file("secret", SECRET.as_bytes());
    let args =
        ["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", secret.to_str().unwrap()];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    let token_file = scratch.path("a token file");
    renew(&token_file, &mint(&secret, &["--ttl", "10m"]).await);
    let go_on = scratch.path("go-on");
    let script = format!(
        "echo started; while [ ! -e '{go}' ]; do sleep 0.05; done; echo finished",
        go = go_on.display()
    );
    let detached = tether(
        &["exec", "--url", &server.url, "--token-file", token_file.to_str().unwrap(), "--detach"]
            .into_iter()
            .chain(["--", "sh", "-c", &script])
            .collect::<Vec<_>>(),
        None,
    )
    .await;
    let stderr = String::from_utf8(detached.stderr).unwrap();
    assert_eq!(detached.status.code(), Some(0), "{stderr}");
    let follow = stderr.split("Follow it with: ").nth(1).unwrap().trim_end().to_owned();
    assert!(follow.starts_with("tether exec --url "), "{follow}");
    std::fs::write(&go_on, "").unwrap();
    let binary_dir = tether_binary().unwrap().parent().unwrap().to_owned();
    let path = format!("{}:{}", binary_dir.display(), std::env::var("PATH").unwrap_or_default());
    let pasted = tokio::process::Command::new("sh")
        .args(["-c", &follow])
        .env("PATH", path)
        .env_remove("TETHER_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let pasted = tokio::time::timeout(Duration::from_secs(30), pasted).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&pasted.stdout);
    assert_eq!(
        pasted.status.code(),
        Some(0),
        "{follow}: {}",
        String::from_utf8_lossy(&pasted.stderr)
    );
    assert!(stdout.ends_with("finished\n"), "{stdout}");
}
