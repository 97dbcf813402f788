//! `--hoarders N`: one client starts N processes that each print as much output as a process
//! may retain (8 MiB) and then sleep, and leaves its session detached for a day — a client
//! pinning the server's memory with retained output. Without a server-wide bound that is N ×
//! 8 MiB held for a day; with one, what the server holds stays within
//! `--max-retained-output-bytes` however large N is, and the rest is counted as shed.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;
use tether_engine::process::DEFAULT_RETAINED_OUTPUT_BYTES;
use tether_testkit::RpcClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long the hoarders' output may take to reach the server in full: 400 processes' 3.2 GB
/// through pipes take seconds; a minute allows for a loaded machine.
const HOARD_DEADLINE: Duration = Duration::from_secs(60);

/// What the hoard left the server holding once all of it had been printed.
pub struct Hoard {
    pub processes: usize,
    pub bytes_each: usize,
    /// Output held in memory and shed for the server-wide budget, from `/metrics`.
    pub held: u64,
    pub shed: u64,
}

/// Starts the hoarders through `url`, detaches, and waits until the server has read all they
/// print (held plus shed reaches it).
pub async fn run(url: &str, processes: usize) -> anyhow::Result<Hoard> {
    let mut client = RpcClient::connect(url).await?;
    client.initialize_detachable(86_400).await?;
    let bytes_each = DEFAULT_RETAINED_OUTPUT_BYTES;
    let script = format!("head -c {bytes_each} /dev/zero; exec sleep 3600");
    for n in 0..processes {
        let start = json!({
            "processId": format!("hoard-{n}"),
            "argv": ["/bin/sh", "-c", script],
            "cwd": "file:///tmp",
            "env": {"PATH": "/usr/bin:/bin"},
            "tty": false,
        });
        client.ok("process/start", start).await.context("a hoarder did not start")?;
    }
    client.close().await;

    let address = url.trim_start_matches("ws://").trim_end_matches('/');
    let total = (processes * bytes_each) as u64;
    let deadline = Instant::now() + HOARD_DEADLINE;
    loop {
        let text = scrape(address).await?;
        let held = sample(&text, r#"tether_retained_output_bytes{where="memory"}"#);
        let shed = sample(&text, "tether_retained_output_shed_bytes_total");
        if held + shed >= total {
            return Ok(Hoard { processes, bytes_each, held, shed });
        }
        if Instant::now() > deadline {
            bail!(
                "the hoarders' output did not all reach the server: {held} held, {shed} shed of {total}"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `GET /metrics`, its body.
async fn scrape(address: &str) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (_, body) = response.split_once("\r\n\r\n").context("no HTTP body")?;
    Ok(body.to_owned())
}

/// The sample named exactly `name`, 0 if missing.
fn sample(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
        .map_or(0, |value| value as u64)
}
