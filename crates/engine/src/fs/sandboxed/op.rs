//! The file operations a sandbox may have to confine, and what each one yields.
//!
//! One [`FileOp`] is the unit of work whether it runs here or in the helper: the same code
//! performs it in both places, so a confined call differs from a free one only in what the
//! kernel lets it touch.

use std::fs::File;
use std::io;
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tether_protocol::ByteChunk;
use tether_protocol::capabilities::{CapabilityRootDiscovery, DiscoverV2Response};
use tether_protocol::fs::{FsGetMetadataResponse, FsWalkOptions, FsWalkResponse};

use super::super::directory::{self, Listing};
use super::super::{FsError, copy, metadata, put_file, regular_file, remove, set_metadata, walk};
use crate::sandbox::policy::FullPolicy;

/// Work a helper performs inside a sandbox: sent to it as JSON, performed there by the same
/// code that performs it in-process, answered as an [`Outcome`]. File operations are one kind
/// ([`FileOp`]); capability discovery, which reads through a sandbox as a command would, is
/// another, defined beside the discovery it serves, so this transport names no caller.
pub(crate) trait HelperOp: Serialize + DeserializeOwned + Send + 'static {
    /// The helper mode that performs it: `tether __tether-sandbox … MODE`.
    const MODE: &'static str;
    /// The largest answer the server reads back for it.
    const MAX_ANSWER_BYTES: usize;

    /// Performs the work here, in whatever sandbox this process is in.
    fn apply(self) -> io::Result<Outcome>;

    /// Answers the work without a helper where the host already shows what the sandbox
    /// would; by default never.
    fn try_here(self, _policy: &FullPolicy) -> impl Future<Output = Tried<Self>> + Send {
        std::future::ready(Tried::Sandbox(self))
    }
}

/// What became of work offered to be done here rather than in a helper.
pub(crate) enum Tried<Op> {
    /// Answered here.
    Answered(Result<Outcome, FsError>),
    /// For the sandbox, given back whole.
    Sandbox(Op),
}

/// One operation, as the helper receives it. Paths travel as their bytes: a path need not be
/// UTF-8.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub(crate) enum FileOp {
    WriteFile {
        #[serde(with = "path_bytes")]
        path: PathBuf,
        data: ByteChunk,
        follow: bool,
    },
    /// A whole file put in place under a temporary name (`fs/putFile`).
    PutFile {
        #[serde(with = "path_bytes")]
        path: PathBuf,
        data: ByteChunk,
        mode: Option<u32>,
        modified_at_ms: Option<i64>,
    },
    CreateDirectory {
        #[serde(with = "path_bytes")]
        path: PathBuf,
        recursive: bool,
        follow: bool,
    },
    Remove {
        #[serde(with = "path_bytes")]
        path: PathBuf,
        recursive: bool,
        force: bool,
        follow: bool,
    },
    Copy {
        #[serde(with = "path_bytes")]
        source: PathBuf,
        #[serde(with = "path_bytes")]
        destination: PathBuf,
        recursive: bool,
    },
    Rename {
        #[serde(with = "path_bytes")]
        source: PathBuf,
        #[serde(with = "path_bytes")]
        destination: PathBuf,
    },
    /// The permission bits and the modification time (Unix ms) of the path itself.
    SetMetadata {
        #[serde(with = "path_bytes")]
        path: PathBuf,
        mode: Option<u32>,
        modified_at_ms: Option<i64>,
    },
    CreateSymlink {
        #[serde(with = "path_bytes")]
        path: PathBuf,
        target: String,
    },
    /// A link's target, as bytes (it need not be UTF-8).
    ReadLink {
        #[serde(with = "path_bytes")]
        path: PathBuf,
    },
    Metadata {
        #[serde(with = "path_bytes")]
        path: PathBuf,
        follow: bool,
    },
    Canonicalize {
        #[serde(with = "path_bytes")]
        path: PathBuf,
    },
    /// Lists a directory, keeping at most `keep` entries and counting the rest; with
    /// `metadata`, each entry's own.
    ReadDirectory {
        #[serde(with = "path_bytes")]
        path: PathBuf,
        keep: usize,
        metadata: bool,
    },
    Walk {
        #[serde(with = "path_bytes")]
        path: PathBuf,
        options: FsWalkOptions,
    },
    /// Opens a file; the open file is the answer, and the caller reads or writes it. Opening
    /// is where the sandbox decides, so a file opened inside it may be used outside.
    Open {
        #[serde(with = "path_bytes")]
        path: PathBuf,
        how: OpenHow,
    },
}

/// How [`FileOp::Open`] opens its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum OpenHow {
    /// A regular file for reading, following links or not (`fs/readFile`, `fs/open`).
    Read { follow: bool },
    /// Created or truncated for writing, following links (`fs/open` in `replace` mode).
    Replace,
}

/// What an operation yields.
#[derive(Debug)]
pub(crate) enum Outcome {
    Done,
    Metadata(FsGetMetadataResponse),
    Path(PathBuf),
    Listing(Listing),
    Walk(FsWalkResponse),
    File(File),
    Root(Box<CapabilityRootDiscovery>),
    Inventory(Box<DiscoverV2Response>),
}

impl FileOp {
    /// Performs the operation here, in whatever sandbox this process is in.
    pub(crate) fn apply_here(self) -> io::Result<Outcome> {
        let done = |result: io::Result<()>| result.map(|()| Outcome::Done);
        match self {
            FileOp::WriteFile { path, data, follow } => {
                done(regular_file::write_whole(&path, &data.0, follow))
            }
            FileOp::PutFile { path, data, mode, modified_at_ms } => {
                done(put_file::put(&path, &data.0, mode, modified_at_ms))
            }
            FileOp::CreateDirectory { path, recursive, follow } => {
                done(directory::create(&path, recursive, follow))
            }
            FileOp::Remove { path, recursive, force, follow } => {
                done(remove::remove(&path, recursive, force, follow))
            }
            FileOp::Copy { source, destination, recursive } => {
                done(copy::copy(&source, &destination, recursive))
            }
            FileOp::Rename { source, destination } => done(std::fs::rename(source, destination)),
            FileOp::SetMetadata { path, mode, modified_at_ms } => {
                done(set_metadata::set(&path, mode, modified_at_ms))
            }
            FileOp::CreateSymlink { path, target } => {
                done(std::os::unix::fs::symlink(target, path))
            }
            FileOp::ReadLink { path } => std::fs::read_link(path).map(Outcome::Path),
            FileOp::Metadata { path, follow } => {
                metadata::metadata(&path, follow).map(Outcome::Metadata)
            }
            FileOp::Canonicalize { path } => std::fs::canonicalize(path).map(Outcome::Path),
            FileOp::ReadDirectory { path, keep, metadata } => {
                directory::list(&path, keep, metadata).map(Outcome::Listing)
            }
            FileOp::Walk { path, options } => walk::walk(&path, &options).map(Outcome::Walk),
            FileOp::Open { path, how } => match how {
                OpenHow::Read { follow } => regular_file::open_for_reading(&path, follow),
                OpenHow::Replace => regular_file::open_for_write(&path, true),
            }
            .map(Outcome::File),
        }
    }
}

/// The value a caller expects from an [`Outcome`]; any other is the helper's mistake.
pub(crate) trait FromOutcome: Sized {
    const WHAT: &'static str;
    fn from_outcome(outcome: Outcome) -> Option<Self>;

    fn expect(outcome: Outcome) -> Result<Self, FsError> {
        let answered = outcome.what();
        Self::from_outcome(outcome).ok_or_else(|| {
            FsError::other(format!(
                "the fs sandbox helper answered {answered} where {} was asked for",
                Self::WHAT
            ))
        })
    }
}

impl Outcome {
    fn what(&self) -> &'static str {
        match self {
            Outcome::Done => <() as FromOutcome>::WHAT,
            Outcome::Metadata(_) => FsGetMetadataResponse::WHAT,
            Outcome::Path(_) => PathBuf::WHAT,
            Outcome::Listing(_) => Listing::WHAT,
            Outcome::Walk(_) => FsWalkResponse::WHAT,
            Outcome::File(_) => File::WHAT,
            Outcome::Root(_) => CapabilityRootDiscovery::WHAT,
            Outcome::Inventory(_) => DiscoverV2Response::WHAT,
        }
    }
}

macro_rules! from_outcome {
    ($type:ty, $what:literal, $pattern:pat => $value:expr) => {
        impl FromOutcome for $type {
            const WHAT: &'static str = $what;
            fn from_outcome(outcome: Outcome) -> Option<Self> {
                match outcome {
                    $pattern => Some($value),
                    _ => None,
                }
            }
        }
    };
}

from_outcome!((), "nothing", Outcome::Done => ());
from_outcome!(FsGetMetadataResponse, "metadata", Outcome::Metadata(value) => value);
from_outcome!(PathBuf, "a path", Outcome::Path(value) => value);
from_outcome!(Listing, "a listing", Outcome::Listing(value) => value);
from_outcome!(FsWalkResponse, "a walk", Outcome::Walk(value) => value);
from_outcome!(File, "an open file", Outcome::File(value) => value);
from_outcome!(CapabilityRootDiscovery, "a capability root", Outcome::Root(value) => *value);
from_outcome!(DiscoverV2Response, "an inventory", Outcome::Inventory(value) => *value);

/// A path as its bytes, for paths that are not UTF-8.
pub(crate) mod path_bytes {
    use std::ffi::OsString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::path::{Path, PathBuf};

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(path.as_os_str().as_bytes())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<PathBuf, D::Error> {
        Ok(PathBuf::from(OsString::from_vec(Vec::<u8>::deserialize(deserializer)?)))
    }
}
