//! `fs/copy`: a file, a link or (with `recursive`) a directory tree.
//!
//! Links are copied as links, never followed, so a copy cannot reach outside its source. FIFOs,
//! sockets and devices cannot be copied meaningfully: as the source they are refused, inside a
//! tree they are skipped. A directory is merged into an existing one at the destination.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub(crate) fn copy(source: &Path, destination: &Path, recursive: bool) -> io::Result<()> {
    let file_type = std::fs::symlink_metadata(source)?.file_type();
    if file_type.is_dir() {
        if !recursive {
            return Err(invalid("fs/copy requires recursive: true when sourcePath is a directory"));
        }
        let source_root = std::fs::canonicalize(source)?;
        copy_tree(source, destination, &source_root)
    } else if file_type.is_symlink() {
        copy_link(source, destination)
    } else if file_type.is_file() {
        copy_file(source, destination)
    } else {
        Err(invalid("fs/copy only supports regular files, directories, and symlinks"))
    }
}

/// Most levels of directories a copy goes below its source. Each level keeps its directory
/// open while the levels below it are copied, so this bounds the descriptors one copy holds;
/// and a copy goes by path, which no deeper tree of short names fits within `PATH_MAX` (4,096
/// bytes) anyway.
pub(crate) const MAX_COPY_DEPTH: usize = 1024;

/// Copies level by level from a stack of open directories, so a tree's depth costs no stack.
/// Refuses, at every level, a destination inside the source: the copy would copy itself
/// forever. Where each destination really is travels down with it, so a level costs one look
/// at its own name (a link there is resolved, so an alias is caught too), not a resolution of
/// the whole path, which would make a deep tree's copy quadratic.
fn copy_tree(source: &Path, destination: &Path, source_root: &Path) -> io::Result<()> {
    let resolved = resolve_existing(destination)?;
    refuse_inside(&resolved, source_root)?;
    std::fs::create_dir_all(destination)?;
    let mut levels = vec![(std::fs::read_dir(source)?, destination.to_path_buf(), resolved)];
    loop {
        let depth = levels.len();
        let Some((entries, to_directory, resolved_directory)) = levels.last_mut() else { break };
        let Some(entry) = entries.next() else {
            levels.pop();
            continue;
        };
        let entry = entry?;
        let (from, to) = (entry.path(), to_directory.join(entry.file_name()));
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            if depth >= MAX_COPY_DEPTH {
                return Err(invalid(&format!(
                    "fs/copy copies at most {MAX_COPY_DEPTH} levels of directories below \
                     sourcePath, and this tree is deeper: copy its deeper parts separately"
                )));
            }
            let resolved = resolved_below(resolved_directory, &to)?;
            refuse_inside(&resolved, source_root)?;
            std::fs::create_dir_all(&to)?;
            levels.push((std::fs::read_dir(&from)?, to, resolved));
        } else if file_type.is_file() {
            refuse_inside(&resolved_below(resolved_directory, &to)?, source_root)?;
            copy_file(&from, &to)?;
        } else if file_type.is_symlink() {
            copy_link(&from, &to)?;
        }
    }
    Ok(())
}

/// Where `to`, named in a directory whose real place is `resolved_directory`, really is: a
/// link there is resolved whole; anything else is that directory's place and its name.
fn resolved_below(resolved_directory: &Path, to: &Path) -> io::Result<PathBuf> {
    match std::fs::symlink_metadata(to) {
        Ok(meta) if meta.file_type().is_symlink() => resolve_existing(to),
        _ => Ok(resolved_directory.join(to.file_name().expect("an entry has a name"))),
    }
}

/// Contents and permissions. A file copied onto itself (by name or through a link) is left as
/// it is: copying would truncate the destination, which is the source, before reading it.
fn copy_file(source: &Path, destination: &Path) -> io::Result<()> {
    if let Ok(existing) = std::fs::metadata(destination) {
        let original = std::fs::metadata(source)?;
        if (existing.dev(), existing.ino()) == (original.dev(), original.ino()) {
            return Ok(());
        }
    }
    std::fs::copy(source, destination).map(drop)
}

/// A new link with the same target text; an existing destination is `File exists`.
fn copy_link(source: &Path, destination: &Path) -> io::Result<()> {
    std::os::unix::fs::symlink(std::fs::read_link(source)?, destination)
}

/// Refuses a destination (where it really is) inside the source.
fn refuse_inside(resolved: &Path, source_root: &Path) -> io::Result<()> {
    if resolved.starts_with(source_root) {
        return Err(invalid("fs/copy cannot copy a directory to itself or one of its descendants"));
    }
    Ok(())
}

/// Where `path` is, with links resolved in the part that exists.
fn resolve_existing(path: &Path) -> io::Result<PathBuf> {
    let mut missing = Vec::new();
    let mut existing = path;
    while !existing.exists() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                missing.push(name);
                existing = parent;
            }
            _ => break,
        }
    }
    let mut resolved = std::fs::canonicalize(existing)?;
    resolved.extend(missing.iter().rev());
    Ok(resolved)
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}
