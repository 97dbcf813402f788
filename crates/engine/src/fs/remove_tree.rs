//! Removing a directory tree of any depth: `rm -rf` beneath directory descriptors, with no
//! recursion and a bounded number of directories open.
//!
//! A tree may be far deeper than a path can name (a sandboxed command can build one in its
//! workspace), so nothing here goes by path and nothing recurses: each directory is opened
//! beneath the one above it (`O_NOFOLLOW`, so a link is never entered, only removed), its
//! entries are removed beneath its descriptor, and the first directory that is not empty is
//! entered next. A directory found empty is left for its parent, which is read again from the
//! start and removes it. The descent is a stack of levels; only the deepest
//! [`MAX_OPEN_DIRECTORIES`] keep their directory open, and a level above them is opened again
//! through `..` of the one below when the removal climbs back to it — and checked to be the
//! directory it was (device and inode), so a directory moved meanwhile stops the removal
//! instead of leading it out of the tree.

use std::collections::VecDeque;
use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Most directories one removal holds open: enough that a tree of ordinary depth is removed
/// without opening any directory twice, few enough that many removals at once stay well within
/// the server's descriptor limit.
const MAX_OPEN_DIRECTORIES: usize = 64;

/// Deepest tree a removal goes into: a million levels, which no real tree approaches. What each
/// level costs once its directory is closed — its identity, 16 bytes — is bounded by it (16
/// MiB), not by whatever depth a hostile command could build.
pub(crate) const MAX_REMOVAL_DEPTH: usize = 1 << 20;

/// Removes the directory `name` beneath `parent` and everything in it. A missing entry is
/// skipped (someone else removed it); any other failure stops the removal and is returned.
pub(crate) fn remove_tree(parent: &impl AsFd, name: &OsStr) -> io::Result<()> {
    let mut descent = Descent::new(open_directory(parent, name)?)?;
    let mut emptied = None;
    loop {
        match descent.deepest().next_step(emptied.take())? {
            Step::Enter(child) => descent.enter(&child)?,
            Step::Empty if descent.at_top() => break,
            Step::Empty => emptied = Some(descent.climb()?),
        }
    }
    drop(descent);
    Ok(rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?)
}

/// What a directory is: its device and inode.
type Identity = (u64, u64);

/// The directories from the top of the tree down to where the removal is.
struct Descent {
    /// The identities of the levels above `open`, top first: their directories were closed.
    closed: Vec<Identity>,
    /// The deepest levels, their directories open, the deepest last; never empty.
    open: VecDeque<Level>,
}

/// One directory on the way down.
struct Level {
    dir: Dir,
    identity: Identity,
}

/// What to do after reading a directory.
enum Step {
    /// Everything in it is gone.
    Empty,
    /// This subdirectory is not empty: remove what is in it first.
    Enter(CString),
}

impl Descent {
    fn new(top: OwnedFd) -> io::Result<Self> {
        Ok(Self { closed: Vec::new(), open: VecDeque::from([Level::of(top)?]) })
    }

    fn deepest(&mut self) -> &mut Level {
        self.open.back_mut().expect("the deepest level is open")
    }

    fn at_top(&self) -> bool {
        self.closed.is_empty() && self.open.len() == 1
    }

    fn depth(&self) -> usize {
        self.closed.len() + self.open.len()
    }

    fn enter(&mut self, name: &CStr) -> io::Result<()> {
        if self.depth() > MAX_REMOVAL_DEPTH {
            return Err(io::Error::other(format!(
                "fs/remove goes at most {MAX_REMOVAL_DEPTH} levels of directories deep, and \
                 this tree is deeper: remove its deepest directories first"
            )));
        }
        let child = match open_directory(&self.deepest().dir.fd()?, name) {
            // Removed by someone else since it was read: the next read will not list it.
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            opened => opened?,
        };
        self.open.push_back(Level::of(child)?);
        if self.open.len() > MAX_OPEN_DIRECTORIES {
            let top = self.open.pop_front().expect("over the bound, so not empty");
            self.closed.push(top.identity);
        }
        Ok(())
    }

    /// Leaves the deepest directory, now empty, for its parent; answers its inode, which the
    /// parent's next read removes.
    fn climb(&mut self) -> io::Result<u64> {
        let left = self.open.pop_back().expect("below the top, so open");
        if self.open.is_empty() {
            let expected = self.closed.pop().expect("below the top, so a level is above");
            let parent = open_directory(&left.dir.fd()?, OsStr::new(".."))?;
            let parent = Level::of(parent)?;
            if parent.identity != expected {
                return Err(io::Error::other(
                    "a directory in the tree was moved while the tree was being removed; \
                     nothing outside the tree was touched: remove it again",
                ));
            }
            self.open.push_back(parent);
        }
        Ok(left.identity.1)
    }
}

impl Level {
    fn of(fd: OwnedFd) -> io::Result<Self> {
        let stat = rustix::fs::fstat(&fd)?;
        Ok(Self { identity: (stat.st_dev, stat.st_ino), dir: Dir::new(fd)? })
    }

    /// Reads the directory from the start, removing what it can, until it is empty or holds a
    /// directory that is not. `emptied` is the inode of the subdirectory the removal has just
    /// emptied: still not empty, it is being filled as fast as it is emptied, and the removal
    /// gives up on it as `rmdir` would.
    fn next_step(&mut self, emptied: Option<u64>) -> io::Result<Step> {
        loop {
            self.dir.rewind();
            let mut seen = false;
            while let Some(entry) = self.dir.read() {
                let entry = entry?;
                let name = entry.file_name();
                if name == c"." || name == c".." {
                    continue;
                }
                seen = true;
                let fd = self.dir.fd()?;
                let is_directory = match entry.file_type() {
                    FileType::Directory => true,
                    FileType::Unknown => {
                        match rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                            Ok(stat) => {
                                FileType::from_raw_mode(stat.st_mode) == FileType::Directory
                            }
                            Err(Errno::NOENT) => continue,
                            Err(error) => return Err(error.into()),
                        }
                    }
                    _ => false,
                };
                if !is_directory {
                    match rustix::fs::unlinkat(fd, name, AtFlags::empty()) {
                        Ok(()) | Err(Errno::NOENT) => continue,
                        // Replaced by a directory since it was listed.
                        Err(Errno::ISDIR) => {}
                        Err(error) => return Err(error.into()),
                    }
                }
                match rustix::fs::unlinkat(fd, name, AtFlags::REMOVEDIR) {
                    Ok(()) | Err(Errno::NOENT) => {}
                    Err(error @ (Errno::NOTEMPTY | Errno::EXIST)) => {
                        if emptied == Some(entry.ino()) {
                            return Err(error.into());
                        }
                        return Ok(Step::Enter(name.to_owned()));
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            // Entries removed while the directory is read may hide others from that read: it
            // is empty only when a whole read finds nothing.
            if !seen {
                return Ok(Step::Empty);
            }
        }
    }
}

/// A directory opened for reading beneath `parent`; a link is not followed (`Not a directory`).
fn open_directory(parent: &impl AsFd, name: impl rustix::path::Arg) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(parent, name, flags, Mode::empty())?)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tether_testkit::scratch::Scratch;

    use super::*;

    fn remove_beneath(path: &Path) -> io::Result<()> {
        let parent = std::fs::File::open(path.parent().unwrap())?;
        remove_tree(&parent, path.file_name().unwrap())
    }

    #[test]
    fn links_inside_are_removed_and_their_targets_kept() {
        let scratch = Scratch::new("remove-tree-links");
        scratch.file("outside/keep.txt", b"keep");
        scratch.file("tree/a/b/file.txt", b"x");
        scratch.fifo("tree/a/fifo");
        scratch.symlink(&scratch.path("outside").display().to_string(), "tree/a/dir-link");
        scratch.symlink("nowhere", "tree/dangling");

        remove_beneath(&scratch.path("tree")).unwrap();

        assert!(!scratch.exists("tree"));
        assert_eq!(scratch.read("outside/keep.txt"), b"keep");
    }

    /// Deeper than the directories a removal holds open, with files at every level: the
    /// levels above are opened again through `..` on the way back up.
    #[test]
    fn a_tree_deeper_than_the_open_directories_is_removed_whole() {
        let scratch = Scratch::new("remove-tree-deep");
        let levels = MAX_OPEN_DIRECTORIES * 3 + 1;
        let mut dir = std::fs::File::open(scratch.dir("tree")).unwrap();
        for level in 0..levels {
            let name = format!("file-{level}");
            let file = OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC;
            drop(
                rustix::fs::openat(&dir, name.as_str(), file, Mode::from_raw_mode(0o644)).unwrap(),
            );
            rustix::fs::mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap();
            rustix::fs::mkdirat(&dir, "e", Mode::from_raw_mode(0o755)).unwrap();
            dir = open_directory(&dir, "d").unwrap().into();
        }

        remove_beneath(&scratch.path("tree")).unwrap();

        assert!(!scratch.exists("tree"));
    }

    #[test]
    fn a_missing_tree_is_not_found_and_a_link_is_not_entered() {
        let scratch = Scratch::new("remove-tree-missing");
        scratch.file("target/keep.txt", b"keep");
        scratch.symlink("target", "link");

        let missing = remove_beneath(&scratch.path("missing")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let link = remove_beneath(&scratch.path("link")).unwrap_err();
        assert_eq!(link.raw_os_error(), Some(20), "ENOTDIR: {link}");
        assert_eq!(scratch.read("target/keep.txt"), b"keep");
    }
}
