//! Trust on first use of a `wss://` executor, as ssh trusts a host key: a certificate nothing
//! vouches for is shown and, once accepted (at a terminal, or with `--accept-new-fingerprint`),
//! remembered in `known_fingerprints` beside the config file and pinned from then on; one that
//! changed is refused loudly. And the server side that makes it last: `tether serve
//! --tls-self-signed-dir`, whose certificate survives a restart.
//!
//! Every command runs with `HOME` and `XDG_CONFIG_HOME` in a scratch directory of its test, so
//! nobody's own files are read or written.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use tether_testkit::scratch::Scratch;
use tether_testkit::server::tether_binary;
use tether_testkit::{FaultProxy, ServerProcess, Target};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

mod common;

/// `tether ARGS…` as a person runs it from a script: no terminal, the home in `home`.
fn tether(home: &Scratch, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(tether_binary().unwrap());
    command.args(args);
    with_home(home, command.as_std_mut());
    command.stdin(Stdio::null()).kill_on_drop(true);
    command
}

/// `home`'s directories as the person's, and none of the person's own TETHER_* settings.
fn with_home(home: &Scratch, command: &mut std::process::Command) {
    command.env("HOME", home.dir("home")).env("XDG_CONFIG_HOME", home.dir("config"));
    for name in ["TETHER_URL", "TETHER_TOKEN", "TETHER_TLS_FINGERPRINT", "TETHER_TLS_CA_FILE"] {
        command.env_remove(name);
    }
    command.env_remove("TETHER_LOG");
}

async fn run(home: &Scratch, args: &[&str]) -> Output {
    let output = tether(home, args).output();
    tokio::time::timeout(Duration::from_secs(60), output).await.expect("finished").unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The known-fingerprints file of `home`.
fn known(home: &Scratch) -> PathBuf {
    home.path("config/tether/known_fingerprints")
}

/// Names `url` as executor `name` in `home`'s config file (`extra`: more of its entry).
fn name_executor(home: &Scratch, name: &str, url: &str, extra: &str) {
    let entry = format!("[executors.{name}]\nurl = \"{url}\"\n{extra}");
    home.file("config/tether/config.toml", entry.as_bytes());
}

/// A `--tls-self-signed` server and its printed fingerprint.
async fn self_signed() -> (ServerProcess, String) {
    let server = ServerProcess::start_with(Target::Tether, &["--tls-self-signed"]).await.unwrap();
    let fingerprint = server.fingerprint.clone().expect("a self-signed server prints it");
    (server, fingerprint)
}

/// `HOST:PORT` of a `wss://` URL: the key a URL's fingerprint is remembered by.
fn address(url: &str) -> &str {
    url.trim_start_matches("wss://")
}

/// At a terminal, an unknown certificate is shown and asked about, as ssh asks about a host
/// key: `no` connects to nothing and remembers nothing; `yes` connects and remembers it under
/// the executor's name, so the next connection — from a script, with no one to ask — is
/// pinned to it and asks nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_terminal_the_first_use_is_asked_about_and_remembered() {
    let home = Scratch::new("tofu-terminal");
    let (server, fingerprint) = self_signed().await;
    name_executor(&home, "box", &server.url, "");
    let asked = "Are you sure you want to continue connecting (yes/no/[fingerprint])? ";

    for (url, answer, said) in
        [(server.url.as_str(), "no", "was not accepted"), ("box", "yes", "answered-yes")]
    {
        let (pty, pts) = pty_process::open().unwrap();
        let mut command = pty_process::Command::new(tether_binary().unwrap())
            .args(["exec", "--url", url, "--", "echo", "answered-yes"])
            .kill_on_drop(true);
        for (name, value) in [("HOME", home.dir("home")), ("XDG_CONFIG_HOME", home.dir("config"))] {
            command = command.env(name, value);
        }
        for name in ["TETHER_URL", "TETHER_TLS_FINGERPRINT", "TETHER_TLS_CA_FILE", "TETHER_LOG"] {
            command = command.env_remove(name);
        }
        let mut child = command.spawn(pts).unwrap();
        let (mut reader, mut writer) = pty.into_split();
        let mut seen = String::new();
        common::read_until(&mut reader, asked, &mut seen).await;
        let shown = if url == "box" { "box" } else { address(&server.url) };
        assert!(
            seen.contains(&format!(
                "The authenticity of executor '{shown}' ({}) can't be established.",
                server.url
            )),
            "{seen:?}"
        );
        assert!(seen.contains(&format!("fingerprint is {fingerprint}.")), "{seen:?}");
        writer.write_all(format!("{answer}\n").as_bytes()).await.unwrap();
        common::read_until(&mut reader, said, &mut seen).await;
        let status =
            tokio::time::timeout(Duration::from_secs(30), child.wait()).await.unwrap().unwrap();
        if answer == "no" {
            assert_eq!(status.code(), Some(255), "{seen:?}");
            assert!(!known(&home).exists(), "a refused certificate was remembered");
        } else {
            assert_eq!(status.code(), Some(0), "{seen:?}");
        }
    }
    assert_eq!(std::fs::read_to_string(known(&home)).unwrap(), format!("box {fingerprint}\n"));

    let output = run(&home, &["exec", "--url", "box", "--", "echo", "pinned"]).await;
    assert_eq!((output.status.code(), output.stdout.as_slice()), (Some(0), &b"pinned\n"[..]));
    assert_eq!(stderr(&output), "", "nothing to ask or say");
}

/// `--accept-new-fingerprint` (ssh's `StrictHostKeyChecking=accept-new`) remembers an unknown
/// certificate without asking, under the URL's `HOST:PORT`, and says so; the session's
/// reconnections are pinned to it too (the link is cut under a running command, which carries
/// on), and so is every later command, whichever it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_new_remembers_without_asking_and_pins_reconnections() {
    let home = Scratch::new("tofu-accept-new");
    let (server, fingerprint) = self_signed().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let url = proxy.url.replacen("ws://", "wss://", 1);
    let go_on = home.path("go-on");
    let script = format!(
        "echo ready; while [ ! -e {} ]; do sleep 0.05; done; echo finished",
        go_on.display()
    );
    let args = ["exec", "--url", &url, "--accept-new-fingerprint", "--recovery-timeout-secs", "10"];
    let mut child = tether(&home, &args)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("ready"));
    proxy.cut();
    std::fs::write(&go_on, "").unwrap();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("finished"));
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let file = known(&home);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stderr(&output),
        format!("tether: remembered {fingerprint} for {} in {}\n", address(&url), file.display())
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("{} {fingerprint}\n", address(&url))
    );

    let output = run(&home, &["sessions", "--url", &url]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stderr(&output), "");
}

/// With no terminal to ask at and no `--accept-new-fingerprint`, an unknown certificate is
/// refused as before, in one line that shows its fingerprint and both ways to trust it; each
/// command exits with its own failure code, and nothing is remembered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_an_unknown_certificate_is_refused_showing_its_fingerprint() {
    let home = Scratch::new("tofu-refused");
    let (server, fingerprint) = self_signed().await;
    let url = server.url.as_str();
    let file = known(&home);
    let refusal = format!(
        "cannot connect to {url}: the server's certificate is not signed by a CA this client trusts (it presented {fingerprint}); if that fingerprint is your server's (`tether serve --tls-self-signed` prints it), accept it with --accept-new-fingerprint (remembered for {} in {}), or pin it with --tls-fingerprint",
        address(url),
        file.display()
    );
    for (said_by, args, code) in [
        ("tether exec", vec!["exec", "--url", url, "--", "true"], 255),
        ("tether cp", vec!["cp", "--url", url, ":/etc/hostname", "-"], 1),
        ("tether mcp", vec!["mcp", "--url", url, "--stdio", "true", "tools"], 1),
        ("tether", vec!["sessions", "--url", url], 1),
    ] {
        let output = run(&home, &args).await;
        assert_eq!(output.status.code(), Some(code), "{args:?}: {}", stderr(&output));
        assert_eq!(stderr(&output), format!("{said_by}: {refusal}\n"), "{args:?}");
    }
    assert!(!file.exists(), "an unaccepted certificate was remembered");
}

/// `--tls-self-signed-dir`: the first start makes the certificate and keeps it (the directory
/// made 0700, the key 0600), a restart serves the same one, so a client that remembered its
/// fingerprint connects to the restarted server without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_certificate_is_still_trusted_after_a_restart() {
    let home = Scratch::new("tofu-restart");
    let dir = home.path("server/tls");
    let kept = ["--tls-self-signed-dir", dir.to_str().unwrap()];
    let first = ServerProcess::start_with(Target::Tether, &kept).await.unwrap();
    let fingerprint = first.fingerprint.clone().expect("printed as --tls-self-signed prints it");
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode(&dir), mode(&dir.join("key.pem"))), (0o700, 0o600));
    let proxy = FaultProxy::start(first.addr()).await.unwrap();
    let url = proxy.url.replacen("ws://", "wss://", 1);
    let output =
        run(&home, &["exec", "--url", &url, "--accept-new-fingerprint", "--", "true"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    first.stop().await.unwrap();

    let second = ServerProcess::start_with(Target::Tether, &kept).await.unwrap();
    assert_eq!(second.fingerprint.as_deref(), Some(fingerprint.as_str()));
    proxy.set_upstream(second.addr());
    let output = run(&home, &["exec", "--url", &url, "--", "echo", "restarted"]).await;
    assert_eq!((output.status.code(), output.stdout.as_slice()), (Some(0), &b"restarted\n"[..]));
    assert_eq!(stderr(&output), "", "nothing to ask or say");
}

/// A server whose certificate is not the one remembered for its executor is refused loudly,
/// as ssh refuses a changed host key — `--accept-new-fingerprint` does not accept a change —
/// with the file and line to remove; a fingerprint given explicitly (a flag, or the config
/// entry's) still wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_certificate_is_refused_loudly_naming_the_line_to_remove() {
    let home = Scratch::new("tofu-changed");
    let (before, remembered) = self_signed().await;
    let (after, presented) = self_signed().await;
    name_executor(&home, "box", &before.url, "");
    let output =
        run(&home, &["exec", "--url", "box", "--accept-new-fingerprint", "--", "true"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let file = known(&home);
    // Another line first, so the line named is the entry's own.
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("# accepted by hand\n{text}")).unwrap();

    name_executor(&home, "box", &after.url, "");
    let place = format!("{}:2", file.display());
    for (said_by, args, code) in [
        ("tether exec", vec!["exec", "--url", "box", "--", "true"], 255),
        (
            "tether exec",
            vec!["exec", "--url", "box", "--accept-new-fingerprint", "--", "true"],
            255,
        ),
        ("tether", vec!["kill", "--url", "box", "some-session"], 1),
    ] {
        let output = run(&home, &args).await;
        let said = stderr(&output);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {said}");
        assert!(said.contains("WARNING: EXECUTOR IDENTIFICATION HAS CHANGED!"), "{said}");
        assert!(said.contains(&format!("\n  {place}\n")), "{said}");
        assert!(said.contains(&format!("\n{presented}.\n")), "{said}");
        assert_eq!(
            said.lines().last().unwrap(),
            format!(
                "{said_by}: cannot connect to {}: the server's certificate is {presented}, not {remembered} as remembered for box at {place}; refused (remove that line if the server's certificate changed on purpose)",
                after.url
            )
        );
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), format!("# accepted by hand\n{text}"));

    let pinned = ["exec", "--url", "box", "--tls-fingerprint", &presented, "--", "echo", "flag"];
    let output = run(&home, &pinned).await;
    assert_eq!((output.status.code(), output.stdout.as_slice()), (Some(0), &b"flag\n"[..]));
    name_executor(&home, "box", &after.url, &format!("tls_fingerprint = \"{presented}\"\n"));
    let output = run(&home, &["exec", "--url", "box", "--", "echo", "entry"]).await;
    assert_eq!((output.status.code(), output.stdout.as_slice()), (Some(0), &b"entry\n"[..]));
}

/// The directory of a kept certificate holds the server's key: one open to group or others,
/// or a key that is, is refused at startup in one line that says how to close it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_certificate_open_to_others_is_refused_at_startup() {
    let home = Scratch::new("tofu-open");
    let dir = home.dir("tls");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let output = serve_kept(&dir).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let said = stderr(&output);
    assert_eq!(
        said.lines().last().unwrap(),
        format!(
            "tether: --tls-self-signed-dir: {dir} is open to group or others (mode 0755), and the server's key must be readable by this user alone: chmod 700 {dir}",
            dir = dir.display()
        )
    );

    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let kept = ["--tls-self-signed-dir", dir.to_str().unwrap()];
    ServerProcess::start_with(Target::Tether, &kept).await.unwrap().stop().await.unwrap();
    let key = dir.join("key.pem");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let output = serve_kept(&dir).await;
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output).lines().last().unwrap(),
        format!(
            "tether: --tls-self-signed-dir: {key} is open to group or others (mode 0644), and the server's key must be readable by this user alone: chmod 600 {key}",
            key = key.display()
        )
    );
}

/// `tether serve --tls-self-signed-dir DIR`, run to its end (a refusal at startup).
async fn serve_kept(dir: &Path) -> Output {
    let output = tokio::process::Command::new(tether_binary().unwrap())
        .args(["serve", "--listen", "wss://127.0.0.1:0", "--tls-self-signed-dir"])
        .arg(dir)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(60), output).await.expect("refused at once").unwrap()
}
