//! `tether-soak`: N clients × M processes streaming output through a proxy that cuts the
//! connection at random, for a set time. Every process's output is checked byte for byte
//! against what it must have printed; the server's memory and open descriptors are sampled as
//! it goes. Exit code 0 only if no byte was lost or repeated and no process failed.
//!
//! With `--hostile`, attackers run beside the honest clients ([`hostile`]): idle and trickling
//! pre-upgrade sockets, stalled readers, vanishing clients; and at the end the server is
//! killed with SIGKILL and what it left running is counted.
//!
//! With `--hoarders N`, one client leaves N processes that print as much as a process may
//! retain in a detached session ([`hoard`]): the server's memory must stay within its
//! server-wide retained-output budget.
//!
//! A short run is part of the test suite (`crates/soak/tests`); long runs are for people:
//! `cargo run --release -p tether-soak -- --clients 20 --processes 10 --duration-secs 600`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use tether_client::{ClientOptions, ExecServerClient, ProcessUpdate};
use tether_engine::ProcessEvent;
use tether_protocol::PathUri;
use tether_protocol::process::ExecParams;
use tether_testkit::FaultProxy;

mod hoard;
mod hostile;
mod server;

/// The pong timeout of the server a hostile soak starts: short, so that how soon a stalled
/// reader is let go is measured in seconds.
const HOSTILE_PONG_TIMEOUT_SECS: u64 = 5;

#[derive(Parser)]
#[command(about = "Soak an exec-server: streaming processes through random disconnects")]
struct Args {
    /// The server to soak; by default a `tether serve` (the binary next to this one) is
    /// started on 127.0.0.1 for the run.
    #[arg(long)]
    url: Option<String>,
    /// Concurrent client sessions.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Processes streaming at once per client; each is replaced as it finishes.
    #[arg(long, default_value_t = 4)]
    processes: usize,
    /// Lines each process prints (`seq 1 N`).
    #[arg(long, default_value_t = 200_000)]
    lines: u64,
    /// How long to keep starting processes.
    #[arg(long, default_value_t = 30)]
    duration_secs: u64,
    /// Shortest and longest pause between two cuts of every connection.
    #[arg(long, default_value_t = 200)]
    min_cut_ms: u64,
    #[arg(long, default_value_t = 1500)]
    max_cut_ms: u64,
    /// Attack the server meanwhile: idle and trickling pre-upgrade sockets, stalled readers,
    /// clients that vanish; then SIGKILL it and count what it left running.
    #[arg(long)]
    hostile: bool,
    /// Leave this many processes, each printing 8 MiB then sleeping, in one detached session
    /// meanwhile; report what the server holds of their output, and its peak memory.
    #[arg(long, default_value_t = 0)]
    hoarders: usize,
}

#[derive(Default)]
struct Tally {
    runs: AtomicU64,
    bytes: AtomicU64,
    corrupted: AtomicU64,
    failed: AtomicU64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pong = HOSTILE_PONG_TIMEOUT_SECS.to_string();
    let flags: &[&str] = match args.hostile {
        true => &["--pong-timeout-secs", &pong, "--ping-interval-secs", "2"],
        false => &[],
    };
    let mut started_server = match &args.url {
        Some(_) => None,
        None => Some(server::Started::tether(flags)?),
    };
    let url = args.url.clone().unwrap_or_else(|| started_server.as_ref().unwrap().url.clone());
    let addr = url.trim_start_matches("ws://").to_owned();
    let proxy = Arc::new(FaultProxy::start(&addr).await?);
    let tally = Arc::new(Tally::default());
    let deadline = Instant::now() + Duration::from_secs(args.duration_secs);
    let expected: Arc<Vec<u8>> =
        Arc::new((1..=args.lines).map(|n| format!("{n}\n")).collect::<String>().into_bytes());

    let sampler = started_server.as_ref().map(|server| server.sampler());

    // Every client connects before the first cut: what is soaked is recovery, and a first
    // connection has nothing to recover.
    let mut connected = Vec::new();
    for _ in 0..args.clients {
        let client = ExecServerClient::connect(&proxy.url, ClientOptions::default())
            .await
            .context("cannot connect through the proxy")?;
        connected.push(client);
    }
    let cuts = Arc::new(AtomicU64::new(0));
    let cutter = {
        let (proxy, cuts) = (proxy.clone(), cuts.clone());
        let (min, max) = (args.min_cut_ms, args.max_cut_ms.max(args.min_cut_ms));
        tokio::spawn(async move {
            let mut state = 0x9E37_79B9_7F4A_7C15u64;
            loop {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let pause = min + state % (max - min + 1);
                tokio::time::sleep(Duration::from_millis(pause)).await;
                proxy.cut();
                cuts.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let begun = Instant::now();
    let attacks = Arc::new(hostile::Attacks::default());
    let attackers = match args.hostile {
        true => hostile::start(addr.clone(), url.clone(), deadline, attacks.clone()),
        false => Vec::new(),
    };
    let hoard = match args.hoarders {
        0 => None,
        count => {
            let url = url.clone();
            Some(tokio::spawn(async move { hoard::run(&url, count).await }))
        }
    };
    let mut clients = Vec::new();
    for (c, client) in connected.into_iter().enumerate() {
        for p in 0..args.processes {
            let (client, tally, expected) = (client.clone(), tally.clone(), expected.clone());
            let lines = args.lines;
            clients.push(tokio::spawn(async move {
                let mut run = 0u64;
                while Instant::now() < deadline {
                    run += 1;
                    let id = format!("c{c}-p{p}-r{run}");
                    match one_run(&client, &id, lines).await {
                        Ok(output) if output == *expected => {
                            tally.bytes.fetch_add(output.len() as u64, Ordering::Relaxed);
                        }
                        Ok(output) => {
                            eprintln!(
                                "{id}: output differs ({} of {} bytes)",
                                output.len(),
                                expected.len()
                            );
                            tally.corrupted.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(error) => {
                            eprintln!("{id}: {error:#}");
                            tally.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    tally.runs.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    for client in clients {
        client.await?;
    }
    for attacker in attackers {
        attacker.await?;
    }
    let hoard = match hoard {
        Some(hoard) => Some(hoard.await??),
        None => None,
    };
    cutter.abort();
    let elapsed = begun.elapsed().as_secs_f64();
    let samples = match sampler {
        Some(sampler) => sampler.stop().await,
        None => Vec::new(),
    };

    let bytes = tally.bytes.load(Ordering::Relaxed);
    println!("| | |");
    println!("|---|---|");
    println!("| clients × processes | {} × {} |", args.clients, args.processes);
    println!("| duration | {elapsed:.1} s |");
    println!("| connection cuts | {} |", cuts.load(Ordering::Relaxed));
    println!("| process runs checked | {} |", tally.runs.load(Ordering::Relaxed));
    println!("| bytes verified | {bytes} ({:.1} MB/s) |", bytes as f64 / elapsed / 1e6);
    println!("| runs with lost or repeated bytes | {} |", tally.corrupted.load(Ordering::Relaxed));
    println!("| runs failed loudly | {} |", tally.failed.load(Ordering::Relaxed));
    if let (Some(first), Some(last)) = (samples.first(), samples.last()) {
        let peak = samples.iter().map(|s| s.rss_kb).max().unwrap_or_default();
        let fds = samples.iter().map(|s| s.fds).max().unwrap_or_default();
        println!(
            "| server RSS first / peak / last | {} / {} / {} MB |",
            first.rss_kb / 1024,
            peak / 1024,
            last.rss_kb / 1024
        );
        println!(
            "| server open descriptors first / peak / last | {} / {fds} / {} |",
            first.fds, last.fds
        );
    }
    if let Some(hoard) = &hoard {
        let mb = |bytes: u64| bytes / 1_000_000;
        println!(
            "| hoarding processes × bytes each | {} × {} |",
            hoard.processes, hoard.bytes_each
        );
        println!(
            "| hoarded output held in memory / shed | {} / {} MB |",
            mb(hoard.held),
            mb(hoard.shed)
        );
        if let Some(server) = &started_server {
            let serving = tether_testkit::process_stats::serving_pid(server.pid());
            if let Some(peak) = tether_testkit::process_stats::peak_rss_kib(serving) {
                println!("| server peak RSS (VmHWM) | {} MB |", peak / 1024);
            }
        }
    }
    let mut hostile_failed = false;
    if args.hostile {
        let count = |n: &AtomicU64| n.load(Ordering::Relaxed);
        println!("| idle pre-upgrade sockets opened | {} |", count(&attacks.idle_sockets));
        println!("| trickling request heads | {} |", count(&attacks.trickles));
        println!("| stalled readers | {} |", count(&attacks.stalled_readers));
        println!(
            "| longest until a stalled session could be resumed | {:.1} s (pong timeout {HOSTILE_PONG_TIMEOUT_SECS} s) |",
            count(&attacks.worst_resume_ms) as f64 / 1000.0
        );
        println!("| vanished clients | {} |", count(&attacks.vanished_clients));
        println!("| attacks that broke what they should not | {} |", count(&attacks.failures));
        hostile_failed = count(&attacks.failures) > 0;
        if let Some(server) = started_server.as_mut() {
            let orphans = server.orphans_after_sigkill();
            println!("| processes left running after SIGKILL of the server | {orphans} |");
            hostile_failed |= orphans > 0;
        }
    }
    if tally.corrupted.load(Ordering::Relaxed) > 0 || tally.failed.load(Ordering::Relaxed) > 0 {
        bail!("the soak found lost, repeated or failed output");
    }
    if hostile_failed {
        bail!("an attack broke something, or the server left processes running");
    }
    Ok(())
}

/// Runs `seq 1 LINES` and returns everything it printed, or why the process was lost. A start
/// that a cut made ambiguous is reported by the client (and terminated by it, never adopted);
/// that is not lost output, so the run starts again under a new id.
async fn one_run(client: &ExecServerClient, id: &str, lines: u64) -> anyhow::Result<Vec<u8>> {
    let argv = vec!["/usr/bin/seq".to_owned(), "1".to_owned(), lines.to_string()];
    let cwd = PathUri::parse("file:///tmp").expect("a URI");
    let mut attempt = 0;
    loop {
        let params = ExecParams::new(format!("{id}-{attempt}"), argv.clone(), cwd.clone());
        match client.start(params).await {
            Ok(mut process) => return collect(&mut process).await,
            Err(tether_client::ClientError::Disconnected(_)) if attempt < 10 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

async fn collect(process: &mut tether_client::RemoteProcess) -> anyhow::Result<Vec<u8>> {
    let mut output = Vec::new();
    loop {
        match process.next_update().await.context("the stream ended without a close")? {
            ProcessUpdate::Event(ProcessEvent::Output { chunk, .. }) => {
                output.extend_from_slice(&chunk)
            }
            ProcessUpdate::Event(ProcessEvent::Closed { .. }) => return Ok(output),
            ProcessUpdate::Event(_) => {}
            ProcessUpdate::Failed(failure) => bail!("{failure}"),
        }
    }
}
