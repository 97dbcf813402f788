//! `fs/*`: thin wrappers over [`tether_engine::fs`], plus the connection's open files and its
//! missing-path watch.

use bytes::Bytes;
use serde_json::Value;
use tether_engine::fs::{
    FileHandles, FileSystem, FsError, FsErrorKind, LocalFileSystem, MissingWatch, ReadGrant,
};
use tether_protocol::envelope::{encode_notification, encode_response};
use tether_protocol::error::{INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, NOT_FOUND};
use tether_protocol::fs::*;
use tether_protocol::method::FS_MISSING_CHANGED;
use tether_protocol::{JsonRpcError, Method, RequestId};

use super::params_of;
use crate::rpc_error::invalid_request;
use crate::transport::{Outbound, Payload};

pub(crate) enum FsCall {
    ReadFile(FsReadFileParams),
    WriteFile(FsWriteFileParams),
    CreateDirectory(FsCreateDirectoryParams),
    GetMetadata(FsGetMetadataParams),
    Canonicalize(FsCanonicalizeParams),
    ReadDirectory(FsReadDirectoryParams),
    Walk(FsWalkParams),
    Remove(FsRemoveParams),
    Copy(FsCopyParams),
    Open(FsOpenParams),
    ReadBlock(FsReadBlockParams),
    WriteBlock(FsWriteBlockParams),
    Close(FsCloseParams),
    WatchMissing(FsWatchMissingParams),
    Rename(FsRenameParams),
    SetMetadata(FsSetMetadataParams),
    CreateSymlink(FsCreateSymlinkParams),
    ReadLink(FsReadLinkParams),
    PutFile(FsPutFileParams),
}

impl FsCall {
    pub(crate) fn decode(method: Method, params: Option<Value>) -> Result<FsCall, JsonRpcError> {
        Ok(match method {
            Method::FsReadFile => FsCall::ReadFile(params_of(params)?),
            Method::FsWriteFile => FsCall::WriteFile(params_of(params)?),
            Method::FsCreateDirectory => FsCall::CreateDirectory(params_of(params)?),
            Method::FsGetMetadata => FsCall::GetMetadata(params_of(params)?),
            Method::FsCanonicalize => FsCall::Canonicalize(params_of(params)?),
            Method::FsReadDirectory => FsCall::ReadDirectory(params_of(params)?),
            Method::FsWalk => FsCall::Walk(params_of(params)?),
            Method::FsRemove => FsCall::Remove(params_of(params)?),
            Method::FsCopy => FsCall::Copy(params_of(params)?),
            Method::FsOpen => FsCall::Open(params_of(params)?),
            Method::FsReadBlock => FsCall::ReadBlock(params_of(params)?),
            Method::FsWriteBlock => FsCall::WriteBlock(params_of(params)?),
            Method::FsClose => FsCall::Close(params_of(params)?),
            Method::FsWatchMissing => FsCall::WatchMissing(params_of(params)?),
            Method::FsRename => FsCall::Rename(params_of(params)?),
            Method::FsSetMetadata => FsCall::SetMetadata(params_of(params)?),
            Method::FsCreateSymlink => FsCall::CreateSymlink(params_of(params)?),
            Method::FsReadLink => FsCall::ReadLink(params_of(params)?),
            Method::FsPutFile => FsCall::PutFile(params_of(params)?),
            other => unreachable!("{} is not a filesystem method", other.name()),
        })
    }
}

/// A request that came with attached bytes (Tether's `binaryBlocks`): only `fs/writeBlock`
/// takes them, as its chunk.
pub(crate) fn decode_attached(
    method: Method,
    params: Option<Value>,
    chunk: Bytes,
) -> Result<FsCall, JsonRpcError> {
    if method != Method::FsWriteBlock {
        return Err(invalid_request(format!(
            "{} takes no attached bytes: only fs/writeBlock does (Tether's binaryBlocks \
             extension); send the request as JSON alone",
            method.name()
        )));
    }
    let header: FsWriteBlockAttachedParams = params_of(params)?;
    Ok(FsCall::WriteBlock(header.with_chunk(chunk)))
}

/// What one connection holds of the filesystem: its open files and its watch.
pub(crate) struct FsConnection {
    pub handles: FileHandles,
    pub watch: MissingWatch,
    pub outbound: Outbound,
    /// Whether answers may carry attached bytes (`binaryBlocks`): WebSocket, not stdio.
    pub carries_binary: bool,
}

impl FsConnection {
    pub(crate) fn new(outbound: Outbound, carries_binary: bool) -> Self {
        let (handles, watch) = (FileHandles::new(), MissingWatch::new());
        Self { handles, watch, outbound, carries_binary }
    }
}

/// A filesystem call's answer, and what it holds until it has been written: a whole-file
/// read's share of the server's read budget (see
/// `tether_engine::fs::LocalFileSystem::read_file_granted`), so that answers waiting to go out
/// count against it too.
pub(crate) struct Reply {
    pub payload: Payload,
    pub hold: Option<ReadGrant>,
}

pub(crate) async fn run(
    id: &RequestId,
    call: FsCall,
    fs: &LocalFileSystem,
    connection: &mut FsConnection,
) -> Result<Reply, JsonRpcError> {
    let empty = FsEmptyResponse {};
    let text = match call {
        FsCall::ReadFile(p) => {
            let attached = p.attaches_data();
            if attached && !connection.carries_binary {
                return Err(invalid_request(
                    "attachData needs binary messages, which stdio does not carry: read the \
                     file without it",
                ));
            }
            if attached {
                // The file read straight onto the end of its answer's JSON.
                let head = FsReadFileResponse::attached_message_head(id);
                let (message, grant) = fs.read_file_onto(p, head).await.map_err(to_rpc)?;
                return Ok(Reply { payload: Payload::Binary(message), hold: Some(grant) });
            }
            let (response, grant) = fs.read_file_granted(p).await.map_err(to_rpc)?;
            let payload = Payload::Text(response.to_response_text(id));
            return Ok(Reply { payload, hold: Some(grant) });
        }
        FsCall::WriteFile(p) => {
            fs.write_file(p).await.map(|()| encode_response(id, &empty)).map_err(to_rpc)?
        }
        FsCall::CreateDirectory(p) => {
            fs.create_directory(p).await.map(|()| encode_response(id, &empty)).map_err(to_rpc)?
        }
        FsCall::GetMetadata(p) => encode_response(id, &fs.get_metadata(p).await.map_err(to_rpc)?),
        FsCall::Canonicalize(p) => encode_response(id, &fs.canonicalize(p).await.map_err(to_rpc)?),
        FsCall::ReadDirectory(p) => {
            encode_response(id, &fs.read_directory(p).await.map_err(to_rpc)?)
        }
        FsCall::Walk(p) => encode_response(id, &fs.walk(p).await.map_err(to_rpc)?),
        FsCall::Remove(p) => {
            let removed = fs.remove(p).await;
            connection.handles.release_placed_stages().await;
            removed.map(|()| encode_response(id, &empty)).map_err(to_rpc)?
        }
        FsCall::Copy(p) => {
            fs.copy(p).await.map(|()| encode_response(id, &empty)).map_err(to_rpc)?
        }
        FsCall::Rename(p) => {
            let renamed = fs.rename(p).await;
            // A stage placed is let go of at once, so it is not held locked past its copy.
            connection.handles.release_placed_stages().await;
            renamed.map(|()| encode_response(id, &empty)).map_err(to_rpc)?
        }
        FsCall::SetMetadata(p) => {
            fs.set_metadata(p).await.map(|()| encode_response(id, &empty)).map_err(to_rpc)?
        }
        FsCall::CreateSymlink(p) => {
            fs.create_symlink(p).await.map(|()| encode_response(id, &empty)).map_err(to_rpc)?
        }
        FsCall::ReadLink(p) => encode_response(id, &fs.read_link(p).await.map_err(to_rpc)?),
        FsCall::PutFile(p) => {
            fs.put_file(p).await.map(|()| encode_response(id, &empty)).map_err(to_rpc)?
        }
        FsCall::Open(p) => encode_response(id, &connection.handles.open(p).await.map_err(to_rpc)?),
        FsCall::ReadBlock(p) if p.attaches_chunk() => {
            if !connection.carries_binary {
                return Err(invalid_request(
                    "attachChunk needs binary messages, which stdio does not carry: read the \
                     block without it",
                ));
            }
            let block = connection.handles.read_block(p).await.map_err(to_rpc)?;
            return Ok(Reply {
                payload: Payload::Binary(block.to_attached_message(id)),
                hold: None,
            });
        }
        FsCall::ReadBlock(p) => {
            connection.handles.read_block(p).await.map_err(to_rpc)?.to_response_text(id)
        }
        FsCall::WriteBlock(p) => connection
            .handles
            .write_block(p)
            .await
            .map(|()| encode_response(id, &empty))
            .map_err(to_rpc)?,
        FsCall::Close(p) => {
            connection.handles.close(p).map_err(to_rpc)?;
            encode_response(id, &empty)
        }
        FsCall::WatchMissing(p) => {
            let outbound = connection.outbound.clone();
            let fired = move |watch_id: u64| {
                let text = encode_notification(
                    FS_MISSING_CHANGED,
                    &FsMissingChangedNotification { watch_id },
                );
                tokio::spawn(async move {
                    let _ = outbound.send(text).await;
                });
            };
            // The look at the paths is a `stat` per component: on the blocking pool.
            let prepared = tokio::task::spawn_blocking(move || MissingWatch::prepare(p))
                .await
                .map_err(|_| JsonRpcError::new(INTERNAL_ERROR, "fs/watchMissing failed"))?
                .map_err(to_rpc)?;
            encode_response(id, &connection.watch.install(prepared, fired))
        }
    };
    Ok(Reply { payload: Payload::Text(text), hold: None })
}

/// Not found is `-32004`; invalid input and permission problems `-32600`; what is not served
/// `-32601`; the rest `-32603`.
pub(crate) fn to_rpc(error: FsError) -> JsonRpcError {
    let code = match error.kind {
        FsErrorKind::NotFound => NOT_FOUND,
        FsErrorKind::InvalidInput | FsErrorKind::PermissionDenied => INVALID_REQUEST,
        FsErrorKind::Unsupported => METHOD_NOT_FOUND,
        FsErrorKind::Other => INTERNAL_ERROR,
    };
    let denied = error.kind == FsErrorKind::PermissionDenied;
    let mut rpc = JsonRpcError::new(code, error.message);
    // What the code does not tell apart from invalid input.
    if denied {
        let kind = tether_protocol::fs::FsFailureKind::PermissionDenied;
        rpc.data = serde_json::to_value(tether_protocol::fs::FsFailure { kind }).ok();
    }
    rpc
}
