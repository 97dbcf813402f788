//! What one small request costs: the calls an agent makes many times a turn (Codex sends a
//! dozen `fs/getMetadata`s before it runs anything), each timed on its own, one after another,
//! on one connection.

use std::time::Instant;

use anyhow::Context;
use tether_client::{ClientOptions, ExecServerClient};
use tether_engine::fs::FileSystem;
use tether_protocol::PathUri;
use tether_protocol::fs::FsGetMetadataParams;

use crate::report::median;

/// Calls of each method per run: enough for a stable median of a sub-millisecond call.
pub const CALLS: usize = 2000;

/// The methods timed, in the order [`small_requests`] returns their figures.
pub const METHODS: [&str; 3] =
    ["fs/getMetadata of a file", "process/read with nothing new", "environment/info"];

/// Median microseconds per call of each of [`METHODS`], `calls` calls each.
pub async fn small_requests(url: &str, calls: usize) -> anyhow::Result<Vec<f64>> {
    let client = ExecServerClient::connect(url, ClientOptions::default()).await?;
    let file = std::env::temp_dir().join(format!("tether-bench-metadata-{}", std::process::id()));
    std::fs::write(&file, b"metadata")?;
    let uri = PathUri::from_path(&file).context("an absolute path")?;
    let metadata: FsGetMetadataParams = serde_json::from_value(serde_json::json!({"path": uri}))?;
    let metadata = time_each(calls, || async {
        let answer = client.get_metadata(metadata.clone()).await?;
        anyhow::ensure!(answer.is_file, "fs/getMetadata: not a file");
        Ok(())
    })
    .await;
    let _ = std::fs::remove_file(&file);
    let metadata = metadata?;

    // A process that prints nothing: every read finds nothing after seq 0.
    let mut sleeper = crate::workloads::params("quiet", &["/bin/sleep", "600"]);
    sleeper.tty = false;
    let process = client.start(sleeper).await?;
    let reads = time_each(calls, || async {
        let read = process.read(0, None, Some(0)).await?;
        anyhow::ensure!(read.chunks.is_empty() && !read.exited, "process/read found output");
        Ok(())
    })
    .await;
    process.terminate().await?;
    let reads = reads?;

    let info = time_each(calls, || async {
        let info = client.request_environment_info().await?;
        anyhow::ensure!(!info.shell.path.is_empty(), "environment/info: no shell");
        Ok(())
    })
    .await?;
    Ok(vec![metadata, reads, info])
}

/// Median microseconds of `calls` sequential calls of `call`.
async fn time_each<F, Fut>(calls: usize, mut call: F) -> anyhow::Result<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        call().await?;
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    Ok(median(&mut samples))
}
