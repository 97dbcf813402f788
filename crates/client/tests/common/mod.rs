//! Helpers the client's integration tests share.
#![allow(dead_code)]

use std::time::Duration;

use tether_client::{ProcessUpdate, RemoteProcess};
use tether_engine::ProcessEvent;
use tether_protocol::process::ExecOutputStream;

/// Everything a handle publishes until it closes: (stdout, stderr, exit code, sequences).
pub async fn drain(
    process: &mut RemoteProcess,
) -> Result<(Vec<u8>, Vec<u8>, i32, Vec<u64>), String> {
    let (mut out, mut err, mut code, mut seqs) = (Vec::new(), Vec::new(), None, Vec::new());
    loop {
        let update = tokio::time::timeout(Duration::from_secs(60), process.next_update())
            .await
            .map_err(|_| "no update within 60 s".to_string())?
            .ok_or("stream ended without close")?;
        let event = match update {
            ProcessUpdate::Event(event) => event,
            ProcessUpdate::Failed(message) => return Err(message),
        };
        seqs.push(event.seq());
        match event {
            ProcessEvent::Output { stream: ExecOutputStream::Stderr, chunk, .. } => {
                err.extend(&chunk)
            }
            ProcessEvent::Output { chunk, .. } => out.extend(&chunk),
            ProcessEvent::Exited { exit_code, .. } => code = Some(exit_code),
            ProcessEvent::Closed { .. } => {
                return Ok((out, err, code.ok_or("closed before exit")?, seqs));
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
