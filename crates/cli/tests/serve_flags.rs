//! `tether serve` takes `codex exec-server`'s command line: every flag the installed reference
//! lists in its `--help` is taken — honoured, kept, or refused in one line — and the settings
//! both read are accepted and refused alike. A flag a later reference adds fails
//! [`every_flag_of_the_reference_is_taken`] until Tether decides what to do with it.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::json;
use tether_engine::codex_config::known;
use tether_testkit::RpcClient;
use tether_testkit::process_stats::ends_within;
use tether_testkit::scratch::Scratch;
use tether_testkit::server::{reference_binary, tether_binary};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

mod common;
use common::{exec, text};

/// How long a server has to start and print its URL, or to end once told to.
const WITHIN: Duration = Duration::from_secs(30);

/// A capability token's SHA-256 (of `token`).
const TOKEN_SHA256: &str = "3c469e9d6c5875d37a43f353d4f88e61fcf812c66eee3457465a40b0da4153e0";

/// The secret signed bearer tokens are signed with in these tests: 32 bytes at least.
const SECRET: &str = "a shared secret of at least 32 bytes, for tests";

/// What `tether serve` does with one of the reference's flags.
enum Expected {
    /// It serves: the URL is printed.
    Serves(Vec<String>),
    /// It serves stdio (nothing printed) until its input ends, then exits 0.
    ServesStdio(Vec<String>),
    /// It refuses at once, before serving: exit 2, one line naming `what`.
    Refused(Vec<String>, &'static str),
}

/// The line a registration is refused with.
fn refusal(what: &str) -> String {
    format!(
        "tether: {what} registers an exec-server with OpenAI's environment registry, which Tether \
         does not do: it serves connections directly; start it with `tether serve --listen \
         ws://HOST:PORT` and point Codex at it with CODEX_EXEC_SERVER_URL=ws://HOST:PORT"
    )
}

fn args(words: &[&str]) -> Vec<String> {
    words.iter().map(|word| word.to_string()).collect()
}

/// Each flag of `codex exec-server` 0.171 (and of its `forward`), and what Tether does with it.
fn expectations(files: &Path) -> Vec<(&'static str, Expected)> {
    use Expected::*;
    let token = files.join("token").display().to_string();
    let secret = files.join("secret").display().to_string();
    let signed = |more: &[&str]| {
        let mut words = vec!["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file"];
        words.push(&secret);
        words.extend(more);
        args(&words)
    };
    vec![
        ("-c", Serves(args(&["-c", "model=\"o3\""]))),
        ("--config", Serves(args(&["--config", "shell_environment_policy.inherit=all"]))),
        ("--enable", Serves(args(&["--enable", "shell_snapshot"]))),
        ("--disable", Serves(args(&["--disable", "shell_snapshot"]))),
        ("--strict-config", Serves(args(&["--strict-config", "-c", "model=\"o3\""]))),
        (
            "--linux-sandbox-pid-namespace",
            Serves(args(&["--linux-sandbox-pid-namespace", "inherit"])),
        ),
        ("--linux-sandbox-transparent-tcp", Serves(args(&["--linux-sandbox-transparent-tcp"]))),
        ("--tcp-upstream-proxy", Serves(args(&["--tcp-upstream-proxy", "proxy.internal:3128"]))),
        ("--proxy-private-ips-via-upstream", Serves(args(&["--proxy-private-ips-via-upstream"]))),
        ("--concurrent-requests", Serves(args(&["--concurrent-requests", "1"]))),
        ("--listen", ServesStdio(args(&["--listen", "stdio://"]))),
        ("--ws-auth", Serves(args(&["--ws-auth", "capability-token", "--ws-token-file", &token]))),
        (
            "--ws-token-file",
            Serves(args(&["--ws-auth", "capability-token", "--ws-token-file", &token])),
        ),
        (
            "--ws-token-sha256",
            Serves(args(&["--ws-auth", "capability-token", "--ws-token-sha256", TOKEN_SHA256])),
        ),
        ("--ws-shared-secret-file", Serves(signed(&[]))),
        ("--ws-issuer", Serves(signed(&["--ws-issuer", "control-plane"]))),
        ("--ws-audience", Serves(signed(&["--ws-audience", "executor"]))),
        ("--ws-max-clock-skew-seconds", Serves(signed(&["--ws-max-clock-skew-seconds", "5"]))),
        ("--exit-on-stdin-close", Serves(args(&["--exit-on-stdin-close"]))),
        ("--environment-id", Serves(args(&["--environment-id", "env-1"]))),
        ("--name", Serves(args(&["--name", "build box"]))),
        (
            "--remote",
            Refused(args(&["--remote", "https://x.invalid", "--environment-id", "e"]), "--remote"),
        ),
        (
            "--remote-transport",
            Refused(args(&["--remote-transport", "direct"]), "--remote-transport"),
        ),
        (
            "--use-agent-identity-auth",
            Refused(args(&["--use-agent-identity-auth"]), "--use-agent-identity-auth"),
        ),
        (
            "--registration-bearer-stdin",
            Refused(args(&["--registration-bearer-stdin"]), "--registration-bearer-stdin"),
        ),
        (
            "--executor-credential-stdin",
            Refused(args(&["--executor-credential-stdin"]), "--executor-credential-stdin"),
        ),
        (
            "--chatgpt-token-stdin",
            Refused(args(&["--chatgpt-token-stdin"]), "--chatgpt-token-stdin"),
        ),
        (
            "--chatgpt-account-id",
            Refused(args(&["--chatgpt-account-id", "a"]), "--chatgpt-account-id"),
        ),
        ("--aws-sigv4", Refused(args(&["--aws-sigv4"]), "--aws-sigv4")),
        ("--aws-profile", Refused(args(&["--aws-profile", "p"]), "--aws-profile")),
        ("--aws-region", Refused(args(&["--aws-region", "eu-west-1"]), "--aws-region")),
        ("--aws-service", Refused(args(&["--aws-service", "execute-api"]), "--aws-service")),
        (
            "--connect",
            Refused(
                args(&[
                    "forward",
                    "--connect",
                    "ws://127.0.0.1:1",
                    "--remote",
                    "https://x.invalid",
                ]),
                "`serve forward`",
            ),
        ),
    ]
}

/// The long flags (and `-c`) a `--help` text lists.
fn flags_in(help: &str) -> Vec<String> {
    let mut flags: Vec<String> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|word| word.starts_with("--") && word.len() > 2 && *word != "--help")
        .map(str::to_owned)
        .collect();
    if help.contains("  -c, --config") {
        flags.push("-c".into());
    }
    flags.sort();
    flags.dedup();
    flags
}

async fn output(program: &Path, words: &[String], env: &[(&str, &str)]) -> Output {
    Command::new(program)
        .args(words)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap()
}

/// `tether serve` with `words` (and a listener of its own unless they name one), started in a
/// `CODEX_HOME` of its own; stdin piped, stdout read by the caller.
fn tether_serve(words: &[String], home: &Path) -> Command {
    let mut command = Command::new(tether_binary().unwrap());
    command.arg("serve");
    if !words.iter().any(|word| word == "--listen") {
        command.args(["--listen", "ws://127.0.0.1:0"]);
    }
    command
        .args(words)
        .env("CODEX_HOME", home)
        .env_remove("CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// The first line a server prints (its URL), or `None` if it exits first.
async fn first_line(server: &mut Child) -> Option<String> {
    let stdout = server.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(WITHIN, lines.next_line()).await;
    line.expect("the server prints its URL or exits").unwrap()
}

/// Stops a server with SIGTERM and waits for it.
async fn stop(mut server: Child) {
    if let Some(pid) = server.id().and_then(|pid| rustix::process::Pid::from_raw(pid as i32)) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let _ = tokio::time::timeout(WITHIN, server.wait()).await;
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The reference's `--help` (its own and `forward`'s) names no flag that `tether serve` does
/// not take: each is listed by `tether serve --help` and, run, does what Tether decided —
/// the server starts, or the command line is refused in one line with exit status 2 and
/// nothing started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flag_of_the_reference_is_taken() {
    let scratch = Scratch::new("serve-flags");
    let files = scratch.path("");
    std::fs::write(files.join("token"), "token\n").unwrap();
    std::fs::write(files.join("secret"), SECRET).unwrap();
    let home = scratch.path("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let reference = reference_binary().unwrap();
    let mut flags = Vec::new();
    for command in [&["exec-server", "--help"][..], &["exec-server", "forward", "--help"]] {
        let env = [("CODEX_HOME", home.to_str().unwrap())];
        let help = output(&reference, &args(command), &env).await;
        assert_eq!(help.status.code(), Some(0), "{}", stderr_of(&help));
        flags.extend(flags_in(&String::from_utf8(help.stdout).unwrap()));
    }
    flags.sort();
    flags.dedup();
    assert!(flags.len() > 30, "{flags:?}");
    let ours = output(&tether_binary().unwrap(), &args(&["serve", "--help"]), &[]).await;
    let ours = String::from_utf8(ours.stdout).unwrap();
    let expectations = expectations(&files);
    for flag in &flags {
        assert!(
            expectations.iter().any(|(known, _)| known == flag),
            "the reference takes {flag}, which tether serve does not: decide what it does \
             with it, and add it here"
        );
        if flag != "--connect" {
            assert!(flags_in(&ours).contains(flag), "`tether serve --help` lists no {flag}");
        }
    }
    for (flag, expected) in expectations {
        match expected {
            Expected::Serves(words) => {
                let mut server = tether_serve(&words, &home).spawn().unwrap();
                let url = first_line(&mut server).await;
                assert!(url.as_deref().is_some_and(|url| url.starts_with("ws://")), "{flag}");
                stop(server).await;
            }
            Expected::ServesStdio(words) => {
                let mut server = tether_serve(&words, &home).spawn().unwrap();
                drop(server.stdin.take());
                let done = tokio::time::timeout(WITHIN, server.wait_with_output()).await;
                let done = done.unwrap().unwrap();
                assert_eq!(done.status.code(), Some(0), "{flag}: {}", stderr_of(&done));
                assert!(done.stdout.is_empty(), "{flag}");
            }
            Expected::Refused(words, what) => {
                let server = tether_serve(&words, &home).spawn().unwrap();
                let done = tokio::time::timeout(WITHIN, server.wait_with_output()).await;
                let done = done.unwrap().unwrap();
                assert_eq!(done.status.code(), Some(2), "{flag}");
                assert!(done.stdout.is_empty(), "{flag}: nothing was served");
                assert_eq!(stderr_of(&done), format!("{}\n", refusal(what)), "{flag}");
            }
        }
    }
}

/// Every feature the installed reference lists is one Tether knows: `--strict-config` takes
/// it, and a reference that adds a feature fails here until Tether knows it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_feature_of_the_reference_is_known() {
    let scratch = Scratch::new("features");
    let env = [("CODEX_HOME", scratch.path("").to_str().unwrap().to_owned())];
    let env: Vec<(&str, &str)> = env.iter().map(|(key, value)| (*key, value.as_str())).collect();
    let listed = output(&reference_binary().unwrap(), &args(&["features", "list"]), &env).await;
    assert_eq!(listed.status.code(), Some(0), "{}", stderr_of(&listed));
    let listed = String::from_utf8(listed.stdout).unwrap();
    let names: Vec<&str> =
        listed.lines().filter_map(|line| line.split_whitespace().next()).collect();
    assert!(names.len() > 100, "{listed}");
    for name in names {
        assert!(known::is_feature(name), "the reference knows the feature {name}; Tether does not");
    }
}

/// A command line both servers take or refuse: run with `--listen stdio` and no input, a
/// server that takes it exits 0 at once; one that refuses it exits 1 (a setting) or 2 (the
/// command line itself).
struct Case {
    words: Vec<String>,
    /// The configuration file both read, if any (`$CODEX_HOME/config.toml`).
    config_toml: Option<&'static str>,
    env: Vec<(&'static str, &'static str)>,
}

fn case(words: &[&str]) -> Case {
    Case { words: args(words), config_toml: None, env: Vec::new() }
}

/// One server's answer to a case: its exit status and its one-line reason (the reference's
/// `Error: ` line, Tether's line without its `tether: `).
async fn answer(program: &Path, first: &[&str], case: &Case, home: &Path) -> (Option<i32>, String) {
    let _ = std::fs::remove_file(home.join("config.toml"));
    if let Some(text) = case.config_toml {
        std::fs::write(home.join("config.toml"), text).unwrap();
    }
    let mut words = args(first);
    words.extend(args(&["--listen", "stdio"]));
    words.extend(case.words.iter().cloned());
    let mut env = vec![("CODEX_HOME", home.to_str().unwrap()), ("RUST_BACKTRACE", "0")];
    env.extend(case.env.iter().copied());
    let done = output(program, &words, &env).await;
    let stderr = stderr_of(&done);
    let reason = stderr
        .lines()
        .find_map(|line| line.strip_prefix("Error: ").or_else(|| line.strip_prefix("tether: ")))
        .unwrap_or_default()
        .to_owned();
    (done.status.code(), reason)
}

/// Codex's settings (`-c`, `--enable`, `--strict-config` and the configuration file it checks),
/// the managed-network proxy's `HOST:PORT`, the pid namespace's modes, the capability-token
/// flags and the concurrency bound are taken and refused as the reference takes and refuses
/// them: the same exit status, and where a setting is refused, the reference's words first
/// (Tether's line goes on to say what to do).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_are_taken_and_refused_as_the_reference_does() {
    let scratch = Scratch::new("serve-settings");
    let homes = [scratch.path("tether-home"), scratch.path("reference-home")];
    for home in &homes {
        std::fs::create_dir_all(home).unwrap();
    }
    let token = scratch.path("token");
    std::fs::write(&token, "token\n").unwrap();
    let token = token.display().to_string();
    let mut cases = vec![
        case(&["-c", "model=\"o3\"", "-c", "unknown_key=1"]),
        case(&["-c", "model=\"o3\"", "--strict-config"]),
        case(&["-c", "features.shell_snapshot=true", "--strict-config"]),
        case(&["-c", "unknown_key=1", "--strict-config"]),
        case(&["-c", "unknown.nested=1", "--strict-config"]),
        case(&["-c", "features.nosuch=true", "--strict-config"]),
        case(&["-c", "no_equals", "--strict-config"]),
        case(&["-c", "=1", "--strict-config"]),
        case(&["--enable", "collab", "--disable", "undo"]),
        case(&["--enable", "collab", "--strict-config"]),
        case(&["--enable", "nosuch", "--strict-config"]),
        case(&["--linux-sandbox-pid-namespace", "isolate"]),
        case(&["--linux-sandbox-pid-namespace", "inherit"]),
        case(&["--linux-sandbox-pid-namespace", "shared"]),
        case(&["--concurrent-requests", "0"]),
        case(&["--concurrent-requests", "100000"]),
        case(&["--ws-auth", "capability-token", "--ws-token-sha256", "abc"]),
        case(&["--ws-auth", "capability-token", "--ws-token-sha256", &TOKEN_SHA256.to_uppercase()]),
        case(&["--ws-auth", "capability-token", "--ws-token-sha256", &format!("{TOKEN_SHA256}00")]),
        case(&[
            "--ws-auth",
            "capability-token",
            "--ws-token-sha256",
            TOKEN_SHA256,
            "--ws-token-file",
            &token,
        ]),
    ];
    for proxy in [
        "proxy.internal:3128",
        "[::1]:3128",
        "*.example.com:80",
        "foo_bar:+80",
        "proxy",
        "proxy:0",
        "proxy:99999",
        "::1:3128",
        "a..b:80",
        "é.com:80",
        "user@proxy:80",
    ] {
        cases.push(case(&["--tcp-upstream-proxy", proxy]));
    }
    let mut config = |text: &'static str| {
        let mut with = case(&["--strict-config"]);
        with.config_toml = Some(text);
        cases.push(with);
    };
    config("model = \"o3\"\n\n[features]\nshell_snapshot = true\n");
    config("bogus_key = 1\n");
    config("model = \"o3\"\n\n[features]\nshell_snapshot = true\nnosuch = true\n");
    config("model = [\n");
    let mut without_strict = case(&[]);
    without_strict.config_toml = Some("bogus_key = 1\nmodel = [\n");
    cases.push(without_strict);
    let mut env = case(&[]);
    env.env = vec![("CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE", "1")];
    cases.push(env);
    let mut env = case(&[]);
    env.env = vec![("CODEX_EXEC_SERVER_PROXY_PRIVATE_IPS_VIA_UPSTREAM", "true")];
    cases.push(env);

    let (tether, reference) = (tether_binary().unwrap(), reference_binary().unwrap());
    for case in &cases {
        let theirs = answer(&reference, &["exec-server"], case, &homes[1]).await;
        let ours = answer(&tether, &["serve"], case, &homes[0]).await;
        let what = format!("{:?} {:?} {:?}", case.words, case.config_toml, case.env);
        assert_eq!(ours.0, theirs.0, "{what}: {ours:?} / {theirs:?}");
        // Where the reference names a file, it names its own home.
        let theirs = theirs.1.replace(homes[1].to_str().unwrap(), homes[0].to_str().unwrap());
        assert!(ours.1.starts_with(&theirs), "{what}: {:?} / {theirs:?}", ours.1);
        if ours.0 == Some(1) {
            assert!(!theirs.is_empty(), "{what}");
            assert!(ours.1.len() > theirs.len(), "{what}: says what to do too: {:?}", ours.1);
        }
    }
}

/// `--exit-on-stdin-close` (or `CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE=true`): when the parent's
/// pipe to its standard input closes, the server ends as SIGTERM ends it — with
/// `--shutdown-grace-secs`, a running command first finishes as it would (here, once it is
/// told to), then the server exits 0; without it, the command is killed and the server exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_standard_input_ends_the_server_as_sigterm_does() {
    let scratch = Scratch::new("stdin-close");
    let home = scratch.path("home");
    std::fs::create_dir_all(&home).unwrap();
    for (words, env) in [(args(&["--exit-on-stdin-close"]), None), (args(&[]), Some("true"))] {
        let mut command = tether_serve(&words, &home);
        if let Some(value) = env {
            command.env("CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE", value);
        }
        let mut server = command.spawn().unwrap();
        let url = first_line(&mut server).await.unwrap();
        let (mut client, _) = RpcClient::connect_initialized(&url).await.unwrap();
        client.ok("process/start", exec("held", "echo $$; exec sleep 600")).await.unwrap();
        let pid: u32 = first_output_line(&mut client, "held").await.parse().unwrap();
        drop(server.stdin.take());
        let status = tokio::time::timeout(WITHIN, server.wait()).await.unwrap().unwrap();
        assert_eq!(status.code(), Some(0), "{words:?} {env:?}");
        assert!(ends_within(pid, WITHIN).await, "its command was killed: {words:?} {env:?}");
    }

    let words = args(&["--exit-on-stdin-close", "--shutdown-grace-secs", "60"]);
    let mut server = tether_serve(&words, &home).spawn().unwrap();
    let url = first_line(&mut server).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&url).await.unwrap();
    let mut params = exec("draining", "echo ready; read line; echo \"finished $line\"");
    params["pipeStdin"] = json!(true);
    client.ok("process/start", params).await.unwrap();
    assert_eq!(first_output_line(&mut client, "draining").await, "ready");
    drop(server.stdin.take());
    let write = json!({"processId": "draining", "chunk": "bm93Cg==", "writeId": "1"});
    assert_eq!(client.ok("process/write", write).await.unwrap(), json!({"status": "accepted"}));
    let events = client.process_events("draining").await.unwrap();
    let exited = events.iter().find(|event| event["method"] == "process/exited").unwrap();
    assert_eq!(exited["params"]["exitCode"], 0, "it finished, not killed: {events:?}");
    let status = tokio::time::timeout(WITHIN, server.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// Waits for `id`'s first line of output, and returns it.
async fn first_output_line(client: &mut RpcClient, id: &str) -> String {
    let mut seen = String::new();
    let mut after = 0;
    while !seen.contains('\n') {
        let read = json!({"processId": id, "afterSeq": after, "waitMs": 10000});
        let read = client.ok("process/read", read).await.unwrap();
        seen.push_str(&text(&read["chunks"]));
        after = read["nextSeq"].as_u64().unwrap() - 1;
    }
    seen.lines().next().unwrap_or_default().to_owned()
}
