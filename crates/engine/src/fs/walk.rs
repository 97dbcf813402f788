//! `fs/walk`: a bounded, breadth-first listing of everything under a directory.
//!
//! A walk answers in one frame and may be pointed at a huge tree, so everything it may cost is
//! bounded: the depth, the directories read and the entries examined by the request, the size
//! of the answer by the server (as the reference bounds it). Reaching a bound sets `truncated`
//! rather than failing. The order is the reference's, so clients that page through results or
//! compare them see the same thing: directories in the order they were found, the entries of
//! each sorted by name.

use std::collections::{HashSet, VecDeque};
use std::io;
use std::path::{Path, PathBuf};

use tether_protocol::PathUri;
use tether_protocol::fs::{
    FS_WALK_MAX_DEPTH, FS_WALK_MAX_DIRECTORIES, FS_WALK_MAX_ENTRIES, FsWalkEntry, FsWalkEntryKind,
    FsWalkError, FsWalkOptions, FsWalkResponse,
};

use super::{FsError, directory, metadata};

/// The largest answer a walk builds: 4 MiB of paths and messages. 50,000 entries of long paths
/// would otherwise make a frame of tens of megabytes.
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// What each entry or error costs against [`MAX_RESPONSE_BYTES`] besides its text: the JSON
/// around it.
const ITEM_OVERHEAD_BYTES: usize = 64;

/// Refuses limits the walk would not honour, with the reference's messages.
pub(crate) fn validate(options: &FsWalkOptions) -> Result<(), FsError> {
    if options.max_directories == 0 || options.max_entries == 0 {
        return Err(FsError::invalid_input("filesystem walk limits must be greater than zero"));
    }
    if options.max_depth > FS_WALK_MAX_DEPTH
        || options.max_directories > FS_WALK_MAX_DIRECTORIES
        || options.max_entries > FS_WALK_MAX_ENTRIES
    {
        return Err(FsError::invalid_input(format!(
            "filesystem walk limits exceed maximums: depth={FS_WALK_MAX_DEPTH}, \
             directories={FS_WALK_MAX_DIRECTORIES}, entries={FS_WALK_MAX_ENTRIES}"
        )));
    }
    Ok(())
}

/// Walks `root` within `options` (already [validated](validate)).
///
/// A missing root is not found; a root that is not a directory (or a link to one, unless links
/// are followed) has nothing under it. Below the root nothing fails the walk: what cannot be
/// read is reported in `errors` and skipped. Links to files are left out; links to
/// directories are listed and descended into only with `followDirectorySymlinks`, and then each
/// real directory is read once, however many links lead to it.
pub(crate) fn walk(root: &Path, options: &FsWalkOptions) -> io::Result<FsWalkResponse> {
    let root_metadata = metadata::followed(root)?;
    if !root_metadata.is_directory
        || (root_metadata.is_symlink && !options.follow_directory_symlinks)
    {
        return Ok(FsWalkResponse::default());
    }
    let mut walk = Walk { options, response: FsWalkResponse::default(), response_bytes: 0 };
    let root_identity = walk.identity(root)?;
    // A full answer ends the walk early: what was found so far is the answer.
    let (Ok(()) | Err(Full)) = walk.fill(root, root_identity);
    Ok(walk.response)
}

/// One walk: its bounds, the answer being built and what that answer would cost on the wire.
struct Walk<'a> {
    options: &'a FsWalkOptions,
    response: FsWalkResponse,
    response_bytes: usize,
}

/// A bound was reached (`truncated` is set): the walk stops where it is.
struct Full;

impl Walk<'_> {
    fn fill(&mut self, root: &Path, root_identity: PathBuf) -> Result<(), Full> {
        let options = self.options;
        let mut visited = HashSet::from([root_identity]);
        let mut queue = VecDeque::from([(root.to_path_buf(), 0)]);
        let mut directories = 1;
        let mut examined = 0;
        while let Some((directory, depth)) = queue.pop_front() {
            let mut entries = match directory::list(&directory, usize::MAX, false) {
                Ok(listing) => listing.entries,
                Err(error) => {
                    self.error(&directory, error)?;
                    continue;
                }
            };
            entries.sort_by(|a, b| a.file_name.cmp(&b.file_name));
            for entry in entries {
                if examined == options.max_entries {
                    self.response.truncated = true;
                    return Err(Full);
                }
                examined += 1;
                // The (lossy) listed name: a name that is not UTF-8 does not lead back to its
                // file, and is reported as an error, as the reference reports it.
                let path = directory.join(&entry.file_name);
                let found = match metadata::followed(&path) {
                    Ok(found) => found,
                    Err(error) => {
                        self.error(&path, error)?;
                        continue;
                    }
                };
                if found.is_symlink && !(options.follow_directory_symlinks && found.is_directory) {
                    continue;
                }
                let kind = match (found.is_directory, found.is_file) {
                    (true, _) => FsWalkEntryKind::Directory,
                    (false, true) => FsWalkEntryKind::File,
                    (false, false) => continue,
                };
                self.entry(&path, kind)?;
                let pruned = options.prune_hidden_directories == Some(true)
                    && entry.file_name.starts_with('.');
                if kind != FsWalkEntryKind::Directory || depth >= options.max_depth || pruned {
                    continue;
                }
                let identity = match self.identity(&path) {
                    Ok(identity) => identity,
                    Err(error) => {
                        self.error(&path, error)?;
                        continue;
                    }
                };
                if !visited.insert(identity) {
                    continue;
                }
                if directories == options.max_directories {
                    self.response.truncated = true;
                } else {
                    directories += 1;
                    queue.push_back((path, depth + 1));
                }
            }
        }
        Ok(())
    }

    /// What makes two directories the same one: through links, the real directory; otherwise
    /// the path.
    fn identity(&self, path: &Path) -> io::Result<PathBuf> {
        if self.options.follow_directory_symlinks {
            std::fs::canonicalize(path)
        } else {
            Ok(path.to_path_buf())
        }
    }

    fn entry(&mut self, path: &Path, kind: FsWalkEntryKind) -> Result<(), Full> {
        let path = uri(path);
        self.reserve(path.as_str().len())?;
        self.response.entries.push(FsWalkEntry { path, kind });
        Ok(())
    }

    fn error(&mut self, path: &Path, error: io::Error) -> Result<(), Full> {
        let (path, message) = (uri(path), error.to_string());
        self.reserve(path.as_str().len() + message.len())?;
        self.response.errors.push(FsWalkError { path, message });
        Ok(())
    }

    fn reserve(&mut self, text_bytes: usize) -> Result<(), Full> {
        let total = self.response_bytes + text_bytes + ITEM_OVERHEAD_BYTES;
        if total > MAX_RESPONSE_BYTES {
            self.response.truncated = true;
            return Err(Full);
        }
        self.response_bytes = total;
        Ok(())
    }
}

/// Walked paths are absolute (they extend the root), which is all a `file:` URI needs.
fn uri(path: &Path) -> PathUri {
    PathUri::from_path(path).expect("walked paths are absolute")
}
