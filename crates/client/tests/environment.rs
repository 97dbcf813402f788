//! One harness, either placement: the same code runs a command, reads what it wrote and makes
//! an HTTP request through an [`Environment`], built locally or over a session, and gets the
//! same answers.

use bytes::Bytes;
use serde_json::json;
use tether_client::{ClientOptions, Environment, ExecServerClient};
use tether_engine::{ProcessEvent, ProcessUpdate};
use tether_protocol::PathUri;
use tether_testkit::{HttpPeer, ServerProcess, Target, shell_params};

/// What the harness saw: the command's exit code, the file it wrote, the peer's status.
type Seen = (i32, Vec<u8>, u16, Vec<u8>);

/// A harness that knows nothing of where it runs: a command writes 22 bytes of its stdin to a
/// file, the file is read back, and a URL is fetched, buffered and streamed.
async fn harness(env: &Environment, dir: &std::path::Path, url: &str) -> Seen {
    let file = dir.join("out.txt");
    let script = format!("head -c 22 > {}; exit 3", file.display());
    let mut params = shell_params("writer", &script);
    params.cwd = PathUri::from_path(dir).unwrap();
    params.pipe_stdin = true;
    let mut process = env.exec.start(params).await.unwrap();
    process.write(Bytes::from_static(b"written by the harness")).await.unwrap();
    let mut exit = None;
    while let Some(update) = process.next_update().await {
        match update {
            ProcessUpdate::Event(ProcessEvent::Exited { exit_code, .. }) => exit = Some(exit_code),
            ProcessUpdate::Event(_) => {}
            ProcessUpdate::Failed(failure) => panic!("{failure}"),
        }
    }

    let read = json!({"path": PathUri::from_path(&file).unwrap()});
    let written = env.fs.read_file(serde_json::from_value(read).unwrap()).await.unwrap();
    let request = json!({"method": "GET", "url": url, "requestId": "r"});
    let response =
        env.http.request(serde_json::from_value(request.clone()).unwrap()).await.unwrap();
    let (_, body) =
        env.http.request_streamed(serde_json::from_value(request).unwrap()).await.unwrap();
    let streamed: Vec<Bytes> = futures_util::StreamExt::collect::<Vec<_>>(body)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    (exit.expect("an exit"), written.data_base64.0.to_vec(), response.status, streamed.concat())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_harness_runs_locally_and_remotely_alike() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let client = ExecServerClient::connect(&server.url, ClientOptions::default()).await.unwrap();
    let peer = HttpPeer::start().await.unwrap();
    let url = peer.url("/chunks");

    let mut seen = Vec::new();
    for env in [Environment::local(), Environment::remote(client)] {
        let dir = tempdir(env.is_remote());
        seen.push(harness(&env, &dir, &url).await);
        std::fs::remove_dir_all(dir).unwrap();
    }
    let expected: Seen =
        (3, b"written by the harness".to_vec(), 200, b"one\ntwo\nthree\n".to_vec());
    assert_eq!(seen, [expected.clone(), expected]);
}

fn tempdir(remote: bool) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tether-environment-{}-{}",
        std::process::id(),
        if remote { "remote" } else { "local" }
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}
