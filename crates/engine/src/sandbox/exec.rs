//! Executing a sandboxed command in a forked child the way the reference's sandbox helper does:
//! `execvp`, found on `PATH`, but never retried with `/bin/sh`.
//!
//! glibc's `execvp` runs an executable that has no `#!` line (`ENOEXEC`) with `/bin/sh`; the
//! reference's helper is built on musl, whose `execvp` does not, so such a file fails with
//! "Exec format error" under every sandbox intent. `std::process::Command` execs with glibc's
//! `execvp`, so a child that must run code between `fork` and `exec` (a seccomp filter) execs
//! with [`PreparedExec::exec`] from its `pre_exec` hook instead.
//!
//! Everything the child needs is built before the fork ([`PreparedExec::new`]): after it, the
//! child may only make system calls.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString, c_char};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::exec_setup::{c_string, env_strings, null_terminated};

/// The search path when the environment has no `PATH`: musl's, which the reference's helper
/// uses.
const DEFAULT_SEARCH_PATH: &str = "/usr/local/bin:/bin:/usr/bin";

/// A command ready to be executed in a forked child.
pub struct PreparedExec {
    /// The paths to try, in order: the program itself if it names a path, else the program in
    /// each directory of the search path.
    candidates: Vec<CString>,
    /// `argv`, ending in a null pointer; the pointers point into `_argv`.
    argv: Vec<*const c_char>,
    _argv: Vec<CString>,
    /// The environment, ending in a null pointer (pointing into `_env`); `None`: the
    /// environment of the process that execs.
    env: Option<Vec<*const c_char>>,
    _env: Vec<CString>,
}

// SAFETY: the raw pointers point into the `CString`s this value owns, which never move or
// change once built; sharing or sending the whole is as safe as sharing the strings.
unsafe impl Send for PreparedExec {}
// SAFETY: as for `Send`: nothing is ever written through the pointers.
unsafe impl Sync for PreparedExec {}

impl PreparedExec {
    /// Prepares `program` (a path, or a name found on the search path `search`, else on
    /// [`DEFAULT_SEARCH_PATH`]) run with `arg0` and `args`, in `env` (`None`: the environment
    /// of the process that execs). Fails if a string holds a NUL byte.
    pub fn new(
        program: &OsStr,
        arg0: &OsStr,
        args: &[OsString],
        env: Option<&BTreeMap<String, String>>,
        search: Option<&OsStr>,
    ) -> io::Result<Self> {
        let candidates = if program.is_empty() {
            // Nothing to try: an empty name is not found.
            Vec::new()
        } else if program.as_bytes().contains(&b'/') {
            vec![c_string(program)?]
        } else {
            let search = search.unwrap_or(OsStr::new(DEFAULT_SEARCH_PATH));
            search
                .as_bytes()
                .split(|&b| b == b':')
                // An empty entry is the current directory, as `execvp` reads it.
                .map(|dir| {
                    if dir.is_empty() { Path::new(".") } else { Path::new(OsStr::from_bytes(dir)) }
                })
                .map(|dir| c_string(dir.join(program).as_os_str()))
                .collect::<io::Result<_>>()?
        };
        let owned_argv = std::iter::once(arg0)
            .chain(args.iter().map(OsString::as_os_str))
            .map(c_string)
            .collect::<io::Result<Vec<_>>>()?;
        let owned_env = match env {
            Some(env) => env_strings(env)?,
            None => Vec::new(),
        };
        Ok(Self {
            candidates,
            argv: null_terminated(&owned_argv),
            _argv: owned_argv,
            env: env.map(|_| null_terminated(&owned_env)),
            _env: owned_env,
        })
    }

    /// Replaces the calling process with the command; returns only the reason it could not.
    /// As musl's `execvp`: a candidate that is missing (or under a non-directory) passes to the
    /// next, permission denied is reported if nothing else was found, and any other failure
    /// (`ENOEXEC` among them) ends the search; an empty name is not found. Async-signal-safe: system calls only, for a
    /// `pre_exec` hook.
    pub fn exec(&self) -> io::Error {
        let mut denied = false;
        for candidate in &self.candidates {
            // SAFETY: every pointer is a NUL-terminated string this value owns, and both arrays
            // end in a null pointer. `execve` and `execv` return only on failure.
            unsafe {
                match &self.env {
                    Some(env) => libc::execve(candidate.as_ptr(), self.argv.as_ptr(), env.as_ptr()),
                    None => libc::execv(candidate.as_ptr(), self.argv.as_ptr()),
                };
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EACCES) => denied = true,
                Some(libc::ENOENT | libc::ENOTDIR) => {}
                _ => return error,
            }
        }
        io::Error::from_raw_os_error(if denied { libc::EACCES } else { libc::ENOENT })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    use tether_testkit::scratch::Scratch;

    /// Runs `prepared` in a forked child the way the sandbox does, and returns the spawn's
    /// result: the child's output, or the reason it could not exec.
    fn run(prepared: PreparedExec) -> io::Result<std::process::Output> {
        let mut command = std::process::Command::new("/nonexistent-never-executed");
        // SAFETY: `exec` makes system calls only.
        unsafe { command.pre_exec(move || Err(prepared.exec())) };
        command.output()
    }

    fn script(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn a_name_is_found_on_the_search_path_and_gets_its_arguments_and_environment() {
        let scratch = Scratch::new("exec");
        let dir = scratch.path("");
        script(&dir, "hello", "#!/bin/sh\necho \"$0|$1|$GREETING\"\n");
        let search = format!("/nonexistent-dir:{}", dir.display());
        let env = BTreeMap::from([("GREETING".to_owned(), "hi".to_owned())]);
        let prepared = PreparedExec::new(
            OsStr::new("hello"),
            OsStr::new("hello"),
            &["one".into()],
            Some(&env),
            Some(OsStr::new(&search)),
        )
        .unwrap();
        let output = run(prepared).unwrap();
        let expected = format!("{}|one|hi\n", dir.join("hello").display());
        assert_eq!(String::from_utf8_lossy(&output.stdout), expected);
    }

    #[test]
    fn a_file_without_an_interpreter_line_is_not_run_with_a_shell() {
        let scratch = Scratch::new("exec");
        let dir = scratch.path("");
        let marker = dir.join("ran");
        let path = script(&dir, "plain", &format!("touch {}\n", marker.display()));
        let prepared =
            PreparedExec::new(path.as_os_str(), path.as_os_str(), &[], None, None).unwrap();
        let error = run(prepared).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOEXEC), "{error}");
        assert!(!marker.exists(), "no shell ran the file");
    }

    #[test]
    fn a_missing_name_is_not_found_and_a_denied_one_is_denied() {
        let scratch = Scratch::new("exec");
        let dir = scratch.path("");
        let search = dir.as_os_str();
        for name in ["nope", ""] {
            let missing =
                PreparedExec::new(OsStr::new(name), OsStr::new(name), &[], None, Some(search));
            assert_eq!(run(missing.unwrap()).unwrap_err().raw_os_error(), Some(libc::ENOENT));
        }
        let path = dir.join("unexecutable");
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        let denied = PreparedExec::new(
            OsStr::new("unexecutable"),
            OsStr::new("unexecutable"),
            &[],
            None,
            Some(search),
        );
        assert_eq!(run(denied.unwrap()).unwrap_err().raw_os_error(), Some(libc::EACCES));
    }

    #[test]
    fn a_nul_byte_is_refused_before_any_fork() {
        let error = PreparedExec::new(OsStr::new("/bin/true"), OsStr::new("a\0b"), &[], None, None);
        assert_eq!(error.err().map(|e| e.kind()), Some(io::ErrorKind::InvalidInput));
    }
}
