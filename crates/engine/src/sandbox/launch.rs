//! How a sandboxed start becomes a command line.
//!
//! - no confinement: the command as asked;
//! - the network filter alone: the command as asked, with the filter installed between fork
//!   and exec ([`Launch::Filtered`]);
//! - the full sandbox: `bwrap <mounts and namespaces> -- <tether> __tether-sandbox exec … --
//!   <command>` ([`Launch::Wrapped`]);
//! - a full sandbox this host cannot build: `/bin/sh` printing why, and exiting
//!   [`EXEC_FAILED_STATUS`] ([`BUILD_REFUSED_STATUS`] when the reference's helper would
//!   refuse it too: an unfit app-server socket directory, a `none` glob it will not search) —
//!   the start is answered as the reference answers it, and the command never runs.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use seccompiler::BpfProgram;
use tether_protocol::sandbox::{NetworkAccess, SandboxContext};

use super::exit_status::{BUILD_REFUSED_STATUS, EXEC_FAILED_STATUS};
use super::inner::{self, ExecArgs};
use super::mounts::{self, PlanError};
use super::policy::{self, Confinement, Context, PolicyError};
use super::seccomp::{self, NetworkRule};
use super::synthetic::SyntheticTargets;
use super::{PidNamespace, Sandboxing};
use crate::network::forward::{Entry, ProxyRoute};

/// A start, as the sandbox sees it.
#[derive(Debug, Clone, Copy)]
pub struct Start<'a> {
    pub intent: &'a SandboxContext,
    pub cwd: &'a Path,
    /// The child's final environment.
    pub env: &'a BTreeMap<String, String>,
    /// The program, already found on `PATH`.
    pub program: &'a Path,
    /// `argv[1..]`.
    pub args: &'a [String],
    /// What the program sees as `argv[0]`.
    pub arg0: &'a str,
    /// The process's managed proxy, if its launch has one: a full sandbox then gets a network
    /// namespace of its own whose only way out is that proxy.
    pub proxy: Option<&'a ProxyRoute>,
}

/// What to run instead of, or around, the command.
pub enum Launch {
    Direct,
    Filtered(BpfProgram),
    Wrapped(Wrapped),
}

/// A command line in place of the request's.
#[derive(Debug)]
pub struct Wrapped {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Descriptors the program must inherit (close-on-exec cleared in the child).
    pub inherited: Vec<OwnedFd>,
    /// Held until the process has closed.
    pub synthetic: SyntheticTargets,
    /// The read end of bubblewrap's `--info-fd`: the inner stage's pid, which signals go to.
    pub info: Option<OwnedFd>,
    /// The sandbox reaches its managed proxy through the inner stage's forwarders
    /// ([`Start::proxy`]); otherwise the proxy must listen on the host.
    pub proxied: bool,
}

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Launch::Direct => f.write_str("Direct"),
            Launch::Filtered(_) => f.write_str("Filtered"),
            Launch::Wrapped(wrapped) => wrapped.fmt(f),
        }
    }
}

/// Why a sandboxed start cannot be launched at all.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The intent asks for bubblewrap and this host has none that works (no binary, no
    /// helper): nothing could confine the command, so it is not started. Carries why, and
    /// what to install.
    #[error("{0}")]
    Unavailable(String),
}

/// The launch for `start` on a host with `sandboxing`.
pub fn prepare(start: Start<'_>, sandboxing: &Sandboxing) -> Result<Launch, LaunchError> {
    let context = Context {
        request_cwd: start.cwd,
        tmpdir: start.env.get("TMPDIR").map(String::as_str),
        slash_tmp_is_dir: Path::new("/tmp").is_dir(),
    };
    Ok(match policy::resolve(start.intent, context)? {
        Confinement::Unconfined => Launch::Direct,
        Confinement::NetworkFilter => Launch::Filtered(seccomp::program(NetworkRule::Restricted)),
        Confinement::LegacyLandlock => fail_closed(
            "tether sandbox: filesystem-restricted execution requires bubblewrap; \
             `useLegacyLandlock` (Landlock alone) cannot confine it as asked: send the intent \
             without it",
            EXEC_FAILED_STATUS,
        ),
        Confinement::Full(full) => {
            match (sandboxing.unavailable(), &sandboxing.bwrap, &sandboxing.helper) {
                (None, Some(bwrap), Some(helper)) => {
                    match wrapped(&full, bwrap, helper, sandboxing.pid_namespace, start) {
                        Ok(wrapped) => Launch::Wrapped(wrapped),
                        Err(error) if let Some(words) = error.refusal() => {
                            fail_closed(&words, BUILD_REFUSED_STATUS)
                        }
                        Err(error) => fail_closed(
                            &format!("tether sandbox: failed to prepare process sandbox: {error}"),
                            EXEC_FAILED_STATUS,
                        ),
                    }
                }
                (reason, ..) => {
                    let reason = reason.unwrap_or_else(|| "bubblewrap is unavailable".into());
                    return Err(LaunchError::Unavailable(reason));
                }
            }
        }
    })
}

fn wrapped(
    full: &policy::FullPolicy,
    bwrap: &Path,
    helper: &Path,
    pids: PidNamespace,
    start: Start<'_>,
) -> Result<Wrapped, PlanError> {
    // A proxied sandbox has no network of its own but loopback: its way out is the proxy.
    let proxied_policy;
    let full = match start.proxy {
        Some(_) => {
            proxied_policy =
                policy::FullPolicy { network: NetworkAccess::Restricted, ..full.clone() };
            &proxied_policy
        }
        None => full,
    };
    let mut plan = mounts::plan(full, helper, start.cwd, mounts::Purpose::Command(pids))?;
    let route = match start.proxy {
        Some(proxy) => {
            let fd = proxy.sandbox_end.try_clone()?;
            let route = super::forwarders::Route {
                fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
                listeners: proxy.listeners.clone(),
            };
            plan.fds.push(fd);
            if proxy.transparent {
                if proxy.port(Entry::Socks).is_none() {
                    return Err(std::io::Error::other(
                        "failed to prepare transparent TCP: transparent TCP requires managed SOCKS5",
                    )
                    .into());
                }
                transparent_mounts(&mut plan)?;
            }
            Some(route)
        }
        None => None,
    };
    let (info_read, info_write) = info_pipe()?;
    plan.args.push("--info-fd".into());
    plan.args.push(std::os::fd::AsRawFd::as_raw_fd(&info_write).to_string().into());
    plan.fds.push(info_write);
    plan.args.push("--".into());
    plan.args.push(helper.into());
    plan.args.extend(plan.helper_args());
    let proxied = route.is_some();
    let exec = ExecArgs {
        network: match (&route, full.network) {
            (Some(_), _) => NetworkRule::Proxied,
            (None, NetworkAccess::Restricted) => NetworkRule::Restricted,
            (None, NetworkAccess::Enabled) => NetworkRule::Enabled,
        },
        pids,
        proxy: route,
        transparent: start.proxy.is_some_and(|proxy| proxy.transparent),
        arg0: Some(start.arg0.into()),
        program: start.program.into(),
        args: start.args.iter().map(OsString::from).collect(),
    };
    plan.args.extend(exec.to_args());
    Ok(Wrapped {
        program: bwrap.to_path_buf(),
        args: plan.args,
        inherited: plan.fds,
        synthetic: plan.synthetic,
        info: Some(info_read),
        proxied,
    })
}

/// What a transparent-TCP sandbox adds ([`super::transparent`]): the TUN device for its inner
/// stage to make its interface from, the capabilities that stage needs for it (and gives up
/// before the command starts), and an `/etc/resolv.conf` naming the stage's name server.
fn transparent_mounts(plan: &mut mounts::Plan) -> Result<(), PlanError> {
    let resolv_conf =
        std::fs::canonicalize("/etc/resolv.conf").ok().filter(|path| path.is_file()).ok_or_else(
            || std::io::Error::other("transparent TCP requires readable /etc/resolv.conf"),
        )?;
    if !Path::new("/dev/net/tun").exists() {
        return Err(std::io::Error::other(
            "transparent TCP needs /dev/net/tun on the executor (in a container: \
             `--device /dev/net/tun`)",
        )
        .into());
    }
    plan.data_file(&resolv_conf, super::transparent::dns::RESOLV_CONF.as_bytes())?;
    plan.args.extend(["--dev-bind", "/dev/net/tun", "/dev/net/tun"].map(OsString::from));
    for capability in super::transparent::tun::CAPABILITIES {
        plan.args.extend(["--cap-add", capability].map(OsString::from));
    }
    Ok(())
}

/// Makes `fds` survive the exec about to happen: bubblewrap reads its data and writes its
/// info through them. For a `pre_exec` hook: one system call per descriptor, nothing allocated.
pub fn keep_across_exec(fds: &[i32]) -> std::io::Result<()> {
    for fd in fds {
        // SAFETY: a plain system call on a descriptor the caller owns.
        if unsafe { libc::fcntl(*fd, libc::F_SETFD, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A close-on-exec pipe for bubblewrap's `--info-fd`.
fn info_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors the call writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe {
        use std::os::fd::FromRawFd;
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    })
}

/// A child that says, as the inner stage would, that `name` could not be executed for `error`,
/// and exits [`EXEC_FAILED_STATUS`]: for a sandboxed start whose command could not be
/// executed outside bubblewrap (the network filter alone, or no confinement).
pub fn failed_exec(name: &std::ffi::OsStr, error: &std::io::Error) -> Launch {
    fail_closed(
        &format!("tether sandbox: {}", inner::exec_failure(name, error)),
        EXEC_FAILED_STATUS,
    )
}

/// A child that says `why` on stderr and exits [`EXEC_FAILED_STATUS`]: a sandboxed
/// start this executor will not build, answered as a start whose sandbox failed.
pub fn refused(why: &str) -> Launch {
    fail_closed(why, EXEC_FAILED_STATUS)
}

/// A child that says `why` on stderr and exits with `status`.
fn fail_closed(why: &str, status: i32) -> Launch {
    Launch::Wrapped(Wrapped {
        program: PathBuf::from("/bin/sh"),
        args: vec![
            "-c".into(),
            format!("printf '%s\\n' \"$0\" >&2; exit {status}").into(),
            why.into(),
        ],
        inherited: Vec::new(),
        synthetic: SyntheticTargets::default(),
        info: None,
        proxied: false,
    })
}

/// The inner stage's pid on this host, from what bubblewrap wrote to its `--info-fd`
/// (`{"child-pid": N, …}`); `None` if it wrote nothing (it failed first).
pub fn child_pid_from_info(info: &[u8]) -> Option<i32> {
    let text = std::str::from_utf8(info).ok()?;
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    value.get("child-pid")?.as_i64().and_then(|pid| i32::try_from(pid).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_info_names_the_child() {
        assert_eq!(child_pid_from_info(b"{\n    \"child-pid\": 4242\n}\n"), Some(4242));
        assert_eq!(child_pid_from_info(b""), None);
    }
}
