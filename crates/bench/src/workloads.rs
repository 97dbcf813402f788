//! The workloads, each returning one figure for one fresh server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tether_client::{ClientOptions, ExecServerClient, ProcessUpdate, RemoteProcess};
use tether_engine::ProcessEvent;
use tether_protocol::PathUri;
use tether_protocol::process::ExecParams;

use crate::report::median;
use crate::servers::Server;

pub fn params(id: &str, argv: &[&str]) -> ExecParams {
    let mut params = ExecParams::new(
        id,
        argv.iter().map(|s| s.to_string()).collect(),
        PathUri::parse("file:///tmp").expect("a valid URI"),
    );
    params.env = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
    params
}

async fn connect(url: &str) -> anyhow::Result<ExecServerClient> {
    Ok(ExecServerClient::connect(url, ClientOptions::default()).await?)
}

/// Follows a process to its close; returns (output bytes, exit code).
pub async fn finish(process: &mut RemoteProcess) -> anyhow::Result<(u64, i32)> {
    let (mut bytes, mut code) = (0u64, None);
    loop {
        match process.next_update().await.context("stream ended without close")? {
            ProcessUpdate::Event(ProcessEvent::Output { chunk, .. }) => bytes += chunk.len() as u64,
            ProcessUpdate::Event(ProcessEvent::Exited { exit_code, .. }) => code = Some(exit_code),
            ProcessUpdate::Event(ProcessEvent::Closed { .. }) => {
                return Ok((bytes, code.context("closed before exit")?));
            }
            ProcessUpdate::Failed(failure) => bail!("process failed: {failure}"),
        }
    }
}

/// Median milliseconds from `process/start` of `/bin/true` to its close, sequentially.
pub async fn latency(url: &str, runs: usize) -> anyhow::Result<f64> {
    let client = connect(url).await?;
    Ok(median(&mut start_to_close(&client, runs).await?))
}

/// Milliseconds from `process/start` of `/bin/true` to its close, `runs` times one after
/// another on `client`'s session.
pub async fn start_to_close(client: &ExecServerClient, runs: usize) -> anyhow::Result<Vec<f64>> {
    let mut samples = Vec::with_capacity(runs);
    for run in 0..runs {
        let started = Instant::now();
        let mut process = client.start(params(&format!("true-{run}"), &["/bin/true"])).await?;
        let (_, code) = finish(&mut process).await?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(code == 0, "/bin/true exited {code}");
    }
    Ok(samples)
}

/// MB/s of decoded output received by the client from `head -c BYTES /dev/zero`.
pub async fn throughput(url: &str, bytes: u64, tty: bool) -> anyhow::Result<f64> {
    let client = connect(url).await?;
    let mut start = params("head", &["/usr/bin/head", "-c", &bytes.to_string(), "/dev/zero"]);
    start.tty = tty;
    let started = Instant::now();
    let mut process = client.start(start).await?;
    let (received, code) = finish(&mut process).await?;
    let elapsed = started.elapsed().as_secs_f64();
    if code != 0 || received < bytes {
        bail!("received {received} of {bytes} bytes, exit {code}");
    }
    Ok(bytes as f64 / elapsed / 1e6)
}

/// Server CPU seconds per GB of pipe output streamed to the client: what the server itself
/// spends per byte, apart from the client's share of the machine.
pub async fn server_cpu_per_gb(server: &Server, bytes: u64) -> anyhow::Result<f64> {
    let client = connect(&server.url).await?;
    let before = server.cpu_seconds()?;
    let argv = ["/usr/bin/head", "-c", &bytes.to_string(), "/dev/zero"];
    let mut process = client.start(params("head", &argv)).await?;
    let (received, _) = finish(&mut process).await?;
    anyhow::ensure!(received == bytes, "received {received} of {bytes} bytes");
    Ok((server.cpu_seconds()? - before) / (bytes as f64 / 1e9))
}

/// Seconds to start `count` short processes at once in one session and see them all closed.
pub async fn many_processes(url: &str, count: usize) -> anyhow::Result<f64> {
    let client = connect(url).await?;
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(count);
    for n in 0..count {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut process = client.start(params(&format!("p{n}"), &["/bin/true"])).await?;
            let (_, code) = finish(&mut process).await?;
            anyhow::ensure!(code == 0, "exit {code}");
            Ok::<_, anyhow::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Total MB/s of `sessions` sessions streaming `bytes` each at once; every byte is counted.
pub async fn many_sessions(url: &str, sessions: usize, bytes: u64) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(sessions);
    for n in 0..sessions {
        let url = url.to_owned();
        tasks.push(tokio::spawn(async move {
            let client = connect(&url).await?;
            let argv = ["/usr/bin/head", "-c", &bytes.to_string(), "/dev/zero"];
            let mut process = client.start(params(&format!("s{n}"), &argv)).await?;
            let (received, _) = finish(&mut process).await?;
            anyhow::ensure!(received == bytes, "session {n} received {received} of {bytes} bytes");
            Ok::<_, anyhow::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok((sessions as u64 * bytes) as f64 / started.elapsed().as_secs_f64() / 1e6)
}

/// Idle RSS after initialize (MB), or with `sleepers` sleeping processes, the RSS each adds
/// (KB).
pub async fn memory(server: &Server, sleepers: usize) -> anyhow::Result<f64> {
    let client = connect(&server.url).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle = server.rss_bytes()?;
    if sleepers == 0 {
        return Ok(idle as f64 / 1e6);
    }
    let mut handles = Vec::with_capacity(sleepers);
    for n in 0..sleepers {
        handles.push(client.start(params(&format!("sleep{n}"), &["/bin/sleep", "600"])).await?);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let loaded = server.rss_bytes()?;
    for handle in &handles {
        handle.terminate().await?;
    }
    Ok(loaded.saturating_sub(idle) as f64 / sleepers as f64 / 1e3)
}

/// Milliseconds from the network coming back until the session is resumed and every one of
/// `streams` processes streaming output is caught up.
pub async fn recovery(server: &Server, streams: usize) -> anyhow::Result<f64> {
    let proxy = tether_testkit::FaultProxy::start(server.addr()).await?;
    let client = connect(&proxy.url).await?;
    let script = "while :; do echo streaming; sleep 0.01; done";
    let mut handles = Vec::new();
    for n in 0..streams {
        handles.push(client.start(params(&format!("r{n}"), &["/bin/sh", "-c", script])).await?);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.set_down(true);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let back = Instant::now();
    proxy.set_down(false);
    client.wait_connected().await?;
    let elapsed = back.elapsed().as_secs_f64() * 1000.0;
    for handle in &handles {
        handle.terminate().await?;
    }
    Ok(elapsed)
}

/// Peak RSS (MB) of `tether exec` streaming `bytes` of output into a pipe whose reader stalls
/// for `stall` first, then reads everything: what a slow consumer (a pager, a paused pipeline)
/// costs the client. Every byte must arrive.
pub async fn stalled_reader(server: &Server, bytes: u64, stall: Duration) -> anyhow::Result<f64> {
    use tokio::io::AsyncReadExt;
    let mut child = tokio::process::Command::new(crate::servers::tether_binary()?)
        .args(["exec", "--url", &server.url, "--no-stdin", "--"])
        .args(["head", "-c", &bytes.to_string(), "/dev/zero"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().context("tether exec has no pid")?;
    let peak = || tether_testkit::process_stats::peak_rss_kib(pid).unwrap_or(0);
    let mut highest = 0;
    let until = Instant::now() + stall;
    while Instant::now() < until {
        highest = highest.max(peak());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut stdout = child.stdout.take().context("no stdout")?;
    let mut buffer = vec![0u8; 1024 * 1024];
    let mut received = 0u64;
    loop {
        let n = stdout.read(&mut buffer).await?;
        if n == 0 {
            break;
        }
        received += n as u64;
        highest = highest.max(peak());
    }
    let status = child.wait().await?;
    if !status.success() || received != bytes {
        bail!("tether exec ended with {status} after {received} of {bytes} bytes");
    }
    Ok(highest as f64 / 1024.0)
}

/// The 50th and 99th percentile milliseconds of `process/start` of `/bin/true` to its close,
/// `runs` times one after another, while `streams` other sessions each stream output as fast
/// as the server carries it: what an agent waits for a command while others' builds print.
/// Third, the MB/s the streams moved meanwhile: the more a server carries, the less of the
/// machine is left for the starts, so the percentiles are read beside it.
pub async fn latency_under_load(
    url: &str,
    streams: usize,
    runs: usize,
) -> anyhow::Result<Vec<f64>> {
    let mut load = Vec::with_capacity(streams);
    for n in 0..streams {
        let client = connect(url).await?;
        let argv = ["/usr/bin/head", "-c", "1000000000000", "/dev/zero"];
        let process = client.start(params(&format!("load{n}"), &argv)).await?;
        load.push((client, process));
    }
    // Every stream is flowing before the first sample: each has delivered output.
    let stop = tokio::sync::watch::channel(()).0;
    let moved = Arc::new(AtomicU64::new(0));
    let mut streaming = Vec::with_capacity(streams);
    for (client, mut process) in load {
        match process.next_update().await.context("a load stream ended")? {
            ProcessUpdate::Event(ProcessEvent::Output { .. }) => {}
            ProcessUpdate::Event(_) => bail!("a load stream ended before streaming"),
            ProcessUpdate::Failed(failure) => bail!("a load stream failed: {failure}"),
        }
        let mut stop = stop.subscribe();
        let moved = moved.clone();
        streaming.push(tokio::spawn(async move {
            let _client = client;
            loop {
                tokio::select! {
                    update = process.next_update() => {
                        let Some(ProcessUpdate::Event(ProcessEvent::Output { chunk, .. })) = update
                        else {
                            return;
                        };
                        moved.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    }
                    _ = stop.changed() => {
                        let _ = process.terminate().await;
                        return;
                    }
                }
            }
        }));
    }
    let client = connect(url).await?;
    let (moved_before, started) = (moved.load(Ordering::Relaxed), Instant::now());
    let samples = start_to_close(&client, runs).await;
    let mb_per_s = (moved.load(Ordering::Relaxed) - moved_before) as f64
        / started.elapsed().as_secs_f64()
        / 1e6;
    stop.send_replace(());
    for stream in streaming {
        stream.await?;
    }
    // The load is stopped first, whether or not every start went through.
    let mut samples = samples?;
    samples.sort_by(f64::total_cmp);
    Ok(vec![percentile(&samples, 50.0), percentile(&samples, 99.0), mb_per_s])
}

/// The nearest-rank percentile of sorted `samples`.
fn percentile(samples: &[f64], percent: f64) -> f64 {
    let rank = ((percent / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}
