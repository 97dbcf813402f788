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
