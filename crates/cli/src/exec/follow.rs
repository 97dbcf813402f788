//! Following a command to its end: its output written here, our input, signals and window
//! size sent to it, a link that drops and comes back said at a terminal, and its exit code
//! (or why it could not be followed) as `tether exec`'s.

use std::io::Write as _;
use std::time::Duration;

use anyhow::bail;
use tether_client::{
    ConnectionStatus, ExecServerClient, ProcessControl, ProcessFailure, ProcessFailureKind,
    ProcessUpdate, RemoteProcess,
};
use tether_engine::ProcessEvent;
use tether_protocol::process::{ExecOutputStream, ProcessSignal};
use tokio::sync::mpsc;

use super::input::{InputEnd, forward_stdin};
use super::terminal::{RawTerminal, local_terminal_size, next_window_change};
use super::{ExecArgs, TETHER_FAILURE, again};

/// How long a command whose output nobody reads any more (our stdout closed: `| head`) is
/// given to end after it is told to, before `tether exec` leaves anyway; the server kills it
/// meanwhile either way.
const ABANDONED_COMMAND_GRACE: Duration = Duration::from_secs(2);

/// Follows `process` on `client` (reached at `url`) until it closes; returns its exit code.
pub(super) async fn follow(
    args: &ExecArgs,
    url: &str,
    client: ExecServerClient,
    mut process: RemoteProcess,
) -> anyhow::Result<i32> {
    let extensions = client.tether_extensions();
    let resizable = extensions.pty_size;
    let input_end = InputEnd::of(args.tty, extensions.close_stdin);

    // On a PTY the remote terminal echoes and interprets keys; ours must pass them through.
    let mut raw = if args.tty { RawTerminal::enable() } else { None };
    // And it follows our window's size, where the server can.
    let mut window_changes = match args.tty && resizable {
        true => tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok(),
        false => None,
    };
    // Signals sent to us go to the command, where the server can deliver them.
    let mut forwarded = forward_signals(&extensions.signals);
    // Calls on the process run in tasks of their own, never in this loop: while our stdout
    // is stalled the connection is paused, and an answer waited for here would never come.
    let (failed_calls, mut call_failures) = mpsc::unbounded_channel::<anyhow::Error>();
    let control = process.control();
    if !args.no_stdin {
        spawn_call(&failed_calls, forward_stdin(control.clone(), input_end));
    }
    let mut exit_code = None;
    let mut interrupted = false;
    // At a terminal, a link that goes down (and comes back) is said, as mosh says it: the
    // screen would otherwise just freeze. Scripts' stderr is left alone.
    let tell_link = args.tty && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut link = client.status_changes();
    loop {
        tokio::select! {
            Some(status) = link.next(), if tell_link => match status {
                ConnectionStatus::Recovering => {
                    eprint!("\r\n[tether: the connection to {url} dropped; reconnecting…]\r\n");
                }
                ConnectionStatus::Connected => eprint!("\r\n[tether: reconnected]\r\n"),
                ConnectionStatus::Failed(_) => {}
            },
            update = process.next_update() => match update {
                Some(ProcessUpdate::Event(event)) => match event {
                    ProcessEvent::Output { stream, chunk, .. } => match write_out(stream, &chunk) {
                        Ok(()) => {}
                        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                            // Dying of SIGPIPE skips destructors: give the terminal back first.
                            drop(raw.take());
                            return Ok(abandon(control.clone(), &mut process).await);
                        }
                        Err(error) => {
                            return Err(anyhow::Error::new(error).context("cannot write the command's output here"));
                        }
                    },
                    ProcessEvent::Exited { exit_code: code, .. } => exit_code = Some(code),
                    ProcessEvent::Closed { .. } => return Ok(exit_code.unwrap_or(TETHER_FAILURE)),
                },
                Some(ProcessUpdate::Failed(failure)) => {
                    return Err(unfollowable(failure, args, url, &client, &process));
                }
                None => bail!("the process's stream ended without a close"),
            },
            Some(error) = call_failures.recv() => return Err(error),
            Some(()) = next_window_change(&mut window_changes) => {
                if let Some(size) = local_terminal_size() {
                    let control = control.clone();
                    // A resize that fails (the process just ended) changes nothing worth a word.
                    tokio::spawn(async move { control.resize(size.cols, size.rows).await });
                }
            }
            Some(signal) = forwarded.recv() => {
                let control = control.clone();
                spawn_call(&failed_calls, async move { Ok(control.signal(signal).await?) });
            }
            _ = tokio::signal::ctrl_c() => {
                let control = control.clone();
                if interrupted {
                    spawn_call(&failed_calls, async move { Ok(control.terminate().await.map(drop)?) });
                } else {
                    // First Ctrl-C goes to the command, as it would at a local terminal.
                    interrupted = true;
                    spawn_call(&failed_calls, async move { Ok(control.interrupt().await?) });
                }
            }
        }
    }
}

/// Why `process` can no longer be followed, said on the failure's kind: a server that shut
/// down took the command with it; a lost session may have left it running, so the command
/// that reattaches comes with it; any other failure in its own words.
fn unfollowable(
    failure: ProcessFailure,
    args: &ExecArgs,
    url: &str,
    client: &ExecServerClient,
    process: &RemoteProcess,
) -> anyhow::Error {
    match failure.kind {
        ProcessFailureKind::SessionLost { server_went_away: true } => anyhow::anyhow!(
            "the server at {url} shut down, and the command was stopped with it; run it again once the server is back"
        ),
        ProcessFailureKind::SessionLost { server_went_away: false } => {
            // The session's reason, without the process's name in front of it.
            let why = match client.status() {
                ConnectionStatus::Failed(lost) => lost.reason,
                _ => failure.message,
            };
            anyhow::anyhow!(
                "lost the connection: {why}. The command may still be running; reattach with: {} --resume {} --process {}",
                again(args),
                client.session_id(),
                process.process_id()
            )
        }
        _ => anyhow::anyhow!("{failure}"),
    }
}

/// Our stdout is closed (`tether exec … | head`): nobody reads the command's output any more.
/// As ssh does, end the command (terminate it, not leave it burning CPU on the executor), then
/// die of SIGPIPE quietly, so a shell pipeline sees what it would of a local command.
async fn abandon(control: ProcessControl, process: &mut RemoteProcess) -> i32 {
    let ended = async {
        let _ = control.terminate().await;
        // Its remaining output goes nowhere; wait for the server to say it is gone.
        while let Some(ProcessUpdate::Event(event)) = process.next_update().await {
            if matches!(event, ProcessEvent::Closed { .. }) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(ABANDONED_COMMAND_GRACE, ended).await;
    // SAFETY: restoring a signal's default disposition and raising it are async-signal-safe
    // and touch no memory of ours; the process ends here.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // Only if SIGPIPE is blocked: exit as a shell reports death by it.
    128 + libc::SIGPIPE
}

/// Runs a call on the process in a task of its own; its failure, if any, goes to `failed`,
/// which ends `tether exec` with it.
fn spawn_call(
    failed: &mpsc::UnboundedSender<anyhow::Error>,
    call: impl std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
) {
    let failed = failed.clone();
    tokio::spawn(async move {
        if let Err(error) = call.await {
            let _ = failed.send(error);
        }
    });
}

/// Forwards SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to `tether exec` to the
/// command, for those the server delivers (`tetherExtensions.signals`); the others keep their
/// default action here, which ends `tether exec` and leaves the command running.
/// (SIGINT has its own handling: the first goes to the command, the second terminates it.)
fn forward_signals(delivered: &[ProcessSignal]) -> mpsc::UnboundedReceiver<ProcessSignal> {
    use tokio::signal::unix::{SignalKind, signal};
    let (sender, receiver) = mpsc::unbounded_channel();
    let kinds = [
        (ProcessSignal::Terminate, SignalKind::terminate()),
        (ProcessSignal::Hangup, SignalKind::hangup()),
        (ProcessSignal::Quit, SignalKind::quit()),
        (ProcessSignal::User1, SignalKind::user_defined1()),
        (ProcessSignal::User2, SignalKind::user_defined2()),
    ];
    for (name, kind) in kinds {
        if !delivered.contains(&name) {
            continue;
        }
        let Ok(mut arrivals) = signal(kind) else { continue };
        let sender = sender.clone();
        tokio::spawn(async move {
            while arrivals.recv().await.is_some() {
                if sender.send(name).is_err() {
                    break;
                }
            }
        });
    }
    receiver
}

/// Writes a chunk of the command's output where it belongs here: stderr's to our stderr, the
/// rest (stdout, a terminal's) to our stdout, each flushed at once so that what a person
/// sees keeps up with the command.
fn write_out(stream: ExecOutputStream, bytes: &[u8]) -> std::io::Result<()> {
    match stream {
        ExecOutputStream::Stderr => {
            let mut stderr = std::io::stderr().lock();
            stderr.write_all(bytes)?;
            stderr.flush()?;
        }
        ExecOutputStream::Stdout | ExecOutputStream::Pty => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(bytes)?;
            stdout.flush()?;
        }
    }
    Ok(())
}
