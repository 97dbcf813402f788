//! The filesystem over the wire, against Tether and against the reference: what only raw
//! JSON-RPC can show.
//!
//! What each `fs/*` call does — the files it reads and leaves, its limits, its messages, the
//! kind of each error — is the trait suite's (`tether_testkit::suites::fs`), which the client
//! runs on both servers (`crates/client/tests/remote_file_system.rs`). The client reads a code
//! as a kind: `-32004` not found, `-32600` invalid input, anything else `Other`, and it decodes
//! answers into types that ignore members they do not know. So this suite keeps what that
//! hides: the shape of each success answer, the raw codes behind `Other`, params that do not
//! decode, the handle methods (`fs/open`, `fs/readBlock`, `fs/writeBlock`, `fs/close`) and
//! their connections, and the scenarios whose trait counterpart runs on Tether only.
//!
//! Both servers run on this machine, so a scenario sets files up with `std::fs` in a scratch
//! directory of its own (the two servers' runs of a scenario go on at the same time), drives the
//! server with raw JSON-RPC, and checks the answers and the files on disk.

use std::time::{Duration, Instant, UNIX_EPOCH};

use serde_json::{Value, json};
use tether_testkit::client::{b64decode, b64encode};
use tether_testkit::scratch::Scratch;
use tether_testkit::{RpcClient, RpcError, ServerProcess, Target, against_both, wait};

against_both!(
    success_answers_have_the_references_members,
    errors_the_client_reads_as_other_are_internal_errors,
    params_that_do_not_decode_are_invalid_params,
    write_file_reports_bad_targets_and_bad_base64,
    follow_symlinks_false_never_goes_through_a_link,
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
const CONTAINS_LINK: &str = "path contains a symbolic link";

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

// ---------------------------------------------------------------------------------------------
// What the client's kinds and types do not show

/// Each method's success answer, member for member: the client decodes answers into types that
/// drop any member they do not know (an empty answer, `{}`, into one that has none at all).
/// What the answers say is the trait suite's.
async fn success_answers_have_the_references_members(target: Target) {
    let scratch = Scratch::new("wire-shapes");
    let file = scratch.file("list/file.txt", b"123456789");
    scratch.file("walk/good", b"x");
    scratch.non_utf8_file("walk");
    let (_server, mut client) = started(target).await;
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    let mtime_ms = mtime.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let path = |name: &str| json!({"path": scratch.uri(name)});
    let walk = |name: &str| json!({"path": scratch.uri(name), "options": walk_options(0, 1, 10)});
    let copy = json!({"sourcePath": scratch.uri("list/file.txt"),
        "destinationPath": scratch.uri("copy.txt"), "recursive": false});

    for (method, params, answer) in [
        ("fs/readFile", path("list/file.txt"), json!({"dataBase64": b64encode(b"123456789")})),
        (
            "fs/getMetadata",
            path("list/file.txt"),
            json!({"isDirectory": false, "isFile": true, "isSymlink": false, "size": 9,
                "createdAtMs": 0, "modifiedAtMs": mtime_ms}),
        ),
        ("fs/canonicalize", path("list"), json!({"path": scratch.uri("list")})),
        (
            "fs/readDirectory",
            path("list"),
            json!({"entries": [{"fileName": "file.txt", "isDirectory": false, "isFile": true}]}),
        ),
        // `errors` and `truncated` are there even when empty and false.
        (
            "fs/walk",
            walk("list/file.txt"),
            json!({"entries": [], "errors": [], "truncated": false}),
        ),
        (
            "fs/walk",
            walk("walk"),
            json!({"entries": [{"path": scratch.uri("walk/good"), "kind": "file"}],
                "errors": [{"path": format!("{}/bad-%EF%BF%BD", scratch.uri("walk")),
                    "message": ENOENT}],
                "truncated": false}),
        ),
        ("fs/writeFile", json!({"path": scratch.uri("new.txt"), "dataBase64": "eA=="}), json!({})),
        ("fs/createDirectory", path("made"), json!({})),
        ("fs/copy", copy, json!({})),
        ("fs/remove", path("made"), json!({})),
    ] {
        let answered = client.ok(method, params.clone()).await.unwrap();
        assert_eq!(answered, answer, "{method} {params}");
    }
}

/// The client reads every code but `-32004` and `-32600` as `Other`, so through it an internal
/// error looks like any other code: the raw code of each error the trait suite expects as
/// `Other`, one per cause and method (the messages are checked there).
async fn errors_the_client_reads_as_other_are_internal_errors(target: Target) {
    let scratch = Scratch::new("wire-internal-errors");
    scratch.file("file.txt", b"x");
    scratch.file("full/file.txt", b"x");
    scratch.dir("existing-dir");
    scratch.file("src/file.txt", b"x");
    scratch.symlink("file.txt", "file-link");
    let many = scratch.dir("many");
    for index in 0..=50_000 {
        std::fs::File::create(many.join(index.to_string())).unwrap();
    }
    let (_server, mut client) = started(target).await;
    let path = |name: &str| json!({"path": scratch.uri(name)});
    let single = |name: &str| json!({"path": scratch.uri(name), "recursive": false});
    let copy = |from: &str, to: &str, recursive: bool| {
        json!({"sourcePath": scratch.uri(from), "destinationPath": scratch.uri(to),
            "recursive": recursive})
    };

    for (method, params) in [
        ("fs/readFile", path("file.txt/x")),
        ("fs/createDirectory", single("full")),
        ("fs/createDirectory", path("file.txt")),
        ("fs/createDirectory", path("file.txt/x")),
        ("fs/getMetadata", path("file.txt/x")),
        ("fs/readDirectory", path("file.txt")),
        ("fs/readDirectory", path("many")),
        ("fs/remove", single("full")),
        ("fs/remove", path("file.txt/x")),
        ("fs/copy", copy("file.txt", "existing-dir", false)),
        ("fs/copy", copy("src", "file.txt", true)),
        ("fs/copy", copy("file-link", "file-link", false)),
    ] {
        let error = client.err(method, params.clone()).await.unwrap();
        assert_eq!(error.code, -32603, "{method} {params}: {error}");
    }
}

/// Params that do not decode never reach a filesystem, so only the wire can send them.
async fn params_that_do_not_decode_are_invalid_params(target: Target) {
    let scratch = Scratch::new("wire-invalid-params");
    scratch.file("file.txt", b"x");
    let (_server, mut client) = started(target).await;

    // A native path is refused before anything else.
    let error = client.err("fs/readFile", json!({"path": "/tmp/x"})).await.unwrap();
    assert_error(error, -32602, "invalid URI: relative URL without a base");
    let options = json!({"maxDepth": 1, "maxDirectories": 1, "maxEntries": 1});
    let error = client.err("fs/walk", json!({"path": scratch.uri(""), "options": options}));
    assert_error(error.await.unwrap(), -32602, "missing field `followDirectorySymlinks`");
    let copy = json!({"sourcePath": scratch.uri("file.txt"), "destinationPath": scratch.uri("y")});
    let error = client.err("fs/copy", copy).await.unwrap();
    assert_error(error, -32602, "missing field `recursive`");
    assert!(!scratch.path("y").exists());
}

// ---------------------------------------------------------------------------------------------
// Scenarios whose trait counterparts run remotely on Tether only
//
// `remote_file_system.rs` runs the trait suite's `write_file_reports_bad_targets_and_bad_base64`
// and `follow_symlinks_false_never_goes_through_a_link` on Tether only (the first also writes
// to a FIFO nobody reads, which the reference waits on forever; the second spells ELOOP out in
// Tether's C library's words). These are the reference's run of them.

async fn write_file_reports_bad_targets_and_bad_base64(target: Target) {
    let scratch = Scratch::new("wire-write-errors");
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
    let scratch = Scratch::new("wire-no-follow");
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
    let scratch = Scratch::new("wire-read-blocks");
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
    let scratch = Scratch::new("wire-streamed-write");
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
    let scratch = Scratch::new("wire-write-blocks");
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
    let scratch = Scratch::new("wire-handle-ids");
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
    let scratch = Scratch::new("wire-handle-close");
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
    let scratch = Scratch::new("wire-handle-replaced");
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
    let scratch = Scratch::new("wire-handle-connection");
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
    // The old connection may not be detached yet.
    let (url, session_id) = (server.url.as_str(), session_id.as_str());
    let resume = move || async move {
        let mut resumed = RpcClient::connect(url).await.unwrap();
        resumed.initialize(Some(session_id)).await.unwrap().is_ok().then_some(resumed)
    };
    let mut resumed = wait::until_some_async("the session resumed", wait::DEADLINE, resume).await;
    let error = resumed.err("fs/readBlock", read_block("h", 0, 1)).await.unwrap();
    assert_error(error, -32004, "unknown file handle `h`");
}

async fn open_refuses_anything_but_a_regular_file_promptly(target: Target) {
    let scratch = Scratch::new("wire-open-special");
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
    let scratch = Scratch::new("wire-sandbox");
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
