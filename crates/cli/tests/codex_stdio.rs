//! Codex starts the executor itself. An entry of Codex's `$CODEX_HOME/environments.toml` with a
//! `program` (and `args`) instead of a `url` is a command Codex 0.171 runs with piped stdin and
//! stdout, as the leader of a process group of its own, and speaks newline-delimited JSON-RPC
//! to: `tether serve --listen stdio`, run directly or through whatever carries the two pipes to
//! the executor (ssh). The real Codex CLI runs a whole turn through the server it launched, and
//! when Codex is gone so is the server, with everything it started. The model is
//! [`tether_testkit::MockModel`]; everything else is real.
//!
//! How the server learns that Codex is gone depends on the launch: Codex ending normally sends
//! its child's process group SIGTERM, which reaches a server it runs directly; behind a relay or
//! ssh, and whenever Codex dies without a word, the server has only the end of its input.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use tether_testkit::server::{reference_binary, tether_binary};
use tether_testkit::sshd::Sshd;
use tether_testkit::{Target, ToolCall, against_both, wait};

use common::codex::{Reach, Workspace};

mod common;

against_both!(
    codex_runs_a_turn_on_an_executor_it_launches,
    codex_runs_a_turn_on_an_executor_behind_a_relay,
    codex_runs_a_turn_on_an_executor_it_reaches_over_ssh,
    a_launched_executor_ends_when_codex_is_killed,
);

/// The id Codex knows the launched executor by.
const ENVIRONMENT_ID: &str = "launched";

/// How long a server (and what it started) may take to be gone once Codex has exited: its
/// shutdown kills every process group and waits for them, far below this on any machine.
const ENDING_DEADLINE: Duration = Duration::from_secs(15);

/// How long Codex may take to start a turn's command: it launches the server, completes the
/// handshake and asks the model first, in a second or two.
const COMMAND_DEADLINE: Duration = Duration::from_secs(60);

/// How the executor's two pipes reach Codex.
#[derive(Clone, Copy)]
enum Launch<'a> {
    /// Codex runs the server itself: the server's stdin and stdout are Codex's pipes.
    Direct,
    /// Codex runs a relay that copies its stdin to the server and the server's stdout back,
    /// the server in a session of its own, as ssh and sshd do across machines: the server gets
    /// nothing from Codex but bytes and, when Codex goes, the end of its input — no signal
    /// Codex sends its child's process group reaches it.
    Relay,
    /// Codex runs `ssh` to a local `sshd`, which runs the server as the remote command.
    Ssh(&'a Sshd),
}

/// The server's own command line for `target`, serving on stdin and stdout.
fn stdio_server(target: Target) -> (PathBuf, Vec<String>) {
    let (binary, args) = match target {
        Target::Tether => (tether_binary().unwrap(), ["serve", "--listen", "stdio"]),
        Target::Reference => (reference_binary().unwrap(), ["exec-server", "--listen", "stdio"]),
    };
    (binary, args.map(str::to_owned).to_vec())
}

/// Codex's `environments.toml` for `workspace`: one environment, [`ENVIRONMENT_ID`], launched
/// as `launch` says. Codex's own machine is no environment (`include_local = false`), so
/// nothing can run anywhere but on the launched server.
fn environments(target: Target, launch: Launch<'_>, workspace: &Workspace) -> String {
    let (server, server_args) = stdio_server(target);
    let (program, args) = match launch {
        Launch::Direct => (server, server_args),
        Launch::Relay => {
            let relay = "cat | setsid \"$0\" \"$@\" | cat".to_owned();
            let args = [vec!["-c".to_owned(), relay, server.display().to_string()], server_args];
            (PathBuf::from("/bin/sh"), args.concat())
        }
        Launch::Ssh(sshd) => {
            // One word, run by the remote user's shell. sshd gives the server an environment
            // of its own; `CODEX_HOME` is the one a server Codex runs would inherit.
            let remote = format!(
                "CODEX_HOME={} exec {} {}",
                workspace.root.join("home").display(),
                server.display(),
                server_args.join(" ")
            );
            let mut args = vec!["-T".to_owned()];
            args.extend(sshd.ssh_args().into_iter().map(|arg| arg.into_string().unwrap()));
            args.push(remote);
            (PathBuf::from("ssh"), args)
        }
    };
    let config = json!({
        "default": ENVIRONMENT_ID,
        "include_local": false,
        "environments": [{"id": ENVIRONMENT_ID, "program": program, "args": args}],
    });
    toml::to_string(&config).unwrap()
}

/// What a command run on the executor learnt about where it ran.
struct Executor {
    /// The serving process: the command's shell's parent.
    server: u32,
    /// The server's own parent: Tether's guardian, the process Codex (or the relay, or sshd)
    /// started; the launcher itself for the reference, which has none.
    parent: u32,
    /// A process the command left running in the background.
    child: u32,
    /// The program the serving process runs.
    program: PathBuf,
}

/// A command that says where it runs and leaves a child behind it, running.
fn command_that_reports_its_server() -> ToolCall {
    let cmd = "echo server=$PPID; echo parent=$(cut -d' ' -f4 /proc/$PPID/stat); \
               echo program=$(readlink /proc/$PPID/exe); \
               sleep 600 >/dev/null 2>&1 & echo child=$!";
    ToolCall::Exec { cmd: cmd.to_owned() }
}

fn executor_reported(output: &str) -> Executor {
    let value = |name: &str| -> &str {
        let prefix = format!("{name}=");
        output
            .lines()
            .find_map(|line| line.trim().strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {name}= in {output}"))
    };
    let pid = |name: &str| -> u32 {
        value(name).parse().unwrap_or_else(|_| panic!("{name}= is no pid in {output}"))
    };
    Executor {
        server: pid("server"),
        parent: pid("parent"),
        child: pid("child"),
        program: PathBuf::from(value("program")),
    }
}

/// The processes of `pids` still running [`ENDING_DEADLINE`] after the call (a zombie has
/// ended); returns as soon as none is.
async fn still_running(pids: &[u32]) -> Vec<u32> {
    wait::still_running_after(pids, ENDING_DEADLINE).await
}

/// Runs a turn on the executor Codex launches as `launch` says (a command that reports where
/// it ran and leaves a child running, then a patch), and checks that the turn ran there and
/// that, Codex gone, the server and everything it started are gone too.
async fn turn_on_a_launched_executor(target: Target, launch: Launch<'_>, name: &str) {
    let workspace = Workspace::new(target, name);
    workspace.environments(&environments(target, launch, &workspace));
    let work = workspace.work();
    std::fs::write(work.join("existing.txt"), "keep\nold line\n").unwrap();
    let patch = "*** Begin Patch\n\
                 *** Add File: brand/new/added.txt\n+hello patch\n\
                 *** Update File: existing.txt\n@@\n keep\n-old line\n+new line\n\
                 *** End Patch\n";
    let calls =
        vec![command_that_reports_its_server(), ToolCall::ApplyPatch { patch: patch.into() }];

    let outputs = workspace.run_codex(Reach::Environments, calls).await;

    let executor = executor_reported(&outputs[0]);
    let (server, _) = stdio_server(target);
    assert_eq!(executor.program, server.canonicalize().unwrap(), "ran under the launched server");
    assert!(outputs[1].contains("Success"), "{}", outputs[1]);
    assert_eq!(read(&work.join("brand/new/added.txt")), "hello patch\n");
    assert_eq!(read(&work.join("existing.txt")), "keep\nnew line\n");
    let pids = [executor.server, executor.parent, executor.child];
    assert_eq!(still_running(&pids).await, Vec::<u32>::new(), "outlived Codex of {pids:?}");
}

/// `program` is the server itself: Codex runs `tether serve --listen stdio`, a command and a
/// patch go through it, and it ends with Codex.
async fn codex_runs_a_turn_on_an_executor_it_launches(target: Target) {
    turn_on_a_launched_executor(target, Launch::Direct, "stdio-direct").await;
}

/// `program` is a relay (`sh -c 'cat | setsid tether serve --listen stdio | cat'`): the turn
/// goes through it, and the server ends on the end of its input alone.
async fn codex_runs_a_turn_on_an_executor_behind_a_relay(target: Target) {
    turn_on_a_launched_executor(target, Launch::Relay, "stdio-relay").await;
}

/// `program` is `ssh` to a local `sshd` (the README's recipe, with the throwaway key and port
/// of a test server): the turn goes through ssh, and when Codex is gone sshd closes the remote
/// command's input and the server ends.
async fn codex_runs_a_turn_on_an_executor_it_reaches_over_ssh(target: Target) {
    let sshd = tokio::task::spawn_blocking(Sshd::start).await.unwrap().unwrap();
    turn_on_a_launched_executor(target, Launch::Ssh(&sshd), "stdio-ssh").await;
}

/// Codex killed with SIGKILL in the middle of a command sends its executor nothing: the server
/// Codex launched learns of it only from the end of its input, and ends, with the command it
/// was running and the child that command left behind.
async fn a_launched_executor_ends_when_codex_is_killed(target: Target) {
    let workspace = Workspace::new(target, "stdio-killed");
    workspace.environments(&environments(target, Launch::Direct, &workspace));
    let pids_file = workspace.work().join("pids");
    // Written whole under another name, then renamed: the test never reads half of it.
    let cmd = format!(
        "sleep 600 >/dev/null 2>&1 & echo $PPID $(cut -d' ' -f4 /proc/$PPID/stat) $$ $! > \
         {pids}.part && mv {pids}.part {pids} && exec sleep 600",
        pids = pids_file.display()
    );
    let (mut codex, _model) =
        workspace.start(Reach::Environments, vec![ToolCall::Exec { cmd }]).await;
    let pids = running_pids(&pids_file).await;

    codex.start_kill().unwrap();
    codex.wait().await.unwrap();

    assert_eq!(still_running(&pids).await, Vec::<u32>::new(), "outlived Codex of {pids:?}");
}

/// The pids a command wrote to `file`, once it has: the server, its parent, the command and
/// the child it left.
async fn running_pids(file: &Path) -> Vec<u32> {
    let what = format!("a command to write {}", file.display());
    let text =
        wait::until_some(&what, COMMAND_DEADLINE, || std::fs::read_to_string(file).ok()).await;
    let pids: Vec<u32> = text.split_whitespace().map(|pid| pid.parse().unwrap()).collect();
    assert_eq!(pids.len(), 4, "{text}");
    assert!(pids.iter().all(|&pid| common::is_alive(pid)), "running: {text}");
    pids
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
