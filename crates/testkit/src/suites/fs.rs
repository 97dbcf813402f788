//! The filesystem scenarios, written against [`FileSystem`] and [`FileHandles`] so that they run
//! unchanged on any implementation.
//!
//! Each scenario builds real files in its own scratch directory with `std::fs` (setup), calls
//! the implementation as a client would (exercise), and checks what a user would check: the
//! bytes on disk, error kinds and the exact messages (assert). The expected behaviour is the
//! reference exec-server's, except where a scenario says otherwise.

use std::fmt::Debug;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, UNIX_EPOCH};

use futures_util::StreamExt;
use serde_json::{Value, json};
use tether_engine::fs::{FileHandles, FileReadStream, FileSystem, FsError, FsErrorKind};
use tether_protocol::PathUri;
use tether_protocol::fs::*;

use crate::scratch::{Scratch, uri_of};

use FsErrorKind::{InvalidInput, NotFound, Other};

/// Every scenario of this suite that takes a [`FileSystem`], once, with the targets it does
/// not run on and why; runners make their tests from it ([`scenarios!`](crate::scenarios)).
/// Tether differs from the reference on purpose where a scenario leaves the reference out:
/// it keeps a file copied onto itself (the reference truncates it), refuses a write to a FIFO
/// nobody reads (the reference hangs) and restrictive sandbox intents it cannot honour (the
/// reference ignores or misreports them), and serves its own extensions.
#[doc(hidden)]
#[macro_export]
macro_rules! __every_file_system_scenario {
    ($($runner:tt)*) => {
        $crate::scenarios!(@each [$crate::suites::fs] [
            read_file_returns_whole_regular_files,
            read_file_refuses_anything_but_a_regular_file_promptly,
            read_file_is_capped_at_512_mib,
            read_file_reports_missing_and_foreign_paths,
            write_file_creates_or_truncates_in_place,
            write_file_reports_bad_targets_and_bad_base64 [reference: "the reference hangs \
                writing to a FIFO nobody reads"],
            follow_symlinks_false_never_goes_through_a_link,
            create_directory_is_recursive_by_default,
            get_metadata_follows_links_but_says_it_was_one,
            get_metadata_times_are_the_references,
            canonicalize_resolves_every_link,
            read_directory_lists_in_readdir_order_following_links,
            read_directory_refuses_more_than_50000_entries,
            walk_is_breadth_first_and_sorted_per_directory,
            walk_bounds_set_truncated,
            walk_limits_are_validated_with_the_references_messages,
            walk_follows_directory_links_only_when_asked_and_once,
            walk_roots_that_are_not_directories,
            walk_reports_non_utf8_names_as_errors,
            remove_is_recursive_and_forced_by_default,
            remove_removes_links_not_their_targets,
            copy_copies_files_and_trees_with_links_as_links,
            copy_refuses_what_it_cannot_copy,
            copy_onto_itself_keeps_the_file [reference: "the reference truncates a file \
                copied onto itself"],
            read_only_sandboxes_serve_reads_and_refuse_every_write [reference: "the reference \
                ignores or misreports restrictive sandbox intents"],
            read_file_stream_yields_the_file_in_blocks_of_at_most_1_mib,
            read_file_stream_refuses_what_is_not_a_regular_file_promptly [reference: "the \
                reference hangs opening a FIFO nobody writes"],
            read_file_stream_keeps_reading_the_file_it_opened,
            finished_streams_give_their_handles_back,
            write_file_stream_writes_blocks_in_order,
            write_file_stream_reports_a_missing_directory_as_not_found,
            rename_replaces_files_and_moves_trees [reference: "Tether's `fsMetadata` \
                extension, which the reference does not serve"],
            set_metadata_sets_the_mode_and_time_of_the_path_itself [reference: "Tether's `fsMetadata` \
                extension, which the reference does not serve"],
            put_file_puts_a_whole_file_in_place_with_its_mode_and_time [reference: "Tether's `fsMetadata` \
                extension, which the reference does not serve"],
            read_directory_with_metadata_gives_each_entrys_own [reference: "Tether's `fsMetadata` \
                extension, which the reference does not serve"],
            create_symlink_and_read_link_round_trip [reference: "Tether's `fsMetadata` \
                extension, which the reference does not serve"],
            get_metadata_gives_the_mode_only_when_asked [reference: "Tether's `fsMetadata` \
                extension, which the reference does not serve"],
            read_only_sandboxes_refuse_the_new_writes [reference: "Tether's `fsMetadata` \
                extension, which the reference does not serve"],
            sandboxed_new_writes_are_confined_to_the_writable_root [
                local: "the engine in-process has no sandbox helper to confine the writes",
                reference: "Tether's `fsMetadata` extension, which the reference does not serve",
            ],
        ] $($runner)*);
    };
}
pub use crate::__every_file_system_scenario as every_file_system_scenario;

/// Every scenario of this suite that takes a connection's [`FileHandles`], which only the
/// engine has (over the wire they are the conformance suite's), once; runners make their tests
/// from it ([`scenarios!`](crate::scenarios)).
#[doc(hidden)]
#[macro_export]
macro_rules! __every_handles_scenario {
    ($($runner:tt)*) => {
        $crate::scenarios!(@each [$crate::suites::fs] [
            read_blocks_are_eof_only_when_short,
            write_blocks_fill_gaps_and_stay_within_signed_offsets,
            handle_ids_are_bounded_unique_and_limited_per_connection,
            closed_and_unknown_handles_are_not_found_and_close_is_idempotent,
            a_handle_keeps_reading_its_file_after_the_path_is_replaced,
            handles_are_used_only_as_they_were_opened,
            open_refuses_anything_but_a_regular_file_promptly,
        ] $($runner)*);
    };
}
pub use crate::__every_handles_scenario as every_handles_scenario;

const ENOENT: i32 = 2;
const ENXIO: i32 = 6;
const EBADF: i32 = 9;
const EEXIST: i32 = 17;
const EXDEV: i32 = 18;
const ENOTDIR: i32 = 20;
const EISDIR: i32 = 21;
const EINVAL: i32 = 22;
const EROFS: i32 = 30;
const ENOTEMPTY: i32 = 39;
const ELOOP: i32 = 40;

/// Params as a client would send them: JSON, with every default left out, and no member the
/// params do not have ([`strict`](crate::params::strict)): a misspelt one fails the scenario.
macro_rules! params {
    ($value:expr) => {
        crate::params::strict($value)
    };
}

/// The OS's text for an errno (`No such file or directory (os error 2)`); the C library
/// words a few differently, so the suite never spells them out.
fn os(errno: i32) -> String {
    io::Error::from_raw_os_error(errno).to_string()
}

#[track_caller]
fn assert_fails<T: Debug>(result: Result<T, FsError>, kind: FsErrorKind, message: &str) {
    let error = result.expect_err("the call should fail");
    assert_eq!((error.kind, error.message.as_str()), (kind, message));
}

/// `ELOOP`'s text is the C library's own (glibc and musl, which the reference is built with,
/// word it differently); its number is the contract.
#[track_caller]
fn assert_eloop<T: Debug>(result: Result<T, FsError>) {
    let error = result.expect_err("the call should fail");
    assert_eq!(error.kind, Other, "{}", error.message);
    assert!(error.message.ends_with(&format!("(os error {ELOOP})")), "{}", error.message);
}

/// Codex's read-only intent: `/` readable, nothing writable.
fn read_only_sandbox() -> Value {
    json!({"permissions": {"type": "managed", "file_system": {"type": "restricted",
        "entries": [{"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}]},
        "network": "restricted"}, "windowsSandboxLevel": "disabled"})
}

fn walk_options(max_depth: usize, max_directories: usize, max_entries: usize) -> Value {
    json!({"maxDepth": max_depth, "maxDirectories": max_directories, "maxEntries": max_entries,
        "followDirectorySymlinks": false})
}

/// `(path relative to the scratch root, "file" | "directory")`, in the walk's order.
fn walked(scratch: &Scratch, walk: &FsWalkResponse) -> Vec<(String, &'static str)> {
    let root = scratch.uri("");
    walk.entries
        .iter()
        .map(|entry| {
            let relative = entry.path.as_str().strip_prefix(root.as_str()).unwrap();
            let kind = match entry.kind {
                FsWalkEntryKind::Directory => "directory",
                FsWalkEntryKind::File => "file",
            };
            (relative.trim_start_matches('/').to_owned(), kind)
        })
        .collect()
}

fn expected(entries: &[(&str, &'static str)]) -> Vec<(String, &'static str)> {
    entries.iter().map(|(path, kind)| ((*path).to_owned(), *kind)).collect()
}

// ---------------------------------------------------------------------------------------------
// fs/readFile

pub async fn read_file_returns_whole_regular_files(fs: &dyn FileSystem) {
    let scratch = Scratch::new("read");
    let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let data = scratch.file("data.bin", &bytes);
    scratch.symlink("data.bin", "link");
    scratch.file("empty", b"");

    let localhost = format!("file://localhost{}", data.display());
    let trailing_slash = format!("{}/", scratch.uri("data.bin"));
    for uri in [
        scratch.uri("data.bin"),
        scratch.uri("link"),
        PathUri::parse(&localhost).unwrap(),
        PathUri::parse(&trailing_slash).unwrap(),
    ] {
        let read = fs.read_file(params!(json!({"path": uri}))).await.unwrap();
        assert_eq!(read.data_base64.0, bytes, "{uri}");
    }
    let read = fs.read_file(params!(json!({"path": scratch.uri("empty")}))).await.unwrap();
    assert!(read.data_base64.is_empty());
    let not_following = json!({"path": scratch.uri("data.bin"), "followSymlinks": false});
    assert_eq!(fs.read_file(params!(not_following)).await.unwrap().data_base64.0, bytes);
}

pub async fn read_file_refuses_anything_but_a_regular_file_promptly(fs: &dyn FileSystem) {
    let scratch = Scratch::new("read-special");
    let dir = scratch.dir("dir");
    let fifo = scratch.fifo("fifo");

    // A FIFO with no writer would block an open for reading: it must be refused, not opened.
    let read = fs.read_file(params!(json!({"path": scratch.uri("fifo")})));
    let refused = tokio::time::timeout(Duration::from_secs(5), read).await.expect("promptly");
    assert_fails(refused, InvalidInput, &format!("path `{}` is not a file", fifo.display()));
    let dir_with_slash = format!("{}/", scratch.uri("dir"));
    for uri in [scratch.uri("dir"), PathUri::parse(&dir_with_slash).unwrap()] {
        let read = fs.read_file(params!(json!({"path": uri}))).await;
        assert_fails(read, InvalidInput, &format!("path `{}` is not a file", dir.display()));
    }
    let read = fs.read_file(params!(json!({"path": "file:///dev/null"}))).await;
    assert_fails(read, InvalidInput, "path `/dev/null` is not a file");

    // Not following links, the reference words it differently.
    for name in ["dir", "fifo"] {
        let read =
            fs.read_file(params!(json!({"path": scratch.uri(name), "followSymlinks": false})));
        let refused = tokio::time::timeout(Duration::from_secs(5), read).await.expect("promptly");
        assert_fails(refused, InvalidInput, "path is not a regular file");
    }
}

pub async fn read_file_is_capped_at_512_mib(fs: &dyn FileSystem) {
    let scratch = Scratch::new("read-cap");
    // Sparse: the size is what counts, and it costs no disk.
    let big = std::fs::File::create(scratch.path("big")).unwrap();
    big.set_len(FS_READ_FILE_MAX_BYTES + 1).unwrap();

    for follow in [true, false] {
        let read =
            fs.read_file(params!(json!({"path": scratch.uri("big"), "followSymlinks": follow})));
        assert_fails(
            read.await,
            InvalidInput,
            "file is too large to read: limit is 536870912 bytes",
        );
    }
}

pub async fn read_file_reports_missing_and_foreign_paths(fs: &dyn FileSystem) {
    let scratch = Scratch::new("read-missing");
    let file = scratch.file("file.txt", b"x");
    scratch.symlink("nowhere", "dangling");

    for name in ["missing", "dangling", "missing/deeper"] {
        let read = fs.read_file(params!(json!({"path": scratch.uri(name)}))).await;
        assert_fails(read, NotFound, &os(ENOENT));
    }
    let read = fs.read_file(params!(json!({"path": scratch.uri("file.txt/x")}))).await;
    assert_fails(read, Other, &os(ENOTDIR));
    let foreign = format!("file://otherhost{}", file.display());
    let read = fs.read_file(params!(json!({"path": foreign}))).await;
    assert_fails(read, InvalidInput, &format!("'{foreign}' is invalid on 'linux'"));
}

// ---------------------------------------------------------------------------------------------
// fs/writeFile

pub async fn write_file_creates_or_truncates_in_place(fs: &dyn FileSystem) {
    let scratch = Scratch::new("write");
    let existing = scratch.file("existing.txt", b"a much longer original text");
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o751)).unwrap();
    std::fs::hard_link(&existing, scratch.path("hard-link.txt")).unwrap();
    let inode = std::fs::metadata(&existing).unwrap().ino();
    scratch.file("target.txt", b"target");
    scratch.symlink("target.txt", "link");
    scratch.symlink("created-through-link.txt", "dangling");

    let write = |name: &str, bytes: &[u8]| {
        let data = tether_protocol::ByteChunk::from(bytes).to_base64();
        fs.write_file(params!(json!({"path": scratch.uri(name), "dataBase64": data})))
    };
    let binary: Vec<u8> = (0..=255u8).collect();
    write("new.bin", &binary).await.unwrap();
    write("existing.txt", b"short").await.unwrap();
    write("link", b"through").await.unwrap();
    write("dangling", b"made").await.unwrap();
    write("empty.txt", b"").await.unwrap();

    // Every byte value lands as sent, and reads back the same.
    assert_eq!(std::fs::read(scratch.path("new.bin")).unwrap(), binary);
    let read = fs.read_file(params!(json!({"path": scratch.uri("new.bin")}))).await.unwrap();
    assert_eq!(read.data_base64.0, binary);
    // In place: same inode, same mode, and every hard link sees the new contents.
    let metadata = std::fs::metadata(&existing).unwrap();
    assert_eq!((metadata.ino(), metadata.mode() & 0o777), (inode, 0o751));
    assert_eq!(std::fs::read(scratch.path("hard-link.txt")).unwrap(), b"short");
    // Through links: the target is written, the link stays a link.
    assert_eq!(std::fs::read(scratch.path("target.txt")).unwrap(), b"through");
    assert!(std::fs::symlink_metadata(scratch.path("link")).unwrap().is_symlink());
    assert_eq!(std::fs::read(scratch.path("created-through-link.txt")).unwrap(), b"made");
    assert_eq!(std::fs::read(scratch.path("empty.txt")).unwrap(), b"");
}

pub async fn write_file_reports_bad_targets_and_bad_base64(fs: &dyn FileSystem) {
    let scratch = Scratch::new("write-errors");
    scratch.dir("dir");
    scratch.fifo("fifo");

    let write = |name: &str, data: &str| {
        fs.write_file(params!(json!({"path": scratch.uri(name), "dataBase64": data})))
    };
    assert_fails(write("missing/x.txt", "eA==").await, NotFound, &os(ENOENT));
    assert_fails(write("dir", "eA==").await, Other, &os(EISDIR));
    let prefix = "fs/writeFile requires valid base64 dataBase64: ";
    let bad = write("bad.txt", "!!").await;
    assert_fails(bad, InvalidInput, &format!("{prefix}Invalid symbol 33, offset 0."));
    assert_fails(write("bad.txt", "eA=").await, InvalidInput, &format!("{prefix}Invalid padding"));
    assert!(!scratch.path("bad.txt").exists(), "nothing is written for bad base64");
    // The data is checked before the path: a foreign host gets the data's message.
    let foreign = fs.write_file(params!(json!({"path": "file://otherhost/x", "dataBase64": "!!"})));
    assert_fails(foreign.await, InvalidInput, &format!("{prefix}Invalid symbol 33, offset 0."));

    // Tether's own: a FIFO nobody reads is refused at once (the reference waits for a reader
    // forever, holding the connection).
    let to_fifo = tokio::time::timeout(Duration::from_secs(5), write("fifo", "eA=="));
    assert_fails(to_fifo.await.expect("promptly"), Other, &os(ENXIO));
}

// ---------------------------------------------------------------------------------------------
// followSymlinks: false

pub async fn follow_symlinks_false_never_goes_through_a_link(fs: &dyn FileSystem) {
    let scratch = Scratch::new("no-follow");
    scratch.file("a.txt", b"original");
    scratch.file("sub/s.txt", b"inside");
    scratch.symlink("a.txt", "link");
    scratch.symlink("sub", "dirlink");
    scratch.symlink("nowhere", "dangling");
    let no_follow = |name: &str| json!({"path": scratch.uri(name), "followSymlinks": false});
    let with = |mut params: Value, key: &str, value: Value| {
        params[key] = value;
        params
    };

    // readFile: a link as the last component is ELOOP, before it ENOTDIR.
    assert_eloop(fs.read_file(params!(no_follow("link"))).await);
    assert_eloop(fs.read_file(params!(no_follow("dangling"))).await);
    assert_fails(fs.read_file(params!(no_follow("dirlink/s.txt"))).await, Other, &os(ENOTDIR));
    assert_eq!(fs.read_file(params!(no_follow("a.txt"))).await.unwrap().data_base64.0, "original");

    // writeFile: the same, and nothing is written anywhere.
    let write = |name: &str| with(no_follow(name), "dataBase64", json!("eA=="));
    assert_eloop(fs.write_file(params!(write("link"))).await);
    assert_fails(fs.write_file(params!(write("dirlink/new.txt"))).await, Other, &os(ENOTDIR));
    assert_eq!(std::fs::read(scratch.path("a.txt")).unwrap(), b"original");
    assert!(!scratch.path("sub/new.txt").exists());
    fs.write_file(params!(write("new.txt"))).await.unwrap();
    assert_eq!(std::fs::read(scratch.path("new.txt")).unwrap(), b"x");

    // getMetadata: a link as the last component is refused by name.
    let contains_link = "path contains a symbolic link";
    assert_fails(fs.get_metadata(params!(no_follow("link"))).await, InvalidInput, contains_link);
    assert_fails(
        fs.get_metadata(params!(no_follow("dangling"))).await,
        InvalidInput,
        contains_link,
    );
    let through = fs.get_metadata(params!(no_follow("dirlink/s.txt"))).await;
    assert_fails(through, Other, &os(ENOTDIR));
    let own = fs.get_metadata(params!(no_follow("a.txt"))).await.unwrap();
    assert!(own.is_file && !own.is_symlink && own.size == 8);
    let missing = fs.get_metadata(params!(no_follow("missing/x"))).await;
    assert_fails(missing, NotFound, &os(ENOENT));

    // createDirectory: a link (or a file) on the way is not a directory.
    let through = fs.create_directory(params!(no_follow("dirlink/made"))).await;
    assert_fails(through, Other, &os(ENOTDIR));
    assert_fails(fs.create_directory(params!(no_follow("dirlink"))).await, Other, &os(ENOTDIR));
    assert_fails(fs.create_directory(params!(no_follow("a.txt"))).await, Other, &os(ENOTDIR));
    let exact = with(no_follow("dirlink"), "recursive", json!(false));
    assert_fails(fs.create_directory(params!(exact)).await, Other, &os(EEXIST));
    assert!(!scratch.path("sub/made").exists());
    fs.create_directory(params!(no_follow("fresh/deeper"))).await.unwrap();
    fs.create_directory(params!(no_follow("sub"))).await.unwrap();
    assert!(scratch.path("fresh/deeper").is_dir());

    // remove: a tree cannot be removed without following; a link is refused by name.
    let recursive = fs.remove(params!(no_follow("link"))).await;
    assert_fails(recursive, Other, "recursive no-follow removal is unsupported");
    let single = |name: &str| with(no_follow(name), "recursive", json!(false));
    assert_fails(fs.remove(params!(single("link"))).await, InvalidInput, contains_link);
    assert_fails(fs.remove(params!(single("dirlink/s.txt"))).await, Other, &os(ENOTDIR));
    assert!(std::fs::symlink_metadata(scratch.path("link")).is_ok());
    assert!(scratch.path("sub/s.txt").exists());
    fs.remove(params!(single("a.txt"))).await.unwrap();
    fs.remove(params!(single("missing"))).await.unwrap();
    let unforced = with(single("missing"), "force", json!(false));
    assert_fails(fs.remove(params!(unforced)).await, NotFound, &os(ENOENT));
    assert!(!scratch.path("a.txt").exists());
}

// ---------------------------------------------------------------------------------------------
// fs/createDirectory

pub async fn create_directory_is_recursive_by_default(fs: &dyn FileSystem) {
    let scratch = Scratch::new("mkdir");
    scratch.file("file.txt", b"x");
    let create = |value: Value| fs.create_directory(params!(value));

    create(json!({"path": scratch.uri("a/b/c")})).await.unwrap();
    create(json!({"path": scratch.uri("a/b/c")})).await.unwrap();
    create(json!({"path": scratch.uri("n/m"), "recursive": null})).await.unwrap();
    assert!(scratch.path("a/b/c").is_dir() && scratch.path("n/m").is_dir());
    // `/` exists, and recursively that is success.
    create(json!({"path": "file:///"})).await.unwrap();

    let single = |name: &str| json!({"path": scratch.uri(name), "recursive": false});
    create(single("a/new")).await.unwrap();
    assert!(scratch.path("a/new").is_dir());
    assert_fails(create(single("x/y")).await, NotFound, &os(ENOENT));
    assert_fails(create(single("a")).await, Other, &os(EEXIST));
    assert_fails(create(json!({"path": scratch.uri("file.txt")})).await, Other, &os(EEXIST));
    let under_file = create(json!({"path": scratch.uri("file.txt/x")})).await;
    assert_fails(under_file, Other, &os(ENOTDIR));
}

// ---------------------------------------------------------------------------------------------
// fs/getMetadata

pub async fn get_metadata_follows_links_but_says_it_was_one(fs: &dyn FileSystem) {
    let scratch = Scratch::new("metadata");
    let file = scratch.file("file.txt", b"123456789");
    scratch.dir("dir");
    scratch.symlink("file.txt", "file-link");
    scratch.symlink("dir", "dir-link");
    scratch.symlink("nowhere", "dangling");
    scratch.fifo("fifo");
    let metadata = |name: &str| fs.get_metadata(params!(json!({"path": scratch.uri(name)})));

    let plain = metadata("file.txt").await.unwrap();
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    let mtime_ms = mtime.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    assert_eq!(
        plain,
        FsGetMetadataResponse {
            is_directory: false,
            is_file: true,
            is_symlink: false,
            size: 9,
            created_at_ms: 0,
            modified_at_ms: mtime_ms,
            mode: None,
        }
    );
    // `(is_directory, is_file, is_symlink)`: the target's kind, and whether it was a link.
    for (name, kinds) in [
        ("file-link", (false, true, true)),
        ("dir", (true, false, false)),
        ("dir-link", (true, false, true)),
        ("fifo", (false, false, false)),
    ] {
        let got = metadata(name).await.unwrap();
        assert_eq!((got.is_directory, got.is_file, got.is_symlink), kinds, "{name}");
    }
    assert_eq!(metadata("file-link").await.unwrap().size, 9, "the target's size");
    assert_fails(metadata("dangling").await, NotFound, &os(ENOENT));
    assert_fails(metadata("missing").await, NotFound, &os(ENOENT));
    assert_fails(metadata("file.txt/x").await, Other, &os(ENOTDIR));
}

/// As the reference: following links, no creation time and nothing before 1970; not following
/// them, the birth time (where kept) and signed times.
pub async fn get_metadata_times_are_the_references(fs: &dyn FileSystem) {
    let scratch = Scratch::new("metadata-times");
    let old = scratch.file("old.txt", b"x");
    let before_1970 = UNIX_EPOCH - Duration::from_millis(1_234);
    std::fs::File::options().write(true).open(&old).unwrap().set_modified(before_1970).unwrap();

    let followed = fs.get_metadata(params!(json!({"path": scratch.uri("old.txt")}))).await.unwrap();
    assert_eq!((followed.created_at_ms, followed.modified_at_ms), (0, 0));
    let own = json!({"path": scratch.uri("old.txt"), "followSymlinks": false});
    let own = fs.get_metadata(params!(own)).await.unwrap();
    assert_eq!(own.modified_at_ms, -1_234);
    // The birth time, where the filesystem keeps one; 0 where it does not.
    let birth = rustix::fs::statx(
        rustix::fs::CWD,
        &old,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        rustix::fs::StatxFlags::BTIME,
    )
    .unwrap();
    let has_birth = birth.stx_mask & rustix::fs::StatxFlags::BTIME.bits() != 0;
    let birth_ms = birth.stx_btime.tv_sec * 1000 + i64::from(birth.stx_btime.tv_nsec / 1_000_000);
    assert_eq!(own.created_at_ms, if has_birth { birth_ms } else { 0 });
}

// ---------------------------------------------------------------------------------------------
// fs/canonicalize

pub async fn canonicalize_resolves_every_link(fs: &dyn FileSystem) {
    let scratch = Scratch::new("canonicalize");
    scratch.file("real/file.txt", b"x");
    scratch.symlink("real", "alias");
    scratch.symlink("nowhere", "dangling");
    let canonical = |uri: PathUri| fs.canonicalize(params!(json!({"path": uri})));

    let resolved = canonical(scratch.uri("alias/file.txt")).await.unwrap();
    assert_eq!(resolved.path, scratch.uri("real/file.txt"));
    let with_slash = PathUri::parse(&format!("{}/", scratch.uri("alias"))).unwrap();
    assert_eq!(canonical(with_slash).await.unwrap().path, scratch.uri("real"));
    let localhost = format!("file://localhost{}", scratch.path("real").display());
    let localhost = canonical(PathUri::parse(&localhost).unwrap()).await.unwrap();
    assert_eq!(localhost.path, scratch.uri("real"), "the host is dropped");
    let root = canonical(PathUri::parse("file:///").unwrap()).await.unwrap();
    assert_eq!(root.path.as_str(), "file:///");
    assert_fails(canonical(scratch.uri("missing")).await, NotFound, &os(ENOENT));
    assert_fails(canonical(scratch.uri("dangling")).await, NotFound, &os(ENOENT));
}

// ---------------------------------------------------------------------------------------------
// fs/readDirectory

pub async fn read_directory_lists_in_readdir_order_following_links(fs: &dyn FileSystem) {
    let scratch = Scratch::new("read-directory");
    scratch.file("list/file.txt", b"x");
    scratch.dir("list/dir");
    scratch.symlink("file.txt", "list/file-link");
    scratch.symlink("dir", "list/dir-link");
    scratch.symlink("nowhere", "list/dangling");
    scratch.fifo("list/fifo");
    scratch.non_utf8_file("list");
    let list = |name: &str| fs.read_directory(params!(json!({"path": scratch.uri(name)})));

    let entries = list("list").await.unwrap().entries;
    let listed: Vec<_> =
        entries.into_iter().map(|e| (e.file_name, e.is_directory, e.is_file)).collect();
    // `(name, is_directory, is_file)`: links followed, a name that is not UTF-8 shown lossily.
    let readdir: Vec<_> = std::fs::read_dir(scratch.path("list"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "dangling")
        .map(|name| {
            let (directory, file) = match name.as_str() {
                "dir" | "dir-link" => (true, false),
                "fifo" => (false, false),
                _ => (false, true),
            };
            (name, directory, file)
        })
        .collect();
    assert_eq!(listed, readdir, "the OS's order, dangling links left out");
    assert!(listed.contains(&("bad-\u{fffd}".to_owned(), false, true)), "{listed:?}");

    assert_fails(list("list/file.txt").await, Other, &os(ENOTDIR));
    assert_fails(list("missing").await, NotFound, &os(ENOENT));
}

pub async fn read_directory_refuses_more_than_50000_entries(fs: &dyn FileSystem) {
    let scratch = Scratch::new("read-directory-limit");
    let dir = scratch.dir("many");
    for index in 0..=FS_READ_DIRECTORY_MAX_ENTRIES {
        std::fs::File::create(dir.join(index.to_string())).unwrap();
    }
    scratch.symlink("nowhere", "many/dangling");
    let list = || fs.read_directory(params!(json!({"path": scratch.uri("many")})));

    let too_many = "fs/readDirectory returned 50001 entries; limit is 50000";
    assert_fails(list().await, Other, too_many);
    // A dangling link is not an entry, so it does not count: 50,000 files are listed.
    std::fs::remove_file(dir.join("0")).unwrap();
    assert_eq!(list().await.unwrap().entries.len(), FS_READ_DIRECTORY_MAX_ENTRIES);
}

// ---------------------------------------------------------------------------------------------
// fs/walk

/// ```text
/// .hid/x/f4   a/b/c/   a/b/f3   a/f2   e/   f1   flink -> f1   dlink -> a   dang -> nowhere
/// fifo
/// ```
fn walk_tree(name: &str) -> Scratch {
    let scratch = Scratch::new(name);
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

pub async fn walk_is_breadth_first_and_sorted_per_directory(fs: &dyn FileSystem) {
    let scratch = walk_tree("walk");
    let walk =
        |options: Value| fs.walk(params!(json!({"path": scratch.uri("tree"), "options": options})));

    // Links to files, dangling links and FIFOs are left out; without following, so are links
    // to directories.
    let all = walk(walk_options(10, 100, 100)).await.unwrap();
    assert_eq!(
        walked(&scratch, &all),
        expected(&[
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
    assert!(all.errors.is_empty() && !all.truncated);

    // Depth 0 is the root's children; a depth bound is not truncation.
    let shallow = walk(walk_options(0, 100, 100)).await.unwrap();
    assert_eq!(walked(&scratch, &shallow).len(), 4);
    assert!(!shallow.truncated);
    let one_down = walk(walk_options(1, 100, 100)).await.unwrap();
    assert_eq!(walked(&scratch, &one_down).len(), 7);
    assert!(!one_down.truncated);

    // Hidden directories are listed but not entered.
    let mut options = walk_options(10, 100, 100);
    options["pruneHiddenDirectories"] = json!(true);
    let pruned = walk(options).await.unwrap();
    let paths: Vec<_> = walked(&scratch, &pruned).into_iter().map(|(path, _)| path).collect();
    assert!(paths.contains(&"tree/.hid".to_owned()));
    assert!(!paths.iter().any(|path| path.starts_with("tree/.hid/")), "{paths:?}");
}

pub async fn walk_bounds_set_truncated(fs: &dyn FileSystem) {
    let scratch = walk_tree("walk-bounds");
    let walk =
        |options: Value| fs.walk(params!(json!({"path": scratch.uri("tree"), "options": options})));

    let two = walk(walk_options(10, 100, 2)).await.unwrap();
    assert_eq!(
        walked(&scratch, &two),
        expected(&[("tree/.hid", "directory"), ("tree/a", "directory")])
    );
    assert!(two.truncated);
    // Entries are counted as examined, left-out links and FIFOs too: the root has 7 (the
    // dangling link is not even listed), so a bound of 7 stops at the first entry below it.
    let seven = walk(walk_options(10, 100, 7)).await.unwrap();
    assert_eq!(walked(&scratch, &seven).len(), 4);
    assert!(seven.truncated);
    let exact = walk(walk_options(10, 100, 13)).await.unwrap();
    assert_eq!(walked(&scratch, &exact).len(), 10);
    assert!(!exact.truncated, "every entry examined is not truncation");

    // Only the root is read: its directories are listed, not entered.
    let root_only = walk(walk_options(10, 1, 100)).await.unwrap();
    assert_eq!(walked(&scratch, &root_only).len(), 4);
    assert!(root_only.truncated);
    let two_directories = walk(walk_options(10, 2, 100)).await.unwrap();
    assert_eq!(walked(&scratch, &two_directories).last().unwrap().0, "tree/.hid/x");
    assert!(two_directories.truncated);
}

pub async fn walk_limits_are_validated_with_the_references_messages(fs: &dyn FileSystem) {
    let scratch = Scratch::new("walk-limits");
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
        // Limits are checked before the path: even a missing root, or one on another host,
        // gets the limit's message.
        for root in [scratch.uri("missing"), PathUri::parse("file://otherhost/x").unwrap()] {
            let walk = fs.walk(params!(json!({"path": root, "options": options})));
            assert_fails(walk.await, InvalidInput, message);
        }
    }
    let widest = json!({"path": scratch.uri(""), "options": walk_options(64, 10_000, 50_000)});
    fs.walk(params!(widest)).await.unwrap();
}

pub async fn walk_follows_directory_links_only_when_asked_and_once(fs: &dyn FileSystem) {
    let scratch = walk_tree("walk-links");
    scratch.dir("outside/inner");
    scratch.symlink("../../outside", "tree/e/out");
    let mut following = walk_options(10, 100, 100);
    following["followDirectorySymlinks"] = json!(true);

    let walk = fs.walk(params!(json!({"path": scratch.uri("tree"), "options": following})));
    let paths: Vec<_> =
        walked(&scratch, &walk.await.unwrap()).into_iter().map(|(path, _)| path).collect();
    // `dlink` is `a`, already walked: listed, not walked twice. `e/out` leads elsewhere and is
    // walked under its own name. Links to files (`flink`) are always left out.
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
        ]
    );

    // A link as the root is walked only when following.
    let link_root = |options: Value| json!({"path": scratch.uri("tree/dlink"), "options": options});
    let walk = fs.walk(params!(link_root(walk_options(10, 100, 100)))).await.unwrap();
    assert_eq!(walk, FsWalkResponse::default());
    let walk = fs.walk(params!(link_root(following))).await.unwrap();
    assert_eq!(
        walked(&scratch, &walk),
        expected(&[
            ("tree/dlink/b", "directory"),
            ("tree/dlink/f2", "file"),
            ("tree/dlink/b/c", "directory"),
            ("tree/dlink/b/f3", "file"),
        ])
    );
}

pub async fn walk_roots_that_are_not_directories(fs: &dyn FileSystem) {
    let scratch = walk_tree("walk-roots");
    let walk = |name: &str| {
        fs.walk(params!(json!({"path": scratch.uri(name), "options": walk_options(10, 100, 100)})))
    };

    assert_eq!(walk("tree/f1").await.unwrap(), FsWalkResponse::default());
    assert_eq!(walk("tree/fifo").await.unwrap(), FsWalkResponse::default());
    assert_fails(walk("missing").await, NotFound, &os(ENOENT));
    assert_fails(walk("tree/dang").await, NotFound, &os(ENOENT));
}

pub async fn walk_reports_non_utf8_names_as_errors(fs: &dyn FileSystem) {
    let scratch = Scratch::new("walk-non-utf8");
    scratch.non_utf8_file("");
    scratch.file("good", b"x");

    let walk = json!({"path": scratch.uri(""), "options": walk_options(0, 1, 10)});
    let walk = fs.walk(params!(walk)).await.unwrap();
    // The name travels as a string, so it comes out lossy and no longer names the file: the
    // reference reports it as an error for that lossy path, and so does Tether. The walk goes
    // on with the other names.
    let lossy = scratch.path("bad-\u{fffd}");
    assert_eq!(
        walk,
        FsWalkResponse {
            entries: vec![FsWalkEntry { path: scratch.uri("good"), kind: FsWalkEntryKind::File }],
            errors: vec![FsWalkError { path: uri_of(&lossy), message: os(ENOENT) }],
            truncated: false,
        }
    );
    assert!(walk.errors[0].path.as_str().ends_with("/bad-%EF%BF%BD"));
}

// ---------------------------------------------------------------------------------------------
// fs/remove

pub async fn remove_is_recursive_and_forced_by_default(fs: &dyn FileSystem) {
    let scratch = Scratch::new("remove");
    scratch.file("tree/a/b/file.txt", b"x");
    scratch.file("full/file.txt", b"x");
    scratch.dir("empty");
    scratch.file("file.txt", b"x");
    scratch.fifo("fifo");
    let remove = |value: Value| fs.remove(params!(value));

    remove(json!({"path": scratch.uri("tree")})).await.unwrap();
    remove(json!({"path": scratch.uri("missing")})).await.unwrap();
    remove(json!({"path": scratch.uri("missing/deeper")})).await.unwrap();
    remove(json!({"path": scratch.uri("fifo"), "force": false})).await.unwrap();
    remove(json!({"path": scratch.uri("empty"), "recursive": false})).await.unwrap();
    assert!(!scratch.path("tree").exists() && !scratch.path("empty").exists());
    assert!(std::fs::symlink_metadata(scratch.path("fifo")).is_err());

    let unforced = remove(json!({"path": scratch.uri("missing"), "force": false})).await;
    assert_fails(unforced, NotFound, &os(ENOENT));
    let full = remove(json!({"path": scratch.uri("full"), "recursive": false})).await;
    assert_fails(full, Other, &os(ENOTEMPTY));
    // `force` forgives only what is missing.
    let under_file = remove(json!({"path": scratch.uri("file.txt/x")})).await;
    assert_fails(under_file, Other, &os(ENOTDIR));
    assert!(scratch.path("full/file.txt").exists());
}

pub async fn remove_removes_links_not_their_targets(fs: &dyn FileSystem) {
    let scratch = Scratch::new("remove-links");
    scratch.file("target/keep.txt", b"keep");
    scratch.file("file.txt", b"keep");
    scratch.symlink("target", "dir-link");
    scratch.symlink("target", "dir-link-2");
    scratch.symlink("file.txt", "file-link");
    scratch.symlink("nowhere", "dangling");

    fs.remove(params!(json!({"path": scratch.uri("dir-link")}))).await.unwrap();
    let exact = json!({"path": scratch.uri("dir-link-2"), "recursive": false, "force": false});
    fs.remove(params!(exact)).await.unwrap();
    fs.remove(params!(json!({"path": scratch.uri("file-link"), "force": false}))).await.unwrap();
    fs.remove(params!(json!({"path": scratch.uri("dangling"), "force": false}))).await.unwrap();

    for link in ["dir-link", "dir-link-2", "file-link", "dangling"] {
        assert!(std::fs::symlink_metadata(scratch.path(link)).is_err(), "{link} is gone");
    }
    assert_eq!(std::fs::read(scratch.path("target/keep.txt")).unwrap(), b"keep");
    assert_eq!(std::fs::read(scratch.path("file.txt")).unwrap(), b"keep");
}

// ---------------------------------------------------------------------------------------------
// fs/copy

pub async fn copy_copies_files_and_trees_with_links_as_links(fs: &dyn FileSystem) {
    let scratch = Scratch::new("copy");
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
    let copy = |from: &str, to: &str, recursive: bool| {
        fs.copy(params!(
            json!({"sourcePath": scratch.uri(from), "destinationPath": scratch.uri(to),
            "recursive": recursive})
        ))
    };

    copy("src/run.sh", "copied.sh", false).await.unwrap();
    assert_eq!(std::fs::read(scratch.path("copied.sh")).unwrap(), b"#!/bin/sh\n");
    let mode = std::fs::metadata(scratch.path("copied.sh")).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o750, "permissions are copied");
    // `recursive` is no obstacle to copying a file.
    copy("src/run.sh", "copied-too.sh", true).await.unwrap();
    assert_eq!(std::fs::read(scratch.path("copied-too.sh")).unwrap(), b"#!/bin/sh\n");

    copy("src", "out/nested", true).await.unwrap();
    assert_eq!(std::fs::read(scratch.path("out/nested/sub/deep.txt")).unwrap(), b"deep");
    for (link, target) in
        [("link", "run.sh"), ("escape", "../outside.txt"), ("dangling", "nowhere")]
    {
        let copied = scratch.path(&format!("out/nested/{link}"));
        assert_eq!(std::fs::read_link(copied).unwrap().to_str(), Some(target), "{link}");
    }
    assert!(std::fs::symlink_metadata(scratch.path("out/nested/fifo")).is_err(), "FIFOs skipped");

    // Into an existing directory: merged, files overwritten.
    copy("src", "merge", true).await.unwrap();
    assert_eq!(std::fs::read(scratch.path("merge/run.sh")).unwrap(), b"#!/bin/sh\n");
    assert_eq!(std::fs::read(scratch.path("merge/kept.txt")).unwrap(), b"kept");

    // A link as the source is copied as a link, recursive or not.
    copy("src-link", "link-copy", false).await.unwrap();
    assert_eq!(std::fs::read_link(scratch.path("link-copy")).unwrap().to_str(), Some("src"));
}

pub async fn copy_refuses_what_it_cannot_copy(fs: &dyn FileSystem) {
    let scratch = Scratch::new("copy-errors");
    scratch.file("src/file.txt", b"x");
    scratch.dir("existing-dir");
    scratch.file("file.txt", b"x");
    scratch.symlink("src", "src-link");
    scratch.symlink("file.txt", "file-link");
    scratch.fifo("fifo");
    let copy = |from: &str, to: &str, recursive: bool| {
        fs.copy(params!(
            json!({"sourcePath": scratch.uri(from), "destinationPath": scratch.uri(to),
            "recursive": recursive})
        ))
    };

    let needs_recursive = "fs/copy requires recursive: true when sourcePath is a directory";
    assert_fails(copy("src", "out", false).await, InvalidInput, needs_recursive);
    let into_itself = "fs/copy cannot copy a directory to itself or one of its descendants";
    assert_fails(copy("src", "src", true).await, InvalidInput, into_itself);
    assert_fails(copy("src", "src/inner", true).await, InvalidInput, into_itself);
    assert_fails(copy("src", "src-link/inner", true).await, InvalidInput, into_itself);
    assert!(!scratch.path("src/inner").exists());
    let special = "fs/copy only supports regular files, directories, and symlinks";
    assert_fails(copy("fifo", "fifo-copy", false).await, InvalidInput, special);
    assert_fails(copy("file.txt", "existing-dir", false).await, Other, &os(EISDIR));
    assert_fails(copy("src", "file.txt", true).await, Other, &os(EEXIST));
    assert_fails(copy("file-link", "file-link", false).await, Other, &os(EEXIST));
    assert_fails(copy("missing", "out", false).await, NotFound, &os(ENOENT));
    assert_fails(copy("file.txt", "missing/out", false).await, NotFound, &os(ENOENT));
    let foreign = fs.copy(params!(json!({"sourcePath": "file://otherhost/x",
        "destinationPath": scratch.uri("y"), "recursive": false})));
    assert_fails(foreign.await, InvalidInput, "'file://otherhost/x' is invalid on 'linux'");
    assert!(!scratch.path("out").exists() && !scratch.path("y").exists(), "nothing is copied");
}

/// Tether's own: the reference truncates a file copied onto itself to nothing.
pub async fn copy_onto_itself_keeps_the_file(fs: &dyn FileSystem) {
    let scratch = Scratch::new("copy-itself");
    scratch.file("file.txt", b"precious");
    scratch.symlink("file.txt", "alias");
    let copy = |to: &str| {
        fs.copy(params!(json!({"sourcePath": scratch.uri("file.txt"),
            "destinationPath": scratch.uri(to), "recursive": false})))
    };

    copy("file.txt").await.unwrap();
    copy("alias").await.unwrap();
    assert_eq!(std::fs::read(scratch.path("file.txt")).unwrap(), b"precious");
}

// ---------------------------------------------------------------------------------------------
// Sandbox intents

/// Under the read-only intent, reads are served and every write is refused with nothing
/// touched: by the sandbox's kernel (`Read-only file system`, which the conformance suite
/// checks word for word), or, where no sandbox can be built (the engine in-process, without the
/// `tether` binary's helper), before anything runs. Either way an `Other` error, never an
/// unconfined write.
pub async fn read_only_sandboxes_serve_reads_and_refuse_every_write(fs: &dyn FileSystem) {
    let scratch = Scratch::new("sandbox");
    scratch.file("file.txt", b"x");
    let sandbox = read_only_sandbox();
    let with_sandbox = |mut value: Value| {
        value["sandbox"] = sandbox.clone();
        value
    };
    let refused = |error: FsError| assert_eq!(error.kind, FsErrorKind::Other, "{}", error.message);

    let file = scratch.uri("file.txt");
    let new = scratch.uri("new");
    let read = fs.read_file(params!(with_sandbox(json!({"path": file})))).await.unwrap();
    assert_eq!(read.data_base64.0, "x");
    let metadata = fs.get_metadata(params!(with_sandbox(json!({"path": file})))).await.unwrap();
    assert!(metadata.is_file);
    fs.canonicalize(params!(with_sandbox(json!({"path": file})))).await.unwrap();
    let list = json!({"path": scratch.uri("")});
    assert_eq!(fs.read_directory(params!(with_sandbox(list))).await.unwrap().entries.len(), 1);

    let write = json!({"path": new, "dataBase64": "eA=="});
    refused(fs.write_file(params!(with_sandbox(write))).await.unwrap_err());
    refused(fs.create_directory(params!(with_sandbox(json!({"path": new})))).await.unwrap_err());
    refused(fs.remove(params!(with_sandbox(json!({"path": file})))).await.unwrap_err());
    let copy = json!({"sourcePath": file, "destinationPath": new, "recursive": false});
    refused(fs.copy(params!(with_sandbox(copy))).await.unwrap_err());
    assert!(!scratch.path("new").exists() && scratch.path("file.txt").exists());

    // Asking for no confinement is honoured, writes included.
    let disabled = json!({"permissions": {"type": "disabled"}, "windowsSandboxLevel": "disabled"});
    for sandbox in [disabled, Value::Null] {
        let write = json!({"path": new, "dataBase64": "eA==", "sandbox": sandbox});
        fs.write_file(params!(write)).await.unwrap();
        assert_eq!(std::fs::read(scratch.path("new")).unwrap(), b"x");
    }
}

// ---------------------------------------------------------------------------------------------
// Streamed reads (remotely: fs/open, fs/readBlock, fs/close)

/// Every block of a stream, or the error it ended with.
async fn blocks(mut stream: FileReadStream) -> Result<Vec<Vec<u8>>, FsError> {
    let mut blocks = Vec::new();
    while let Some(block) = stream.next().await {
        blocks.push(block?.to_vec());
    }
    Ok(blocks)
}

fn lengths(blocks: &[Vec<u8>]) -> Vec<usize> {
    blocks.iter().map(Vec::len).collect()
}

pub async fn read_file_stream_yields_the_file_in_blocks_of_at_most_1_mib(fs: &dyn FileSystem) {
    let scratch = Scratch::new("stream");
    let bytes: Vec<u8> = (0..=255u8).cycle().take(2 * FS_BLOCK_MAX_BYTES + 5).collect();
    scratch.file("data.bin", &bytes);
    scratch.file("exact.bin", &bytes[..2 * FS_BLOCK_MAX_BYTES]);
    scratch.file("empty", b"");
    scratch.symlink("data.bin", "link");

    for name in ["data.bin", "link"] {
        let read = blocks(fs.read_file_stream(scratch.uri(name), None).await.unwrap()).await;
        let read = read.unwrap();
        assert_eq!(lengths(&read), [FS_BLOCK_MAX_BYTES, FS_BLOCK_MAX_BYTES, 5], "{name}");
        assert_eq!(read.concat(), bytes, "{name}");
    }
    // A file that ends exactly at a block boundary ends there: no empty block after it.
    let exact = blocks(fs.read_file_stream(scratch.uri("exact.bin"), None).await.unwrap()).await;
    assert_eq!(lengths(&exact.unwrap()), [FS_BLOCK_MAX_BYTES, FS_BLOCK_MAX_BYTES]);
    let empty = blocks(fs.read_file_stream(scratch.uri("empty"), None).await.unwrap()).await;
    assert!(empty.unwrap().is_empty());
}

pub async fn read_file_stream_refuses_what_is_not_a_regular_file_promptly(fs: &dyn FileSystem) {
    let scratch = Scratch::new("stream-refused");
    let dir = scratch.dir("dir");
    let fifo = scratch.fifo("fifo");
    scratch.file("file.txt", b"x");

    // A FIFO with no writer would block an open for reading: refused, never opened.
    let opened = fs.read_file_stream(scratch.uri("fifo"), None);
    let refused = tokio::time::timeout(Duration::from_secs(5), opened).await.expect("promptly");
    assert_fails(refused, InvalidInput, &format!("path `{}` is not a file", fifo.display()));
    let refused = fs.read_file_stream(scratch.uri("dir"), None).await;
    assert_fails(refused, InvalidInput, &format!("path `{}` is not a file", dir.display()));
    assert_fails(fs.read_file_stream(scratch.uri("missing"), None).await, NotFound, &os(ENOENT));
    // Reading under the read-only intent needs no sandbox: `/` is readable.
    let sandbox = crate::params::strict(read_only_sandbox());
    let sandboxed = fs.read_file_stream(scratch.uri("file.txt"), Some(sandbox)).await;
    assert_eq!(blocks(sandboxed.unwrap()).await.unwrap().concat(), b"x");
}

pub async fn read_file_stream_keeps_reading_the_file_it_opened(fs: &dyn FileSystem) {
    let scratch = Scratch::new("stream-replaced");
    let first: Vec<u8> = vec![b'1'; FS_BLOCK_MAX_BYTES + 10];
    scratch.file("file.bin", &first);
    let mut stream = fs.read_file_stream(scratch.uri("file.bin"), None).await.unwrap();
    let head = stream.next().await.unwrap().unwrap();

    scratch.file("next.bin", b"second version");
    std::fs::rename(scratch.path("next.bin"), scratch.path("file.bin")).unwrap();
    let rest = blocks(stream).await.unwrap().concat();
    assert_eq!([head.to_vec(), rest].concat(), first);
}

/// A connection may hold only so many open files: a stream read to its end gives its own back.
pub async fn finished_streams_give_their_handles_back(fs: &dyn FileSystem) {
    let scratch = Scratch::new("stream-handles");
    scratch.file("small.txt", b"small");

    for _ in 0..FS_MAX_OPEN_HANDLES + 20 {
        let read = blocks(fs.read_file_stream(scratch.uri("small.txt"), None).await.unwrap());
        assert_eq!(read.await.unwrap(), [b"small".to_vec()]);
    }
}

// ---------------------------------------------------------------------------------------------
// Streamed writes (remotely: fs/open in replace mode, fs/writeBlock, fs/close)

/// Bytes that differ from block to block and within each, so a block written at the wrong
/// offset, twice or not at all cannot go unnoticed.
fn varied_bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8).collect()
}

pub async fn write_file_stream_writes_blocks_in_order(fs: &dyn FileSystem) {
    let scratch = Scratch::new("write-stream");
    let bytes = varied_bytes(3 * FS_BLOCK_MAX_BYTES + FS_BLOCK_MAX_BYTES / 2);
    let existing = scratch.file("existing.bin", &varied_bytes(2 * FS_BLOCK_MAX_BYTES));
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o751)).unwrap();
    let inode = std::fs::metadata(&existing).unwrap().ino();

    // Chunks of every shape: a byte, less than a block, more than two blocks (split by the
    // stream), nothing, and the rest.
    let mut stream = fs.write_file_stream(scratch.uri("big.bin"), None).await.unwrap();
    let mut rest = bytes::Bytes::from(bytes.clone());
    for len in [1, 700_000, 2 * FS_BLOCK_MAX_BYTES + 3, 0] {
        stream.write(rest.split_to(len)).await.unwrap();
    }
    stream.write(rest).await.unwrap();
    stream.finish().await.unwrap();
    assert!(scratch.read("big.bin") == bytes, "the file is byte for byte what was written");

    // An existing file is truncated in place: same inode, same mode, only the new bytes.
    let mut stream = fs.write_file_stream(scratch.uri("existing.bin"), None).await.unwrap();
    stream.write(bytes::Bytes::from_static(b"short")).await.unwrap();
    stream.finish().await.unwrap();
    assert_eq!(scratch.read("existing.bin"), b"short");
    let metadata = std::fs::metadata(&existing).unwrap();
    assert_eq!((metadata.ino(), metadata.mode() & 0o777), (inode, 0o751));

    // Nothing written is an empty file, created when the stream opened.
    let stream = fs.write_file_stream(scratch.uri("empty.bin"), None).await.unwrap();
    assert_eq!(scratch.read("empty.bin"), b"");
    stream.finish().await.unwrap();
    assert_eq!(scratch.read("empty.bin"), b"");
}

pub async fn write_file_stream_reports_a_missing_directory_as_not_found(fs: &dyn FileSystem) {
    let scratch = Scratch::new("write-stream-errors");
    scratch.dir("dir");

    let missing = fs.write_file_stream(scratch.uri("missing/file.bin"), None).await;
    assert_fails(missing, NotFound, &os(ENOENT));
    assert_fails(fs.write_file_stream(scratch.uri("dir"), None).await, Other, &os(EISDIR));
    assert!(!scratch.exists("missing"));
}

// ---------------------------------------------------------------------------------------------
// Tether's fsMetadata extension: fs/rename, fs/setMetadata, fs/createSymlink, fs/readLink,
// fs/getMetadata {includeMode}

fn rename_params(scratch: &Scratch, from: &str, to: &str) -> FsRenameParams {
    params!(json!({"sourcePath": scratch.uri(from), "destinationPath": scratch.uri(to)}))
}

pub async fn rename_replaces_files_and_moves_trees(fs: &dyn FileSystem) {
    let scratch = Scratch::new("rename");
    let new = scratch.file("new.txt", b"new");
    let inode = std::fs::metadata(&new).unwrap().ino();
    scratch.file("old.txt", b"old");
    scratch.file("tree/sub/deep.txt", b"deep");
    scratch.symlink("sub/deep.txt", "tree/link");
    scratch.file("full/x", b"x");
    let rename = |from: &str, to: &str| fs.rename(rename_params(&scratch, from, to));

    // A file replaces another: the destination is the source's inode, the source is gone.
    rename("new.txt", "old.txt").await.unwrap();
    assert_eq!(scratch.read("old.txt"), b"new");
    assert_eq!(std::fs::metadata(scratch.path("old.txt")).unwrap().ino(), inode);
    assert!(!scratch.exists("new.txt"));
    // A tree moves whole, links as links.
    rename("tree", "moved").await.unwrap();
    assert_eq!(scratch.read("moved/sub/deep.txt"), b"deep");
    assert_eq!(
        std::fs::read_link(scratch.path("moved/link")).unwrap().to_str(),
        Some("sub/deep.txt")
    );
    assert!(!scratch.exists("tree"));

    assert_fails(rename("missing", "elsewhere").await, NotFound, &os(ENOENT));
    assert_fails(rename("old.txt", "missing/x").await, NotFound, &os(ENOENT));
    assert_fails(rename("moved", "full").await, Other, &os(ENOTEMPTY));
    assert_fails(rename("old.txt", "moved").await, Other, &os(EISDIR));
    assert_fails(rename("moved", "moved/sub/inside").await, InvalidInput, &os(EINVAL));
    assert_eq!(scratch.read("old.txt"), b"new", "a refused rename moves nothing");
}

fn mtime_ms(metadata: &std::fs::Metadata) -> i64 {
    metadata.mtime() * 1000 + metadata.mtime_nsec() / 1_000_000
}

pub async fn set_metadata_sets_the_mode_and_time_of_the_path_itself(fs: &dyn FileSystem) {
    let scratch = Scratch::new("set-metadata");
    let file = scratch.file("file.txt", b"x");
    let target = scratch.file("target.txt", b"t");
    let link = scratch.symlink("target.txt", "link");
    let dir = scratch.dir("dir");
    let accessed = UNIX_EPOCH + Duration::from_secs(1_000_000);
    let times = std::fs::FileTimes::new().set_accessed(accessed);
    std::fs::File::open(&file).unwrap().set_times(times).unwrap();
    let set = |name: &str, extra: Value| {
        let mut params = json!({"path": scratch.uri(name)});
        params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        fs.set_metadata(params!(params))
    };

    set("file.txt", json!({"mode": 0o640, "modifiedAtMs": 1_234_567_890_123i64})).await.unwrap();
    let metadata = std::fs::metadata(&file).unwrap();
    assert_eq!(metadata.mode() & 0o7777, 0o640);
    assert_eq!(mtime_ms(&metadata), 1_234_567_890_123);
    assert_eq!(metadata.atime(), 1_000_000, "the access time is left as it was");
    // Only the permission bits are taken (the file stays a file); each member alone changes
    // only itself.
    set("file.txt", json!({"mode": 0o100755})).await.unwrap();
    let metadata = std::fs::metadata(&file).unwrap();
    assert_eq!((metadata.mode() & 0o7777, mtime_ms(&metadata)), (0o755, 1_234_567_890_123));
    assert!(metadata.is_file());
    set("file.txt", json!({"modifiedAtMs": -1_234})).await.unwrap();
    let metadata = std::fs::metadata(&file).unwrap();
    assert_eq!((metadata.mode() & 0o7777, mtime_ms(&metadata)), (0o755, -1_234));
    set("dir", json!({"mode": 0o1750})).await.unwrap();
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o7777, 0o1750);
    set("file.txt", json!({})).await.unwrap();

    // A link: its own time is set, its target untouched; a mode is refused, not passed on.
    let target_before = std::fs::metadata(&target).unwrap();
    set("link", json!({"modifiedAtMs": 5_000})).await.unwrap();
    assert_eq!(mtime_ms(&std::fs::symlink_metadata(&link).unwrap()), 5_000);
    let no_mode = format!(
        "`{}` is a symbolic link, which has no mode of its own: set the mode of its target instead",
        link.display()
    );
    let refused = set("link", json!({"mode": 0o600, "modifiedAtMs": 6_000})).await;
    assert_fails(refused, InvalidInput, &no_mode);
    assert_eq!(mtime_ms(&std::fs::symlink_metadata(&link).unwrap()), 5_000, "nothing was set");
    let target_after = std::fs::metadata(&target).unwrap();
    assert_eq!(target_after.mode(), target_before.mode());
    assert_eq!(mtime_ms(&target_after), mtime_ms(&target_before));

    assert_fails(set("missing", json!({"mode": 0o600})).await, NotFound, &os(ENOENT));
    assert_fails(set("missing", json!({})).await, NotFound, &os(ENOENT));
}

/// The names in `scratch`'s directory `relative`, sorted: what is there, and nothing else.
fn names_in(scratch: &Scratch, relative: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(scratch.path(relative))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

pub async fn put_file_puts_a_whole_file_in_place_with_its_mode_and_time(fs: &dyn FileSystem) {
    let scratch = Scratch::new("put-file");
    scratch.file("old.txt", b"the old contents, longer than the new");
    scratch.file("target.txt", b"kept");
    let link = scratch.symlink("target.txt", "link");
    scratch.dir("dir");
    let put = |name: &str, data: &[u8], extra: Value| {
        let data = tether_protocol::ByteChunk::from(data);
        let mut params = json!({"path": scratch.uri(name), "dataBase64": data});
        params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        fs.put_file(params!(params))
    };

    // New and replaced files, with what was asked of their mode and time.
    put("new.txt", b"new", json!({"mode": 0o750, "modifiedAtMs": 1_234_567_890_123i64}))
        .await
        .unwrap();
    let metadata = std::fs::metadata(scratch.path("new.txt")).unwrap();
    assert_eq!(scratch.read("new.txt"), b"new");
    assert_eq!((metadata.mode() & 0o7777, mtime_ms(&metadata)), (0o750, 1_234_567_890_123));
    put("old.txt", b"short", json!({"mode": 0o100600, "modifiedAtMs": -1_234})).await.unwrap();
    let metadata = std::fs::metadata(scratch.path("old.txt")).unwrap();
    assert_eq!(scratch.read("old.txt"), b"short");
    assert_eq!((metadata.mode() & 0o7777, mtime_ms(&metadata)), (0o600, -1_234));
    put("empty", b"", json!({})).await.unwrap();
    assert_eq!(scratch.read("empty"), b"");
    // Without a mode, a new file's: 0o666 less the umask (the server's is the test's).
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let umask = status.lines().find_map(|line| line.strip_prefix("Umask:")).unwrap();
    let umask = u32::from_str_radix(umask.trim(), 8).unwrap();
    let mode = std::fs::metadata(scratch.path("empty")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o666 & !umask);

    // A link at the path is replaced by the file; its target is left alone.
    put("link", b"through?", json!({})).await.unwrap();
    assert!(std::fs::symlink_metadata(&link).unwrap().is_file());
    assert_eq!(
        (scratch.read("link"), scratch.read("target.txt")),
        (b"through?".to_vec(), b"kept".to_vec())
    );

    // Failures leave the path as it was and nothing else behind.
    assert_fails(put("dir", b"x", json!({})).await, Other, &os(EISDIR));
    assert_fails(put("missing/file", b"x", json!({})).await, NotFound, &os(ENOENT));
    assert_fails(put("old.txt/below", b"x", json!({})).await, Other, &os(ENOTDIR));
    assert_eq!(
        names_in(&scratch, ""),
        ["dir", "empty", "link", "new.txt", "old.txt", "target.txt"],
        "no temporary file is left"
    );
    assert!(names_in(&scratch, "dir").is_empty());
}

pub async fn read_directory_with_metadata_gives_each_entrys_own(fs: &dyn FileSystem) {
    let scratch = Scratch::new("listing-metadata");
    let file = scratch.file("file.txt", b"12345");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let old = UNIX_EPOCH + Duration::from_millis(1_234_567_890_123);
    std::fs::File::open(&file).unwrap().set_modified(old).unwrap();
    let dir = scratch.dir("dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1750)).unwrap();
    scratch.symlink("file.txt", "link");
    scratch.symlink("nowhere", "dangling");
    let list = |extra: Value| {
        let mut params = json!({"path": scratch.uri("")});
        params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        async move {
            let mut entries = fs.read_directory(params!(params)).await.unwrap().entries;
            entries.sort_by(|a, b| a.file_name.cmp(&b.file_name));
            entries
        }
    };
    let own = |name: &str| {
        let metadata = std::fs::symlink_metadata(scratch.path(name)).unwrap();
        FsEntryMetadata {
            is_symlink: metadata.file_type().is_symlink(),
            size: metadata.len(),
            modified_at_ms: mtime_ms(&metadata),
            mode: metadata.mode() & 0o7777,
        }
    };

    let entries = list(json!({"includeMetadata": true})).await;
    let seen: Vec<_> = entries
        .iter()
        .map(|e| (e.file_name.as_str(), e.is_directory, e.is_file, e.metadata.clone().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("dangling", false, false, own("dangling")),
            ("dir", true, false, own("dir")),
            ("file.txt", false, true, own("file.txt")),
            ("link", false, true, own("link")),
        ]
    );
    let file = &seen[2].3;
    assert_eq!((file.size, file.mode, file.modified_at_ms), (5, 0o640, 1_234_567_890_123));
    assert_eq!((seen[1].3.mode, seen[3].3.is_symlink, seen[3].3.size), (0o1750, true, 8));

    // Without it, the reference's listing: no metadata, no dangling link.
    for extra in [json!({}), json!({"includeMetadata": false})] {
        let entries = list(extra).await;
        let names: Vec<_> = entries.iter().map(|e| e.file_name.as_str()).collect();
        assert_eq!(names, ["dir", "file.txt", "link"]);
        assert!(entries.iter().all(|e| e.metadata.is_none()));
    }
}

pub async fn create_symlink_and_read_link_round_trip(fs: &dyn FileSystem) {
    let scratch = Scratch::new("symlinks");
    scratch.file("file.txt", b"x");
    scratch.dir("dir");
    let create = |name: &str, target: &str| {
        fs.create_symlink(params!(json!({"path": scratch.uri(name), "target": target})))
    };
    let read = |name: &str| fs.read_link(params!(json!({"path": scratch.uri(name)})));

    // Targets are kept as given: relative, absolute, dangling, odd.
    let absolute = scratch.path("file.txt").display().to_string();
    for (name, target) in [
        ("relative", "file.txt"),
        ("upward", "dir/../file.txt"),
        ("absolute", absolute.as_str()),
        ("dangling", "nowhere/at all"),
        ("unicode", "ünïcødé ✓"),
    ] {
        create(name, target).await.unwrap();
        assert_eq!(std::fs::read_link(scratch.path(name)).unwrap().to_str(), Some(target));
        assert_eq!(read(name).await.unwrap().target, target, "{name}");
    }
    assert_eq!(scratch.read("upward"), b"x");

    assert_fails(create("file.txt", "elsewhere").await, Other, &os(EEXIST));
    assert_fails(create("relative", "elsewhere").await, Other, &os(EEXIST));
    assert_fails(create("dir", "elsewhere").await, Other, &os(EEXIST));
    assert_eq!(std::fs::read_link(scratch.path("relative")).unwrap().to_str(), Some("file.txt"));
    assert_fails(create("missing/link", "x").await, NotFound, &os(ENOENT));

    assert_fails(read("file.txt").await, InvalidInput, &os(EINVAL));
    assert_fails(read("dir").await, InvalidInput, &os(EINVAL));
    assert_fails(read("missing").await, NotFound, &os(ENOENT));
    // A target that is not UTF-8 cannot travel as JSON text.
    let bad = std::ffi::OsStr::from_bytes(b"bad-\xff");
    std::os::unix::fs::symlink(bad, scratch.path("not-utf8")).unwrap();
    let not_utf8 = format!(
        "the target of symbolic link `{}` is not UTF-8, which JSON text cannot carry",
        scratch.path("not-utf8").display()
    );
    assert_fails(read("not-utf8").await, InvalidInput, &not_utf8);
}

pub async fn get_metadata_gives_the_mode_only_when_asked(fs: &dyn FileSystem) {
    let scratch = Scratch::new("metadata-mode");
    let file = scratch.file("file.txt", b"x");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o751)).unwrap();
    let dir = scratch.dir("dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1700)).unwrap();
    scratch.symlink("file.txt", "link");
    let mode = |name: &str, extra: Value| {
        let mut params = json!({"path": scratch.uri(name)});
        params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        async move { fs.get_metadata(params!(params)).await.unwrap().mode }
    };

    assert_eq!(mode("file.txt", json!({"includeMode": true})).await, Some(0o751));
    assert_eq!(mode("dir", json!({"includeMode": true})).await, Some(0o1700));
    assert_eq!(mode("link", json!({"includeMode": true})).await, Some(0o751), "the target's");
    let own = json!({"includeMode": true, "followSymlinks": false});
    assert_eq!(mode("file.txt", own).await, Some(0o751));
    assert_eq!(mode("file.txt", json!({})).await, None);
    assert_eq!(mode("file.txt", json!({"includeMode": false})).await, None);
}

/// Under the read-only intent the extension's reads are served and its writes refused with
/// nothing touched, as every other write is
/// ([`read_only_sandboxes_serve_reads_and_refuse_every_write`]).
pub async fn read_only_sandboxes_refuse_the_new_writes(fs: &dyn FileSystem) {
    let scratch = Scratch::new("sandbox-metadata");
    let file = scratch.file("file.txt", b"x");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    scratch.symlink("file.txt", "link");
    let sandbox = read_only_sandbox();
    let with_sandbox = |mut value: Value| {
        value["sandbox"] = sandbox.clone();
        value
    };
    // By the sandbox's kernel, or before anything runs where no sandbox can be built.
    let refused = |error: FsError| {
        let by_kernel = error.message == os(EROFS);
        let unbuilt = error.message.starts_with("fs sandbox helper failed to start: ");
        assert!(error.kind == Other && (by_kernel || unbuilt), "{error:?}");
    };
    let mtime_before = mtime_ms(&std::fs::metadata(&file).unwrap());

    let read = fs.read_link(params!(with_sandbox(json!({"path": scratch.uri("link")}))));
    assert_eq!(read.await.unwrap().target, "file.txt");
    let metadata = json!({"path": scratch.uri("file.txt"), "includeMode": true});
    let metadata = fs.get_metadata(params!(with_sandbox(metadata))).await.unwrap();
    assert_eq!(metadata.mode, Some(0o644));

    let rename =
        json!({"sourcePath": scratch.uri("file.txt"), "destinationPath": scratch.uri("moved")});
    refused(fs.rename(params!(with_sandbox(rename))).await.unwrap_err());
    let set = json!({"path": scratch.uri("file.txt"), "mode": 0o600, "modifiedAtMs": 0});
    refused(fs.set_metadata(params!(with_sandbox(set))).await.unwrap_err());
    let link = json!({"path": scratch.uri("new-link"), "target": "file.txt"});
    refused(fs.create_symlink(params!(with_sandbox(link))).await.unwrap_err());
    for name in ["put", "file.txt"] {
        let put = json!({"path": scratch.uri(name), "dataBase64": "cHV0", "mode": 0o600});
        refused(fs.put_file(params!(with_sandbox(put))).await.unwrap_err());
    }
    let listed = json!({"path": scratch.uri(""), "includeMetadata": true});
    let listed = fs.read_directory(params!(with_sandbox(listed))).await.unwrap();
    assert!(listed.entries.iter().all(|e| e.metadata.is_some()), "a read, served");
    for name in ["streamed", "file.txt"] {
        let intent = crate::params::strict(read_only_sandbox());
        refused(fs.write_file_stream(scratch.uri(name), Some(intent)).await.unwrap_err());
    }

    assert_eq!(scratch.read("file.txt"), b"x", "not truncated");
    let metadata = std::fs::metadata(&file).unwrap();
    assert_eq!((metadata.mode() & 0o7777, mtime_ms(&metadata)), (0o644, mtime_before));
    for name in ["moved", "new-link", "streamed", "put"] {
        assert!(!scratch.exists(name), "{name}");
    }
    assert_eq!(names_in(&scratch, ""), ["file.txt", "link"], "no temporary file either");
}

/// A sandbox that lets one directory be written: the new writes and a streamed write work
/// there — performed inside the sandbox, by the helper — and are refused by its kernel
/// everywhere else. Remote Tether only: the engine in-process has no helper to confine them.
pub async fn sandboxed_new_writes_are_confined_to_the_writable_root(fs: &dyn FileSystem) {
    let scratch = Scratch::new("sandbox-writable");
    scratch.file("inside/file.txt", b"x");
    scratch.file("outside.txt", b"o");
    let mut sandbox = read_only_sandbox();
    let writable = json!({"path": {"type": "path", "path": scratch.uri("inside")},
        "access": "write"});
    sandbox["permissions"]["file_system"]["entries"].as_array_mut().unwrap().push(writable);
    let with_sandbox = |mut value: Value| {
        value["sandbox"] = sandbox.clone();
        value
    };
    let intent = || crate::params::strict(sandbox.clone());
    let by_kernel = |error: FsError| assert_eq!((error.kind, error.message), (Other, os(EROFS)));

    let streamed = varied_bytes(FS_BLOCK_MAX_BYTES + 7);
    let opened = fs.write_file_stream(scratch.uri("inside/streamed"), Some(intent()));
    let mut stream = opened.await.unwrap();
    stream.write(bytes::Bytes::from(streamed.clone())).await.unwrap();
    stream.finish().await.unwrap();
    assert!(scratch.read("inside/streamed") == streamed);
    let set = json!({"path": scratch.uri("inside/file.txt"), "mode": 0o600, "modifiedAtMs": 7_000});
    fs.set_metadata(params!(with_sandbox(set))).await.unwrap();
    let metadata = std::fs::metadata(scratch.path("inside/file.txt")).unwrap();
    assert_eq!((metadata.mode() & 0o7777, mtime_ms(&metadata)), (0o600, 7_000));
    let link = json!({"path": scratch.uri("inside/link"), "target": "file.txt"});
    fs.create_symlink(params!(with_sandbox(link))).await.unwrap();
    let rename = json!({"sourcePath": scratch.uri("inside/link"),
        "destinationPath": scratch.uri("inside/renamed-link")});
    fs.rename(params!(with_sandbox(rename))).await.unwrap();
    let read =
        fs.read_link(params!(with_sandbox(json!({"path": scratch.uri("inside/renamed-link")}))));
    assert_eq!(read.await.unwrap().target, "file.txt");

    let put = json!({"path": scratch.uri("inside/put"), "dataBase64": "cHV0", "mode": 0o640});
    fs.put_file(params!(with_sandbox(put))).await.unwrap();
    assert_eq!(scratch.read("inside/put"), b"put");
    assert_eq!(std::fs::metadata(scratch.path("inside/put")).unwrap().mode() & 0o7777, 0o640);
    let put = json!({"path": scratch.uri("outside.txt"), "dataBase64": "cHV0"});
    by_kernel(fs.put_file(params!(with_sandbox(put))).await.unwrap_err());
    assert_eq!(scratch.read("outside.txt"), b"o");

    by_kernel(fs.write_file_stream(scratch.uri("escaped"), Some(intent())).await.unwrap_err());
    let set = json!({"path": scratch.uri("outside.txt"), "mode": 0o600});
    by_kernel(fs.set_metadata(params!(with_sandbox(set))).await.unwrap_err());
    let link = json!({"path": scratch.uri("escaped-link"), "target": "inside"});
    by_kernel(fs.create_symlink(params!(with_sandbox(link))).await.unwrap_err());
    let out = json!({"sourcePath": scratch.uri("inside/file.txt"),
        "destinationPath": scratch.uri("escaped-file")});
    // The writable root is a mount of its own in the sandbox: leaving it is a move between
    // mounts, which `rename(2)` refuses before the read-only question arises.
    let moved_out = fs.rename(params!(with_sandbox(out))).await;
    assert_fails(moved_out, Other, &os(EXDEV));
    assert!(!scratch.exists("escaped") && !scratch.exists("escaped-link"));
    assert!(!scratch.exists("escaped-file") && scratch.exists("inside/file.txt"));
    assert_eq!(std::fs::metadata(scratch.path("outside.txt")).unwrap().mode() & 0o7777, 0o644);
}

// ---------------------------------------------------------------------------------------------
// fs/open, fs/readBlock, fs/writeBlock, fs/close

fn open(id: &str, uri: &PathUri) -> FsOpenParams {
    params!(json!({"handleId": id, "path": uri}))
}

fn open_replace(id: &str, uri: &PathUri) -> FsOpenParams {
    params!(json!({"handleId": id, "path": uri, "mode": "replace"}))
}

fn read_block(id: &str, offset: u64, len: usize) -> FsReadBlockParams {
    params!(json!({"handleId": id, "offset": offset, "len": len}))
}

fn write_block(id: &str, offset: u64, bytes: &[u8]) -> FsWriteBlockParams {
    let chunk = tether_protocol::ByteChunk::from(bytes);
    params!(json!({"handleId": id, "offset": offset, "chunk": chunk}))
}

fn close(id: &str) -> FsCloseParams {
    params!(json!({"handleId": id}))
}

#[track_caller]
fn assert_block(block: FsReadBlockResponse, bytes: &[u8], eof: bool) {
    assert_eq!((&block.chunk.0[..], block.eof), (bytes, eof));
}

pub async fn read_blocks_are_eof_only_when_short(handles: &mut FileHandles) {
    let scratch = Scratch::new("read-blocks");
    scratch.file("hello.txt", b"hello world");
    scratch.file("empty", b"");
    handles.open(open("h1", &scratch.uri("hello.txt"))).await.unwrap();
    handles.open(open("empty", &scratch.uri("empty"))).await.unwrap();

    assert_block(handles.read_block(read_block("h1", 0, 5)).await.unwrap(), b"hello", false);
    // Up to exactly the end is not eof; the next block, past it, is empty and eof.
    assert_block(handles.read_block(read_block("h1", 6, 5)).await.unwrap(), b"world", false);
    assert_block(handles.read_block(read_block("h1", 6, 6)).await.unwrap(), b"world", true);
    assert_block(handles.read_block(read_block("h1", 11, 5)).await.unwrap(), b"", true);
    assert_block(handles.read_block(read_block("h1", 100, 5)).await.unwrap(), b"", true);
    // Positional: any order, any repetition.
    assert_block(handles.read_block(read_block("h1", 0, 1)).await.unwrap(), b"h", false);
    let whole = handles.read_block(read_block("h1", 0, FS_BLOCK_MAX_BYTES)).await.unwrap();
    assert_block(whole, b"hello world", true);
    assert_block(handles.read_block(read_block("empty", 0, 1)).await.unwrap(), b"", true);

    let bad_length = "file read block length must be between 1 and 1048576";
    assert_fails(handles.read_block(read_block("h1", 0, 0)).await, InvalidInput, bad_length);
    let too_long = handles.read_block(read_block("h1", 0, FS_BLOCK_MAX_BYTES + 1)).await;
    assert_fails(too_long, InvalidInput, bad_length);
    // The length is checked before the handle.
    assert_fails(handles.read_block(read_block("nope", 0, 0)).await, InvalidInput, bad_length);
}

pub async fn write_blocks_fill_gaps_and_stay_within_signed_offsets(handles: &mut FileHandles) {
    let scratch = Scratch::new("write-blocks");
    let out = scratch.path("out.bin");
    scratch.file("existing.txt", b"old contents");
    scratch.dir("dir");

    handles.open(open_replace("w", &scratch.uri("out.bin"))).await.unwrap();
    handles.write_block(write_block("w", 4, b"xyz")).await.unwrap();
    handles.write_block(write_block("w", 0, b"ab")).await.unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), b"ab\0\0xyz");

    let bad_length = "file write block length must be between 1 and 1048576";
    assert_fails(handles.write_block(write_block("w", 0, b"")).await, InvalidInput, bad_length);
    let too_long = vec![0; FS_BLOCK_MAX_BYTES + 1];
    assert_fails(
        handles.write_block(write_block("w", 0, &too_long)).await,
        InvalidInput,
        bad_length,
    );
    let out_of_range = "file write range exceeds the signed 64-bit file offset limit";
    let end_past = handles.write_block(write_block("w", i64::MAX as u64 - 1, b"ab")).await;
    assert_fails(end_past, InvalidInput, out_of_range);
    let past = handles.write_block(write_block("w", u64::MAX, b"ab")).await;
    assert_fails(past, InvalidInput, out_of_range);
    // Checked before the handle, as the reference does.
    let unknown = handles.write_block(write_block("nope", u64::MAX, b"ab")).await;
    assert_fails(unknown, InvalidInput, out_of_range);
    handles.write_block(write_block("w", 7, b"!")).await.unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), b"ab\0\0xyz!");

    // `replace` truncates; a directory or a missing parent cannot be opened for writing.
    handles.open(open_replace("t", &scratch.uri("existing.txt"))).await.unwrap();
    assert_eq!(std::fs::read(scratch.path("existing.txt")).unwrap(), b"");
    assert_fails(handles.open(open_replace("d", &scratch.uri("dir"))).await, Other, &os(EISDIR));
    let missing = handles.open(open_replace("m", &scratch.uri("missing/out"))).await;
    assert_fails(missing, NotFound, &os(ENOENT));
}

pub async fn handle_ids_are_bounded_unique_and_limited_per_connection(handles: &mut FileHandles) {
    let scratch = Scratch::new("handle-ids");
    let file = scratch.uri("file.txt");
    scratch.file("file.txt", b"x");

    let longest = "0123456789abcdef0123456789abcdef";
    assert_eq!(handles.open(open(longest, &file)).await.unwrap().handle_id, longest);
    assert_eq!(handles.open(open("", &file)).await.unwrap().handle_id, "");
    let too_long = "file handle ID must not exceed 32 bytes";
    let ids = [format!("{longest}0"), format!("{}é", &longest[..31])];
    for id in &ids {
        assert_fails(handles.open(open(id, &file)).await, InvalidInput, too_long);
    }
    // The id is checked before the path.
    let duplicate = handles.open(open("", &scratch.uri("missing"))).await;
    assert_fails(duplicate, InvalidInput, "file handle `` already exists");

    for index in 2..FS_MAX_OPEN_HANDLES {
        handles.open(open(&format!("h{index}"), &file)).await.unwrap();
    }
    let full = "at most 128 file handles may be open per connection";
    assert_fails(handles.open(open("one-more", &file)).await, InvalidInput, full);
    assert_fails(
        handles.open(open("h2", &file)).await,
        InvalidInput,
        "file handle `h2` already exists",
    );
    handles.close(close("h2")).unwrap();
    handles.open(open("one-more", &file)).await.unwrap();
}

pub async fn closed_and_unknown_handles_are_not_found_and_close_is_idempotent(
    handles: &mut FileHandles,
) {
    let scratch = Scratch::new("handle-close");
    scratch.file("file.txt", b"x");
    handles.open(open("h1", &scratch.uri("file.txt"))).await.unwrap();

    handles.close(close("h1")).unwrap();
    handles.close(close("h1")).unwrap();
    handles.close(close("never-opened")).unwrap();
    let unknown = "unknown file handle `h1`";
    assert_fails(handles.read_block(read_block("h1", 0, 1)).await, NotFound, unknown);
    assert_fails(handles.write_block(write_block("h1", 0, b"x")).await, NotFound, unknown);
    // The id is free again.
    handles.open(open("h1", &scratch.uri("file.txt"))).await.unwrap();
}

pub async fn a_handle_keeps_reading_its_file_after_the_path_is_replaced(handles: &mut FileHandles) {
    let scratch = Scratch::new("handle-replaced");
    scratch.file("file.txt", b"first version");
    handles.open(open("h", &scratch.uri("file.txt"))).await.unwrap();

    scratch.file("next.txt", b"second");
    std::fs::rename(scratch.path("next.txt"), scratch.path("file.txt")).unwrap();
    assert_block(handles.read_block(read_block("h", 0, 5)).await.unwrap(), b"first", false);
    std::fs::remove_file(scratch.path("file.txt")).unwrap();
    assert_block(handles.read_block(read_block("h", 6, 64)).await.unwrap(), b"version", true);
}

pub async fn handles_are_used_only_as_they_were_opened(handles: &mut FileHandles) {
    let scratch = Scratch::new("handle-modes");
    scratch.file("file.txt", b"abc");
    handles.open(open("r", &scratch.uri("file.txt"))).await.unwrap();
    handles.open(open_replace("w", &scratch.uri("out"))).await.unwrap();

    // A failed write leaves the handle open.
    assert_fails(handles.write_block(write_block("r", 0, b"x")).await, Other, &os(EBADF));
    assert_block(handles.read_block(read_block("r", 0, 3)).await.unwrap(), b"abc", false);
    // A failed read closes it.
    assert_fails(handles.read_block(read_block("w", 0, 1)).await, Other, &os(EBADF));
    let closed = handles.write_block(write_block("w", 0, b"x")).await;
    assert_fails(closed, NotFound, "unknown file handle `w`");
    let beyond = handles.read_block(read_block("r", u64::MAX, 1)).await;
    assert_fails(beyond, InvalidInput, &os(EINVAL));
    assert_fails(
        handles.read_block(read_block("r", 0, 1)).await,
        NotFound,
        "unknown file handle `r`",
    );
}

pub async fn open_refuses_anything_but_a_regular_file_promptly(handles: &mut FileHandles) {
    let scratch = Scratch::new("open-special");
    let dir = scratch.dir("dir");
    let fifo = scratch.fifo("fifo");
    scratch.file("file.txt", b"x");
    scratch.symlink("file.txt", "link");

    let opened =
        tokio::time::timeout(Duration::from_secs(5), handles.open(open("f", &uri_of(&fifo))));
    let refused = opened.await.expect("promptly");
    assert_fails(refused, InvalidInput, &format!("path `{}` is not a file", fifo.display()));
    let not_file = format!("path `{}` is not a file", dir.display());
    assert_fails(handles.open(open("d", &scratch.uri("dir"))).await, InvalidInput, &not_file);
    assert_fails(handles.open(open("m", &scratch.uri("missing"))).await, NotFound, &os(ENOENT));
    let foreign = PathUri::parse("file://otherhost/x").unwrap();
    let refused = handles.open(open("o", &foreign)).await;
    assert_fails(refused, InvalidInput, "'file://otherhost/x' is invalid on 'linux'");
    handles.open(open("l", &scratch.uri("link"))).await.unwrap();
    assert_block(handles.read_block(read_block("l", 0, 2)).await.unwrap(), b"x", true);
}
