//! Copies down: files and trees from the executor to here.

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::Ordering;

use anyhow::{Context as _, bail};
use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use tether_engine::fs::{FileSystem as _, FsErrorKind, piecewise};
use tether_protocol::fs::{
    FsGetMetadataParams, FsReadDirectoryEntry, FsReadDirectoryParams, FsReadFileParams,
    FsReadLinkParams,
};

use super::local::{check_local_parent, place_local, place_staged_local, set_local_metadata};
use super::{
    Copier, Entry, FILES_IN_FLIGHT, Kind, LOOKUPS_IN_FLIGHT, Landing, WHOLE_FILE_MAX_BYTES,
    landing, next_directory, remote, temporary, under, uri,
};

impl Copier<'_> {
    /// Copies `from` on the executor to `to` here, as [`Copier::upload`] copies the other
    /// way.
    pub(super) async fn download(
        &self,
        from: &Path,
        to: &Path,
        several: bool,
        recursive: bool,
    ) -> anyhow::Result<()> {
        let entries = self.remote_tree(from, recursive).await?;
        let root_is_directory = matches!(entries[0].kind, Kind::Directory);
        let (from_name, to_name) =
            (format!("{} on the executor", from.display()), to.display().to_string());
        let found = std::fs::metadata(to).ok().map(|found| found.is_dir());
        let target =
            match landing((from, &from_name), (to, &to_name), found, root_is_directory, several)? {
                Landing::At(target) => target,
                Landing::NewFile(target) => {
                    check_local_parent(&target)?;
                    target
                }
            };
        self.add_bytes(&entries);
        for entry in entries.iter().filter(|e| matches!(e.kind, Kind::Directory)) {
            let path = under(&target, &entry.relative);
            std::fs::create_dir_all(&path)
                .with_context(|| format!("cannot make the directory {}", path.display()))?;
        }
        let others = entries.iter().filter(|e| !matches!(e.kind, Kind::Directory));
        stream::iter(others.map(|entry| self.download_one(from, &target, entry)))
            .buffer_unordered(FILES_IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        for entry in entries.iter().rev().filter(|e| matches!(e.kind, Kind::Directory)) {
            set_local_metadata(&under(&target, &entry.relative), entry)?;
        }
        Ok(())
    }

    async fn download_one(&self, from: &Path, target: &Path, entry: &Entry) -> anyhow::Result<()> {
        let source = under(from, &entry.relative);
        let destination = under(target, &entry.relative);
        let staged = temporary(&destination);
        if let Kind::File { size } = entry.kind
            && size <= WHOLE_FILE_MAX_BYTES
        {
            let params = FsReadFileParams {
                path: uri(&source)?,
                follow_symlinks: None,
                sandbox: None,
                attach_data: None,
            };
            let read = self.client.read_file(params).await.map_err(|e| remote(&source, e))?;
            let bytes = read.data_base64.into_bytes();
            let len = bytes.len() as u64;
            let entry = entry.clone();
            tokio::task::spawn_blocking(move || place_local(&staged, &destination, &bytes, &entry))
                .await??;
            self.progress.inc(len);
            return Ok(());
        }
        let written = match &entry.kind {
            Kind::File { .. } => self.download_bytes(&source, &staged).await,
            Kind::Link { target: link } => std::os::unix::fs::symlink(link, &staged)
                .with_context(|| format!("cannot make the link {}", destination.display())),
            Kind::Directory => unreachable!("directories are made first"),
        };
        place_staged_local(&staged, &destination, entry, written)
    }

    async fn download_bytes(&self, source: &Path, staged: &Path) -> anyhow::Result<()> {
        let mut blocks = self
            .client
            .read_file_stream(uri(source)?, None)
            .await
            .map_err(|e| remote(source, e))?;
        let cannot_write = || format!("cannot write {}", staged.display());
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(staged)
            .with_context(cannot_write)?;
        let file = std::sync::Arc::new(file);
        while let Some(block) = blocks.next().await {
            let block = block.map_err(|e| remote(source, e))?;
            let n = block.len() as u64;
            let file = file.clone();
            tokio::task::spawn_blocking(move || piecewise::write_all(&file, &block))
                .await?
                .with_context(cannot_write)?;
            self.progress.inc(n);
        }
        Ok(())
    }

    /// The tree at `root` on the executor, the root first and each directory before what it
    /// holds.
    async fn remote_tree(&self, root: &Path, recursive: bool) -> anyhow::Result<Vec<Entry>> {
        let first = self.remote_entry(root, PathBuf::new()).await?.with_context(|| {
            format!("{} on the executor: no such file or directory", root.display())
        })?;
        if matches!(first.kind, Kind::Directory) && !recursive {
            bail!("{} on the executor is a directory; copy it with -r", root.display());
        }
        let mut entries = vec![first];
        let mut next = 0;
        while let Some(relative) = next_directory(&entries, &mut next) {
            let directory = under(root, &relative);
            let params = FsReadDirectoryParams {
                path: uri(&directory)?,
                include_metadata: self.keeps_metadata.then_some(true),
                sandbox: None,
            };
            let listing =
                self.client.read_directory(params).await.map_err(|e| remote(&directory, e))?;
            if self.keeps_metadata {
                let found = self.listed_entries(&directory, &relative, listing.entries).await?;
                entries.extend(found);
                continue;
            }
            let mut names = Vec::new();
            for entry in listing.entries {
                names.push(safe_name(&directory, &entry.file_name)?);
            }
            names.sort();
            let lookups = names.into_iter().map(|name| {
                let relative = relative.join(&name);
                async move {
                    let path = under(root, &relative);
                    self.remote_entry(&path, relative).await
                }
            });
            let found: Vec<Option<Entry>> =
                stream::iter(lookups).buffered(LOOKUPS_IN_FLIGHT).try_collect().await?;
            // Something removed since the listing is simply not copied.
            entries.extend(found.into_iter().flatten());
        }
        Ok(entries)
    }

    /// The entries of a listing that carried each one's own metadata, sorted by name; a link's
    /// target is asked for (a few at a time), as the listing does not hold it.
    async fn listed_entries(
        &self,
        directory: &Path,
        relative: &Path,
        listed: Vec<FsReadDirectoryEntry>,
    ) -> anyhow::Result<Vec<Entry>> {
        let mut listed = listed
            .into_iter()
            .map(|entry| Ok((safe_name(directory, &entry.file_name)?, entry)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        let entries = listed.into_iter().map(|(name, entry)| async move {
            let path = directory.join(&name);
            let Some(own) = entry.metadata else {
                bail!("{} on the executor was listed without its metadata", path.display());
            };
            let kind = if own.is_symlink {
                let params = FsReadLinkParams { path: uri(&path)?, sandbox: None };
                match self.client.read_link(params).await {
                    Ok(link) => Kind::Link { target: link.target },
                    // Removed since the listing: not copied.
                    Err(error) if error.kind == FsErrorKind::NotFound => return Ok(None),
                    Err(error) => return Err(remote(&path, error)),
                }
            } else if entry.is_directory {
                Kind::Directory
            } else if entry.is_file {
                Kind::File { size: own.size }
            } else {
                bail!(
                    "{} on the executor is neither a file, a directory nor a link",
                    path.display()
                );
            };
            // A link's mode is not its own to keep; its time is.
            let mode = (!own.is_symlink).then_some(own.mode);
            Ok(Some(Entry {
                relative: relative.join(&name),
                kind,
                mode,
                modified_ms: Some(own.modified_at_ms),
            }))
        });
        let found: Vec<Option<Entry>> =
            stream::iter(entries).buffered(LOOKUPS_IN_FLIGHT).try_collect().await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// What `path` on the executor is (`None`: gone). Asked following links — `fs/getMetadata`
    /// refuses a link as the last component otherwise — and it says whether it was one.
    async fn remote_entry(&self, path: &Path, relative: PathBuf) -> anyhow::Result<Option<Entry>> {
        let params = FsGetMetadataParams {
            path: uri(path)?,
            follow_symlinks: None,
            include_mode: self.keeps_metadata.then_some(true),
            sandbox: None,
        };
        let found = match self.client.get_metadata(params).await {
            Ok(found) => found,
            // A dangling link: kept as a link where the server can say where it points.
            Err(error) if error.kind == FsErrorKind::NotFound && self.keeps_metadata => {
                let params = FsReadLinkParams { path: uri(path)?, sandbox: None };
                return match self.client.read_link(params).await {
                    Ok(link) => Ok(Some(Entry {
                        relative,
                        kind: Kind::Link { target: link.target },
                        mode: None,
                        modified_ms: None,
                    })),
                    Err(error) if error.kind == FsErrorKind::NotFound => Ok(None),
                    Err(error) => Err(remote(path, error)),
                };
            }
            Err(error) if error.kind == FsErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(remote(path, error)),
        };
        let kind = if found.is_symlink && self.keeps_metadata {
            let params = FsReadLinkParams { path: uri(path)?, sandbox: None };
            let link = self.client.read_link(params).await.map_err(|e| remote(path, e))?;
            // Its own time is not to be had: the answer is its target's.
            return Ok(Some(Entry {
                relative,
                kind: Kind::Link { target: link.target },
                mode: None,
                modified_ms: None,
            }));
        } else if found.is_directory {
            Kind::Directory
        } else if found.is_file {
            Kind::File { size: found.size }
        } else {
            bail!("{} on the executor is neither a file, a directory nor a link", path.display());
        };
        if found.is_symlink {
            // Without `fs/readLink`, a link is copied as what it points to.
            self.not_kept.links.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(Entry {
            relative,
            kind,
            mode: found.mode,
            modified_ms: Some(found.modified_at_ms),
        }))
    }
}

/// A name from a remote listing, refused unless it is one plain component: a server must not
/// make this side write outside the directory being copied into (`../.bashrc`).
fn safe_name(directory: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let path = Path::new(name);
    let mut components = path.components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(_)), None) if !name.contains('/') => Ok(path.to_owned()),
        _ => bail!(
            "{} on the executor lists an entry named {name:?}, which is not a file name; nothing more copied",
            directory.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_names_must_be_one_plain_component() {
        let dir = Path::new("/d");
        assert_eq!(safe_name(dir, "a.txt").unwrap(), PathBuf::from("a.txt"));
        for bad in ["..", ".", "../x", "a/b", "/etc", ""] {
            assert!(safe_name(dir, bad).is_err(), "{bad:?}");
        }
    }
}
