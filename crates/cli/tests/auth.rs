//! Who may connect: the reference's two `--ws-auth` modes, refused and accepted with the same
//! statuses and words by Tether and by the reference; the client library and `tether exec`
//! presenting a token; and Tether's refusal to expose an unauthenticated port.

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tether_client::error::ConnectErrorKind;
use tether_client::{ClientError, ClientOptions, ExecServerClient};
use tether_testkit::server::tether_binary;
use tether_testkit::{FaultProxy, ServerProcess, Target, against_both, shell_params};

mod common;
use common::upgrade;

against_both!(
    capability_tokens_from_a_file_or_a_digest,
    signed_bearer_tokens_are_checked_claim_by_claim,
    the_client_presents_its_token_on_every_connection,
);

const SECRET: &str = "a shared secret of at least 32 bytes, for tests";

fn write_secret(dir: &std::path::Path, name: &str, contents: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path.display().to_string()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tether-auth-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn capability_tokens_from_a_file_or_a_digest(target: Target) {
    let dir = scratch(&format!("cap-{target:?}"));
    let file = write_secret(&dir, "token", "cap-token-123\n");
    let server = ServerProcess::start_with(
        target,
        &["--ws-auth", "capability-token", "--ws-token-file", &file],
    )
    .await
    .unwrap();
    let url = server.url.as_str();
    assert_eq!(upgrade(url, None).await, (401, "missing websocket bearer token".into()));
    assert_eq!(
        upgrade(url, Some("Bearer nope")).await,
        (401, "invalid websocket bearer token".into())
    );
    assert_eq!(
        upgrade(url, Some("Basic Y2FwLXRva2VuLTEyMw==")).await,
        (401, "invalid authorization header".into())
    );
    assert_eq!(
        upgrade(&format!("{url}/?token=cap-token-123"), None).await,
        (401, "missing websocket bearer token".into()),
        "a token in the query is not a credential"
    );
    assert_eq!(upgrade(url, Some("bearer   cap-token-123")).await.0, 101);

    let digest = hex::encode(Sha256::digest(b"cap-token-123"));
    let server = ServerProcess::start_with(
        target,
        &["--ws-auth", "capability-token", "--ws-token-sha256", &digest],
    )
    .await
    .unwrap();
    assert_eq!(upgrade(&server.url, Some("Bearer cap-token-123")).await.0, 101);
    assert_eq!(upgrade(&server.url, Some("Bearer cap-token-1234")).await.0, 401);
    std::fs::remove_dir_all(dir).unwrap();
}

fn mint(header: Value, claims: Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).unwrap());
    let claims = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap());
    let signed = format!("{header}.{claims}");
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(signed.as_bytes());
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()))
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

async fn signed_bearer_tokens_are_checked_claim_by_claim(target: Target) {
    let dir = scratch(&format!("jwt-{target:?}"));
    let secret = write_secret(&dir, "secret", &format!("{SECRET}\n"));
    let args = [
        "--ws-auth",
        "signed-bearer-token",
        "--ws-shared-secret-file",
        &secret,
        "--ws-issuer",
        "control-plane",
        "--ws-audience",
        "executor",
    ];
    let server = ServerProcess::start_with(target, &args).await.unwrap();
    let hs256 = || json!({"alg": "HS256", "typ": "JWT"});
    let good = || json!({"exp": now() + 300, "iss": "control-plane", "aud": ["x", "executor"]});
    let with = |change: Value| {
        let mut claims = good();
        for (key, value) in change.as_object().unwrap() {
            claims[key] = value.clone();
        }
        claims
    };
    let cases = [
        (mint(hs256(), good()), 101, ""),
        (mint(hs256(), with(json!({"exp": now() - 600}))), 401, "expired websocket jwt"),
        (mint(hs256(), with(json!({"nbf": now() + 600}))), 401, "websocket jwt is not valid yet"),
        (mint(hs256(), with(json!({"iss": "someone"}))), 401, "websocket jwt issuer mismatch"),
        (mint(hs256(), with(json!({"aud": "elsewhere"}))), 401, "websocket jwt audience mismatch"),
        (mint(hs256(), with(json!({"exp": "soon"}))), 401, "invalid websocket jwt"),
        (mint(json!({"alg": "none"}), good()), 401, "invalid websocket jwt"),
        (mint(json!({"alg": "HS512"}), good()), 401, "invalid websocket jwt"),
        (SECRET.replace(' ', "-"), 401, "invalid websocket jwt"),
    ];
    for (token, status, body) in cases {
        let seen = upgrade(&server.url, Some(&format!("Bearer {token}"))).await;
        assert_eq!(seen, (status, body.to_owned()), "{target:?}: {token}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// `--ws-max-token-lifetime-seconds` (Tether's): a token valid for longer is refused with a
/// reason that says what to do; shorter ones pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_bearer_tokens_may_be_held_to_a_maximum_lifetime() {
    let dir = scratch("jwt-lifetime");
    let secret = write_secret(&dir, "secret", SECRET);
    let args = [
        "--ws-auth",
        "signed-bearer-token",
        "--ws-shared-secret-file",
        &secret,
        "--ws-max-token-lifetime-seconds",
        "600",
    ];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    let hs256 = json!({"alg": "HS256"});
    let short = mint(hs256.clone(), json!({"exp": now() + 300}));
    assert_eq!(upgrade(&server.url, Some(&format!("Bearer {short}"))).await.0, 101);
    let refusal = "websocket jwt lives longer than this server accepts; mint a shorter-lived token";
    for claims in [json!({"exp": now() + 86_400}), json!({"exp": now() + 60, "iat": now() - 3600})]
    {
        let token = mint(hs256.clone(), claims.clone());
        let seen = upgrade(&server.url, Some(&format!("Bearer {token}"))).await;
        assert_eq!(seen, (401, refusal.to_owned()), "{claims}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

async fn the_client_presents_its_token_on_every_connection(target: Target) {
    let dir = scratch(&format!("client-{target:?}"));
    let file = write_secret(&dir, "token", "client-token");
    let server = ServerProcess::start_with(
        target,
        &["--ws-auth", "capability-token", "--ws-token-file", &file],
    )
    .await
    .unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let refused = ExecServerClient::connect(&proxy.url, ClientOptions::default()).await;
    match refused.err().unwrap() {
        ClientError::Connect(error) => {
            assert_eq!(error.kind, ConnectErrorKind::Refused { status: 401 });
            let message = error.to_string();
            assert!(message.contains("missing websocket bearer token"), "{message}")
        }
        other => panic!("{other}"),
    }
    let options = ClientOptions { bearer_token: Some("client-token".into()), ..Default::default() };
    let client = ExecServerClient::connect(&proxy.url, options).await.unwrap();
    let mut process =
        client.start(shell_params("p", "sleep 0.5; echo after-the-cut")).await.unwrap();
    proxy.cut();
    let mut output = Vec::new();
    while let Some(update) = process.next_update().await {
        if let tether_client::ProcessUpdate::Event(tether_engine::ProcessEvent::Output {
            chunk,
            ..
        }) = update
        {
            output.extend_from_slice(&chunk);
        }
    }
    assert_eq!(output, b"after-the-cut\n", "the reconnect presented the token again");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Runs `tether ARGS…` to its end.
async fn tether(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut command = tokio::process::Command::new(tether_binary().unwrap());
    command.args(args).env_remove("TETHER_TOKEN").envs(env.iter().copied());
    command.stdin(Stdio::null()).kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(30), command.output()).await.unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tether_exec_takes_its_token_from_the_environment() {
    let dir = scratch("exec");
    let file = write_secret(&dir, "token", "exec-token");
    let server = ServerProcess::start_with(
        Target::Tether,
        &["--ws-auth", "capability-token", "--ws-token-file", &file],
    )
    .await
    .unwrap();
    let ok = tether(
        &["exec", "--url", &server.url, "--", "echo", "hi"],
        &[("TETHER_TOKEN", "exec-token")],
    )
    .await;
    assert_eq!((ok.status.code(), ok.stdout.as_slice()), (Some(0), &b"hi\n"[..]));
    let from_file =
        tether(&["exec", "--url", &server.url, "--token-file", &file, "--", "true"], &[]).await;
    assert_eq!(from_file.status.code(), Some(0));
    let refused = tether(&["exec", "--url", &server.url, "--", "true"], &[]).await;
    assert_eq!(refused.status.code(), Some(255));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("HTTP 401") && stderr.contains("missing websocket bearer token"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let missing = dir.join("missing").display().to_string();
    let unreadable =
        tether(&["exec", "--url", &server.url, "--token-file", &missing, "--", "true"], &[]).await;
    assert_eq!(unreadable.status.code(), Some(255));
    let stderr = String::from_utf8_lossy(&unreadable.stderr);
    assert!(stderr.starts_with(&format!("tether exec: cannot read the token file {missing}: ")));
    assert!(
        stderr
            .trim_end()
            .ends_with("; give a file this user can read, or set TETHER_TOKEN instead"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misconfigured_auth_is_refused_at_startup_with_the_references_words() {
    let dir = scratch("startup");
    let short = write_secret(&dir, "short", "too short\n");
    let empty = write_secret(&dir, "empty", "\n");
    for (args, expected) in [
        (vec!["--ws-auth", "capability-token"], "--ws-token-file or --ws-token-sha256 is required"),
        (vec!["--ws-auth", "signed-bearer-token"], "`--ws-shared-secret-file` is required"),
        (vec!["--ws-issuer", "x"], "websocket auth flags require"),
        (
            vec!["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", &short],
            "must be at least 32 bytes",
        ),
        (
            vec!["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", &empty],
            "must not be empty",
        ),
        (
            vec!["--ws-auth", "capability-token", "--ws-token-sha256", "abc", "--ws-audience", "a"],
            "require `--ws-auth signed-bearer-token`",
        ),
    ] {
        let mut full = vec!["serve", "--listen", "ws://127.0.0.1:0"];
        full.extend(args);
        let output = tether(&full, &[]).await;
        assert_ne!(output.status.code(), Some(0));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{full:?}: {stderr}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Tether only (the reference listens anywhere without auth): an unauthenticated port beyond
/// loopback is refused before anything is bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_port_beyond_loopback_is_refused() {
    let output = tether(&["serve", "--listen", "ws://0.0.0.0:0"], &[]).await;
    assert_ne!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("without authentication") && stderr.contains("--ws-auth"), "{stderr}");
    assert!(output.stdout.is_empty(), "nothing was bound, so no URL was printed");
}

/// A random binary secret (`head -c 32 /dev/urandom`), newline bytes and all, signs tokens
/// byte for byte (Tether's; the reference refuses a secret file that is not UTF-8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_secret_signs_tokens_byte_for_byte() {
    let dir = scratch("jwt-binary");
    // Not UTF-8, with whitespace bytes at both ends that text trimming would strip.
    let mut secret: Vec<u8> = vec![b'\n', 0xff, 0xfe];
    secret.extend((0u8..40).map(|i| i.wrapping_mul(37) ^ 0x80));
    secret.push(b' ');
    let path = dir.join("secret.bin");
    std::fs::write(&path, &secret).unwrap();
    let args =
        ["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", path.to_str().unwrap()];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    let sign = |key: &[u8]| {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let claims =
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&json!({"exp": now() + 300})).unwrap());
        let signed = format!("{header}.{claims}");
        let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
        mac.update(signed.as_bytes());
        format!("Bearer {signed}.{}", URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()))
    };
    assert_eq!(upgrade(&server.url, Some(&sign(&secret))).await.0, 101);
    let trimmed = &secret[1..secret.len() - 1];
    assert_eq!(
        upgrade(&server.url, Some(&sign(trimmed))).await,
        (401, "invalid websocket jwt".into())
    );
    std::fs::remove_dir_all(dir).unwrap();
}
