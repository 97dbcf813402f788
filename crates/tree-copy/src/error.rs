//! Why a copy, or one entry of it, was not made: a variant per reason, each naming the path
//! and its side ([`Shown`]), so a caller decides on the variant and shows the words.

use std::path::PathBuf;

use tether_engine::fs::FsError;

use crate::shown::Shown;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CopyError {
    /// The source is not there.
    #[error("{0}: no such file or directory")]
    NotFound(Shown),

    /// A directory named without asking for trees (`-r`, `recursive=True`).
    #[error("{0} is a directory; copy it with -r")]
    IsADirectory(Shown),

    /// A link named without asking for trees leads to a directory.
    #[error("{0} leads to a directory; copy it with -r")]
    LinkToDirectory(Shown),

    /// A link named without asking for trees leads nowhere.
    #[error("{0}: a link to nothing (its target is not there)")]
    DanglingLink(Shown),

    /// A FIFO, socket or device named as the source: nothing a copy can carry. (Met in a tree,
    /// one is skipped and counted.)
    #[error("{0} is neither a file, a directory nor a link")]
    Special(Shown),

    /// The side may not read this file or directory (its refusal's kind, `PermissionDenied`).
    /// Named as the source it is the copy's error, as cp's; met in a tree it is told to the
    /// [`Observer`](crate::Observer), skipped and counted, and the copy goes on.
    #[error("cannot read {0}: permission denied")]
    Denied(Shown),

    #[error("cannot copy the directory {from} onto the file {to}")]
    DirectoryOntoFile { from: Shown, to: Shown },

    /// Several sources go into a directory, and the destination is not one.
    #[error("{0}: not a directory (several sources)")]
    NotADirectoryForSeveral(Shown),

    /// A destination written with a trailing `/` names a directory, and a file is there.
    #[error("{0}: not a directory; leave out the trailing / to copy onto the file")]
    SlashOntoFile(Shown),

    /// A destination written with a trailing `/` names a directory, and nothing is there: a
    /// file is never written under that name.
    #[error(
        "{0}: no such directory; make it first, or leave out the trailing / to copy to a file \
         of that name"
    )]
    SlashOntoNothing(Shown),

    /// A new file's directory is not there.
    #[error("{0}: no such directory; make it first, or copy into a directory that exists")]
    NoSuchDirectory(Shown),

    /// A new file's directory is something else.
    #[error("{0} is not a directory")]
    ParentNotADirectory(Shown),

    /// The source's path ends with no name (`.`, `/`) and the copy goes into a directory.
    #[error("{0}: has no name to copy under")]
    NoName(Shown),

    /// The tree holds more than [`MAX_ENTRIES`](crate::MAX_ENTRIES) entries.
    #[error(
        "{0}: the tree holds more than {max} entries, the most one tether cp copies; copy its \
         directories one at a time",
        max = crate::MAX_ENTRIES
    )]
    TooManyEntries(Shown),

    /// The tree goes deeper than [`MAX_DEPTH`](crate::MAX_DEPTH) directories.
    #[error(
        "{0}: more than {max} directories deep, the deepest one tether cp goes; copy what is \
         below it on its own",
        max = crate::MAX_DEPTH
    )]
    TooDeep(Shown),

    /// Where the copy has a directory the destination has a symbolic link: what the copy put
    /// in it would land wherever the link points. Nothing more is copied.
    #[error(
        "{0} is a symbolic link{here}, and the copy would write through it; nothing more \
         copied; remove the link, or copy into another directory",
        here = .0.here_word()
    )]
    ThroughLink(Shown),

    /// Where the copy has a directory the destination has a file.
    #[error(
        "{0} is a file{here}, where the copy has a directory; remove it, or copy into another \
         directory",
        here = .0.here_word()
    )]
    FileWhereDirectory(Shown),

    /// A listing names an entry that is not one plain component (`..`, `a/b`): a side must not
    /// make the other write outside the directory being copied into.
    #[error(
        "{directory} lists an entry named {name:?}, which is not a file name; nothing more copied"
    )]
    NotAFileName { directory: Shown, name: String },

    /// A reader (standard input) cannot be copied into a directory: it has no name.
    #[error(
        "{0} is a directory, and {reader} has no name to copy under; give the file's path",
        reader = .1
    )]
    ReaderIntoDirectory(Shown, String),

    /// A directory cannot be copied to a writer (standard output).
    #[error("{0} is a directory; {writer} takes one file", writer = .1)]
    DirectoryToWriter(Shown, String),

    /// Reading the reader a copy takes its bytes from failed.
    #[error("cannot read {what}")]
    Read {
        what: String,
        #[source]
        source: std::io::Error,
    },

    /// Writing to the writer a copy gives its bytes to failed (a closed pipe among others).
    #[error("cannot write {what}")]
    Write {
        what: String,
        #[source]
        source: std::io::Error,
    },

    /// A side refused an operation on a path, or failed it: its own error, kind and words.
    #[error("{shown}: {source}")]
    Fs {
        shown: Shown,
        #[source]
        source: FsError,
    },

    /// A path that is not absolute: a side names its files by `file:` URIs.
    #[error("{}: not an absolute path", .0.display())]
    NotAbsolute(PathBuf),
}

impl CopyError {
    /// A side's failure on `shown`, as [`CopyError::Fs`].
    pub(crate) fn fs(shown: Shown, source: FsError) -> Self {
        Self::Fs { shown, source }
    }

    /// A side's failure to read `shown`: [`CopyError::Denied`] where it refused for permission,
    /// else [`CopyError::Fs`].
    pub(crate) fn reading(shown: Shown, source: FsError) -> Self {
        match source.kind {
            tether_engine::fs::FsErrorKind::PermissionDenied => Self::Denied(shown),
            _ => Self::fs(shown, source),
        }
    }
}
