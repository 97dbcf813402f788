//! Taking a snapshot: the command's own shell, started exactly as the command would be (same
//! environment, cwd and sandbox) but with a capture script instead of the command's, runs the
//! user's interactive startup file and prints its state.
//!
//! The script's output is the state, then the environment, each after a marker:
//! `\0TETHER-SNAPSHOT-STATE\0<shell source>\0TETHER-SNAPSHOT-ENV\0<NAME=VALUE\0>…`. The startup
//! file's own output goes to `/dev/null`, so nothing it prints can pass for state. Everything is
//! bounded: the output, the state within it, and the time.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tether_protocol::process::ExecParams;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::{Shell, Snapshot};
use crate::process_table::ProcessTable;

/// The largest state restored: functions, aliases and options of a heavily customised shell
/// are tens of kilobytes.
pub(super) const MAX_STATE_BYTES: usize = 512 * 1024;
/// The largest capture read: the state, the environment (exported values may be long), and
/// their markers.
const MAX_OUTPUT_BYTES: usize = 8 * MAX_STATE_BYTES;
/// How long a startup may take. Interactive startup files that wait on the network or a
/// prompt never finish; the command then runs without a snapshot.
const TIMEOUT: Duration = Duration::from_secs(10);
/// What the startup's stderr may cost while it is drained.
const MAX_DRAINED_BYTES: u64 = 64 * 1024;

const STATE_MARKER: &[u8] = b"\0TETHER-SNAPSHOT-STATE\0";
const ENV_MARKER: &[u8] = b"\0TETHER-SNAPSHOT-ENV\0";

/// Variables that describe the capturing shell, not the user's setup.
const SHELL_OWN: [&str; 3] = ["_", "PWD", "OLDPWD"];

/// Options a shell reports but refuses to have set: restoring them would fail.
const READ_ONLY_OPTIONS: [&str; 9] = [
    "shopt -s login_shell",
    "shopt -u login_shell",
    "shopt -s restricted_shell",
    "shopt -u restricted_shell",
    "setopt login",
    "setopt interactive",
    "setopt shinstdin",
    "setopt privileged",
    "setopt zle",
];

/// Why a capture gave nothing (logged; the command runs without a snapshot).
#[derive(Debug, thiserror::Error)]
pub(super) enum CaptureError {
    #[error("no `env` program to print the environment with")]
    NoEnvProgram,
    #[error("the shell could not be started: {0}")]
    Start(String),
    #[error("the startup took longer than {}s", TIMEOUT.as_secs())]
    TimedOut,
    #[error("the capture printed more than {MAX_OUTPUT_BYTES} bytes")]
    TooLarge,
    #[error("the state is over {MAX_STATE_BYTES} bytes")]
    StateTooLarge,
    #[error("the capture exited with status {0}")]
    Failed(i32),
    #[error("the capture's output has no state: the startup file may exit or exec")]
    Malformed,
    #[error("reading the capture failed: {0}")]
    Read(#[from] std::io::Error),
}

/// Captures the state of `shell` as `params` would start it.
pub(super) async fn capture(
    table: &ProcessTable,
    params: &ExecParams,
    shell: Shell,
) -> Result<Snapshot, CaptureError> {
    let env_program = ["/usr/bin/env", "/bin/env"]
        .into_iter()
        .find(|path| Path::new(path).is_file())
        .ok_or(CaptureError::NoEnvProgram)?;
    let mut capturing = params.clone();
    capturing.argv.truncate(3);
    capturing.argv[2] = script(shell, env_program);
    capturing.tty = false;
    capturing.pipe_stdin = false;
    let mut spawned =
        table.spawn_unlisted(&capturing).map_err(|error| CaptureError::Start(error.to_string()))?;
    let pid = spawned.pid;
    let mut stdout = std::mem::replace(&mut spawned.primary, Box::new(tokio::io::empty()));
    let stderr = spawned.secondary.take();
    let read = async {
        let mut output = Vec::new();
        let drain = async {
            if let Some(stderr) = stderr {
                drain(stderr).await;
            }
        };
        let mut limited = (&mut stdout).take(MAX_OUTPUT_BYTES as u64 + 1);
        let (read, ()) = tokio::join!(limited.read_to_end(&mut output), drain);
        read?;
        let status = spawned.child.wait().await?;
        Ok::<_, CaptureError>((output, status))
    };
    let (output, status) = match tokio::time::timeout(TIMEOUT, read).await {
        Ok(read) => read?,
        Err(_) => {
            // The whole group: the startup may have started children of its own.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            return Err(CaptureError::TimedOut);
        }
    };
    if output.len() > MAX_OUTPUT_BYTES {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        return Err(CaptureError::TooLarge);
    }
    if !status.success() {
        return Err(CaptureError::Failed(status.code().unwrap_or(-1)));
    }
    parse(&output, shell)
}

/// Reads and discards `reader` up to a bound, so the capture never blocks on a full pipe.
async fn drain(reader: impl AsyncRead + Unpin) {
    let mut sink = Vec::new();
    let _ = reader.take(MAX_DRAINED_BYTES).read_to_end(&mut sink).await;
}

/// The capture script for `shell`: the interactive startup file, then the state, then the
/// environment through `env`.
///
/// Builtins are called as `builtin …` where the shell has it, because the startup file may
/// define functions of any name. The startup file is sourced as the shell's interactive
/// startup would read it, in this non-interactive shell: one that returns early when not
/// interactive contributes nothing, as with the reference.
fn script(shell: Shell, env_program: &str) -> String {
    let state = match shell {
        Shell::Bash => {
            "if [ -r \"$HOME/.bashrc\" ]; then . \"$HOME/.bashrc\"; fi </dev/null >/dev/null 2>&1\n\
             builtin printf '\\0%s\\0' TETHER-SNAPSHOT-STATE\n\
             builtin declare -f\n\
             builtin alias -p\n\
             builtin shopt -p\n\
             builtin set +o\n"
        }
        Shell::Zsh => {
            "if [ -r \"${ZDOTDIR:-$HOME}/.zshrc\" ]; then . \"${ZDOTDIR:-$HOME}/.zshrc\"; fi </dev/null >/dev/null 2>&1\n\
             builtin printf '\\0%s\\0' TETHER-SNAPSHOT-STATE\n\
             builtin typeset -f\n\
             builtin alias -L\n\
             builtin setopt | while builtin read -r option; do builtin print -r -- \"setopt $option\"; done\n"
        }
        Shell::Sh => {
            "if [ -n \"${ENV:-}\" ] && [ -r \"$ENV\" ]; then . \"$ENV\"; fi </dev/null >/dev/null 2>&1\n\
             command printf '\\0%s\\0' TETHER-SNAPSHOT-STATE\n\
             command alias\n"
        }
    };
    // `sh` has no `builtin`; there `command` skips functions. `env` runs as a child, not by
    // `exec`: an `exec` lowers `SHLVL`, and the level is part of the state.
    let call = if shell == Shell::Sh { "command" } else { "builtin command" };
    let marker = if shell == Shell::Sh { "command printf" } else { "builtin printf" };
    format!("{state}{marker} '\\0%s\\0' TETHER-SNAPSHOT-ENV\n{call} {env_program} -0\n")
}

/// The snapshot in a capture's output.
fn parse(output: &[u8], shell: Shell) -> Result<Snapshot, CaptureError> {
    let state_at = find(output, STATE_MARKER).ok_or(CaptureError::Malformed)?;
    let after_state = &output[state_at + STATE_MARKER.len()..];
    let env_at = find(after_state, ENV_MARKER).ok_or(CaptureError::Malformed)?;
    let state = String::from_utf8_lossy(&after_state[..env_at]);
    let state = restorable(&state, shell);
    if state.len() > MAX_STATE_BYTES {
        return Err(CaptureError::StateTooLarge);
    }
    let mut environment = BTreeMap::new();
    for entry in after_state[env_at + ENV_MARKER.len()..].split(|byte| *byte == 0) {
        let Ok(entry) = std::str::from_utf8(entry) else { continue };
        let Some((name, value)) = entry.split_once('=') else { continue };
        if name.is_empty()
            || SHELL_OWN.contains(&name)
            || name.starts_with(super::restore::STATE_VARIABLE)
        {
            continue;
        }
        environment.insert(name.to_owned(), value.to_owned());
    }
    Ok(Snapshot { state, environment })
}

/// The state with what cannot be restored left out, and for `sh`, alias lines made commands
/// (some `sh`s print `name='value'` without `alias`).
fn restorable(state: &str, shell: Shell) -> String {
    let mut out = String::with_capacity(state.len());
    for line in state.lines() {
        if READ_ONLY_OPTIONS.contains(&line.trim()) {
            continue;
        }
        if shell == Shell::Sh && !line.is_empty() && !line.starts_with("alias ") {
            out.push_str("alias ");
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_splits_into_state_and_environment() {
        let output = b"noise\0TETHER-SNAPSHOT-STATE\0f () \n{ \n    echo\n}\nshopt -s login_shell\nshopt -s extglob\n\0TETHER-SNAPSHOT-ENV\0A=1\0B=x=y\0_=/usr/bin/env\0SHLVL=2\0not an entry\0";
        let snapshot = parse(output, Shell::Bash).unwrap();
        assert_eq!(snapshot.state, "f () \n{ \n    echo\n}\nshopt -s extglob\n");
        let names: Vec<_> = snapshot.environment.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            names,
            ["A=1", "B=x=y", "SHLVL=2"],
            "the level is kept: the restored shell counts on"
        );
        assert!(matches!(parse(b"no markers", Shell::Bash), Err(CaptureError::Malformed)));
    }

    #[test]
    fn sh_aliases_become_commands() {
        assert_eq!(
            restorable("ll='ls -l'\nalias la='ls -a'\n", Shell::Sh),
            "alias ll='ls -l'\nalias la='ls -a'\n"
        );
    }
}
