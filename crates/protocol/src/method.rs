//! Method names, and the handshake family each belongs to.

/// Every request method a client may send. Names not listed here are answered with
/// `-32601` whatever the handshake state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Initialize,
    ProcessStart,
    ProcessRead,
    ProcessWrite,
    ProcessSignal,
    ProcessTerminate,
    EnvironmentInfo,
    EnvironmentStatus,
    /// Chosen keys of the executor's Codex configuration (`environmentConfigRead`).
    EnvironmentConfigRead,
    /// The skills and plugins installed on the executor (`capabilityDiscoveryV2`).
    CapabilitiesDiscoverV2,
    /// The capability files under roots the client names.
    CapabilityRootsDiscoverV1,
    FsReadFile,
    FsWriteFile,
    FsCreateDirectory,
    FsGetMetadata,
    FsCanonicalize,
    FsReadDirectory,
    FsWalk,
    FsRemove,
    FsCopy,
    FsOpen,
    FsReadBlock,
    FsWriteBlock,
    FsClose,
    FsWatchMissing,
    HttpRequest,
    /// Tether extension: a `tty` process's terminal size.
    ProcessResize,
    /// Tether extension: the end of a pipe process's input.
    ProcessCloseStdin,
    /// Tether extension: the session's processes.
    ProcessList,
    /// Tether extension (`portForward`): a TCP connection to the executor's loopback, served
    /// as a process.
    ProcessConnect,
    /// Tether extension (`fsMetadata`): `rename(2)`.
    FsRename,
    /// Tether extension (`fsMetadata`): a path's mode and modification time.
    FsSetMetadata,
    /// Tether extension (`fsMetadata`): a new symbolic link.
    FsCreateSymlink,
    /// Tether extension (`fsMetadata`): a symbolic link's target.
    FsReadLink,
    /// Tether extension (`fsMetadata`): a small file written whole and renamed into place.
    FsPutFile,
    /// Tether extension (`sessions`): the caller's client's sessions.
    SessionList,
    /// Tether extension (`sessions`): one of them ended.
    SessionEnd,
}

/// The one client→server notification: the handshake's second step.
pub const INITIALIZED: &str = "initialized";
/// Server→client notification: a chunk of process output.
pub const PROCESS_OUTPUT: &str = "process/output";
/// Server→client notification: the process exited (more output may follow).
pub const PROCESS_EXITED: &str = "process/exited";
/// Server→client notification: exit observed and every output stream ended; always last.
pub const PROCESS_CLOSED: &str = "process/closed";
/// Server→client notification: an `fs/watchMissing` watch fired.
pub const FS_MISSING_CHANGED: &str = "fs/missingChanged";
/// Server→client notification: a frame of a streamed `http/request` body.
pub const HTTP_REQUEST_BODY_DELTA: &str = "http/request/bodyDelta";

impl Method {
    pub const ALL: [Method; 37] = [
        Method::Initialize,
        Method::ProcessStart,
        Method::ProcessRead,
        Method::ProcessWrite,
        Method::ProcessSignal,
        Method::ProcessTerminate,
        Method::EnvironmentInfo,
        Method::EnvironmentStatus,
        Method::EnvironmentConfigRead,
        Method::CapabilitiesDiscoverV2,
        Method::CapabilityRootsDiscoverV1,
        Method::FsReadFile,
        Method::FsWriteFile,
        Method::FsCreateDirectory,
        Method::FsGetMetadata,
        Method::FsCanonicalize,
        Method::FsReadDirectory,
        Method::FsWalk,
        Method::FsRemove,
        Method::FsCopy,
        Method::FsOpen,
        Method::FsReadBlock,
        Method::FsWriteBlock,
        Method::FsClose,
        Method::FsWatchMissing,
        Method::HttpRequest,
        Method::ProcessResize,
        Method::ProcessCloseStdin,
        Method::ProcessList,
        Method::ProcessConnect,
        Method::FsRename,
        Method::FsSetMetadata,
        Method::FsCreateSymlink,
        Method::FsReadLink,
        Method::FsPutFile,
        Method::SessionList,
        Method::SessionEnd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Method::Initialize => "initialize",
            Method::ProcessStart => "process/start",
            Method::ProcessRead => "process/read",
            Method::ProcessWrite => "process/write",
            Method::ProcessSignal => "process/signal",
            Method::ProcessTerminate => "process/terminate",
            Method::EnvironmentInfo => "environment/info",
            Method::EnvironmentStatus => "environment/status",
            Method::EnvironmentConfigRead => "environmentConfig/read",
            Method::CapabilitiesDiscoverV2 => "capabilities/discoverV2",
            Method::CapabilityRootsDiscoverV1 => "capabilityRoots/discoverV1",
            Method::FsReadFile => "fs/readFile",
            Method::FsWriteFile => "fs/writeFile",
            Method::FsCreateDirectory => "fs/createDirectory",
            Method::FsGetMetadata => "fs/getMetadata",
            Method::FsCanonicalize => "fs/canonicalize",
            Method::FsReadDirectory => "fs/readDirectory",
            Method::FsWalk => "fs/walk",
            Method::FsRemove => "fs/remove",
            Method::FsCopy => "fs/copy",
            Method::FsOpen => "fs/open",
            Method::FsReadBlock => "fs/readBlock",
            Method::FsWriteBlock => "fs/writeBlock",
            Method::FsClose => "fs/close",
            Method::FsWatchMissing => "fs/watchMissing",
            Method::HttpRequest => "http/request",
            Method::ProcessResize => "process/resize",
            Method::ProcessCloseStdin => "process/closeStdin",
            Method::ProcessList => "process/list",
            Method::ProcessConnect => "process/connect",
            Method::FsRename => "fs/rename",
            Method::FsSetMetadata => "fs/setMetadata",
            Method::FsCreateSymlink => "fs/createSymlink",
            Method::FsReadLink => "fs/readLink",
            Method::FsPutFile => "fs/putFile",
            Method::SessionList => "session/list",
            Method::SessionEnd => "session/end",
        }
    }

    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The word the handshake errors use for this method's family
    /// (`client must call initialize before using <family> methods`).
    pub fn family(self) -> &'static str {
        match self {
            Method::Initialize => "initialize",
            Method::ProcessStart
            | Method::ProcessRead
            | Method::ProcessWrite
            | Method::ProcessSignal
            | Method::ProcessTerminate
            | Method::ProcessResize
            | Method::ProcessCloseStdin
            | Method::ProcessList
            | Method::ProcessConnect => "exec",
            Method::EnvironmentInfo => "environment info",
            Method::EnvironmentStatus => "environment status",
            Method::EnvironmentConfigRead => "environment config",
            Method::CapabilitiesDiscoverV2 | Method::CapabilityRootsDiscoverV1 => {
                "capability discovery"
            }
            Method::HttpRequest => "http",
            Method::SessionList | Method::SessionEnd => "session",
            _ => "filesystem",
        }
    }
}

/// The message a peer gets for a method this server does not serve. Codex recognises the
/// reference's wording, so it is kept.
pub fn not_implemented_message(method: &str) -> String {
    format!("exec-server stub does not implement `{method}` yet")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for method in Method::ALL {
            assert_eq!(Method::from_name(method.name()), Some(method));
        }
        assert_eq!(Method::from_name("process/resizePty"), None);
        assert_eq!(Method::from_name(""), None);
    }
}
