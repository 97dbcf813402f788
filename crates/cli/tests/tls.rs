//! `wss://`: Tether serves TLS itself, and the client verifies the server's certificate — a
//! pinned CA, or the system's roots — with a bearer token on top. Certificates are made here
//! (rcgen), for `127.0.0.1` and `localhost`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use tether_client::error::ConnectErrorKind;
use tether_client::{ClientError, ClientOptions, ExecServerClient, ProcessUpdate};
use tether_engine::ProcessEvent;
use tether_testkit::server::tether_binary;
use tether_testkit::{ServerProcess, Target, shell_params};

struct Certificates {
    dir: PathBuf,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    other_ca: PathBuf,
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A CA, a server certificate it signed, and an unrelated CA.
fn certificates(name: &str) -> Certificates {
    let dir = std::env::temp_dir().join(format!("tether-tls-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let server_key = rcgen::KeyPair::generate().unwrap();
    let server_params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let server = server_params.signed_by(&server_key, &issuer).unwrap();
    let other_key = rcgen::KeyPair::generate().unwrap();
    let mut other_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    other_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let other = other_params.self_signed(&other_key).unwrap();
    let write = |name: &str, pem: String| {
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        path
    };
    Certificates {
        ca: write("ca.pem", ca.pem()),
        cert: write("server.pem", server.pem()),
        key: write("server.key", server_key.serialize_pem()),
        other_ca: write("other-ca.pem", other.pem()),
        dir,
    }
}

fn path(path: &Path) -> &str {
    path.to_str().unwrap()
}

async fn echo(client: &ExecServerClient, id: &str) -> Vec<u8> {
    let mut process = client.start(shell_params(id, "echo over tls")).await.unwrap();
    let mut output = Vec::new();
    while let Some(update) = process.next_update().await {
        if let ProcessUpdate::Event(ProcessEvent::Output { chunk, .. }) = update {
            output.extend_from_slice(&chunk);
        }
    }
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_server_is_reached_through_its_pinned_ca_and_refused_otherwise() {
    let certs = certificates("pinned");
    let args = ["--tls-cert", path(&certs.cert), "--tls-key", path(&certs.key)];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    assert!(server.url.starts_with("wss://127.0.0.1:"), "{}", server.url);

    let pinned = ClientOptions { tls_ca_file: Some(certs.ca.clone()), ..Default::default() };
    let client = ExecServerClient::connect(&server.url, pinned).await.unwrap();
    assert_eq!(echo(&client, "first").await, b"over tls\n");
    // A reconnect goes through TLS again (a start sent while the drop is noticed would be
    // ambiguous, so the test lets the session come back first).
    client.disconnect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    client.wait_connected().await.unwrap();
    assert_eq!(echo(&client, "after-reconnect").await, b"over tls\n");

    let wrong = ClientOptions { tls_ca_file: Some(certs.other_ca.clone()), ..Default::default() };
    let error = ExecServerClient::connect(&server.url, wrong).await.err().unwrap();
    assert!(
        matches!(&error, ClientError::Connect(e) if e.kind == ConnectErrorKind::Tls),
        "{error}"
    );
    assert!(error.to_string().contains("certificate"), "{error}");
    let system = ExecServerClient::connect(&server.url, ClientOptions::default()).await;
    // A private CA is not among the system's roots (and a machine without any says so).
    let error = system.err().unwrap();
    assert!(
        matches!(&error, ClientError::Connect(e)
            if matches!(e.kind, ConnectErrorKind::Tls | ConnectErrorKind::TlsSetup)),
        "{error}"
    );
    let plain = server.url.replacen("wss://", "ws://", 1);
    let plain = tokio::time::timeout(
        Duration::from_secs(10),
        ExecServerClient::connect(&plain, ClientOptions::default()),
    )
    .await
    .expect("a plain client gets an answer, not a hang");
    // A TLS server's answer is not HTTP: the WebSocket handshake fails.
    let error = plain.err().unwrap();
    assert!(
        matches!(&error, ClientError::Connect(e) if e.kind == ConnectErrorKind::Handshake),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_a_bearer_token_together() {
    let certs = certificates("token");
    let token_file = certs.dir.join("token");
    std::fs::write(&token_file, "tls-and-token").unwrap();
    let args = [
        "--tls-cert",
        path(&certs.cert),
        "--tls-key",
        path(&certs.key),
        "--ws-auth",
        "capability-token",
        "--ws-token-file",
        path(&token_file),
    ];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    let ca = Some(certs.ca.clone());
    let no_token = ClientOptions { tls_ca_file: ca.clone(), ..Default::default() };
    let error = ExecServerClient::connect(&server.url, no_token).await.err().unwrap();
    assert!(error.to_string().contains("missing websocket bearer token"), "{error}");
    let options = ClientOptions {
        tls_ca_file: ca,
        bearer_token: Some("tls-and-token".into()),
        ..Default::default()
    };
    let client = ExecServerClient::connect(&server.url, options).await.unwrap();
    assert_eq!(echo(&client, "with-token").await, b"over tls\n");

    // `tether exec` with the CA and the token from its environment.
    let output = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--tls-ca-file", path(&certs.ca), "--", "echo", "ok"])
        .env("TETHER_TOKEN", "tls-and-token")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!((output.status.code(), output.stdout.as_slice()), (Some(0), &b"ok\n"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_and_key_that_do_not_fit_are_refused_at_startup() {
    let certs = certificates("mismatch");
    let other = certificates("mismatch-other");
    let output = tokio::process::Command::new(tether_binary().unwrap())
        .args(["serve", "--listen", "ws://127.0.0.1:0"])
        .args(["--tls-cert", path(&certs.cert), "--tls-key", path(&other.key)])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_ne!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("do not go together"), "{stderr}");
}

/// A stranger who completes the TLS handshake and then says nothing is closed at the
/// request-head deadline, like one on plain TCP (the reference holds it forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_handshake_followed_by_silence_is_closed() {
    let certs = certificates("silent");
    let tls = ["--tls-cert", path(&certs.cert), "--tls-key", path(&certs.key)];
    let deadline = ["--request-head-timeout-secs", "1"];
    let server = ServerProcess::start_with(Target::Tether, &[&tls[..], &deadline[..]].concat())
        .await
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(&certs.ca).unwrap();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config =
        rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = connector.connect(name, tcp).await.expect("the handshake completes");
    let mut received = Vec::new();
    let closed = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut received),
    )
    .await;
    assert!(closed.is_ok(), "the silent connection was not closed");
    assert!(!received.starts_with(b"HTTP/1.1 101"), "{received:?}");
}
