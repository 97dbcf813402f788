//! The inner stage: the first process inside the sandbox (PID 1 of its pid namespace), run as
//! `<tether> __tether-sandbox exec [--network restricted|enabled] [--arg0 NAME] -- PROGRAM ARGS…`.
//!
//! bubblewrap has built the namespaces and mounts by the time this runs; what is left must be
//! done from inside, by a process the server trusts:
//! 1. every descriptor but stdio is closed on exec, so nothing the launcher held reaches the
//!    command;
//! 2. the command is forked into a process group of its own, with `no_new_privs` and the
//!    seccomp program installed in the child just before exec, so the filter binds the
//!    command and all it starts but not this stage; it is executed as the reference's helper
//!    executes it ([`super::exec`]), so a file with no `#!` line fails rather than running
//!    with `/bin/sh`;
//! 3. this stage waits, forwarding the signals the server sends it to the command's group
//!    (a signal from outside the namespace is the only way one reaches the command), and
//!    reaping whatever else exits (it is the namespace's init);
//! 4. when the command exits, so does this stage, with the command's status (128 + n for a
//!    signal), and the kernel kills whatever the command left behind in the namespace.
//!
//! Plain `std` and system calls: no runtime, so it starts in well under a millisecond.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::process::Command;

use super::exec::PreparedExec;
use super::seccomp::{self, NetworkRule};

/// The first argument that makes the `tether` binary this stage instead of its CLI.
pub const HELPER_ARG: &str = "__tether-sandbox";

/// Exit status when the command cannot be started inside the sandbox (the reference's).
pub const EXEC_FAILED_STATUS: i32 = 101;

/// Signals the server may send the command (`process/signal`), forwarded as they come.
const FORWARDED: [i32; 7] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

/// What the launcher asks of this stage.
#[derive(Debug, PartialEq, Eq)]
pub struct ExecArgs {
    pub network: NetworkRule,
    pub arg0: Option<OsString>,
    pub program: OsString,
    pub args: Vec<OsString>,
}

impl ExecArgs {
    /// The arguments after [`HELPER_ARG`], as [`ExecArgs::parse`] reads them back.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec!["exec".into(), "--network".into()];
        out.push(match self.network {
            NetworkRule::Restricted => "restricted".into(),
            NetworkRule::Enabled => "enabled".into(),
        });
        if let Some(arg0) = &self.arg0 {
            out.push("--arg0".into());
            out.push(arg0.clone());
        }
        out.push("--".into());
        out.push(self.program.clone());
        out.extend(self.args.iter().cloned());
        out
    }

    /// Reads what follows `exec`.
    pub fn parse(mut args: impl Iterator<Item = OsString>) -> Result<Self, String> {
        let mut network = NetworkRule::Restricted;
        let mut arg0 = None;
        loop {
            let Some(flag) = args.next() else { return Err("no command after `--`".into()) };
            match flag.to_str() {
                Some("--") => break,
                Some("--network") => {
                    network = match args.next().as_deref().and_then(OsStr::to_str) {
                        Some("restricted") => NetworkRule::Restricted,
                        Some("enabled") => NetworkRule::Enabled,
                        other => return Err(format!("unknown network rule {other:?}")),
                    }
                }
                Some("--arg0") => arg0 = Some(args.next().ok_or("--arg0 needs a value")?),
                _ => return Err(format!("unknown argument {flag:?}")),
            }
        }
        let program = args.next().ok_or("no command after `--`")?;
        Ok(Self { network, arg0, program, args: args.collect() })
    }
}

/// Runs the stage; never returns.
pub fn exec_main(args: ExecArgs) -> ! {
    let program = seccomp::program(args.network);
    close_inherited_descriptors();
    let waited = block_signals();
    let name = args.arg0.as_deref().unwrap_or(&args.program);
    let search = std::env::var_os("PATH");
    // The command's environment is this stage's: bubblewrap passed it on.
    let command = PreparedExec::new(&args.program, name, &args.args, None, search.as_deref())
        .map(|exec| (exec, Command::new(&args.program)));
    let spawned = command.and_then(|(exec, mut command)| {
        command.process_group(0);
        // SAFETY: system calls only, nothing allocated: the signals this stage blocked are
        // unblocked for the command (the mask survives exec), the filter is installed, and
        // the command is executed without `execvp`'s shell fallback (`exec`).
        unsafe {
            command.pre_exec(move || {
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                seccomp::install(&program)?;
                Err(exec.exec())
            });
        }
        command.spawn()
    });
    let child = match spawned {
        Ok(child) => child.id() as libc::pid_t,
        Err(error) => {
            eprintln!("tether sandbox: {}", exec_failure(name, &error));
            std::process::exit(EXEC_FAILED_STATUS);
        }
    };
    std::process::exit(wait_forwarding(child, &waited))
}

/// What a sandboxed command that could not be executed says on its stderr, after
/// `tether sandbox: `: the reference's words (`Failed to execvp <argv[0]>: <reason>`).
pub fn exec_failure(name: &OsStr, error: &std::io::Error) -> String {
    format!("Failed to execvp {}: {error}", name.to_string_lossy())
}

/// Marks every descriptor above stderr close-on-exec: the launcher's pipes and the
/// descriptors bubblewrap was handed must not reach the command.
fn close_inherited_descriptors() {
    // Failure (no `/proc` to list them on a kernel before 5.11) leaves the descriptors as
    // bubblewrap left them, which it closes itself but for its own.
    let _ = crate::exec_setup::close_on_exec_from(3);
}

/// Blocks SIGCHLD and the forwarded signals, so they are taken one by one with
/// `sigwaitinfo` rather than by handlers. The command gets an empty mask back before its exec.
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local value.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        for signal in FORWARDED {
            libc::sigaddset(&mut set, signal);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits for `child`, forwarding signals to its group and reaping every other process that
/// ends here; returns the child's exit code.
fn wait_forwarding(child: libc::pid_t, set: &libc::sigset_t) -> i32 {
    loop {
        if let Some(code) = reap(child) {
            return code;
        }
        // SAFETY: `set` is a valid signal set; `info` is written by the kernel.
        let signal = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::sigwaitinfo(set, &mut info)
        };
        if signal > 0 && signal != libc::SIGCHLD {
            // SAFETY: plain system calls. The group first; the command alone if it left it.
            unsafe {
                if libc::kill(-child, signal) != 0 {
                    libc::kill(child, signal);
                }
            }
        }
    }
}

/// Reaps every exited process without waiting; the child's code once it is among them.
fn reap(child: libc::pid_t) -> Option<i32> {
    loop {
        let mut status = 0;
        // SAFETY: a plain system call.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return None;
        }
        if pid == child {
            if libc::WIFEXITED(status) {
                return Some(libc::WEXITSTATUS(status));
            }
            if libc::WIFSIGNALED(status) {
                return Some(128 + libc::WTERMSIG(status));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_read_back_as_written() {
        let args = ExecArgs {
            network: NetworkRule::Enabled,
            arg0: Some("-sh".into()),
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "--network".into()],
        };
        let written = args.to_args();
        assert_eq!(written[0], "exec");
        assert_eq!(ExecArgs::parse(written.into_iter().skip(1)).unwrap(), args);
        assert!(ExecArgs::parse(["--bogus".into()].into_iter()).is_err());
        assert!(ExecArgs::parse(["--".into()].into_iter()).is_err());
    }
}
