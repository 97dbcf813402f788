//! The executor's filesystem, as the `fs/*` methods expose it.
//!
//! [`FileSystem`] is the one surface: [`LocalFileSystem`] implements it here (used in-process
//! and behind the server's handlers), and a remote implementation over the client implements it
//! the same way, so one test suite covers both. Its methods take and return the protocol's own
//! params and results: the trait *is* the protocol's filesystem, minus the envelope.
//!
//! A file too big to hold at once is read with [`FileSystem::read_file_stream`], block by
//! block ([`FileReadStream`]), and written with [`FileSystem::write_file_stream`]
//! ([`FileWriteStream`]).
//!
//! `rename`, `set_metadata`, `create_symlink`, `read_link` and the mode in `get_metadata` are
//! Tether's `fsMetadata` extension: what a copy needs to keep modes, times and links. A remote
//! server without it refuses them at once ([`FsErrorKind::Unsupported`]).
//!
//! Connection-scoped state — open file handles ([`FileHandles`]) and the missing-path watch
//! ([`MissingWatch`]) — is not part of the trait: it lives as long as one connection.

pub(crate) mod blocking;
mod cached_metadata;
mod cached_read;
mod copy;
mod directory;
mod handles;
mod local;
pub(crate) mod metadata;
mod no_follow;
pub mod piecewise;
mod put_file;
pub(crate) mod regular_file;
mod remove;
mod remove_tree;
pub(crate) mod request;
pub(crate) mod sandboxed;
mod set_metadata;
mod stage;
mod stream;
pub(crate) mod walk;
mod watch_missing;
mod whole_read;
mod write_stream;

use async_trait::async_trait;
use tether_protocol::PathUri;
use tether_protocol::fs::{
    FsCanonicalizeParams, FsCanonicalizeResponse, FsCopyParams, FsCreateDirectoryParams,
    FsCreateSymlinkParams, FsGetMetadataParams, FsGetMetadataResponse, FsPutFileParams,
    FsReadDirectoryParams, FsReadDirectoryResponse, FsReadFileParams, FsReadFileResponse,
    FsReadLinkParams, FsReadLinkResponse, FsRemoveParams, FsRenameParams, FsSetMetadataParams,
    FsWalkParams, FsWalkResponse, FsWriteFileParams,
};
use tether_protocol::sandbox::SandboxContext;

pub use handles::FileHandles;
pub use local::{DEFAULT_WHOLE_READ_BUDGET_BYTES, LocalFileSystem};
pub use stage::{is_staged_name, staged_name};
pub use stream::FileReadStream;
pub use watch_missing::MissingWatch;
pub use whole_read::ReadGrant;
pub use write_stream::{BlockWriter, FileWriteStream};

/// Filesystem operations on the executor. Paths are `file:` URIs naming executor paths.
#[async_trait]
pub trait FileSystem: Send + Sync {
    async fn read_file(&self, params: FsReadFileParams) -> Result<FsReadFileResponse, FsError>;
    async fn write_file(&self, params: FsWriteFileParams) -> Result<(), FsError>;
    async fn create_directory(&self, params: FsCreateDirectoryParams) -> Result<(), FsError>;
    async fn get_metadata(
        &self,
        params: FsGetMetadataParams,
    ) -> Result<FsGetMetadataResponse, FsError>;
    async fn canonicalize(
        &self,
        params: FsCanonicalizeParams,
    ) -> Result<FsCanonicalizeResponse, FsError>;
    async fn read_directory(
        &self,
        params: FsReadDirectoryParams,
    ) -> Result<FsReadDirectoryResponse, FsError>;
    async fn walk(&self, params: FsWalkParams) -> Result<FsWalkResponse, FsError>;
    async fn remove(&self, params: FsRemoveParams) -> Result<(), FsError>;
    async fn copy(&self, params: FsCopyParams) -> Result<(), FsError>;

    /// Opens a regular file (following links, refused like `fs/readFile` refuses what is not a
    /// regular file) and reads it as blocks of at most
    /// [`FS_BLOCK_MAX_BYTES`](tether_protocol::fs::FS_BLOCK_MAX_BYTES): no size limit, and no
    /// more than one block held at a time. `sandbox` is the intent, as on every method.
    async fn read_file_stream(
        &self,
        path: PathUri,
        sandbox: Option<SandboxContext>,
    ) -> Result<FileReadStream, FsError>;

    /// `rename(2)`: an existing destination file is replaced atomically, a directory moves
    /// whole.
    async fn rename(&self, params: FsRenameParams) -> Result<(), FsError>;

    /// Sets the permission bits (`& 0o7777`) and the modification time (Unix ms; the access
    /// time is kept) of the path itself: a link's own time for a link, and a mode for a link is
    /// invalid input.
    async fn set_metadata(&self, params: FsSetMetadataParams) -> Result<(), FsError>;

    /// The whole file put in place at once: written under a temporary name beside `path`,
    /// given its mode and time, and renamed onto it, so that no reader ever sees a part and a
    /// failure leaves `path` as it was. An existing file or link at `path` is replaced.
    async fn put_file(&self, params: FsPutFileParams) -> Result<(), FsError>;

    /// A symbolic link at `path` holding `target`; an existing path is `File exists`.
    async fn create_symlink(&self, params: FsCreateSymlinkParams) -> Result<(), FsError>;

    /// A link's target, unresolved. Not a link: the OS's `Invalid argument`; a target that is
    /// not UTF-8: invalid input.
    async fn read_link(&self, params: FsReadLinkParams) -> Result<FsReadLinkResponse, FsError>;

    /// Creates or truncates a regular file and writes it in order, block by block.
    ///
    /// The file is created or truncated here, following links, as `fs/open` in `replace` mode
    /// does (a missing directory is not found); what the stream writes goes after what it
    /// wrote before, in blocks of at most
    /// [`FS_BLOCK_MAX_BYTES`](tether_protocol::fs::FS_BLOCK_MAX_BYTES), and
    /// [`FileWriteStream::finish`] says whether all of it was written. `sandbox` is the intent:
    /// a confining one opens the file inside the sandbox.
    async fn write_file_stream(
        &self,
        path: PathUri,
        sandbox: Option<SandboxContext>,
    ) -> Result<FileWriteStream, FsError>;
}

/// Why a filesystem operation failed: a kind that decides the JSON-RPC code, and a message that
/// names the path and the cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FsError {
    pub kind: FsErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FsErrorKind {
    /// The path (or handle) does not exist: `-32004`. Codex's `apply_patch` relies on this code
    /// to create missing parent directories.
    NotFound,
    /// The request is not acceptable (not a file, bad limits, sandbox refused): `-32600`.
    InvalidInput,
    /// The OS refused access: `-32600`.
    PermissionDenied,
    /// Anything else the OS reported: `-32603`.
    Other,
    /// The server does not serve this: it lacks the Tether extension (`fsMetadata`) or the
    /// capability (`fileWriteStreaming`) the call needs. A client refuses such a call before
    /// sending anything, so nothing was touched; a server answers `-32601`.
    Unsupported,
}

impl FsError {
    pub fn new(kind: FsErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(FsErrorKind::NotFound, message)
    }

    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(FsErrorKind::InvalidInput, message)
    }

    pub fn other(message: impl Into<String>) -> Self {
        Self::new(FsErrorKind::Other, message)
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(FsErrorKind::Unsupported, message)
    }
}

impl From<std::io::Error> for FsError {
    /// The OS error's own text (`No such file or directory (os error 2)`), which is what the
    /// reference reports, classified by kind.
    fn from(error: std::io::Error) -> Self {
        let kind = match error.kind() {
            std::io::ErrorKind::NotFound => FsErrorKind::NotFound,
            std::io::ErrorKind::PermissionDenied => FsErrorKind::PermissionDenied,
            std::io::ErrorKind::InvalidInput => FsErrorKind::InvalidInput,
            _ => FsErrorKind::Other,
        };
        Self { kind, message: error.to_string() }
    }
}
