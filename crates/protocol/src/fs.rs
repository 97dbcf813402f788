//! `fs/*`: whole-file and directory operations, and handle-based block reads and writes.
//!
//! Every path is a [`PathUri`]. Every method that takes a path also takes an optional `sandbox`
//! ([`SandboxContext`]): a malformed one fails the params decode (`-32602`), as the reference's
//! does; what it means on this host is the engine's business.
//!
//! Errors map by kind: not found → `-32004`, invalid input or permission denied → `-32600`,
//! anything else → `-32603`, with the OS or validation text as the message.
//!
//! File handles (`fs/open`, `fs/readBlock`, `fs/writeBlock`, `fs/close`) belong to the
//! connection, not the session: they are all closed when the connection ends, so a client that
//! reconnects finds its handles gone (`-32004`).
//!
//! Tether's `fsMetadata` extension ([`TetherExtensions::fs_metadata`]) adds what a copy that
//! keeps a tree as it was needs: `fs/rename`, `fs/setMetadata` (mode and mtime),
//! `fs/createSymlink`, `fs/readLink`, the mode in `fs/getMetadata` when asked for
//! (`includeMode`), each entry's own metadata in `fs/readDirectory` when asked for
//! (`includeMetadata`), and `fs/putFile`: a small file written whole, under a temporary name,
//! and renamed into place with its mode and time, in one call. The reference answers the
//! methods with `-32601` and ignores `includeMode` and `includeMetadata`.
//!
//! [`TetherExtensions::fs_metadata`]: crate::session::TetherExtensions::fs_metadata

use serde::{Deserialize, Serialize};

use crate::sandbox::SandboxContext;
use crate::{ByteChunk, PathUri};

/// The largest file `fs/readFile` returns: 512 MiB. The whole file travels base64-encoded in one
/// frame, so bigger files must be streamed with `fs/open` and `fs/readBlock` instead. Past it the
/// reference answers `file is too large to read: limit is 536870912 bytes`.
pub const FS_READ_FILE_MAX_BYTES: u64 = 512 * 1024 * 1024;

/// The largest block `fs/readBlock` reads and `fs/writeBlock` writes: 1 MiB. It bounds the frame
/// a single block costs; a length outside `1..=1048576` is refused with `-32600` (`file read
/// block length must be between 1 and 1048576`, `file write block length must be between 1 and
/// 1048576`).
pub const FS_BLOCK_MAX_BYTES: usize = 1024 * 1024;

/// What an `fs/*` failure was, where its code does not say (Tether's, in `error.data`; the
/// reference gives no data): a refusal by the OS (`EACCES`, `EPERM`) comes back `-32600` as
/// on the reference, the code invalid input has too, so a client that goes on past what it
/// may not read (`tether cp`) tells the two apart by this, never by the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum FsFailureKind {
    PermissionDenied,
}

/// `error.data` of an `fs/*` failure whose kind its code does not tell: `{"kind":
/// "permissionDenied"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsFailure {
    pub kind: FsFailureKind,
}

/// How many file handles one connection may hold open at once: 128. Each is an OS file
/// descriptor held on a client's behalf, so a client that never closes must not exhaust the
/// executor's. The 129th `fs/open` is refused with `-32600` (`at most 128 file handles may be
/// open per connection`).
pub const FS_MAX_OPEN_HANDLES: usize = 128;

/// The longest client-chosen handle id, in bytes: 32 (the Rust client's ids are 32 hex digits).
/// Longer ids are refused with `-32600` (`file handle ID must not exceed 32 bytes`) so a client
/// cannot make the server keep arbitrarily large keys. The empty id is allowed.
pub const FS_HANDLE_ID_MAX_BYTES: usize = 32;

/// The most entries `fs/readDirectory` returns: 50,000. The listing is one frame and is not
/// paginated, so a larger directory fails with `-32603` rather than produce an unbounded answer;
/// `fs/walk` with `maxEntries` is the bounded alternative.
pub const FS_READ_DIRECTORY_MAX_ENTRIES: usize = 50_000;

/// The deepest `fs/walk` may be asked to go: 64 levels. A larger `maxDepth` is invalid input.
/// Together with the two limits below it bounds the time and memory one walk may cost, whatever
/// the client asks.
pub const FS_WALK_MAX_DEPTH: usize = 64;

/// The most directories `fs/walk` may be asked to visit (the root included): 10,000. A larger
/// `maxDirectories`, or zero, is invalid input.
pub const FS_WALK_MAX_DIRECTORIES: usize = 10_000;

/// The most entries `fs/walk` may be asked to return: 50,000, the same bound as
/// [`FS_READ_DIRECTORY_MAX_ENTRIES`]. A larger `maxEntries`, or zero, is invalid input.
pub const FS_WALK_MAX_ENTRIES: usize = 50_000;

/// The result of every fs method that answers with nothing but success: `{}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsEmptyResponse {}

/// `fs/readFile` params. Regular files only: a directory, FIFO or device is refused
/// (``path `<p>` is not a file``) without being opened for reading, so a FIFO cannot block it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsReadFileParams {
    pub path: PathUri,
    /// Absent means true. With false, a symlink in any component of the path is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    /// A `FileSystemSandboxContext`; `null` is the same as absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
    /// Tether extension (`binaryBlocks`): with true, the answer is a binary message with the
    /// file's bytes attached ([`crate::attached`]) and an empty result
    /// ([`FsReadFileAttachedResponse`]): no base64 to make, check and undo, a quarter fewer
    /// bytes to carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach_data: Option<bool>,
}

impl FsReadFileParams {
    pub fn follows_symlinks(&self) -> bool {
        self.follow_symlinks.unwrap_or(true)
    }

    pub fn attaches_data(&self) -> bool {
        self.attach_data.unwrap_or(false)
    }
}

/// The result of an `fs/readFile {attachData: true}` (Tether extension, `binaryBlocks`): the
/// file's bytes are attached to the message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsReadFileAttachedResponse {}

/// `fs/readFile` result: the whole file, at most [`FS_READ_FILE_MAX_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsReadFileResponse {
    pub data_base64: ByteChunk,
}

impl FsReadFileResponse {
    /// The whole response to request `id`, as serde would write it, with the base64 written
    /// straight into the text: a file of hundreds of MB is not encoded into one string and
    /// then copied again while serde checks it for characters to escape (base64 has none).
    pub fn to_response_text(&self, id: &crate::RequestId) -> String {
        let id = serde_json::to_string(id).expect("an id serialises");
        let mut text =
            String::with_capacity(40 + id.len() + self.data_base64.len().div_ceil(3) * 4);
        text.push_str(r#"{"id":"#);
        text.push_str(&id);
        text.push_str(r#","result":{"dataBase64":""#);
        crate::bytes::encode_base64_into(&self.data_base64.0, &mut text);
        text.push_str("\"}}");
        text
    }

    /// The start of the response to request `id` as a binary message (`binaryBlocks`): its
    /// JSON and the NUL, for a server to read the file's bytes straight onto the end.
    pub fn attached_message_head(id: &crate::RequestId) -> Vec<u8> {
        let result = FsReadFileAttachedResponse {};
        crate::attached::join(&crate::envelope::encode_response(id, &result), &[])
    }
}

/// `fs/writeFile` params: create or truncate, then write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsWriteFileParams {
    pub path: PathUri,
    /// Kept as text rather than a [`ByteChunk`]: the reference refuses bad base64 here with
    /// `-32600 fs/writeFile requires valid base64 dataBase64: <decoder error>`, not with the
    /// `-32602` a params decode failure gets. Decode it with [`FsWriteFileParams::decode_data`].
    pub data_base64: String,
    /// Absent means true. With false, a symlink in any component of the path is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

impl FsWriteFileParams {
    /// The bytes to write; the error text is the base64 decoder's own
    /// (`Invalid symbol 33, offset 0.`), which the reference puts after its prefix.
    pub fn decode_data(&self) -> Result<ByteChunk, base64::DecodeError> {
        ByteChunk::from_base64(&self.data_base64)
    }

    pub fn follows_symlinks(&self) -> bool {
        self.follow_symlinks.unwrap_or(true)
    }
}

pub type FsWriteFileResponse = FsEmptyResponse;

/// `fs/createDirectory` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsCreateDirectoryParams {
    pub path: PathUri,
    /// Absent or `null` means true (`mkdir -p`: missing parents are created and an existing
    /// directory is success). With false, a missing parent is not found and an existing path is
    /// `File exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

impl FsCreateDirectoryParams {
    pub fn is_recursive(&self) -> bool {
        self.recursive.unwrap_or(true)
    }

    pub fn follows_symlinks(&self) -> bool {
        self.follow_symlinks.unwrap_or(true)
    }
}

pub type FsCreateDirectoryResponse = FsEmptyResponse;

/// `fs/getMetadata` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsGetMetadataParams {
    pub path: PathUri,
    /// Absent means true. With false, a symlink as the last component is refused with
    /// `-32600 path contains a symbolic link`, one before it with `-32603 Not a directory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
    /// Tether extension (`fsMetadata`): with true, the answer carries the permission bits
    /// ([`FsGetMetadataResponse::mode`]). Absent means false, and the answer has exactly the
    /// reference's members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_mode: Option<bool>,
}

impl FsGetMetadataParams {
    pub fn follows_symlinks(&self) -> bool {
        self.follow_symlinks.unwrap_or(true)
    }

    pub fn includes_mode(&self) -> bool {
        self.include_mode.unwrap_or(false)
    }
}

/// `fs/getMetadata` result. Type and size are the symlink target's, but `isSymlink` says the
/// path itself is a link (a dangling link is not found).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsGetMetadataResponse {
    pub is_directory: bool,
    pub is_file: bool,
    pub is_symlink: bool,
    pub size: u64,
    /// Unix milliseconds. Following links (the default) the reference reports 0; with
    /// `followSymlinks: false`, the birth time where the filesystem keeps one, else 0.
    pub created_at_ms: i64,
    /// Unix milliseconds. Following links, times before 1970 are 0; with `followSymlinks:
    /// false` they are negative.
    pub modified_at_ms: i64,
    /// Tether extension (`fsMetadata`): the permission bits (`st_mode & 0o7777`, the target's
    /// when following links), only when the request said `includeMode: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

/// `fs/canonicalize` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsCanonicalizeParams {
    pub path: PathUri,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

/// `fs/canonicalize` result: the `realpath` of the path, every symlink resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsCanonicalizeResponse {
    pub path: PathUri,
}

/// `fs/readDirectory` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsReadDirectoryParams {
    pub path: PathUri,
    /// Tether extension (`fsMetadata`): with true, each entry carries its own
    /// [`FsEntryMetadata`] and dangling links are listed too — what a copy of a tree needs,
    /// without a `fs/getMetadata` per entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_metadata: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

impl FsReadDirectoryParams {
    pub fn includes_metadata(&self) -> bool {
        self.include_metadata.unwrap_or(false)
    }
}

/// One entry of a directory. Symlinks are followed for the type; dangling ones are left out of
/// the listing (unless `includeMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsReadDirectoryEntry {
    /// The bare name, not a path.
    pub file_name: String,
    /// For a dangling link (listed only with `includeMetadata`): false.
    pub is_directory: bool,
    /// For a dangling link (listed only with `includeMetadata`): false.
    pub is_file: bool,
    /// Tether extension (`fsMetadata`): only when the request said `includeMetadata: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<FsEntryMetadata>,
}

/// An entry's own metadata (`lstat`: a link's, not its target's), in a `fs/readDirectory`
/// answer that asked for it (Tether extension, `fsMetadata`). A link's target is not here
/// (`fs/readLink` has it): targets run to 4 KiB, and the listing must stay one bounded frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsEntryMetadata {
    pub is_symlink: bool,
    /// Bytes (a link: the length of its target).
    pub size: u64,
    /// Unix milliseconds, negative before 1970.
    pub modified_at_ms: i64,
    /// The permission bits, `st_mode & 0o7777`.
    pub mode: u32,
}

/// `fs/readDirectory` result, in the order the OS lists the directory (not sorted), at most
/// [`FS_READ_DIRECTORY_MAX_ENTRIES`] entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsReadDirectoryResponse {
    pub entries: Vec<FsReadDirectoryEntry>,
}

/// `fs/walk` params: a bounded breadth-first listing of everything under `path`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsWalkParams {
    pub path: PathUri,
    pub options: FsWalkOptions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

/// The bounds of one walk. The four limits are required: a walk always says how much it may
/// cost. Values past [`FS_WALK_MAX_DEPTH`], [`FS_WALK_MAX_DIRECTORIES`] or
/// [`FS_WALK_MAX_ENTRIES`], and a zero `maxDirectories` or `maxEntries`, are invalid input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsWalkOptions {
    /// Depth 0 is the root's direct children.
    pub max_depth: usize,
    /// Directories that may be read, the root included.
    pub max_directories: usize,
    /// Entries that may be examined, counting those left out (links to files, FIFOs); one
    /// more sets `truncated`.
    pub max_entries: usize,
    /// List a symlink to a directory as a directory and descend into it. Symlinks to files are
    /// always left out.
    pub follow_directory_symlinks: bool,
    /// Skip descending into directories whose names start with `.`. Absent from the reference's
    /// observed requests; absent means false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune_hidden_directories: Option<bool>,
}

/// `fs/walk` result. `errors` and `truncated` are always on the wire, even when empty and false.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsWalkResponse {
    pub entries: Vec<FsWalkEntry>,
    /// Descendants that could not be read; they do not fail the walk.
    pub errors: Vec<FsWalkError>,
    /// A limit was reached before the walk finished.
    pub truncated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsWalkEntry {
    pub path: PathUri,
    pub kind: FsWalkEntryKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FsWalkEntryKind {
    Directory,
    File,
}

/// A descendant the walk could not read, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsWalkError {
    pub path: PathUri,
    pub message: String,
}

/// `fs/remove` params. A symlink is removed itself, never its target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsRemoveParams {
    pub path: PathUri,
    /// Absent means true: a non-empty directory is removed with its contents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
    /// Absent means true: a missing path is success, as `rm -f`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

impl FsRemoveParams {
    pub fn is_recursive(&self) -> bool {
        self.recursive.unwrap_or(true)
    }

    pub fn is_forced(&self) -> bool {
        self.force.unwrap_or(true)
    }

    pub fn follows_symlinks(&self) -> bool {
        self.follow_symlinks.unwrap_or(true)
    }
}

pub type FsRemoveResponse = FsEmptyResponse;

/// `fs/copy` params. Symlinks are copied as symlinks; sources other than regular files,
/// directories and symlinks are invalid input, as is copying a directory into itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsCopyParams {
    pub source_path: PathUri,
    pub destination_path: PathUri,
    /// Required, unlike `fs/remove`'s: a directory source without it is refused with
    /// `fs/copy requires recursive: true when sourcePath is a directory`.
    pub recursive: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

pub type FsCopyResponse = FsEmptyResponse;

/// `fs/rename` params (Tether extension, `fsMetadata`): `rename(2)`. An existing destination
/// file is replaced atomically; a directory moves with everything in it. Both paths must be on
/// one filesystem (`Invalid cross-device link` otherwise). The answer is `{}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsRenameParams {
    pub source_path: PathUri,
    pub destination_path: PathUri,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

/// `fs/setMetadata` params (Tether extension, `fsMetadata`): what a copy keeps of its source.
/// Each member that is absent is left as it is; the answer is `{}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsSetMetadataParams {
    pub path: PathUri,
    /// Permission bits, `chmod`'s (`& 0o7777`; other bits are ignored). A symbolic link has no
    /// mode of its own: asking for one on a link is invalid input, never a change to its target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// The modification time in Unix milliseconds (negative before 1970). Set on the path
    /// itself, a link's own time for a link; the access time is left as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

/// `fs/putFile` params (Tether extension, `fsMetadata`): the whole file, written under a
/// temporary name in the destination's directory, given its mode and modification time, and
/// renamed onto `path` — so a reader sees the old file or the new one, never a part, and an
/// interrupted call leaves nothing under `path`. What `fs/writeFile` then `fs/setMetadata`
/// then `fs/rename` do, in one call (a copy of many small files is mostly round trips
/// otherwise). The answer is `{}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsPutFileParams {
    pub path: PathUri,
    /// At most [`FS_BLOCK_MAX_BYTES`]: larger files go in blocks (`fs/open`, `fs/writeBlock`).
    pub data_base64: ByteChunk,
    /// Permission bits (`& 0o7777`); absent: `0o666` less the server's umask, as a new file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// Unix milliseconds (negative before 1970); absent: the time of the write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

pub type FsPutFileResponse = FsEmptyResponse;

/// `fs/createSymlink` params (Tether extension, `fsMetadata`): a symbolic link at `path`
/// holding `target`, as given (relative targets are relative to the link's directory, and
/// need not exist). An existing `path` is `File exists`. The answer is `{}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsCreateSymlinkParams {
    pub path: PathUri,
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

/// `fs/readLink` params (Tether extension, `fsMetadata`). A path that is not a link is the
/// OS's `Invalid argument`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsReadLinkParams {
    pub path: PathUri,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

/// `fs/readLink` result: the link's target, unresolved, as `readlink(2)` gives it. A target
/// that is not UTF-8 cannot be said in JSON text and is refused as invalid input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsReadLinkResponse {
    pub target: String,
}

/// `fs/open` params: open a regular file and name the handle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsOpenParams {
    /// Chosen by the client, at most [`FS_HANDLE_ID_MAX_BYTES`], unique among the connection's
    /// open handles (a duplicate is refused with ``file handle `<id>` already exists``).
    pub handle_id: String,
    pub path: PathUri,
    /// Absent means [`FsOpenMode::Read`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<FsOpenMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

impl FsOpenParams {
    pub fn mode(&self) -> FsOpenMode {
        self.mode.unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsOpenMode {
    /// For `fs/readBlock`.
    #[default]
    Read,
    /// Create or truncate, for `fs/writeBlock` (the `fileWriteStreaming` capability).
    Replace,
}

/// `fs/open` result: the handle id, echoed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsOpenResponse {
    pub handle_id: String,
}

/// `fs/readBlock` params: a positional read, so reads need no shared cursor and a retried read
/// returns the same bytes. Reading goes on from the opened file even if its path is replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsReadBlockParams {
    pub handle_id: String,
    pub offset: u64,
    /// `1..=`[`FS_BLOCK_MAX_BYTES`].
    pub len: usize,
    /// Tether extension (`binaryBlocks`): with true, the answer is a binary message with the
    /// bytes attached ([`crate::attached`]) and a result of `{eof}` alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach_chunk: Option<bool>,
    /// Not in the reference's observed requests: the sandbox that matters was given to
    /// `fs/open`. Accepted so every fs method takes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

impl FsReadBlockParams {
    pub fn attaches_chunk(&self) -> bool {
        self.attach_chunk.unwrap_or(false)
    }
}

/// The result of an `fs/readBlock {attachChunk: true}` (Tether extension, `binaryBlocks`):
/// the block's bytes are attached to the message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsReadBlockAttachedResponse {
    pub eof: bool,
}

/// `fs/readBlock` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsReadBlockResponse {
    pub chunk: ByteChunk,
    /// Fewer than `len` bytes were read. Reading exactly up to the end of the file is not `eof`;
    /// the next read, past the end, is `{"chunk": "", "eof": true}`.
    pub eof: bool,
}

impl FsReadBlockResponse {
    /// The whole response to request `id`, as serde would write it, with the base64 written
    /// straight into the text (as [`FsReadFileResponse::to_response_text`]): a streamed read
    /// of a large file is mostly these blocks, and serde's escape check of each 1.4 MB string
    /// was an eighth of its time.
    pub fn to_response_text(&self, id: &crate::RequestId) -> String {
        let id = serde_json::to_string(id).expect("an id serialises");
        let mut text = String::with_capacity(48 + id.len() + self.chunk.len().div_ceil(3) * 4);
        text.push_str(r#"{"id":"#);
        text.push_str(&id);
        text.push_str(r#","result":{"chunk":""#);
        crate::bytes::encode_base64_into(&self.chunk.0, &mut text);
        text.push_str(if self.eof { r#"","eof":true}}"# } else { r#"","eof":false}}"# });
        text
    }

    /// The response to request `id` as a binary message, the bytes attached after the JSON
    /// (`binaryBlocks`).
    pub fn to_attached_message(&self, id: &crate::RequestId) -> Vec<u8> {
        let result = FsReadBlockAttachedResponse { eof: self.eof };
        crate::attached::join(&crate::envelope::encode_response(id, &result), &self.chunk.0)
    }
}

/// `fs/writeBlock` params: a positional write to a handle opened with `mode: "replace"`. A
/// write past the end fills the gap with zeros.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsWriteBlockParams {
    pub handle_id: String,
    /// `offset + chunk length` must not exceed `i64::MAX` (`file write range exceeds the signed
    /// 64-bit file offset limit`), the largest offset the OS takes.
    pub offset: u64,
    /// `1..=`[`FS_BLOCK_MAX_BYTES`] bytes.
    pub chunk: ByteChunk,
    /// As on [`FsReadBlockParams`]: accepted, the sandbox that matters was given to `fs/open`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

impl FsWriteBlockParams {
    /// The whole request `id` for `method` (`fs/writeBlock`), as serde would write it, with the
    /// base64 written straight into the text: a streamed upload is mostly these blocks, and
    /// serde's escape check of each 1.4 MB string was a fifth of the client's time.
    pub fn to_request_text(&self, id: &crate::RequestId, method: &str) -> String {
        fn json<T: Serialize + ?Sized>(value: &T) -> String {
            serde_json::to_string(value).expect("ids, names and sandboxes serialise")
        }
        let base64_len = self.chunk.len().div_ceil(3) * 4;
        let mut text = String::with_capacity(96 + self.handle_id.len() + base64_len);
        text.push_str(r#"{"id":"#);
        text.push_str(&json(id));
        text.push_str(r#","method":"#);
        text.push_str(&json(method));
        text.push_str(r#","params":{"handleId":"#);
        text.push_str(&json(&self.handle_id));
        text.push_str(r#","offset":"#);
        text.push_str(&self.offset.to_string());
        text.push_str(r#","chunk":""#);
        crate::bytes::encode_base64_into(&self.chunk.0, &mut text);
        text.push('"');
        if let Some(sandbox) = &self.sandbox {
            text.push_str(r#","sandbox":"#);
            text.push_str(&json(sandbox));
        }
        text.push_str("}}");
        text
    }
}

/// `fs/writeBlock` params in a binary message (Tether extension, `binaryBlocks`): those of
/// [`FsWriteBlockParams`] but the chunk, which is the bytes attached to the message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsWriteBlockAttachedParams {
    pub handle_id: String,
    pub offset: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

impl FsWriteBlockAttachedParams {
    /// The params whole, with `chunk` the attached bytes.
    pub fn with_chunk(self, chunk: bytes::Bytes) -> FsWriteBlockParams {
        FsWriteBlockParams {
            handle_id: self.handle_id,
            offset: self.offset,
            chunk: ByteChunk(chunk),
            sandbox: self.sandbox,
        }
    }
}

impl FsWriteBlockParams {
    /// The request `id` for `method` (`fs/writeBlock`) as a binary message, the chunk's bytes
    /// attached after the JSON (`binaryBlocks`).
    pub fn to_attached_message(&self, id: &crate::RequestId, method: &str) -> Vec<u8> {
        let params = FsWriteBlockAttachedParams {
            handle_id: self.handle_id.clone(),
            offset: self.offset,
            sandbox: self.sandbox.clone(),
        };
        crate::attached::join(&crate::envelope::encode_request(id, method, &params), &self.chunk.0)
    }
}

pub type FsWriteBlockResponse = FsEmptyResponse;

/// `fs/close` params. Idempotent: closing an unknown or already closed handle is success, so a
/// client may close in the background without tracking whether it already did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsCloseParams {
    pub handle_id: String,
    /// As on [`FsReadBlockParams`]: accepted and not needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxContext>,
}

pub type FsCloseResponse = FsEmptyResponse;

/// `fs/watchMissing` params: tell me when any of these missing paths may have appeared, or
/// when `present` went away.
///
/// Codex sends it after looking for optional files (skills, say) that are not there yet, so it
/// can look again when they might be. One watch per connection: a new one replaces the last.
/// The server answers `fs/missingChanged {watchId}` once, when a path along any `missing` path
/// is created or `present` is removed or renamed, and the watch ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsWatchMissingParams {
    /// The caller's name for this watch, echoed in `fs/missingChanged`.
    pub watch_id: u64,
    /// Paths that do not exist yet.
    pub missing: Vec<PathUri>,
    /// A path that exists now (the project's root marker, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub present: Option<PathUri>,
}

/// `fs/watchMissing` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsWatchMissingResponse {
    /// Whether the watch was set. `false` when a `missing` path already exists, `present` does
    /// not, or the watch id was used before on this connection: the caller should look again
    /// now rather than wait.
    pub watching: bool,
}

/// `fs/missingChanged` notification: something a watch was waiting for may have happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsMissingChangedNotification {
    pub watch_id: u64,
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::fixtures::{Ordered, check_exchange, round_trip, round_trip_in_order};

    #[test]
    fn read_file_matches_the_reference() {
        let (params, result) =
            check_exchange::<FsReadFileParams, FsReadFileResponse>(fixture!("fs_read_file"));
        for id in [crate::RequestId::Integer(7), crate::RequestId::String("r\"1".into())] {
            for data in [&b""[..], b"a", b"ab", b"abc", &[0xff; 1000]] {
                let response = FsReadFileResponse { data_base64: ByteChunk::from(data) };
                let by_serde = crate::envelope::encode_response(&id, &response);
                assert_eq!(response.to_response_text(&id), by_serde);
            }
        }
        assert!(params.follows_symlinks());
        assert_eq!(params.sandbox, None);
        assert_eq!(&result.data_base64.0[..], b"hello fs\n");
    }

    #[test]
    fn a_write_block_request_is_written_as_serde_writes_it() {
        let sandbox: SandboxContext = serde_json::from_value(
            json!({"permissions": {"type": "disabled"}, "windowsSandboxLevel": "disabled"}),
        )
        .unwrap();
        for id in [crate::RequestId::Integer(7), crate::RequestId::String("r\"1".into())] {
            for data in [&b"a"[..], b"ab", b"abc", &[0xff; 1000]] {
                for sandbox in [None, Some(sandbox.clone())] {
                    let params = FsWriteBlockParams {
                        handle_id: "write-\"9\"".into(),
                        offset: u64::MAX,
                        chunk: ByteChunk::from(data),
                        sandbox,
                    };
                    let by_serde = crate::envelope::encode_request(&id, "fs/writeBlock", &params);
                    assert_eq!(params.to_request_text(&id, "fs/writeBlock"), by_serde);
                }
            }
        }
    }

    #[test]
    fn attached_blocks_carry_their_bytes_after_the_json() {
        let id = crate::RequestId::Integer(3);
        let params = FsWriteBlockParams {
            handle_id: "w".into(),
            offset: 9,
            chunk: ByteChunk::from(&b"\0raw"[..]),
            sandbox: None,
        };
        let message = params.to_attached_message(&id, "fs/writeBlock");
        let (json, bytes) = crate::attached::split(&message).unwrap();
        let request: Value = serde_json::from_slice(json).unwrap();
        assert_eq!(
            request,
            json!({"id": 3, "method": "fs/writeBlock", "params": {"handleId": "w", "offset": 9}})
        );
        let header: FsWriteBlockAttachedParams =
            serde_json::from_value(request["params"].clone()).unwrap();
        assert_eq!(header.with_chunk(bytes::Bytes::copy_from_slice(bytes)), params);

        let response = FsReadBlockResponse { chunk: ByteChunk::from(&b"abc"[..]), eof: true };
        let message = response.to_attached_message(&id);
        let (json, bytes) = crate::attached::split(&message).unwrap();
        let answer: Value = serde_json::from_slice(json).unwrap();
        assert_eq!((answer, bytes), (json!({"id": 3, "result": {"eof": true}}), &b"abc"[..]));
        let read = round_trip::<FsReadBlockParams>(
            &json!({"handleId": "r", "offset": 0, "len": 5, "attachChunk": true}),
        );
        assert!(read.attaches_chunk());
    }

    #[test]
    fn a_read_block_response_is_written_as_serde_writes_it() {
        for id in [crate::RequestId::Integer(7), crate::RequestId::String("r\"1".into())] {
            for data in [&b""[..], b"a", b"ab", b"abc", &[0xff; 1000]] {
                for eof in [false, true] {
                    let response = FsReadBlockResponse { chunk: ByteChunk::from(data), eof };
                    let by_serde = crate::envelope::encode_response(&id, &response);
                    assert_eq!(response.to_response_text(&id), by_serde);
                }
            }
        }
    }

    #[test]
    fn missing_file_request_decodes() {
        let fixture: Value = serde_json::from_str(fixture!("fs_read_file_missing")).unwrap();
        round_trip::<FsReadFileParams>(&fixture["request"]["params"]);
        assert_eq!(fixture["response"]["error"]["code"], crate::error::NOT_FOUND);
    }

    #[test]
    fn write_file_matches_the_reference() {
        let (params, _) =
            check_exchange::<FsWriteFileParams, FsWriteFileResponse>(fixture!("fs_write_file"));
        assert_eq!(&params.decode_data().unwrap().0[..], b"hello fs\n");
    }

    #[test]
    fn write_file_bad_base64_decodes_and_fails_later_with_the_decoders_message() {
        let params: FsWriteFileParams =
            serde_json::from_value(json!({"path": "file:///tmp/x", "dataBase64": "!!"})).unwrap();
        assert_eq!(params.decode_data().unwrap_err().to_string(), "Invalid symbol 33, offset 0.");
    }

    #[test]
    fn create_directory_matches_the_reference() {
        let (params, _) = check_exchange::<FsCreateDirectoryParams, FsCreateDirectoryResponse>(
            fixture!("fs_create_directory"),
        );
        assert_eq!(params.recursive, Some(true));
    }

    #[test]
    fn create_directory_and_remove_default_to_recursive_and_forced() {
        let params: FsCreateDirectoryParams =
            serde_json::from_value(json!({"path": "file:///tmp/a/b", "recursive": null})).unwrap();
        assert!(params.is_recursive());
        let params: FsRemoveParams =
            serde_json::from_value(json!({"path": "file:///tmp/a", "sandbox": null})).unwrap();
        assert!(params.is_recursive() && params.is_forced() && params.follows_symlinks());
        assert_eq!(serde_json::to_value(&params).unwrap(), json!({"path": "file:///tmp/a"}));
    }

    #[test]
    fn get_metadata_matches_the_reference() {
        let (_, file) = check_exchange::<FsGetMetadataParams, FsGetMetadataResponse>(fixture!(
            "fs_get_metadata"
        ));
        assert!(file.is_file && !file.is_directory && file.size == 9);
        let (_, dir) = check_exchange::<FsGetMetadataParams, FsGetMetadataResponse>(fixture!(
            "fs_get_metadata_directory"
        ));
        assert!(dir.is_directory && !dir.is_file);
    }

    #[test]
    fn no_follow_symlinks_is_sent_only_when_given() {
        let params = FsGetMetadataParams {
            path: PathUri::parse("file:///tmp/l").unwrap(),
            follow_symlinks: Some(false),
            sandbox: None,
            include_mode: None,
        };
        assert_eq!(
            serde_json::to_value(&params).unwrap(),
            json!({"path": "file:///tmp/l", "followSymlinks": false})
        );
    }

    #[test]
    fn the_mode_is_asked_for_and_answered_only_as_an_extension() {
        let params = round_trip::<FsGetMetadataParams>(
            &json!({"path": "file:///tmp/f", "includeMode": true}),
        );
        assert!(params.includes_mode());
        let params = round_trip::<FsGetMetadataParams>(&json!({"path": "file:///tmp/f"}));
        assert!(!params.includes_mode());
        let answer = json!({"isDirectory": false, "isFile": true, "isSymlink": false, "size": 1,
            "createdAtMs": 0, "modifiedAtMs": 5});
        assert_eq!(round_trip::<FsGetMetadataResponse>(&answer).mode, None);
        let mut with_mode = answer.clone();
        with_mode["mode"] = json!(0o755);
        assert_eq!(round_trip::<FsGetMetadataResponse>(&with_mode).mode, Some(0o755));
    }

    #[test]
    fn fs_metadata_extension_params_round_trip_without_absent_members() {
        let rename = round_trip::<FsRenameParams>(
            &json!({"sourcePath": "file:///tmp/a", "destinationPath": "file:///tmp/b"}),
        );
        assert_eq!(rename.destination_path.as_str(), "file:///tmp/b");
        let set = round_trip::<FsSetMetadataParams>(
            &json!({"path": "file:///tmp/a", "mode": 0o644, "modifiedAtMs": -1_234}),
        );
        assert_eq!((set.mode, set.modified_at_ms), (Some(0o644), Some(-1_234)));
        let nothing = round_trip::<FsSetMetadataParams>(&json!({"path": "file:///tmp/a"}));
        assert_eq!((nothing.mode, nothing.modified_at_ms, nothing.sandbox), (None, None, None));
        let link = round_trip::<FsCreateSymlinkParams>(
            &json!({"path": "file:///tmp/l", "target": "../a b"}),
        );
        assert_eq!(link.target, "../a b");
        round_trip::<FsReadLinkParams>(&json!({"path": "file:///tmp/l"}));
        let read = round_trip::<FsReadLinkResponse>(&json!({"target": "a"}));
        assert_eq!(read.target, "a");
        let err = serde_json::from_value::<FsCreateSymlinkParams>(json!({"path": "file:///l"}))
            .unwrap_err();
        assert_eq!(err.to_string(), "missing field `target`");
        let put = round_trip::<FsPutFileParams>(&json!({
            "path": "file:///tmp/p", "dataBase64": "aGk=", "mode": 0o600, "modifiedAtMs": 5
        }));
        assert_eq!(
            (&put.data_base64.0[..], put.mode, put.modified_at_ms),
            (&b"hi"[..], Some(0o600), Some(5))
        );
        let bare =
            round_trip::<FsPutFileParams>(&json!({"path": "file:///tmp/p", "dataBase64": ""}));
        assert_eq!((bare.mode, bare.modified_at_ms), (None, None));
        let listing = round_trip::<FsReadDirectoryParams>(
            &json!({"path": "file:///tmp", "includeMetadata": true}),
        );
        assert!(listing.includes_metadata());
        let plain = round_trip::<FsReadDirectoryParams>(&json!({"path": "file:///tmp"}));
        assert!(!plain.includes_metadata());
        let entry = round_trip::<FsReadDirectoryEntry>(&json!({
            "fileName": "l", "isDirectory": false, "isFile": false,
            "metadata": {"isSymlink": true, "size": 3, "modifiedAtMs": -1, "mode": 0o777}
        }));
        assert!(entry.metadata.unwrap().is_symlink);
    }

    #[test]
    fn canonicalize_matches_the_reference() {
        let text = fixture!("fs_canonicalize");
        let fixture: Value = serde_json::from_str(text).unwrap();
        // The request is only decoded: URL parsing removes the `sub/..` the request carries
        // (lexically, before any symlink could be resolved).
        let params: FsCanonicalizeParams =
            serde_json::from_value(fixture["request"]["params"].clone()).unwrap();
        assert_eq!(params.path.as_str(), "file:///tmp/tether-fs-nao_uwi_/a.txt");
        round_trip_in_order::<FsCanonicalizeResponse>(
            &fixture["response"]["result"],
            Ordered::parse(text).get("response").get("result"),
        );
    }

    #[test]
    fn read_directory_matches_the_reference() {
        let (_, result) = check_exchange::<FsReadDirectoryParams, FsReadDirectoryResponse>(
            fixture!("fs_read_directory"),
        );
        assert_eq!(result.entries.len(), 2);
        assert_eq!(result.entries[0].file_name, "sub");
    }

    #[test]
    fn walk_matches_the_reference() {
        let (params, result) = check_exchange::<FsWalkParams, FsWalkResponse>(fixture!("fs_walk"));
        assert_eq!(params.options.max_depth, 2);
        assert_eq!(params.options.prune_hidden_directories, None);
        assert_eq!(result.entries.len(), 4);
        assert_eq!(result.entries[1].kind, FsWalkEntryKind::Directory);
        assert!(result.errors.is_empty() && !result.truncated);
    }

    #[test]
    fn walk_errors_and_truncation_are_always_serialised() {
        let empty = serde_json::to_value(FsWalkResponse::default()).unwrap();
        assert_eq!(empty, json!({"entries": [], "errors": [], "truncated": false}));
        round_trip::<FsWalkResponse>(&json!({
            "entries": [{"path": "file:///r/a", "kind": "file"}],
            "errors": [{"path": "file:///r/locked", "message": "Permission denied (os error 13)"}],
            "truncated": true
        }));
    }

    #[test]
    fn walk_options_are_required() {
        let err = serde_json::from_value::<FsWalkParams>(json!({
            "path": "file:///r",
            "options": {"maxDepth": 1, "maxDirectories": 1, "maxEntries": 1}
        }))
        .unwrap_err();
        assert_eq!(err.to_string(), "missing field `followDirectorySymlinks`");
    }

    #[test]
    fn remove_matches_the_reference() {
        let (params, _) = check_exchange::<FsRemoveParams, FsRemoveResponse>(fixture!("fs_remove"));
        assert!(!params.is_recursive() && !params.is_forced());
    }

    #[test]
    fn copy_matches_the_reference() {
        let (params, _) = check_exchange::<FsCopyParams, FsCopyResponse>(fixture!("fs_copy"));
        assert!(!params.recursive);
        let err = serde_json::from_value::<FsCopyParams>(json!({
            "sourcePath": "file:///a", "destinationPath": "file:///b"
        }))
        .unwrap_err();
        assert_eq!(err.to_string(), "missing field `recursive`");
    }

    #[test]
    fn open_matches_the_reference() {
        let (params, result) = check_exchange::<FsOpenParams, FsOpenResponse>(fixture!("fs_open"));
        assert_eq!(params.mode(), FsOpenMode::Read);
        assert_eq!(result.handle_id, "h1");
        let (params, _) =
            check_exchange::<FsOpenParams, FsOpenResponse>(fixture!("fs_open_replace"));
        assert_eq!(params.mode(), FsOpenMode::Replace);
    }

    #[test]
    fn open_mode_defaults_to_read_and_refuses_other_words() {
        let params: FsOpenParams =
            serde_json::from_value(json!({"handleId": "", "path": "file:///a"})).unwrap();
        assert_eq!(params.mode(), FsOpenMode::Read);
        let err = serde_json::from_value::<FsOpenParams>(
            json!({"handleId": "h", "path": "file:///a", "mode": "write"}),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "unknown variant `write`, expected `read` or `replace`");
    }

    #[test]
    fn read_block_matches_the_reference() {
        let (params, result) =
            check_exchange::<FsReadBlockParams, FsReadBlockResponse>(fixture!("fs_read_block"));
        assert_eq!((params.offset, params.len), (0, 5));
        assert_eq!(&result.chunk.0[..], b"hello");
        assert!(!result.eof);
        round_trip::<FsReadBlockResponse>(&json!({"chunk": "", "eof": true}));
    }

    #[test]
    fn write_block_matches_the_reference() {
        let (params, _) =
            check_exchange::<FsWriteBlockParams, FsWriteBlockResponse>(fixture!("fs_write_block"));
        assert_eq!(&params.chunk.0[..], b"block data");
    }

    #[test]
    fn close_matches_the_reference() {
        check_exchange::<FsCloseParams, FsCloseResponse>(fixture!("fs_close"));
    }

    #[test]
    fn empty_results_are_empty_objects_and_tolerate_members() {
        assert_eq!(serde_json::to_string(&FsEmptyResponse {}).unwrap(), "{}");
        serde_json::from_value::<FsEmptyResponse>(json!({"extra": 1})).unwrap();
    }

    #[test]
    fn sandbox_is_typed_and_null_is_none() {
        let sandbox =
            json!({"permissions": {"type": "disabled"}, "windowsSandboxLevel": "disabled"});
        let params = round_trip::<FsReadDirectoryParams>(
            &json!({"path": "file:///tmp", "sandbox": sandbox.clone()}),
        );
        assert_eq!(
            params.sandbox.map(|s| s.permissions),
            Some(crate::sandbox::Permissions::Disabled)
        );
        let refused = serde_json::from_value::<FsWriteFileParams>(
            json!({"path": "file:///tmp/a", "dataBase64": "", "sandbox": {}}),
        )
        .unwrap_err();
        assert_eq!(refused.to_string(), "missing field `permissions`");
    }

    #[test]
    fn native_paths_are_refused_while_decoding() {
        let err =
            serde_json::from_value::<FsReadFileParams>(json!({"path": "/tmp/x"})).unwrap_err();
        assert_eq!(err.to_string(), "invalid URI: relative URL without a base");
    }

    #[test]
    fn limits_are_the_references() {
        assert_eq!(FS_READ_FILE_MAX_BYTES, 536_870_912);
        assert_eq!(FS_BLOCK_MAX_BYTES, 1_048_576);
    }

    #[test]
    fn a_refusal_by_the_os_is_said_in_data() {
        let data = serde_json::to_value(FsFailure { kind: FsFailureKind::PermissionDenied });
        assert_eq!(data.unwrap(), serde_json::json!({"kind": "permissionDenied"}));
    }
}
