//! The filesystem suite, run through the client on Tether and on the reference: the same
//! scenarios the engine runs in-process (`tether_testkit::suites::fs`), so the remote
//! `FileSystem` is held to the local one's behaviour, messages and error kinds included.
//!
//! The handle scenarios take a connection's `FileHandles`, which only the engine has; over the
//! wire they are the conformance suite's (`crates/cli/tests/fs.rs`).

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::json;
use tether_client::{ClientOptions, ExecServerClient, READ_BLOCKS_AHEAD};
use tether_engine::fs::{FileSystem, FsError, FsErrorKind};
use tether_protocol::fs::FS_BLOCK_MAX_BYTES;
use tether_testkit::scratch::Scratch;
use tether_testkit::suites::fs as shared;
use tether_testkit::{FaultProxy, ServerProcess, Target, against_both, scenarios};

async fn connected(url: &str) -> ExecServerClient {
    ExecServerClient::connect(url, ClientOptions::default()).await.unwrap()
}

// Two tests per scenario — on Tether and on the reference — each with a server and a session
// of its own.
scenarios!(shared::every_file_system_scenario, on [tether, reference], |target, scenario| {
    let server = ServerProcess::start(target).await.unwrap();
    scenario(&connected(&server.url).await).await
});

against_both!(a_large_file_is_read_whole, a_file_bigger_than_a_frame_is_written_whole);

/// Remote only: a file too big for a WebSocket library's default message size (64 MiB, a
/// 48 MiB file as base64) still comes back whole from either server.
async fn a_large_file_is_read_whole(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let client = connected(&server.url).await;
    let scratch = Scratch::new("remote-large");
    let path = scratch.path("large.bin");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(70_000_000).unwrap();
    let params = serde_json::json!({"path": scratch.uri("large.bin")});
    let read = client.read_file(serde_json::from_value(params).unwrap()).await.unwrap();
    assert_eq!(read.data_base64.0.len(), 70_000_000);
    assert!(read.data_base64.0.iter().all(|&byte| byte == 0));
}

/// Remote only: a file written whole whose message (28 MB of JSON) is over the 16 MiB both
/// servers take in one frame: the client sends it in several, and either server writes every
/// byte. Sent as one frame, the server would close the connection instead (1009).
async fn a_file_bigger_than_a_frame_is_written_whole(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let client = connected(&server.url).await;
    let scratch = Scratch::new("remote-large-write");
    let contents: Vec<u8> = (0..21_000_000u32).map(|i| (i % 251) as u8).collect();
    let params = serde_json::json!({
        "path": scratch.uri("large.bin"),
        "dataBase64": tether_testkit::client::b64encode(&contents),
    });
    client.write_file(serde_json::from_value(params).unwrap()).await.unwrap();
    assert!(std::fs::read(scratch.path("large.bin")).unwrap() == contents, "changed");
    // The connection carries on.
    let params = serde_json::json!({"path": scratch.uri("large.bin")});
    let metadata = client.get_metadata(serde_json::from_value(params).unwrap()).await;
    assert!(metadata.unwrap().is_file);
}

/// Remote only: an answer larger than the client accepts fails its call with a clear error —
/// once, not again and again on every new connection — and the session carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_too_large_for_the_client_fails_its_call_once() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let options = ClientOptions { max_message_bytes: 1024 * 1024, ..ClientOptions::default() };
    let client = ExecServerClient::connect(&server.url, options).await.unwrap();
    let scratch = Scratch::new("remote-too-large");
    scratch.file("big.bin", &vec![7; 2 * 1024 * 1024]);
    scratch.file("small.txt", b"fine");
    let read = |name: &str| {
        let params = serde_json::json!({"path": scratch.uri(name)});
        client.read_file(serde_json::from_value(params).unwrap())
    };
    let error = tokio::time::timeout(Duration::from_secs(20), read("big.bin"))
        .await
        .expect("answered, not retried forever")
        .unwrap_err();
    assert!(error.message.contains("too large"), "{error:?}");
    let small = tokio::time::timeout(Duration::from_secs(20), read("small.txt")).await.unwrap();
    assert_eq!(small.unwrap().data_base64.0, "fine");
}

/// Remote only: a call that only reads waits through a reconnect and is answered on the
/// resumed session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_ride_through_a_reconnect() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = connected(&proxy.url).await;
    let scratch = Scratch::new("remote-reconnect");
    scratch.file("file.txt", b"still here");

    proxy.cut();
    let read = client.read_file(
        serde_json::from_value(serde_json::json!({"path": scratch.uri("file.txt")})).unwrap(),
    );
    let read = tokio::time::timeout(Duration::from_secs(20), read).await.expect("answered");
    assert_eq!(read.unwrap().data_base64.0, "still here");
}

/// Remote only: a streamed read's file handle belongs to its connection, so a drop fails the
/// stream — it never ends as if the file were shorter, nor asks the next connection for a
/// handle it never had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_read_fails_when_its_connection_drops() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = connected(&proxy.url).await;
    let scratch = Scratch::new("remote-stream-cut");
    // Twice the blocks a stream asks for ahead: most of the file is asked for after the cut.
    let blocks = 2 * READ_BLOCKS_AHEAD;
    scratch.file("big.bin", &vec![7u8; blocks * FS_BLOCK_MAX_BYTES]);
    let mut stream = client.read_file_stream(scratch.uri("big.bin"), None).await.unwrap();
    assert_eq!(stream.next().await.unwrap().unwrap().len(), FS_BLOCK_MAX_BYTES);

    proxy.cut();
    // The blocks answered before the cut are whole; then the stream fails, short of the end.
    let mut read = 1;
    let error = loop {
        match stream.next().await.unwrap() {
            Ok(block) => assert_eq!(block.len(), FS_BLOCK_MAX_BYTES),
            Err(error) => break error,
        }
        read += 1;
    };
    assert!(read <= READ_BLOCKS_AHEAD, "{read} blocks came through a cut connection");
    assert_eq!(error.kind, FsErrorKind::Other);
    assert!(error.message.contains("cannot be resumed"), "{}", error.message);
    assert!(stream.next().await.is_none());
    // The session itself recovers: a new stream reads the whole file.
    client.wait_connected().await.unwrap();
    let stream = client.read_file_stream(scratch.uri("big.bin"), None).await.unwrap();
    let read: Vec<_> = stream.collect().await;
    assert_eq!(read.len(), blocks);
    assert!(read.iter().all(|block| block.as_ref().is_ok_and(|b| b.len() == FS_BLOCK_MAX_BYTES)));
}

/// Remote only: the reference does not serve Tether's `fsMetadata` extension, so the client
/// refuses each of its calls itself, before sending anything — the message is the client's,
/// not a server's `-32601`, and nothing is touched. (`includeMode` the reference would
/// silently ignore, answering without a mode.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fs_metadata_is_refused_unsent_by_the_reference() {
    let server = ServerProcess::start(Target::Reference).await.unwrap();
    let client = connected(&server.url).await;
    assert!(!client.tether_extensions().fs_metadata);
    let scratch = Scratch::new("remote-no-fs-metadata");
    let file = scratch.file("file.txt", b"x");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    scratch.symlink("file.txt", "link");
    let unsupported = |result: Result<(), FsError>, what: &str| {
        let error = result.unwrap_err();
        let message = format!(
            "the exec-server does not serve `{what}`: it is Tether's `fsMetadata` extension, \
             which this server does not advertise"
        );
        assert_eq!((error.kind, error.message), (FsErrorKind::Unsupported, message));
    };
    fn params<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
        serde_json::from_value(value).unwrap()
    }

    let rename = params(json!({"sourcePath": scratch.uri("file.txt"),
        "destinationPath": scratch.uri("moved")}));
    unsupported(client.rename(rename).await, "fs/rename");
    let set = params(json!({"path": scratch.uri("file.txt"), "mode": 0o600}));
    unsupported(client.set_metadata(set).await, "fs/setMetadata");
    let link = params(json!({"path": scratch.uri("new-link"), "target": "file.txt"}));
    unsupported(client.create_symlink(link).await, "fs/createSymlink");
    let read = client.read_link(params(json!({"path": scratch.uri("link")}))).await;
    unsupported(read.map(|_| ()), "fs/readLink");
    let put = params(json!({"path": scratch.uri("put"), "dataBase64": "cHV0"}));
    unsupported(client.put_file(put).await, "fs/putFile");
    let listed = params(json!({"path": scratch.uri(""), "includeMetadata": true}));
    unsupported(
        client.read_directory(listed).await.map(|_| ()),
        "fs/readDirectory {includeMetadata: true}",
    );
    let with_mode = params(json!({"path": scratch.uri("file.txt"), "includeMode": true}));
    unsupported(
        client.get_metadata(with_mode).await.map(|_| ()),
        "fs/getMetadata {includeMode: true}",
    );

    assert!(!scratch.exists("moved") && !scratch.exists("new-link") && !scratch.exists("put"));
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777, 0o644);
    // The reference's own metadata is still there, without a mode.
    let plain = client.get_metadata(params(json!({"path": scratch.uri("file.txt")}))).await;
    assert_eq!(plain.unwrap().mode, None);
}

/// Remote only: a streamed write's handle belongs to its connection, so a drop fails the
/// stream — `finish` never says a file was written whole when blocks were lost — and the
/// session recovers for the next stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_write_fails_when_its_connection_drops() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let client = connected(&proxy.url).await;
    let scratch = Scratch::new("remote-write-stream-cut");
    let block = Bytes::from(vec![7u8; FS_BLOCK_MAX_BYTES]);
    let mut stream = client.write_file_stream(scratch.uri("big.bin"), None).await.unwrap();
    stream.write(block.clone()).await.unwrap();

    proxy.cut();
    // Writes may be accepted while the cut goes unnoticed (they are in flight); finish waits
    // for them all.
    let mut failed = None;
    for _ in 0..8 {
        if let Err(error) = stream.write(block.clone()).await {
            failed = Some(error);
            break;
        }
    }
    let error = stream.finish().await.unwrap_err();
    assert_eq!(error.kind, FsErrorKind::Other);
    assert!(error.message.contains("the write cannot be resumed"), "{}", error.message);
    if let Some(failed) = failed {
        assert_eq!(failed, error, "finish reports the first failure again");
    }
    // The session itself recovers: a new stream writes the whole file.
    client.wait_connected().await.unwrap();
    let mut stream = client.write_file_stream(scratch.uri("big.bin"), None).await.unwrap();
    stream.write(Bytes::from(vec![9u8; 3 * FS_BLOCK_MAX_BYTES])).await.unwrap();
    stream.finish().await.unwrap();
    assert_eq!(scratch.read("big.bin"), vec![9u8; 3 * FS_BLOCK_MAX_BYTES]);
}
