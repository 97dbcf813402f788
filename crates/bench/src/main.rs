//! `tether-bench`: Tether and the reference exec-server, side by side, in one run.
//!
//! Both servers are driven by the same Rust client (`tether-client`) with the same workloads,
//! alternating run by run, so every figure is a ratio measured on the same machine at the same
//! time — absolute times on a shared machine are noise. Each workload also reports the
//! machine's ceiling for it (no server at all), to show how close each server gets.
//!
//! Run with `cargo run --release -p tether-bench` (see `--help`).

mod busy;
mod ceilings;
mod config_workloads;
mod copy_workloads;
mod discovery_workloads;
mod io_workloads;
mod network_workloads;
mod report;
mod request_workloads;
mod sandbox_workloads;
mod servers;
mod workloads;
mod wss_workloads;

use clap::Parser;

use io_workloads::HttpBody;
use report::{Row, Table, Target};
use servers::{Kind, Scratch, Server};

/// The allocator `tether` uses, so the client both servers are measured through is tuned as
/// `tether`'s own is (see `tether_engine::allocator`).
#[global_allocator]
static ALLOCATOR: tether_engine::allocator::HugePageHint = tether_engine::allocator::HugePageHint;

/// Tether's targets against the reference, as times better (issue-level goals, judged on the
/// medians of one run): PTY output half again as fast; small requests — what an agent sends
/// many of a turn — in half the time; a streamed HTTP body half again as fast.
const PTY_TARGET: f64 = 1.5;
const SMALL_REQUEST_TARGET: f64 = 2.0;
const HTTP_TARGET: f64 = 1.5;

/// Bytes of the streamed HTTP row's body: 100 MB, long enough for a steady rate.
const STREAMED_HTTP_BYTES: u64 = 100_000_000;

/// Bytes of the buffered HTTP row's body: 32 MB, whose base64 (43 MB) fits in one message.
const BUFFERED_HTTP_BYTES: u64 = 32_000_000;

/// Decoded bytes of the gzip HTTP row's body: 100 MB of text (about a quarter of that on the
/// wire), long enough that decoding, not the request, is what the CPU time counts.
const GZIP_HTTP_BYTES: u64 = 100_000_000;

/// Bytes of the managed proxy's download row: 200 MB, long enough for a steady rate and for
/// CPU time counted in clock ticks (10 ms) to be a small error.
const PROXIED_DOWNLOAD_BYTES: u64 = 200_000_000;

/// The managed proxy's CPU per byte: at least 1.5 times less than the reference's proxy
/// path, and no slower (the download row's target, 1×).
const PROXY_CPU_TARGET: f64 = 1.5;

/// Sessions streaming output while the loaded latency rows are timed: more than the cores, as
/// an agent host running several builds at once.
const LOADED_STREAMS: usize = 8;

#[derive(Parser)]
#[command(about = "Benchmark Tether against the reference exec-server")]
struct Args {
    /// Rounds per workload; servers alternate within each round.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Runs of the latency workload per round.
    #[arg(long, default_value_t = 200)]
    latency_runs: usize,
    /// Bytes of output in the throughput workloads.
    #[arg(long, default_value_t = 200_000_000)]
    bytes: u64,
    /// Workloads to run (comma-separated): latency, pipe, pty, cpu, many, sessions, memory,
    /// stalled, recovery, files, small, bigfile, http, loaded, sandbox, sandboxfs, network,
    /// config, discovery, cp (`tether cp` against `scp` to a local sshd, in a table of their own), wss
    /// (Tether over `wss://` against `ssh` to the same sshd, in another).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "latency,pipe,pty,cpu,many,sessions,memory,stalled,recovery,files,small,\
                         bigfile,http,loaded,sandbox,sandboxfs,network,config,discovery,cp,wss"
    )]
    only: Vec<String>,
    /// Skip the reference, scp and ssh (for profiling Tether alone).
    #[arg(long)]
    tether_only: bool,
    /// Concurrent processes in the "many" workload.
    #[arg(long, default_value_t = 1000)]
    many: usize,
    /// Seconds one run of a workload may take before it counts as failed.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    /// Bytes of the one big file in the cp workloads.
    #[arg(long, default_value_t = 1_000_000_000)]
    cp_bytes: u64,
    /// Files of 1 KiB in the tree of the cp workloads.
    #[arg(long, default_value_t = 20_000)]
    cp_files: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if let Some(address) = std::env::var_os(ceilings::ECHO_ENV) {
        return ceilings::echo(&address.to_string_lossy());
    }
    // The workloads run in a task of the runtime, as an application's calls do, not on the
    // thread that started it: there, every answer would wait for one more thread to wake (the
    // runtime's worker reads it, then wakes the main thread), a cost of the harness and not of
    // either server.
    tokio::spawn(bench()).await?
}

async fn bench() -> anyhow::Result<()> {
    // The client both servers are measured through, tuned as `tether` tunes itself.
    tether_engine::allocator::tune_for_streaming();
    let args = Args::parse();
    let kinds: Vec<Kind> =
        if args.tether_only { vec![Kind::Tether] } else { vec![Kind::Tether, Kind::Reference] };
    let wants = |name: &str| args.only.iter().any(|w| w == name);
    let mut table = Table::default();
    // Started before any workload, so a missing sshd fails the benchmark at once, not after
    // the other rows have run; idle until the cp and wss rows, it costs them nothing.
    let sshd = if (wants("cp") || wants("wss")) && kinds.contains(&Kind::Reference) {
        Some(tether_testkit::sshd::Sshd::start()?)
    } else {
        None
    };

    if wants("latency") {
        let ceiling = ceilings::fork_exec_wait(args.latency_runs)?;
        let mut row = Row::new("start → closed, /bin/true (median ms)", report::Better::Lower);
        row.ceiling = Some(ceiling);
        for_each_round(&args, &kinds, &mut row, |server| {
            let runs = args.latency_runs;
            async move { workloads::latency(&server.url, runs).await }
        })
        .await?;
        table.push(row);
    }
    if wants("loaded") {
        let streams = LOADED_STREAMS;
        let latency = |percentile: &str| {
            let label = format!(
                "start → closed, /bin/true, {streams} sessions streaming (p{percentile} ms)"
            );
            Row::new(&label, report::Better::Lower)
        };
        let load = format!("… the {streams} sessions' output meanwhile (MB/s total)");
        let mut rows = [latency("50"), latency("99"), Row::new(&load, report::Better::Higher)];
        let runs = args.latency_runs;
        for_each_round_rows(Scratch::TempDir, &args, &kinds, &mut rows, |server| async move {
            workloads::latency_under_load(&server.url, streams, runs).await
        })
        .await?;
        rows.into_iter().for_each(|row| table.push(row));
    }
    let mut pty_ceiling = None;
    for (name, tty, busy) in [("pipe", false, false), ("pty", true, false), ("pty", true, true)] {
        if !wants(name) {
            continue;
        }
        let ceiling = match (tty, pty_ceiling) {
            (false, _) => ceilings::pipe_over_loopback_throughput(args.bytes)?,
            (true, Some(ceiling)) => ceiling,
            (true, None) => *pty_ceiling.insert(ceilings::pty_throughput(args.bytes).await?),
        };
        let label = format!(
            "{} output, {} MB{} (MB/s)",
            name,
            args.bytes / 1_000_000,
            if busy { ", every CPU but one busy" } else { "" }
        );
        let mut row = Row::new(&label, report::Better::Higher);
        row.ceiling = Some(ceiling);
        if tty {
            row.target = Some(Target::TimesBetter(PTY_TARGET));
        }
        let bytes = args.bytes;
        for_each_round(&args, &kinds, &mut row, |server| async move {
            let _busy = if busy { busy::BusyCpus::all_but_one()? } else { None };
            workloads::throughput(&server.url, bytes, tty).await
        })
        .await?;
        table.push(row);
    }
    if wants("cpu") {
        let mut row = Row::new("server CPU per GB of pipe output (s)", report::Better::Lower);
        let bytes = args.bytes;
        for_each_round(&args, &kinds, &mut row, |server| async move {
            workloads::server_cpu_per_gb(server, bytes).await
        })
        .await?;
        table.push(row);
    }
    if wants("many") {
        let label = format!("{} concurrent /bin/true, one session (s)", args.many);
        let mut row = Row::new(&label, report::Better::Lower);
        let many = args.many;
        for_each_round(&args, &kinds, &mut row, |server| async move {
            workloads::many_processes(&server.url, many).await
        })
        .await?;
        table.push(row);
    }
    if wants("sessions") {
        let mut row = Row::new("50 sessions × 4 MB streaming (MB/s total)", report::Better::Higher);
        for_each_round(&args, &kinds, &mut row, |server| async move {
            workloads::many_sessions(&server.url, 50, 4_000_000).await
        })
        .await?;
        table.push(row);
    }
    if wants("memory") {
        for (label, sleepers) in [
            ("server RSS idle after initialize (MB)", 0),
            ("server RSS per sleeping process, 100 (KB)", 100),
            ("server RSS per sleeping process, 1,000 (KB)", 1000),
        ] {
            let mut row = Row::new(label, report::Better::Lower);
            for_each_round(&args, &kinds, &mut row, |server| async move {
                workloads::memory(server, sleepers).await
            })
            .await?;
            table.push(row);
        }
    }
    if wants("stalled") {
        let mut row = Row::new(
            "tether exec peak RSS, reader stalled 10 s on 200 MB (MB)",
            report::Better::Lower,
        );
        for_each_round(&args, &kinds, &mut row, |server| async move {
            workloads::stalled_reader(server, 200_000_000, std::time::Duration::from_secs(10)).await
        })
        .await?;
        table.push(row);
    }
    if wants("recovery") {
        let mut row = Row::new(
            "recovery after the network returns, 10 streaming (ms)",
            report::Better::Lower,
        );
        for_each_round(&args, &kinds, &mut row, |server| async move {
            workloads::recovery(server, 10).await
        })
        .await?;
        table.push(row);
    }
    if wants("files") || wants("bigfile") {
        let files = io_workloads::Files::prepare(1000, 100_000_000)?;
        let files: &'static io_workloads::Files = Box::leak(Box::new(files));
        if wants("files") {
            let mut row =
                Row::new("1,000 fs/readFile of 1 KiB, sequential (s)", report::Better::Lower);
            row.ceiling = Some(ceilings::read_small_files(files)?);
            row.target = Some(Target::TimesBetter(SMALL_REQUEST_TARGET));
            for_each_round(&args, &kinds, &mut row, |server| async move {
                io_workloads::read_small_files(&server.url, files).await
            })
            .await?;
            table.push(row);
        }
        if wants("bigfile") {
            let mut speed = Row::new("fs/readFile of 100 MB (MB/s)", report::Better::Higher);
            speed.ceiling = Some(ceilings::read_large_file(files)?);
            let kept = Row::new(
                "server RSS after that read, its connection still open (MB)",
                report::Better::Lower,
            );
            let mut rows = [speed, kept];
            for_each_round_rows(Scratch::TempDir, &args, &kinds, &mut rows, |server| async move {
                io_workloads::read_large_file(server, files).await
            })
            .await?;
            rows.into_iter().for_each(|row| table.push(row));
        }
        files.remove();
    }
    if wants("small") {
        // Measured on the idle machine, then with every CPU but one busy: there a call's two
        // wake-ups land on the CPU already awake, and what is left is mostly the servers' own
        // work (see `busy`).
        for busy in [false, true] {
            let calls = request_workloads::CALLS;
            let suffix = if busy { ", every CPU but one busy" } else { "" };
            let mut rows = request_workloads::METHODS.map(|method| {
                let label = format!("{method}{suffix} (median µs)");
                let mut row = Row::new(&label, report::Better::Lower);
                row.target = Some(Target::TimesBetter(SMALL_REQUEST_TARGET));
                row
            });
            // The floor moves with the machine from one minute to the next (the wake-up of a
            // sleeping thread on the other CPU is most of it), so it is measured right before
            // every server's calls, and the ceiling column is the median of those.
            let floors = std::sync::Arc::new(std::sync::Mutex::new(Vec::<f64>::new()));
            for_each_round_rows(Scratch::TempDir, &args, &kinds, &mut rows, |server| {
                let floors = floors.clone();
                async move {
                    let _busy = if busy { busy::BusyCpus::all_but_one()? } else { None };
                    let floor = ceilings::tcp_round_trip(calls)?;
                    let label = format!("tcp round trip{suffix} (µs)");
                    eprintln!("  {label:<58} before a server → {floor:.3}");
                    floors.lock().unwrap().push(floor);
                    request_workloads::small_requests(&server.url, calls).await
                }
            })
            .await?;
            let floor = report::median(&mut floors.lock().unwrap());
            for mut row in rows {
                row.ceiling = Some(floor);
                table.push(row);
            }
        }
    }
    if wants("http") {
        let peer = tether_testkit::HttpPeer::start().await?;
        // A buffered body comes whole in one answer, so it must fit in one message (64 MiB
        // for either server's client once in base64).
        for (how, name, bytes) in [
            (HttpBody::Streamed, "streamed", STREAMED_HTTP_BYTES),
            (HttpBody::Buffered, "buffered", BUFFERED_HTTP_BYTES),
        ] {
            let url: &'static str =
                Box::leak(peer.url(&format!("/large?bytes={bytes}")).into_boxed_str());
            let label = format!("{name} http/request of {} MB (MB/s)", bytes / 1_000_000);
            let mut row = Row::new(&label, report::Better::Higher);
            row.target = Some(Target::TimesBetter(HTTP_TARGET));
            row.ceiling = Some(ceilings::http(url, bytes, how).await?);
            for_each_round(&args, &kinds, &mut row, |server| async move {
                io_workloads::http(&server.url, url, bytes, how).await
            })
            .await?;
            table.push(row);
        }
        let bytes = GZIP_HTTP_BYTES;
        let url: &'static str =
            Box::leak(peer.url(&format!("/encoded/gzip?bytes={bytes}")).into_boxed_str());
        // Fetched once first, with no server, so the peer has made (and keeps) the body before
        // any server's time is counted.
        let local = tether_engine::http::LocalHttpClient::new();
        io_workloads::fetch_through(&local, url, bytes, HttpBody::Streamed).await?;
        let label = format!(
            "server CPU per MB of gzip http/request, {} MB decoded (ms)",
            bytes / 1_000_000
        );
        let mut row = Row::new(&label, report::Better::Lower);
        for_each_round(&args, &kinds, &mut row, |server| async move {
            io_workloads::http_gzip_cpu(server, url, bytes).await
        })
        .await?;
        table.push(row);
        drop(peer);
    }
    if wants("config") {
        let repository: &'static config_workloads::Repository =
            Box::leak(Box::new(config_workloads::Repository::prepare()?));
        let mut row = Row::new(
            "environmentConfig/read, user + 3 project layers (median ms)",
            report::Better::Lower,
        );
        row.target = Some(Target::AtMost { of_reference: 1.0, at_most: None });
        for_each_round(&args, &kinds, &mut row, |server| async move {
            config_workloads::read(server, repository, config_workloads::READ_RUNS).await
        })
        .await?;
        repository.remove();
        table.push(row);
    }
    if wants("discovery") {
        let mut row = Row::new(
            "capabilities/discoverV2, 50 skills + 5 plugins (median ms)",
            report::Better::Lower,
        );
        row.target = Some(Target::AtMost { of_reference: 1.0, at_most: None });
        for_each_round(&args, &kinds, &mut row, |server| async move {
            discovery_workloads::installed(server, discovery_workloads::DISCOVERY_RUNS).await
        })
        .await?;
        table.push(row);
        let mut row = Row::new(
            "capabilityRoots/discoverV1, 6 roots, 65 skills (median ms)",
            report::Better::Lower,
        );
        row.target = Some(Target::AtMost { of_reference: 1.0, at_most: None });
        for_each_round(&args, &kinds, &mut row, |server| async move {
            discovery_workloads::roots(server, discovery_workloads::DISCOVERY_RUNS).await
        })
        .await?;
        table.push(row);
    }
    if wants("sandbox") {
        use sandbox_workloads::Intent;
        for intent in [Intent::ReadOnly, Intent::WorkspaceWrite] {
            let label =
                format!("sandboxed start → closed, /bin/true, {} (median ms)", intent.name());
            let mut row = Row::new(&label, report::Better::Lower);
            row.target = Some(Target::AtMost { of_reference: 0.25, at_most: Some((20.0, "ms")) });
            for_each_round_in(Scratch::VarTmp, &args, &kinds, &mut row, |server| async move {
                sandbox_workloads::start(&server.url, intent, sandbox_workloads::START_RUNS).await
            })
            .await?;
            table.push(row);
        }
    }
    if wants("network") {
        let peer = tether_testkit::HttpPeer::start().await?;
        let bytes = PROXIED_DOWNLOAD_BYTES;
        let url: &'static str =
            Box::leak(peer.url(&format!("/large?bytes={bytes}")).into_boxed_str());
        let megabytes = bytes / 1_000_000;
        let mut rows = [
            Row::new(
                &format!(
                    "sandboxed download through the managed proxy's tunnel, {megabytes} MB (MB/s)"
                ),
                report::Better::Higher,
            ),
            Row::new(
                &format!("server CPU per MB through the managed proxy, {megabytes} MB (ms)"),
                report::Better::Lower,
            ),
        ];
        rows[0].target = Some(Target::TimesBetter(1.0));
        rows[1].target = Some(Target::TimesBetter(PROXY_CPU_TARGET));
        for_each_round_rows(Scratch::VarTmp, &args, &kinds, &mut rows, |server| async move {
            network_workloads::download(server, url, bytes).await
        })
        .await?;
        for row in rows {
            table.push(row);
        }
        let small: &'static str = Box::leak(peer.url("/status/200").into_boxed_str());
        let mut row = Row::new(
            "sandboxed start → first byte through the managed proxy (median ms)",
            report::Better::Lower,
        );
        row.target = Some(Target::AtMost { of_reference: 1.0, at_most: None });
        for_each_round_in(Scratch::VarTmp, &args, &kinds, &mut row, |server| async move {
            network_workloads::first_byte(server, small, network_workloads::FIRST_BYTE_RUNS).await
        })
        .await?;
        table.push(row);
        drop(peer);
    }
    if wants("sandboxfs") {
        let mut row = Row::new(
            "sandboxed fs/writeFile of 1 KiB, workspace-write (median ms)",
            report::Better::Lower,
        );
        row.target = Some(Target::AtMost { of_reference: 0.2, at_most: None });
        for_each_round_in(Scratch::VarTmp, &args, &kinds, &mut row, |server| async move {
            sandbox_workloads::write_file(&server.url, sandbox_workloads::WRITE_RUNS).await
        })
        .await?;
        table.push(row);
        let mut row = Row::new(
            "sandboxed new file in a new directory, as apply_patch makes it, workspace-write (median ms)",
            report::Better::Lower,
        );
        row.target = Some(Target::AtMost { of_reference: 0.2, at_most: None });
        for_each_round_in(Scratch::VarTmp, &args, &kinds, &mut row, |server| async move {
            let runs = sandbox_workloads::WRITE_RUNS;
            sandbox_workloads::new_file_in_new_directory(&server.url, runs).await
        })
        .await?;
        table.push(row);
    }
    // Tether over `wss://` against `ssh`, a row at a time, as the cp rows are run.
    let mut wss_table = Table::versus(
        wss_workloads::tool_name(Kind::Tether),
        wss_workloads::tool_name(Kind::Reference),
    );
    if wants("wss") {
        for workload in wss_workloads::Workload::ALL {
            let workload = workload.prepare(args.bytes)?;
            let mut row = Row::new(&workload.label(), workload.better());
            for round in 0..args.rounds {
                for kind in round_order(&kinds, round) {
                    let value = within(&args, workload.run(kind, sshd.as_ref())).await;
                    record(&mut row, wss_workloads::tool_name(kind), kind, round, value);
                }
            }
            wss_table.push(row);
        }
    }
    let mut cp_table = Table::versus(
        copy_workloads::tool_name(Kind::Tether),
        copy_workloads::tool_name(Kind::Reference),
    );
    if wants("cp") {
        cp_rows(&args, &kinds, sshd.as_ref(), &mut cp_table).await?;
    }
    drop(sshd);
    table.print(&kinds);
    cp_table.print(&kinds);
    wss_table.print(&kinds);
    Ok(())
}

/// The `tether cp` rows: each copy workload by `tether cp` over `wss://` and by `scp` to
/// `sshd` (in the reference's place), alternating as [`for_each_round`] alternates servers.
async fn cp_rows(
    args: &Args,
    kinds: &[Kind],
    sshd: Option<&tether_testkit::sshd::Sshd>,
    table: &mut Table,
) -> anyhow::Result<()> {
    let sources = copy_workloads::Sources::prepare(args.cp_bytes, args.cp_files)?;
    for workload in copy_workloads::Workload::ALL {
        let mut row = Row::new(&workload.label(&sources), workload.better());
        row.target = Some(Target::TimesBetter(workload.target()));
        for round in 0..args.rounds {
            for kind in round_order(kinds, round) {
                let copied = copy_workloads::copy(workload, kind, &sources, sshd, round);
                let value = within(args, copied).await;
                record(&mut row, copy_workloads::tool_name(kind), kind, round, value);
            }
        }
        sources.remove_copies();
        table.push(row);
    }
    sources.remove();
    Ok(())
}

/// Runs `workload` once per server per round, each time on a fresh server, alternating.
async fn for_each_round<F, Fut>(
    args: &Args,
    kinds: &[Kind],
    row: &mut Row,
    workload: F,
) -> anyhow::Result<()>
where
    F: FnMut(&'static Server) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<f64>>,
{
    for_each_round_in(Scratch::TempDir, args, kinds, row, workload).await
}

/// [`for_each_round`], with each server's scratch directory in `scratch`.
async fn for_each_round_in<F, Fut>(
    scratch: Scratch,
    args: &Args,
    kinds: &[Kind],
    row: &mut Row,
    mut workload: F,
) -> anyhow::Result<()>
where
    F: FnMut(&'static Server) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<f64>>,
{
    let rows = std::slice::from_mut(row);
    for_each_round_rows(scratch, args, kinds, rows, |server| {
        let run = workload(server);
        async move { run.await.map(|value| vec![value]) }
    })
    .await
}

/// [`for_each_round_in`] for a workload that yields one figure for each of `rows` per run.
async fn for_each_round_rows<F, Fut>(
    scratch: Scratch,
    args: &Args,
    kinds: &[Kind],
    rows: &mut [Row],
    mut workload: F,
) -> anyhow::Result<()>
where
    F: FnMut(&'static Server) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Vec<f64>>>,
{
    for round in 0..args.rounds {
        for kind in round_order(kinds, round) {
            let server: &'static Server = Box::leak(Box::new(Server::start(kind, scratch).await?));
            let values = within(args, workload(server)).await;
            server.stop();
            let name = format!("{kind:?}");
            for (n, row) in rows.iter_mut().enumerate() {
                let value = match &values {
                    Ok(values) => values
                        .get(n)
                        .copied()
                        .ok_or_else(|| anyhow::anyhow!("the workload gave no figure for this row")),
                    Err(error) => Err(anyhow::anyhow!("{error:#}")),
                };
                record(row, &name, kind, round, value);
            }
        }
    }
    Ok(())
}

/// `kinds` in the order they run in `round`: which goes first alternates, so neither always
/// runs on a warmer machine.
fn round_order(kinds: &[Kind], round: usize) -> Vec<Kind> {
    if round.is_multiple_of(2) { kinds.to_vec() } else { kinds.iter().rev().copied().collect() }
}

/// `run`'s figure, or a failure if it takes longer than `--timeout-secs` (it is then dropped,
/// with whatever it started).
async fn within<T, Fut>(args: &Args, run: Fut) -> anyhow::Result<T>
where
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let limit = std::time::Duration::from_secs(args.timeout_secs);
    match tokio::time::timeout(limit, run).await {
        Ok(value) => value,
        Err(_) => Err(anyhow::anyhow!("did not finish within {limit:?}")),
    }
}

/// Logs one run's figure, as `name` made it in `round`, and adds it to `row` under `kind`.
fn record(row: &mut Row, name: &str, kind: Kind, round: usize, value: anyhow::Result<f64>) {
    match value {
        Ok(value) => {
            eprintln!("  {:<58} {name:<9} round {} → {value:.3}", row.label, round + 1);
            row.values.entry(kind).or_default().push(value);
        }
        // A run that fails is reported; the benchmark goes on.
        Err(error) => {
            eprintln!("  {:<58} {name:<9} round {} → FAILED: {error:#}", row.label, round + 1);
            row.failures.entry(kind).or_default().push(format!("{error:#}"));
        }
    }
}
