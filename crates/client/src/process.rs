//! [`RemoteProcess`]: a handle to a process on the executor that survives reconnects, and
//! [`ProcessControl`], what acts on the process (stdin, signals, terminate), which a caller
//! can hand to another task than the one that reads the updates.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tether_engine::{ProcessEvent, ProcessUpdate};
use tether_protocol::process::{
    CloseStdinParams, ProcessSignal, ReadParams, ReadResponse, ResizeParams, SignalParams,
    SignalResponse, TerminateParams, TerminateResponse, WriteParams, WriteResponse, WriteStatus,
};
use tether_protocol::{ByteChunk, ProcessId};
use tokio::sync::mpsc;

use crate::catch_up::refill;
use crate::error::ClientError;
use crate::registration::{Finished, Registration};
use crate::session::{Retry, Session};

/// A process started through an [`ExecServerClient`](crate::ExecServerClient). Its updates arrive in sequence order,
/// across reconnects, ending with `Closed` or a `Failed` that says why. Dropping the handle
/// stops following the process; it does not kill it.
///
/// The handle is full at [`crate::HANDLE_BUFFER_BYTES`] its caller has not taken, and then
/// [`crate::ClientOptions::full_handle_pause`] says what happens (see [`crate::flow`]); the
/// client never holds more than [`crate::HANDLE_MEMORY_BYTES`] for it.
///
/// Its [`ProcessControl`] (through `Deref`, or [`RemoteProcess::control`] for another task)
/// writes, signals and terminates. A caller that waits for such a call's answer in the same
/// task that reads the updates should know that, while the handle is full and pauses the
/// connection, answers wait too (for at most the pause's patience).
pub struct RemoteProcess {
    control: ProcessControl,
    updates: mpsc::UnboundedReceiver<ProcessUpdate>,
    /// The last update (`Closed` or `Failed`) was handed out. The registration keeps its end
    /// of the channel, so the channel alone would never say so.
    ended: bool,
}

impl RemoteProcess {
    pub(crate) fn new(
        session: Arc<Session>,
        registration: Arc<Registration>,
        updates: mpsc::UnboundedReceiver<ProcessUpdate>,
    ) -> Self {
        let write_ids = Arc::new(WriteIds::default());
        Self { control: ProcessControl { session, registration, write_ids }, updates, ended: false }
    }

    /// What acts on the process, for another task: a clone of this handle's.
    pub fn control(&self) -> ProcessControl {
        self.control.clone()
    }

    /// Bytes of updates this handle holds that its caller has not taken yet (each update
    /// counted with a small overhead): at most [`crate::HANDLE_MEMORY_BYTES`].
    pub fn buffered_bytes(&self) -> usize {
        self.registration.queued_bytes()
    }

    /// The next update; `None` once the stream has ended (after `Closed` or `Failed`).
    pub async fn next_update(&mut self) -> Option<ProcessUpdate> {
        if self.ended {
            return None;
        }
        let update = self.updates.recv().await;
        if let Some(update) = &update
            && self.control.registration.taken(update)
        {
            // It had fallen behind, and there is room now: read what it missed.
            let control = &self.control;
            tokio::spawn(refill(control.session.clone(), control.registration.clone()));
        }
        self.ended = matches!(
            update,
            None | Some(
                ProcessUpdate::Failed(_) | ProcessUpdate::Event(ProcessEvent::Closed { .. })
            )
        );
        update
    }
}

impl std::ops::Deref for RemoteProcess {
    type Target = ProcessControl;

    fn deref(&self) -> &ProcessControl {
        &self.control
    }
}

/// Acts on one remote process: stdin, signals, size, terminate, reads. Cheap to clone, and
/// usable from any task while the [`RemoteProcess`] handle reads the updates.
#[derive(Clone)]
pub struct ProcessControl {
    session: Arc<Session>,
    registration: Arc<Registration>,
    /// Shared by every clone, so no two writes through this handle share an id.
    write_ids: Arc<WriteIds>,
}

/// The `writeId`s of one handle's stdin writes: `HANDLE-N`, `N` counting from 1, each kept
/// by its write across its retries, so the server applies the write once however often it is
/// sent. `HANDLE` is drawn afresh for every handle: a server remembers the ids a process was
/// written with and takes a known one as a resend, so a later handle on the same process
/// (after an attach, or in a program that restarted and resumed its session) must not count
/// from 1 again, or its writes would be dropped as the earlier handle's.
#[derive(Debug)]
struct WriteIds {
    handle: u64,
    /// How many ids were handed out.
    issued: AtomicU64,
}

impl Default for WriteIds {
    fn default() -> Self {
        // Seeded from the operating system's randomness once per thread, then stepped: unlike
        // any other handle's of this program, and with 64 bits, of any other program's.
        use std::hash::{BuildHasher as _, Hasher as _};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos()),
        );
        Self { handle: hasher.finish(), issued: AtomicU64::new(0) }
    }
}

impl WriteIds {
    fn next(&self) -> String {
        let n = self.issued.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{:016x}-{n}", self.handle)
    }
}

impl ProcessControl {
    pub fn process_id(&self) -> &ProcessId {
        &self.registration.process_id
    }

    /// Writes to the process's stdin. The write keeps one `writeId` across reconnects, so the
    /// server applies it exactly once however often it is resent.
    pub async fn write(&self, bytes: impl Into<Bytes>) -> Result<WriteStatus, ClientError> {
        let params = WriteParams {
            process_id: self.registration.process_id.clone(),
            chunk: ByteChunk::new(bytes),
            write_id: self.write_ids.next(),
        };
        let response: WriteResponse =
            self.session.call("process/write", &params, Retry::Safe).await?;
        Ok(response.status)
    }

    /// Sends SIGINT. Not resent after a drop (a second interrupt is not the same as one).
    pub async fn interrupt(&self) -> Result<(), ClientError> {
        self.signal(ProcessSignal::Interrupt).await
    }

    /// Sends `signal` to the process group. Signals other than `Interrupt` are a Tether
    /// extension: one the server does not list in `tetherExtensions.signals` fails here,
    /// unsent, with [`ClientError::Unsupported`]. Not resent after a drop (a signal delivered
    /// twice is not the same as once).
    pub async fn signal(&self, signal: ProcessSignal) -> Result<(), ClientError> {
        if signal != ProcessSignal::Interrupt
            && !self.session.tether_extensions().signals.contains(&signal)
        {
            return Err(ClientError::Unsupported(format!(
                "this exec-server does not deliver the `{signal}` signal (only `interrupt`); use terminate() to end the process"
            )));
        }
        let params = SignalParams { process_id: self.registration.process_id.clone(), signal };
        let _: SignalResponse = self.session.call("process/signal", &params, Retry::Never).await?;
        Ok(())
    }

    /// Sets a `tty` process's terminal size (`process/resize`, a Tether extension: check the
    /// server's `tetherExtensions.ptySize` first; the reference answers `-32601`). Safe to
    /// resend: the last size wins.
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<(), ClientError> {
        let params = ResizeParams { process_id: self.registration.process_id.clone(), cols, rows };
        let _: serde_json::Value =
            self.session.call("process/resize", &params, Retry::Safe).await?;
        Ok(())
    }

    /// Ends a pipe process's input after what was written (`process/closeStdin`, a Tether
    /// extension: check `tetherExtensions.closeStdin`). Safe to resend.
    pub async fn close_stdin(&self) -> Result<(), ClientError> {
        let params = CloseStdinParams { process_id: self.registration.process_id.clone() };
        let _: serde_json::Value =
            self.session.call("process/closeStdin", &params, Retry::Safe).await?;
        Ok(())
    }

    /// Kills the process group; returns whether it was running.
    pub async fn terminate(&self) -> Result<bool, ClientError> {
        let params = TerminateParams { process_id: self.registration.process_id.clone() };
        let response: TerminateResponse =
            self.session.call("process/terminate", &params, Retry::Safe).await?;
        Ok(response.running)
    }

    /// Reads retained output from the server (a re-sync, or for a caller that polls). Once the
    /// handle has failed, answers without asking, with the failure in `failure`.
    pub async fn read(
        &self,
        after_seq: u64,
        max_bytes: Option<usize>,
        wait_ms: Option<u64>,
    ) -> Result<ReadResponse, ClientError> {
        if let Some(Finished::Failed(failure)) = self.registration.finished() {
            return Ok(ReadResponse {
                chunks: Vec::new(),
                next_seq: self.registration.last_published().saturating_add(1),
                exited: true,
                exit_code: None,
                closed: true,
                failure: Some(failure.message),
                sandbox_denied: false,
                oldest_retained_seq: None,
            });
        }
        let params = ReadParams {
            process_id: self.registration.process_id.clone(),
            after_seq: Some(after_seq),
            max_bytes,
            wait_ms,
        };
        self.session.call("process/read", &params, Retry::Safe).await
    }
}

impl Drop for RemoteProcess {
    fn drop(&mut self) {
        self.control.registration.detach_handle();
        self.control.session.unregister(&self.control.registration);
    }
}
