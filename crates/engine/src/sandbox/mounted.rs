//! What a sandbox's mounts must be, checked from inside it before anything runs there.
//!
//! bubblewrap is handed each source as a descriptor, but it cannot mount a descriptor from
//! another user namespace: it turns it back into a path when it starts and mounts that path
//! later, and it resolves each mount's target by path as well. A command already running in a
//! sandbox of its own, with write access above the next sandbox's paths, can exchange a
//! directory there between the two steps; bubblewrap's own check after a mount looks at the
//! target by path again, and passes when the exchange has been undone by then. So the server
//! writes down what each target must hold ([`Mounted`]: the object it checked, by device and
//! inode, or a fresh empty file system), and the first thing that runs inside the sandbox
//! ([`verify`], before the inner stage or the file helper does anything) reaches each target
//! without following a link and checks that it is a mount's root holding exactly that. A
//! sandbox in which any target is not refuses to run anything: the command or the file
//! operation fails, saying which path changed, and nothing it asked for is done.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use rustix::fs::{AtFlags, CWD, Mode, OFlags, ResolveFlags, StatxAttributes, StatxFlags};

use super::exit_status::{BUILD_REFUSED_STATUS, CHANGED_STATUS};

/// The argument that introduces one expectation: `--mounted <DEV:INO|fresh> <TARGET>`.
pub const FLAG: &str = "--mounted";

/// `statfs`'s magic number for tmpfs: what bubblewrap's fresh directories and empty files
/// (`--tmpfs`, `--ro-bind-data`) are made on.
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// What one mount target must hold once the sandbox is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mounted {
    /// The path inside the sandbox.
    pub target: PathBuf,
    /// The object bound there (device and inode, as the server checked it); `None` for a
    /// fresh, empty file system made there.
    pub object: Option<(u64, u64)>,
}

impl Mounted {
    /// This expectation as the helper's arguments.
    pub fn to_args(&self) -> [OsString; 3] {
        let identity = match self.object {
            Some((dev, ino)) => format!("{dev}:{ino}"),
            None => "fresh".into(),
        };
        [FLAG.into(), identity.into(), self.target.clone().into_os_string()]
    }

    /// Reads the two values after [`FLAG`].
    pub fn parse(identity: &OsString, target: OsString) -> Result<Self, String> {
        let object = match identity.to_str() {
            Some("fresh") => None,
            Some(text) => {
                let (dev, ino) = text.split_once(':').ok_or("a mount identity is DEV:INO")?;
                let number = |n: &str| n.parse::<u64>().map_err(|e| format!("{text}: {e}"));
                Some((number(dev)?, number(ino)?))
            }
            None => return Err("a mount identity is DEV:INO or fresh".into()),
        };
        Ok(Self { target: target.into(), object })
    }
}

/// Adds `mounted` to what a sandbox must hold, as the last mount made: an expectation for the
/// same target or one below it is dropped, since that mount now covers it.
pub fn push(expected: &mut Vec<Mounted>, mounted: Mounted) {
    expected.retain(|earlier| !earlier.target.starts_with(&mounted.target));
    expected.push(mounted);
}

/// Why a sandbox cannot be used as built; its text is a line for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsound {
    /// A target holds something else than what the server checked: the sandbox must be built
    /// again.
    #[error(
        "error building bubblewrap command: {0} changed while the sandbox was being built; \
         nothing was run, try again"
    )]
    Changed(PathBuf),
    /// The mounts cannot be checked here at all.
    #[error("cannot check the sandbox's mounts: {0}")]
    Unverifiable(String),
}

impl Unsound {
    /// The helper's exit status for this refusal.
    pub fn status(&self) -> i32 {
        match self {
            Unsound::Changed(_) => CHANGED_STATUS,
            Unsound::Unverifiable(_) => BUILD_REFUSED_STATUS,
        }
    }
}

/// Checks, from inside the sandbox, that every target holds what it must. `Err` names the
/// first that does not.
pub fn verify(expected: &[Mounted]) -> Result<(), Unsound> {
    expected.iter().try_for_each(verify_one)
}

fn verify_one(mounted: &Mounted) -> Result<(), Unsound> {
    let changed = || Unsound::Changed(mounted.target.clone());
    // Reached as the command would reach it, but without following a link anywhere: a link
    // swapped in since is a change.
    let flags = OFlags::PATH | OFlags::CLOEXEC;
    let no_links = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let at = rustix::fs::openat2(CWD, &mounted.target, flags, Mode::empty(), no_links)
        .map_err(|_| changed())?;
    let stat = rustix::fs::statx(&at, "", AtFlags::EMPTY_PATH, StatxFlags::BASIC_STATS)
        .map_err(|error| Unsound::Unverifiable(error.to_string()))?;
    if !stat.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT) {
        return Err(Unsound::Unverifiable(
            "this kernel does not report mount roots (Linux 5.8 or later is needed for \
             sandboxing)"
                .into(),
        ));
    }
    if !stat.stx_attributes.contains(StatxAttributes::MOUNT_ROOT) {
        return Err(changed());
    }
    let holds = match mounted.object {
        Some((dev, ino)) => {
            rustix::fs::makedev(stat.stx_dev_major, stat.stx_dev_minor) == dev
                && stat.stx_ino == ino
        }
        None => rustix::fs::fstatfs(&at).is_ok_and(|fs| fs.f_type as u64 == TMPFS_MAGIC),
    };
    holds.then_some(()).ok_or_else(changed)
}

/// The device and inode of an object held open, as [`Mounted::object`] names it.
pub fn identity(object: impl std::os::fd::AsFd) -> std::io::Result<(u64, u64)> {
    let stat = rustix::fs::fstat(object)?;
    Ok((stat.st_dev, stat.st_ino))
}

/// Whether `arg` is [`FLAG`].
fn is_flag(arg: &OsString) -> bool {
    arg.as_bytes() == FLAG.as_bytes()
}

/// Reads the expectations at the front of `args` (each [`FLAG`] and its two values), and
/// returns them with the first argument that is not one.
pub fn take(
    args: &mut impl Iterator<Item = OsString>,
) -> Result<(Vec<Mounted>, Option<OsString>), String> {
    let mut expected = Vec::new();
    loop {
        match args.next() {
            Some(arg) if is_flag(&arg) => {
                let (Some(identity), Some(target)) = (args.next(), args.next()) else {
                    return Err(format!("{FLAG} takes an identity and a path"));
                };
                expected.push(Mounted::parse(&identity, target)?);
            }
            other => return Ok((expected, other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn expectations_travel_as_arguments() {
        let all = [
            Mounted { target: "/a b/c".into(), object: Some((2049, 77)) },
            Mounted { target: Path::new("/x").to_path_buf(), object: None },
        ];
        let mut args = all.iter().flat_map(Mounted::to_args).chain(["exec".into()]);
        let (read, next) = take(&mut args).unwrap();
        assert_eq!(read, all);
        assert_eq!(next, Some("exec".into()));
    }

    #[test]
    fn a_later_mount_covers_what_it_is_laid_over() {
        let mut expected = Vec::new();
        push(&mut expected, Mounted { target: "/p".into(), object: Some((1, 1)) });
        push(&mut expected, Mounted { target: "/p/.git".into(), object: Some((1, 2)) });
        push(&mut expected, Mounted { target: "/q".into(), object: Some((1, 3)) });
        push(&mut expected, Mounted { target: "/p".into(), object: None });
        let targets: Vec<&Path> = expected.iter().map(|m| m.target.as_path()).collect();
        assert_eq!(targets, [Path::new("/q"), Path::new("/p")]);
    }

    #[test]
    fn outside_a_sandbox_a_plain_directory_is_not_a_mount() {
        let scratch = tether_testkit::scratch::Scratch::new("mounted");
        let dir = std::fs::canonicalize(scratch.dir("d")).unwrap();
        let held = rustix::fs::open(&dir, OFlags::PATH, Mode::empty()).unwrap();
        let mounted = Mounted { target: dir.clone(), object: Some(identity(&held).unwrap()) };
        let refused = verify(&[mounted]).unwrap_err();
        assert_eq!(refused, Unsound::Changed(dir.clone()));
        assert_eq!(refused.status(), CHANGED_STATUS);
        // `/` is a mount's root, holding what `/` is.
        let root = rustix::fs::open("/", OFlags::PATH, Mode::empty()).unwrap();
        let root = Mounted { target: "/".into(), object: Some(identity(&root).unwrap()) };
        assert_eq!(verify(&[root]), Ok(()));
    }
}
