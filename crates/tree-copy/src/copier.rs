//! [`TreeCopy`]: one copy's two sides, what it tells and counts, and what it has left
//! halfway; the paths ([`TreePath`]) and [`CopyOptions`] a copy is given. The copying itself
//! is `source`'s (one source), `walk`'s (a tree), `file`'s (one file or link) and `stream`'s
//! (a reader or a writer).

use std::path::{Path, PathBuf};

use crate::report::{CopyReport, Observer, Tally, Unobserved};
use crate::side::Side;
use crate::stages::Stages;

/// A path on one side: where the copy reads or writes (absolute), and how messages name it
/// (the words the person wrote: a relative path, `~/notes`, a trailing `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreePath {
    pub(crate) path: PathBuf,
    pub(crate) shown: PathBuf,
}

impl TreePath {
    /// An absolute path, named as it is.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        Self { shown: path.clone(), path }
    }

    /// Named in messages as `shown`. A trailing `/` there means a directory, as it does to cp
    /// and scp.
    pub fn shown_as(mut self, shown: impl Into<PathBuf>) -> Self {
        self.shown = shown.into();
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// How one source is copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyOptions {
    /// Copy a directory and what it holds (`cp -r`); a link in a tree, or named as the source,
    /// is copied as a link. Without it a directory is refused and a named link is copied as
    /// what it leads to, as cp copies it.
    pub recursive: bool,
    /// The destination must be a directory that is there, which the source goes into under
    /// its own name (one of several sources, as scp takes them).
    pub into_directory: bool,
}

/// The observer of a copy nobody watches.
static UNOBSERVED: Unobserved = Unobserved;

/// One copy from one side to the other: any number of sources, one at a time, counted
/// together ([`TreeCopy::report`]).
///
/// What a copy writes goes under a temporary name beside its final one and is renamed into
/// place whole (by the side itself for a small file, `fs/putFile`), so no reader sees a part.
/// A copy abandoned halfway — its future dropped — leaves those temporary files until
/// [`TreeCopy::remove_stages`] is called.
pub struct TreeCopy<'a> {
    pub(crate) from: Side<'a>,
    pub(crate) to: Side<'a>,
    pub(crate) observer: &'a dyn Observer,
    pub(crate) tally: Tally,
    pub(crate) stages: Stages,
}

impl<'a> TreeCopy<'a> {
    pub fn new(from: Side<'a>, to: Side<'a>) -> Self {
        Self { from, to, observer: &UNOBSERVED, tally: Tally::default(), stages: Stages::default() }
    }

    /// Tells `observer` what the copy does as it does it.
    pub fn observed_by(mut self, observer: &'a dyn Observer) -> Self {
        self.observer = observer;
        self
    }

    /// What the copy has done so far.
    pub fn report(&self) -> CopyReport {
        self.tally.report()
    }

    /// Removes the temporary files of copies abandoned halfway (their futures dropped), within
    /// [`CLEANUP_DEADLINE`](crate::CLEANUP_DEADLINE).
    pub async fn remove_stages(&self) {
        self.stages.remove_all(self.to.fs).await;
    }
}
