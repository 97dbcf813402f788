//! Every CPU but the first kept busy, as on a machine where a build runs beside the terminal.
//!
//! A PTY's output passes three tasks for every few KiB: the program writing, the kernel worker
//! that moves the bytes into the terminal's 4 KiB read buffer, and the reader. On an idle
//! machine the scheduler wakes each on whichever CPU is idle, and on a virtual machine waking an
//! idle CPU costs tens of microseconds; with the other CPUs busy, all three run on the free one
//! and pass the bytes along two to three times as fast (measured on 2 vCPUs: a bare reader
//! 105–125 MB/s idle, 290–350 with the other CPU spinning). A server that itself keeps a CPU
//! busy streams a terminal faster on an idle machine for that reason alone, so the PTY rows are
//! measured both ways, and the PTY ceiling is the best of both. A small request is two such
//! wake-ups (the server's, then the client's), so the small requests are measured both ways
//! too: on the idle machine the wake-ups are most of a call.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// Threads spinning on every CPU but the first until dropped.
pub struct BusyCpus {
    stop: Arc<AtomicBool>,
    spinners: Vec<JoinHandle<()>>,
}

impl BusyCpus {
    /// Starts a spinning thread pinned to each CPU this process may use, except the lowest;
    /// `None` on a machine with a single CPU, where there is nothing to keep busy.
    pub fn all_but_one() -> anyhow::Result<Option<Self>> {
        let allowed = rustix::thread::sched_getaffinity(None)?;
        let cpus: Vec<usize> =
            (0..rustix::thread::CpuSet::MAX_CPU).filter(|&cpu| allowed.is_set(cpu)).collect();
        if cpus.len() < 2 {
            return Ok(None);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut spinners = Vec::with_capacity(cpus.len() - 1);
        for &cpu in &cpus[1..] {
            let stop = stop.clone();
            let mut only = rustix::thread::CpuSet::new();
            only.set(cpu);
            spinners.push(std::thread::Builder::new().name(format!("busy-cpu{cpu}")).spawn(
                move || {
                    // Pinned, so the free CPU stays free; a spinner the kernel could move
                    // would follow the work it is meant to leave alone.
                    if rustix::thread::sched_setaffinity(None, &only).is_err() {
                        return;
                    }
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                },
            )?);
        }
        Ok(Some(Self { stop, spinners }))
    }
}

impl Drop for BusyCpus {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for spinner in self.spinners.drain(..) {
            let _ = spinner.join();
        }
    }
}
