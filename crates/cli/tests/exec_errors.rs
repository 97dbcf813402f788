//! `tether exec` when something is wrong, as a person meets it: a command that is not there, a
//! directory that is not there, a pipe closed early, a URL or a server that does not fit. Each
//! failure is one line on stderr that names what failed and ends with what to do, and the exit
//! code is the one a shell or ssh would give.

mod common;

use std::os::unix::process::ExitStatusExt as _;
use std::process::Stdio;
use std::time::Duration;

use tether_testkit::server::tether_binary;
use tether_testkit::{ServerProcess, Target, against_both};
use tokio::io::{AsyncBufReadExt as _, BufReader};

against_both!(
    a_missing_command_exits_127_and_names_it,
    a_missing_or_foreign_cwd_is_named,
    a_closed_stdout_ends_the_command_and_exec_quietly,
    resuming_a_session_the_server_does_not_have_says_so,
    the_terminal_type_goes_with_a_tty,
);

/// Runs `tether exec ARGS…` with no stdin, `env` added; its output once it ends.
async fn tether(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let command = tokio::process::Command::new(tether_binary().unwrap())
        .arg("exec")
        .args(args)
        .env_remove("TETHER_TOKEN")
        .env_remove("TETHER_LOG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(60), command).await.expect("finished").unwrap()
}

/// Its stderr, which must be exactly one line.
fn one_line(output: &std::process::Output) -> String {
    let stderr = String::from_utf8(output.stderr.clone()).unwrap();
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr:?}");
    assert!(!stderr.contains('\u{1b}'), "colour on a pipe: {stderr:?}");
    stderr.trim_end().to_owned()
}

async fn a_missing_command_exits_127_and_names_it(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let url = server.url.as_str();
    let output = tether(&["--url", url, "--", "no-such-command-here", "arg"], &[]).await;
    assert_eq!(output.status.code(), Some(127));
    assert_eq!(
        one_line(&output),
        "tether exec: no-such-command-here: command not found on the executor (not on its PATH)"
    );

    // A shell command line given as one word, as ssh would take it: said how to run it.
    let output = tether(&["--url", url, "--", "ls / | wc -l"], &[]).await;
    assert_eq!(output.status.code(), Some(127));
    assert_eq!(
        one_line(&output),
        "tether exec: ls / | wc -l: no such program on the executor (it reads as a shell command line); to run it through a shell: tether exec -- sh -c 'ls / | wc -l'"
    );

    let output = tether(&["--url", url, "-w", "/tmp", "--", "./no-such-script.sh"], &[]).await;
    assert_eq!(output.status.code(), Some(127));
    assert_eq!(
        one_line(&output),
        "tether exec: ./no-such-script.sh: not found on the executor (no such file, or no interpreter its #! line names)"
    );

    // On a terminal, a bare name the executor's terminal layer finds nowhere on the PATH.
    let output = tether(&["--url", url, "-t", "--", "no-such-command-here"], &[]).await;
    assert_eq!(output.status.code(), Some(127));
    let line = one_line(&output);
    assert!(
        line.starts_with("tether exec: no-such-command-here: command not found on the executor (Unable to spawn no-such-command-here because:"),
        "{line}"
    );

    // There, but not a program: 126, as a shell says "Permission denied".
    let data = std::env::temp_dir()
        .join(format!("tether-not-a-program-{}-{target:?}", std::process::id()));
    std::fs::write(&data, "just data\n").unwrap();
    let data = data.to_str().unwrap().to_owned();
    let output = tether(&["--url", url, "--", &data], &[]).await;
    let _ = std::fs::remove_file(&data);
    assert_eq!(output.status.code(), Some(126));
    let line = one_line(&output);
    assert!(
        line.starts_with(&format!("tether exec: {data}: cannot be run on the executor (")),
        "{line}"
    );

    // Executable, but with no `#!` line: not run with `/bin/sh` by either server.
    let script = std::env::temp_dir()
        .join(format!("tether-no-interpreter-{}-{target:?}", std::process::id()));
    std::fs::write(&script, "echo ran\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = script.to_str().unwrap().to_owned();
    let output = tether(&["--url", url, "--", &script], &[]).await;
    let _ = std::fs::remove_file(&script);
    assert_eq!(output.status.code(), Some(126));
    assert_eq!(
        one_line(&output),
        format!(
            "tether exec: {script}: cannot be run on the executor (Exec format error (os error 8))"
        )
    );
}

/// A script whose `#!` interpreter is missing: `execve` fails with "No such file or directory",
/// which a server that classifies its failures calls `spawnNotFound` (127, naming both causes),
/// and which `tether exec` asks a server that does not (Codex 0.169) about: the file is there,
/// so it cannot be run (126).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_spawn_kind_decides_and_a_server_without_one_is_asked() {
    use std::os::unix::fs::PermissionsExt;
    let script =
        std::env::temp_dir().join(format!("tether-missing-interpreter-{}", std::process::id()));
    std::fs::write(&script, "#!/nonexistent-tether-interpreter\necho ran\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script_text = script.to_str().unwrap().to_owned();
    let classified = [
        ServerProcess::start(Target::Tether).await.unwrap(),
        ServerProcess::start(Target::Reference).await.unwrap(),
    ];
    for server in &classified {
        let output = tether(&["--url", &server.url, "--", &script_text], &[]).await;
        assert_eq!(output.status.code(), Some(127), "{:?}", server.target);
        assert_eq!(
            one_line(&output),
            format!(
                "tether exec: {script_text}: not found on the executor (no such file, or no interpreter its #! line names)"
            )
        );
    }
    let previous = ServerProcess::start_previous_reference().await.unwrap();
    let output = tether(&["--url", &previous.url, "--", &script_text], &[]).await;
    assert_eq!(output.status.code(), Some(126));
    assert_eq!(
        one_line(&output),
        format!(
            "tether exec: {script_text}: cannot be run on the executor (No such file or directory (os error 2))"
        )
    );
    let output = tether(&["--url", &previous.url, "--", "no-such-command-here"], &[]).await;
    assert_eq!(output.status.code(), Some(127));
    std::fs::remove_file(&script).unwrap();
}

async fn a_missing_or_foreign_cwd_is_named(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let url = server.url.as_str();
    let output = tether(&["--url", url, "--cwd", "/no/such/dir", "--", "true"], &[]).await;
    assert_eq!(output.status.code(), Some(255));
    assert_eq!(
        one_line(&output),
        "tether exec: --cwd /no/such/dir: no such directory on the executor"
    );

    let output = tether(&["--url", url, "-w", "/etc/passwd", "--", "true"], &[]).await;
    assert_eq!(output.status.code(), Some(255));
    assert_eq!(
        one_line(&output),
        "tether exec: --cwd /etc/passwd: not a directory on the executor"
    );

    let output = tether(&["--url", url, "-w", "src", "--", "true"], &[]).await;
    assert_eq!(output.status.code(), Some(255));
    assert_eq!(one_line(&output), "tether exec: --cwd src: give an absolute path on the executor");
}

/// `tether exec -- yes | head -1`: once `head` has its line and goes, `tether exec` stops the
/// command on the executor and dies of SIGPIPE without a word, as ssh and a local `yes` do.
async fn a_closed_stdout_ends_the_command_and_exec_quietly(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let pid_file = std::env::temp_dir()
        .join(format!("tether-closed-stdout-{}-{target:?}", std::process::id()));
    let script = format!("echo $$ > {}; exec yes", pid_file.display());
    let mut child = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--no-stdin", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(stdout.next_line().await.unwrap().as_deref(), Some("y"));
    let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    let _ = std::fs::remove_file(&pid_file);
    drop(stdout);
    let output = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("tether exec ended once nobody read its output")
        .unwrap();
    assert_eq!(output.status.signal(), Some(libc::SIGPIPE), "{:?}", output.status);
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
    assert!(common::dies_soon(pid).await, "the remote `yes` ({pid}) runs on");
}

async fn resuming_a_session_the_server_does_not_have_says_so(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let url = server.url.as_str();
    let output = tether(&["--url", url, "--resume", "nosuch", "--process", "p"], &[]).await;
    assert_eq!(output.status.code(), Some(255));
    assert_eq!(
        one_line(&output),
        format!(
            "tether exec: {url} has no session nosuch: it ended, it expired while no client held it (the server's --session-ttl-secs), or the server restarted"
        )
    );
}

/// With `-t` the remote terminal is told what ours is, as ssh tells it.
async fn the_terminal_type_goes_with_a_tty(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let url = server.url.as_str();
    let script = ["--", "sh", "-c", "echo \"term=$TERM\""];
    let output =
        tether(&[&["--url", url, "-t"][..], &script[..]].concat(), &[("TERM", "xterm-kitty")])
            .await;
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "term=xterm-kitty");
    // `-e TERM=…` wins.
    let args = [&["--url", url, "-t", "-e", "TERM=dumb"][..], &script[..]].concat();
    let output = tether(&args, &[("TERM", "xterm-kitty")]).await;
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "term=dumb");
}

/// A port nobody listens on: the URL, the reason, and what to check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_names_the_url_and_what_to_check() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ws://{}", free.local_addr().unwrap());
    drop(free);
    let output = tether(&["--url", &url, "--", "true"], &[]).await;
    assert_eq!(output.status.code(), Some(255));
    assert_eq!(
        one_line(&output),
        format!(
            "tether exec: cannot connect to {url}: Connection refused (os error 111); is `tether serve` running and listening on this address?"
        )
    );
}

/// URLs that do not fit the server: each says which scheme to use instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_that_does_not_fit_the_server_says_what_would() {
    let plain = ServerProcess::start(Target::Tether).await.unwrap();
    let http = plain.url.replacen("ws://", "http://", 1);
    let line = one_line(&tether(&["--url", &http, "--", "true"], &[]).await);
    assert!(line.starts_with(&format!("tether exec: cannot connect to {http}: ")), "{line}");
    assert!(line.ends_with("; give a ws:// or wss:// URL, e.g. ws://127.0.0.1:8080"), "{line}");

    let wss = plain.url.replacen("ws://", "wss://", 1);
    let line = one_line(&tether(&["--url", &wss, "--", "true"], &[]).await);
    assert!(line.starts_with(&format!("tether exec: cannot connect to {wss}: ")), "{line}");
    assert!(
        line.ends_with("; the server speaks plain WebSocket: use ws:// instead of wss://"),
        "{line}"
    );

    let tls = ServerProcess::start_with(Target::Tether, &["--tls-self-signed"]).await.unwrap();
    let ws = tls.url.replacen("wss://", "ws://", 1);
    let line = one_line(&tether(&["--url", &ws, "--", "true"], &[]).await);
    assert!(line.starts_with(&format!("tether exec: cannot connect to {ws}: ")), "{line}");
    assert!(
        line.ends_with(
            "; if the server serves TLS, use wss:// instead of ws://; otherwise check the port"
        ),
        "{line}"
    );

    // A certificate nobody vouches for: what it is (as ssh shows an unknown host key), and how
    // to trust it (the known fingerprints in a config directory of the test's own).
    let config = tether_testkit::scratch::Scratch::new("exec-errors-config");
    let config_home = config.path("");
    let env = [("XDG_CONFIG_HOME", config_home.to_str().unwrap())];
    let line = one_line(&tether(&["--url", &tls.url, "--", "true"], &env).await);
    let fingerprint = tls.fingerprint.as_deref().expect("a self-signed server prints it");
    let address = tls.url.trim_start_matches("wss://");
    assert_eq!(
        line,
        format!(
            "tether exec: cannot connect to {}: the server's certificate is not signed by a CA this client trusts (it presented {fingerprint}); if that fingerprint is your server's (`tether serve --tls-self-signed` prints it), accept it with --accept-new-fingerprint (remembered for {address} in {}), or pin it with --tls-fingerprint",
            tls.url,
            config.path("tether/known_fingerprints").display()
        )
    );
    // With a CA file given, the CA is the only way in: nothing to accept or remember.
    let ca = config.file(
        "ca.pem",
        rcgen::generate_simple_self_signed(vec!["x".to_owned()]).unwrap().cert.pem().as_bytes(),
    );
    let line = one_line(
        &tether(&["--url", &tls.url, "--tls-ca-file", ca.to_str().unwrap(), "--", "true"], &env)
            .await,
    );
    assert!(
        line.ends_with("; if that fingerprint is your server's (`tether serve --tls-self-signed` prints it), pin it with --tls-fingerprint, or give --tls-ca-file PEM (the CA, or the server's own certificate)"),
        "{line}"
    );
}

/// A server that wants a token: how to give one, or that the one given is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_token_says_how_to_give_one() {
    let dir = std::env::temp_dir().join(format!("tether-exec-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "the-right-token\n").unwrap();
    let args = ["--ws-auth", "capability-token", "--ws-token-file", token.to_str().unwrap()];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    let url = server.url.as_str();

    let line = one_line(&tether(&["--url", url, "--", "true"], &[]).await);
    assert!(
        line.starts_with(&format!(
            "tether exec: cannot connect to {url}: the server refused the connection: HTTP 401"
        )),
        "{line}"
    );
    assert!(
        line.ends_with("; the server wants a token: pass --token-file FILE or set TETHER_TOKEN"),
        "{line}"
    );

    let line = one_line(&tether(&["--url", url, "--", "true"], &[("TETHER_TOKEN", "wrong")]).await);
    assert!(
        line.ends_with("; the server did not accept the token: check --token-file or TETHER_TOKEN"),
        "{line}"
    );

    let output =
        tether(&["--url", url, "--", "echo", "in"], &[("TETHER_TOKEN", "the-right-token")]).await;
    assert_eq!((output.status.code(), output.stdout.as_slice()), (Some(0), &b"in\n"[..]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Logs asked for on a pipe carry no colour codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_on_a_pipe_are_plain_text() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let output = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--", "true"])
        .env("TETHER_LOG", "debug")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0));
    assert!(stderr.contains("exec-server session started"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

/// `tether exec -t -- yes | head -1` typed at a terminal: dying of SIGPIPE must not leave the
/// terminal in raw mode (no echo, no line editing) for the shell that comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_gives_the_terminal_back_as_it_was() {
    use rustix::termios::{LocalModes, tcgetattr};
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let (pty, pts) = pty_process::open().unwrap();
    let before = tcgetattr(&pty).unwrap().local_modes;
    assert!(before.contains(LocalModes::ECHO | LocalModes::ICANON), "{before:?}");
    let mut child = pty_process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "-t", "--", "yes"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn(pts)
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = stdout.next_line().await.unwrap().unwrap();
    assert_eq!(first.trim_end_matches('\r'), "y");
    // Raw while it runs…
    assert!(!tcgetattr(&pty).unwrap().local_modes.contains(LocalModes::ECHO));
    drop(stdout);
    let output = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("tether exec ended once nobody read its output")
        .unwrap();
    assert_eq!(output.status.signal(), Some(libc::SIGPIPE), "{:?}", output.status);
    // …and as it was after.
    assert_eq!(tcgetattr(&pty).unwrap().local_modes, before);
}
