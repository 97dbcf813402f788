//! What this machine can do with no server at all: the ceilings each workload is judged by.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Instant;

use tokio::io::AsyncReadExt;

use crate::report::median;

/// Median milliseconds to fork, exec and wait for `/bin/true`.
pub fn fork_exec_wait(runs: usize) -> anyhow::Result<f64> {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        Command::new("/bin/true").status()?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(median(&mut samples))
}

/// Runs of the bare pipe path the pipe ceiling takes the best of: one run is a round like any
/// other on this machine, fast or slow with it, and a server's best round could pass it.
const PIPE_CEILING_RUNS: usize = 3;

/// MB/s of `head -c BYTES /dev/zero` carried as a server would carry it, minus the server:
/// one thread reads the pipe and writes each read to a loopback TCP connection, another reads
/// that connection. No encoding, no framing, no protocol — the bytes' own path. The best of
/// [`PIPE_CEILING_RUNS`].
pub fn pipe_over_loopback_throughput(bytes: u64) -> anyhow::Result<f64> {
    let mut best: f64 = 0.0;
    for _ in 0..PIPE_CEILING_RUNS {
        best = best.max(pipe_over_loopback_once(bytes)?);
    }
    Ok(best)
}

/// One run of [`pipe_over_loopback_throughput`].
fn pipe_over_loopback_once(bytes: u64) -> anyhow::Result<f64> {
    use std::io::Write as _;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    let started = Instant::now();
    let mut child = Command::new("/usr/bin/head")
        .args(["-c", &bytes.to_string(), "/dev/zero"])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().expect("piped");
    let relay = std::thread::spawn(move || -> std::io::Result<()> {
        let mut socket = std::net::TcpStream::connect(address)?;
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = stdout.read(&mut buffer)?;
            if n == 0 {
                return Ok(());
            }
            socket.write_all(&buffer[..n])?;
        }
    });
    let (mut socket, _) = listener.accept()?;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = socket.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    relay.join().map_err(|_| anyhow::anyhow!("the relay thread panicked"))??;
    child.wait()?;
    anyhow::ensure!(total == bytes, "read {total} of {bytes}");
    Ok(bytes as f64 / started.elapsed().as_secs_f64() / 1e6)
}

/// MB/s of `head -c BYTES /dev/zero` read straight from a PTY, by a reader that does nothing
/// else: the best of [`PTY_CEILING_RUNS`] runs of each way of reading a terminal a server
/// might use (a thread blocked in `read`, and a tokio task woken by epoll), each on an idle
/// machine and with every CPU but one kept busy ([`crate::busy`]). The kernel's PTY layer hands
/// out a few KiB per read, and how fast it refills depends on where the scheduler wakes the
/// writer, its own worker and the reader: on an idle virtual machine they spread over CPUs
/// and each wake-up of an idle one costs tens of microseconds, with the others busy they share
/// one and go two to three times as fast. A ceiling taken on an idle machine alone measured
/// below what a busy server reached.
pub async fn pty_throughput(bytes: u64) -> anyhow::Result<f64> {
    let mut best = 0f64;
    for busy in [false, true] {
        let _busy = if busy { crate::busy::BusyCpus::all_but_one()? } else { None };
        for _ in 0..PTY_CEILING_RUNS {
            let blocking =
                tokio::task::spawn_blocking(move || pty_blocking_reader(bytes)).await??;
            best = best.max(blocking).max(pty_async_reader(bytes).await?);
        }
    }
    Ok(best)
}

/// Runs of each PTY reader the ceiling takes the best of.
const PTY_CEILING_RUNS: usize = 3;

/// Bytes asked of each read of a PTY: more than it ever hands out at once.
const PTY_READ_BYTES: usize = 64 * 1024;

fn pty_blocking_reader(bytes: u64) -> anyhow::Result<f64> {
    let started = Instant::now();
    let (mut pty, pts) = pty_process::blocking::open()?;
    let mut child = pty_process::blocking::Command::new("/usr/bin/head")
        .args(["-c", &bytes.to_string(), "/dev/zero"])
        .spawn(pts)?;
    let mut buffer = vec![0u8; PTY_READ_BYTES];
    let mut total = 0u64;
    loop {
        match pty.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n as u64,
        }
    }
    child.wait()?;
    anyhow::ensure!(total >= bytes, "read {total} of {bytes}");
    Ok(bytes as f64 / started.elapsed().as_secs_f64() / 1e6)
}

async fn pty_async_reader(bytes: u64) -> anyhow::Result<f64> {
    let started = Instant::now();
    let (pty, pts) = pty_process::open()?;
    let mut child = pty_process::Command::new("/usr/bin/head")
        .args(["-c", &bytes.to_string(), "/dev/zero"])
        .spawn(pts)?;
    let (mut reader, _writer) = pty.into_split();
    let mut buffer = vec![0u8; PTY_READ_BYTES];
    let mut total = 0u64;
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n as u64,
        }
    }
    child.wait().await?;
    anyhow::ensure!(total >= bytes, "read {total} of {bytes}");
    Ok(bytes as f64 / started.elapsed().as_secs_f64() / 1e6)
}

/// Seconds to read each small file, one after another, in this process.
pub fn read_small_files(files: &crate::io_workloads::Files) -> anyhow::Result<f64> {
    let started = Instant::now();
    for path in &files.small {
        std::hint::black_box(std::fs::read(path)?);
    }
    Ok(started.elapsed().as_secs_f64())
}

/// MB/s of reading the large file whole, in this process: the best of [`FILE_CEILING_RUNS`].
pub fn read_large_file(files: &crate::io_workloads::Files) -> anyhow::Result<f64> {
    let mut best: f64 = 0.0;
    for _ in 0..FILE_CEILING_RUNS {
        let started = Instant::now();
        let contents = std::fs::read(&files.large)?;
        anyhow::ensure!(contents.len() as u64 == files.large_bytes, "short read");
        best = best.max(files.large_bytes as f64 / started.elapsed().as_secs_f64() / 1e6);
    }
    Ok(best)
}

/// Runs of the file ceiling: the first buffer of 100 MB a process maps can land on memory
/// this virtual machine has never touched, which its host then backs page by page (a few
/// hundred MB/s instead of GB/s), and a bound is the best the machine did.
const FILE_CEILING_RUNS: usize = 3;

/// MB/s of fetching the body with the engine's HTTP client, in this process, taken as `how`
/// says: the best of [`HTTP_CEILING_RUNS`] (the first also makes the peer's body, which it
/// then keeps).
pub async fn http(
    peer_url: &str,
    bytes: u64,
    how: crate::io_workloads::HttpBody,
) -> anyhow::Result<f64> {
    let client = tether_engine::http::LocalHttpClient::new();
    let mut best: f64 = 0.0;
    for _ in 0..HTTP_CEILING_RUNS {
        best = best.max(crate::io_workloads::fetch_through(&client, peer_url, bytes, how).await?);
    }
    Ok(best)
}

/// In-process runs of the HTTP ceilings: a bound is the best the machine did, and one run
/// can land in a slow moment.
const HTTP_CEILING_RUNS: usize = 3;

/// Median microseconds of a 200-byte request and its 200-byte answer over loopback TCP
/// between two processes: `calls` round trips to an echoing child (this benchmark itself,
/// run again as [`echo`]). The floor of any small request on this machine: a server that did no work at
/// all would still pay two wake-ups of a sleeping thread per call, and on a virtual
/// machine whose two processes sit on different CPUs these dominate.
pub fn tcp_round_trip(calls: usize) -> anyhow::Result<f64> {
    use std::io::Write as _;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    let mut child = Command::new(std::env::current_exe()?)
        .env(ECHO_ENV, address.to_string())
        .stdin(Stdio::null())
        .spawn()?;
    let (mut socket, _) = listener.accept()?;
    socket.set_nodelay(true)?;
    let mut message = [0u8; ROUND_TRIP_BYTES];
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        socket.write_all(&message)?;
        socket.read_exact(&mut message)?;
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    drop(socket);
    child.wait()?;
    Ok(median(&mut samples))
}

/// Bytes each way in [`tcp_round_trip`]: about a small request's and its answer's size.
const ROUND_TRIP_BYTES: usize = 200;

/// Set in the echoing child of [`tcp_round_trip`] to the address it connects to.
pub const ECHO_ENV: &str = "TETHER_BENCH_ECHO_TO";

/// The echoing child of [`tcp_round_trip`]: answers each message with itself until the
/// connection ends.
pub fn echo(address: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut socket = std::net::TcpStream::connect(address)?;
    socket.set_nodelay(true)?;
    let mut message = [0u8; ROUND_TRIP_BYTES];
    while socket.read_exact(&mut message).is_ok() {
        socket.write_all(&message)?;
    }
    Ok(())
}
