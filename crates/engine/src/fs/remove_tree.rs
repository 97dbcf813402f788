//! Removing a directory tree of any depth: `rm -rf` beneath directory descriptors, with no
//! recursion and a bounded number of directories open.
//!
//! A tree may be far deeper than a path can name (a sandboxed command can build one in its
//! workspace), so nothing here goes by path and nothing recurses: each directory is opened
//! beneath the one above it (`O_NOFOLLOW`, so a link is never entered, only removed), its
//! entries are removed beneath its descriptor, and the first directory that is not empty is
//! entered next. A directory found empty is left for its parent, which is read again from the
//! start and removes it. The descent holds at most [`MAX_OPEN_DIRECTORIES`] directories open,
//! the top of the tree first; a directory that would go deeper is moved up instead, into the
//! top (a rename beneath two descriptors), where the removal comes back to it. So the removal
//! never climbs through `..`: in a bind mount of a directory (every sandbox's writable root)
//! the kernel checks each `..` against the mount's root by walking up the whole chain, which
//! makes climbing out of a deep tree quadratic.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Most directories one removal holds open: enough that a tree of ordinary depth is removed
/// without moving anything, few enough that many removals at once stay well within the
/// server's descriptor limit.
const MAX_OPEN_DIRECTORIES: usize = 64;

/// What a directory moved up into the top is named: a prefix no ordinary tree uses, and a
/// number (the next one is tried while the name is taken).
const MOVED_PREFIX: &str = ".tether-removing-";

/// Removes the directory `name` beneath `parent` and everything in it. A missing entry is
/// skipped (someone else removed it); any other failure stops the removal and is returned.
pub(crate) fn remove_tree(parent: &impl AsFd, name: &OsStr) -> io::Result<()> {
    let mut descent = Descent { open: vec![Level::of(open_directory(parent, name)?)?], moved: 0 };
    let mut emptied = None;
    loop {
        match descent.deepest().next_step(emptied.take())? {
            Step::Enter(child) => descent.enter(&child)?,
            Step::Empty if descent.open.len() == 1 => break,
            Step::Empty => emptied = descent.open.pop().map(|left| left.ino),
        }
    }
    drop(descent);
    Ok(rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?)
}

/// The directories from the top of the tree down to where the removal is.
struct Descent {
    /// The top first, the deepest last; never empty, never longer than
    /// [`MAX_OPEN_DIRECTORIES`].
    open: Vec<Level>,
    /// Directories moved up into the top so far: where the next name's number starts.
    moved: u64,
}

/// One directory on the way down.
struct Level {
    dir: Dir,
    /// Its inode, for its parent to recognise it.
    ino: u64,
}

/// What to do after reading a directory.
enum Step {
    /// Everything in it is gone.
    Empty,
    /// This subdirectory is not empty: remove what is in it first.
    Enter(CString),
}

impl Descent {
    fn deepest(&mut self) -> &mut Level {
        self.open.last_mut().expect("the top is open")
    }

    /// Goes into `name`, a subdirectory of the deepest directory; at the bound, moves it up
    /// into the top instead, where a later read of the top finds it.
    fn enter(&mut self, name: &CStr) -> io::Result<()> {
        let depth = self.open.len();
        if depth < MAX_OPEN_DIRECTORIES {
            let opened = open_directory(&self.open[depth - 1].dir.fd()?, name);
            match opened {
                Ok(child) => self.open.push(Level::of(child)?),
                // Removed by someone else since it was read: the next read will not list it.
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            }
            return Ok(());
        }
        let (top, here) = (self.open[0].dir.fd()?, self.open[depth - 1].dir.fd()?);
        loop {
            let moved = format!("{MOVED_PREFIX}{}", self.moved);
            self.moved += 1;
            let flags = rustix::fs::RenameFlags::NOREPLACE;
            match rustix::fs::renameat_with(here, name, top, moved.as_str(), flags) {
                Ok(()) | Err(Errno::NOENT) => return Ok(()),
                Err(Errno::EXIST) => continue,
                Err(error) => return Err(error.into()),
            }
        }
    }
}

impl Level {
    fn of(fd: OwnedFd) -> io::Result<Self> {
        let ino = rustix::fs::fstat(&fd)?.st_ino;
        Ok(Self { ino, dir: Dir::new(fd)? })
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

    /// Deeper than the directories a removal holds open, with files at every level: what lies
    /// deeper is moved up into the top and removed from there.
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
