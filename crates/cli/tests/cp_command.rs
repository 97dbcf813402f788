//! `tether cp` as a person uses it: files and trees up to an executor and down again, modes,
//! times and links kept, nothing half-written under a final name, and refusals that say what
//! is wrong. Both sides are this machine, so each test makes two scratch directories: one
//! "here", one "on the executor".

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tether_testkit::server::tether_binary;
use tether_testkit::{ServerProcess, Target, wait};

mod common;
use common::tree::describe;

struct Sides {
    root: PathBuf,
}

impl Sides {
    fn new(name: &str) -> Self {
        let root = std::env::temp_dir().join(format!("tether-cp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("here")).unwrap();
        std::fs::create_dir_all(root.join("there")).unwrap();
        Self { root }
    }

    fn here(&self, relative: &str) -> PathBuf {
        self.root.join("here").join(relative)
    }

    fn there(&self, relative: &str) -> PathBuf {
        self.root.join("there").join(relative)
    }

    /// `:/abs/path` of `relative` on the executor.
    fn remote(&self, relative: &str) -> String {
        format!(":{}", self.there(relative).display())
    }
}

impl Drop for Sides {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

async fn tether_cp(url: &str, args: &[&str]) -> std::process::Output {
    let command = tokio::process::Command::new(tether_binary().unwrap())
        .args(["cp", "--url", url])
        .args(args)
        .env_remove("TETHER_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(120), command).await.expect("finished").unwrap()
}

fn write(path: &Path, bytes: &[u8], mode: u32, mtime: i64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    set_mtime(path, mtime);
}

fn set_mtime(path: &Path, seconds: i64) {
    use rustix::fs::{AtFlags, CWD, Timespec, Timestamps, utimensat};
    let time = Timespec { tv_sec: seconds, tv_nsec: 250_000_000 };
    let times = Timestamps { last_access: time, last_modification: time };
    utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

/// A tree with what a copy must keep: bytes bigger than one block, modes, times, a link, an
/// empty directory, a nested one.
fn make_tree(root: &Path) {
    let big: Vec<u8> = (0..3_500_000u32).map(|i| (i * 7 % 251) as u8).collect();
    write(&root.join("big.bin"), &big, 0o640, 1_600_000_000);
    write(&root.join("bin/run.sh"), b"#!/bin/sh\necho run\n", 0o755, 1_600_000_100);
    write(&root.join("empty"), b"", 0o600, 1_600_000_200);
    std::fs::create_dir_all(root.join("nothing-here")).unwrap();
    std::os::unix::fs::symlink("bin/run.sh", root.join("link")).unwrap();
    set_mtime(&root.join("link"), 1_600_000_300);
    set_mtime(&root.join("bin"), 1_600_000_400);
    std::fs::set_permissions(root.join("bin"), std::fs::Permissions::from_mode(0o750)).unwrap();
}

/// One entry: (relative path, kind, mode, mtime in ms, length and a digest of the contents or
/// the link target).
/// Up and back down through Tether: the tree comes back as it was — bytes (small files in one
/// call each, the big one in blocks), modes, times to the millisecond, the link as a link
/// with its own time — and nothing is said on a pipe (no progress bar).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_goes_up_and_down_whole_with_modes_times_and_links() {
    let sides = Sides::new("tree");
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    make_tree(&sides.here("project"));
    let expected = describe(&sides.here("project"));

    let source = sides.here("project");
    let up = tether_cp(&server.url, &["-r", source.to_str().unwrap(), &sides.remote("")]).await;
    assert_eq!((up.status.code(), String::from_utf8_lossy(&up.stderr).as_ref()), (Some(0), ""));
    assert_eq!(describe(&sides.there("project")), expected);

    let back = sides.here("back");
    let down =
        tether_cp(&server.url, &["-r", &sides.remote("project"), back.to_str().unwrap()]).await;
    assert_eq!((down.status.code(), String::from_utf8_lossy(&down.stderr).as_ref()), (Some(0), ""));
    // A link's own time included: the listing says it (`fs/readDirectory {includeMetadata}`).
    assert_eq!(describe(&back), expected);
}

/// One file up under a new name, and into an existing directory down; an existing file is
/// replaced whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_files_take_a_new_name_or_go_into_a_directory() {
    let sides = Sides::new("file");
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    write(&sides.here("notes.txt"), b"new notes\n", 0o644, 1_700_000_000);
    write(&sides.there("renamed.txt"), b"an older, longer text that must go\n", 0o600, 1);
    let here = sides.here("notes.txt");
    let output =
        tether_cp(&server.url, &[here.to_str().unwrap(), &sides.remote("renamed.txt")]).await;
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(std::fs::read(sides.there("renamed.txt")).unwrap(), b"new notes\n");
    let mode = std::fs::metadata(sides.there("renamed.txt")).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o644);

    std::fs::create_dir_all(sides.here("inbox")).unwrap();
    let inbox = sides.here("inbox");
    let output =
        tether_cp(&server.url, &[&sides.remote("renamed.txt"), inbox.to_str().unwrap()]).await;
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(std::fs::read(sides.here("inbox/renamed.txt")).unwrap(), b"new notes\n");
    // No temporary file is left anywhere.
    let names: Vec<_> =
        std::fs::read_dir(sides.there("")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["renamed.txt"]);
}

/// The reference has no way to set a mode, a time or a link: the bytes are copied, links
/// skipped, and the command says so in one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_the_reference_the_bytes_go_and_the_rest_is_named() {
    let sides = Sides::new("reference");
    let server = ServerProcess::start(Target::Reference).await.unwrap();
    make_tree(&sides.here("project"));
    let source = sides.here("project");
    let up = tether_cp(&server.url, &["-r", source.to_str().unwrap(), &sides.remote("")]).await;
    let stderr = String::from_utf8_lossy(&up.stderr);
    assert_eq!(up.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("tether cp: the server cannot set modes, times or links"),
        "{stderr}"
    );
    assert!(stderr.trim_end().ends_with("1 symbolic links were skipped"), "{stderr}");
    for file in ["big.bin", "bin/run.sh", "empty"] {
        assert_eq!(
            std::fs::read(sides.there(&format!("project/{file}"))).unwrap(),
            std::fs::read(sides.here(&format!("project/{file}"))).unwrap(),
            "{file}"
        );
    }
    assert!(!sides.there("project/link").exists());
    let leftovers: Vec<_> = std::fs::read_dir(sides.there("project"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Killed in the middle of a big upload: the final name never holds a partial file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_copy_leaves_no_partial_file_under_the_final_name() {
    let sides = Sides::new("interrupted");
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let big = sides.here("big.bin");
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(2_000_000_000).unwrap();
    let mut child = tokio::process::Command::new(tether_binary().unwrap())
        .args(["cp", "--url", &server.url, big.to_str().unwrap(), &sides.remote("big.bin")])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Wait for the staged file to hold some bytes, then kill the copy.
    let staged = wait::until_some("the upload to begin", Duration::from_secs(60), || {
        std::fs::read_dir(sides.there("")).unwrap().find_map(|e| {
            let entry = e.unwrap();
            let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
            (len > 0).then(|| entry.file_name().into_string().unwrap())
        })
    })
    .await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    assert!(staged.starts_with(".big.bin.tether-"), "{staged}");
    assert!(!sides.there("big.bin").exists(), "a partial file under the final name");
}

/// One block of a streamed upload: what `tether cp -` reads from its input before it sends
/// anything, so a test that writes this much knows a block is on its way to the staged file.
const BLOCK: usize = 1024 * 1024;

/// `tether cp - TO`, its input a pipe the test writes.
fn copy_from_stdin(url: &str, to: &str) -> tokio::process::Child {
    tokio::process::Command::new(tether_binary().unwrap())
        .args(["cp", "--url", url, "-", to])
        .env_remove("TETHER_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Writes one [`BLOCK`] to `copy`'s input, and waits until its staged file in `directory`
/// (named `.NAME.tether-…`) holds it; returns that file's name.
async fn one_block_staged(
    copy: &mut tokio::process::Child,
    directory: &Path,
    name: &str,
) -> String {
    use tokio::io::AsyncWriteExt as _;
    copy.stdin.as_mut().unwrap().write_all(&vec![7; BLOCK]).await.unwrap();
    let prefix = format!(".{name}.tether-");
    wait::until_some("the block to reach the staged file", Duration::from_secs(60), || {
        std::fs::read_dir(directory).unwrap().find_map(|e| {
            let entry = e.unwrap();
            let file_name = entry.file_name().into_string().unwrap();
            let full = entry.metadata().is_ok_and(|m| m.len() == BLOCK as u64);
            (file_name.starts_with(&prefix) && full).then_some(file_name)
        })
    })
    .await
}

/// Writes another [`BLOCK`] to `copy`'s input and ends it; the copy must then succeed.
async fn finish_copy(mut copy: tokio::process::Child) {
    use tokio::io::AsyncWriteExt as _;
    let mut stdin = copy.stdin.take().unwrap();
    stdin.write_all(&vec![7; BLOCK]).await.unwrap();
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(60), copy.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}

/// Killed outright (`kill -9`) in the middle of an upload, a copy can remove nothing itself:
/// the server removes its staged file as the copy's connection ends. Another copy into the
/// same directory, under way meanwhile, keeps its staged file and finishes whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_copys_staged_file_goes_with_its_connection() {
    // Setup: two copies into one directory, each with a block in its staged file.
    let sides = Sides::new("killed-stage");
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let mut killed = copy_from_stdin(&server.url, &sides.remote("killed.bin"));
    let mut live = copy_from_stdin(&server.url, &sides.remote("live.bin"));
    let killed_stage = one_block_staged(&mut killed, &sides.there(""), "killed.bin").await;
    let live_stage = one_block_staged(&mut live, &sides.there(""), "live.bin").await;

    // Exercise: SIGKILL one of them.
    killed.start_kill().unwrap();
    killed.wait().await.unwrap();

    // Assert: its staged file goes (when the server sees the connection end), the other's
    // stays whole, and that copy completes.
    let removed = || !sides.there(&killed_stage).exists();
    wait::until("the killed copy's staged file to go", Duration::from_secs(30), removed).await;
    let live_len = std::fs::metadata(sides.there(&live_stage)).unwrap().len();
    assert_eq!(live_len, BLOCK as u64, "the live copy's staged file was touched");
    finish_copy(live).await;
    assert_eq!(std::fs::read(sides.there("live.bin")).unwrap(), vec![7; 2 * BLOCK]);
    assert!(!sides.there("killed.bin").exists());
}

/// A server killed (`kill -9`) in the middle of an upload cannot remove its staged file; the
/// next copy into that directory, through any server, sweeps it away. It never removes what
/// is not provably dead: a staged file another server is writing (it holds its lock), a link
/// under a staged name (nor what it leads to), a staged name with a second hard link, or any
/// other name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_servers_staged_file_is_swept_by_the_next_copy_into_its_directory() {
    // Setup: a server killed with a block in a copy's staged file.
    let sides = Sides::new("swept-stage");
    let doomed = ServerProcess::start(Target::Tether).await.unwrap();
    let mut orphaned = copy_from_stdin(&doomed.url, &sides.remote("orphan.bin"));
    let orphan_stage = one_block_staged(&mut orphaned, &sides.there(""), "orphan.bin").await;
    // The server itself, not the guardian the test started (which would stop it cleanly).
    let guardian = doomed.pid().unwrap();
    let children = format!("/proc/{guardian}/task/{guardian}/children");
    let server: i32 = std::fs::read_to_string(children).unwrap().trim().parse().unwrap();
    // SAFETY: a plain system call on the server this test started.
    unsafe { libc::kill(server, libc::SIGKILL) };
    drop(doomed);
    orphaned.start_kill().unwrap();
    orphaned.wait().await.unwrap();
    assert!(sides.there(&orphan_stage).exists(), "nothing could remove it yet");
    // A copy under way through another server, and what only looks like a stage.
    let holder = ServerProcess::start(Target::Tether).await.unwrap();
    let mut live = copy_from_stdin(&holder.url, &sides.remote("live.bin"));
    let live_stage = one_block_staged(&mut live, &sides.there(""), "live.bin").await;
    std::fs::write(sides.there("victim"), b"keep").unwrap();
    std::os::unix::fs::symlink(sides.there("victim"), sides.there(".link.tether-1-1")).unwrap();
    std::fs::write(sides.there(".linked.tether-1-2"), b"two names").unwrap();
    std::fs::hard_link(sides.there(".linked.tether-1-2"), sides.there("second-name")).unwrap();
    std::fs::write(sides.there("notes.tether-1-3"), b"mine").unwrap();

    // Exercise: the next copy into the directory, through a third server.
    let sweeper = ServerProcess::start(Target::Tether).await.unwrap();
    std::fs::write(sides.here("next.txt"), b"next\n").unwrap();
    let here = sides.here("next.txt").display().to_string();
    let output = tether_cp(&sweeper.url, &[&here, &sides.remote("next.txt")]).await;
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));

    // Assert: the dead stage is gone, and everything else is as it was.
    assert!(!sides.there(&orphan_stage).exists(), "the dead staged file was left");
    assert_eq!(std::fs::metadata(sides.there(&live_stage)).unwrap().len(), BLOCK as u64);
    assert_eq!(std::fs::read(sides.there("victim")).unwrap(), b"keep");
    assert!(sides.there(".link.tether-1-1").symlink_metadata().unwrap().is_symlink());
    assert_eq!(std::fs::read(sides.there(".linked.tether-1-2")).unwrap(), b"two names");
    assert_eq!(std::fs::read(sides.there("notes.tether-1-3")).unwrap(), b"mine");
    finish_copy(live).await;
    assert_eq!(std::fs::read(sides.there("live.bin")).unwrap(), vec![7; 2 * BLOCK]);
    assert_eq!(std::fs::read(sides.there("next.txt")).unwrap(), b"next\n");
}

/// Interrupted by a signal (Ctrl-C, `SIGTERM`) in the middle of a big copy, up or down: the
/// copy removes its temporary file before it exits, as a shell reports a signal (128 + n),
/// saying so in one line; neither the final name nor a temporary one is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_stopped_by_a_signal_leaves_nothing_behind() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    for (n, (signal, up)) in
        [(libc::SIGINT, true), (libc::SIGTERM, true), (libc::SIGINT, false)].into_iter().enumerate()
    {
        let sides = Sides::new(&format!("signalled-{n}"));
        let (from, to, staging) = match up {
            true => (sides.here("big.bin"), sides.remote("big.bin"), sides.there("")),
            false => (
                sides.there("big.bin"),
                sides.here("big.bin").display().to_string(),
                sides.here(""),
            ),
        };
        std::fs::File::create(&from).unwrap().set_len(2_000_000_000).unwrap();
        let from = if up { from.display().to_string() } else { sides.remote("big.bin") };
        let child = tokio::process::Command::new(tether_binary().unwrap())
            .args(["cp", "--url", &server.url, &from, &to])
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // The temporary file holds some bytes: the copy is under way.
        wait::until("the copy to begin", Duration::from_secs(60), || {
            std::fs::read_dir(&staging).unwrap().any(|e| {
                let entry = e.unwrap();
                entry.file_name().to_string_lossy().starts_with(".big.bin.tether-")
                    && entry.metadata().map(|m| m.len()).unwrap_or(0) > 0
            })
        })
        .await;
        // SAFETY: a plain system call on the child this test started.
        unsafe { libc::kill(child.id().unwrap() as i32, signal) };
        let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(128 + signal), "{stderr}");
        assert_eq!(
            stderr.trim_end(),
            "tether cp: interrupted; nothing was left halfway: what had been copied stays, the \
             rest was not"
        );
        // The side copied to holds nothing: no temporary file, no partial one under the name.
        let left: Vec<String> = std::fs::read_dir(&staging)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(left.is_empty(), "signal {signal}, up {up}: {left:?}");
    }
}

/// As scp reads them: `:rel`, `:~/rel` and `:` are from the executor user's home (what the
/// server says it is), up and down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relative_remote_paths_are_from_the_executors_home() {
    let sides = Sides::new("home");
    let home = sides.there("").display().to_string();
    let server =
        ServerProcess::start_with_env(Target::Tether, &[], &[("HOME", &home)]).await.unwrap();
    let url = server.url.as_str();
    write(&sides.here("notes.txt"), b"notes\n", 0o644, 1);
    std::fs::create_dir_all(sides.there("sub")).unwrap();
    let here = sides.here("notes.txt").display().to_string();
    for (args, landed) in [
        (vec![here.as_str(), ":copied.txt"], "copied.txt"),
        (vec![here.as_str(), ":~/sub/"], "sub/notes.txt"),
        (vec![here.as_str(), ":"], "notes.txt"),
    ] {
        let output = tether_cp(url, &args).await;
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(std::fs::read(sides.there(landed)).unwrap(), b"notes\n", "{args:?}");
    }
    let back = sides.here("back.txt").display().to_string();
    let output =
        tether_cp(url, &["~/sub/notes.txt".replace('~', ":~").as_str(), back.as_str()]).await;
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(std::fs::read(sides.here("back.txt")).unwrap(), b"notes\n");
}

/// A remote pattern is expanded on the executor's listing, as scp's remote shell would expand
/// it: the matches (never a dot file for `*`) come down into the directory named, a pattern
/// from the home works too, and one that matches nothing is refused in one line naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_pattern_copies_what_it_matches() {
    let sides = Sides::new("globs");
    let home = sides.there("").display().to_string();
    let server =
        ServerProcess::start_with_env(Target::Tether, &[], &[("HOME", &home)]).await.unwrap();
    let url = server.url.as_str();
    for (name, bytes) in [
        ("logs/a.log", "a\n"),
        ("logs/b.log", "b\n"),
        ("logs/c.txt", "c\n"),
        ("logs/.d.log", "d\n"),
    ] {
        write(&sides.there(name), bytes.as_bytes(), 0o644, 1);
    }
    std::fs::create_dir_all(sides.here("out")).unwrap();
    let out = format!("{}/", sides.here("out").display());
    for pattern in [sides.remote("logs/*.log"), ":~/logs/[ab].log".to_owned()] {
        let _ = std::fs::remove_dir_all(sides.here("out"));
        std::fs::create_dir_all(sides.here("out")).unwrap();
        let output = tether_cp(url, &[pattern.as_str(), out.as_str()]).await;
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        let mut landed: Vec<String> = std::fs::read_dir(sides.here("out"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        landed.sort();
        assert_eq!(landed, ["a.log", "b.log"], "{pattern}");
        assert_eq!(std::fs::read(sides.here("out/b.log")).unwrap(), b"b\n");
    }
    let nothing = sides.remote("logs/*.gz");
    let output = tether_cp(url, &[nothing.as_str(), out.as_str()]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&format!("{nothing}: no match on the executor")), "{stderr}");
}

/// Mistakes are refused before anything is copied, each in one line that says what is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mistakes_are_refused_with_what_is_wrong() {
    let sides = Sides::new("mistakes");
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let url = server.url.as_str();
    std::fs::create_dir_all(sides.here("dir")).unwrap();
    write(&sides.there("file"), b"x", 0o644, 1);
    write(&sides.here("local-file"), b"x", 0o644, 1);
    let here = |relative: &str| sides.here(relative).display().to_string();
    let there = |relative: &str| sides.there(relative).display().to_string();
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec![here("missing"), sides.remote("")],
            format!("{}: no such file or directory", here("missing")),
        ),
        (
            vec![sides.remote("missing"), here("")],
            format!("{} on the executor: no such file or directory", there("missing")),
        ),
        (
            vec![here("dir"), sides.remote("")],
            format!("{} is a directory; copy it with -r", here("dir")),
        ),
        (
            vec!["-r".into(), here("dir"), sides.remote("file")],
            format!(
                "cannot copy the directory {} onto the file {} on the executor",
                here("dir"),
                there("file")
            ),
        ),
        (
            vec![here("local-file"), here("dir")],
            format!(
                "{}: both sides are here; copy with cp, or write the executor's side as :/path",
                here("local-file")
            ),
        ),
        (
            vec![here("local-file"), here("dir"), sides.remote("file")],
            format!("{} on the executor: not a directory (several sources)", there("file")),
        ),
        (
            vec![here("local-file"), sides.remote("absent/new")],
            format!(
                "{} on the executor: no such directory; make it first, or copy into a directory \
                 that exists",
                there("absent")
            ),
        ),
        // A trailing `/` names a directory: no file is written under that name.
        (
            vec![here("local-file"), format!("{}/", sides.remote("nodir"))],
            format!(
                "{}/ on the executor: no such directory; make it first, or leave out the \
                 trailing / to copy to a file of that name",
                there("nodir")
            ),
        ),
        (
            vec![here("local-file"), format!("{}/", sides.remote("file"))],
            format!(
                "{}/ on the executor: not a directory; leave out the trailing / to copy onto \
                 the file",
                there("file")
            ),
        ),
        (
            vec![sides.remote("file"), format!("{}/", here("nodir"))],
            format!(
                "{}/: no such directory; make it first, or leave out the trailing / to copy to \
                 a file of that name",
                here("nodir")
            ),
        ),
        (
            vec![sides.remote("file"), here("absent/new")],
            format!(
                "{}: no such directory; make it first, or copy into a directory that exists",
                here("absent")
            ),
        ),
    ];
    for (args, message) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = tether_cp(url, &args).await;
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&output.stderr).trim_end(),
            format!("tether cp: {message}"),
            "{args:?}"
        );
    }
    assert_eq!(std::fs::read(sides.there("file")).unwrap(), b"x", "nothing was changed");
    assert!(!sides.there("nodir").exists() && !sides.here("nodir").exists(), "no file made");
}

/// `-` is standard input as the source and standard output as the destination, as a person
/// pipes with cat: a file up from a pipe (staged, then in place), down into one; a directory
/// is refused either way, in one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dash_is_standard_input_or_output() {
    use tokio::io::AsyncWriteExt as _;
    let sides = Sides::new("dash");
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let url = server.url.as_str();
    let bytes: Vec<u8> = (0..3_000_000u32).map(|n| (n % 251) as u8).collect();
    let up = {
        let mut child = tokio::process::Command::new(tether_binary().unwrap())
            .args(["cp", "--url", url, "-", &sides.remote("piped.bin")])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(&bytes).await.unwrap();
        drop(input);
        child.wait_with_output().await.unwrap()
    };
    assert_eq!(up.status.code(), Some(0), "{}", String::from_utf8_lossy(&up.stderr));
    assert_eq!(std::fs::read(sides.there("piped.bin")).unwrap(), bytes);
    let names: Vec<String> = std::fs::read_dir(sides.there(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["piped.bin"], "no temporary file left");

    let down = tether_cp(url, &[&sides.remote("piped.bin"), "-"]).await;
    assert_eq!(down.status.code(), Some(0), "{}", String::from_utf8_lossy(&down.stderr));
    assert_eq!(down.stdout, bytes);
    assert!(!std::path::Path::new("-").exists(), "no file named -");

    let refused = tether_cp(url, &[&sides.remote(""), "-"]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr).trim_end(),
        format!(
            "tether cp: {} on the executor is a directory; standard output takes one file",
            sides.there("").display()
        )
    );
}

/// As cp: a link named on the command line (without -r) is copied as what it leads to; a FIFO
/// met in a tree is skipped and counted, and the rest of the tree is copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_link_is_followed_and_a_fifo_in_a_tree_is_skipped() {
    let sides = Sides::new("links-fifos");
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let url = server.url.as_str();
    write(&sides.here("real.txt"), b"real\n", 0o644, 1);
    std::os::unix::fs::symlink("real.txt", sides.here("link")).unwrap();
    let output = tether_cp(url, &[sides.here("link").to_str().unwrap(), &sides.remote("")]).await;
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let copied = std::fs::symlink_metadata(sides.there("link")).unwrap();
    assert!(copied.is_file(), "a file, not a link");
    assert_eq!(std::fs::read(sides.there("link")).unwrap(), b"real\n");

    write(&sides.here("tree/a.txt"), b"a\n", 0o644, 1);
    write(&sides.here("tree/sub/b.txt"), b"b\n", 0o644, 1);
    let fifo = std::ffi::CString::new(sides.here("tree/fifo").to_str().unwrap()).unwrap();
    // SAFETY: a plain system call with a valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let tree = sides.here("tree").display().to_string();
    let output = tether_cp(url, &["-r", &tree, &sides.remote("tree")]).await;
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).trim_end(),
        "tether cp: 1 FIFOs, sockets or devices in the tree were skipped: a copy carries files, \
         directories and links"
    );
    assert_eq!(std::fs::read(sides.there("tree/a.txt")).unwrap(), b"a\n");
    assert_eq!(std::fs::read(sides.there("tree/sub/b.txt")).unwrap(), b"b\n");
    assert!(!sides.there("tree/fifo").exists());
}

/// A file or directory in a tree that this side may not read is said, skipped and counted,
/// and the rest is copied, as `cp -r` goes on; the copy then fails (1) naming how many. Run in
/// a user namespace of its own as an ordinary user, for whom mode 000 means what it says (the
/// tests may run as root).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_entries_in_a_tree_are_skipped_and_the_rest_copied() {
    use std::os::unix::fs::PermissionsExt as _;
    let sides = Sides::new("denied");
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    write(&sides.here("tree/a.txt"), b"a\n", 0o644, 1);
    write(&sides.here("tree/secret.txt"), b"secret\n", 0o644, 1);
    write(&sides.here("tree/locked/inner.txt"), b"inner\n", 0o644, 1);
    write(&sides.here("tree/sub/b.txt"), b"b\n", 0o644, 1);
    for closed in ["tree/secret.txt", "tree/locked"] {
        std::fs::set_permissions(sides.here(closed), std::fs::Permissions::from_mode(0o000))
            .unwrap();
    }
    let tree = sides.here("tree").display().to_string();
    let output = tokio::process::Command::new("unshare")
        .args(["--user", "--map-user=1000", "--map-group=1000", "--"])
        .arg(tether_binary().unwrap())
        .args(["cp", "--url", &server.url, "-r", &tree, &sides.remote("tree")])
        .env_remove("TETHER_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output).await.unwrap().unwrap();
    // Opened again so that the scratch directory can be removed.
    std::fs::set_permissions(sides.here("tree/locked"), std::fs::Permissions::from_mode(0o755))
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    for closed in ["secret.txt", "locked"] {
        let said = format!("tether cp: cannot read {tree}/{closed}: permission denied; skipped");
        assert!(lines.contains(&said.as_str()), "{said:?} not in {stderr}");
    }
    assert_eq!(
        lines.last().copied(),
        Some(
            "tether cp: 2 files or directories could not be read (permission denied) and were \
             skipped, each named above; the rest was copied: make them readable and copy again"
        )
    );
    assert_eq!(std::fs::read(sides.there("tree/a.txt")).unwrap(), b"a\n");
    assert_eq!(std::fs::read(sides.there("tree/sub/b.txt")).unwrap(), b"b\n");
    assert!(!sides.there("tree/secret.txt").exists());
    assert!(!sides.there("tree/locked").exists());
}

/// Coming down, a file or directory in a tree that the executor may not read (the server's
/// refusal, `permissionDenied`) is named in one line and skipped, whether read whole or
/// streamed, and the rest is copied; the copy then fails (1) naming how many. Named on the
/// command line it is the copy's error. The server runs as an ordinary user in a user
/// namespace of its own, for whom mode 000 means what it says (the tests may run as root).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_entries_on_the_executor_are_skipped_and_the_rest_copied() {
    use std::os::unix::fs::PermissionsExt as _;
    // Setup: a tree on the executor with a small file, a big one and a directory closed.
    let sides = Sides::new("denied-down");
    let wrapper = ["unshare", "--user", "--map-user=1000", "--map-group=1000", "--"];
    let server = ServerProcess::start_wrapped(Target::Tether, &wrapper, &[], &[]).await.unwrap();
    write(&sides.there("tree/a.txt"), b"a\n", 0o644, 1);
    write(&sides.there("tree/secret.txt"), b"secret\n", 0o644, 1);
    write(&sides.there("tree/big-secret.bin"), &vec![1; 3 * BLOCK], 0o644, 1);
    write(&sides.there("tree/locked/inner.txt"), b"inner\n", 0o644, 1);
    write(&sides.there("tree/sub/b.txt"), b"b\n", 0o644, 1);
    for closed in ["tree/secret.txt", "tree/big-secret.bin", "tree/locked"] {
        std::fs::set_permissions(sides.there(closed), std::fs::Permissions::from_mode(0o000))
            .unwrap();
    }
    let here = sides.here("tree").display().to_string();
    let there = sides.there("tree").display().to_string();

    // Exercise: the tree down, then one closed file named on the command line.
    let output = tether_cp(&server.url, &["-r", &sides.remote("tree"), &here]).await;
    let named = tether_cp(&server.url, &[&sides.remote("tree/secret.txt"), &here]).await;
    // Opened again so that the scratch directory can be removed.
    std::fs::set_permissions(sides.there("tree/locked"), std::fs::Permissions::from_mode(0o755))
        .unwrap();

    // Assert: each closed one named and skipped, the rest copied, and the count last.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    for closed in ["secret.txt", "big-secret.bin", "locked"] {
        let said = format!(
            "tether cp: cannot read {there}/{closed} on the executor: permission denied; skipped"
        );
        assert!(lines.contains(&said.as_str()), "{said:?} not in {stderr}");
    }
    assert_eq!(lines.len(), 4, "{stderr}");
    assert_eq!(
        lines.last().copied(),
        Some(
            "tether cp: 3 files or directories could not be read (permission denied) and were \
             skipped, each named above; the rest was copied: make them readable and copy again"
        )
    );
    assert_eq!(std::fs::read(sides.here("tree/a.txt")).unwrap(), b"a\n");
    assert_eq!(std::fs::read(sides.here("tree/sub/b.txt")).unwrap(), b"b\n");
    let mut left: Vec<String> = std::fs::read_dir(sides.here("tree"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["a.txt", "sub"], "nothing skipped is there, not even staged");
    let stderr = String::from_utf8_lossy(&named.stderr);
    assert_eq!(named.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!("tether cp: cannot read {there}/secret.txt on the executor: permission denied")
    );
}

/// A download killed outright (`kill -9`) cannot remove its staged file here, and no server
/// holds it: the next copy into that directory sweeps it away (this machine's side stages as
/// an executor's does), while the final name never held a part of the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_downloads_staged_file_is_swept_by_the_next_copy_into_its_directory() {
    // Setup: a download of a big file, killed once its staged file here holds some bytes.
    let sides = Sides::new("killed-download");
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    std::fs::File::create(sides.there("big.bin")).unwrap().set_len(2_000_000_000).unwrap();
    let into = format!("{}/", sides.here("").display());
    let mut download = tokio::process::Command::new(tether_binary().unwrap())
        .args(["cp", "--url", &server.url, &sides.remote("big.bin"), &into])
        .env_remove("TETHER_TOKEN")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let staged = wait::until_some(
        "the download's staged file to hold bytes",
        Duration::from_secs(60),
        || {
            std::fs::read_dir(sides.here("")).unwrap().find_map(|entry| {
                let entry = entry.unwrap();
                let name = entry.file_name().into_string().unwrap();
                let started = entry.metadata().is_ok_and(|m| m.len() > 0);
                (name.starts_with(".big.bin.tether-") && started).then_some(name)
            })
        },
    )
    .await;
    download.start_kill().unwrap();
    download.wait().await.unwrap();
    assert!(sides.here(&staged).exists(), "nothing could remove it yet");
    assert!(!sides.here("big.bin").exists(), "a partial file under the final name");

    // Exercise: the next copy into the same directory.
    std::fs::write(sides.there("small.txt"), b"small\n").unwrap();
    let output = tether_cp(&server.url, &[&sides.remote("small.txt"), &into]).await;
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));

    // Assert: the dead stage is gone, and the copy arrived.
    assert!(!sides.here(&staged).exists(), "the killed download's staged file was left");
    assert_eq!(std::fs::read(sides.here("small.txt")).unwrap(), b"small\n");
}
