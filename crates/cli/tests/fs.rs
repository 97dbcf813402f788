//! The filesystem over the wire: every `fs/*` method except `fs/watchMissing`, with its limits
//! and its errors — each scenario run against Tether and against the reference.
//!
//! Both servers run on this machine, so a scenario sets files up with `std::fs` in a scratch
//! directory of its own (the two servers' runs of a scenario go on at the same time), drives the
//! server with raw JSON-RPC, and checks the answers and the files on disk.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde_json::{Value, json};
use tether_testkit::client::{b64decode, b64encode};
use tether_testkit::{RpcClient, RpcError, ServerProcess, Target, against_both};

against_both!(
    read_file_returns_regular_files_and_refuses_the_rest,
    read_file_reports_missing_foreign_and_oversized_paths,
    write_file_creates_or_truncates_in_place,
    write_file_reports_bad_targets_and_bad_base64,
    follow_symlinks_false_never_goes_through_a_link,
    create_directory_is_recursive_by_default,
    get_metadata_follows_links_but_says_it_was_one,
    get_metadata_times,
    canonicalize_resolves_every_link,
    read_directory_lists_in_readdir_order_following_links,
    read_directory_refuses_more_than_50000_entries,
    walk_is_breadth_first_and_sorted_per_directory,
    walk_bounds_set_truncated,
    walk_limits_and_roots,
    walk_follows_directory_links_only_when_asked_and_once,
    walk_reports_non_utf8_names_as_errors,
    remove_is_recursive_and_forced_by_default_and_spares_link_targets,
    copy_copies_files_and_trees_with_links_as_links,
    copy_refuses_what_it_cannot_copy,
    read_blocks_are_eof_only_when_short,
    write_blocks_fill_gaps_and_stay_within_signed_offsets,
    a_large_file_streams_in_whole_blocks_as_advertised,
    handle_ids_are_bounded_unique_and_limited_per_connection,
    handles_close_idempotently_and_fail_as_opened,
    a_handle_keeps_reading_its_file_after_the_path_is_replaced,
    handles_belong_to_their_connection,
    open_refuses_anything_but_a_regular_file_promptly,
);

const ENOENT: &str = "No such file or directory (os error 2)";
const EBADF: &str = "Bad file descriptor (os error 9)";
const EEXIST: &str = "File exists (os error 17)";
const ENOTDIR: &str = "Not a directory (os error 20)";
const EISDIR: &str = "Is a directory (os error 21)";
const EINVAL: &str = "Invalid argument (os error 22)";
const ENOTEMPTY: &str = "Directory not empty (os error 39)";
const CONTAINS_LINK: &str = "path contains a symbolic link";

/// A scenario's private directory, removed when it ends.
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn new(target: Target, name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir()
            .join(format!("tether-fs-wire-{}-{unique}-{target:?}-{name}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        Self { root: std::fs::canonicalize(root).unwrap() }
    }

    fn path(&self, relative: &str) -> PathBuf {
        if relative.is_empty() { self.root.clone() } else { self.root.join(relative) }
    }

    /// The URI a client sends for `relative` (the scenarios' names need no escaping).
    fn uri(&self, relative: &str) -> String {
        format!("file://{}", self.path(relative).display())
    }

    fn file(&self, relative: &str, contents: &[u8]) -> PathBuf {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
        path
    }

    fn dir(&self, relative: &str) -> PathBuf {
        let path = self.path(relative);
        std::fs::create_dir_all(&path).unwrap();
        path
    }

    fn symlink(&self, target: &str, relative: &str) {
        std::os::unix::fs::symlink(target, self.path(relative)).unwrap();
    }

    fn fifo(&self, relative: &str) -> PathBuf {
        let path = self.path(relative);
        let mode = rustix::fs::Mode::from_raw_mode(0o644);
        rustix::fs::mknodat(rustix::fs::CWD, &path, rustix::fs::FileType::Fifo, mode, 0).unwrap();
        path
    }

    fn read(&self, relative: &str) -> Vec<u8> {
        std::fs::read(self.path(relative)).unwrap()
    }

    fn exists(&self, relative: &str) -> bool {
        std::fs::symlink_metadata(self.path(relative)).is_ok()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

async fn started(target: Target) -> (ServerProcess, RpcClient) {
    let server = ServerProcess::start(target).await.unwrap();
    let (client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    (server, client)
}

#[track_caller]
fn assert_error(error: RpcError, code: i64, message: &str) {
    assert_eq!((error.code, error.message.as_str()), (code, message));
}

/// `ELOOP`'s text is the C library's own (musl and glibc word it differently); its number is
/// the contract.
#[track_caller]
fn assert_eloop(error: RpcError) {
    assert_eq!(error.code, -32603, "{error}");
    assert!(error.message.ends_with("(os error 40)"), "{error}");
}

fn walk_options(max_depth: u64, max_directories: u64, max_entries: u64) -> Value {
    json!({"maxDepth": max_depth, "maxDirectories": max_directories, "maxEntries": max_entries,
        "followDirectorySymlinks": false})
}

/// `(path below the scratch root, kind)` of each walked entry, in the walk's order.
fn walked(scratch: &Scratch, walk: &Value) -> Vec<(String, String)> {
    let root = scratch.uri("");
    walk["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            let path = entry["path"].as_str().unwrap().strip_prefix(&root).unwrap();
            (path.trim_start_matches('/').to_owned(), entry["kind"].as_str().unwrap().to_owned())
        })
        .collect()
}

fn pairs(entries: &[(&str, &str)]) -> Vec<(String, String)> {
    entries.iter().map(|(path, kind)| ((*path).to_owned(), (*kind).to_owned())).collect()
}

// ---------------------------------------------------------------------------------------------
// fs/readFile, fs/writeFile

async fn read_file_returns_regular_files_and_refuses_the_rest(target: Target) {
    let scratch = Scratch::new(target, "read");
    let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let data = scratch.file("data.bin", &bytes);
    scratch.symlink("data.bin", "link");
    let dir = scratch.dir("dir");
    let fifo = scratch.fifo("fifo");
    let (_server, mut client) = started(target).await;

    for uri in [
        scratch.uri("data.bin"),
        scratch.uri("link"),
        format!("file://localhost{}", data.display()),
        format!("{}/", scratch.uri("data.bin")),
    ] {
        let read = client.ok("fs/readFile", json!({"path": uri})).await.unwrap();
        assert_eq!(b64decode(&read["dataBase64"]), bytes, "{uri}");
    }

    // A FIFO is refused without being opened (an open would wait for a writer).
    let started_at = Instant::now();
    let error = client.err("fs/readFile", json!({"path": scratch.uri("fifo")})).await.unwrap();
    assert_error(error, -32600, &format!("path `{}` is not a file", fifo.display()));
    assert!(started_at.elapsed() < Duration::from_secs(5));
    for uri in [scratch.uri("dir"), format!("{}/", scratch.uri("dir"))] {
        let error = client.err("fs/readFile", json!({"path": uri})).await.unwrap();
        assert_error(error, -32600, &format!("path `{}` is not a file", dir.display()));
    }
    let error = client.err("fs/readFile", json!({"path": "file:///dev/null"})).await.unwrap();
    assert_error(error, -32600, "path `/dev/null` is not a file");
    for name in ["dir", "fifo"] {
        let params = json!({"path": scratch.uri(name), "followSymlinks": false});
        let error = client.err("fs/readFile", params).await.unwrap();
        assert_error(error, -32600, "path is not a regular file");
    }
}

async fn read_file_reports_missing_foreign_and_oversized_paths(target: Target) {
    let scratch = Scratch::new(target, "read-errors");
    let file = scratch.file("file.txt", b"x");
    scratch.symlink("nowhere", "dangling");
    let big = std::fs::File::create(scratch.path("big")).unwrap();
    big.set_len(512 * 1024 * 1024 + 1).unwrap();
    let (_server, mut client) = started(target).await;

    for name in ["missing", "dangling", "missing/deeper"] {
        let error = client.err("fs/readFile", json!({"path": scratch.uri(name)})).await.unwrap();
        assert_error(error, -32004, ENOENT);
    }
    let error = client.err("fs/readFile", json!({"path": scratch.uri("file.txt/x")})).await;
    assert_error(error.unwrap(), -32603, ENOTDIR);
    let foreign = format!("file://otherhost{}", file.display());
    let error = client.err("fs/readFile", json!({"path": foreign})).await.unwrap();
    assert_error(error, -32600, &format!("'{foreign}' is invalid on 'linux'"));
    for follow in [true, false] {
        let params = json!({"path": scratch.uri("big"), "followSymlinks": follow});
        let error = client.err("fs/readFile", params).await.unwrap();
        assert_error(error, -32600, "file is too large to read: limit is 536870912 bytes");
    }
    // Decoding refuses native paths before anything else.
    let error = client.err("fs/readFile", json!({"path": "/tmp/x"})).await.unwrap();
    assert_error(error, -32602, "invalid URI: relative URL without a base");
}

async fn write_file_creates_or_truncates_in_place(target: Target) {
    let scratch = Scratch::new(target, "write");
    let existing = scratch.file("existing.txt", b"a much longer original text");
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o751)).unwrap();
    std::fs::hard_link(&existing, scratch.path("hard-link.txt")).unwrap();
    let inode = std::fs::metadata(&existing).unwrap().ino();
    scratch.file("target.txt", b"target");
    scratch.symlink("target.txt", "link");
    scratch.symlink("made-through-link.txt", "dangling");
    let (_server, mut client) = started(target).await;

    let binary: Vec<u8> = (0..=255u8).collect();
    for (name, bytes) in [
        ("new.bin", &binary[..]),
        ("existing.txt", b"short"),
        ("link", b"through"),
        ("dangling", b"made"),
        ("empty", b""),
    ] {
        let params = json!({"path": scratch.uri(name), "dataBase64": b64encode(bytes)});
        assert_eq!(client.ok("fs/writeFile", params).await.unwrap(), json!({}));
    }

    assert_eq!(scratch.read("new.bin"), binary);
    let metadata = std::fs::metadata(&existing).unwrap();
    assert_eq!((metadata.ino(), metadata.mode() & 0o777), (inode, 0o751), "written in place");
    assert_eq!(scratch.read("hard-link.txt"), b"short");
    assert_eq!(scratch.read("target.txt"), b"through");
    assert!(std::fs::symlink_metadata(scratch.path("link")).unwrap().is_symlink());
    assert_eq!(scratch.read("made-through-link.txt"), b"made");
    assert_eq!(scratch.read("empty"), b"");
    let read = client.ok("fs/readFile", json!({"path": scratch.uri("new.bin")})).await.unwrap();
    assert_eq!(b64decode(&read["dataBase64"]), binary);
}

async fn write_file_reports_bad_targets_and_bad_base64(target: Target) {
    let scratch = Scratch::new(target, "write-errors");
    scratch.dir("dir");
    let (_server, mut client) = started(target).await;
    let write = |name: &str, data: &str| json!({"path": scratch.uri(name), "dataBase64": data});

    let error = client.err("fs/writeFile", write("missing/x.txt", "eA==")).await.unwrap();
    assert_error(error, -32004, ENOENT);
    assert_error(client.err("fs/writeFile", write("dir", "eA==")).await.unwrap(), -32603, EISDIR);
    let prefix = "fs/writeFile requires valid base64 dataBase64: ";
    let error = client.err("fs/writeFile", write("bad.txt", "!!")).await.unwrap();
    assert_error(error, -32600, &format!("{prefix}Invalid symbol 33, offset 0."));
    let error = client.err("fs/writeFile", write("bad.txt", "eA=")).await.unwrap();
    assert_error(error, -32600, &format!("{prefix}Invalid padding"));
    assert!(!scratch.exists("bad.txt"));
    // The data is checked before the path.
    let foreign = json!({"path": "file://otherhost/x", "dataBase64": "!!"});
    let error = client.err("fs/writeFile", foreign).await.unwrap();
    assert_error(error, -32600, &format!("{prefix}Invalid symbol 33, offset 0."));
}

// ---------------------------------------------------------------------------------------------
// followSymlinks: false

async fn follow_symlinks_false_never_goes_through_a_link(target: Target) {
    let scratch = Scratch::new(target, "no-follow");
    scratch.file("a.txt", b"original");
    scratch.file("sub/s.txt", b"inside");
    scratch.symlink("a.txt", "link");
    scratch.symlink("sub", "dirlink");
    scratch.symlink("nowhere", "dangling");
    let (_server, mut client) = started(target).await;
    let no_follow = |name: &str| json!({"path": scratch.uri(name), "followSymlinks": false});
    let with = |mut params: Value, key: &str, value: Value| {
        params[key] = value;
        params
    };

    // readFile and writeFile: a link last is ELOOP, a link before that ENOTDIR.
    assert_eloop(client.err("fs/readFile", no_follow("link")).await.unwrap());
    assert_eloop(client.err("fs/readFile", no_follow("dangling")).await.unwrap());
    let error = client.err("fs/readFile", no_follow("dirlink/s.txt")).await.unwrap();
    assert_error(error, -32603, ENOTDIR);
    let read = client.ok("fs/readFile", no_follow("a.txt")).await.unwrap();
    assert_eq!(b64decode(&read["dataBase64"]), b"original");
    let write = |name: &str| with(no_follow(name), "dataBase64", json!("eA=="));
    assert_eloop(client.err("fs/writeFile", write("link")).await.unwrap());
    let error = client.err("fs/writeFile", write("dirlink/new.txt")).await.unwrap();
    assert_error(error, -32603, ENOTDIR);
    client.ok("fs/writeFile", write("new.txt")).await.unwrap();
    assert_eq!(
        (scratch.read("a.txt"), scratch.exists("sub/new.txt")),
        (b"original".to_vec(), false)
    );
    assert_eq!(scratch.read("new.txt"), b"x");

    // getMetadata: a link last is refused by name.
    for name in ["link", "dangling"] {
        let error = client.err("fs/getMetadata", no_follow(name)).await.unwrap();
        assert_error(error, -32600, CONTAINS_LINK);
    }
    let error = client.err("fs/getMetadata", no_follow("dirlink/s.txt")).await.unwrap();
    assert_error(error, -32603, ENOTDIR);
    let error = client.err("fs/getMetadata", no_follow("missing/x")).await.unwrap();
    assert_error(error, -32004, ENOENT);
    let own = client.ok("fs/getMetadata", no_follow("a.txt")).await.unwrap();
    assert_eq!((own["isFile"].clone(), own["isSymlink"].clone()), (json!(true), json!(false)));

    // createDirectory: a link (or a file) on the way is not a directory.
    for name in ["dirlink/made", "dirlink", "a.txt"] {
        let error = client.err("fs/createDirectory", no_follow(name)).await.unwrap();
        assert_error(error, -32603, ENOTDIR);
    }
    let exact = with(no_follow("dirlink"), "recursive", json!(false));
    assert_error(client.err("fs/createDirectory", exact).await.unwrap(), -32603, EEXIST);
    client.ok("fs/createDirectory", no_follow("fresh/deeper")).await.unwrap();
    client.ok("fs/createDirectory", no_follow("sub")).await.unwrap();
    assert!(scratch.path("fresh/deeper").is_dir() && !scratch.exists("sub/made"));

    // remove: no tree without following; a link last is refused by name.
    let error = client.err("fs/remove", no_follow("link")).await.unwrap();
    assert_error(error, -32603, "recursive no-follow removal is unsupported");
    let single = |name: &str| with(no_follow(name), "recursive", json!(false));
    assert_error(client.err("fs/remove", single("link")).await.unwrap(), -32600, CONTAINS_LINK);
    let error = client.err("fs/remove", single("dirlink/s.txt")).await.unwrap();
    assert_error(error, -32603, ENOTDIR);
    assert!(scratch.exists("link") && scratch.exists("sub/s.txt"));
    client.ok("fs/remove", single("a.txt")).await.unwrap();
    client.ok("fs/remove", single("missing")).await.unwrap();
    let unforced = with(single("missing"), "force", json!(false));
    assert_error(client.err("fs/remove", unforced).await.unwrap(), -32004, ENOENT);
    assert!(!scratch.exists("a.txt"));
}

// ---------------------------------------------------------------------------------------------
// fs/createDirectory, fs/getMetadata, fs/canonicalize

async fn create_directory_is_recursive_by_default(target: Target) {
    let scratch = Scratch::new(target, "mkdir");
    scratch.file("file.txt", b"x");
    let (_server, mut client) = started(target).await;

    for params in [
        json!({"path": scratch.uri("a/b/c")}),
        json!({"path": scratch.uri("a/b/c")}),
        json!({"path": scratch.uri("n/m"), "recursive": null}),
        json!({"path": scratch.uri("a/new"), "recursive": false}),
        json!({"path": "file:///"}),
    ] {
        assert_eq!(client.ok("fs/createDirectory", params).await.unwrap(), json!({}));
    }
    assert!(["a/b/c", "n/m", "a/new"].iter().all(|name| scratch.path(name).is_dir()));

    for (params, code, message) in [
        (json!({"path": scratch.uri("x/y"), "recursive": false}), -32004, ENOENT),
        (json!({"path": scratch.uri("a"), "recursive": false}), -32603, EEXIST),
        (json!({"path": scratch.uri("file.txt")}), -32603, EEXIST),
        (json!({"path": scratch.uri("file.txt/x")}), -32603, ENOTDIR),
    ] {
        assert_error(client.err("fs/createDirectory", params).await.unwrap(), code, message);
    }
}

async fn get_metadata_follows_links_but_says_it_was_one(target: Target) {
    let scratch = Scratch::new(target, "metadata");
    let file = scratch.file("file.txt", b"123456789");
    scratch.dir("dir");
    scratch.symlink("file.txt", "file-link");
    scratch.symlink("dir", "dir-link");
    scratch.symlink("nowhere", "dangling");
    scratch.fifo("fifo");
    let (_server, mut client) = started(target).await;
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    let mtime_ms = mtime.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;

    let metadata = client.ok("fs/getMetadata", json!({"path": scratch.uri("file.txt")})).await;
    assert_eq!(
        metadata.unwrap(),
        json!({"isDirectory": false, "isFile": true, "isSymlink": false, "size": 9,
            "createdAtMs": 0, "modifiedAtMs": mtime_ms})
    );
    for (name, directory, file, symlink) in [
        ("file-link", false, true, true),
        ("dir", true, false, false),
        ("dir-link", true, false, true),
        ("fifo", false, false, false),
    ] {
        let metadata = client.ok("fs/getMetadata", json!({"path": scratch.uri(name)})).await;
        let metadata = metadata.unwrap();
        let kinds = [&metadata["isDirectory"], &metadata["isFile"], &metadata["isSymlink"]];
        assert_eq!(kinds, [&json!(directory), &json!(file), &json!(symlink)], "{name}");
    }
    let linked = client.ok("fs/getMetadata", json!({"path": scratch.uri("file-link")})).await;
    assert_eq!(linked.unwrap()["size"], 9, "the target's size");
    for name in ["dangling", "missing"] {
        let error = client.err("fs/getMetadata", json!({"path": scratch.uri(name)})).await;
        assert_error(error.unwrap(), -32004, ENOENT);
    }
    let error = client.err("fs/getMetadata", json!({"path": scratch.uri("file.txt/x")})).await;
    assert_error(error.unwrap(), -32603, ENOTDIR);
}

/// Following links, the reference reports no creation time and nothing before 1970; not
/// following them, the birth time and signed times.
async fn get_metadata_times(target: Target) {
    let scratch = Scratch::new(target, "metadata-times");
    let old = scratch.file("old.txt", b"x");
    let before_1970 = UNIX_EPOCH - Duration::from_millis(1_234);
    std::fs::File::options().write(true).open(&old).unwrap().set_modified(before_1970).unwrap();
    let birth = rustix::fs::statx(
        rustix::fs::CWD,
        &old,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        rustix::fs::StatxFlags::BTIME,
    )
    .unwrap();
    let has_birth = birth.stx_mask & rustix::fs::StatxFlags::BTIME.bits() != 0;
    let birth_ms = birth.stx_btime.tv_sec * 1000 + i64::from(birth.stx_btime.tv_nsec / 1_000_000);
    let (_server, mut client) = started(target).await;

    let followed = client.ok("fs/getMetadata", json!({"path": scratch.uri("old.txt")})).await;
    let followed = followed.unwrap();
    assert_eq!((&followed["createdAtMs"], &followed["modifiedAtMs"]), (&json!(0), &json!(0)));
    let own = json!({"path": scratch.uri("old.txt"), "followSymlinks": false});
    let own = client.ok("fs/getMetadata", own).await.unwrap();
    assert_eq!(own["modifiedAtMs"], -1_234);
    assert_eq!(own["createdAtMs"], if has_birth { birth_ms } else { 0 });
}

async fn canonicalize_resolves_every_link(target: Target) {
    let scratch = Scratch::new(target, "canonicalize");
    scratch.file("real/file.txt", b"x");
    scratch.symlink("real", "alias");
    scratch.symlink("nowhere", "dangling");
    let (_server, mut client) = started(target).await;

    for (uri, canonical) in [
        (scratch.uri("alias/file.txt"), scratch.uri("real/file.txt")),
        (format!("{}/", scratch.uri("alias")), scratch.uri("real")),
        (format!("file://localhost{}", scratch.path("real").display()), scratch.uri("real")),
        ("file:///".to_owned(), "file:///".to_owned()),
    ] {
        let result = client.ok("fs/canonicalize", json!({"path": uri})).await.unwrap();
        assert_eq!(result, json!({"path": canonical}));
    }
    for name in ["missing", "dangling"] {
        let error = client.err("fs/canonicalize", json!({"path": scratch.uri(name)})).await;
        assert_error(error.unwrap(), -32004, ENOENT);
    }
}

// ---------------------------------------------------------------------------------------------
// fs/readDirectory

async fn read_directory_lists_in_readdir_order_following_links(target: Target) {
    let scratch = Scratch::new(target, "read-directory");
    scratch.file("list/file.txt", b"x");
    scratch.dir("list/dir");
    scratch.symlink("file.txt", "list/file-link");
    scratch.symlink("dir", "list/dir-link");
    scratch.symlink("nowhere", "list/dangling");
    scratch.fifo("list/fifo");
    let mut name = b"bad-".to_vec();
    name.push(0xff);
    std::fs::write(scratch.path("list").join(std::ffi::OsStr::from_bytes(&name)), b"x").unwrap();
    let (_server, mut client) = started(target).await;

    let listed = client.ok("fs/readDirectory", json!({"path": scratch.uri("list")})).await;
    let listed = listed.unwrap()["entries"].as_array().unwrap().clone();
    let expected: Vec<Value> = std::fs::read_dir(scratch.path("list"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "dangling")
        .map(|name| {
            let (directory, file) = match name.as_str() {
                "dir" | "dir-link" => (true, false),
                "fifo" => (false, false),
                _ => (false, true),
            };
            json!({"fileName": name, "isDirectory": directory, "isFile": file})
        })
        .collect();
    assert_eq!(listed, expected, "the OS's order, lossy names, dangling links left out");
    assert!(listed.iter().any(|entry| entry["fileName"] == "bad-\u{fffd}"));

    let error = client.err("fs/readDirectory", json!({"path": scratch.uri("list/file.txt")})).await;
    assert_error(error.unwrap(), -32603, ENOTDIR);
    let error = client.err("fs/readDirectory", json!({"path": scratch.uri("missing")})).await;
    assert_error(error.unwrap(), -32004, ENOENT);
}

async fn read_directory_refuses_more_than_50000_entries(target: Target) {
    let scratch = Scratch::new(target, "read-directory-limit");
    let dir = scratch.dir("many");
    for index in 0..=50_000 {
        std::fs::File::create(dir.join(index.to_string())).unwrap();
    }
    scratch.symlink("nowhere", "many/dangling");
    let (_server, mut client) = started(target).await;
    let list = json!({"path": scratch.uri("many")});

    let error = client.err("fs/readDirectory", list.clone()).await.unwrap();
    assert_error(error, -32603, "fs/readDirectory returned 50001 entries; limit is 50000");
    // Dangling links are not entries, so they do not count.
    std::fs::remove_file(dir.join("0")).unwrap();
    let listed = client.ok("fs/readDirectory", list).await.unwrap();
    assert_eq!(listed["entries"].as_array().unwrap().len(), 50_000);
}

// ---------------------------------------------------------------------------------------------
// fs/walk

/// ```text
/// tree/.hid/x/f4  tree/a/b/c/  tree/a/b/f3  tree/a/f2  tree/e/  tree/f1
/// tree/flink -> f1  tree/dlink -> a  tree/dang -> nowhere  tree/fifo
/// ```
fn walk_tree(target: Target, name: &str) -> Scratch {
    let scratch = Scratch::new(target, name);
    scratch.file("tree/.hid/x/f4", b"4");
    scratch.dir("tree/a/b/c");
    scratch.file("tree/a/b/f3", b"3");
    scratch.file("tree/a/f2", b"2");
    scratch.dir("tree/e");
    scratch.file("tree/f1", b"1");
    scratch.symlink("f1", "tree/flink");
    scratch.symlink("a", "tree/dlink");
    scratch.symlink("nowhere", "tree/dang");
    scratch.fifo("tree/fifo");
    scratch
}

async fn walk_is_breadth_first_and_sorted_per_directory(target: Target) {
    let scratch = walk_tree(target, "walk");
    let (_server, mut client) = started(target).await;
    let walk = |options: Value| json!({"path": scratch.uri("tree"), "options": options});

    let all = client.ok("fs/walk", walk(walk_options(10, 100, 100))).await.unwrap();
    assert_eq!(
        walked(&scratch, &all),
        pairs(&[
            ("tree/.hid", "directory"),
            ("tree/a", "directory"),
            ("tree/e", "directory"),
            ("tree/f1", "file"),
            ("tree/.hid/x", "directory"),
            ("tree/a/b", "directory"),
            ("tree/a/f2", "file"),
            ("tree/.hid/x/f4", "file"),
            ("tree/a/b/c", "directory"),
            ("tree/a/b/f3", "file"),
        ])
    );
    assert_eq!((&all["errors"], &all["truncated"]), (&json!([]), &json!(false)));

    for (depth, count) in [(0, 4), (1, 7)] {
        let shallow = client.ok("fs/walk", walk(walk_options(depth, 100, 100))).await.unwrap();
        assert_eq!(walked(&scratch, &shallow).len(), count, "depth {depth}");
        assert_eq!(shallow["truncated"], false, "a depth bound is not truncation");
    }

    let mut pruning = walk_options(10, 100, 100);
    pruning["pruneHiddenDirectories"] = json!(true);
    let pruned = client.ok("fs/walk", walk(pruning)).await.unwrap();
    let paths: Vec<String> = walked(&scratch, &pruned).into_iter().map(|(path, _)| path).collect();
    assert!(paths.contains(&"tree/.hid".to_owned()), "{paths:?}");
    assert!(!paths.iter().any(|path| path.starts_with("tree/.hid/")), "{paths:?}");
}

async fn walk_bounds_set_truncated(target: Target) {
    let scratch = walk_tree(target, "walk-bounds");
    let (_server, mut client) = started(target).await;
    let walk = |options: Value| json!({"path": scratch.uri("tree"), "options": options});

    let two = client.ok("fs/walk", walk(walk_options(10, 100, 2))).await.unwrap();
    assert_eq!(
        walked(&scratch, &two),
        pairs(&[("tree/.hid", "directory"), ("tree/a", "directory")])
    );
    assert_eq!(two["truncated"], true);
    // Entries examined count, left-out links and FIFOs included: the root has 7.
    let seven = client.ok("fs/walk", walk(walk_options(10, 100, 7))).await.unwrap();
    assert_eq!((walked(&scratch, &seven).len(), &seven["truncated"]), (4, &json!(true)));
    let exact = client.ok("fs/walk", walk(walk_options(10, 100, 13))).await.unwrap();
    assert_eq!((walked(&scratch, &exact).len(), &exact["truncated"]), (10, &json!(false)));

    // Directories read, the root included: its subdirectories are listed, not entered.
    let root_only = client.ok("fs/walk", walk(walk_options(10, 1, 100))).await.unwrap();
    assert_eq!((walked(&scratch, &root_only).len(), &root_only["truncated"]), (4, &json!(true)));
    let two_dirs = client.ok("fs/walk", walk(walk_options(10, 2, 100))).await.unwrap();
    assert_eq!(walked(&scratch, &two_dirs).last().unwrap().0, "tree/.hid/x");
    assert_eq!(two_dirs["truncated"], true);
}

async fn walk_limits_and_roots(target: Target) {
    let scratch = walk_tree(target, "walk-limits");
    let (_server, mut client) = started(target).await;

    let zero = "filesystem walk limits must be greater than zero";
    let exceed =
        "filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000";
    for (options, message) in [
        (walk_options(8, 0, 100), zero),
        (walk_options(8, 100, 0), zero),
        (walk_options(65, 0, 0), zero),
        (walk_options(65, 100, 100), exceed),
        (walk_options(64, 10_001, 100), exceed),
        (walk_options(64, 100, 50_001), exceed),
    ] {
        // Checked before the path.
        let params = json!({"path": "file://otherhost/x", "options": options});
        assert_error(client.err("fs/walk", params).await.unwrap(), -32600, message);
    }
    let widest = json!({"path": scratch.uri("tree"), "options": walk_options(64, 10_000, 50_000)});
    client.ok("fs/walk", widest).await.unwrap();

    let empty = json!({"entries": [], "errors": [], "truncated": false});
    for name in ["tree/f1", "tree/fifo", "tree/dlink"] {
        let params = json!({"path": scratch.uri(name), "options": walk_options(10, 100, 100)});
        assert_eq!(client.ok("fs/walk", params).await.unwrap(), empty, "{name}");
    }
    for name in ["missing", "tree/dang"] {
        let params = json!({"path": scratch.uri(name), "options": walk_options(10, 100, 100)});
        assert_error(client.err("fs/walk", params).await.unwrap(), -32004, ENOENT);
    }
    let options = json!({"maxDepth": 1, "maxDirectories": 1, "maxEntries": 1});
    let error = client.err("fs/walk", json!({"path": scratch.uri("tree"), "options": options}));
    assert_error(error.await.unwrap(), -32602, "missing field `followDirectorySymlinks`");
}

async fn walk_follows_directory_links_only_when_asked_and_once(target: Target) {
    let scratch = walk_tree(target, "walk-links");
    scratch.dir("outside/inner");
    scratch.symlink("../../outside", "tree/e/out");
    let (_server, mut client) = started(target).await;
    let mut following = walk_options(10, 100, 100);
    following["followDirectorySymlinks"] = json!(true);

    let walk = json!({"path": scratch.uri("tree"), "options": following.clone()});
    let walk = client.ok("fs/walk", walk).await.unwrap();
    let paths: Vec<String> = walked(&scratch, &walk).into_iter().map(|(path, _)| path).collect();
    assert_eq!(
        paths,
        [
            "tree/.hid",
            "tree/a",
            "tree/dlink",
            "tree/e",
            "tree/f1",
            "tree/.hid/x",
            "tree/a/b",
            "tree/a/f2",
            "tree/e/out",
            "tree/.hid/x/f4",
            "tree/a/b/c",
            "tree/a/b/f3",
            "tree/e/out/inner",
        ],
        "`dlink` is `a`, walked once; `e/out` leads elsewhere"
    );

    let walk = json!({"path": scratch.uri("tree/dlink"), "options": following});
    let walk = client.ok("fs/walk", walk).await.unwrap();
    assert_eq!(
        walked(&scratch, &walk),
        pairs(&[
            ("tree/dlink/b", "directory"),
            ("tree/dlink/f2", "file"),
            ("tree/dlink/b/c", "directory"),
            ("tree/dlink/b/f3", "file"),
        ])
    );
}

async fn walk_reports_non_utf8_names_as_errors(target: Target) {
    let scratch = Scratch::new(target, "walk-non-utf8");
    let mut name = b"bad-".to_vec();
    name.push(0xff);
    std::fs::write(scratch.path("").join(std::ffi::OsStr::from_bytes(&name)), b"x").unwrap();
    scratch.file("good", b"x");
    let (_server, mut client) = started(target).await;

    let walk = json!({"path": scratch.uri(""), "options": walk_options(0, 1, 10)});
    let walk = client.ok("fs/walk", walk).await.unwrap();
    // Names travel as strings: the lossy name leads nowhere, and is reported for its path.
    assert_eq!(
        walk,
        json!({
            "entries": [{"path": scratch.uri("good"), "kind": "file"}],
            "errors": [{"path": format!("{}/bad-%EF%BF%BD", scratch.uri("")), "message": ENOENT}],
            "truncated": false,
        })
    );
}

// ---------------------------------------------------------------------------------------------
// fs/remove, fs/copy

async fn remove_is_recursive_and_forced_by_default_and_spares_link_targets(target: Target) {
    let scratch = Scratch::new(target, "remove");
    scratch.file("tree/a/b/file.txt", b"x");
    scratch.file("full/file.txt", b"x");
    scratch.dir("empty");
    scratch.file("file.txt", b"keep");
    scratch.fifo("fifo");
    scratch.file("target/keep.txt", b"keep");
    scratch.symlink("target", "dir-link");
    scratch.symlink("target", "dir-link-2");
    scratch.symlink("file.txt", "file-link");
    scratch.symlink("nowhere", "dangling");
    let (_server, mut client) = started(target).await;

    for params in [
        json!({"path": scratch.uri("tree")}),
        json!({"path": scratch.uri("missing")}),
        json!({"path": scratch.uri("missing/deeper")}),
        json!({"path": scratch.uri("fifo"), "force": false}),
        json!({"path": scratch.uri("empty"), "recursive": false}),
        json!({"path": scratch.uri("dir-link")}),
        json!({"path": scratch.uri("dir-link-2"), "recursive": false, "force": false}),
        json!({"path": scratch.uri("file-link"), "force": false}),
        json!({"path": scratch.uri("dangling"), "force": false}),
    ] {
        assert_eq!(client.ok("fs/remove", params).await.unwrap(), json!({}));
    }
    for gone in ["tree", "fifo", "empty", "dir-link", "dir-link-2", "file-link", "dangling"] {
        assert!(!scratch.exists(gone), "{gone}");
    }
    assert_eq!(
        (scratch.read("target/keep.txt"), scratch.read("file.txt")),
        (b"keep".to_vec(), b"keep".to_vec())
    );

    for (params, code, message) in [
        (json!({"path": scratch.uri("missing"), "force": false}), -32004, ENOENT),
        (json!({"path": scratch.uri("full"), "recursive": false}), -32603, ENOTEMPTY),
        (json!({"path": scratch.uri("file.txt/x")}), -32603, ENOTDIR),
    ] {
        assert_error(client.err("fs/remove", params).await.unwrap(), code, message);
    }
    assert!(scratch.exists("full/file.txt"));
}

async fn copy_copies_files_and_trees_with_links_as_links(target: Target) {
    let scratch = Scratch::new(target, "copy");
    let script = scratch.file("src/run.sh", b"#!/bin/sh\n");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).unwrap();
    scratch.file("src/sub/deep.txt", b"deep");
    scratch.symlink("run.sh", "src/link");
    scratch.symlink("../outside.txt", "src/escape");
    scratch.symlink("nowhere", "src/dangling");
    scratch.fifo("src/fifo");
    scratch.file("merge/run.sh", b"old");
    scratch.file("merge/kept.txt", b"kept");
    scratch.symlink("src", "src-link");
    let (_server, mut client) = started(target).await;
    let copy = |from: &str, to: &str, recursive: bool| {
        json!({"sourcePath": scratch.uri(from), "destinationPath": scratch.uri(to),
            "recursive": recursive})
    };

    for params in [
        copy("src/run.sh", "copied.sh", false),
        copy("src/run.sh", "copied-too.sh", true),
        copy("src", "out/nested", true),
        copy("src", "merge", true),
        copy("src-link", "link-copy", false),
    ] {
        assert_eq!(client.ok("fs/copy", params).await.unwrap(), json!({}));
    }

    assert_eq!(scratch.read("copied.sh"), b"#!/bin/sh\n");
    let mode = std::fs::metadata(scratch.path("copied.sh")).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o750, "permissions are copied");
    assert_eq!(scratch.read("out/nested/sub/deep.txt"), b"deep");
    for (link, target) in
        [("link", "run.sh"), ("escape", "../outside.txt"), ("dangling", "nowhere")]
    {
        let copied = std::fs::read_link(scratch.path(&format!("out/nested/{link}"))).unwrap();
        assert_eq!(copied.to_str(), Some(target), "{link} is copied as a link");
    }
    assert!(!scratch.exists("out/nested/fifo"), "FIFOs in a tree are skipped");
    assert_eq!(
        (scratch.read("merge/run.sh"), scratch.read("merge/kept.txt")),
        (b"#!/bin/sh\n".to_vec(), b"kept".to_vec())
    );
    assert_eq!(std::fs::read_link(scratch.path("link-copy")).unwrap().to_str(), Some("src"));
}

async fn copy_refuses_what_it_cannot_copy(target: Target) {
    let scratch = Scratch::new(target, "copy-errors");
    scratch.file("src/file.txt", b"x");
    scratch.dir("existing-dir");
    scratch.file("file.txt", b"x");
    scratch.symlink("src", "src-link");
    scratch.symlink("file.txt", "file-link");
    scratch.fifo("fifo");
    let (_server, mut client) = started(target).await;
    let copy = |from: &str, to: &str, recursive: bool| {
        json!({"sourcePath": scratch.uri(from), "destinationPath": scratch.uri(to),
            "recursive": recursive})
    };

    let into_itself = "fs/copy cannot copy a directory to itself or one of its descendants";
    for (params, code, message) in [
        (
            copy("src", "out", false),
            -32600,
            "fs/copy requires recursive: true when sourcePath is a directory",
        ),
        (copy("src", "src", true), -32600, into_itself),
        (copy("src", "src/inner", true), -32600, into_itself),
        (copy("src", "src-link/inner", true), -32600, into_itself),
        (
            copy("fifo", "fifo-copy", false),
            -32600,
            "fs/copy only supports regular files, directories, and symlinks",
        ),
        (copy("file.txt", "existing-dir", false), -32603, EISDIR),
        (copy("src", "file.txt", true), -32603, EEXIST),
        (copy("file-link", "file-link", false), -32603, EEXIST),
        (copy("missing", "out", false), -32004, ENOENT),
        (copy("file.txt", "missing/out", false), -32004, ENOENT),
    ] {
        let error = client.err("fs/copy", params.clone()).await.unwrap();
        assert_error(error, code, message);
    }
    assert!(!scratch.exists("src/inner") && !scratch.exists("out"));
    let foreign = json!({"sourcePath": "file://otherhost/x", "destinationPath": scratch.uri("y"),
        "recursive": false});
    let error = client.err("fs/copy", foreign).await.unwrap();
    assert_error(error, -32600, "'file://otherhost/x' is invalid on 'linux'");
    let error = client
        .err(
            "fs/copy",
            json!({"sourcePath": scratch.uri("file.txt"),
        "destinationPath": scratch.uri("y")}),
        )
        .await
        .unwrap();
    assert_error(error, -32602, "missing field `recursive`");
}

// ---------------------------------------------------------------------------------------------
// fs/open, fs/readBlock, fs/writeBlock, fs/close

fn read_block(id: &str, offset: u64, len: u64) -> Value {
    json!({"handleId": id, "offset": offset, "len": len})
}

fn write_block(id: &str, offset: u64, bytes: &[u8]) -> Value {
    json!({"handleId": id, "offset": offset, "chunk": b64encode(bytes)})
}

fn block(bytes: &[u8], eof: bool) -> Value {
    json!({"chunk": b64encode(bytes), "eof": eof})
}

async fn read_blocks_are_eof_only_when_short(target: Target) {
    let scratch = Scratch::new(target, "read-blocks");
    scratch.file("hello.txt", b"hello world");
    scratch.file("empty", b"");
    let (_server, mut client) = started(target).await;

    let opened = client.ok("fs/open", json!({"handleId": "h1", "path": scratch.uri("hello.txt")}));
    assert_eq!(opened.await.unwrap(), json!({"handleId": "h1"}));
    client.ok("fs/open", json!({"handleId": "e", "path": scratch.uri("empty")})).await.unwrap();

    for (params, expected) in [
        (read_block("h1", 0, 5), block(b"hello", false)),
        (read_block("h1", 6, 5), block(b"world", false)),
        (read_block("h1", 6, 6), block(b"world", true)),
        (read_block("h1", 11, 5), block(b"", true)),
        (read_block("h1", 100, 5), block(b"", true)),
        (read_block("h1", 0, 1), block(b"h", false)),
        (read_block("h1", 0, 1_048_576), block(b"hello world", true)),
        (read_block("e", 0, 1), block(b"", true)),
    ] {
        assert_eq!(client.ok("fs/readBlock", params.clone()).await.unwrap(), expected, "{params}");
    }
    let bad_length = "file read block length must be between 1 and 1048576";
    for params in [read_block("h1", 0, 0), read_block("h1", 0, 1_048_577), read_block("nope", 0, 0)]
    {
        assert_error(client.err("fs/readBlock", params).await.unwrap(), -32600, bad_length);
    }
}

/// `fileWriteStreaming` is advertised, and what Codex then sends for a large copy lands
/// intact: a 32-hex-digit handle, 40 blocks of 1 MiB, in order, then `fs/close`.
async fn a_large_file_streams_in_whole_blocks_as_advertised(target: Target) {
    const BLOCK: usize = 1024 * 1024;
    let scratch = Scratch::new(target, "streamed-write");
    let server = ServerProcess::start(target).await.unwrap();
    let (mut client, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    assert_eq!(init["environmentInfo"]["capabilities"]["fileWriteStreaming"], true, "{init}");

    // Every block differs from the others, so a block written twice or out of place shows.
    let contents: Vec<u8> =
        (0..40 * BLOCK).map(|i| ((i / BLOCK) as u8).wrapping_mul(31) ^ (i as u8)).collect();
    let id = "0123456789abcdef0123456789abcdef";
    let open = json!({"handleId": id, "path": scratch.uri("copy.bin"), "mode": "replace"});
    assert_eq!(client.ok("fs/open", open).await.unwrap(), json!({"handleId": id}));
    for (n, chunk) in contents.chunks(BLOCK).enumerate() {
        let written = client.ok("fs/writeBlock", write_block(id, (n * BLOCK) as u64, chunk));
        assert_eq!(written.await.unwrap(), json!({}), "block {n}");
    }
    assert_eq!(client.ok("fs/close", json!({"handleId": id})).await.unwrap(), json!({}));
    let landed = scratch.read("copy.bin");
    assert_eq!(landed.len(), contents.len());
    assert!(landed == contents, "the copy differs from what was sent");
}

async fn write_blocks_fill_gaps_and_stay_within_signed_offsets(target: Target) {
    let scratch = Scratch::new(target, "write-blocks");
    scratch.file("existing.txt", b"old contents");
    scratch.dir("dir");
    let (_server, mut client) = started(target).await;
    let replace = |id: &str, name: &str| {
        let path = scratch.uri(name);
        json!({"handleId": id, "path": path, "mode": "replace"})
    };

    client.ok("fs/open", replace("w", "out.bin")).await.unwrap();
    assert_eq!(client.ok("fs/writeBlock", write_block("w", 4, b"xyz")).await.unwrap(), json!({}));
    client.ok("fs/writeBlock", write_block("w", 0, b"ab")).await.unwrap();
    assert_eq!(scratch.read("out.bin"), b"ab\0\0xyz");

    let bad_length = "file write block length must be between 1 and 1048576";
    let out_of_range = "file write range exceeds the signed 64-bit file offset limit";
    for (params, message) in [
        (write_block("w", 0, b""), bad_length),
        (write_block("w", 0, &vec![0; 1_048_577]), bad_length),
        (write_block("nope", 0, b""), bad_length),
        (write_block("w", i64::MAX as u64 - 1, b"ab"), out_of_range),
        (write_block("w", u64::MAX, b"ab"), out_of_range),
        (write_block("nope", u64::MAX, b"ab"), out_of_range),
    ] {
        assert_error(client.err("fs/writeBlock", params).await.unwrap(), -32600, message);
    }
    client.ok("fs/writeBlock", write_block("w", 7, b"!")).await.unwrap();
    assert_eq!(scratch.read("out.bin"), b"ab\0\0xyz!");

    client.ok("fs/open", replace("t", "existing.txt")).await.unwrap();
    assert_eq!(scratch.read("existing.txt"), b"", "replace truncates");
    assert_error(client.err("fs/open", replace("d", "dir")).await.unwrap(), -32603, EISDIR);
    let error = client.err("fs/open", replace("m", "missing/out")).await.unwrap();
    assert_error(error, -32004, ENOENT);
}

async fn handle_ids_are_bounded_unique_and_limited_per_connection(target: Target) {
    let scratch = Scratch::new(target, "handle-ids");
    scratch.file("file.txt", b"x");
    let (_server, mut client) = started(target).await;
    let open = |id: &str, name: &str| json!({"handleId": id, "path": scratch.uri(name)});

    let longest = "0123456789abcdef0123456789abcdef";
    assert_eq!(client.ok("fs/open", open(longest, "file.txt")).await.unwrap()["handleId"], longest);
    assert_eq!(client.ok("fs/open", open("", "file.txt")).await.unwrap()["handleId"], "");
    let too_long = "file handle ID must not exceed 32 bytes";
    for id in [format!("{longest}0"), format!("{}é", &longest[..31])] {
        // The id is checked before the path.
        let error = client.err("fs/open", json!({"handleId": id, "path": "file://otherhost/x"}));
        assert_error(error.await.unwrap(), -32600, too_long);
    }
    // Every handle call refuses such an id, without repeating it.
    let huge = "h".repeat(100_000);
    for (method, params) in [
        ("fs/readBlock", json!({"handleId": huge, "offset": 0, "len": 1})),
        ("fs/writeBlock", json!({"handleId": huge, "offset": 0, "chunk": "YQ=="})),
        ("fs/close", json!({"handleId": huge})),
    ] {
        let error = client.err(method, params).await.unwrap();
        assert_error(error, -32600, too_long);
    }
    let duplicate = client.err("fs/open", open("", "missing")).await.unwrap();
    assert_error(duplicate, -32600, "file handle `` already exists");

    for index in 2..128 {
        client.ok("fs/open", open(&format!("h{index}"), "file.txt")).await.unwrap();
    }
    let full = "at most 128 file handles may be open per connection";
    assert_error(client.err("fs/open", open("more", "missing")).await.unwrap(), -32600, full);
    let error = client.err("fs/open", open("h2", "file.txt")).await.unwrap();
    assert_error(error, -32600, "file handle `h2` already exists");
    client.ok("fs/close", json!({"handleId": "h2"})).await.unwrap();
    client.ok("fs/open", open("more", "file.txt")).await.unwrap();
    assert_error(client.err("fs/open", open("one-more", "file.txt")).await.unwrap(), -32600, full);
}

async fn handles_close_idempotently_and_fail_as_opened(target: Target) {
    let scratch = Scratch::new(target, "handle-close");
    scratch.file("file.txt", b"abc");
    let (_server, mut client) = started(target).await;
    client.ok("fs/open", json!({"handleId": "h1", "path": scratch.uri("file.txt")})).await.unwrap();

    for id in ["h1", "h1", "never-opened"] {
        assert_eq!(client.ok("fs/close", json!({"handleId": id})).await.unwrap(), json!({}));
    }
    let unknown = "unknown file handle `h1`";
    assert_error(
        client.err("fs/readBlock", read_block("h1", 0, 1)).await.unwrap(),
        -32004,
        unknown,
    );
    let error = client.err("fs/writeBlock", write_block("h1", 0, b"x")).await.unwrap();
    assert_error(error, -32004, unknown);

    client.ok("fs/open", json!({"handleId": "r", "path": scratch.uri("file.txt")})).await.unwrap();
    let replace = json!({"handleId": "w", "path": scratch.uri("out"), "mode": "replace"});
    client.ok("fs/open", replace).await.unwrap();
    // A failed write leaves the handle open; a failed read closes it.
    let error = client.err("fs/writeBlock", write_block("r", 0, b"x")).await.unwrap();
    assert_error(error, -32603, EBADF);
    assert_eq!(
        client.ok("fs/readBlock", read_block("r", 0, 3)).await.unwrap(),
        block(b"abc", false)
    );
    assert_error(client.err("fs/readBlock", read_block("w", 0, 1)).await.unwrap(), -32603, EBADF);
    let error = client.err("fs/writeBlock", write_block("w", 0, b"x")).await.unwrap();
    assert_error(error, -32004, "unknown file handle `w`");
    let error = client.err("fs/readBlock", read_block("r", u64::MAX, 1)).await.unwrap();
    assert_error(error, -32600, EINVAL);
    let error = client.err("fs/readBlock", read_block("r", 0, 1)).await.unwrap();
    assert_error(error, -32004, "unknown file handle `r`");
}

async fn a_handle_keeps_reading_its_file_after_the_path_is_replaced(target: Target) {
    let scratch = Scratch::new(target, "handle-replaced");
    scratch.file("file.txt", b"first version");
    let (_server, mut client) = started(target).await;
    client.ok("fs/open", json!({"handleId": "h", "path": scratch.uri("file.txt")})).await.unwrap();

    scratch.file("next.txt", b"second");
    std::fs::rename(scratch.path("next.txt"), scratch.path("file.txt")).unwrap();
    assert_eq!(
        client.ok("fs/readBlock", read_block("h", 0, 5)).await.unwrap(),
        block(b"first", false)
    );
    std::fs::remove_file(scratch.path("file.txt")).unwrap();
    assert_eq!(
        client.ok("fs/readBlock", read_block("h", 6, 64)).await.unwrap(),
        block(b"version", true)
    );
}

async fn handles_belong_to_their_connection(target: Target) {
    let scratch = Scratch::new(target, "handle-connection");
    scratch.file("file.txt", b"abc");
    let server = ServerProcess::start(target).await.unwrap();
    let (mut first, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let session_id = init["sessionId"].as_str().unwrap().to_owned();
    first.ok("fs/open", json!({"handleId": "h", "path": scratch.uri("file.txt")})).await.unwrap();

    let (mut other, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let error = other.err("fs/readBlock", read_block("h", 0, 1)).await.unwrap();
    assert_error(error, -32004, "unknown file handle `h`");

    // Resuming the session on a new connection does not bring the handles back.
    first.close().await;
    let mut resumed = RpcClient::connect(&server.url).await.unwrap();
    let mut attempts = 0;
    while resumed.initialize(Some(&session_id)).await.unwrap().is_err() {
        // The old connection may not be detached yet.
        attempts += 1;
        assert!(attempts < 50, "the session could not be resumed");
        tokio::time::sleep(Duration::from_millis(100)).await;
        resumed = RpcClient::connect(&server.url).await.unwrap();
    }
    let error = resumed.err("fs/readBlock", read_block("h", 0, 1)).await.unwrap();
    assert_error(error, -32004, "unknown file handle `h`");
}

async fn open_refuses_anything_but_a_regular_file_promptly(target: Target) {
    let scratch = Scratch::new(target, "open-special");
    let dir = scratch.dir("dir");
    let fifo = scratch.fifo("fifo");
    scratch.file("file.txt", b"x");
    scratch.symlink("file.txt", "link");
    let (_server, mut client) = started(target).await;
    let open = |id: &str, name: &str| json!({"handleId": id, "path": scratch.uri(name)});

    let started_at = Instant::now();
    let error = client.err("fs/open", open("f", "fifo")).await.unwrap();
    assert_error(error, -32600, &format!("path `{}` is not a file", fifo.display()));
    assert!(started_at.elapsed() < Duration::from_secs(5));
    let error = client.err("fs/open", open("d", "dir")).await.unwrap();
    assert_error(error, -32600, &format!("path `{}` is not a file", dir.display()));
    assert_error(client.err("fs/open", open("m", "missing")).await.unwrap(), -32004, ENOENT);
    let foreign = json!({"handleId": "o", "path": "file://otherhost/x"});
    let error = client.err("fs/open", foreign).await.unwrap();
    assert_error(error, -32600, "'file://otherhost/x' is invalid on 'linux'");
    let error = client
        .err(
            "fs/open",
            json!({"handleId": "x", "path": scratch.uri("file.txt"),
        "mode": "write"}),
        )
        .await
        .unwrap();
    assert_error(error, -32602, "unknown variant `write`, expected `read` or `replace`");
    client.ok("fs/open", open("l", "link")).await.unwrap();
    assert_eq!(client.ok("fs/readBlock", read_block("l", 0, 2)).await.unwrap(), block(b"x", true));
}

// ---------------------------------------------------------------------------------------------
// Tether only

/// Under Codex's read-only intent, reads are served in-process and every write is refused by
/// the sandbox's kernel, in the reference's words, with the host untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_sandboxes_serve_reads_and_refuse_writes_as_the_kernel_does() {
    let scratch = Scratch::new(Target::Tether, "sandbox");
    scratch.file("file.txt", b"x");
    let (_server, mut client) = started(Target::Tether).await;
    let read_only = json!({"permissions": {"type": "managed", "file_system": {"type": "restricted",
        "entries": [{"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}]},
        "network": "restricted"}, "windowsSandboxLevel": "disabled"});

    for (method, mut params) in [
        ("fs/writeFile", json!({"path": scratch.uri("new"), "dataBase64": "eA=="})),
        ("fs/createDirectory", json!({"path": scratch.uri("new")})),
        ("fs/remove", json!({"path": scratch.uri("file.txt")})),
        (
            "fs/copy",
            json!({"sourcePath": scratch.uri("file.txt"),
            "destinationPath": scratch.uri("new"), "recursive": false}),
        ),
    ] {
        params["sandbox"] = read_only.clone();
        let error = client.err(method, params).await.unwrap();
        assert_eq!(error.code, -32603, "{method}");
        assert_eq!(error.message, "Read-only file system (os error 30)", "{method}");
    }
    assert!(!scratch.exists("new") && scratch.exists("file.txt"));

    let read = json!({"path": scratch.uri("file.txt"), "sandbox": read_only});
    assert_eq!(b64decode(&client.ok("fs/readFile", read).await.unwrap()["dataBase64"]), b"x");
}
