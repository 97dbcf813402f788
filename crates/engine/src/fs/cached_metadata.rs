//! `fs/getMetadata` answered on the calling thread when the kernel can answer it from memory;
//! [`resolve`] also serves small whole-file reads ([`super::cached_read`]).
//!
//! A `stat` usually takes a microsecond; handing it to the blocking pool and back costs two
//! thread wake-ups, which on a small or virtual machine is tens of microseconds — most of what
//! the call costs, and Codex sends a dozen of them a turn. It goes to the pool because a `stat`
//! *may* block: a path not in the kernel's cache is read from disk, and a network or FUSE
//! filesystem may ask its server, which may never answer. So the call is answered here only
//! when neither can happen:
//!
//! - the path resolves from the kernel's lookup cache alone (`openat2` with `RESOLVE_CACHED`,
//!   which fails at once rather than read anything), and
//! - the file lies on a filesystem whose attributes are in memory once its entry is: a
//!   kernel-local one ([`LOCAL_FILESYSTEMS`]), found from the mount `statx` names (looked up
//!   in the table of `/proc/self/mountinfo`, which never touches the filesystem itself).
//!
//! Anything else — a miss, a link where the answer needs the rules of
//! [`super::metadata`], an error of any kind — returns `None`, and the caller takes the usual
//! path, which answers exactly as before (errors included: this path never produces one).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags, Statx, StatxFlags};
use rustix::io::Errno;
use tether_protocol::fs::FsGetMetadataResponse;

use super::{metadata, no_follow};

/// Filesystems whose `stat` of a cached entry reads only memory: no server to wait for, no
/// user-space daemon (FUSE), no lower layer elsewhere. Overlay is here because a container's
/// root is an overlay of local directories; one stacked on a network filesystem is a
/// configuration this server does not expect.
pub(crate) const LOCAL_FILESYSTEMS: &[&str] = &[
    "ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "tmpfs", "ramfs", "overlay", "vfat", "exfat",
    "squashfs", "erofs", "iso9660",
];

/// Set once the kernel says it has no `openat2` or no `RESOLVE_CACHED` (before Linux 5.12):
/// every call then takes the usual path without trying.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// Whether each mount (by its id) is of a [`LOCAL_FILESYSTEMS`] kind, as last read from
/// `/proc/self/mountinfo`; read again when a mount is not in it (one mounted since). It holds
/// one entry per mount of the system, which bounds it.
static MOUNTS: RwLock<Option<HashMap<u64, bool>>> = RwLock::new(None);

/// The metadata of `path`, if the kernel has it in memory; `None` means "ask the usual way".
pub(crate) fn lookup(path: &Path, follow_symlinks: bool) -> Option<FsGetMetadataResponse> {
    Some(metadata::of_statx(&resolve(path)?, follow_symlinks))
}

/// The `statx` of `path`, when the kernel can answer it from memory: every component in the
/// lookup cache, none a link, the file on a [`LOCAL_FILESYSTEMS`] mount (the path is opened
/// as a location only, `O_PATH`, for it). Besides the metadata it asks for, it holds the
/// file's inode, for a caller that opens the path again to check it found the same file.
pub(crate) fn resolve(path: &Path) -> Option<Statx> {
    if UNSUPPORTED.load(Ordering::Relaxed) || !is_plain(path) {
        return None;
    }
    let file = open_cached(path, OFlags::PATH)?;
    let wanted = StatxFlags::TYPE
        | StatxFlags::MODE
        | StatxFlags::SIZE
        | StatxFlags::MTIME
        | StatxFlags::BTIME
        | StatxFlags::INO
        | StatxFlags::MNT_ID;
    let stat = rustix::fs::statx(&file, "", AtFlags::EMPTY_PATH, wanted).ok()?;
    // `statx` has said which mount since Linux 5.8, before `RESOLVE_CACHED` (5.12).
    let has_mount = StatxFlags::from_bits_retain(stat.stx_mask).contains(StatxFlags::MNT_ID);
    if !has_mount || !is_local_mount(stat.stx_mnt_id) {
        return None;
    }
    if no_follow::file_type(&stat) == FileType::Symlink {
        return None;
    }
    Some(stat)
}

/// Opens `path` with `flags` (and `O_NOFOLLOW`, `O_CLOEXEC`) from the kernel's lookup cache
/// alone, through no link: a miss, a link on the way or at the end, or any other failure is
/// `None`.
pub(crate) fn open_cached(path: &Path, flags: OFlags) -> Option<OwnedFd> {
    // Links are left to the usual path in both modes: refusing one along the way here only
    // sends the call there sooner.
    let resolve = ResolveFlags::CACHED | ResolveFlags::NO_SYMLINKS;
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat2(CWD, path, flags, Mode::empty(), resolve) {
        Ok(file) => Some(file),
        Err(Errno::NOSYS | Errno::INVAL) => {
            UNSUPPORTED.store(true, Ordering::Relaxed);
            None
        }
        Err(_) => None,
    }
}

/// An absolute path of plain names: `..` is resolved by the usual path's own rules.
fn is_plain(path: &Path) -> bool {
    path.is_absolute()
        && path.components().all(|part| matches!(part, Component::RootDir | Component::Normal(_)))
}

/// Whether the mount `mount` (an id, as `statx` and `mountinfo` give it) is of a
/// [`LOCAL_FILESYSTEMS`] kind.
fn is_local_mount(mount: u64) -> bool {
    if let Some(local) = read_mounts().as_ref().and_then(|mounts| mounts.get(&mount)) {
        return *local;
    }
    let mounts = mount_table();
    let local = mounts.as_ref().and_then(|mounts| mounts.get(&mount)).copied().unwrap_or(false);
    *MOUNTS.write().unwrap_or_else(std::sync::PoisonError::into_inner) = mounts;
    local
}

fn read_mounts() -> std::sync::RwLockReadGuard<'static, Option<HashMap<u64, bool>>> {
    MOUNTS.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every mount's id and whether its filesystem is local, from `/proc/self/mountinfo`.
fn mount_table() -> Option<HashMap<u64, bool>> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    Some(table.lines().filter_map(parse_mount).collect())
}

/// One line of `mountinfo`: `id parent major:minor root point options [tags] - type source
/// options`. The type is the first field after the lone `-`.
fn parse_mount(line: &str) -> Option<(u64, bool)> {
    let mut fields = line.split(' ');
    let id = fields.next()?.parse().ok()?;
    let kind = fields.skip_while(|field| *field != "-").nth(1)?;
    Some((id, LOCAL_FILESYSTEMS.contains(&kind)))
}

#[cfg(test)]
mod tests {
    use tether_testkit::scratch::Scratch;

    use super::*;

    #[test]
    fn a_mountinfo_line_gives_its_id_and_whether_it_is_local() {
        let ext4 = "29 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw";
        assert_eq!(parse_mount(ext4), Some((29, true)));
        let nfs = "40 29 0:45 / /home rw - nfs4 server:/home rw,vers=4.2";
        assert_eq!(parse_mount(nfs), Some((40, false)));
        let fuse = "41 29 0:46 / /mnt/x rw shared:7 master:2 - fuse.sshfs host: rw";
        assert_eq!(parse_mount(fuse), Some((41, false)));
        assert_eq!(parse_mount("garbage"), None);
    }

    /// Where the temporary directory is on a local filesystem (as on every machine this
    /// suite runs on), a warm path is answered here, and exactly as the usual path answers.
    #[test]
    fn a_cached_path_is_answered_as_the_usual_path_answers_it() {
        let dir = Scratch::new("cached-metadata");
        let file = dir.file("file", b"twelve bytes");
        let root = dir.path("");
        for path in [root.as_path(), file.as_path()] {
            for follow in [true, false] {
                let usual = metadata::metadata(path, follow).unwrap();
                let here = lookup(path, follow).unwrap_or_else(|| {
                    panic!("{} was not answered from the cache (follow {follow})", path.display())
                });
                assert_eq!(here, usual, "{} (follow {follow})", path.display());
            }
        }
    }

    #[test]
    fn links_dots_missing_paths_and_network_mounts_go_the_usual_way() {
        let dir = Scratch::new("cached-metadata-refusals");
        let file = dir.file("file", b"x");
        let link = dir.path("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let through_link = dir.path("dirlink");
        std::os::unix::fs::symlink(dir.path(""), &through_link).unwrap();
        for follow in [true, false] {
            assert_eq!(lookup(&link, follow), None, "a link (follow {follow})");
            assert_eq!(lookup(&through_link.join("file"), follow), None, "a link on the way");
            assert_eq!(lookup(&dir.path("missing"), follow), None, "a missing path");
            let dots = dir.path("").join("..").join(dir.path("").file_name().unwrap()).join("file");
            assert_eq!(lookup(&dots, follow), None, "a `..`");
            assert_eq!(lookup(Path::new("relative"), follow), None, "a relative path");
        }
        // procfs is not a local filesystem of the list: its files are the kernel's to
        // answer, and the list is what decides.
        assert_eq!(lookup(Path::new("/proc/version"), true), None);
    }
}
