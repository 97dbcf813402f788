//! The executor's filesystem over a session: [`ExecServerClient`] is a [`FileSystem`].
//!
//! Each method is one `fs/*` call. Calls that only read ride through a recovery (resent on the
//! resumed session if the connection dropped under them); calls that change the filesystem are
//! not resent blindly — a `fs/remove` or `fs/copy` that reached the server before the drop
//! would run twice, after whatever happened in between — so a drop fails them with a message
//! that says they may or may not have taken effect. Errors come back as the engine's: the
//! server's message, word for word, with the kind its code stands for.
//!
//! A streamed read (`read_file_stream`) opens a handle with `fs/open`, reads it with
//! `fs/readBlock` at increasing offsets and ends with `fs/close`. Handles belong to one
//! connection, so the stream does too: it fails when that connection drops, rather than
//! asking the next connection for a handle it never had. A streamed write
//! (`write_file_stream`) is the same with `fs/open {mode: "replace"}` and `fs/writeBlock`
//! (`crate::remote_write_stream`), for servers that advertise `fileWriteStreaming`.
//!
//! `rename`, `set_metadata`, `create_symlink`, `read_link`, `put_file`, `get_metadata
//! {includeMode}` and `read_directory {includeMetadata}` are Tether's `fsMetadata` extension: sent only to a server that advertises it, and
//! otherwise refused at once, before anything is sent, as
//! [`FsErrorKind::Unsupported`](tether_engine::fs::FsErrorKind::Unsupported).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream;
use serde::Serialize;
use tether_engine::fs::{FileReadStream, FileSystem, FileWriteStream, FsError};
use tether_protocol::fs::{
    FS_BLOCK_MAX_BYTES, FsCanonicalizeParams, FsCanonicalizeResponse, FsCloseParams, FsCopyParams,
    FsCreateDirectoryParams, FsCreateSymlinkParams, FsEmptyResponse, FsGetMetadataParams,
    FsGetMetadataResponse, FsOpenMode, FsOpenParams, FsOpenResponse, FsPutFileParams,
    FsReadBlockAttachedResponse, FsReadBlockParams, FsReadBlockResponse, FsReadDirectoryParams,
    FsReadDirectoryResponse, FsReadFileAttachedResponse, FsReadFileParams, FsReadFileResponse,
    FsReadLinkParams, FsReadLinkResponse, FsRemoveParams, FsRenameParams, FsSetMetadataParams,
    FsWalkParams, FsWalkResponse, FsWriteFileParams,
};
use tether_protocol::method::Method;
use tether_protocol::sandbox::SandboxContext;
use tether_protocol::{ByteChunk, PathUri};
use tokio::task::JoinHandle;

use crate::client::ExecServerClient;
use crate::connection::Connection;
use crate::error::ClientError;
use crate::fs_errors::{StreamOf, fs_error, stream_error};
use crate::remote_write_stream::RemoteBlockWriter;
use crate::session::Retry;

#[async_trait]
impl FileSystem for ExecServerClient {
    /// With a server that serves `binaryBlocks`, the file comes as raw bytes beside the answer
    /// (`attachData`) instead of base64 inside it, unless the caller chose otherwise.
    async fn read_file(&self, mut params: FsReadFileParams) -> Result<FsReadFileResponse, FsError> {
        if params.attach_data.is_none() && self.tether_extensions().binary_blocks {
            params.attach_data = Some(true);
        }
        if !params.attaches_data() {
            return self.fs_call(Method::FsReadFile, &params, Retry::Safe).await;
        }
        let method = Method::FsReadFile.name();
        let (FsReadFileAttachedResponse {}, data) =
            self.session.call_for_attached(method, &params, Retry::Safe).await.map_err(fs_error)?;
        Ok(FsReadFileResponse { data_base64: ByteChunk(data) })
    }

    async fn write_file(&self, params: FsWriteFileParams) -> Result<(), FsError> {
        let FsEmptyResponse {} = self.fs_call(Method::FsWriteFile, &params, Retry::Never).await?;
        Ok(())
    }

    async fn create_directory(&self, params: FsCreateDirectoryParams) -> Result<(), FsError> {
        let FsEmptyResponse {} =
            self.fs_call(Method::FsCreateDirectory, &params, Retry::Never).await?;
        Ok(())
    }

    /// `includeMode: true` needs the `fsMetadata` extension: the reference would ignore it
    /// and answer without a mode.
    async fn get_metadata(
        &self,
        params: FsGetMetadataParams,
    ) -> Result<FsGetMetadataResponse, FsError> {
        if params.includes_mode() {
            self.require_fs_metadata("fs/getMetadata {includeMode: true}")?;
        }
        self.fs_call(Method::FsGetMetadata, &params, Retry::Safe).await
    }

    async fn canonicalize(
        &self,
        params: FsCanonicalizeParams,
    ) -> Result<FsCanonicalizeResponse, FsError> {
        self.fs_call(Method::FsCanonicalize, &params, Retry::Safe).await
    }

    /// `includeMetadata: true` needs the `fsMetadata` extension: the reference would ignore it
    /// and answer without metadata.
    async fn read_directory(
        &self,
        params: FsReadDirectoryParams,
    ) -> Result<FsReadDirectoryResponse, FsError> {
        if params.includes_metadata() {
            self.require_fs_metadata("fs/readDirectory {includeMetadata: true}")?;
        }
        self.fs_call(Method::FsReadDirectory, &params, Retry::Safe).await
    }

    async fn walk(&self, params: FsWalkParams) -> Result<FsWalkResponse, FsError> {
        self.fs_call(Method::FsWalk, &params, Retry::Safe).await
    }

    async fn remove(&self, params: FsRemoveParams) -> Result<(), FsError> {
        let FsEmptyResponse {} = self.fs_call(Method::FsRemove, &params, Retry::Never).await?;
        Ok(())
    }

    async fn copy(&self, params: FsCopyParams) -> Result<(), FsError> {
        let FsEmptyResponse {} = self.fs_call(Method::FsCopy, &params, Retry::Never).await?;
        Ok(())
    }

    async fn read_file_stream(
        &self,
        path: PathUri,
        sandbox: Option<SandboxContext>,
    ) -> Result<FileReadStream, FsError> {
        let connection = self.connected().await.map_err(fs_error)?;
        let handle_id = next_handle_id("read");
        let open = FsOpenParams { handle_id: handle_id.clone(), path, mode: None, sandbox };
        let opened = connection.call(Method::FsOpen.name(), &open).await;
        let FsOpenResponse { .. } = opened.map_err(|e| stream_error(e, StreamOf::Read))?;
        let binary = self.tether_extensions().binary_blocks;
        let blocks = RemoteBlocks::new(connection, handle_id, binary);
        Ok(FileReadStream::new(stream::unfold(blocks, |mut blocks| async move {
            blocks.next().await.map(|block| (block, blocks))
        })))
    }

    /// Not resent after a drop: a rename that took effect would fail the second time.
    async fn rename(&self, params: FsRenameParams) -> Result<(), FsError> {
        self.require_fs_metadata(Method::FsRename.name())?;
        let FsEmptyResponse {} = self.fs_call(Method::FsRename, &params, Retry::Never).await?;
        Ok(())
    }

    /// Resent after a drop: setting the same mode and time twice is setting them once.
    async fn set_metadata(&self, params: FsSetMetadataParams) -> Result<(), FsError> {
        self.require_fs_metadata(Method::FsSetMetadata.name())?;
        let FsEmptyResponse {} = self.fs_call(Method::FsSetMetadata, &params, Retry::Safe).await?;
        Ok(())
    }

    /// Not resent after a drop: a link made the first time would be `File exists` the second.
    async fn create_symlink(&self, params: FsCreateSymlinkParams) -> Result<(), FsError> {
        self.require_fs_metadata(Method::FsCreateSymlink.name())?;
        let FsEmptyResponse {} =
            self.fs_call(Method::FsCreateSymlink, &params, Retry::Never).await?;
        Ok(())
    }

    /// Resent after a drop: putting the same bytes, mode and time in place twice leaves what
    /// putting them once does.
    async fn put_file(&self, params: FsPutFileParams) -> Result<(), FsError> {
        self.require_fs_metadata(Method::FsPutFile.name())?;
        let FsEmptyResponse {} = self.fs_call(Method::FsPutFile, &params, Retry::Safe).await?;
        Ok(())
    }

    async fn read_link(&self, params: FsReadLinkParams) -> Result<FsReadLinkResponse, FsError> {
        self.require_fs_metadata(Method::FsReadLink.name())?;
        self.fs_call(Method::FsReadLink, &params, Retry::Safe).await
    }

    /// Refused before anything is sent when the server does not advertise
    /// `fileWriteStreaming`: it would not know `mode: "replace"` or `fs/writeBlock`.
    async fn write_file_stream(
        &self,
        path: PathUri,
        sandbox: Option<SandboxContext>,
    ) -> Result<FileWriteStream, FsError> {
        let streams_writes = self
            .environment_info()
            .and_then(|info| info.capabilities.as_ref())
            .is_some_and(|capabilities| capabilities.file_write_streaming);
        if !streams_writes {
            return Err(FsError::unsupported(
                "the exec-server does not serve streamed file writes (it does not advertise \
                 `fileWriteStreaming`); write the file whole with fs/writeFile instead",
            ));
        }
        let connection = self.connected().await.map_err(fs_error)?;
        let handle_id = next_handle_id("write");
        let mode = Some(FsOpenMode::Replace);
        let open = FsOpenParams { handle_id: handle_id.clone(), path, mode, sandbox };
        let opened = connection.call(Method::FsOpen.name(), &open).await;
        let FsOpenResponse { .. } = opened.map_err(|e| stream_error(e, StreamOf::Write))?;
        let binary = self.tether_extensions().binary_blocks;
        Ok(FileWriteStream::new(RemoteBlockWriter::new(connection, handle_id, binary)))
    }
}

impl ExecServerClient {
    async fn fs_call<P: Serialize + Sync, R: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        params: &P,
        retry: Retry,
    ) -> Result<R, FsError> {
        self.call(method.name(), params, retry).await.map_err(fs_error)
    }

    /// Refuses `what` unless the server advertises Tether's `fsMetadata` extension.
    fn require_fs_metadata(&self, what: &str) -> Result<(), FsError> {
        if self.tether_extensions().fs_metadata {
            return Ok(());
        }
        Err(FsError::unsupported(format!(
            "the exec-server does not serve `{what}`: it is Tether's `fsMetadata` extension, \
             which this server does not advertise"
        )))
    }
}

/// A handle id no other stream of this process uses: ids are per connection, and every stream
/// of every client of this process drawing from one counter keeps them apart. `write-<n>`
/// stays within the 32-byte limit for any `u64`.
fn next_handle_id(kind: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{kind}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// How many `fs/readBlock` calls a streamed read keeps in flight: 4 (4 MiB of blocks). With
/// one, every block waits a whole round trip and the server's read before the next is asked
/// for, so the link's latency sets the pace; a few keep the link, the server's disk and this
/// side's decoding busy at once. More would only add to what the client holds (each block also
/// as its 1.4 MB of base64) and to what is read past the end of a short file.
pub const READ_BLOCKS_AHEAD: usize = 4;

/// The blocks of one open handle, on the connection that opened it.
struct RemoteBlocks {
    connection: Arc<Connection>,
    handle_id: String,
    /// Where the next block to ask for starts.
    ask_at: u64,
    /// The reads asked for and not yet handed over, in file order, each with its offset.
    ahead: VecDeque<(u64, JoinHandle<Result<FsReadBlockResponse, ClientError>>)>,
    /// Until the end of the file, an error, or the close: dropping the reader while open
    /// closes the handle in the background.
    open: bool,
    /// Blocks come as raw bytes beside their JSON (`binaryBlocks`), not as base64 in it.
    binary: bool,
}

impl RemoteBlocks {
    fn new(connection: Arc<Connection>, handle_id: String, binary: bool) -> Self {
        let ahead = VecDeque::new();
        Self { connection, handle_id, ask_at: 0, ahead, open: true, binary }
    }

    /// Asks for blocks until [`READ_BLOCKS_AHEAD`] are on their way.
    fn read_ahead(&mut self) {
        while self.ahead.len() < READ_BLOCKS_AHEAD {
            let params = FsReadBlockParams {
                handle_id: self.handle_id.clone(),
                offset: self.ask_at,
                len: FS_BLOCK_MAX_BYTES,
                attach_chunk: self.binary.then_some(true),
                sandbox: None,
            };
            let connection = self.connection.clone();
            let method = Method::FsReadBlock.name();
            let read = tokio::spawn(async move {
                if !params.attaches_chunk() {
                    return connection.call::<_, FsReadBlockResponse>(method, &params).await;
                }
                let read = connection.call_for_attached(method, &params).await;
                let (FsReadBlockAttachedResponse { eof }, bytes) = read?;
                Ok(FsReadBlockResponse { chunk: ByteChunk(bytes), eof })
            });
            self.ahead.push_back((self.ask_at, read));
            self.ask_at += FS_BLOCK_MAX_BYTES as u64;
        }
    }

    async fn next(&mut self) -> Option<Result<Bytes, FsError>> {
        if !self.open {
            return None;
        }
        self.read_ahead();
        let (offset, read) = self.ahead.pop_front().expect("reads were just asked for");
        let read = match read.await {
            Ok(read) => read,
            Err(failed) => {
                Err(ClientError::Protocol(format!("a streamed file read failed: {failed}")))
            }
        };
        let block = match read {
            Ok(block) => block,
            Err(error) => {
                self.close_in_background();
                return Some(Err(stream_error(error, StreamOf::Read)));
            }
        };
        let len = block.chunk.len();
        if len > FS_BLOCK_MAX_BYTES || (len == 0 && !block.eof) {
            self.close_in_background();
            return Some(Err(FsError::other(format!(
                "exec-server protocol error: fs/readBlock answered {len} bytes (eof: {}) for a {FS_BLOCK_MAX_BYTES}-byte block",
                block.eof
            ))));
        }
        if block.eof {
            // Closed before the last block is handed over, so a caller that read a stream to
            // its end has its handle back (a connection may hold only so many). The reads
            // asked for past the end are answered first (the server answers in order) and
            // their answers dropped.
            self.open = false;
            self.ahead.clear();
            let close = FsCloseParams { handle_id: self.handle_id.clone(), sandbox: None };
            let _ =
                self.connection.call::<_, FsEmptyResponse>(Method::FsClose.name(), &close).await;
        } else if len < FS_BLOCK_MAX_BYTES {
            // A short block that is not the end: the reads asked for after it start in the
            // wrong place. Asked again from where this one ended.
            self.ahead.clear();
            self.ask_at = offset + len as u64;
        }
        (len > 0).then(|| Ok(block.chunk.into_bytes()))
    }

    fn close_in_background(&mut self) {
        if !std::mem::replace(&mut self.open, false) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let connection = self.connection.clone();
        let close = FsCloseParams { handle_id: self.handle_id.clone(), sandbox: None };
        runtime.spawn(async move {
            let _ = connection.call::<_, FsEmptyResponse>(Method::FsClose.name(), &close).await;
        });
    }
}

impl Drop for RemoteBlocks {
    fn drop(&mut self) {
        self.close_in_background();
    }
}
