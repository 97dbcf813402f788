//! A tree walked depth first beside its copies: each directory made on the destination, then
//! listed on the source, its files and links handed to the copies as it goes; the walk holds
//! only the listings of the directories it is inside ([`crate::limits`]).
//!
//! A directory is made before it is listed, so that the listing says what the source holds
//! once the copy is there (a directory replaced by a link meanwhile is listed, and copied, as
//! the link); one the source may not read is removed again if the copy made it. A directory
//! the destination has as a link, or as a file, stops the copy: what the copy put in it would
//! land wherever the link points.
//!
//! Each decision is made on what a side answers when it is asked: a side is a filesystem of
//! paths (`file:` URIs), so the copy holds nothing open between two calls, and a link swapped
//! in between a look and the write that follows it is not seen by the copy. What each call
//! guarantees on its own holds (a staged file is renamed over whatever is at its name).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use tether_protocol::fs::{FsCreateDirectoryParams, FsRemoveParams};
use tokio::sync::mpsc;

use crate::copier::{TreeCopy, TreePath};
use crate::entry::{self, Entry, Kind};
use crate::error::CopyError;
use crate::landing::Landing;
use crate::limits::{Budget, check_depth};
use crate::report::Tally;
use crate::shown::Shown;
use crate::side::uri;

/// Files copied at once: enough to hide each file's few round trips (open, blocks, close,
/// metadata, rename) behind the others' for a tree of small files, few enough that a tree of
/// big ones holds at most this many blocks in memory. Also the most a walk is ahead of its
/// copies: the queue between them holds this many.
pub(crate) const FILES_IN_FLIGHT: usize = 16;

/// A directory a copy writes into, with the mode and time it takes once everything in it is
/// copied: when the last of its files, and of the directories below it, lets go of it
/// ([`TreeCopy::finish`]).
pub(crate) struct Directory {
    pub(crate) source: PathBuf,
    pub(crate) source_shown: PathBuf,
    pub(crate) dest: PathBuf,
    pub(crate) dest_shown: PathBuf,
    /// Its mode and time, given once it is done; `None` for the directory a copy lands in,
    /// which is not the copy's.
    pub(crate) metadata: Option<(Option<u32>, Option<i64>)>,
    /// Given its mode and time only after this one is.
    pub(crate) parent: Option<Arc<Directory>>,
}

/// A file or link to copy from `source` to `dest`, then let go of its directory.
pub(crate) struct Job {
    pub(crate) directory: Arc<Directory>,
    pub(crate) entry: Entry,
    pub(crate) source: PathBuf,
    pub(crate) source_shown: PathBuf,
    pub(crate) dest: PathBuf,
    pub(crate) dest_shown: PathBuf,
    /// Met in a tree, where one the source may not read is skipped; else named as the source,
    /// where it is the copy's error.
    pub(crate) in_tree: bool,
}

/// A directory found and not yet gone into.
struct Pending {
    parent: Arc<Directory>,
    entry: Entry,
    source: PathBuf,
    source_shown: PathBuf,
    dest: PathBuf,
    dest_shown: PathBuf,
}

/// Runs a tree's walk beside its copies: the walk hands each file or link to a queue of
/// [`FILES_IN_FLIGHT`], and the copies take from it that many at a time. A walk that stops on
/// an error stops the copies taking more, and lets those begun finish, so that none is cut off
/// with its temporary file left behind; copies stopping on an error stop the walk (the queue
/// is gone).
pub(crate) async fn beside_copies<W, C>(
    walk: impl FnOnce(mpsc::Sender<Job>) -> W,
    copy: impl Fn(Job) -> C,
) -> Result<(), CopyError>
where
    W: Future<Output = Result<(), CopyError>>,
    C: Future<Output = Result<(), CopyError>>,
{
    let (jobs, mut queued) = mpsc::channel::<Job>(FILES_IN_FLIGHT);
    let stopped = AtomicBool::new(false);
    let walk = async {
        let walked = walk(jobs).await;
        stopped.store(walked.is_err(), Ordering::Relaxed);
        walked
    };
    let copies = stream::poll_fn(|cx| match stopped.load(Ordering::Relaxed) {
        true => Poll::Ready(None),
        false => queued.poll_recv(cx),
    })
    .map(copy)
    .buffer_unordered(FILES_IN_FLIGHT)
    .try_for_each(|()| std::future::ready(Ok(())));
    let (walked, copied) = tokio::join!(walk, copies);
    walked.and(copied)
}

impl TreeCopy<'_> {
    /// Walks the tree `root` at `from`, landing at `to` inside `landing`, depth first.
    pub(crate) async fn walk(
        &self,
        landing: Arc<Directory>,
        root: Entry,
        from: &TreePath,
        to: Landing,
        jobs: mpsc::Sender<Job>,
    ) -> Result<(), CopyError> {
        let mut budget = Budget::default();
        let mut stack: Vec<(Arc<Directory>, std::vec::IntoIter<Entry>)> = Vec::new();
        let mut next = Some(Pending {
            parent: landing,
            entry: root,
            source: from.path.clone(),
            source_shown: from.shown.clone(),
            dest: to.path,
            dest_shown: to.shown.path,
        });
        loop {
            if let Some(pending) = next.take() {
                let source_shown = self.from.shown(&pending.source_shown);
                check_depth(stack.len(), &source_shown)?;
                let dest_shown = self.to.shown(&pending.dest_shown);
                let made = self.make_directory(&pending.dest, &dest_shown).await?;
                let listing = entry::list(
                    &self.from,
                    &pending.source,
                    &source_shown,
                    &mut budget,
                    &self.tally,
                )
                .await;
                let listing = match listing {
                    Ok(listing) => listing,
                    Err(error) => {
                        if made {
                            self.unmake_directory(&pending.dest).await;
                        }
                        match error {
                            // One directory in the tree the source may not read is not a
                            // reason to copy nothing of it, as with cp -r; the tree's root is.
                            CopyError::Denied(_) if !stack.is_empty() => {
                                self.skipped(error);
                                continue;
                            }
                            error => return Err(error),
                        }
                    }
                };
                Tally::add(&self.tally.directories, 1);
                let directory = Arc::new(Directory {
                    source: pending.source,
                    source_shown: pending.source_shown,
                    dest: pending.dest,
                    dest_shown: pending.dest_shown,
                    metadata: Some((pending.entry.mode, pending.entry.modified_ms)),
                    parent: Some(pending.parent),
                });
                stack.push((directory, listing.into_iter()));
            }
            let Some((directory, listed)) = stack.last_mut() else { return Ok(()) };
            let Some(entry) = listed.next() else {
                let (directory, _) = stack.pop().expect("a directory being walked");
                self.finish(Some(directory)).await?;
                continue;
            };
            let (source, dest) =
                (directory.source.join(&entry.name), directory.dest.join(&entry.name));
            let source_shown = directory.source_shown.join(&entry.name);
            let dest_shown = directory.dest_shown.join(&entry.name);
            match entry.kind {
                Kind::Directory => {
                    let parent = directory.clone();
                    next = Some(Pending { parent, entry, source, source_shown, dest, dest_shown });
                    continue;
                }
                // A FIFO or a socket in a tree is not a reason to copy nothing of it.
                Kind::Special => {
                    Tally::add(&self.tally.special, 1);
                    continue;
                }
                Kind::File { .. } | Kind::Link => {}
            }
            self.observer.found(entry.size());
            let directory = directory.clone();
            let job =
                Job { directory, entry, source, source_shown, dest, dest_shown, in_tree: true };
            if jobs.send(job).await.is_err() {
                // The copies stopped on an error, which is the one to report.
                return Ok(());
            }
        }
    }

    /// Makes the directory `path` on the destination unless it is there; whether it made it.
    /// A link or a file in its place stops the copy.
    async fn make_directory(&self, path: &Path, shown: &Shown) -> Result<bool, CopyError> {
        let params = FsCreateDirectoryParams {
            path: uri(path)?,
            recursive: Some(false),
            follow_symlinks: None,
            sandbox: None,
        };
        let refused = match self.to.fs.create_directory(params).await {
            Ok(()) => return Ok(true),
            Err(refused) => refused,
        };
        // There already, or its parent is not: what is there decides, not the refusal's words.
        match entry::metadata(&self.to, &uri(path)?).await {
            Ok(found) if found.is_symlink => Err(CopyError::ThroughLink(shown.clone())),
            Ok(found) if found.is_directory => Ok(false),
            Ok(_) => Err(CopyError::FileWhereDirectory(shown.clone())),
            Err(_) => Err(CopyError::fs(shown.clone(), refused)),
        }
    }

    /// Removes a directory the copy made and will not fill, if it is still empty.
    async fn unmake_directory(&self, path: &Path) {
        let Ok(path) = uri(path) else { return };
        let params = FsRemoveParams {
            path,
            recursive: Some(false),
            force: Some(true),
            follow_symlinks: None,
            sandbox: None,
        };
        let _ = self.to.fs.remove(params).await;
    }

    /// Lets go of `directory`: the last to do so gives it its mode and time, then lets go of
    /// its parent in turn, so that each directory's are set once nothing more is written in it.
    pub(crate) async fn finish(
        &self,
        mut directory: Option<Arc<Directory>>,
    ) -> Result<(), CopyError> {
        while let Some(done) = directory.and_then(Arc::into_inner) {
            if let Some((mode, modified_ms)) = done.metadata {
                let shown = self.to.shown(&done.dest_shown);
                self.set_metadata(&done.dest, &shown, mode, modified_ms).await?;
            }
            directory = done.parent;
        }
        Ok(())
    }

    /// Counts `denied` (a [`CopyError::Denied`]) and tells the observer; the copy goes on.
    pub(crate) fn skipped(&self, denied: CopyError) {
        Tally::add(&self.tally.denied, 1);
        self.observer.skipped(&denied);
    }
}
