//! Listing a directory (`fs/readDirectory`, and each step of `fs/walk`) and creating one
//! (`fs/createDirectory`).

use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use tether_protocol::fs::{FsEntryMetadata, FsReadDirectoryEntry};

use super::metadata::{PERMISSION_BITS, unix_ms_of};
use super::no_follow;

/// A directory's entries in the order the OS lists them, with how many there were in all.
#[derive(Debug)]
pub(crate) struct Listing {
    pub entries: Vec<FsReadDirectoryEntry>,
    /// Every listed entry, also those past the `keep` given to [`list`].
    pub total: usize,
}

/// The entries of `path`, following links for their type. Dangling links are left out (they
/// name nothing that could be listed), as the reference leaves them out — unless
/// `with_metadata`, when each entry also carries its own metadata ([`FsEntryMetadata`]) and a
/// dangling link is listed as the link it is. Names that are not UTF-8 are shown lossily
/// (`U+FFFD`): the wire carries names as strings.
///
/// Only the first `keep` entries are kept; the rest are counted, so an oversized directory
/// costs no memory for the answer it will not get.
pub(crate) fn list(path: &Path, keep: usize, with_metadata: bool) -> io::Result<Listing> {
    let mut listing = Listing { entries: Vec::new(), total: 0 };
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        // The listing's own type (no extra call) for anything but a link.
        let (is_directory, is_file) = match entry.file_type() {
            Ok(file_type) if !file_type.is_symlink() => (file_type.is_dir(), file_type.is_file()),
            _ => match std::fs::metadata(entry.path()) {
                Ok(target) => (target.is_dir(), target.is_file()),
                Err(_) if with_metadata => (false, false),
                Err(_) => continue,
            },
        };
        listing.total += 1;
        if listing.entries.len() >= keep {
            continue;
        }
        let metadata = match with_metadata {
            // `fstatat` on the directory's descriptor, not following a link.
            true => match entry.metadata() {
                Ok(own) => Some(entry_metadata(&own)),
                // Gone since the listing: left out, as anything removed meanwhile.
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    listing.total -= 1;
                    continue;
                }
                Err(error) => return Err(error),
            },
            false => None,
        };
        let file_name = entry.file_name().to_string_lossy().into_owned();
        listing.entries.push(FsReadDirectoryEntry { file_name, is_directory, is_file, metadata });
    }
    Ok(listing)
}

/// What `fs/readDirectory {includeMetadata}` says of an entry itself.
fn entry_metadata(own: &std::fs::Metadata) -> FsEntryMetadata {
    FsEntryMetadata {
        is_symlink: own.file_type().is_symlink(),
        size: own.len(),
        modified_at_ms: unix_ms_of(own.mtime(), own.mtime_nsec() as u32),
        mode: own.mode() & PERMISSION_BITS,
    }
}

/// `recursive` is `mkdir -p` (an existing directory is success); otherwise the parent must
/// exist and the path must not. Without following links, none may be on the way.
pub(crate) fn create(path: &Path, recursive: bool, follow_symlinks: bool) -> io::Result<()> {
    match (recursive, follow_symlinks) {
        (true, true) => std::fs::create_dir_all(path),
        (false, true) => std::fs::create_dir(path),
        (true, false) => no_follow::create_dir_all(path),
        (false, false) => {
            let beneath = no_follow::parent_of(path)?;
            let mode = rustix::fs::Mode::from_raw_mode(0o777);
            Ok(rustix::fs::mkdirat(&beneath.dir, &beneath.name, mode)?)
        }
    }
}
