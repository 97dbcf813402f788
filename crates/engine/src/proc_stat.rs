//! The few fields of `/proc/<pid>/stat` Tether reads: who a process's parent is, its process
//! group, and when it started (to tell it from a later process that got the same pid).

/// A process as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub ppid: i32,
    pub pgrp: i32,
    /// Clock ticks after boot.
    pub start_time: u64,
}

/// Process `pid`'s stat; `None` if it is gone (or `/proc` is not there).
pub fn read(pid: i32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold anything, `)` included) start after
    // the last `)`: state, ppid, pgrp, … and the start time is the 20th of them.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(ProcStat {
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// Every process whose parent is `parent`, with its stat.
pub fn children_of(parent: i32) -> Vec<(i32, ProcStat)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| {
            let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = read(pid)?;
            (stat.ppid == parent).then_some((pid, stat))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_its_parents_child() {
        let me = std::process::id() as i32;
        let stat = read(me).unwrap();
        assert!(stat.start_time > 0);
        assert!(children_of(stat.ppid).iter().any(|(pid, _)| *pid == me));
    }
}
