//! bubblewrap's arguments for a [`FullPolicy`]: the mounts, the namespaces, and the inner
//! stage to run.
//!
//! The order is the reference's, because mounts made later cover earlier ones: `/` (or the
//! platform basics), a fresh `/dev`, then each grant least specific first (a writable root,
//! then its protected names), then what is hidden, then the namespaces, `/proc` and the
//! capabilities. This is where the policy meets the host: whether a path exists, is a file or
//! a directory, decides how it is mounted.
//!
//! Every source bubblewrap binds is an object held open ([`super::grants`], [`super::walk`]),
//! handed over as a descriptor (`--bind-fd`, `--ro-bind-fd`), never as a path. bubblewrap turns
//! a descriptor back into a path and mounts that path later, so each target's expected content
//! is written down too ([`super::mounted`]) and checked from inside before anything runs: a
//! path exchanged after it was checked fails the launch instead of changing what is mounted.
//! The targets made on the host are made beneath their parent reached without links
//! ([`super::synthetic`]).

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use tether_protocol::sandbox::NetworkAccess;

use super::globs::{self, GlobRefusal, MAX_GLOB_ENTRIES};
use super::grants::{CrossesWritableLink, GrantError, PinnedGrant, Protection, resolved_grants};
use super::inner::HELPER_ARG;
use super::mounted::{self, Mounted};
use super::policy::{Base, FullPolicy, GrantAccess};
use super::socket_dir::{self, SocketDirRefused};
use super::synthetic::{Kind, SyntheticTargets};
use super::walk::{Walked, resolved, walk};
use super::{PidNamespace, Sandboxing};

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
    /// A path to enforce crosses a link a sandboxed command could change, or cannot be
    /// reached at all.
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// The host could not be looked at, or a mount target made.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl PlanError {
    /// What the reference's helper says on stderr when it refuses to build this sandbox too
    /// (and exits 1); `None` where the host failed Tether instead.
    pub fn refusal(&self) -> Option<String> {
        match self {
            PlanError::SocketDir(_)
            | PlanError::Glob(_)
            | PlanError::Grant(GrantError::CrossesWritableLink(_)) => {
                Some(format!("error building bubblewrap command: {self}"))
            }
            PlanError::Grant(GrantError::Unreachable { .. }) | PlanError::Io(_) => None,
        }
    }
}

/// bubblewrap's arguments up to the command, and what they hold on the host.
#[derive(Debug, Default)]
pub struct Plan {
    pub args: Vec<OsString>,
    /// Descriptors bubblewrap is handed: the objects it binds, and an empty file per hidden
    /// file. They must be inherited by it (and are closed here once it has started).
    pub fds: Vec<OwnedFd>,
    /// What each target must hold once built, checked from inside before anything runs
    /// ([`mounted`]).
    pub mounted: Vec<Mounted>,
    pub synthetic: SyntheticTargets,
}

impl Plan {
    fn arg(&mut self, value: impl Into<OsString>) -> &mut Self {
        self.args.push(value.into());
        self
    }

    /// A bind of `object` (held open) onto `target`, read-only or writable.
    fn bind(&mut self, access: Bind, object: impl AsFd, target: &Path) -> std::io::Result<()> {
        let fd = object.as_fd().try_clone_to_owned()?;
        let flag = match access {
            Bind::ReadOnly => "--ro-bind-fd",
            Bind::Writable => "--bind-fd",
        };
        self.arg(flag).arg(fd.as_raw_fd().to_string()).arg(target);
        let object = Some(mounted::identity(&fd)?);
        mounted::push(&mut self.mounted, Mounted { target: target.to_path_buf(), object });
        self.fds.push(fd);
        Ok(())
    }

    /// A read-only bind of what `path` leads to (walked now, as a base path the intent does
    /// not grant: `/`, the platform basics, the helper), onto `path`; nothing when missing.
    fn bind_read_only(&mut self, path: &Path) -> Result<(), PlanError> {
        let walked = walk(path)
            .map_err(|source| GrantError::Unreachable { path: path.to_path_buf(), source })?;
        if let Some(object) = &walked.object {
            self.bind(Bind::ReadOnly, object, path)?;
        }
        Ok(())
    }

    /// An empty read-only directory over `path`, with `mode`.
    fn empty_dir(&mut self, path: &Path, mode: &str) {
        self.arg("--perms").arg(mode).arg("--tmpfs").arg(path).arg("--remount-ro").arg(path);
        self.fresh(path);
    }

    /// Notes that `path` holds a fresh, empty file system.
    fn fresh(&mut self, path: &Path) {
        mounted::push(&mut self.mounted, Mounted { target: path.to_path_buf(), object: None });
    }

    /// The helper's arguments up to its mode: [`HELPER_ARG`], then what every target must
    /// hold, for it to check before it does anything.
    pub fn helper_args(&self) -> Vec<OsString> {
        let expected = self.mounted.iter().flat_map(Mounted::to_args);
        std::iter::once(HELPER_ARG.into()).chain(expected).collect()
    }

    /// After a bind of `bound`: what no sandbox may see that lies below it (the app-server
    /// socket directory, the server's own files) masked again, since the bind brought the
    /// host's back.
    fn mask_below(&mut self, bound: &Path, masked: &[Masked]) -> std::io::Result<()> {
        for masked in masked.iter().filter(|masked| masked.path.starts_with(bound)) {
            match masked.is_dir {
                true => self.empty_dir(&masked.path, "000"),
                false => self.empty_file(&masked.path, Some("000"))?,
            }
        }
        Ok(())
    }

    /// `path`, which exists (a directory when `is_dir`), hidden: an empty, unreadable
    /// directory or file in its place.
    ///
    /// A hidden directory that holds writable roots (`keep`, bound after it) keeps the way to
    /// them: it can be passed through but not listed (mode `111`), with their mount points made
    /// in it before it is made read-only, as the reference does.
    fn hide(&mut self, path: &Path, is_dir: bool, keep: &[&Path]) -> std::io::Result<()> {
        // What a sandbox still running made here is held for this one too.
        if let Some(kind) = self.synthetic.hold_if_made(path) {
            return self.cover_made(path, kind, keep);
        }
        match is_dir {
            true => self.hidden_dir(path, keep),
            false => self.empty_file(path, Some("000"))?,
        }
        Ok(())
    }

    /// `path`, which does not exist, hidden. It cannot be created instead: where the command
    /// could create it (`creatable`: a writable root holds it), its first missing component
    /// becomes an empty read-only file, on a target made on the host; elsewhere it is left
    /// missing, as the reference leaves it.
    fn hide_missing(&mut self, path: &Path, creatable: bool) -> std::io::Result<()> {
        if !creatable {
            return Ok(());
        }
        // The target a sandbox still running made on the way is held, and covered, for this
        // one too: left bare, the command could replace it and create the path below.
        for made in path.ancestors() {
            if let Some(kind) = self.synthetic.hold_if_made(made) {
                return self.cover_made(made, kind, &[]);
            }
        }
        let Some(target) = first_missing(path) else { return Ok(()) };
        match self.synthetic.make(&target, Kind::File) {
            Ok(_) => self.empty_file(&target, None),
            // Where Tether may not create it, neither may the command.
            Err(error) if cannot_create(&error) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// A target made on the host for another sandbox, covered as that sandbox covers it.
    fn cover_made(&mut self, path: &Path, kind: Kind, keep: &[&Path]) -> std::io::Result<()> {
        match kind {
            Kind::Directory => {
                self.hidden_dir(path, keep);
                Ok(())
            }
            Kind::File => self.empty_file(path, Some("000")),
        }
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
        self.fresh(path);
    }

    /// A read-only file holding `contents` over `path` (which exists), readable by all.
    pub fn data_file(&mut self, path: &Path, contents: &[u8]) -> std::io::Result<()> {
        let file = rustix::fs::memfd_create("tether-data", rustix::fs::MemfdFlags::CLOEXEC)?;
        rustix::io::write(&file, contents)?;
        rustix::fs::seek(&file, rustix::fs::SeekFrom::Start(0))?;
        let number = file.as_raw_fd();
        self.fds.push(file);
        self.arg("--perms").arg("0444");
        self.arg("--ro-bind-data").arg(number.to_string()).arg(path);
        self.fresh(path);
        Ok(())
    }

    /// An empty read-only file over `path`, with `mode` or bubblewrap's own (`0600`).
    fn empty_file(&mut self, path: &Path, mode: Option<&str>) -> std::io::Result<()> {
        let empty = std::fs::File::open("/dev/null")?;
        let fd: OwnedFd = empty.into();
        let number = fd.as_raw_fd();
        self.fds.push(fd);
        if let Some(mode) = mode {
            self.arg("--perms").arg(mode);
        }
        self.arg("--ro-bind-data").arg(number.to_string()).arg(path);
        self.fresh(path);
        Ok(())
    }

    /// Read-only binds of those of `paths` that exist. A link is bound as what it leads to,
    /// as the reference binds it: on a merged-`/usr` host `/bin` is a directory inside, not a
    /// link to `usr/bin`.
    fn read_only_paths(&mut self, paths: &[&str], masked: &[Masked]) -> Result<(), PlanError> {
        for path in paths.iter().map(Path::new) {
            self.bind_read_only(path)?;
            self.mask_below(path, masked)?;
        }
        Ok(())
    }
}

/// How an object is bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bind {
    ReadOnly,
    Writable,
}

/// What the sandbox is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A client's command: every namespace the intent calls for, and the pid namespace the
    /// server was started with.
    Command(PidNamespace),
    /// One file operation by the helper, which runs only Tether's own code: no network or
    /// IPC namespace (each costs launch time and would isolate nothing the helper uses). The
    /// pid namespace stays, whatever commands get: the helper's `/proc` must not show the
    /// host's processes, whose `/proc/<pid>/root` leads out.
    FileOperation,
}

impl Purpose {
    fn pid_namespace(self) -> PidNamespace {
        match self {
            Purpose::Command(pids) => pids,
            Purpose::FileOperation => PidNamespace::Isolate,
        }
    }
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
    let masked = masked(socket_dir.as_deref(), &Sandboxing::current().private);
    let pids = purpose.pid_namespace();
    let mut plan = Plan::default();
    // The inner stage is the namespace's first process, with no reaper of bubblewrap's above
    // it; without a pid namespace there is no such place to take.
    if pids == PidNamespace::Isolate {
        plan.arg("--as-pid-1");
    }
    plan.arg("--new-session").arg("--die-with-parent");
    match (policy.base, purpose) {
        (Base::Root, _) => plan.bind_read_only(Path::new("/"))?,
        // The helper reads what Tether needs to run, as the reference's helper does, whatever
        // the intent: reads elsewhere still need a grant.
        (Base::Minimal, _) | (Base::Empty, Purpose::FileOperation) => {
            plan.read_only_paths(&MINIMAL_PATHS, &masked)?
        }
        // Only what loading the inner stage takes.
        (Base::Empty, Purpose::Command(_)) => plan.read_only_paths(&LOADER_PATHS, &masked)?,
    }
    if policy.base != Base::Root {
        plan.bind_read_only(helper)?;
    }
    plan.arg("--dev").arg("/dev");
    if policy.base == Base::Root {
        plan.mask_below(Path::new("/"), &masked)?;
    }

    // Every grant as the kernel reaches it, least specific first again.
    let mut grants = resolved_grants(policy)?;
    grants.sort_by_key(|g| g.path.components().count());
    // Each writable root, with its protected names as the kernel reaches them.
    let writable: Vec<&PinnedGrant> =
        grants.iter().filter(|g| g.access == GrantAccess::Write && g.is_dir()).collect();
    let is_protected = |path: &Path| {
        writable.iter().any(|root| root.protected.iter().any(|name| name.path == path))
    };
    let in_writable_root = |path: &Path| writable.iter().any(|root| path.starts_with(&root.path));
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
        let Some(object) = &grant.object else {
            // A missing path grants nothing; one to hide is covered where it could be made.
            if grant.access == GrantAccess::None {
                hidden += 1;
                within_hidden_limit(hidden, &grant.path.to_string_lossy())?;
                plan.hide_missing(&grant.path, in_writable_root(&grant.path))?;
            }
            continue;
        };
        match grant.access {
            GrantAccess::Write if grant.is_dir() => {
                if !writable_through_another(grant, &grants, &masked) {
                    plan.bind(Bind::Writable, object, &grant.path)?;
                }
                if grant.path == Path::new("/") {
                    // The host's `/dev` came with `/`, bound without devices: a fresh one
                    // again, with the host's shared memory, as the reference does.
                    plan.arg("--dev").arg("/dev");
                    plan.arg("--bind-try").arg("/dev/shm").arg("/dev/shm");
                }
                plan.mask_below(&grant.path, &masked)?;
                for name in &grant.protected {
                    protect(&mut plan, name)?;
                }
            }
            // A single file is bound writable as it is (it has no protected names).
            GrantAccess::Write => {
                if grant.kind == Some(rustix::fs::FileType::RegularFile) {
                    plan.bind(Bind::Writable, object, &grant.path)?;
                }
            }
            // Protected names are handled with their root; elsewhere a read grant matters
            // only where `/` is not readable, or inside something writable.
            GrantAccess::Read if is_protected(&grant.path) => {}
            // Below a hidden path it stays hidden, as on the reference, which binds it before
            // the mask that covers it.
            GrantAccess::Read => {
                if (policy.base != Base::Root || in_writable_root(&grant.path))
                    && !hidden_above(&grant.path)
                {
                    plan.bind(Bind::ReadOnly, object, &grant.path)?;
                    plan.mask_below(&grant.path, &masked)?;
                }
            }
            GrantAccess::None => {
                hidden += 1;
                within_hidden_limit(hidden, &grant.path.to_string_lossy())?;
                let keep: Vec<&Path> = writable
                    .iter()
                    .map(|root| root.path.as_path())
                    .filter(|root| *root != grant.path && root.starts_with(&grant.path))
                    .collect();
                plan.hide(&grant.path, grant.is_dir(), &keep)?;
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
    plan.arg("--unshare-user");
    if pids == PidNamespace::Isolate {
        plan.arg("--unshare-pid");
    }
    if let Purpose::Command(_) = purpose {
        plan.arg("--unshare-ipc");
        if policy.network == NetworkAccess::Restricted {
            plan.arg("--unshare-net");
        }
    }
    match pids {
        PidNamespace::Isolate => {
            plan.arg("--proc").arg("/proc");
        }
        // A `/proc` of its own would show the namespace the command is not in; the host's is
        // the one that shows what it may signal, read-only as the reference binds it.
        PidNamespace::Inherit => plan.bind_read_only(Path::new("/proc"))?,
    }
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

/// A path no full sandbox shows: the app-server socket directory, and the server's own files
/// ([`Sandboxing::private`]) that exist.
#[derive(Debug)]
struct Masked {
    path: PathBuf,
    is_dir: bool,
}

fn masked(socket_dir: Option<&Path>, private: &[PathBuf]) -> Vec<Masked> {
    let socket_dir = socket_dir.map(|dir| Masked { path: dir.to_path_buf(), is_dir: true });
    let private = private.iter().filter_map(|path| {
        let is_dir = std::fs::symlink_metadata(path).ok()?.is_dir();
        Some(Masked { path: path.clone(), is_dir })
    });
    socket_dir.into_iter().chain(private).collect()
}

/// Whether the writable root `root` is already writable as the host has it, through the bind
/// of another writable root above it with nothing mounted in between: it is then not bound
/// again. A bind's source and target are paths to bubblewrap, and the directories between two
/// writable roots are ones a command in a sandbox of the same intent can rename at will (its
/// mount of the inner root moves with them): left out, the bind cannot be sent elsewhere by
/// such a rename, and whatever bubblewrap makes for the mounts that follow lands inside the
/// outer root, which is writable anyway.
fn writable_through_another(root: &PinnedGrant, grants: &[PinnedGrant], masked: &[Masked]) -> bool {
    let Some(outer) = grants
        .iter()
        .filter(|g| g.access == GrantAccess::Write && g.is_dir())
        .filter(|g| g.path != root.path && root.path.starts_with(&g.path))
        .max_by_key(|g| g.path.components().count())
    else {
        return false;
    };
    // Anything mounted between the two (a grant that reads or hides, a protected name, the
    // socket directory) would cover the inner root as the host has it.
    let between = |path: &Path| path.starts_with(&outer.path) && root.path.starts_with(path);
    let grant_between =
        grants.iter().any(|g| {
            g.path != outer.path
                && g.path != root.path
                && g.access != GrantAccess::Write
                && between(&g.path)
        }) || grants.iter().any(|g| g.path == root.path && g.access != GrantAccess::Write);
    let name_between = grants
        .iter()
        .filter(|g| g.access == GrantAccess::Write)
        .flat_map(|g| &g.protected)
        .any(|name| between(&name.path));
    !grant_between && !name_between && !masked.iter().any(|masked| between(&masked.path))
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

/// A protected name inside a writable root, kept read-only: what exists is bound read-only (the
/// object walked to); what does not (or is an empty directory) becomes an empty read-only
/// directory, on a target made on the host if need be.
fn protect(plan: &mut Plan, name: &Walked) -> Result<(), PlanError> {
    let path = name.path.as_path();
    // Made first, not looked at first: one another sandbox made (an empty directory, like a
    // user's) must be held for this one too, or the first to end would remove it.
    if plan.synthetic.make(path, Kind::Directory)? {
        plan.empty_dir(path, "555");
        return Ok(());
    }
    // Missing when walked, there now: made since, and walked now, in the same steps.
    let again;
    let name = match name.object {
        Some(_) => name,
        None => {
            again = walk(path)
                .map_err(|source| GrantError::Unreachable { path: path.to_path_buf(), source })?;
            if let Some(link) = again.links.iter().find(|link| !name.links.contains(link)) {
                let protection = Protection::ReadOnly;
                let link = link.clone();
                let refused = CrossesWritableLink { protection, path: path.to_path_buf(), link };
                return Err(GrantError::from(refused).into());
            }
            &again
        }
    };
    let Some(object) = &name.object else {
        // Gone again: nothing to bind, and a mount needs a target.
        plan.synthetic.make(path, Kind::Directory)?;
        plan.empty_dir(path, "555");
        return Ok(());
    };
    match name.is_dir()? && is_empty_dir(object)? {
        true => plan.empty_dir(path, "555"),
        false => plan.bind(Bind::ReadOnly, object, path)?,
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

/// Whether the directory held as `object` has no entries.
fn is_empty_dir(object: &OwnedFd) -> std::io::Result<bool> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let dir = rustix::fs::openat(object, ".", flags, Mode::empty())?;
    for entry in rustix::fs::Dir::read_from(&dir)? {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use tether_testkit::scratch::Scratch;

    use super::*;
    use crate::sandbox::policy::Grant;

    /// The arguments as one line, each descriptor handed over written `FD`.
    fn text(plan: &Plan) -> String {
        let mut words: Vec<String> = Vec::new();
        for arg in &plan.args {
            let arg = arg.to_string_lossy().into_owned();
            let after_fd = words.last().is_some_and(|flag| flag.ends_with("-fd"));
            words.push(if after_fd { "FD".into() } else { arg });
        }
        words.join(" ")
    }

    /// What each descriptor handed to bubblewrap is bound onto, by the path of the object it
    /// holds: (object, target).
    fn bound(plan: &Plan) -> Vec<(PathBuf, PathBuf)> {
        plan.args
            .windows(3)
            .filter(|w| w[0] == "--bind-fd" || w[0] == "--ro-bind-fd")
            .map(|w| {
                let held = std::fs::read_link(format!("/proc/self/fd/{}", w[1].to_string_lossy()));
                (held.unwrap(), PathBuf::from(&w[2]))
            })
            .collect()
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
        let plan =
            plan(&policy, Path::new("/helper"), &root, Purpose::Command(PidNamespace::Isolate))
                .unwrap();
        let r = root.display();
        let args = text(&plan);
        assert!(
            args.starts_with(
                "--as-pid-1 --new-session --die-with-parent --ro-bind-fd FD / --dev /dev"
            ),
            "{args}"
        );
        assert!(args.contains(&format!("--bind-fd FD {r} --ro-bind-fd FD {r}/.git --perms 555 --tmpfs {r}/.agents --remount-ro {r}/.agents")), "{args}");
        // Each descriptor holds what it is bound onto.
        let expected = [
            ("/".into(), "/".into()),
            (root.clone(), root.clone()),
            (root.join(".git"), root.join(".git")),
        ];
        assert_eq!(bound(&plan), expected);
        assert_eq!(plan.fds.len(), 3);
        assert!(args.ends_with(&format!("--unshare-user --unshare-pid --unshare-ipc --unshare-net --proc /proc --cap-drop ALL --chdir {r}")), "{args}");
        assert!(root.join(".agents").is_dir(), "a target made on the host");
        drop(plan);
        assert!(!root.join(".agents").exists(), "and removed with the plan");
    }

    /// In the host's pid namespace a command gets no namespace of its own and sees the host's
    /// `/proc`, read-only; the helper's file operations keep theirs whatever commands get.
    #[test]
    fn the_host_pid_namespace_is_for_commands_only() {
        let scratch = Scratch::new("pids");
        let root = scratch.path("");
        let policy = FullPolicy {
            base: Base::Minimal,
            grants: vec![],
            denied_globs: vec![],
            network: NetworkAccess::Restricted,
        };
        let helper = Path::new("/bin/true");
        let command = plan(&policy, helper, &root, Purpose::Command(PidNamespace::Inherit));
        let args = text(&command.unwrap());
        assert!(args.starts_with("--new-session --die-with-parent --ro-bind-fd FD /bin"), "{args}");
        let r = root.display();
        assert!(
            args.ends_with(&format!(
                "--unshare-user --unshare-ipc --unshare-net --ro-bind-fd FD /proc --remount-ro / \
                 --cap-drop ALL --chdir {r}"
            )),
            "{args}"
        );
        let file_operation = text(&plan(&policy, helper, &root, Purpose::FileOperation).unwrap());
        assert!(file_operation.starts_with("--as-pid-1 --new-session"), "{file_operation}");
        assert!(file_operation.contains("--unshare-user --unshare-pid --proc /proc"));
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
        let plan = plan(
            &policy,
            Path::new("/helper"),
            Path::new("/"),
            Purpose::Command(PidNamespace::Isolate),
        )
        .unwrap();
        let args = text(&plan);
        assert!(
            args.contains(&format!(
                "--perms 000 --tmpfs {0}/sub --remount-ro {0}/sub",
                root.display()
            )),
            "{args}"
        );
        assert_eq!(plan.fds.len(), 3, "`/` and an empty file for each hidden file: {args}");
        assert!(!args.contains("--unshare-net"));
    }

    #[test]
    fn a_root_inside_another_is_bound_again_only_where_something_between_covers_it() {
        let scratch = Scratch::new("nested");
        let outer = std::fs::canonicalize(scratch.path("")).unwrap();
        for dir in ["a/inner", "ro/inner"] {
            std::fs::create_dir_all(outer.join(dir)).unwrap();
        }
        let grant = |path: PathBuf, access| Grant { path, access, skip_if_missing: false };
        let policy = FullPolicy {
            base: Base::Root,
            grants: vec![
                grant(outer.clone(), GrantAccess::Write),
                grant(outer.join("a/inner"), GrantAccess::Write),
                grant(outer.join("ro"), GrantAccess::Read),
                grant(outer.join("ro/inner"), GrantAccess::Write),
            ],
            denied_globs: vec![],
            network: NetworkAccess::Restricted,
        };
        let plan =
            plan(&policy, Path::new("/helper"), &outer, Purpose::Command(PidNamespace::Isolate))
                .unwrap();
        let targets: Vec<PathBuf> = bound(&plan).into_iter().map(|(_, target)| target).collect();
        let expected = ["/".into(), outer.clone(), outer.join("ro"), outer.join("ro/inner")];
        assert_eq!(targets, expected);
        // The inner root's protected names are laid all the same.
        assert!(text(&plan).contains(&format!("--tmpfs {}/a/inner/.git", outer.display())));
    }
}
