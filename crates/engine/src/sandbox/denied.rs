//! `sandboxDenied`: whether a sandboxed command's failure looks like the sandbox's doing.
//!
//! A guess from the exit code and the output's words, as the reference guesses, so a client
//! that asks the user to rerun a command unsandboxed asks at the same moments. Computed once,
//! at exit; always false for a process started without a sandbox.

/// How much of each stream's end is searched for the words.
pub const SEARCHED_TAIL_BYTES: usize = 1024 * 1024;

/// Words in the output that say the sandbox refused something.
const KEYWORDS: [&str; 7] = [
    "operation not permitted",
    "permission denied",
    "read-only file system",
    "seccomp",
    "sandbox",
    "landlock",
    "failed to write file",
];

/// 128 + SIGSYS: the kernel killed the command for a forbidden system call.
const KILLED_BY_SECCOMP: i32 = 159;

/// The guess, from the exit code and the ends of the command's stdout (or terminal) and
/// stderr.
pub fn looks_denied(exit_code: i32, stdout: &[u8], stderr: &[u8]) -> bool {
    if exit_code == 0 {
        return false;
    }
    // Both streams together: a word in either is in both, and so is one split across them.
    let mut both = Vec::with_capacity(stdout.len() + stderr.len());
    both.extend_from_slice(stdout);
    both.extend_from_slice(stderr);
    // Without the words, only a seccomp kill counts: any other failure (2, 126 and 127, "not
    // found" and "bad usage", included) is the command's own.
    mentions_refusal(&both) || exit_code == KILLED_BY_SECCOMP
}

fn mentions_refusal(text: &[u8]) -> bool {
    let lower = text.to_ascii_lowercase();
    KEYWORDS.iter().any(|word| memchr::memmem::find(&lower, word.as_bytes()).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_references_cases() {
        assert!(!looks_denied(0, b"", b"Permission denied"));
        assert!(looks_denied(1, b"", b"touch: cannot touch '/x': Read-only file system"));
        assert!(looks_denied(2, b"Operation NOT permitted", b""));
        assert!(looks_denied(127, b"", b"sandbox"));
        assert!(looks_denied(159, b"", b""));
        for code in [1, 2, 126, 127, 137, 139, 143] {
            assert!(!looks_denied(code, b"plain failure", b""), "{code}");
        }
    }

    #[test]
    fn a_word_split_across_the_streams_still_counts() {
        assert!(looks_denied(1, b"permission ", b"denied"));
    }
}
