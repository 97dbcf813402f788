//! Writing a command's results to stdout, where the reader may go away (`tether mcp tools |
//! head -1`): a closed stdout is not a failure to report, and never a panic (`println!`
//! panics there). The command stops writing and exits as a program killed by SIGPIPE exits,
//! so a shell pipeline sees what it would of a local command.

use std::io::Write as _;

/// The exit code a shell reports for a command killed by SIGPIPE (128 + 13).
pub const CLOSED_STDOUT_EXIT: i32 = 128 + libc::SIGPIPE;

/// Writes `text` to stdout as it is. A closed stdout is an error of kind `BrokenPipe`, which
/// [`is_closed`] recognises.
pub fn write(text: &[u8]) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text)?;
    stdout.flush()
}

/// Writes `line` and a newline to stdout (see [`write`]).
pub fn line(line: impl std::fmt::Display) -> std::io::Result<()> {
    write(format!("{line}\n").as_bytes())
}

/// Whether `error` is stdout closed by its reader, the one failure a command ends quietly on.
pub fn is_closed(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|error| error.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
