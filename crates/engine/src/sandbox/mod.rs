//! Confining what a client asks to be confined: the `sandbox` intent of `process/start` and of
//! the `fs/*` writes, enforced as Codex's own executor enforces it on Linux.
//!
//! - [`policy`] (pure): what an intent means here — no confinement, the network filter alone,
//!   or the full sandbox with its grants.
//! - [`walk`]: a path reached one component at a time beneath descriptors, the object at its
//!   end held open; [`grants`]: the policy's grants walked so, refused when a path to enforce
//!   crosses a link a sandboxed command could change.
//! - [`mounted`]: what each mount target must hold, checked from inside the sandbox before
//!   anything runs there (bubblewrap mounts by path again, so a target can still change).
//! - [`mounts`]: bubblewrap's arguments for a full sandbox, from the policy and the objects its
//!   grants reached (bound by descriptor, never by path); [`synthetic`] the empty mount
//!   targets it makes on the host and removes after.
//! - [`socket_dir`]: the Codex app-server's socket directory, masked in every full sandbox;
//!   [`globs`] the files a `none` glob hides, searched as the reference searches them.
//! - [`host_view`]: where a full sandbox shows a path as the host has it, writable, so that a
//!   write there can be made without one.
//! - [`peers`]: which loopback connections come from this server's own sandboxes (refused:
//!   a sandbox with the network must not drive the server that confines it).
//! - [`seccomp`]: the system-call filters; [`exec`] executes a command after one is installed,
//!   without glibc's `/bin/sh` retry.
//! - [`inner`]: the inner stage, the sandbox's first process (the `tether` binary run with
//!   [`inner::HELPER_ARG`]; PID 1 of its pid namespace, or, in the host's, a subreaper that
//!   ends what the command leaves): filter, fork the command, forward signals, reap, exit with
//!   the command's status.
//!   [`forwarders`]: with a managed proxy, its listeners on the sandbox's own loopback, each
//!   connection handed to the proxy outside; [`transparent`]: transparent TCP, every outbound
//!   connection carried to that proxy's SOCKS5 listener.
//! - [`denied`]: the `sandboxDenied` guess at exit.
//! - [`launch`]: how a start becomes a command line (bubblewrap, the inner stage, the
//!   command), or a child that fails with a message when this host cannot sandbox.
//! - [`exit_status`]: how the helper exits when nothing ran (the command could not be
//!   started, the sandbox was refused, a mount target changed), for the server to tell why.
//!
//! **Invariant:** nothing sandboxed ever runs unconfined. Whatever is missing (bubblewrap,
//! user namespaces, the helper), the start is answered and the child fails, saying what is
//! missing and how to get it — never running the command without the confinement asked for.
//! A file write the server makes itself in place of a sandbox's helper ([`host_view`]) is one
//! the sandbox would have made the same way, and is made only once a sandbox has been built.

pub mod denied;
pub mod exec;
pub mod exit_status;
pub mod forwarders;
pub mod globs;
pub mod grants;
pub mod host_view;
pub mod inner;
pub mod launch;
pub mod mounted;
pub mod mounts;
pub mod peers;
pub mod policy;
pub mod seccomp;
pub mod socket_dir;
pub mod synthetic;
pub mod transparent;
pub mod walk;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use launch::Launch;

/// Where this host's sandboxing tools are. One per process: bubblewrap's place is a fact of the
/// host, like `PATH`, and the helper is the running binary.
#[derive(Debug, Clone, Default)]
pub struct Sandboxing {
    /// The bubblewrap binary, if there is one.
    pub bwrap: Option<PathBuf>,
    /// The binary that runs the inner stage when given [`inner::HELPER_ARG`]: the `tether`
    /// binary. `None` in a program that embeds the engine without it: sandboxed work then
    /// fails closed.
    pub helper: Option<PathBuf>,
    /// The server's own files — its token and shared-secret files, its TLS key, its spill
    /// directory — as the kernel reaches them: hidden in every full sandbox (an empty,
    /// unreadable file or directory in their place) and never written in place of one. A
    /// sandboxed command with the network must not read the credential that lets a client run
    /// commands outside any sandbox.
    pub private: Vec<PathBuf>,
    /// Whether a sandboxed command gets a pid namespace of its own: a fact of how the host was
    /// provisioned, chosen when the server starts; no request can change it.
    pub pid_namespace: PidNamespace,
}

/// The pid namespace a sandboxed command runs in (`tether serve
/// --linux-sandbox-pid-namespace`, the reference's flag and values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PidNamespace {
    /// One of its own: the command sees and signals only what it started, and whatever it
    /// leaves behind dies with it.
    #[default]
    Isolate,
    /// The host's: the command sees every process and may signal those of its user, as a
    /// dedicated environment may want (a test harness that stops a service it did not start).
    /// Its own confinement is still out of its reach ([`inner`]): the inner stage and
    /// bubblewrap cannot be signalled or traced from inside, and what the command leaves
    /// behind still dies with it.
    Inherit,
}

static SANDBOXING: OnceLock<Sandboxing> = OnceLock::new();

impl Sandboxing {
    /// bubblewrap as given, or the first `bwrap` on `PATH` that is not under the current
    /// directory (a workspace must not be able to plant its own); the helper as given.
    pub fn detect(bwrap: Option<PathBuf>, helper: Option<PathBuf>) -> Self {
        let bwrap = bwrap.or_else(find_bwrap_on_path);
        Self { bwrap, helper, private: Vec::new(), pid_namespace: PidNamespace::default() }
    }

    /// The same, hiding `paths` (the server's own files) from every sandbox.
    pub fn hiding(self, paths: impl IntoIterator<Item = PathBuf>) -> Self {
        let private = paths.into_iter().map(|path| walk::resolved(&path)).collect();
        Self { private, ..self }
    }

    /// The same, running sandboxed commands in `pid_namespace`.
    pub fn with_pid_namespace(self, pid_namespace: PidNamespace) -> Self {
        Self { pid_namespace, ..self }
    }

    /// Makes `self` the process's sandboxing; the first call wins. Without a call, sandboxed
    /// work finds bubblewrap on `PATH` and has no helper (it fails closed).
    pub fn install(self) -> &'static Sandboxing {
        let _ = SANDBOXING.set(self);
        Self::current()
    }

    pub fn current() -> &'static Sandboxing {
        SANDBOXING.get_or_init(|| Sandboxing::detect(None, None))
    }

    /// Why a full sandbox cannot be built here, in a sentence that says what to do; `None`
    /// when it can be (user namespaces are found out only when bubblewrap runs).
    pub fn unavailable(&self) -> Option<String> {
        if self.bwrap.is_none() {
            return Some(
                "bubblewrap is unavailable: no system bwrap was found on PATH; install it \
                 (Debian and Ubuntu: `apt-get install bubblewrap`) or start the server with \
                 `tether serve --bwrap PATH`"
                    .into(),
            );
        }
        if self.helper.is_none() {
            return Some(
                "the sandbox helper is unavailable: this program embeds the engine without the \
                 `tether` binary's inner stage; serve sandboxed work with `tether serve`"
                    .into(),
            );
        }
        None
    }
}

fn find_bwrap_on_path() -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok();
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .filter(|dir| {
            cwd.as_deref().is_none_or(|cwd| !dir.starts_with(cwd) || cwd == Path::new("/"))
        })
        .map(|dir| dir.join("bwrap"))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether `bwrap` can build a sandbox here (it needs user namespaces): runs `true` in the
/// smallest one. `Err` carries bubblewrap's own words.
pub fn probe(bwrap: &Path) -> Result<(), String> {
    let output = std::process::Command::new(bwrap)
        .args(["--ro-bind", "/", "/", "--unshare-user", "--unshare-pid", "--", "/bin/true"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bwrap.display()))?;
    if output.status.success() {
        return Ok(());
    }
    let words = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    Err(format!(
        "{} cannot create a sandbox ({words}); user namespaces must be enabled \
         (sysctl user.max_user_namespaces > 0)",
        bwrap.display()
    ))
}
