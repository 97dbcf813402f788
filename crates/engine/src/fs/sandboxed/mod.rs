//! File operations inside a sandbox: work the intent confines runs in a helper process inside
//! the same mounts as a sandboxed command, so the kernel gives the answers (a denied write is
//! `EROFS`, a hidden file `EACCES`, a write through a link that leads out is refused, a missing
//! parent is `ENOENT`), exactly as it would to the command.
//!
//! The server side ([`run`]) starts `bwrap <mounts> -- <tether> __tether-sandbox fs`, writes
//! one [`FileOp`] as JSON to its stdin, and reads one answer from its stdout, a Unix socket. The
//! helper side ([`serve_one`]) performs the operation with the same code the in-process calls
//! use. The transport serves any [`HelperOp`]: capability discovery brings its own
//! (`crate::capabilities::sandboxed`, helper mode `discover`), so nothing here names it. Opening a file is an operation too: the helper sends the open file back as a
//! descriptor, so a sandboxed `fs/readFile` or `fs/open` reads (or writes) it here, at full
//! speed, with the access the sandbox granted when it was opened.
//!
//! A write, a new directory or a removed file at a path the sandbox would show as the host has
//! it is made here instead ([`in_place`]), with the answer the helper would give.

mod in_place;
mod op;
mod wire;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(crate) use op::{FileOp, FromOutcome, HelperOp, OpenHow, Outcome, Tried};
use wire::Answer;

use super::FsError;
use crate::sandbox::Sandboxing;
use crate::sandbox::exit_status::{BUILD_REFUSED_STATUS, CHANGED_STATUS};
use crate::sandbox::mounts::{self, Purpose};
use crate::sandbox::policy::FullPolicy;

/// The largest request the helper reads: a whole-file write of the largest file a client may
/// send, in base64, and its framing.
const MAX_REQUEST_BYTES: usize =
    tether_protocol::fs::FS_READ_FILE_MAX_BYTES as usize / 3 * 4 + 64 * 1024;

/// What the helper's stderr may add to an error message.
const MAX_STDERR_BYTES: usize = 4096;

impl HelperOp for FileOp {
    const MODE: &'static str = "fs";
    /// A full listing of the longest names with every byte escaped (`NAME_MAX` bytes at up to
    /// six each, and the JSON around them and each entry's metadata). Every other answer is
    /// smaller: a walk's is bounded at 4 MiB, and a file travels as a descriptor, not bytes.
    const MAX_ANSWER_BYTES: usize =
        tether_protocol::fs::FS_READ_DIRECTORY_MAX_ENTRIES * (255 * 6 + 192);

    fn apply(self) -> std::io::Result<Outcome> {
        self.apply_here()
    }

    /// A write, a new directory or a removed file at a path the sandbox would show as the
    /// host has it is made here ([`in_place`]).
    fn try_here(self, policy: &FullPolicy) -> impl Future<Output = Tried<Self>> + Send {
        in_place::try_here(policy, self)
    }
}

/// The helper: one operation of kind `Op` from stdin, its answer on stdout. Never returns.
pub(crate) fn serve_one<Op: HelperOp>() -> ! {
    let mut request = Vec::new();
    let read = std::io::stdin().take(MAX_REQUEST_BYTES as u64 + 1).read_to_end(&mut request);
    let (answer, file) = match read {
        Err(error) => (Answer::failed(error.into()), None),
        Ok(_) if request.len() > MAX_REQUEST_BYTES => (
            Answer::failed(FsError::other(format!("request over {MAX_REQUEST_BYTES} bytes"))),
            None,
        ),
        Ok(_) => match serde_json::from_slice::<Op>(&request) {
            Ok(op) => Answer::of(op.apply()),
            Err(error) => (Answer::failed(FsError::other(format!("bad request: {error}"))), None),
        },
    };
    let text = serde_json::to_vec(&answer).expect("an answer serialises");
    let stdout = std::io::stdout();
    if let Err(error) = wire::send(&stdout, &text, file.as_ref()) {
        let _ = writeln!(std::io::stderr(), "could not answer: {error}");
        std::process::exit(1)
    }
    std::process::exit(0)
}

/// Runs `op` inside the sandbox `policy` describes, and answers what it yields.
pub(crate) async fn run<Op: HelperOp, T: FromOutcome>(
    policy: &FullPolicy,
    op: Op,
) -> Result<T, FsError> {
    T::expect(perform(policy, op).await?)
}

async fn perform<Op: HelperOp>(policy: &FullPolicy, op: Op) -> Result<Outcome, FsError> {
    let op = match op.try_here(policy).await {
        Tried::Answered(answer) => return answer,
        Tried::Sandbox(op) => op,
    };
    let sandboxing = Sandboxing::current();
    let (Some(bwrap), Some(helper)) = (&sandboxing.bwrap, &sandboxing.helper) else {
        let why = sandboxing.unavailable().unwrap_or_default();
        return Err(FsError::other(format!("fs sandbox helper failed to start: {why}")));
    };
    let mut attempt = 1;
    loop {
        match in_sandbox(policy, &op, bwrap, helper).await {
            Attempt::Done(result) => return result,
            Attempt::Changed(_) if attempt < BUILD_ATTEMPTS => attempt += 1,
            Attempt::Changed(error) => return Err(error),
        }
    }
}

/// How many times a file operation's sandbox is built before a change under it is reported:
/// a target changes between building and checking only when something else moves it at that
/// moment (another server removing a mount target it made, a command exchanging directories
/// on purpose), so a second build almost always holds, and a third is the last word.
const BUILD_ATTEMPTS: u32 = 3;

/// One sandbox built for `op` and run.
enum Attempt {
    Done(Result<Outcome, FsError>),
    /// A mount target changed under the build ([`CHANGED_STATUS`]): nothing was done.
    Changed(FsError),
}

async fn in_sandbox<Op: HelperOp>(
    policy: &FullPolicy,
    op: &Op,
    bwrap: &Path,
    helper: &Path,
) -> Attempt {
    let (status, result) = match in_sandbox_once(policy, op, bwrap, helper).await {
        Ok(done) => done,
        Err(error) => return Attempt::Done(Err(error)),
    };
    match result {
        Err(error) if status.code() == Some(CHANGED_STATUS) => Attempt::Changed(error),
        result => Attempt::Done(result),
    }
}

/// Builds the sandbox, runs the helper in it, and returns how it exited with what it answered.
async fn in_sandbox_once<Op: HelperOp>(
    policy: &FullPolicy,
    op: &Op,
    bwrap: &Path,
    helper: &Path,
) -> Result<(ExitStatus, Result<Outcome, FsError>), FsError> {
    let plan = mounts::plan(policy, helper, std::path::Path::new("/"), Purpose::FileOperation)
        .map_err(|error| match error.refusal() {
            // In the words of the reference's helper, which will not build this sandbox either.
            Some(words) => FsError::other(format!(
                "fs sandbox helper failed with status exit status: {}: {words}",
                BUILD_REFUSED_STATUS
            )),
            None => FsError::other(format!("failed to prepare fs sandbox: {error}")),
        })?;
    let request = serde_json::to_vec(op).expect("an operation serialises");
    let (ours, theirs) = UnixStream::pair().map_err(FsError::from)?;
    ours.set_nonblocking(true).map_err(FsError::from)?;
    let ours = tokio::net::UnixStream::from_std(ours).map_err(FsError::from)?;
    let inherited: Vec<i32> = plan.fds.iter().map(AsRawFd::as_raw_fd).collect();
    let mut command = tokio::process::Command::new(bwrap);
    command
        .args(&plan.args)
        .arg("--")
        .arg(helper)
        .args(plan.helper_args())
        .arg(Op::MODE)
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::from(OwnedFd::from(theirs)))
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if !inherited.is_empty() {
        // SAFETY: system calls only: the descriptors bubblewrap reads are made inheritable.
        // Only then: a command without a hook is spawned without copying the server's memory.
        unsafe {
            command.pre_exec(move || crate::sandbox::launch::keep_across_exec(&inherited));
        }
    }
    let spawned = command.spawn();
    // The helper holds its own copies now; ours must go, or the answer would never end.
    drop(command);
    let mut child =
        spawned.map_err(|e| FsError::other(format!("fs sandbox helper failed to start: {e}")))?;
    drop(plan.fds);
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let write = async move {
        // A helper that failed to start stops reading; its status says why.
        let _ = stdin.write_all(&request).await;
    };
    let mut diagnostics = Vec::new();
    let read_errors =
        async { (&mut stderr).take(MAX_STDERR_BYTES as u64).read_to_end(&mut diagnostics).await };
    let ((), received, _) =
        tokio::join!(write, wire::receive(&ours, Op::MAX_ANSWER_BYTES), read_errors);
    let status = child.wait().await.map_err(FsError::from)?;
    // The plan's mount targets are let go only now that the helper is gone.
    drop(plan.synthetic);
    let failed = || {
        FsError::other(format!(
            "fs sandbox helper failed with status {status}: {}",
            String::from_utf8_lossy(&diagnostics).trim()
        ))
    };
    let (answer, file) = received.map_err(|e| FsError::other(format!("fs sandbox helper: {e}")))?;
    let result = match serde_json::from_slice::<Answer>(&answer) {
        Ok(answer) => {
            in_place::prove();
            answer.into_outcome(file)
        }
        Err(_) => Err(failed()),
    };
    Ok((status, result))
}
