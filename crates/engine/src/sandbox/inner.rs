//! The inner stage: the first process inside the sandbox, run as `<tether> __tether-sandbox exec
//! [--network restricted|enabled|proxied] [--proxy FD,HTTP[,SOCKS]] [--pids inherit] [--arg0 NAME]
//! -- PROGRAM ARGS…`. In a pid
//! namespace of its own (the default) it is that namespace's PID 1.
//!
//! bubblewrap has built the namespaces and mounts by the time this runs; what is left must be
//! done from inside, by a process the server trusts:
//! 1. every descriptor but stdio is closed on exec, so nothing the launcher held reaches the
//!    command;
//! 2. with a managed proxy ([`NetworkRule::Proxied`]), the forwarders are bound on the
//!    sandbox's loopback ([`super::forwarders`]) and this stage made undumpable, so the
//!    command cannot take the way to the proxy from it;
//! 3. the command is forked into a process group of its own, with `no_new_privs` and the
//!    seccomp program installed in the child just before exec, so the filter binds the
//!    command and all it starts but not this stage; it is executed as the reference's helper
//!    executes it ([`super::exec`]), so a file with no `#!` line fails rather than running
//!    with `/bin/sh`;
//! 4. this stage waits, forwarding the signals the server sends it to the command's group,
//!    and reaping whatever else exits here (it is the namespace's init);
//! 5. when the command exits, so does this stage, with the command's status (128 + n for a
//!    signal), and the kernel kills whatever the command left behind in the namespace.
//!
//! In the host's pid namespace ([`PidNamespace::Inherit`]) the kernel does none of that for
//! it, so this stage does it itself: it is a child subreaper, so that whatever the command
//! leaves behind stays below it (and below bubblewrap, where [`super::peers`] looks); the
//! command's filter refuses every signal and trace aimed at this stage or at bubblewrap
//! ([`seccomp::Guarded`]); and when the command exits, or bubblewrap is gone (the server
//! ended the sandbox), this stage kills everything below it before it exits.
//!
//! Plain `std` and system calls: no runtime, so it starts in well under a millisecond.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::process::Command;

use super::PidNamespace;
use super::exec::PreparedExec;
use super::exit_status::EXEC_FAILED_STATUS;
use super::forwarders::{Forwarders, Route};
use super::seccomp::{self, Guarded, NetworkRule};
use super::transparent;
use crate::network::forward::Entry;
use crate::proc_stat;

/// The first argument that makes the `tether` binary this stage instead of its CLI.
pub const HELPER_ARG: &str = "__tether-sandbox";

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

/// The signal bubblewrap's death brings this stage in the host's pid namespace, in place of
/// the SIGKILL bubblewrap's `--die-with-parent` asked for: one this stage waits for, so that it
/// can end what the command left before it goes. A forwarded signal, told apart by the parent
/// having changed.
const PARENT_GONE: i32 = libc::SIGTERM;

/// What the launcher asks of this stage.
#[derive(Debug, PartialEq, Eq)]
pub struct ExecArgs {
    pub network: NetworkRule,
    pub pids: PidNamespace,
    /// With [`NetworkRule::Proxied`]: where the forwarders listen, and the way to the proxy.
    pub proxy: Option<Route>,
    /// With a route that has a SOCKS5 port: every outbound TCP connection is carried there
    /// ([`super::transparent`]).
    pub transparent: bool,
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
            NetworkRule::Proxied => "proxied".into(),
        });
        if let Some(route) = &self.proxy {
            out.push("--proxy".into());
            out.push(route.to_arg().into());
        }
        if self.transparent {
            out.push("--transparent-tcp".into());
        }
        if self.pids == PidNamespace::Inherit {
            out.push("--pids".into());
            out.push("inherit".into());
        }
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
        let mut pids = PidNamespace::Isolate;
        let mut arg0 = None;
        let mut proxy = None;
        let mut transparent = false;
        loop {
            let Some(flag) = args.next() else { return Err("no command after `--`".into()) };
            match flag.to_str() {
                Some("--") => break,
                Some("--network") => {
                    network = match args.next().as_deref().and_then(OsStr::to_str) {
                        Some("restricted") => NetworkRule::Restricted,
                        Some("enabled") => NetworkRule::Enabled,
                        Some("proxied") => NetworkRule::Proxied,
                        other => return Err(format!("unknown network rule {other:?}")),
                    }
                }
                Some("--pids") => {
                    pids = match args.next().as_deref().and_then(OsStr::to_str) {
                        Some("inherit") => PidNamespace::Inherit,
                        Some("isolate") => PidNamespace::Isolate,
                        other => return Err(format!("unknown pid namespace {other:?}")),
                    }
                }
                Some("--arg0") => arg0 = Some(args.next().ok_or("--arg0 needs a value")?),
                Some("--proxy") => {
                    proxy = Some(Route::parse(&args.next().ok_or("--proxy needs a value")?)?);
                }
                Some("--transparent-tcp") => transparent = true,
                _ => return Err(format!("unknown argument {flag:?}")),
            }
        }
        let program = args.next().ok_or("no command after `--`")?;
        if (network == NetworkRule::Proxied) != proxy.is_some() {
            return Err("--network proxied and --proxy go together".into());
        }
        if transparent && proxy.as_ref().is_none_or(|route| route.port(Entry::Socks).is_none()) {
            return Err("--transparent-tcp needs a --proxy with a SOCKS5 port".into());
        }
        Ok(Self { network, pids, proxy, transparent, arg0, program, args: args.collect() })
    }
}

/// Runs the stage; never returns.
pub fn exec_main(args: ExecArgs) -> ! {
    close_inherited_descriptors();
    let waited = block_signals();
    let (program, watch) = match args.pids {
        PidNamespace::Isolate => (seccomp::program(args.network), None),
        PidNamespace::Inherit => {
            let guarded = stay_in_charge();
            (seccomp::program_guarding(args.network, guarded), Some(guarded.bwrap))
        }
    };
    let name = args.arg0.as_deref().unwrap_or(&args.program);
    let forwarders = args.proxy.as_ref().map(|route| {
        // SAFETY: a plain system call with constant arguments.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        Forwarders::bind(route).unwrap_or_else(|error| {
            eprintln!(
                "tether sandbox: cannot listen for the managed proxy inside the sandbox: {error}"
            );
            std::process::exit(EXEC_FAILED_STATUS);
        })
    });
    // Made while this stage still holds the capabilities bubblewrap kept for it, which it
    // gives up here, before the command exists.
    let socks = args.proxy.as_ref().and_then(|route| route.port(Entry::Socks));
    let transparent = match (args.transparent, socks) {
        (true, Some(socks)) => match transparent::prepare() {
            Ok(prepared) => Some((prepared, socks)),
            Err(error) => {
                eprintln!("tether sandbox: {error}");
                std::process::exit(EXEC_FAILED_STATUS);
            }
        },
        _ => None,
    };
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
    if let Some(forwarders) = forwarders {
        forwarders.start();
    }
    if let Some((prepared, socks)) = transparent {
        prepared.start(socks);
    }
    let code = wait_forwarding(child, &waited, watch);
    if watch.is_some() {
        end_everything_below();
    }
    std::process::exit(code)
}

/// In the host's pid namespace: makes this stage the reaper of whatever the command leaves
/// behind, and bubblewrap's death a signal it waits for; returns the processes the command
/// must not reach. Exits at once if bubblewrap is already gone (nothing has been started).
fn stay_in_charge() -> Guarded {
    // SAFETY: plain system calls with constant arguments.
    unsafe {
        let bwrap = libc::getppid();
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        libc::prctl(libc::PR_SET_PDEATHSIG, PARENT_GONE, 0, 0, 0);
        // Gone before the signal was changed, bubblewrap's SIGKILL came instead; gone between
        // the two calls, no signal comes at all: the parent has changed then.
        if libc::getppid() != bwrap {
            std::process::exit(EXEC_FAILED_STATUS);
        }
        Guarded { inner: libc::getpid(), bwrap }
    }
}

/// Kills every process below this stage and reaps it, until none is left. As a subreaper this
/// stage receives each one whose parent dies, so a tree is taken down from the top, one
/// generation per round; a process killed cannot start another. A round that finds no child
/// to kill (none left, or `/proc` unreadable) reaps what has exited and stops, rather than
/// wait on a process it could not find.
fn end_everything_below() {
    // SAFETY: a plain system call.
    let me = unsafe { libc::getpid() };
    loop {
        let children = proc_stat::children_of(me);
        for (pid, _) in &children {
            // SAFETY: a plain system call; the pid is a child of this stage, which only this
            // stage reaps, so it names no other process.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        let mut status = 0;
        if children.is_empty() {
            // SAFETY: a plain system call.
            while unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } > 0 {}
            return;
        }
        // SAFETY: a plain system call.
        if unsafe { libc::waitpid(-1, &mut status, 0) } < 0 {
            return;
        }
    }
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
/// ends here; returns the child's exit code. With `parent` (the host's pid namespace), a
/// signal that comes once the parent has changed means bubblewrap is gone: the command is
/// not waited for further, its group killed, and 128 + SIGKILL returned.
fn wait_forwarding(child: libc::pid_t, set: &libc::sigset_t, parent: Option<libc::pid_t>) -> i32 {
    loop {
        if let Some(code) = reap(child) {
            return code;
        }
        // SAFETY: `set` is a valid signal set; `info` is written by the kernel.
        let signal = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::sigwaitinfo(set, &mut info)
        };
        // SAFETY: a plain system call.
        if parent.is_some_and(|parent| unsafe { libc::getppid() } != parent) {
            // SAFETY: plain system calls on the command's group and the command.
            unsafe {
                libc::kill(-child, libc::SIGKILL);
                libc::kill(child, libc::SIGKILL);
            }
            return 128 + libc::SIGKILL;
        }
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
            pids: PidNamespace::Inherit,
            proxy: None,
            transparent: false,
            arg0: Some("-sh".into()),
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "--network".into()],
        };
        let written = args.to_args();
        assert_eq!(written[0], "exec");
        assert_eq!(ExecArgs::parse(written.into_iter().skip(1)).unwrap(), args);
        assert!(ExecArgs::parse(["--bogus".into()].into_iter()).is_err());
        let proxied = ExecArgs {
            network: NetworkRule::Proxied,
            proxy: Some(Route {
                fd: 7,
                listeners: vec![(Entry::Http, 40_000), (Entry::Socks, 40_001)],
            }),
            ..args
        };
        let written = proxied.to_args();
        assert_eq!(ExecArgs::parse(written.into_iter().skip(1)).unwrap(), proxied);
        let transparent = ExecArgs { transparent: true, ..proxied };
        let written = transparent.to_args();
        assert_eq!(ExecArgs::parse(written.into_iter().skip(1)).unwrap(), transparent);
        // Transparent TCP goes to a SOCKS5 port.
        let no_socks = ["--network", "proxied", "--proxy", "7,h=1", "--transparent-tcp", "--", "x"];
        assert!(ExecArgs::parse(no_socks.iter().map(OsString::from)).is_err());
        // The rule and the route go together.
        for lone in
            [["--network", "proxied", "--", "x"].as_slice(), &["--proxy", "7,h=1", "--", "x"]]
        {
            assert!(ExecArgs::parse(lone.iter().map(OsString::from)).is_err(), "{lone:?}");
        }
        assert!(ExecArgs::parse(["--".into()].into_iter()).is_err());
    }
}
