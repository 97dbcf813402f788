//! The managed network workloads: a sandboxed command behind its proxy (`networkProxy`, as
//! Codex sends it with `network_access` in `-s workspace-write`), downloading from a local
//! origin through the proxy's `CONNECT` tunnel — the path every HTTPS request takes; the proxy
//! copies the tunnel's bytes whatever they are, so the origin serves plain HTTP — and the time
//! from `process/start` to the first byte that came through the proxy.
//!
//! The CPU figure counts the server and everything it started and reaped (a sandbox's
//! stages, any bridge the proxy needs inside it) less what the command itself used (its
//! shell's `times`), so each server pays for its whole proxy path and nothing else.

use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::json;
use tether_client::{ProcessUpdate, RemoteProcess};
use tether_engine::ProcessEvent;

use crate::report::median;
use crate::sandbox_workloads::{Intent, ProjectRoot, connect, finish, sandboxed};
use crate::servers::Server;

/// Starts measured for the first proxied byte, per round: each takes a sandbox (~10 ms on
/// Tether, ~100 ms on the reference), so 20 keep a round near two seconds at worst and give a
/// median one slow start does not move.
pub const FIRST_BYTE_RUNS: usize = 20;

/// The launch Codex sends: `peer`'s address allowed, SOCKS5 too.
fn launch() -> serde_json::Value {
    json!({"proxy": {"enabled": true, "enableSocks5": true, "enableSocks5Udp": false,
        "allowUpstreamProxy": false, "dangerouslyAllowAllUnixSockets": false, "mode": "full",
        "domains": {"127.0.0.1": "allow"}, "allowLocalBinding": false},
        "environmentId": "remote", "executionId": "00000000-0000-0000-0000-000000000001"})
}

fn proxied(
    id: &str,
    script: &str,
    root: &ProjectRoot,
) -> anyhow::Result<tether_protocol::process::ExecParams> {
    let mut params = sandboxed(id, &["/bin/sh", "-c", script], root, Intent::WorkspaceWrite)?;
    params.env.remove("CODEX_SANDBOX_NETWORK_DISABLED");
    if let Some(sandbox) = &mut params.sandbox {
        let mut intent = serde_json::to_value(&*sandbox)?;
        intent["permissions"]["network"] = json!("enabled");
        *sandbox = serde_json::from_value(intent)?;
    }
    params.enforce_managed_network = true;
    params.network_proxy = Some(serde_json::from_value(launch())?);
    Ok(params)
}

/// Downloads `bytes` from `url` through the proxy's tunnel in a sandboxed `curl`; returns
/// (MB/s, server CPU ms per MB, the command's own CPU taken out).
pub async fn download(server: &Server, url: &str, bytes: u64) -> anyhow::Result<Vec<f64>> {
    let client = connect(&server.url).await?;
    let root = ProjectRoot::new()?;
    // `-p`: a `CONNECT` tunnel, as for HTTPS. `times`: the shell's and curl's CPU, in that
    // order, as `NmS.SSSs NmS.SSSs` lines.
    let script = format!(
        "curl -sS -p -x \"$HTTP_PROXY\" -o /dev/null -w '%{{size_download}}\\n' '{url}'; times"
    );
    let params = proxied("download", &script, &root)?;
    let before = server.tree_cpu_seconds()?;
    let started = Instant::now();
    let (output, code) = finish(&mut client.start(params).await?).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let total = server.tree_cpu_seconds()? - before;
    let mut lines = output.lines();
    let received: u64 = lines.next().and_then(|l| l.trim().parse().ok()).context("no size")?;
    if code != 0 || received != bytes {
        bail!("proxied download exited {code} with {received} of {bytes} bytes: {output:?}");
    }
    let command: f64 = lines.flat_map(|line| line.split_whitespace()).map(seconds_of).sum();
    let megabytes = bytes as f64 / 1e6;
    Ok(vec![megabytes / elapsed, (total - command).max(0.0) * 1e3 / megabytes])
}

/// `1m2.345s` as seconds.
fn seconds_of(time: &str) -> f64 {
    let Some((minutes, rest)) = time.split_once('m') else { return 0.0 };
    let seconds = rest.trim_end_matches('s').parse::<f64>().unwrap_or(0.0);
    minutes.parse::<f64>().unwrap_or(0.0) * 60.0 + seconds
}

/// Median milliseconds from `process/start` of a sandboxed command that fetches `url`
/// through its proxy to the first byte of what it fetched, sequentially.
pub async fn first_byte(server: &Server, url: &str, runs: usize) -> anyhow::Result<f64> {
    let client = connect(&server.url).await?;
    let root = ProjectRoot::new()?;
    let mut samples = Vec::with_capacity(runs);
    for run in 0..runs {
        let script = format!("curl -sS -x \"$HTTP_PROXY\" '{url}'");
        let params = proxied(&format!("first-{run}"), &script, &root)?;
        let started = Instant::now();
        let mut process = client.start(params).await?;
        first_output(&mut process).await?;
        samples.push(started.elapsed().as_secs_f64() * 1e3);
        let (_, code) = finish(&mut process).await?;
        if code != 0 {
            bail!("proxied fetch (run {run}) exited {code}");
        }
    }
    Ok(median(&mut samples))
}

/// Returns at `process`'s first output.
async fn first_output(process: &mut RemoteProcess) -> anyhow::Result<()> {
    loop {
        match process.next_update().await.context("stream ended before any output")? {
            ProcessUpdate::Event(ProcessEvent::Output { .. }) => return Ok(()),
            ProcessUpdate::Event(ProcessEvent::Exited { exit_code, .. }) => {
                bail!("exited {exit_code} before any output")
            }
            ProcessUpdate::Event(_) => {}
            ProcessUpdate::Failed(failure) => bail!("process failed: {failure}"),
        }
    }
}
