//! What a process costs the machine, read from `/proc`: for tests and tools that watch a
//! server's memory.

/// Resident memory of process `pid`, in KiB (`VmRSS`); `None` if it is gone.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The process that serves, for a server started as `pid`. `tether serve` stays behind as a
/// small guardian whose one child, running the same program, is the server (see the CLI's
/// `guardian` module); any other server serves itself.
pub fn serving_pid(pid: u32) -> u32 {
    let exe = |pid: u32| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|child| child.parse::<u32>().ok())
        .find(|&child| exe(child).is_some() && exe(child) == exe(pid))
        .unwrap_or(pid)
}

/// Memory of the server started as `pid`, in KiB: the serving process's `VmRSS`, plus the
/// guardian's private pages if it has one (the pages it shares with the server count once).
pub fn server_rss_kib(pid: u32) -> Option<u64> {
    let serving = serving_pid(pid);
    let rss = rss_kib(serving)?;
    if serving == pid {
        return Some(rss);
    }
    Some(rss + private_kib(pid).unwrap_or(0))
}

/// Pages process `pid` alone has (`Private_Clean` + `Private_Dirty`), in KiB.
pub fn private_kib(pid: u32) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |name: &str| -> Option<u64> {
        rollup
            .lines()
            .find_map(|line| line.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some(field("Private_Clean:")? + field("Private_Dirty:")?)
}

/// User plus system CPU ticks process `pid` has used (`/proc/<pid>/stat`).
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    stat_ticks(pid, 11..13)
}

/// [`cpu_ticks`] with those of the children `pid` has reaped (`cutime`, `cstime`), each of
/// which counts its own reaped children: what a tree of helper processes cost, once ended.
pub fn tree_cpu_ticks(pid: u32) -> Option<u64> {
    stat_ticks(pid, 11..15)
}

/// The sum of `/proc/PID/stat`'s fields `at` (counted after the command name).
fn stat_ticks(pid: u32, at: std::ops::Range<usize>) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
    at.map(|at| fields.get(at)?.parse::<u64>().ok()).sum()
}

/// The most resident memory process `pid` has had, in KiB (`VmHWM`); `None` if it is gone.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Every process descended from `pid` (children, their children, …), from `/proc`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else { continue };
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse::<u32>().ok());
        if let Some(parent) = parent {
            parents.push((child, parent));
        }
    }
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let of = found[i];
        found.extend(parents.iter().filter(|(_, parent)| *parent == of).map(|(child, _)| *child));
        i += 1;
    }
    found.remove(0);
    found
}

/// Whether process `pid` runs (a zombie is dead, only not yet reaped).
pub fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
}

/// Whether process `pid` ends within `within`, waited for on its pidfd (readable once it has
/// exited), so the wait is on the event itself. A process already gone has ended.
pub async fn ends_within(pid: u32, within: std::time::Duration) -> bool {
    use rustix::process::{Pid, PidfdFlags, pidfd_open};
    let Some(pid) = Pid::from_raw(pid as i32) else { return true };
    let Ok(pidfd) = pidfd_open(pid, PidfdFlags::NONBLOCK) else { return true };
    // SAFETY: `pidfd` is owned, open, and moved into the `AsyncFd`, which owns it from here on.
    let pidfd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    }
    .expect("a pidfd can be polled");
    tokio::time::timeout(within, pidfd.readable()).await.is_ok()
}

/// Descriptors process `pid` has open; `None` if it is gone.
pub fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_and_descriptors() {
        assert!(rss_kib(std::process::id()).is_some_and(|kib| kib > 0));
        assert!(open_fds(std::process::id()).is_some_and(|fds| fds >= 3));
    }
}
