//! The filesystem and HTTP workloads: what an executor serves besides processes. Each returns
//! one figure for one fresh server; the ceilings (`ceilings`) do the same work with no server.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use futures_util::StreamExt;
use tether_client::{ClientOptions, ExecServerClient};
use tether_engine::fs::FileSystem;
use tether_engine::http::HttpClient;
use tether_protocol::PathUri;
use tether_protocol::fs::FsReadFileParams;
use tether_protocol::http::HttpRequestParams;

use crate::servers::Server;

/// The files the filesystem workloads read, made once per run; [`Files::remove`] removes them.
pub struct Files {
    dir: PathBuf,
    pub small: Vec<PathBuf>,
    pub large: PathBuf,
    pub large_bytes: u64,
}

impl Files {
    /// `small` files of 1 KiB and one of `large_bytes`, with contents that do not compress.
    pub fn prepare(small: usize, large_bytes: u64) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("tether-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let block: Vec<u8> =
            (0..1024u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
        let small = (0..small)
            .map(|n| {
                let path = dir.join(format!("small-{n}.bin"));
                std::fs::write(&path, &block).map(|()| path)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let large = dir.join("large.bin");
        let mut contents = Vec::with_capacity(large_bytes as usize);
        while (contents.len() as u64) < large_bytes {
            contents.extend_from_slice(&block);
        }
        contents.truncate(large_bytes as usize);
        std::fs::write(&large, contents)?;
        Ok(Self { dir, small, large, large_bytes })
    }

    /// Removes the files (the benchmark keeps them for the whole run, so they are not
    /// dropped).
    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn read_params(path: &Path) -> anyhow::Result<FsReadFileParams> {
    let uri = PathUri::from_path(path).context("an absolute path")?;
    Ok(serde_json::from_value(serde_json::json!({"path": uri}))?)
}

async fn connect(url: &str) -> anyhow::Result<ExecServerClient> {
    Ok(ExecServerClient::connect(url, ClientOptions::default()).await?)
}

/// Seconds for one `fs/readFile` of each small file, one after another.
pub async fn read_small_files(url: &str, files: &Files) -> anyhow::Result<f64> {
    let client = connect(url).await?;
    let started = Instant::now();
    for path in &files.small {
        let read = client.read_file(read_params(path)?).await?;
        anyhow::ensure!(read.data_base64.0.len() == 1024, "short read of {}", path.display());
    }
    Ok(started.elapsed().as_secs_f64())
}

/// MB/s of one `fs/readFile` of the large file, and the server's resident memory (MB) once
/// the answer is out, on the same connection, still open: what a session that read one big
/// file goes on costing.
pub async fn read_large_file(server: &Server, files: &Files) -> anyhow::Result<Vec<f64>> {
    let client = connect(&server.url).await?;
    let started = Instant::now();
    let read = client.read_file(read_params(&files.large)?).await?;
    let elapsed = started.elapsed().as_secs_f64();
    anyhow::ensure!(read.data_base64.0.len() as u64 == files.large_bytes, "short read");
    drop(read);
    // Answered after the big answer: by then the server has let go of what it wrote.
    client.request_environment_info().await?;
    let kept = server.rss_bytes()? as f64 / 1e6;
    Ok(vec![files.large_bytes as f64 / elapsed / 1e6, kept])
}

/// How an `http/request` workload takes its body.
#[derive(Clone, Copy)]
pub enum HttpBody {
    /// In `http/request/bodyDelta`s, counted as the client receives them.
    Streamed,
    /// Whole, in the answer.
    Buffered,
}

/// MB/s of an `http/request` of `bytes` from `peer_url`, its body taken as `how` says.
pub async fn http(url: &str, peer_url: &str, bytes: u64, how: HttpBody) -> anyhow::Result<f64> {
    let client = connect(url).await?;
    fetch_through(&client, peer_url, bytes, how).await
}

/// Server CPU milliseconds per MB of a gzip body that an `http/request` from `peer_url`
/// decodes to `bytes` and streams to the client: what decoding costs the server beside what
/// it spends sending the decoded bytes on.
pub async fn http_gzip_cpu(server: &Server, peer_url: &str, bytes: u64) -> anyhow::Result<f64> {
    let client = connect(&server.url).await?;
    let before = server.cpu_seconds()?;
    fetch_through(&client, peer_url, bytes, HttpBody::Streamed).await?;
    Ok((server.cpu_seconds()? - before) * 1e3 / (bytes as f64 / 1e6))
}

/// Fetches `bytes` from `peer_url` through any HTTP client, the body taken as `how` says;
/// MB/s.
pub async fn fetch_through(
    http: &dyn HttpClient,
    peer_url: &str,
    bytes: u64,
    how: HttpBody,
) -> anyhow::Result<f64> {
    let streamed = matches!(how, HttpBody::Streamed);
    let params: HttpRequestParams = serde_json::from_value(serde_json::json!({
        "method": "GET",
        "url": peer_url,
        "requestId": "bench",
        "streamResponse": streamed,
    }))?;
    let started = Instant::now();
    let (status, received) = if streamed {
        let (head, mut body) = http.request_streamed(params).await?;
        let mut received = 0u64;
        while let Some(chunk) = body.next().await {
            received += chunk?.len() as u64;
        }
        (head.status, received)
    } else {
        let response = http.request(params).await?;
        (response.status, response.body_base64.0.len() as u64)
    };
    anyhow::ensure!(status == 200, "HTTP {status}");
    anyhow::ensure!(received == bytes, "received {received} of {bytes} bytes");
    Ok(bytes as f64 / started.elapsed().as_secs_f64() / 1e6)
}
