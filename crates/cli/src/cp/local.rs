//! This side's files: a tree listed, a copied file given its mode and time and put in place.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use tether_engine::fs::piecewise;

use super::{Entry, Kind, next_directory, under};

/// The tree at `root` here, the root first and each directory before what it holds; links
/// are not followed.
pub(super) fn local_tree(root: &Path, recursive: bool) -> anyhow::Result<Vec<Entry>> {
    let mut entries = vec![local_entry(root, PathBuf::new())?];
    if matches!(entries[0].kind, Kind::Directory) && !recursive {
        bail!("{} is a directory; copy it with -r", root.display());
    }
    let mut next = 0;
    while let Some(relative) = next_directory(&entries, &mut next) {
        let directory = under(root, &relative);
        let mut names = std::fs::read_dir(&directory)
            .with_context(|| format!("cannot list {}", directory.display()))?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("cannot list {}", directory.display()))?;
        names.sort();
        for name in names {
            entries.push(local_entry(&directory.join(&name), relative.join(&name))?);
        }
    }
    Ok(entries)
}

fn local_entry(path: &Path, relative: PathBuf) -> anyhow::Result<Entry> {
    let found = std::fs::symlink_metadata(path).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => {
            anyhow::anyhow!("{}: no such file or directory", path.display())
        }
        _ => anyhow::Error::new(error).context(format!("cannot read {}", path.display())),
    })?;
    let kind = if found.file_type().is_symlink() {
        let target = std::fs::read_link(path)?;
        let target = target
            .to_str()
            .with_context(|| format!("{}: its link target is not UTF-8", path.display()))?;
        Kind::Link { target: target.to_owned() }
    } else if found.is_dir() {
        Kind::Directory
    } else if found.is_file() {
        Kind::File { size: found.len() }
    } else {
        bail!("{} is neither a file, a directory nor a link", path.display());
    };
    let modified_ms = found.mtime() * 1000 + found.mtime_nsec() / 1_000_000;
    Ok(Entry { relative, kind, mode: Some(found.mode() & 0o7777), modified_ms: Some(modified_ms) })
}

/// Gives a file made here the mode and time it had there (a link: its time only).
pub(super) fn set_local_metadata(path: &Path, entry: &Entry) -> anyhow::Result<()> {
    let context = || format!("cannot set the mode and time of {}", path.display());
    if let (Some(mode), false) = (entry.mode, matches!(entry.kind, Kind::Link { .. })) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(context)?;
    }
    if let Some(ms) = entry.modified_ms {
        let when = if ms >= 0 {
            UNIX_EPOCH + Duration::from_millis(ms as u64)
        } else {
            UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
        };
        set_modified(path, when).with_context(context)?;
    }
    Ok(())
}

/// Sets a path's modification time, not following a final link.
fn set_modified(path: &Path, when: SystemTime) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, CWD, Timespec, Timestamps, UTIME_OMIT, utimensat};
    let since = when.duration_since(UNIX_EPOCH).unwrap_or_default();
    let times = Timestamps {
        last_access: Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT },
        last_modification: Timespec {
            tv_sec: since.as_secs() as i64,
            tv_nsec: since.subsec_nanos().into(),
        },
    };
    utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(std::io::Error::from)
}

/// A small file downloaded whole: written under its temporary name, given its mode and time,
/// renamed into place; the temporary file removed if any of it fails.
pub(super) fn place_local(
    staged: &Path,
    destination: &Path,
    bytes: &[u8],
    entry: &Entry,
) -> anyhow::Result<()> {
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(staged)
        .and_then(|file| piecewise::write_all(&file, bytes))
        .with_context(|| format!("cannot write {}", staged.display()));
    place_staged_local(staged, destination, entry, written)
}

/// A file or link written here under its temporary name (`written` says whether it was):
/// given its mode and time and renamed into place, or removed if any of it failed.
pub(super) fn place_staged_local(
    staged: &Path,
    destination: &Path,
    entry: &Entry,
    written: anyhow::Result<()>,
) -> anyhow::Result<()> {
    let placed = written.and_then(|()| set_local_metadata(staged, entry)).and_then(|()| {
        std::fs::rename(staged, destination)
            .with_context(|| format!("cannot write {}", destination.display()))
    });
    if placed.is_err() {
        let _ = std::fs::remove_file(staged);
    }
    placed
}

/// Refuses a new file here whose directory is not there, in those words rather than as the
/// failed write of its temporary name.
pub(super) fn check_local_parent(path: &Path) -> anyhow::Result<()> {
    let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) else {
        return Ok(());
    };
    match std::fs::metadata(parent) {
        Ok(found) if found.is_dir() => Ok(()),
        Ok(_) => bail!("{} is not a directory", parent.display()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => bail!(
            "{}: no such directory; make it first, or copy into a directory that exists",
            parent.display()
        ),
        Err(error) => Err(error).with_context(|| format!("cannot look at {}", parent.display())),
    }
}
