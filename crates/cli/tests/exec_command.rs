//! `tether exec` as a person uses it: output streams through, the exit code comes back, and a
//! connection that keeps dropping changes nothing.

use std::process::Stdio;
use std::time::Duration;

use tether_testkit::server::tether_binary;
use tether_testkit::{FaultProxy, ServerProcess, Target, against_both};
use tokio::io::AsyncWriteExt;

mod common;

against_both!(
    exec_streams_output_and_returns_the_exit_code,
    exec_output_is_identical_through_a_connection_cut_ten_times,
    exec_resume_reattaches_after_the_first_client_died,
    exec_into_a_stalled_pipe_stays_small_and_delivers_every_byte,
    piped_input_to_a_terminal_ends_with_it,
    with_no_command_it_is_a_login_shell_in_the_users_home,
);

async fn tether_exec(url: &str, args: &[&str], stdin: &[u8]) -> std::process::Output {
    let mut command = vec!["--"];
    command.extend_from_slice(args);
    tether_exec_with(url, &command, stdin).await
}

/// Runs `tether exec --url URL ARGS…` (ARGS include the `--` before a command).
async fn tether_exec_with(url: &str, args: &[&str], stdin: &[u8]) -> std::process::Output {
    let mut child = tokio::process::Command::new(tether_binary().unwrap())
        .arg("exec")
        .arg("--url")
        .arg(url)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).await.unwrap();
    drop(input);
    tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("finished")
        .unwrap()
}

/// As with ssh: no command is the executor user's login shell (reading our input, which is no
/// terminal here), and a command runs in the user's home unless `--cwd` says otherwise; the
/// shell's status is the exit code. `--detach` without a command is refused in one line.
async fn with_no_command_it_is_a_login_shell_in_the_users_home(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let home = std::env::var("HOME").unwrap();
    let shell = tether_exec_with(
        &server.url,
        &[],
        b"echo \"$(pwd)\"; shopt -q login_shell && echo login; exit 3\n",
    )
    .await;
    let stdout = String::from_utf8_lossy(&shell.stdout);
    assert_eq!(shell.status.code(), Some(3), "{}", String::from_utf8_lossy(&shell.stderr));
    assert_eq!(stdout, format!("{home}\nlogin\n"));
    let pwd = tether_exec(&server.url, &["pwd"], b"").await;
    assert_eq!(String::from_utf8_lossy(&pwd.stdout), format!("{home}\n"));
    let detached = tether_exec_with(&server.url, &["--detach"], b"").await;
    assert_eq!(detached.status.code(), Some(255));
    assert_eq!(
        String::from_utf8_lossy(&detached.stderr).trim_end(),
        "tether exec: --detach needs a command to leave running: tether exec --detach -- COMMAND"
    );
}

/// `echo x | tether exec -t -- cat`: our input is no terminal, so nobody will type the Ctrl-D
/// that ends the command's; `tether exec` sends it at the end of the input (twice after a
/// partial line: the first only hands the line over), and the command ends.
async fn piped_input_to_a_terminal_ends_with_it(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let lines = tether_exec_with(&server.url, &["-t", "--", "wc", "-l"], b"a\nb\n").await;
    assert_eq!(lines.status.code(), Some(0), "{}", String::from_utf8_lossy(&lines.stderr));
    assert_eq!(lines.stdout, b"a\r\nb\r\n2\r\n", "echoed by the terminal, then counted");
    let partial = tether_exec_with(&server.url, &["-t", "--", "cat"], b"partial").await;
    assert_eq!(partial.status.code(), Some(0), "{}", String::from_utf8_lossy(&partial.stderr));
    assert_eq!(partial.stdout, b"partialpartial");
}

async fn exec_streams_output_and_returns_the_exit_code(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let output = tether_exec(
        &server.url,
        &["sh", "-c", "head -c 4; echo out; echo err >&2; exit 3"],
        b"abc\n",
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&output.stdout), "abc\nout\n");
    assert_eq!(String::from_utf8_lossy(&output.stderr), "err\n");
    assert_eq!(output.status.code(), Some(3));

    let output = tether_exec(&server.url, &["sh", "-c", "kill -TERM $$"], b"").await;
    assert_eq!(output.status.code(), Some(143), "a signal death is 128 + the signal");
}

/// The connection is cut ten times while the command prints, each time in the middle of a
/// block of its output (after the block's first bytes arrived); the command waits for a line
/// of input between blocks, so each cut lands while it runs however loaded the machine is, and
/// each next block is asked for over the resumed connection. The output comes through whole.
async fn exec_output_is_identical_through_a_connection_cut_ten_times(target: Target) {
    use tokio::io::AsyncReadExt;
    const BLOCKS: usize = 10;
    const LINES: usize = 20_000;
    let server = ServerProcess::start(target).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let script = format!(
        "i=0; while [ $i -lt {BLOCKS} ]; do seq $((i*{LINES}+1)) $((i*{LINES}+{LINES})); read go; i=$((i+1)); done"
    );
    let mut child = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &proxy.url, "--", "sh", "-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut received = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut read_until = async |received: &mut Vec<u8>, done: &dyn Fn(&[u8]) -> bool| {
        tokio::time::timeout(Duration::from_secs(60), async {
            while !done(received) {
                let n = stdout.read(&mut buffer).await.unwrap();
                assert!(n > 0, "tether exec ended early after {} bytes", received.len());
                received.extend_from_slice(&buffer[..n]);
            }
        })
        .await
        .expect("the block came through");
    };
    for block in 0..BLOCKS {
        let start = received.len();
        read_until(&mut received, &|seen: &[u8]| seen.len() > start).await;
        proxy.cut();
        let last = format!("\n{}\n", (block + 1) * LINES);
        read_until(&mut received, &|seen: &[u8]| seen.ends_with(last.as_bytes())).await;
        stdin.write_all(b"go\n").await.unwrap();
    }
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("tether exec finished")
        .unwrap();
    received.extend_from_slice(&output.stdout);
    let expected: String = (1..=BLOCKS * LINES).map(|i| format!("{i}\n")).collect();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        received == expected.as_bytes(),
        "output differs ({} bytes vs {})",
        received.len(),
        expected.len()
    );
    assert!(proxy.connections() > BLOCKS, "each cut was followed by a new connection");
}

async fn exec_resume_reattaches_after_the_first_client_died(target: Target) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let server = ServerProcess::start(target).await.unwrap();
    let mut first = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--print-ids", "--no-stdin", "--url", &server.url, "--"])
        .args(["sh", "-c", "echo one; sleep 1; echo two; exit 4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut ids = BufReader::new(first.stderr.take().unwrap()).lines();
    let ids = ids.next_line().await.unwrap().expect("ids on stderr");
    let (session, process) = ids
        .strip_prefix("session=")
        .and_then(|rest| rest.split_once(" process="))
        .unwrap_or_else(|| panic!("unexpected first stderr line: {ids}"));
    let mut output = BufReader::new(first.stdout.take().unwrap()).lines();
    assert_eq!(output.next_line().await.unwrap().as_deref(), Some("one"));
    // Resumed at once: until the server has seen the first connection go, `--resume` is told
    // the session is still held, and tries again.
    first.kill().await.unwrap();

    let resumed =
        tether_exec_with(&server.url, &["--resume", session, "--process", process], b"").await;
    assert_eq!(String::from_utf8_lossy(&resumed.stdout), "one\ntwo\n", "replayed, then followed");
    assert_eq!(resumed.status.code(), Some(4), "{}", String::from_utf8_lossy(&resumed.stderr));
}

/// A connection that goes silent and a server that cannot be reached again: with
/// `--keepalive-timeout-secs 1 --recovery-timeout-secs 1`, `tether exec` notices within a
/// second, gives up a second later (by default: 15 s, then 25 s), and says how to reattach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_gives_up_when_told_and_says_how_to_reattach() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let timeouts = ["--keepalive-timeout-secs", "1", "--recovery-timeout-secs", "1"];
    let child = exec_until_ready(&proxy.url, &timeouts).await;
    proxy.freeze_downstream_including_new();
    let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("tether exec gave up within the timeouts it was given")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(255), "{stderr}");
    // One line that ends with a command to paste, the URL as given.
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let hint = format!("reattach with: tether exec --url {} --resume ", proxy.url);
    let (_, ids) = stderr.trim_end().split_once(&hint).expect(&stderr);
    let ids: Vec<&str> = ids.split(' ').collect();
    assert!(ids.len() == 3 && ids[1] == "--process", "{stderr}");
}

/// The server is stopped (SIGTERM) while a command runs: it kills the command and says it is
/// going away (Close 1001), so `tether exec` gives up after a short grace (3 s) instead of its
/// 25 s of retries, and says the command ended with the server rather than that it may still
/// be running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_says_the_server_stopped_when_it_did() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let url = server.url.clone();
    let child = exec_until_ready(&url, &[]).await;
    server.stop().await.unwrap();
    // Well short of the 25 s recovery deadline a vanished server gets.
    let output = tokio::time::timeout(Duration::from_secs(15), child.wait_with_output())
        .await
        .expect("tether exec gave up soon after the server said it stopped")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(255), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "tether exec: the server at {url} shut down, and the command was stopped with it; run it again once the server is back"
        )
    );
}

/// `tether exec --url URL --no-stdin FLAGS… -- sh -c 'echo ready; sleep 60'`, once it has
/// printed `ready` (the rest of its output is left to the caller).
async fn exec_until_ready(url: &str, flags: &[&str]) -> tokio::process::Child {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", url, "--no-stdin"])
        .args(flags)
        .args(["--", "sh", "-c", "echo ready; sleep 60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(stdout.next_line().await.unwrap().as_deref(), Some("ready"));
    child
}

/// `tether exec` allocates from one heap (`allocator::one_heap`): glibc's arenas beyond the
/// main heap are 64 MiB reservations, each ending in an inaccessible mapping on a 64 MiB
/// boundary, and there are none while output streams through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_allocates_from_one_heap() {
    use tokio::io::AsyncReadExt;
    const ARENA_BYTES: u64 = 64 << 20;
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let mut child = exec_until_ready(&server.url, &[]).await;
    // Output in flight on every runtime thread before the heaps are counted.
    let mut more = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--no-stdin", "--"])
        .args(["sh", "-c", "head -c 20000000 /dev/zero; echo; echo ready; sleep 60"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = more.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buffer = vec![0u8; 1 << 20];
    while !seen.ends_with(b"\nready\n") {
        let n = tokio::time::timeout(Duration::from_secs(60), stdout.read(&mut buffer))
            .await
            .expect("the command never said it was ready")
            .unwrap();
        assert!(n > 0, "tether exec ended early");
        seen.extend_from_slice(&buffer[..n]);
        let keep = seen.len().saturating_sub(16);
        seen.drain(..keep);
    }
    for pid in [child.id().unwrap(), more.id().unwrap()] {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        let arenas: Vec<&str> = maps
            .lines()
            .filter(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let (Some(range), Some(&"---p"), 5) = (fields.first(), fields.get(1), fields.len())
                else {
                    return false;
                };
                let (start, end) = range.split_once('-').unwrap();
                let start = u64::from_str_radix(start, 16).unwrap();
                let end = u64::from_str_radix(end, 16).unwrap();
                end % ARENA_BYTES == 0 && end - start > 1 << 20
            })
            .collect();
        assert!(arenas.is_empty(), "tether exec has heaps beside the main one: {arenas:?}");
    }
    child.kill().await.unwrap();
    more.kill().await.unwrap();
}

/// A reader that pauses (a pager, a slow consumer) holds the command back on the server, as
/// ssh would: `tether exec` stays small while nobody reads, then delivers every byte.
async fn exec_into_a_stalled_pipe_stays_small_and_delivers_every_byte(target: Target) {
    use tokio::io::AsyncReadExt;
    const LINES: usize = 10_000_000; // 78.9 MB
    const LIMIT_KIB: u64 = 64 * 1024;
    let server = ServerProcess::start(target).await.unwrap();
    let mut child = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--no-stdin", "--", "seq", "1", &LINES.to_string()])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let peak = || tether_testkit::process_stats::peak_rss_kib(pid).unwrap_or(0);
    // The reader is away for three seconds: long enough for the command to print everything
    // several times over if nothing held it back.
    let away = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < away {
        assert!(peak() < LIMIT_KIB, "tether exec grew to {} KiB while its reader paused", peak());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut stdout = child.stdout.take().unwrap();
    let mut out = Vec::with_capacity(80 * 1024 * 1024);
    let mut buffer = vec![0u8; 1024 * 1024];
    let mut highest = peak();
    loop {
        let n = tokio::time::timeout(Duration::from_secs(60), stdout.read(&mut buffer))
            .await
            .expect("output within 60 s")
            .unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buffer[..n]);
        highest = highest.max(peak());
    }
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(highest < LIMIT_KIB, "tether exec peaked at {highest} KiB");
    let expected: String = (1..=LINES).map(|i| format!("{i}\n")).collect();
    assert!(out == expected.as_bytes(), "{} of {} bytes, not `seq`'s", out.len(), expected.len());
}

/// `tether shell`, as `ssh host` at a terminal: the executor user's login shell, in their
/// home, on a terminal of its own; what is typed reaches it, and its exit status is ours.
/// The executor can be named on its own, as ssh takes its host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tether_shell_is_a_login_shell_on_a_terminal_in_the_users_home() {
    // Setup: a server, and `tether shell URL` on a terminal of the test's own.
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let home = std::env::var("HOME").unwrap();
    let (pty, pts) = pty_process::open().unwrap();
    let mut child = pty_process::Command::new(tether_binary().unwrap())
        .args(["shell", &server.url])
        .env_remove("TETHER_URL")
        .kill_on_drop(true)
        .spawn(pts)
        .unwrap();
    let (mut reader, mut writer) = pty.into_split();

    // Exercise: type what shows where it runs and what it is, then leave with a status.
    // (Each answer is made of pieces, so the echo of what was typed cannot match it.)
    let typed = "echo \"in=$(pwd)\"; [ -t 0 ] && echo \"on-a-\"terminal; \
                 shopt -q login_shell && echo \"log\"in-shell; exit 3\r";
    writer.write_all(typed.as_bytes()).await.unwrap();

    // Assert: in the home, on a terminal, a login shell; its status comes back.
    let mut seen = String::new();
    common::read_until(&mut reader, &format!("in={home}\r\n"), &mut seen).await;
    common::read_until(&mut reader, "on-a-terminal\r\n", &mut seen).await;
    common::read_until(&mut reader, "login-shell\r\n", &mut seen).await;
    let status =
        tokio::time::timeout(Duration::from_secs(20), child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(3), "{seen:?}");
}

/// `tether shell` with no executor named anywhere says so in one line, with what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tether_shell_without_an_executor_says_how_to_name_one() {
    let output = tokio::process::Command::new(tether_binary().unwrap())
        .arg("shell")
        .env_remove("TETHER_URL")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(255));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).trim_end(),
        "tether shell: which executor? name it (tether shell NAME), or give --url (or TETHER_URL)"
    );
}
