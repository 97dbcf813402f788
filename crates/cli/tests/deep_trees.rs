//! Directory trees deeper than any path can name, against Tether: every operation that goes
//! down a tree answers — the work done, or an error that names its limit — and the server goes
//! on serving, on the same connection and on a new one.
//!
//! A sandboxed command can build such a tree in its workspace, so a request that recursed once
//! per level would overflow a thread's stack and abort the whole server, ending every session.
//! Each scenario builds one chain of [`LEVELS`] directories (`d/d/d/…`, its path far past
//! `PATH_MAX`, so each level is made beneath the descriptor of the one above) and removes what
//! is left of it when it ends, whether the scenario passed or not.
//!
//! `fs/walk` and capability discovery are not here: both stop at a depth they are given (at
//! most 64 levels), reading level by level from a queue.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{CWD, Mode, OFlags};
use serde_json::{Value, json};
use tether_testkit::{RpcClient, ServerProcess, Target};

/// How deep each scenario's chain is: far past the 15,000 levels that overflowed a worker's
/// stack, and still built in a few seconds.
const LEVELS: usize = 100_000;

/// A scratch directory under `/dev/shm` (memory: a disk with `discard` takes a minute over 100,000 removals) holding `tree`, a chain of [`LEVELS`] directories
/// named `d`; removed, iteratively, when dropped.
struct DeepTree {
    root: PathBuf,
}

impl DeepTree {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        let root =
            PathBuf::from(format!("/dev/shm/tether-deep-{}-{unique}-{name}", std::process::id()));
        std::fs::create_dir_all(root.join("tree")).unwrap();
        let tree = Self { root };
        let mut dir = open_directory(CWD, tree.path("tree")).unwrap();
        for _ in 0..LEVELS {
            rustix::fs::mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap();
            dir = open_directory(&dir, "d").unwrap();
        }
        tree
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    fn uri(&self, relative: &str) -> String {
        format!("file://{}", self.path(relative).display())
    }
}

impl Drop for DeepTree {
    /// `rm -rf`, which goes down a tree of any depth with a bounded number of directories open
    /// and no recursion (`fts`), whatever the server left of it.
    fn drop(&mut self) {
        let _ = std::process::Command::new("rm").arg("-rf").arg("--").arg(&self.root).status();
    }
}

fn open_directory(
    parent: impl rustix::fd::AsFd,
    path: impl rustix::path::Arg,
) -> rustix::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(parent, path, flags, Mode::empty())
}

async fn started() -> (ServerProcess, RpcClient) {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let (client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    (server, client)
}

/// The server still answers: on `client`'s connection, and on a new one.
async fn still_serves(server: &ServerProcess, client: &mut RpcClient, tree: &DeepTree) {
    let info = client.ok("environment/info", json!({})).await.unwrap();
    assert!(info.is_object(), "{info}");
    let (mut fresh, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let metadata = fresh.ok("fs/getMetadata", json!({"path": tree.uri("")})).await.unwrap();
    assert_eq!(metadata["isDirectory"], json!(true), "{metadata}");
}

/// `workspace-write` over the scratch directory: the project root, `/tmp` and `$TMPDIR`
/// writable, everything else read-only.
fn workspace_write(tree: &DeepTree) -> Value {
    let special = |kind: &str, access: &str| json!({"path": {"type": "special", "value": {"kind": kind}}, "access": access});
    json!({
        "permissions": {"type": "managed", "network": "restricted", "file_system": {
            "type": "restricted",
            "entries": [special("root", "read"), special("project_roots", "write"),
                special("slash_tmp", "write"), special("tmpdir", "write")]}},
        "cwd": tree.uri(""),
        "workspaceRoots": [tree.uri("")],
        "policyContext": {"cwd": tree.uri(""), "workspaceRoots": [tree.uri("")]},
        "userHomeDir": "file:///root",
        "windowsSandboxLevel": "disabled",
        "useLegacyLandlock": false,
    })
}

#[tokio::test]
async fn removing_a_deep_tree_removes_all_of_it_and_the_server_serves_on() {
    let tree = DeepTree::new("remove");
    let (server, mut client) = started().await;

    let removed = client.ok("fs/remove", json!({"path": tree.uri("tree"), "recursive": true}));
    assert_eq!(removed.await.unwrap(), json!({}));

    assert!(std::fs::symlink_metadata(tree.path("tree")).is_err(), "the tree is gone");
    still_serves(&server, &mut client, &tree).await;
}

/// The sandboxed variant runs the same removal in the fs helper, inside the sandbox, where the
/// tree lies in a bind mount of a directory (there a removal that climbed back through `..`
/// would cost the kernel a walk to the mount's root at every level).
#[tokio::test]
async fn removing_a_deep_tree_in_a_sandbox_removes_all_of_it_and_the_server_serves_on() {
    let tree = DeepTree::new("sandboxed-remove");
    let (server, mut client) = started().await;

    let params =
        json!({"path": tree.uri("tree"), "recursive": true, "sandbox": workspace_write(&tree)});
    assert_eq!(client.ok("fs/remove", params).await.unwrap(), json!({}));

    assert!(std::fs::symlink_metadata(tree.path("tree")).is_err(), "the tree is gone");
    still_serves(&server, &mut client, &tree).await;
}

/// A copy holds each level's directory open while it copies below it, so it stops at a depth
/// it names, having copied the levels above.
#[tokio::test]
async fn copying_a_deep_tree_stops_at_the_depth_limit_and_the_server_serves_on() {
    let tree = DeepTree::new("copy");
    let (server, mut client) = started().await;

    let params = json!({"sourcePath": tree.uri("tree"), "destinationPath": tree.uri("copy"),
        "recursive": true});
    let error = client.err("fs/copy", params).await.unwrap();

    assert_eq!(
        (error.code, error.message.as_str()),
        (
            -32600,
            "fs/copy copies at most 1024 levels of directories below sourcePath, and this tree \
             is deeper: copy its deeper parts separately"
        )
    );
    assert!(tree.path("copy/d/d/d").is_dir(), "the levels above the limit are copied");
    still_serves(&server, &mut client, &tree).await;
}

/// A `none` glob is searched on the server before the sandbox is built; the search goes down
/// the chain until a path grows too long to name.
#[tokio::test]
async fn searching_a_deep_tree_for_a_none_glob_refuses_the_sandbox_and_the_server_serves_on() {
    let tree = DeepTree::new("glob");
    std::fs::write(tree.path("file"), "x").unwrap();
    let (server, mut client) = started().await;
    let mut intent = workspace_write(&tree);
    let pattern = format!("{}/**/*.key", tree.path("tree").display());
    intent["permissions"]["file_system"]["entries"]
        .as_array_mut()
        .unwrap()
        .push(json!({"path": {"type": "glob_pattern", "pattern": pattern}, "access": "none"}));

    let params = json!({"path": tree.uri("file"), "sandbox": intent});
    let error = client.err("fs/readFile", params).await.unwrap();

    assert_eq!(error.code, -32603, "{}", error.message);
    assert!(error.message.contains("File name too long (os error 36)"), "{}", error.message);
    still_serves(&server, &mut client, &tree).await;
}

/// A walk reads level by level from a queue, at most 64 levels down (the depth is the
/// client's choice, so reaching it is not a truncation, as on the reference): it answers with
/// what it found down to there, and the server serves on.
#[tokio::test]
async fn walking_a_deep_tree_stops_at_its_depth_bound_and_the_server_serves_on() {
    let tree = DeepTree::new("walk");
    let (server, mut client) = started().await;

    let params = json!({"path": tree.uri("tree"), "options": {"maxDepth": 64,
        "maxDirectories": 10_000, "maxEntries": 50_000, "followDirectorySymlinks": false}});
    let walked = client.ok("fs/walk", params).await.unwrap();

    assert_eq!((&walked["truncated"], &walked["errors"]), (&json!(false), &json!([])));
    let entries = walked["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 65, "depth 0 (the root's children) to 64");
    let deepest = format!("{}{}", tree.uri("tree"), "/d".repeat(65));
    assert_eq!(entries[64]["path"], json!(deepest));
    still_serves(&server, &mut client, &tree).await;
}
