//! What is at a path, and what a directory holds: looked at and listed through a side's
//! filesystem, each entry with its own mode and time where the side gives them.

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path};

use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use tether_engine::fs::FsErrorKind;
use tether_protocol::PathUri;
use tether_protocol::fs::{
    FsGetMetadataParams, FsGetMetadataResponse, FsReadDirectoryEntry, FsReadDirectoryParams,
    FsReadLinkParams,
};

use crate::error::CopyError;
use crate::limits::{Budget, WHOLE_FILE_MAX_BYTES};
use crate::report::Tally;
use crate::shown::Shown;
use crate::side::{Side, uri};

/// Metadata questions asked at once while listing a tree on a side that does not give each
/// entry's own with its listing: enough to hide their round trips behind each other, few
/// enough that a listing of thousands does not flood the side.
pub(crate) const LOOKUPS_IN_FLIGHT: usize = 32;

/// One thing to copy, by its name in its directory. A link's target is read when the link is
/// copied, so that an entry waiting to be copied costs its name and a few words.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) name: OsString,
    pub(crate) kind: Kind,
    pub(crate) mode: Option<u32>,
    pub(crate) modified_ms: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File {
        size: u64,
    },
    Directory,
    Link,
    /// A FIFO, socket or device: skipped in a tree, refused as a source.
    Special,
}

impl Entry {
    /// The bytes it adds to what a copy has to do.
    pub(crate) fn size(&self) -> u64 {
        match self.kind {
            Kind::File { size } => size,
            _ => 0,
        }
    }
}

/// What `path` on `side` is, as `name` (`None`: nothing there). Asked following links —
/// `fs/getMetadata` refuses a link as the last component otherwise — and the answer says
/// whether it was one: a link where the side keeps links (its own time is not to be had: the
/// answer's is its target's), else what it leads to, counted as a link followed. A dangling
/// link is a link where the side can say where it points.
///
/// The first look at a side asks for the mode, and learns from a refusal that the side keeps
/// none ([`Side::learnt`]).
pub(crate) async fn look(
    side: &Side<'_>,
    path: &Path,
    name: &OsStr,
    tally: &Tally,
) -> Result<Option<Entry>, CopyError> {
    let shown = || side.shown(path);
    let link = || Entry { name: name.to_owned(), kind: Kind::Link, mode: None, modified_ms: None };
    let found = match metadata(side, &uri(path)?).await {
        Ok(found) => found,
        Err(error) if error.kind == FsErrorKind::NotFound && side.keeps_metadata() => {
            let params = FsReadLinkParams { path: uri(path)?, sandbox: None };
            return match side.fs.read_link(params).await {
                Ok(_) => Ok(Some(link())),
                Err(error) if error.kind == FsErrorKind::NotFound => Ok(None),
                Err(error) => Err(CopyError::reading(shown(), error)),
            };
        }
        Err(error) if error.kind == FsErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(CopyError::reading(shown(), error)),
    };
    if found.is_symlink && side.keeps_metadata() {
        return Ok(Some(Entry { modified_ms: None, ..link() }));
    }
    if found.is_symlink {
        Tally::add(&tally.links_followed, 1);
    }
    Ok(Some(Entry {
        name: name.to_owned(),
        kind: kind_of(found.is_directory, found.is_file, found.size),
        mode: found.mode,
        modified_ms: Some(found.modified_at_ms),
    }))
}

/// `fs/getMetadata` of `path`, following links, with its mode where the side keeps modes. A
/// side asked for the first time that refuses the mode as `Unsupported` keeps none, and is
/// asked again without.
pub(crate) async fn metadata(
    side: &Side<'_>,
    path: &PathUri,
) -> Result<FsGetMetadataResponse, tether_engine::fs::FsError> {
    let ask = |include_mode: bool| FsGetMetadataParams {
        path: path.clone(),
        follow_symlinks: None,
        include_mode: include_mode.then_some(true),
        sandbox: None,
    };
    if !side.keeps_metadata() {
        return side.fs.get_metadata(ask(false)).await;
    }
    match side.fs.get_metadata(ask(true)).await {
        Err(error) if error.kind == FsErrorKind::Unsupported => {
            side.learnt(false);
            side.fs.get_metadata(ask(false)).await
        }
        answer => answer,
    }
}

/// The entries of `directory` on `side`, sorted by name, counted against the copy's budget.
pub(crate) async fn list(
    side: &Side<'_>,
    directory: &Path,
    shown: &Shown,
    budget: &mut Budget,
    tally: &Tally,
) -> Result<Vec<Entry>, CopyError> {
    let keeps = side.keeps_metadata();
    let params = FsReadDirectoryParams {
        path: uri(directory)?,
        include_metadata: keeps.then_some(true),
        sandbox: None,
    };
    let listing = side
        .fs
        .read_directory(params)
        .await
        .map_err(|error| CopyError::reading(shown.clone(), error))?;
    budget.listed(listing.entries.len(), shown)?;
    let mut entries = if keeps {
        listing
            .entries
            .into_iter()
            .map(|entry| listed_entry(shown, entry))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        let mut names = Vec::with_capacity(listing.entries.len());
        for entry in listing.entries {
            names.push(plain_name(shown, entry.file_name)?);
        }
        let lookups = names
            .into_iter()
            .map(|name| async move { look(side, &directory.join(&name), &name, tally).await });
        let found: Vec<Option<Entry>> =
            stream::iter(lookups).buffered(LOOKUPS_IN_FLIGHT).try_collect().await?;
        // Something removed since the listing is simply not copied.
        found.into_iter().flatten().collect()
    };
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

/// An entry of a listing that carried each one's own metadata.
fn listed_entry(directory: &Shown, entry: FsReadDirectoryEntry) -> Result<Entry, CopyError> {
    let (is_directory, is_file) = (entry.is_directory, entry.is_file);
    let own = entry.metadata;
    let name = plain_name(directory, entry.file_name)?;
    let Some(own) = own else {
        // Listed without it, though asked for: copied without a mode or time, and a file
        // streamed in blocks (said to be just over one), since its size is not known either.
        let kind = kind_of(is_directory, is_file, WHOLE_FILE_MAX_BYTES + 1);
        return Ok(Entry { name, kind, mode: None, modified_ms: None });
    };
    let kind = if own.is_symlink { Kind::Link } else { kind_of(is_directory, is_file, own.size) };
    // A link's mode is not its own to keep; its time is.
    let mode = (!own.is_symlink).then_some(own.mode);
    Ok(Entry { name, kind, mode, modified_ms: Some(own.modified_at_ms) })
}

fn kind_of(is_directory: bool, is_file: bool, size: u64) -> Kind {
    if is_directory {
        Kind::Directory
    } else if is_file {
        Kind::File { size }
    } else {
        Kind::Special
    }
}

/// A name from a listing, refused unless it is one plain component: a side must not make
/// the other write outside the directory being copied into (`../.bashrc`).
fn plain_name(directory: &Shown, name: String) -> Result<OsString, CopyError> {
    let mut components = Path::new(&name).components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(_)), None) if !name.contains('/') => Ok(OsString::from(name)),
        _ => Err(CopyError::NotAFileName { directory: directory.clone(), name }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shown::Place;

    #[test]
    fn listed_names_must_be_one_plain_component() {
        let directory = Shown { path: "/d".into(), place: Place::Executor(None) };
        assert_eq!(plain_name(&directory, "a.txt".into()).unwrap(), "a.txt");
        for bad in ["..", ".", "../x", "a/b", "/etc", ""] {
            let refused = plain_name(&directory, bad.into()).unwrap_err();
            assert!(matches!(refused, CopyError::NotAFileName { .. }), "{bad:?}");
        }
    }
}
