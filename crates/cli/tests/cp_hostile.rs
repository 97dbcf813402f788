//! `tether cp` against a server that lies: one that makes a later copy down go through a link
//! an earlier one left, one whose listing never ends, and one that changes this side's tree
//! in the middle of a copy up. The server here answers the handshake as Tether does (with
//! `fsMetadata`) and then the `fs/*` calls a copy makes, from a tree it makes up; the client is
//! the real `tether` binary.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tether_testkit::process_stats::peak_rss_kib;
use tether_testkit::server::tether_binary;
use tokio_tungstenite::tungstenite::Message;

/// How the made-up server answers one request: its result as JSON text (a big listing is
/// written once and sent many times), or the JSON-RPC error.
type Answer = Arc<dyn Fn(&str, &Value) -> Result<String, Value> + Send + Sync>;

/// A WebSocket JSON-RPC server on a loopback port that answers `initialize` as Tether does,
/// with the `fsMetadata` extension, and every other request with `answer`; its URL.
async fn lying_server(answer: Answer) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::spawn(serve(socket, answer.clone()));
        }
    });
    url
}

async fn serve(socket: tokio::net::TcpStream, answer: Answer) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(socket).await else { return };
    while let Some(Ok(message)) = ws.next().await {
        let Message::Text(text) = message else { continue };
        let request: Value = serde_json::from_str(&text).unwrap();
        // `initialized` and the like: nothing to answer.
        let Some(id) = request.get("id") else { continue };
        let method = request["method"].as_str().unwrap_or_default();
        let reply = if method == "initialize" {
            json!({"id": id, "result": {"sessionId": "lying",
                "environmentInfo": {"shell": {"name": "sh", "path": "/bin/sh"},
                    "capabilities": {"tetherExtensions": {"fsMetadata": true}}}}})
            .to_string()
        } else {
            match answer(method, &request["params"]) {
                Ok(result) => format!(r#"{{"id":{id},"result":{result}}}"#),
                Err(error) => json!({"id": id, "error": error}).to_string(),
            }
        };
        if ws.send(Message::text(reply)).await.is_err() {
            return;
        }
    }
}

/// The path of a request's `file:` URI (empty for a request with none, as `fs/rename`).
fn path_of(params: &Value) -> String {
    let uri = params["path"].as_str().unwrap_or("file://");
    uri.strip_prefix("file://").unwrap().to_owned()
}

fn directory_metadata(mode: u32, modified_at_ms: i64) -> String {
    json!({"isDirectory": true, "isFile": false, "isSymlink": false, "size": 4096,
        "createdAtMs": 0, "modifiedAtMs": modified_at_ms, "mode": mode})
    .to_string()
}

/// One entry of a listing with its own metadata: `kind` is `dir`, `file` or `link`.
fn listed(name: &str, kind: &str, size: u64, mode: u32) -> Value {
    json!({"fileName": name, "isDirectory": kind == "dir", "isFile": kind == "file",
        "metadata": {"isSymlink": kind == "link", "size": size, "modifiedAtMs": 1_000,
            "mode": mode}})
}

fn listing(entries: &[Value]) -> String {
    json!({ "entries": entries }).to_string()
}

fn unexpected(method: &str, params: &Value) -> Value {
    json!({"code": -32601, "message": format!("unexpected {method} {params}")})
}

struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Self {
        let root = std::env::temp_dir().join(format!("tether-cp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("here")).unwrap();
        Self { root }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Runs `tether cp --url URL ARGS…` to the end; `pid` is told the child's id once it runs.
async fn tether_cp(url: &str, args: &[&str], pid: &AtomicU32) -> std::process::Output {
    let child = tokio::process::Command::new(tether_binary().unwrap())
        .args(["cp", "--url", url])
        .args(args)
        .env_remove("TETHER_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    pid.store(child.id().unwrap(), Ordering::SeqCst);
    let output = child.wait_with_output();
    tokio::time::timeout(Duration::from_secs(120), output).await.expect("finished").unwrap()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).trim_end().to_owned()
}

/// The mode, time and names of a directory, to see that nothing touched it.
fn look_at(directory: &Path) -> (u32, i64, Vec<String>) {
    let found = std::fs::metadata(directory).unwrap();
    let names = std::fs::read_dir(directory)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    (found.mode() & 0o7777, found.mtime(), names)
}

/// A first copy of `/src` leaves a link that points outside the directory copied into (as a
/// copy keeps links); a second copy of the same source, now listed with a directory of that
/// name holding `pwned`, would write through it. It is refused in one line that names the
/// link; nothing is written outside, and the outside directory's mode and time are its own.
/// Twice: the link inside the tree (`src/x`), and the tree's root itself (`src`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_copy_never_writes_through_a_link_the_first_left() {
    let scratch = Scratch::new("through-a-link");
    let outside = scratch.path("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o700)).unwrap();
    let before = look_at(&outside);
    let outside_text = outside.to_str().unwrap().to_owned();

    for link_at_root in [false, true] {
        let second = Arc::new(AtomicBool::new(false));
        let (outside, second_copy) = (outside_text.clone(), second.clone());
        // The link is `/src/x`, or `/src` itself; the second copy lists a directory there.
        let linked = if link_at_root { "/src" } else { "/src/x" };
        let answer: Answer = Arc::new(move |method, params| {
            let path = path_of(params);
            let second = second_copy.load(Ordering::SeqCst);
            match (method, path.as_str()) {
                ("fs/getMetadata", "/src") if link_at_root && !second => Ok(json!({
                    "isDirectory": true, "isFile": false, "isSymlink": true, "size": 4096,
                    "createdAtMs": 0, "modifiedAtMs": 0, "mode": 0o700})
                .to_string()),
                ("fs/getMetadata", "/src") => Ok(directory_metadata(0o755, 1_000)),
                ("fs/readLink", path) if path == linked => {
                    Ok(json!({ "target": outside }).to_string())
                }
                ("fs/readDirectory", "/src") if !link_at_root && !second => {
                    Ok(listing(&[listed("x", "link", outside.len() as u64, 0o777)]))
                }
                ("fs/readDirectory", "/src") if !link_at_root => {
                    Ok(listing(&[listed("x", "dir", 4096, 0o777)]))
                }
                ("fs/readDirectory", path) if second && path == linked => {
                    Ok(listing(&[listed("pwned", "file", 6, 0o4777)]))
                }
                ("fs/readFile", path) if second && path == format!("{linked}/pwned") => {
                    Ok(json!({ "dataBase64": "cHduZWQK" }).to_string())
                }
                _ => Err(unexpected(method, params)),
            }
        });
        let url = lying_server(answer).await;
        let here = scratch.path(if link_at_root { "here/root" } else { "here/inside" });
        std::fs::create_dir_all(&here).unwrap();
        let into = here.to_str().unwrap();
        let pid = AtomicU32::new(0);

        let first = tether_cp(&url, &["-r", ":/src", into], &pid).await;
        assert_eq!((first.status.code(), stderr(&first)), (Some(0), String::new()));
        let link = here.join(linked.trim_start_matches('/'));
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new(&outside_text));

        second.store(true, Ordering::SeqCst);
        let again = tether_cp(&url, &["-r", ":/src", into], &pid).await;
        assert_eq!(
            (again.status.code(), stderr(&again)),
            (
                Some(1),
                format!(
                    "tether cp: {} is a symbolic link here, and the copy would write through \
                     it; nothing more copied; remove the link, or copy into another directory",
                    link.display()
                )
            ),
            "link at the root: {link_at_root}"
        );
        assert_eq!(look_at(Path::new(&outside_text)), before, "link at the root: {link_at_root}");
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new(&outside_text), "left as it was");
    }
}

/// A server whose every directory holds 25,000 more: the copy stops at its cap of a million
/// entries listed, in one line that names the directory and the cap, having held no more than
/// a bounded listing (its peak memory, read while it asked for the last listing, stays under
/// what a million waiting entries cost, with room to spare).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_without_end_stops_at_the_entry_cap() {
    // As wide as a listing with metadata goes within the client's 262,144 JSON values a message.
    const WIDTH: usize = 25_000;
    let scratch = Scratch::new("endless-wide");
    let entries: Vec<Value> =
        (0..WIDTH).map(|i| listed(&format!("d{i:05}"), "dir", 4096, 0o755)).collect();
    let wide = listing(&entries);
    let pid = Arc::new(AtomicU32::new(0));
    let peak_kib = Arc::new(AtomicU64::new(0));
    let (client, peak) = (pid.clone(), peak_kib.clone());
    let answer: Answer = Arc::new(move |method, params| match method {
        "fs/getMetadata" if path_of(params) == "/src" => Ok(directory_metadata(0o755, 1_000)),
        "fs/readDirectory" => {
            let found = peak_rss_kib(client.load(Ordering::SeqCst)).unwrap_or(0);
            peak.fetch_max(found, Ordering::SeqCst);
            Ok(wide.clone())
        }
        _ => Err(unexpected(method, params)),
    });
    let url = lying_server(answer).await;
    let here = scratch.path("here");

    let output = tether_cp(&url, &["-r", ":/src", here.to_str().unwrap()], &pid).await;

    // The listing that crosses the cap is the 41st: of `/src` 40 directories down.
    let crossing = format!("/src{}", "/d00000".repeat(1_000_000 / WIDTH));
    assert_eq!(
        (output.status.code(), stderr(&output)),
        (
            Some(1),
            format!(
                "tether cp: {crossing} on the executor: the tree holds more than 1000000 entries, \
                 the most one tether cp copies; copy its directories one at a time"
            )
        )
    );
    let peak_mib = peak_kib.load(Ordering::SeqCst) / 1024;
    // A million waiting entries cost about 120 MiB; a listing that is held whole grows by
    // gigabytes before it reaches the cap.
    assert!(peak_mib > 0 && peak_mib < 256, "peak {peak_mib} MiB");
}

/// A server whose every directory holds one more: the copy stops 256 directories down, in
/// one line that names the directory and the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_without_end_stops_at_the_depth_cap() {
    let scratch = Scratch::new("endless-deep");
    let answer: Answer = Arc::new(move |method, params| match method {
        "fs/getMetadata" if path_of(params) == "/src" => Ok(directory_metadata(0o755, 1_000)),
        "fs/readDirectory" => Ok(listing(&[listed("d", "dir", 4096, 0o755)])),
        _ => Err(unexpected(method, params)),
    });
    let url = lying_server(answer).await;
    let here = scratch.path("here");

    let output =
        tether_cp(&url, &["-r", ":/src", here.to_str().unwrap()], &AtomicU32::new(0)).await;

    let too_deep = format!("/src{}", "/d".repeat(257));
    assert_eq!(
        (output.status.code(), stderr(&output)),
        (
            Some(1),
            format!(
                "tether cp: {too_deep} on the executor: more than 256 directories deep, the \
                 deepest one tether cp goes; copy what is below it on its own"
            )
        )
    );
    // What was made here stops where the copy did.
    let made = here.join("src").join(["d"; 256].join("/"));
    assert!(made.is_dir());
    assert!(!made.join("d").exists());
}

/// Going up, this side's tree is read as it is when each entry is reached, through the
/// directory it was listed from: a directory replaced by a link to one outside the tree after
/// the copy began (here by the server, when the copy makes the tree's root there) is copied as
/// that link, and nothing outside is read and sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn going_up_a_directory_swapped_for_a_link_is_copied_as_the_link() {
    let scratch = Scratch::new("swapped-up");
    let project = scratch.path("here/project");
    std::fs::create_dir_all(project.join("a")).unwrap();
    std::fs::write(project.join("a/notes"), "notes\n").unwrap();
    let outside = scratch.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("notes"), "secret\n").unwrap();
    let calls = Arc::new(Mutex::new(Vec::<(String, Value)>::new()));
    let (heard, swapped, target) = (calls.clone(), project.join("a"), outside.clone());
    let answer: Answer = Arc::new(move |method, params| {
        heard.lock().unwrap().push((method.to_owned(), params.clone()));
        let path = path_of(params);
        match method {
            "fs/getMetadata" if path == "/dst" => Ok(directory_metadata(0o755, 1_000)),
            "fs/createDirectory" => {
                if path == "/dst/project" {
                    std::fs::remove_dir_all(&swapped).unwrap();
                    std::os::unix::fs::symlink(&target, &swapped).unwrap();
                }
                Ok("{}".to_owned())
            }
            "fs/putFile" | "fs/createSymlink" | "fs/setMetadata" | "fs/rename" => {
                Ok("{}".to_owned())
            }
            _ => Err(unexpected(method, params)),
        }
    });
    let url = lying_server(answer).await;

    let output =
        tether_cp(&url, &["-r", project.to_str().unwrap(), ":/dst"], &AtomicU32::new(0)).await;

    assert_eq!((output.status.code(), stderr(&output)), (Some(0), String::new()));
    let calls = calls.lock().unwrap();
    let sent: Vec<&Value> =
        calls.iter().filter(|(method, _)| method == "fs/putFile").map(|(_, p)| p).collect();
    assert!(sent.is_empty(), "{sent:?}");
    let links: Vec<(String, &str)> = calls
        .iter()
        .filter(|(method, _)| method == "fs/createSymlink")
        .map(|(_, params)| (path_of(params), params["target"].as_str().unwrap()))
        .collect();
    assert_eq!(links.len(), 1, "{links:?}");
    assert!(links[0].0.starts_with("/dst/project/.a.tether-"), "{links:?}");
    assert_eq!(links[0].1, outside.to_str().unwrap());
}
