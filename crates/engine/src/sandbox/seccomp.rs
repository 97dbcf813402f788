//! The seccomp programs: what a sandboxed command may not ask the kernel for.
//!
//! Installed after `no_new_privs`, in the last process before the command's exec, so the
//! filter binds the command and everything it starts. The program checks the architecture
//! first (anything but x86_64 kills the process: a 32-bit syscall table would bypass the
//! numbers below); the default is allow, and a listed call fails with `EPERM`, which programs
//! report as "Operation not permitted".
//!
//! A restricted network means no socket of the host's at all, Unix ones included: a path
//! socket is reachable through the read-only `/` whatever the namespaces. The reference's
//! filter refuses `connect`, `sendto` and every socket but AF_UNIX, yet leaves `sendmsg`, which
//! on a Unix datagram socket delivers to whatever address it names — a host's logger, a
//! supervisor's notify socket — descriptors included. A filter cannot read that address (it
//! sits behind a pointer), so the program makes sure no socket it could matter on exists: no
//! AF_UNIX datagram socket can be made (`SOCK_DGRAM`, or `SOCK_RAW`, which the kernel makes one
//! of), by `socket` or `socketpair`. What remains are stream and seqpacket sockets, which can
//! only be connected to each other by `socketpair`, `connect` being refused; on those the
//! kernel refuses an address in `sendmsg` (stream) or ignores it (seqpacket). So IPC over a
//! socketpair, descriptors passed with `sendmsg` included, still works. `pidfd_getfd` is
//! refused too: it would take a socket, connected or listening, from another process.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Which calls are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkRule {
    /// No network: sockets other than AF_UNIX, AF_UNIX datagram sockets, and every call that
    /// would use a socket to reach out or listen, plus reading another process's memory or
    /// taking its descriptors, and io_uring (which bypasses the filter).
    Restricted,
    /// The network is allowed, the filesystem is restricted: only VSOCK (a path to the host
    /// that no namespace isolates) and io_uring are refused.
    Enabled,
    /// The network only through the process's managed proxy: the sandbox has a network
    /// namespace of its own with only loopback, where the inner stage's forwarders listen.
    /// `socket` makes IP sockets only, as the reference's filter does: a Unix socket (one on
    /// the host's filesystem would be a way out no proxy sees), netlink, VSOCK and the rest are
    /// refused; a Unix `socketpair` is not. io_uring is refused, and so is taking another
    /// process's descriptors or memory (the inner stage holds the way to the proxy).
    Proxied,
}

/// Calls refused whatever their arguments, with no network.
const NO_NETWORK_CALLS: [i64; 20] = [
    libc::SYS_connect,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_shutdown,
    libc::SYS_sendto,
    libc::SYS_sendmmsg,
    libc::SYS_recvmmsg,
    libc::SYS_getsockopt,
    libc::SYS_setsockopt,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
];

/// Calls that reach into another process: its memory, its descriptors.
const PROCESS_REACH_CALLS: [i64; 4] = [
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
];

const IO_URING_CALLS: [i64; 3] =
    [libc::SYS_io_uring_setup, libc::SYS_io_uring_enter, libc::SYS_io_uring_register];

/// The socket types an AF_UNIX `socket` or `socketpair` makes a datagram socket of (the kernel
/// turns `SOCK_RAW` into `SOCK_DGRAM`); any other type but stream and seqpacket it refuses.
const UNIX_DATAGRAM_TYPES: [i32; 2] = [libc::SOCK_DGRAM, libc::SOCK_RAW];

/// The bits of a socket's type argument that name the type; the rest are `SOCK_NONBLOCK` and
/// `SOCK_CLOEXEC` (the kernel's `SOCK_TYPE_MASK`).
const SOCKET_TYPE_MASK: u64 = 0xf;

/// A rule matching a `socket` or `socketpair` call that asks for sockets of `kind`, whatever
/// flags come with it.
fn socket_type(kind: i32) -> SeccompRule {
    let op = SeccompCmpOp::MaskedEq(SOCKET_TYPE_MASK);
    let condition = SeccompCondition::new(1, SeccompCmpArgLen::Dword, op, kind as u64)
        .expect("argument 1 exists");
    SeccompRule::new(vec![condition]).expect("one condition")
}

/// Processes a command in the host's pid namespace may not signal or trace: its inner stage
/// and the bubblewrap above it ([`super::PidNamespace::Inherit`]). Killed, either would let the
/// command outlive its sandbox, reparented out of the tree the server looks at to tell its
/// sandboxes' connections from others ([`super::peers`]) and to end what they leave behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guarded {
    /// The inner stage, which leads its own process group (bubblewrap's `--new-session`).
    pub inner: i32,
    /// bubblewrap, which leads the process group the server started it in.
    pub bwrap: i32,
}

/// `fcntl` commands that name a process to send `SIGIO` (or any signal `F_SETSIG` picks) to:
/// `F_SETOWN` with a pid or a negated group in its argument, and `F_SETOWN_EX`, whose argument
/// a filter cannot read.
const F_SETOWN: i32 = libc::F_SETOWN;
const F_SETOWN_EX: i32 = 15;

/// `ioctl`s that set a file's owner as `F_SETOWN` does (`FIOSETOWN`, `SIOCSPGRP`), through a
/// pointer a filter cannot read.
const SET_OWNER_IOCTLS: [i32; 2] = [0x8901, 0x8902];

/// The compiled program for `rule`.
pub fn program(rule: NetworkRule) -> BpfProgram {
    compile(rules(rule))
}

/// The compiled program for `rule`, and no signal, trace or `SIGIO` ownership reaching the
/// processes of `guarded`, nor every process at once (`kill(-1, …)`).
pub fn program_guarding(rule: NetworkRule, guarded: Guarded) -> BpfProgram {
    let mut rules = rules(rule);
    guard(&mut rules, guarded);
    compile(rules)
}

/// The rules of `rule`: each call refused unconditionally (no rules) or when one matches.
fn rules(rule: NetworkRule) -> BTreeMap<i64, Vec<SeccompRule>> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let socket_domain = |op: SeccompCmpOp, domain: i32| {
        let condition = SeccompCondition::new(0, SeccompCmpArgLen::Dword, op, domain as u64)
            .expect("argument 0 exists");
        vec![SeccompRule::new(vec![condition]).expect("one condition")]
    };
    match rule {
        NetworkRule::Restricted => {
            for call in [libc::SYS_socket, libc::SYS_socketpair] {
                let mut refused = socket_domain(SeccompCmpOp::Ne, libc::AF_UNIX);
                refused.extend(UNIX_DATAGRAM_TYPES.map(socket_type));
                rules.insert(call, refused);
            }
            for call in NO_NETWORK_CALLS {
                rules.insert(call, Vec::new());
            }
        }
        NetworkRule::Enabled => {
            for call in [libc::SYS_socket, libc::SYS_socketpair] {
                rules.insert(call, socket_domain(SeccompCmpOp::Eq, libc::AF_VSOCK));
            }
            for call in IO_URING_CALLS {
                rules.insert(call, Vec::new());
            }
        }
        NetworkRule::Proxied => {
            // `socket`: IP only (a Unix socket names something on the host's filesystem or
            // in its abstract namespace; netlink and the rest are no way to the network
            // either). `socketpair`: Unix only, which is all it makes — IPC between the
            // command's own processes, which tools rely on (libuv's child stdio).
            let only_ip = [libc::AF_INET, libc::AF_INET6].map(|domain| {
                SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, domain as u64)
                    .expect("argument 0 exists")
            });
            rules.insert(
                libc::SYS_socket,
                vec![SeccompRule::new(only_ip.to_vec()).expect("two conditions")],
            );
            rules.insert(libc::SYS_socketpair, socket_domain(SeccompCmpOp::Ne, libc::AF_UNIX));
            for call in IO_URING_CALLS.into_iter().chain(PROCESS_REACH_CALLS) {
                rules.insert(call, Vec::new());
            }
        }
    }
    rules
}

/// Adds the refusals that keep a command from ending or stopping `guarded`: every way to
/// send a signal names its target by a number the filter can compare — but
/// `pidfd_send_signal` (a descriptor, which `/proc/<pid>` opens too), `F_SETOWN_EX` and the
/// owner `ioctl`s (a pointer), refused outright, as is tracing, which could make either exit.
fn guard(rules: &mut BTreeMap<i64, Vec<SeccompRule>>, guarded: Guarded) {
    let Guarded { inner, bwrap } = guarded;
    let processes = [inner, bwrap];
    let processes_and_groups = [inner, -inner, bwrap, -bwrap];
    for call in [
        libc::SYS_pidfd_send_signal,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
    ] {
        rules.insert(call, Vec::new());
    }
    let kill_targets = processes_and_groups.into_iter().chain([-1]);
    refuse_when(rules, libc::SYS_kill, kill_targets.map(|pid| argument_is(0, pid)).collect());
    let by_pid =
        [libc::SYS_tkill, libc::SYS_tgkill, libc::SYS_rt_sigqueueinfo, libc::SYS_rt_tgsigqueueinfo];
    for call in by_pid {
        refuse_when(rules, call, processes.map(|pid| argument_is(0, pid)).to_vec());
    }
    let mut fcntl: Vec<SeccompRule> = processes_and_groups
        .map(|pid| {
            let owner = [condition(1, F_SETOWN), condition(2, pid)];
            SeccompRule::new(owner.to_vec()).expect("two conditions")
        })
        .to_vec();
    fcntl.push(argument_is(1, F_SETOWN_EX));
    refuse_when(rules, libc::SYS_fcntl, fcntl);
    let ioctls = SET_OWNER_IOCTLS.map(|request| argument_is(1, request)).to_vec();
    refuse_when(rules, libc::SYS_ioctl, ioctls);
}

/// Refuses `call` when any of `when` matches, unless it is refused outright already.
fn refuse_when(rules: &mut BTreeMap<i64, Vec<SeccompRule>>, call: i64, when: Vec<SeccompRule>) {
    match rules.get_mut(&call) {
        Some(existing) if existing.is_empty() => {}
        Some(existing) => existing.extend(when),
        None => {
            rules.insert(call, when);
        }
    }
}

/// Argument `index` equal to `value` in its low 32 bits, which is all the kernel reads of a
/// `pid_t` or of a command number: higher bits set to dodge a 64-bit comparison change
/// nothing.
fn condition(index: u8, value: i32) -> SeccompCondition {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value as u32 as u64)
        .expect("a system call has six arguments")
}

fn argument_is(index: u8, value: i32) -> SeccompRule {
    SeccompRule::new(vec![condition(index, value)]).expect("one condition")
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>) -> BpfProgram {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )
    .expect("the actions differ");
    filter.try_into().expect("the rules compile")
}

/// Sets `no_new_privs` and installs `program` on the calling thread. Async-signal-safe (two
/// system calls, nothing allocated), so it may run between fork and exec.
pub fn install(program: &BpfProgram) -> std::io::Result<()> {
    seccompiler::apply_filter(program).map_err(|error| match error {
        seccompiler::Error::Prctl(e) | seccompiler::Error::Seccomp(e) => e,
        _ => std::io::Error::from_raw_os_error(libc::EINVAL),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forked child installs the filter and reports what the kernel then says.
    fn in_filtered_child(rule: NetworkRule, probe: fn() -> i32) -> i32 {
        let program = program(rule);
        // SAFETY: the child only makes system calls and exits.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                if install(&program).is_err() {
                    libc::_exit(255);
                }
                libc::_exit(probe());
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            libc::WEXITSTATUS(status)
        }
    }

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    #[test]
    fn no_network_refuses_inet_sockets_and_connect_but_not_unix_sockets() {
        let inet = in_filtered_child(NetworkRule::Restricted, || unsafe {
            if libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) < 0 { errno() } else { 0 }
        });
        assert_eq!(inet, libc::EPERM);
        let unix = in_filtered_child(NetworkRule::Restricted, || unsafe {
            if libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) < 0 { errno() } else { 0 }
        });
        assert_eq!(unix, 0);
        let connect = in_filtered_child(NetworkRule::Restricted, || unsafe {
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            let address: libc::sockaddr_un = std::mem::zeroed();
            let size = std::mem::size_of::<libc::sockaddr_un>() as u32;
            if libc::connect(fd, &address as *const _ as *const libc::sockaddr, size) < 0 {
                errno()
            } else {
                0
            }
        });
        assert_eq!(connect, libc::EPERM);
    }

    /// `socket` and `socketpair` with `domain` and `kind` (flags added), or the errno.
    fn make_sockets(domain: i32, kind: i32) -> i32 {
        unsafe {
            if libc::socket(domain, kind | libc::SOCK_CLOEXEC, 0) < 0 {
                return errno();
            }
            let mut pair = [0; 2];
            if libc::socketpair(domain, kind | libc::SOCK_NONBLOCK, 0, pair.as_mut_ptr()) < 0 {
                return errno();
            }
        }
        0
    }

    #[test]
    fn no_network_refuses_unix_datagram_sockets_but_not_stream_or_seqpacket_ones() {
        let dgram = in_filtered_child(NetworkRule::Restricted, || {
            make_sockets(libc::AF_UNIX, libc::SOCK_DGRAM)
        });
        assert_eq!(dgram, libc::EPERM);
        let raw = in_filtered_child(NetworkRule::Restricted, || {
            make_sockets(libc::AF_UNIX, libc::SOCK_RAW)
        });
        assert_eq!(raw, libc::EPERM);
        let stream = in_filtered_child(NetworkRule::Restricted, || {
            make_sockets(libc::AF_UNIX, libc::SOCK_STREAM)
        });
        assert_eq!(stream, 0);
        let seqpacket = in_filtered_child(NetworkRule::Restricted, || {
            make_sockets(libc::AF_UNIX, libc::SOCK_SEQPACKET)
        });
        assert_eq!(seqpacket, 0);
        let enabled = in_filtered_child(NetworkRule::Enabled, || {
            make_sockets(libc::AF_UNIX, libc::SOCK_DGRAM)
        });
        assert_eq!(enabled, 0, "with the network, datagram sockets are allowed");
    }

    #[test]
    fn no_network_refuses_taking_descriptors_with_pidfd_getfd() {
        // Its own descriptor: which any process may take, but for the filter.
        let taken = in_filtered_child(NetworkRule::Restricted, || unsafe {
            let pidfd = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) as i32;
            if pidfd < 0 {
                return 254;
            }
            if libc::syscall(libc::SYS_pidfd_getfd, pidfd, 0, 0) < 0 { errno() } else { 0 }
        });
        assert_eq!(taken, libc::EPERM);
    }

    /// A command guarding its parent (as the inner stage) and its parent's parent (as
    /// bubblewrap): no signal reaches them, by pid or group, nor everyone at once, nor through
    /// a pidfd or a file's owner; others are reached as before.
    #[test]
    fn guarded_processes_cannot_be_signalled() {
        fn refused(call: impl Fn() -> libc::c_long) -> bool {
            call() < 0 && errno() == libc::EPERM
        }
        // SAFETY: the child only makes system calls and exits.
        let code = unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                let me = libc::getpid();
                let guarded = Guarded { inner: libc::getppid(), bwrap: me + 1_000_000 };
                let program = program_guarding(NetworkRule::Enabled, guarded);
                if install(&program).is_err() {
                    libc::_exit(255);
                }
                let Guarded { inner, bwrap } = guarded;
                let checks = [
                    refused(|| libc::kill(inner, 0) as _),
                    refused(|| libc::kill(-inner, 0) as _),
                    refused(|| libc::kill(bwrap, 0) as _),
                    refused(|| libc::kill(-1, 0) as _),
                    refused(|| libc::syscall(libc::SYS_tgkill, inner, inner, 0)),
                    refused(|| libc::syscall(libc::SYS_tkill, inner, 0)),
                    refused(|| libc::syscall(libc::SYS_pidfd_send_signal, 0, 0, 0, 0)),
                    refused(|| libc::fcntl(0, libc::F_SETOWN, inner) as _),
                    refused(|| libc::fcntl(0, F_SETOWN_EX, 0) as _),
                    refused(|| libc::ioctl(0, 0x8901, &inner) as _),
                    refused(|| libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0)),
                    // A pid whose low 32 bits name the guarded one is the guarded one.
                    refused(|| libc::syscall(libc::SYS_kill, (1i64 << 32) | inner as i64, 0)),
                    libc::kill(me, 0) == 0,
                    libc::kill(0, 0) == 0,
                ];
                libc::_exit(checks.iter().position(|passed| !passed).map_or(0, |at| at as i32 + 1));
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            libc::WEXITSTATUS(status)
        };
        assert_eq!(code, 0, "check {code} (1-based) failed");
    }

    #[test]
    fn with_the_network_only_vsock_is_refused() {
        let inet = in_filtered_child(NetworkRule::Enabled, || unsafe {
            if libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) < 0 { errno() } else { 0 }
        });
        assert_eq!(inet, 0);
        let vsock = in_filtered_child(NetworkRule::Enabled, || unsafe {
            if libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0) < 0 { errno() } else { 0 }
        });
        assert_eq!(vsock, libc::EPERM);
    }

    /// Behind a managed proxy: IP sockets (TCP and UDP), a Unix socketpair, and nothing else:
    /// no Unix or netlink socket, no reaching into another process (the inner stage holds the
    /// way out).
    #[test]
    fn behind_a_proxy_only_ip_sockets_and_unix_socketpairs_are_made() {
        // A probe is a plain `fn`: one per case.
        let inet = in_filtered_child(NetworkRule::Proxied, || unsafe {
            if libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) < 0 { errno() } else { 0 }
        });
        let udp6 = in_filtered_child(NetworkRule::Proxied, || unsafe {
            if libc::socket(libc::AF_INET6, libc::SOCK_DGRAM, 0) < 0 { errno() } else { 0 }
        });
        let unix = in_filtered_child(NetworkRule::Proxied, || unsafe {
            if libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) < 0 { errno() } else { 0 }
        });
        let pair = in_filtered_child(NetworkRule::Proxied, || unsafe {
            let mut fds = [0; 2];
            if libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) < 0 {
                errno()
            } else {
                0
            }
        });
        let netlink = in_filtered_child(NetworkRule::Proxied, || unsafe {
            if libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, 0) < 0 { errno() } else { 0 }
        });
        let getfd = in_filtered_child(NetworkRule::Proxied, || unsafe {
            if libc::syscall(libc::SYS_pidfd_getfd, 0, 0, 0) < 0 { errno() } else { 0 }
        });
        assert_eq!((inet, udp6), (0, 0));
        assert_eq!(pair, 0, "a Unix socketpair is the command's own IPC");
        assert_eq!((unix, netlink, getfd), (libc::EPERM, libc::EPERM, libc::EPERM));
    }
}
