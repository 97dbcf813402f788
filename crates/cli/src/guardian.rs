//! Nothing the server started outlives it, however the server ends — `kill -9` included.
//!
//! `tether serve` splits in two before anything else runs. The process that was started stays
//! behind as a small, single-threaded **guardian**; its child is the server. The guardian is a
//! *child subreaper* (`PR_SET_CHILD_SUBREAPER`): every process the server starts that is
//! orphaned — a background grandchild, a command whose shell exited, the server's own children
//! when the server dies — is reparented to the guardian instead of to PID 1. So:
//!
//! - **The server dies** (any signal, `SIGKILL` included, or a crash): its children become the
//!   guardian's. The guardian kills every descendant it has left, whole process groups at a
//!   time, reaps them, and exits with the server's status.
//! - **The guardian is killed** (it is the PID a supervisor knows): the server gets `SIGTERM`
//!   from the kernel (`PR_SET_PDEATHSIG`, set in the server just after the fork, while the
//!   guardian is the only thread there is, so the signal is tied to the right thread) and shuts
//!   down as on any `SIGTERM`: every session's processes are killed, TERM-ignoring ones too.
//!   What it cannot reach then is a descendant that made itself a daemon (a new session, its
//!   parent gone): it was the guardian's, and goes to PID 1 with it.
//! - `SIGTERM`, `SIGINT` and `SIGHUP` sent to the guardian are passed on to the server, whose
//!   clean shutdown they start; the guardian then kills whatever is left and exits.
//!
//! Killing both at once (`pkill -9 tether`) leaves nobody to clean up: only a PID namespace or
//! a cgroup, which a container runtime provides, can promise more.
//!
//! The alternatives were weighed: a PID namespace per command changes what commands see (`ps`,
//! `kill`, PIDs) and needs privileges that unsandboxed servers do not have; a parent-death
//! signal on each command reaches only direct children and is tied to the thread that forked,
//! which in a thread pool may be gone; cgroups need delegation that is rarely there.

use tether_engine::proc_stat::children_of;

/// How long the guardian goes on killing descendants after the server is gone before it gives
/// up on ones it cannot reap (a process in uninterruptible sleep on a dead NFS mount): long
/// enough for any killable tree to die.
const CLEANUP_DEADLINE_MS: u64 = 10_000;

/// Splits the process into guardian and server. Returns in the server, and never returns in
/// the guardian: it exits with the server's status. Call first thing for `serve`, while the
/// process has one thread; if the split fails, the server runs unguarded with a warning
/// rather than not at all.
pub fn split() {
    // The guardian holds the same environment as the server: its `/proc` entries are kept
    // from the commands too (see `tether_server::hardening`).
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    // SAFETY: prctl with integer arguments; getpid has no preconditions.
    let guardian = unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        libc::getpid()
    };
    // SAFETY: the process is single-threaded here (nothing has started a thread yet: no
    // runtime, no logger threads), so the child may go on running ordinary Rust code.
    match unsafe { libc::fork() } {
        -1 => {
            eprintln!(
                "tether: cannot start the guardian process ({}); serving without it: a server killed with SIGKILL may leave its commands running",
                std::io::Error::last_os_error()
            );
        }
        0 => {
            // SAFETY: prctl with integer arguments; getppid has no preconditions.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
                libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
                // The guardian may have died before the line above: then nobody sends it.
                if libc::getppid() != guardian {
                    libc::raise(libc::SIGTERM);
                }
            }
        }
        server => std::process::exit(guard(server)),
    }
}

/// The guardian's life: pass signals on, reap orphans, and when the server is gone, kill what
/// is left and return the exit code to leave with.
fn guard(server: libc::pid_t) -> i32 {
    let signals = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD];
    // SAFETY: a local sigset filled and installed as this (only) thread's mask; signals are
    // then taken synchronously with sigwaitinfo.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigemptyset(&mut set);
        for signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let status = loop {
        // Reap first: the server (or an orphan) may have ended before the mask was set.
        if let Some(status) = reap_all(server) {
            break status;
        }
        // SAFETY: `set` is initialised; the info is written by the kernel.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let signal = unsafe { libc::sigwaitinfo(&set, &mut info) };
        if signal != libc::SIGCHLD && signal > 0 {
            // SAFETY: kill with a pid this process forked and a valid signal.
            unsafe { libc::kill(server, signal) };
        }
    };
    kill_descendants();
    status
}

/// Reaps every child that has ended; returns the exit code to leave with once the server
/// is among them.
fn reap_all(server: libc::pid_t) -> Option<i32> {
    let mut exit = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return exit;
        }
        if pid == server {
            exit = Some(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            });
        }
    }
}

/// Kills every process that is still this guardian's child — and with each its process
/// group — until none is left. Grandchildren become children as their parents die, so this
/// goes round until the tree is empty (or the deadline passes).
fn kill_descendants() {
    // SAFETY: getpgrp has no preconditions.
    let own_group = unsafe { libc::getpgrp() };
    let me = std::process::id() as libc::pid_t;
    let started = std::time::Instant::now();
    loop {
        let children = children_of(me);
        if children.is_empty() {
            break;
        }
        for (pid, stat) in &children {
            // SAFETY: kill with pids read from /proc; a stale one fails harmlessly.
            unsafe {
                if stat.pgrp != own_group && stat.pgrp > 1 {
                    libc::kill(-stat.pgrp, libc::SIGKILL);
                }
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        if started.elapsed().as_millis() as u64 > CLEANUP_DEADLINE_MS {
            break;
        }
        // Killed children are zombies (still listed) until reaped.
        std::thread::sleep(std::time::Duration::from_millis(5));
        let _ = reap_all(-1);
    }
}
