//! File operations inside a sandbox: a write the intent confines runs in a helper process
//! inside the same mounts as a sandboxed command, so the kernel gives the answers (a denied
//! write is `EROFS`, a write through a link that leads out is refused, a missing parent is
//! `ENOENT`), exactly as it would to the command.
//!
//! The server side ([`run`]) starts `bwrap <mounts> -- <tether> __tether-sandbox fs`, writes
//! one [`FileOp`] as JSON to its stdin, and reads one [`Answer`] from its stdout. The helper
//! side ([`serve_one`]) performs the operation with the same code the in-process calls use.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Stdio;

use serde::{Deserialize, Serialize};
use tether_protocol::ByteChunk;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{FsError, copy, directory, regular_file, remove};
use crate::sandbox::Sandboxing;
use crate::sandbox::inner::HELPER_ARG;
use crate::sandbox::mounts::{self, Purpose};
use crate::sandbox::policy::FullPolicy;

/// The largest request the helper reads: a whole-file write of the largest file a client may
/// send, in base64, and its framing.
const MAX_REQUEST_BYTES: usize =
    tether_protocol::fs::FS_READ_FILE_MAX_BYTES as usize / 3 * 4 + 64 * 1024;

/// What the helper's stderr may add to an error message.
const MAX_STDERR_BYTES: usize = 4096;

/// One operation, as the helper receives it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub(crate) enum FileOp {
    WriteFile { path: PathBuf, data: ByteChunk, follow: bool },
    CreateDirectory { path: PathBuf, recursive: bool, follow: bool },
    Remove { path: PathBuf, recursive: bool, force: bool, follow: bool },
    Copy { source: PathBuf, destination: PathBuf, recursive: bool },
}

/// What the helper answers: success, or the OS error (by number, so its text and kind are the
/// kernel's), or another error's text.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    errno: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

impl FileOp {
    pub(crate) fn apply(self) -> std::io::Result<()> {
        match self {
            FileOp::WriteFile { path, data, follow } => {
                regular_file::write_whole(&path, &data.0, follow)
            }
            FileOp::CreateDirectory { path, recursive, follow } => {
                directory::create(&path, recursive, follow)
            }
            FileOp::Remove { path, recursive, force, follow } => {
                remove::remove(&path, recursive, force, follow)
            }
            FileOp::Copy { source, destination, recursive } => {
                copy::copy(&source, &destination, recursive)
            }
        }
    }
}

/// The helper: one operation from stdin, its answer on stdout. Never returns.
pub fn serve_one() -> ! {
    let mut request = Vec::new();
    let read = std::io::stdin().take(MAX_REQUEST_BYTES as u64 + 1).read_to_end(&mut request);
    let answer = match read {
        Err(error) => Answer::failed(&error),
        Ok(_) if request.len() > MAX_REQUEST_BYTES => {
            Answer::message(format!("request over {MAX_REQUEST_BYTES} bytes"))
        }
        Ok(_) => match serde_json::from_slice::<FileOp>(&request) {
            Ok(op) => match op.apply() {
                Ok(()) => Answer { ok: true, errno: None, message: None },
                Err(error) => Answer::failed(&error),
            },
            Err(error) => Answer::message(format!("bad request: {error}")),
        },
    };
    let text = serde_json::to_vec(&answer).expect("an answer serialises");
    let _ = std::io::stdout().write_all(&text);
    std::process::exit(0)
}

impl Answer {
    fn failed(error: &std::io::Error) -> Self {
        match error.raw_os_error() {
            Some(errno) => Answer { ok: false, errno: Some(errno), message: None },
            None => Answer::message(error.to_string()),
        }
    }

    fn message(message: String) -> Self {
        Answer { ok: false, errno: None, message: Some(message) }
    }
}

/// Runs `op` inside the sandbox `policy` describes.
pub(crate) async fn run(policy: &FullPolicy, op: FileOp) -> Result<(), FsError> {
    let sandboxing = Sandboxing::current();
    let (Some(bwrap), Some(helper)) = (&sandboxing.bwrap, &sandboxing.helper) else {
        let why = sandboxing.unavailable().unwrap_or_default();
        return Err(FsError::other(format!("fs sandbox helper failed to start: {why}")));
    };
    let plan = mounts::plan(policy, helper, std::path::Path::new("/"), Purpose::FileOperation)
        .map_err(|e| FsError::other(format!("failed to prepare fs sandbox: {e}")))?;
    let request = serde_json::to_vec(&op).expect("an operation serialises");
    let inherited: Vec<i32> = plan.data_fds.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
    let mut command = tokio::process::Command::new(bwrap);
    command
        .args(&plan.args)
        .arg("--")
        .arg(helper)
        .arg(HELPER_ARG)
        .arg("fs")
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: system calls only: the descriptors bubblewrap reads are made inheritable.
    unsafe {
        command.pre_exec(move || crate::sandbox::launch::keep_across_exec(&inherited));
    }
    let mut child = command
        .spawn()
        .map_err(|e| FsError::other(format!("fs sandbox helper failed to start: {e}")))?;
    drop(plan.data_fds);
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let write = async move {
        // A helper that failed to start stops reading; its status says why.
        let _ = stdin.write_all(&request).await;
    };
    let mut answer = Vec::new();
    let mut diagnostics = Vec::new();
    let read = async { stdout.read_to_end(&mut answer).await };
    let read_errors =
        async { (&mut stderr).take(MAX_STDERR_BYTES as u64).read_to_end(&mut diagnostics).await };
    let ((), _, _) = tokio::join!(write, read, read_errors);
    let status = child.wait().await.map_err(FsError::from)?;
    // The plan's mount targets are let go only now that the helper is gone.
    drop(plan.synthetic);
    match serde_json::from_slice::<Answer>(&answer) {
        Ok(Answer { ok: true, .. }) => Ok(()),
        Ok(Answer { errno: Some(errno), .. }) => {
            Err(FsError::from(std::io::Error::from_raw_os_error(errno)))
        }
        Ok(Answer { message, .. }) => Err(FsError::other(message.unwrap_or_default())),
        Err(_) => Err(FsError::other(format!(
            "fs sandbox helper failed with status {status}: {}",
            String::from_utf8_lossy(&diagnostics).trim()
        ))),
    }
}
