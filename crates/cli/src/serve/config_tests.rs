//! The flags → configuration step, run on parsed command lines without a process: what each
//! flag sets, and which flag each refusal names.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use tether_engine::sandbox::PidNamespace;
use tether_server::ListenAddress;

use super::{Descriptors, FlagError, Plan, TlsSource, plan};
use crate::serve::ServeArgs;
use crate::serve::codex_settings::CodexFlagError;
use crate::serve::ws_auth::{WsAuthFlagError, WsAuthSource};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// `tether serve WORDS…`, parsed as clap parses it, and its listen address (resolved: the
/// tests name only literal addresses, so no name is looked up).
fn parsed(words: &[&str]) -> (ServeArgs, ListenAddress) {
    let cli = Cli::try_parse_from(std::iter::once("serve").chain(words.iter().copied()))
        .unwrap_or_else(|error| panic!("{words:?}: {error}"));
    let listen = cli.serve.listen.parse().unwrap();
    (cli.serve, listen)
}

fn planned(words: &[&str]) -> Result<Plan, FlagError> {
    let (args, listen) = parsed(words);
    plan(&args, &listen)
}

#[test]
fn each_flag_reaches_its_setting() {
    let plan = planned(&[
        "--listen",
        "ws://127.0.0.1:0",
        "--session-ttl-secs",
        "7",
        "--max-session-ttl-secs",
        "70",
        "--ping-interval-secs",
        "3",
        "--pong-timeout-secs",
        "9",
        "--concurrent-requests",
        "5",
        "--retain-output-bytes",
        "1000",
        "--max-processes-per-session",
        "11",
        "--closed-output-budget-bytes",
        "2000",
        "--closed-process-retention-secs",
        "13",
        "--max-sessions",
        "17",
        "--max-sessions-per-client",
        "4",
        "--request-head-timeout-secs",
        "6",
        "--file-read-budget-bytes",
        "4096",
        "--shutdown-grace-secs",
        "3600",
        "--metrics-listen",
        "127.0.0.1:9100",
        "--insecure-no-auth",
        "--linux-sandbox-transparent-tcp",
        "--max-connections",
        "99",
    ])
    .unwrap();
    let config = &plan.config;
    assert_eq!(config.detached_session_ttl, Duration::from_secs(7));
    assert_eq!(config.max_detached_session_ttl, Duration::from_secs(70));
    assert_eq!(config.ping_interval, Duration::from_secs(3));
    assert_eq!(config.pong_timeout, Duration::from_secs(9));
    assert_eq!(config.concurrent_requests, 5);
    assert_eq!(config.processes.retained_output_bytes, 1000);
    assert_eq!(config.processes.max_processes, 11);
    assert_eq!(config.processes.closed_output_budget, 2000);
    assert_eq!(config.processes.closed_process_retention, Some(Duration::from_secs(13)));
    assert!(config.processes.transparent_tcp);
    assert!(config.managed_network.transparent_tcp);
    assert_eq!(config.max_sessions, 17);
    assert_eq!(config.max_sessions_per_client, 4);
    assert_eq!(config.request_head_deadline, Duration::from_secs(6));
    assert_eq!(config.whole_read_budget_bytes, 4096);
    assert_eq!(config.shutdown_grace, Duration::from_secs(3600));
    assert_eq!(config.metrics_listen, Some("127.0.0.1:9100".parse().unwrap()));
    assert!(config.insecure_no_auth);
    // What needs the system is named, not yet read.
    assert_eq!(plan.descriptors, Descriptors::Fit { requested: Some(99) });
    assert_eq!(plan.tls, TlsSource::None);
    assert!(plan.spill.is_none());
    assert!(!plan.ws_auth.is_enabled());
}

#[test]
fn what_needs_the_system_is_named_for_after() {
    let plan = planned(&[
        "--listen",
        "wss://127.0.0.1:0",
        "--tls-cert",
        "/c.pem",
        "--tls-key",
        "/k.pem",
        "--ws-auth",
        "capability-token",
        "--ws-token-file",
        "/token",
        "--spill-output-dir",
        "/spill",
        "--bwrap",
        "/bin/bwrap",
        "--linux-sandbox-pid-namespace",
        "inherit",
        "--exit-on-stdin-close",
    ])
    .unwrap();
    let files = TlsSource::Files { cert: "/c.pem".into(), key: "/k.pem".into() };
    assert_eq!(plan.tls, files);
    assert!(
        matches!(&plan.ws_auth, WsAuthSource::TokenFile(file) if file == &PathBuf::from("/token"))
    );
    assert_eq!(plan.spill.as_ref().map(|spill| spill.dir.clone()), Some("/spill".into()));
    assert_eq!(plan.sandbox.bwrap, Some("/bin/bwrap".into()));
    assert_eq!(plan.sandbox.pid_namespace, PidNamespace::Inherit);
    // The credentials, the key and the spilled output are hidden from every sandbox.
    let private: Vec<PathBuf> = ["/token", "/k.pem", "/spill"].map(PathBuf::from).to_vec();
    assert_eq!(plan.sandbox.private, private);
    assert!(plan.watch_stdin);
}

#[test]
fn the_self_signed_flags_name_their_certificate() {
    let kept = planned(&["--listen", "wss://127.0.0.1:0", "--tls-self-signed-dir", "/d"]).unwrap();
    assert_eq!(kept.tls, TlsSource::Kept("/d".into()));
    let made = planned(&["--listen", "wss://127.0.0.1:0", "--tls-self-signed"]).unwrap();
    assert_eq!(made.tls, TlsSource::SelfSigned);
}

#[test]
fn stdio_holds_one_connection_and_watches_no_input() {
    let plan = planned(&["--listen", "stdio", "--exit-on-stdin-close"]).unwrap();
    assert_eq!(plan.descriptors, Descriptors::Stdio);
    assert!(!plan.watch_stdin, "on stdio the input is the connection");
}

#[test]
fn a_drain_longer_than_an_hour_is_refused() {
    let refused = planned(&["--shutdown-grace-secs", "3601"]).err().unwrap();
    assert!(matches!(refused, FlagError::ShutdownGraceTooLong { asked: 3601, max: 3600 }));
    assert!(refused.to_string().starts_with("--shutdown-grace-secs 3601 "));
}

#[test]
fn tls_needs_a_websocket_and_wss_a_certificate() {
    let refused = planned(&["--listen", "stdio", "--tls-self-signed"]).err().unwrap();
    assert!(matches!(refused, FlagError::TlsOnStdio));
    let refused = planned(&["--listen", "wss://127.0.0.1:0"]).err().unwrap();
    assert!(
        matches!(&refused, FlagError::NoCertificate { listen } if listen == "wss://127.0.0.1:0")
    );
}

#[test]
fn auth_flags_are_checked_before_the_listener_as_the_reference_checks_them() {
    let refused = planned(&[
        "--listen",
        "stdio",
        "--ws-auth",
        "capability-token",
        "--ws-token-sha256",
        "abc",
    ])
    .err()
    .unwrap();
    assert!(matches!(refused, FlagError::WsAuth(WsAuthFlagError::TokenSha256(_))));
    let digest = "0".repeat(64);
    let refused = planned(&[
        "--listen",
        "stdio",
        "--ws-auth",
        "capability-token",
        "--ws-token-sha256",
        &digest,
    ])
    .err()
    .unwrap();
    assert!(matches!(refused, FlagError::WsAuthOnStdio));
    let refused = planned(&["--ws-issuer", "me"]).err().unwrap();
    assert!(matches!(refused, FlagError::WsAuth(WsAuthFlagError::NoMode)));
    let refused = planned(&["--ws-auth", "signed-bearer-token"]).err().unwrap();
    assert!(matches!(refused, FlagError::WsAuth(WsAuthFlagError::NoSecretFile)));
}

#[test]
fn codex_settings_are_read_without_a_file() {
    let refused = planned(&["-c", "no_equals"]).err().unwrap();
    assert!(matches!(refused, FlagError::CodexSettings(CodexFlagError::Malformed(_))));
    let refused = planned(&["--enable", "nosuch", "--strict-config"]).err().unwrap();
    assert!(matches!(refused, FlagError::CodexSettings(CodexFlagError::UnknownFeature(_))));
    let refused = planned(&["-c", "unknown_key=1", "--strict-config"]).err().unwrap();
    assert!(matches!(refused, FlagError::CodexSettings(CodexFlagError::Unknown(_))));
    assert!(planned(&["-c", "unknown_key=1"]).is_ok(), "without --strict-config, only a warning");
}
