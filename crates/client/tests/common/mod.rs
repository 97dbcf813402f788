//! Helpers the client's integration tests share.
#![allow(dead_code)]

use std::time::Duration;

use tether_client::{ProcessFailure, ProcessUpdate, RemoteProcess};
use tether_engine::ProcessEvent;
use tether_protocol::process::ExecOutputStream;

/// Everything a handle publishes until it closes: (stdout, stderr, exit code, sequences), or
/// the handle's failure. Anything else (no update for 60 s, a stream that ends without a
/// close, a close without an exit) fails the test here.
pub async fn drain(
    process: &mut RemoteProcess,
) -> Result<(Vec<u8>, Vec<u8>, i32, Vec<u64>), ProcessFailure> {
    drain_within(process, usize::MAX).await
}

/// As [`drain`], checking after every update that the handle holds at most `bound` bytes.
pub async fn drain_within(
    process: &mut RemoteProcess,
    bound: usize,
) -> Result<(Vec<u8>, Vec<u8>, i32, Vec<u64>), ProcessFailure> {
    let (mut out, mut err, mut code, mut seqs) = (Vec::new(), Vec::new(), None, Vec::new());
    loop {
        let update = tokio::time::timeout(Duration::from_secs(60), process.next_update())
            .await
            .expect("no update within 60 s")
            .expect("stream ended without close");
        let held = process.buffered_bytes();
        assert!(held <= bound, "{held} bytes held, more than {bound}");
        let event = match update {
            ProcessUpdate::Event(event) => event,
            ProcessUpdate::Failed(failure) => return Err(failure),
        };
        seqs.push(event.seq());
        match event {
            ProcessEvent::Output { stream: ExecOutputStream::Stderr, chunk, .. } => {
                err.extend(&chunk)
            }
            ProcessEvent::Output { chunk, .. } => out.extend(&chunk),
            ProcessEvent::Exited { exit_code, .. } => code = Some(exit_code),
            ProcessEvent::Closed { .. } => {
                return Ok((out, err, code.expect("closed before exit"), seqs));
            }
        }
    }
}

pub fn expected_lines(count: usize, prefix: &str) -> Vec<u8> {
    (1..=count).map(|i| format!("{prefix}-{i}\n")).collect::<String>().into_bytes()
}

/// Checks that `out` is exactly what `seq 1 COUNT` prints (without printing megabytes on a
/// mismatch).
pub fn assert_is_seq_output(out: &[u8], count: usize) {
    let expected: String = (1..=count).map(|i| format!("{i}\n")).collect();
    assert!(
        out == expected.as_bytes(),
        "output differs from `seq 1 {count}` ({} of {} bytes)",
        out.len(),
        expected.len()
    );
}

/// Files a test and its commands signal each other with, in a directory of their own: a
/// command waits for the test's (`wait_for`, in shell), the test for a command's
/// ([`Signals::wait`]) — so an outage lasts exactly until the output it is about exists.
pub struct Signals {
    dir: std::path::PathBuf,
}

impl Signals {
    pub fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("tether-signals-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// Shell that waits until the test has raised `name`.
    pub fn wait_for(&self, name: &str) -> String {
        format!("while [ ! -e {} ]; do sleep 0.01; done", self.path(name))
    }

    /// Shell that raises `name` for the test.
    pub fn raise(&self, name: &str) -> String {
        format!("touch {}", self.path(name))
    }

    /// Raises `name` for a command.
    pub fn set(&self, name: &str) {
        std::fs::write(self.path(name), "").unwrap();
    }

    /// Waits until a command has raised `name`.
    pub async fn wait(&self, name: &str) {
        let path = self.dir.join(name);
        let what = format!("a command to raise {name}");
        let within = std::time::Duration::from_secs(60);
        tether_testkit::wait::until(&what, within, || path.exists()).await
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
