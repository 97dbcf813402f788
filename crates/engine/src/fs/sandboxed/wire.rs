//! The helper's answer and how it travels: JSON on the helper's stdout, which is one end of a
//! Unix socket, so that an opened file can travel with it as a descriptor (`SCM_RIGHTS`).

use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};
use tether_protocol::capabilities::{CapabilityRootDiscovery, DiscoverV2Response};
use tether_protocol::fs::{FsGetMetadataResponse, FsReadDirectoryEntry, FsWalkResponse};
use tokio::io::Interest;
use tokio::net::UnixStream;

use super::super::directory::Listing;
use super::super::{FsError, FsErrorKind};
use super::op::{Outcome, path_bytes};

/// How much of the answer one `recvmsg` takes.
const RECEIVE_CHUNK_BYTES: usize = 64 * 1024;

/// The descriptors one message may carry. The helper sends one; room for a few more means a
/// surplus is received and closed rather than truncated by the kernel.
const MAX_RECEIVED_FDS: usize = 4;

/// One answer. `Opened` says the descriptor that came with it is the file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "camelCase")]
pub(super) enum Answer {
    Done,
    Metadata {
        metadata: FsGetMetadataResponse,
    },
    Path {
        #[serde(with = "path_bytes")]
        path: PathBuf,
    },
    Listing {
        entries: Vec<FsReadDirectoryEntry>,
        total: usize,
    },
    Walk {
        walk: FsWalkResponse,
    },
    Opened,
    Root {
        root: Box<CapabilityRootDiscovery>,
    },
    Inventory {
        inventory: Box<DiscoverV2Response>,
    },
    /// The error as the server would have reported it: its kind and the OS's text.
    Failed {
        kind: FsErrorKind,
        message: String,
    },
}

impl Answer {
    /// The answer for `result`, and the file to send with it.
    pub(super) fn of(result: io::Result<Outcome>) -> (Answer, Option<File>) {
        let answer = match result {
            Ok(Outcome::Done) => Answer::Done,
            Ok(Outcome::Metadata(metadata)) => Answer::Metadata { metadata },
            Ok(Outcome::Path(path)) => Answer::Path { path },
            Ok(Outcome::Listing(Listing { entries, total })) => Answer::Listing { entries, total },
            Ok(Outcome::Walk(walk)) => Answer::Walk { walk },
            Ok(Outcome::File(file)) => return (Answer::Opened, Some(file)),
            Ok(Outcome::Root(root)) => Answer::Root { root },
            Ok(Outcome::Inventory(inventory)) => Answer::Inventory { inventory },
            Err(error) => Answer::failed(error.into()),
        };
        (answer, None)
    }

    pub(super) fn failed(error: FsError) -> Answer {
        Answer::Failed { kind: error.kind, message: error.message }
    }

    /// What the answer means to the server, given the descriptor that came with it.
    pub(super) fn into_outcome(self, file: Option<OwnedFd>) -> Result<Outcome, FsError> {
        Ok(match self {
            Answer::Done => Outcome::Done,
            Answer::Metadata { metadata } => Outcome::Metadata(metadata),
            Answer::Path { path } => Outcome::Path(path),
            Answer::Listing { entries, total } => Outcome::Listing(Listing { entries, total }),
            Answer::Walk { walk } => Outcome::Walk(walk),
            Answer::Root { root } => Outcome::Root(root),
            Answer::Inventory { inventory } => Outcome::Inventory(inventory),
            Answer::Opened => match file {
                Some(fd) => Outcome::File(File::from(fd)),
                None => return Err(FsError::other("the fs sandbox helper sent no file")),
            },
            Answer::Failed { kind, message } => return Err(FsError::new(kind, message)),
        })
    }
}

/// Writes `bytes` to `socket`, with `file` attached to the first of them.
pub(super) fn send(socket: impl AsFd, bytes: &[u8], file: Option<&File>) -> io::Result<()> {
    let mut sent = 0;
    if let Some(file) = file {
        let fds = [file.as_fd()];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&fds));
        sent = rustix::net::sendmsg(
            &socket,
            &[IoSlice::new(bytes)],
            &mut control,
            SendFlags::empty(),
        )?;
    }
    while sent < bytes.len() {
        match rustix::io::write(&socket, &bytes[sent..]) {
            Ok(written) => sent += written,
            Err(rustix::io::Errno::INTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}

/// Reads everything until the helper closes its end: the answer's bytes (at most `max`, the
/// operation's [`HelperOp::MAX_ANSWER_BYTES`](super::op::HelperOp::MAX_ANSWER_BYTES)) and the
/// first descriptor that came with them. Descriptors arrive
/// close-on-exec, so no child started meanwhile inherits them.
pub(super) async fn receive(
    socket: &UnixStream,
    max: usize,
) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
    let mut bytes = Vec::new();
    let mut file = None;
    let mut chunk = vec![0u8; RECEIVE_CHUNK_BYTES];
    loop {
        socket.readable().await?;
        let received = socket.try_io(Interest::READABLE, || {
            let mut space =
                [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_RECEIVED_FDS))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let message = rustix::net::recvmsg(
                socket,
                &mut [IoSliceMut::new(&mut chunk)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )?;
            let fds: Vec<OwnedFd> = control
                .drain()
                .flat_map(|message| match message {
                    RecvAncillaryMessage::ScmRights(fds) => fds.collect(),
                    _ => Vec::new(),
                })
                .collect();
            Ok((message.bytes, fds))
        });
        let (count, fds) = match received {
            Ok(received) => received,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            Err(error) => return Err(error),
        };
        if file.is_none() {
            file = fds.into_iter().next();
        }
        if count == 0 {
            return Ok((bytes, file));
        }
        if bytes.len() + count > max {
            return Err(io::Error::other(format!(
                "the fs sandbox helper answered more than {max} bytes"
            )));
        }
        bytes.extend_from_slice(&chunk[..count]);
    }
}
