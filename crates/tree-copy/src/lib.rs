//! A file or a directory tree copied from one [`FileSystem`](tether_engine::fs::FileSystem) to
//! another, as `scp -r` copies: here to an executor (the engine's `LocalFileSystem` to
//! `tether-client`'s `ExecServerClient`), an executor to here, or one executor to another. One
//! copier for every direction; `tether cp` and the Python package's `upload` and `download`
//! are thin layers over it.
//!
//! The map:
//! - `copier`: [`TreeCopy`], one copy's two sides and what it tells and counts; [`TreePath`] and
//!   [`CopyOptions`].
//! - `source`: one source copied — its root looked at, where it lands decided (`landing`,
//!   pure), then one file or a tree.
//! - `shown`: a path as a person named it, with its side ([`Shown`], [`Place`]), for messages.
//! - `side`: one end of a copy ([`Side`]): a filesystem, where it is, and whether it keeps
//!   modes, times and links (the `fsMetadata` extension, learnt from its first answer).
//! - `entry`: what a directory holds, listed (with each entry's own metadata where the side
//!   gives it, else looked up one by one) and checked: a name from a listing that is not one
//!   plain component stops the copy.
//! - `walk`: a tree walked depth first beside its copies, holding only the listings of the
//!   directories it is inside, within `limits`.
//! - `file`: one file or link, staged under a temporary name and renamed into place.
//! - `stages`: the temporary files not yet in place, removed when a copy is abandoned.
//! - `stream`: a reader's bytes to a file, a file's bytes to a writer (standard input and
//!   output for `tether cp -`).
//! - `report`: what was copied and what was not ([`CopyReport`]), and the [`Observer`] that
//!   is told as it happens (a progress bar, a line per entry skipped).
//! - `error`: [`CopyError`], a variant per reason, each naming its path and side.
//!
//! **Invariant:** the copier decides on [`FsErrorKind`](tether_engine::fs::FsErrorKind)s and on
//! what a side answers, never on an error's words.

mod copier;
mod entry;
mod error;
mod file;
mod landing;
mod limits;
mod report;
mod shown;
mod side;
mod source;
mod stages;
mod stream;
mod walk;

pub use copier::{CopyOptions, TreeCopy, TreePath};
pub use error::CopyError;
pub use limits::{MAX_DEPTH, MAX_ENTRIES};
pub use report::{CopyReport, Observer};
pub use shown::{Place, Shown};
pub use side::Side;
pub use stages::CLEANUP_DEADLINE;
