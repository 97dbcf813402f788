//! One source copied: its root looked at, where it lands decided ([`crate::landing`]), then
//! one file, or a tree walked beside its copies ([`crate::walk`]).

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;

use tether_engine::fs::FsErrorKind;
use tether_protocol::fs::{FsCreateDirectoryParams, FsReadLinkParams};

use crate::copier::{CopyOptions, TreeCopy, TreePath};
use crate::entry::{self, Entry, Kind};
use crate::error::CopyError;
use crate::landing::{Landing, landing};
use crate::report::Tally;
use crate::shown::Shown;
use crate::side::uri;
use crate::walk::{self, Directory, Job};

impl TreeCopy<'_> {
    /// Copies `from` to `to`, as scp does: into `to` under its own name when `to` is a
    /// directory (which it must be with [`CopyOptions::into_directory`]), else as `to`. A tree
    /// is walked depth first, each directory made before what it holds, while its files and
    /// links are copied sixteen at a time; each directory is given its mode and time once
    /// what it holds is copied. An entry of a tree that the source may not read is told to the
    /// observer, skipped and counted; any other failure stops the copy.
    pub async fn copy(
        &self,
        from: &TreePath,
        to: &TreePath,
        options: CopyOptions,
    ) -> Result<(), CopyError> {
        let (from_shown, to_shown) = (self.from.shown(&from.shown), self.to.shown(&to.shown));
        let root = self.root(from, &from_shown, options.recursive).await?;
        let root_is_directory = root.kind == Kind::Directory;
        if root_is_directory && !options.recursive {
            return Err(CopyError::IsADirectory(from_shown));
        }
        let found = self.destination_kind(&to.path, &to_shown).await?;
        let landed = landing(
            &from_shown,
            (&to.path, &to_shown),
            found,
            root_is_directory,
            options.into_directory,
        )?;
        if landed.new_file {
            self.check_parent(&landed).await?;
        }
        let parent = |path: &Path| path.parent().unwrap_or(Path::new("/")).to_owned();
        // The directory the copy lands in, as named: given no mode or time of its own.
        let landing = Arc::new(Directory {
            source: parent(&from.path),
            source_shown: parent(&from.shown),
            dest: parent(&landed.path),
            dest_shown: parent(&landed.shown.path),
            metadata: None,
            parent: None,
        });
        if !root_is_directory {
            self.observer.found(root.size());
            let job = Job {
                directory: landing,
                entry: root,
                source: from.path.clone(),
                source_shown: from.shown.clone(),
                dest: landed.path,
                dest_shown: landed.shown.path,
                in_tree: false,
            };
            return self.copy_job(job).await;
        }
        if found.is_none() {
            self.make_parents(&landing.dest, &self.to.shown(&landing.dest_shown)).await?;
        }
        walk::beside_copies(
            |jobs| self.walk(landing, root, from, landed, jobs),
            |job| self.copy_job(job),
        )
        .await
    }

    /// What the source names: a link is copied as a link in a tree copy (where the source
    /// keeps links), else as what it leads to.
    async fn root(
        &self,
        from: &TreePath,
        shown: &Shown,
        recursive: bool,
    ) -> Result<Entry, CopyError> {
        let name = from.path.file_name().unwrap_or(OsStr::new("")).to_owned();
        let link = || Entry { name: name.clone(), kind: Kind::Link, mode: None, modified_ms: None };
        let found = match entry::metadata(&self.from, &uri(&from.path)?).await {
            Ok(found) => found,
            Err(error) if error.kind == FsErrorKind::NotFound && self.from.keeps_metadata() => {
                let params = FsReadLinkParams { path: uri(&from.path)?, sandbox: None };
                return match self.from.fs.read_link(params).await {
                    Ok(_) if recursive => Ok(link()),
                    Ok(_) => Err(CopyError::DanglingLink(shown.clone())),
                    Err(error) if error.kind == FsErrorKind::NotFound => {
                        Err(CopyError::NotFound(shown.clone()))
                    }
                    Err(error) => Err(CopyError::reading(shown.clone(), error)),
                };
            }
            Err(error) if error.kind == FsErrorKind::NotFound => {
                return Err(CopyError::NotFound(shown.clone()));
            }
            Err(error) => return Err(CopyError::reading(shown.clone(), error)),
        };
        if found.is_symlink && recursive && self.from.keeps_metadata() {
            return Ok(link());
        }
        if found.is_symlink && found.is_directory && !recursive {
            return Err(CopyError::LinkToDirectory(shown.clone()));
        }
        if found.is_symlink && !self.from.keeps_metadata() {
            Tally::add(&self.tally.links_followed, 1);
        }
        let kind = if found.is_directory {
            Kind::Directory
        } else if found.is_file {
            Kind::File { size: found.size }
        } else {
            return Err(CopyError::Special(shown.clone()));
        };
        Ok(Entry { name, kind, mode: found.mode, modified_ms: Some(found.modified_at_ms) })
    }

    /// Whether `path` on the destination is a directory (`None`: nothing there), following
    /// links: links on the way to where a copy lands are the person's to name.
    async fn destination_kind(
        &self,
        path: &Path,
        shown: &Shown,
    ) -> Result<Option<bool>, CopyError> {
        match entry::metadata(&self.to, &uri(path)?).await {
            Ok(found) => Ok(Some(found.is_directory)),
            Err(error) if error.kind == FsErrorKind::NotFound => Ok(None),
            Err(error) => Err(CopyError::fs(shown.clone(), error)),
        }
    }

    /// Refuses a new file whose directory is not there, in those words rather than as the
    /// failure of the first write into it.
    pub(crate) async fn check_parent(&self, landed: &Landing) -> Result<(), CopyError> {
        let (Some(parent), Some(shown)) = (landed.path.parent(), landed.shown.path.parent()) else {
            return Ok(());
        };
        if shown.as_os_str().is_empty() {
            // The working directory, which is there.
            return Ok(());
        }
        let shown = self.to.shown(shown);
        match self.destination_kind(parent, &shown).await? {
            Some(true) => Ok(()),
            Some(false) => Err(CopyError::ParentNotADirectory(shown)),
            None => Err(CopyError::NoSuchDirectory(shown)),
        }
    }

    /// Makes `directory` and its parents on the destination (`mkdir -p`), for a tree's root.
    async fn make_parents(&self, directory: &Path, shown: &Shown) -> Result<(), CopyError> {
        let params = FsCreateDirectoryParams {
            path: uri(directory)?,
            recursive: Some(true),
            follow_symlinks: None,
            sandbox: None,
        };
        self.to
            .fs
            .create_directory(params)
            .await
            .map_err(|error| CopyError::fs(shown.clone(), error))
    }
}
