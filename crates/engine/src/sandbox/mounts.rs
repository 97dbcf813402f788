//! bubblewrap's arguments for a [`FullPolicy`]: the mounts, the namespaces, and the inner
//! stage to run.
//!
//! The order is the reference's, because mounts made later cover earlier ones: `/` (or the
//! platform basics), a fresh `/dev`, then each grant least specific first (a writable root,
//! then its protected names), then what is hidden, then the namespaces, `/proc` and the
//! capabilities. This is where the policy meets the host: whether a path exists, is a file or
//! a directory, decides how it is mounted.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use tether_protocol::sandbox::NetworkAccess;

use super::globs::{self, GlobRefusal, MAX_GLOB_ENTRIES};
use super::grants::{CrossesWritableLink, resolved, resolved_grants};
use super::policy::{Base, FullPolicy, GrantAccess, PROTECTED_NAMES};
use super::socket_dir::{self, SocketDirRefused};
use super::synthetic::{Kind, SyntheticTargets};

/// The platform basics `minimal` makes readable.
const MINIMAL_PATHS: [&str; 6] = ["/bin", "/etc", "/lib", "/lib64", "/sbin", "/usr"];

/// What the inner stage needs to run where `/` is not readable: the dynamic loader and the C
/// library (the helper binary itself is added by path).
const LOADER_PATHS: [&str; 4] = ["/lib", "/lib64", "/usr/lib", "/usr/lib64"];

/// How many paths one sandbox may hide. Each costs a mount and a descriptor at launch; a glob
/// matching more than this refuses the launch rather than hide only some.
pub const MAX_HIDDEN_PATHS: usize = 256;

/// Why a sandbox's arguments could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The app-server socket directory is not as it must be to be masked (see
    /// [`socket_dir`]).
    #[error(transparent)]
    SocketDir(#[from] SocketDirRefused),
    /// A `none` glob cannot be searched as asked (see [`globs`]).
    #[error(transparent)]
    Glob(#[from] GlobRefusal),
    /// A path to enforce crosses a link a sandboxed command could change.
    #[error(transparent)]
    CrossesWritableLink(#[from] CrossesWritableLink),
    /// The host could not be looked at, or a mount target made.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl PlanError {
    /// What the reference's helper says on stderr when it refuses to build this sandbox too
    /// (and exits 1); `None` where the host failed Tether instead.
    pub fn refusal(&self) -> Option<String> {
        match self {
            PlanError::SocketDir(_) | PlanError::Glob(_) | PlanError::CrossesWritableLink(_) => {
                Some(format!("error building bubblewrap command: {self}"))
            }
            PlanError::Io(_) => None,
        }
    }
}

/// bubblewrap's arguments up to the command, and what they hold on the host.
#[derive(Debug, Default)]
pub struct Plan {
    pub args: Vec<OsString>,
    /// Descriptors bubblewrap reads an empty file from, one per hidden file; they must be
    /// inherited by it (and are closed here once it has started).
    pub data_fds: Vec<std::os::fd::OwnedFd>,
    pub synthetic: SyntheticTargets,
}

impl Plan {
    fn arg(&mut self, value: impl Into<OsString>) -> &mut Self {
        self.args.push(value.into());
        self
    }

    fn path_args(&mut self, flag: &str, path: &Path) {
        self.arg(flag).arg(path).arg(path);
    }

    /// An empty read-only directory over `path`, with `mode`.
    fn empty_dir(&mut self, path: &Path, mode: &str) {
        self.arg("--perms").arg(mode).arg("--tmpfs").arg(path).arg("--remount-ro").arg(path);
    }

    /// After a bind of `bound`: the app-server socket directory, if it is below, masked again
    /// (the bind brought the host's back).
    fn mask_socket_dir_below(&mut self, bound: &Path, socket_dir: Option<&Path>) {
        if let Some(dir) = socket_dir.filter(|dir| dir.starts_with(bound)) {
            self.empty_dir(dir, "000");
        }
    }

    /// `path` hidden: an empty, unreadable directory or file in its place. A missing path
    /// cannot be created instead: where the command could create it (`creatable`: a writable
    /// root holds it), its first missing component becomes an empty read-only file, on a
    /// target made on the host; elsewhere it is left missing, as the reference leaves it.
    ///
    /// A hidden directory that holds writable roots (`keep`, bound after it) keeps the way to
    /// them: it can be passed through but not listed (mode `111`), with their mount points made
    /// in it before it is made read-only, as the reference does.
    fn hide(&mut self, path: &Path, creatable: bool, keep: &[&Path]) -> std::io::Result<()> {
        // What a sandbox still running made here is held for this one too.
        match self.synthetic.hold_if_made(path) {
            Some(Kind::Directory) => {
                self.hidden_dir(path, keep);
                return Ok(());
            }
            Some(Kind::File) => return self.empty_file(path, Some("000")),
            None => {}
        }
        match std::fs::metadata(path) {
            Ok(metadata) if metadata.is_dir() => self.hidden_dir(path, keep),
            Ok(_) => self.empty_file(path, Some("000"))?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && !creatable => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let Some(target) = first_missing(path) else { return Ok(()) };
                match self.synthetic.make(&target, Kind::File) {
                    Ok(_) => self.empty_file(&target, None)?,
                    // Where Tether may not create it, neither may the command.
                    Err(error) if cannot_create(&error) => {}
                    Err(error) => return Err(error),
                }
            }
            Err(error) => return Err(error),
        }
        Ok(())
    }

    /// An empty, unreadable directory over `path`; with the mount points of `keep` in it, and
    /// passable, if it must lead to them.
    fn hidden_dir(&mut self, path: &Path, keep: &[&Path]) {
        if keep.is_empty() {
            return self.empty_dir(path, "000");
        }
        self.arg("--perms").arg("111").arg("--tmpfs").arg(path);
        for inner in keep {
            self.arg("--dir").arg(*inner);
        }
        self.arg("--remount-ro").arg(path);
    }

    /// An empty read-only file over `path`, with `mode` or bubblewrap's own (`0600`).
    fn empty_file(&mut self, path: &Path, mode: Option<&str>) -> std::io::Result<()> {
        let empty = std::fs::File::open("/dev/null")?;
        let fd: std::os::fd::OwnedFd = empty.into();
        let number: RawFd = std::os::fd::AsRawFd::as_raw_fd(&fd);
        self.data_fds.push(fd);
        if let Some(mode) = mode {
            self.arg("--perms").arg(mode);
        }
        self.arg("--ro-bind-data").arg(number.to_string()).arg(path);
        Ok(())
    }

    /// Read-only binds of those of `paths` that exist. A link is bound as what it leads to,
    /// as the reference binds it: on a merged-`/usr` host `/bin` is a directory inside, not a
    /// link to `usr/bin`.
    fn read_only_paths(&mut self, paths: &[&str]) {
        for path in paths.iter().map(Path::new).filter(|path| path.exists()) {
            self.path_args("--ro-bind", path);
        }
    }
}

/// What the sandbox is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A client's command: every namespace the intent calls for.
    Command,
    /// One file operation by the helper, which runs only Tether's own code: no network or
    /// IPC namespace (each costs launch time and would isolate nothing the helper uses). The
    /// pid namespace stays: the helper's `/proc` must not show the host's processes, whose
    /// `/proc/<pid>/root` leads out.
    FileOperation,
}

/// The mounts and namespaces for `policy`, running the command in `cwd`. `helper` is the
/// binary of the inner stage, made readable when `/` is not.
pub fn plan(
    policy: &FullPolicy,
    helper: &Path,
    cwd: &Path,
    purpose: Purpose,
) -> Result<Plan, PlanError> {
    let socket_dir = socket_dir::prepare(&socket_dir::path(), rustix::process::geteuid().as_raw())?
        .map(|dir| resolved(&dir));
    let socket_dir = socket_dir.as_deref();
    let mut plan = Plan::default();
    plan.arg("--as-pid-1").arg("--new-session").arg("--die-with-parent");
    match (policy.base, purpose) {
        (Base::Root, _) => plan.path_args("--ro-bind", Path::new("/")),
        // The helper reads what Tether needs to run, as the reference's helper does, whatever
        // the intent: reads elsewhere still need a grant.
        (Base::Minimal, _) | (Base::Empty, Purpose::FileOperation) => {
            plan.read_only_paths(&MINIMAL_PATHS)
        }
        // Only what loading the inner stage takes.
        (Base::Empty, Purpose::Command) => plan.read_only_paths(&LOADER_PATHS),
    }
    if policy.base != Base::Root {
        plan.path_args("--ro-bind", helper);
    }
    plan.arg("--dev").arg("/dev");
    if policy.base == Base::Root {
        plan.mask_socket_dir_below(Path::new("/"), socket_dir);
    }

    // Every grant as the kernel reaches it, least specific first again.
    let mut grants = resolved_grants(policy)?;
    grants.sort_by_key(|g| g.path.components().count());
    let granted_writes: HashSet<&Path> = grants
        .iter()
        .filter(|g| g.access == GrantAccess::Write)
        .map(|g| g.path.as_path())
        .collect();
    // Each writable root, with its protected names as the kernel reaches them.
    let writable: Vec<(PathBuf, Vec<PathBuf>)> = grants
        .iter()
        .filter(|g| g.access == GrantAccess::Write && g.path.is_dir())
        .map(|g| {
            // A name the intent itself makes writable is the intent's, not protected.
            let names = PROTECTED_NAMES
                .iter()
                .map(|name| resolved(&g.path.join(name)))
                .filter(|name| !granted_writes.contains(name.as_path()))
                .collect();
            (g.path.clone(), names)
        })
        .collect();
    let is_protected =
        |path: &Path| writable.iter().any(|(_, names)| names.iter().any(|n| n == path));
    let in_writable_root = |path: &Path| writable.iter().any(|(root, _)| path.starts_with(root));
    // The nearest grant above `path` hides it (nothing writable between).
    let hidden_above = |path: &Path| {
        grants
            .iter()
            .filter(|above| above.path != path && path.starts_with(&above.path))
            .max_by_key(|above| above.path.components().count())
            .is_some_and(|above| above.access == GrantAccess::None)
    };
    let mut hidden = 0usize;
    for grant in &grants {
        match grant.access {
            GrantAccess::Write => {
                let Some((_, names)) = writable.iter().find(|(root, _)| *root == grant.path) else {
                    // A single file is bound writable as it is (it has no protected names); a
                    // missing path grants nothing.
                    if grant.path.is_file() {
                        plan.path_args("--bind", &grant.path);
                    }
                    continue;
                };
                plan.path_args("--bind", &grant.path);
                if grant.path == Path::new("/") {
                    // The host's `/dev` came with `/`, bound without devices: a fresh one
                    // again, with the host's shared memory, as the reference does.
                    plan.arg("--dev").arg("/dev");
                    plan.arg("--bind-try").arg("/dev/shm").arg("/dev/shm");
                }
                plan.mask_socket_dir_below(&grant.path, socket_dir);
                for name in names {
                    protect(&mut plan, name)?;
                }
            }
            // Protected names are handled with their root; elsewhere a read grant matters
            // only where `/` is not readable, or inside something writable.
            GrantAccess::Read if is_protected(&grant.path) => {}
            // Below a hidden path it stays hidden, as on the reference, which binds it before
            // the mask that covers it.
            GrantAccess::Read => {
                if (policy.base != Base::Root || in_writable_root(&grant.path))
                    && grant.path.exists()
                    && !hidden_above(&grant.path)
                {
                    plan.path_args("--ro-bind", &grant.path);
                    plan.mask_socket_dir_below(&grant.path, socket_dir);
                }
            }
            GrantAccess::None => {
                hidden += 1;
                within_hidden_limit(hidden, &grant.path.to_string_lossy())?;
                let creatable = in_writable_root(&grant.path);
                let keep: Vec<&Path> = writable
                    .iter()
                    .map(|(root, _)| root.as_path())
                    .filter(|root| *root != grant.path && root.starts_with(&grant.path))
                    .collect();
                plan.hide(&grant.path, creatable, &keep)?;
            }
        }
    }
    let glob_matches = match policy.denied_globs.is_empty() {
        true => Vec::new(),
        false => globs::searching(|| {
            let mut budget = MAX_GLOB_ENTRIES;
            policy
                .denied_globs
                .iter()
                .map(|pattern| {
                    Ok((pattern, globs::expand(pattern, MAX_HIDDEN_PATHS, &mut budget)?))
                })
                .collect::<Result<Vec<_>, GlobRefusal>>()
        })?,
    };
    for (pattern, paths) in glob_matches {
        for path in paths {
            hidden += 1;
            within_hidden_limit(hidden, pattern)?;
            // A glob's matches exist.
            plan.hide(&path, false, &[])?;
        }
    }
    plan.arg("--unshare-user").arg("--unshare-pid");
    if purpose == Purpose::Command {
        plan.arg("--unshare-ipc");
        if policy.network == NetworkAccess::Restricted {
            plan.arg("--unshare-net");
        }
    }
    plan.arg("--proc").arg("/proc");
    if policy.base != Base::Root {
        // The root bubblewrap builds is a scratch tmpfs: left writable, a write outside every
        // grant would "succeed" into memory and vanish. Read-only, it is refused as a write
        // outside the grants is refused when `/` is readable.
        plan.arg("--remount-ro").arg("/");
    }
    plan.arg("--cap-drop").arg("ALL");
    plan.arg("--chdir").arg(resolved(cwd));
    Ok(plan)
}

/// Refuses the launch once `hidden` passes [`MAX_HIDDEN_PATHS`], naming what took it there.
fn within_hidden_limit(hidden: usize, what: &str) -> std::io::Result<()> {
    if hidden > MAX_HIDDEN_PATHS {
        return Err(std::io::Error::other(format!(
            "the sandbox would hide more than {MAX_HIDDEN_PATHS} paths (`{what}`); name fewer"
        )));
    }
    Ok(())
}

/// A protected name inside a writable root, kept read-only: what exists is bound read-only;
/// what does not (or is an empty directory) becomes an empty read-only directory, on a target
/// made on the host if need be.
fn protect(plan: &mut Plan, path: &Path) -> std::io::Result<()> {
    // Made first, not looked at first: one another sandbox made (an empty directory, like a
    // user's) must be held for this one too, or the first to end would remove it.
    if plan.synthetic.make(path, Kind::Directory)? {
        plan.empty_dir(path, "555");
        return Ok(());
    }
    match std::fs::symlink_metadata(path)? {
        meta if meta.is_dir() && is_empty_dir(path) => plan.empty_dir(path, "555"),
        _ => plan.path_args("--ro-bind", path),
    }
    Ok(())
}

/// The first component of `path` that does not exist, below the deepest that does and is a
/// directory; `None` when nothing is missing, or when what exists is not a directory (nothing
/// can be created below it) or is a link (what it leads to is not the intent's to hide).
fn first_missing(path: &Path) -> Option<PathBuf> {
    let mut missing = path;
    loop {
        let parent = missing.parent()?;
        match std::fs::symlink_metadata(parent) {
            Ok(meta) if meta.is_dir() => break,
            Ok(_) => return None,
            Err(_) => missing = parent,
        }
    }
    match std::fs::symlink_metadata(missing) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Some(missing.to_path_buf()),
        _ => None,
    }
}

fn cannot_create(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
    )
}

fn is_empty_dir(path: &Path) -> bool {
    std::fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_none())
}

#[cfg(test)]
mod tests {
    use tether_testkit::scratch::Scratch;

    use super::*;
    use crate::sandbox::policy::Grant;

    fn text(plan: &Plan) -> String {
        plan.args.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn a_writable_root_is_bound_with_its_protected_names_read_only() {
        let scratch = Scratch::new("root");
        let root = scratch.path("");
        std::fs::create_dir(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "x").unwrap();
        let policy = FullPolicy {
            base: Base::Root,
            grants: vec![Grant {
                path: root.clone(),
                access: GrantAccess::Write,
                skip_if_missing: false,
            }],
            denied_globs: vec![],
            network: NetworkAccess::Restricted,
        };
        let plan = plan(&policy, Path::new("/helper"), &root, Purpose::Command).unwrap();
        let r = root.display();
        let args = text(&plan);
        assert!(
            args.starts_with("--as-pid-1 --new-session --die-with-parent --ro-bind / / --dev /dev"),
            "{args}"
        );
        assert!(args.contains(&format!("--bind {r} {r} --ro-bind {r}/.git {r}/.git --perms 555 --tmpfs {r}/.agents --remount-ro {r}/.agents")), "{args}");
        assert!(args.ends_with(&format!("--unshare-user --unshare-pid --unshare-ipc --unshare-net --proc /proc --cap-drop ALL --chdir {r}")), "{args}");
        assert!(root.join(".agents").is_dir(), "a target made on the host");
        drop(plan);
        assert!(!root.join(".agents").exists(), "and removed with the plan");
    }

    #[test]
    fn hidden_paths_become_empty_and_unreadable() {
        let scratch = Scratch::new("hide");
        let root = scratch.path("");
        std::fs::write(root.join("a.key"), "secret").unwrap();
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::write(root.join("sub/deeper/b.key"), "secret").unwrap();
        std::fs::write(root.join("sub/c.txt"), "fine").unwrap();
        let pattern = format!("{}/**/*.key", root.display());
        let policy = FullPolicy {
            base: Base::Root,
            grants: vec![Grant {
                path: root.join("sub"),
                access: GrantAccess::None,
                skip_if_missing: false,
            }],
            denied_globs: vec![pattern],
            network: NetworkAccess::Enabled,
        };
        let plan = plan(&policy, Path::new("/helper"), Path::new("/"), Purpose::Command).unwrap();
        let args = text(&plan);
        assert!(
            args.contains(&format!(
                "--perms 000 --tmpfs {0}/sub --remount-ro {0}/sub",
                root.display()
            )),
            "{args}"
        );
        assert_eq!(plan.data_fds.len(), 2, "{args}");
        assert!(!args.contains("--unshare-net"));
    }
}
