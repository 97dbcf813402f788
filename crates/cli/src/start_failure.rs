//! Why `tether exec` could not start its command, in a person's terms and with a shell's exit
//! codes: a `--cwd` that is not a directory there, a command that is not there (127) or
//! cannot be run there (126).

use tether_client::{ClientError, ExecServerClient};
use tether_engine::fs::{FileSystem as _, FsErrorKind};
use tether_protocol::PathUri;
use tether_protocol::error::INTERNAL_ERROR;
use tether_protocol::fs::{FsGetMetadataParams, FsGetMetadataResponse};
use tether_protocol::process::{ExecParams, SpawnFailureKind};

/// The exit code for a command that is not there, as a shell (and ssh) uses.
const COMMAND_NOT_FOUND: i32 = 127;

/// The exit code for a command that is there but cannot be run, as a shell uses.
const COMMAND_NOT_RUNNABLE: i32 = 126;

/// Why `process/start` failed, in a person's terms: a `--cwd` that is not a directory there,
/// or a command that is not there (exit code 127, as a shell's) or cannot run there (126).
/// Decided on the kind the server gives the failure (`error.data.kind`); a server that gives
/// none (Codex before 0.171) is asked about the paths instead. Never decided on the server's
/// words, which differ between servers and C libraries.
pub async fn explain(
    client: &ExecServerClient,
    params: &ExecParams,
    error: ClientError,
) -> anyhow::Error {
    if error.code() != Some(INTERNAL_ERROR) {
        return anyhow::Error::new(error).context("the server refused to start the command");
    }
    // The working directory is the caller's own mistake, named as such whatever the kind.
    let cwd = params.cwd.to_path().unwrap_or_default().display().to_string();
    match metadata(client, &params.cwd).await {
        Some(Err(FsErrorKind::NotFound)) => {
            return anyhow::anyhow!("--cwd {cwd}: no such directory on the executor");
        }
        Some(Ok(found)) if !found.is_directory => {
            return anyhow::anyhow!("--cwd {cwd}: not a directory on the executor");
        }
        _ => {}
    }
    let program = params.argv.first().cloned().unwrap_or_default();
    match error.spawn_failure() {
        Some(kind) => by_kind(kind, &program, params.tty, error),
        None => by_probe(client, &program, &cwd, error).await,
    }
}

/// The failure as the server classified it.
fn by_kind(kind: SpawnFailureKind, program: &str, tty: bool, error: ClientError) -> anyhow::Error {
    let bare = !program.contains('/');
    let words = server_words(&error);
    match kind {
        SpawnFailureKind::SpawnNotFound if bare => not_on_path(program),
        // The file, or the interpreter its `#!` line names: `execve` says the same of both.
        SpawnFailureKind::SpawnNotFound => not_found(
            program,
            "not found on the executor (no such file, or no interpreter its #! line names)",
        ),
        SpawnFailureKind::SpawnPermissionDenied => cannot_run(program, &words),
        // A terminal start looks a bare name up itself, and fails as `spawnFailed` when no
        // candidate on the `PATH` would run (the words list them): not found, as a shell says.
        SpawnFailureKind::SpawnFailed if tty && bare => {
            not_found(program, &format!("command not found on the executor ({words})"))
        }
        SpawnFailureKind::SpawnFailed => cannot_run(program, &words),
        SpawnFailureKind::SandboxUnavailable | SpawnFailureKind::SandboxPreparation => {
            anyhow::Error::new(error).context("the executor could not sandbox the command")
        } // A forwarded connection's kinds, which no process start gives.
        SpawnFailureKind::ConnectRefused | SpawnFailureKind::ConnectFailed => {
            anyhow::Error::new(error)
        }
    }
}

/// The failure decided by asking the executor whether the program's path is there, for a
/// server that does not classify its failures.
async fn by_probe(
    client: &ExecServerClient,
    program: &str,
    cwd: &str,
    error: ClientError,
) -> anyhow::Error {
    let path = match program.contains('/') {
        true => Some(std::path::Path::new(cwd).join(program)),
        false => None,
    };
    let exists = match &path {
        Some(path) => match PathUri::from_path(path) {
            Some(uri) => metadata(client, &uri).await.map(|found| found.is_ok()),
            None => None,
        },
        None => Some(false),
    };
    match (exists, path) {
        (Some(false), None) => not_on_path(program),
        (Some(false), Some(_)) => not_found(program, "no such file on the executor"),
        (Some(true), Some(_)) => cannot_run(program, &server_words(&error)),
        _ => anyhow::Error::new(error).context("the server could not start the command"),
    }
}

fn not_on_path(program: &str) -> anyhow::Error {
    not_found(program, "command not found on the executor (not on its PATH)")
}

/// A command that is not there (127), saying `why`; a program name that is really a shell
/// command line (`tether exec -- 'ls / | wc -l'`, as ssh would take it) says how to run it.
fn not_found(program: &str, why: &str) -> anyhow::Error {
    let message = match program.contains(SHELL_SYNTAX) {
        false => format!("{program}: {why}"),
        true => {
            let quoted = format!("'{}'", program.replace('\'', r"'\''"));
            format!(
                "{program}: no such program on the executor (it reads as a shell command line); to run it through a shell: tether exec -- sh -c {quoted}"
            )
        }
    };
    ExitWith::error(COMMAND_NOT_FOUND, message)
}

/// Characters no program name holds, but a shell command line does.
const SHELL_SYNTAX: &[char] = &[' ', '\t', '|', '&', ';', '<', '>', '(', ')', '$', '`', '*', '?'];

fn cannot_run(program: &str, words: &str) -> anyhow::Error {
    ExitWith::error(
        COMMAND_NOT_RUNNABLE,
        format!("{program}: cannot be run on the executor ({words})"),
    )
}

/// The server's message for a refusal, without the client's framing.
fn server_words(error: &ClientError) -> String {
    match error {
        ClientError::Server { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// What the executor says of `path` (`None`: it could not be asked).
async fn metadata(
    client: &ExecServerClient,
    path: &PathUri,
) -> Option<Result<FsGetMetadataResponse, FsErrorKind>> {
    let params = FsGetMetadataParams {
        path: path.clone(),
        follow_symlinks: None,
        include_mode: None,
        sandbox: None,
    };
    match client.get_metadata(params).await {
        Ok(found) => Some(Ok(found)),
        Err(error) if error.kind == FsErrorKind::NotFound => Some(Err(FsErrorKind::NotFound)),
        Err(error) if error.kind == FsErrorKind::Other => Some(Err(FsErrorKind::Other)),
        Err(_) => None,
    }
}

/// A failure of `tether exec` that exits with a code of its own (127, 126), not 255.
#[derive(Debug)]
pub struct ExitWith {
    pub code: i32,
    message: String,
}

impl ExitWith {
    fn error(code: i32, message: String) -> anyhow::Error {
        anyhow::Error::new(Self { code, message })
    }
}

impl std::fmt::Display for ExitWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExitWith {}
