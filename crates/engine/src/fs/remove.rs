//! `fs/remove`: `rm -rf` by default, and never through a link — a link is removed itself, its
//! target stays.

use std::ffi::OsStr;
use std::io;
use std::path::Path;

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};

use super::metadata::CONTAINS_SYMLINK;
use super::no_follow;
use super::remove_tree::remove_tree;

pub(crate) fn remove(
    path: &Path,
    recursive: bool,
    force: bool,
    follow_symlinks: bool,
) -> io::Result<()> {
    let result = if follow_symlinks {
        remove_followed(path, recursive)
    } else if recursive {
        // As the reference: a tree cannot be removed beneath descriptors yet, and removing it
        // by path could be redirected by a link swapped in halfway.
        Err(io::Error::other("recursive no-follow removal is unsupported"))
    } else {
        remove_not_followed(path)
    };
    match result {
        // `force` is `rm -f`: what is already gone is success.
        Err(error) if force && error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Links in the directories on the way are followed; the last component is examined itself.
fn remove_followed(path: &Path, recursive: bool) -> io::Result<()> {
    let file_type = std::fs::symlink_metadata(path)?.file_type();
    if !file_type.is_dir() {
        std::fs::remove_file(path)
    } else if recursive {
        // Beneath the parent's descriptor, whatever the tree's depth; links inside the tree are
        // removed, never followed.
        let (parent, name) = match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => (parent, name),
            // `/` is its own parent: removing it ends as `rmdir /` does.
            _ => (path, OsStr::new(".")),
        };
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let parent = rustix::fs::openat(CWD, parent, flags, Mode::empty())?;
        remove_tree(&parent, name)
    } else {
        std::fs::remove_dir(path)
    }
}

/// A link anywhere on the way is `Not a directory`; as the last component it is refused.
fn remove_not_followed(path: &Path) -> io::Result<()> {
    let beneath = no_follow::parent_of(path)?;
    let flags = match no_follow::file_type(&beneath.stat()?) {
        FileType::Symlink => {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, CONTAINS_SYMLINK));
        }
        FileType::Directory => AtFlags::REMOVEDIR,
        _ => AtFlags::empty(),
    };
    Ok(rustix::fs::unlinkat(&beneath.dir, &beneath.name, flags)?)
}
