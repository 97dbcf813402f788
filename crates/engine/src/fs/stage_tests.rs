use std::ffi::OsStr;
use std::os::fd::AsFd as _;
use std::path::PathBuf;

use super::*;

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("tether-stage-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn staged_names_are_recognised_and_nothing_else() {
    let name = staged_name(OsStr::new("big.bin"), 4242, 7);
    assert_eq!(name, ".big.bin.tether-4242-7");
    assert!(is_staged_name(&name));
    assert!(is_staged_name(&put_staged_name(OsStr::new("a.tether-1-1"), 1, 0)));
    for other in [
        "big.bin",
        ".big.bin",
        "big.bin.tether-1-2",
        "..tether-1-2",
        ".a.tether-1-",
        ".a.tether--2",
        ".a.tether-x-2",
        ".a.tether-1-2-3",
        ".a.tether-put-1",
        ".a.tether-1-2.txt",
    ] {
        assert!(!is_staged_name(OsStr::new(other)), "{other}");
    }
}

#[test]
fn a_directory_is_swept_at_most_once_per_interval() {
    let (directory, start) = ((u64::MAX, 1), Instant::now());
    assert!(due(directory, start));
    assert!(!due(directory, start + SWEEP_INTERVAL / 2));
    assert!(due(directory, start + SWEEP_INTERVAL));
}

/// A sweep removes the stage nobody holds, and leaves a held stage (another descriptor's
/// lock, as another process's would be), one of this process's own, a link under a staged
/// name (and what it leads to), a staged name with a second hard link, and every other name.
#[test]
fn a_sweep_removes_only_unheld_stages() {
    let scratch = Scratch::new("sweep");
    let at = |name: &str| scratch.0.join(name);
    for name in [".dead.tether-1-1", ".locked.tether-1-2", ".ours.tether-1-3", "plain.txt"] {
        std::fs::write(at(name), name).unwrap();
    }
    std::fs::write(at("victim"), b"keep").unwrap();
    std::os::unix::fs::symlink(at("victim"), at(".link.tether-1-4")).unwrap();
    std::fs::write(at(".linked.tether-1-5"), b"two names").unwrap();
    std::fs::hard_link(at(".linked.tether-1-5"), at("other-name")).unwrap();
    let locked = std::fs::File::open(at(".locked.tether-1-2")).unwrap();
    rustix::fs::flock(&locked, FlockOperation::LockShared).unwrap();
    let directory = open_directory(&scratch.0).unwrap();
    let ours = std::fs::File::open(at(".ours.tether-1-3")).unwrap();
    let ours =
        Stage::hold(directory.try_clone().unwrap(), OsStr::new(".ours.tether-1-3"), &ours).unwrap();
    assert!(ours.is_some());

    sweep(directory.as_fd());

    let mut left: Vec<String> = std::fs::read_dir(&scratch.0)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            ".link.tether-1-4",
            ".linked.tether-1-5",
            ".locked.tether-1-2",
            ".ours.tether-1-3",
            "other-name",
            "plain.txt",
            "victim"
        ]
    );
    assert_eq!(std::fs::read(at("victim")).unwrap(), b"keep");
}

/// A stage still under its name when its connection ends is removed; one renamed into place
/// is not.
#[test]
fn a_connections_stages_go_with_it_unless_placed() {
    let scratch = Scratch::new("connection");
    let directory = open_directory(&scratch.0).unwrap();
    let mut stages = ConnectionStages::default();
    for name in [".left.tether-1-1", ".placed.tether-1-2"] {
        let file = std::fs::File::create(scratch.0.join(name)).unwrap();
        let stage = Stage::hold(directory.try_clone().unwrap(), OsStr::new(name), &file);
        stages.push(stage.unwrap().unwrap());
    }
    std::fs::rename(scratch.0.join(".placed.tether-1-2"), scratch.0.join("placed")).unwrap();
    drop(stages);
    let left: Vec<String> = std::fs::read_dir(&scratch.0)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, ["placed"]);
}

/// A stage someone else holds exclusively (no sweep, which would have removed it at once) is
/// left unheld after a few milliseconds, never waited on: that holder could keep it for ever.
#[test]
fn a_stage_locked_by_another_is_not_waited_on() {
    let scratch = Scratch::new("contended");
    let path = scratch.0.join(".held.tether-1-1");
    let file = std::fs::File::create(&path).unwrap();
    let other = std::fs::File::open(&path).unwrap();
    rustix::fs::flock(&other, FlockOperation::LockExclusive).unwrap();
    let directory = open_directory(&scratch.0).unwrap();
    let held = Stage::hold(directory, OsStr::new(".held.tether-1-1"), &file).unwrap();
    assert!(held.is_none());
    assert!(!held_in_this_process(&file));
}

fn held_in_this_process(file: &std::fs::File) -> bool {
    let identity = identity_of(file).unwrap();
    held().as_ref().is_some_and(|map| map.contains_key(&identity))
}
