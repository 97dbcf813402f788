//! The server's secrets stay in the server: its environment does not reach commands under a
//! default policy, its `/proc` entries cannot be read by them, and no descriptor it was started
//! with reaches them.

use std::process::Stdio;

use serde_json::{Value, json};
use tether_testkit::client::{b64decode, output_of};
use tether_testkit::{RpcClient, ServerProcess, Target, against_both};
use tokio::io::{AsyncBufReadExt, BufReader};

/// A server running as an unprivileged user (as on most executors) with a secret in its
/// environment: a command of the same user can read its own `/proc` entries but not the
/// server's, and its default-policy environment lacks the secret. Run as root, the test starts
/// the server as `nobody` (a command of root's could read any process's entries); run as a
/// user, it starts it as that user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_cannot_read_the_servers_environment() {
    let tether = tether_testkit::server::tether_binary().unwrap();
    let mut server = match rustix::process::geteuid().is_root() {
        true => {
            let mut unprivileged = tokio::process::Command::new("setpriv");
            unprivileged.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(&tether);
            unprivileged
        }
        false => tokio::process::Command::new(&tether),
    };
    let mut server = server
        .args(["serve", "--listen", "ws://127.0.0.1:0"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/tmp")
        .env("TETHER_CANARY_SECRET", "canary-4f7a")
        .env("PGPASSWORD", "canary-pg")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut url = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut url).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(url.trim()).await.unwrap();
    let script = "cat /proc/self/environ >/dev/null && echo own-readable; \
                  cat /proc/$PPID/environ 2>&1 | tr '\\0' '\\n'; env";
    let start = json!({
        "processId": "p", "argv": ["/bin/sh", "-c", script], "cwd": "file:///", "env": {},
        "envPolicy": {"inherit": "all", "ignoreDefaultExcludes": false, "exclude": [], "set": {},
            "includeOnly": []},
        "tty": false,
    });
    client.ok("process/start", start).await.unwrap();
    let events = client.process_events("p").await.unwrap();
    let output: String = events
        .iter()
        .filter(|e| e["method"] == "process/output")
        .map(|e| String::from_utf8(b64decode(&e["params"]["chunk"])).unwrap())
        .collect();
    server.kill().await.unwrap();
    assert!(output.starts_with("own-readable\n"), "the command reads its own entries: {output}");
    assert!(output.contains("Permission denied"), "{output}");
    assert!(!output.contains("canary"), "a secret reached the command: {output}");
}

/// Credentials that no name rule of the reference's catches — a password in a proxy or index
/// URL, a database URL under any name, a DSN, a webhook, a CI job's JWT — stay on the executor
/// under a default policy, while look-alikes (an `@` in a URL's path, a proxy without
/// credentials) pass. Tether only: the reference withholds only `*KEY*`, `*SECRET*` and
/// `*TOKEN*`, so its commands see all of these.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_urls_and_conventional_names_do_not_reach_commands() {
    let secrets = [
        ("HTTPS_PROXY", "http://user:canary-proxy@proxy.internal:3128"),
        ("PIP_INDEX_URL", "https://build:canary-pip@pypi.internal/simple"),
        ("REDIS_URL", "redis://:canary-redis@cache:6379/0"),
        ("MONGODB_URI", "mongodb+srv://app:canary-mongo@cluster0.example.net/db"),
        ("SENTRY_DSN", "https://canary-sentry@o1.ingest.sentry.io/42"),
        ("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/canary-slack"),
        ("CI_JOB_JWT", "eyJhbGciOiJSUzI1NiJ9.canary-jwt.sig"),
    ];
    let harmless =
        [("DOCS_URL", "http://example.com/a@b"), ("HTTP_PROXY", "http://proxy.internal:3128")];
    let env: Vec<(&str, &str)> = secrets.iter().chain(&harmless).copied().collect();
    let server = ServerProcess::start_with_env(Target::Tether, &[], &env).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let start = json!({
        "processId": "env", "argv": ["/usr/bin/env"], "cwd": "file:///tmp", "env": {},
        "envPolicy": {"inherit": "all", "ignoreDefaultExcludes": false, "exclude": [], "set": {},
            "includeOnly": []},
        "tty": false,
    });
    client.ok("process/start", start).await.unwrap();
    let events = client.process_events("env").await.unwrap();
    let output = String::from_utf8(output_of(&events, "stdout")).unwrap();
    let seen: Vec<&str> = output.lines().collect();
    for (name, value) in harmless {
        assert!(seen.contains(&format!("{name}={value}").as_str()), "{name} passes: {output}");
    }
    for (name, _) in secrets {
        assert!(!seen.iter().any(|line| line.starts_with(&format!("{name}="))), "{name}: {output}");
    }
    assert!(!output.contains("canary"), "a credential reached the command: {output}");
}

against_both!(descriptors_the_server_inherited_reach_no_command);

/// A descriptor the server inherited from whatever started it (a launcher's secrets file, here)
/// reaches none of its commands, whatever the mode: pipes, a PTY, the network filter alone,
/// bubblewrap — as under the reference.
async fn descriptors_the_server_inherited_reach_no_command(target: Target) {
    let secret = std::env::temp_dir()
        .join(format!("tether-inherited-secret-{}-{target:?}", std::process::id()));
    std::fs::write(&secret, "canary-fd").unwrap();
    // bash opens the file as descriptor 47, without close-on-exec, and runs the server.
    let wrapper = ["bash", "-c", "exec \"$@\" 47<\"$0\"", secret.to_str().unwrap()];
    let server = ServerProcess::start_wrapped(target, &wrapper, &[], &[]).await.unwrap();
    std::fs::remove_file(&secret).unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let read_only = json!({
        "permissions": {"type": "managed", "network": "restricted", "file_system":
            {"type": "restricted", "entries":
                [{"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}]}},
        "cwd": "file:///tmp", "workspaceRoots": ["file:///tmp"], "windowsSandboxLevel": "disabled",
        "windowsSandboxProxySettingsMode": "reconcile", "useLegacyLandlock": false,
    });
    let network_only = json!({"permissions": {"type": "external", "network": "restricted"},
        "windowsSandboxLevel": "disabled"});
    let modes = [
        ("pipes", false, Value::Null),
        ("pty", true, Value::Null),
        ("network-filter", false, network_only),
        ("bubblewrap", false, read_only),
    ];
    let mut seen = Vec::new();
    for (name, tty, sandbox) in modes {
        let start = json!({
            "processId": name,
            "argv": ["/bin/sh", "-c", "[ -e /proc/$$/fd/47 ] && echo inherited || echo closed"],
            "cwd": "file:///tmp", "env": {"PATH": "/usr/bin:/bin"}, "tty": tty, "sandbox": sandbox,
        });
        client.ok("process/start", start).await.unwrap();
        let events = client.process_events(name).await.unwrap();
        let output = output_of(&events, if tty { "pty" } else { "stdout" });
        seen.push((name, String::from_utf8_lossy(&output).trim().to_owned()));
    }
    let closed: Vec<(&str, String)> = ["pipes", "pty", "network-filter", "bubblewrap"]
        .into_iter()
        .map(|name| (name, "closed".to_owned()))
        .collect();
    assert_eq!(seen, closed);
}
