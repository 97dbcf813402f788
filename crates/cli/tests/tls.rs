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
    let mut link = client.status_changes();
    client.disconnect();
    loop {
        match link.next().await.expect("the session lives") {
            tether_client::ConnectionStatus::Connected => break,
            tether_client::ConnectionStatus::Failed(lost) => panic!("{lost}"),
            tether_client::ConnectionStatus::Recovering => {}
        }
    }
    assert_eq!(echo(&client, "after-reconnect").await, b"over tls\n");

    let wrong = ClientOptions { tls_ca_file: Some(certs.other_ca.clone()), ..Default::default() };
    let error = ExecServerClient::connect(&server.url, wrong).await.err().unwrap();
    assert!(
        matches!(&error, ClientError::Connect(e) if e.kind == ConnectErrorKind::UntrustedCertificate),
        "{error}"
    );
    assert!(error.to_string().contains("not signed by a CA this client trusts"), "{error}");
    let system = ExecServerClient::connect(&server.url, ClientOptions::default()).await;
    // A private CA is not among the system's roots (and a machine without any says so).
    let error = system.err().unwrap();
    assert!(
        matches!(&error, ClientError::Connect(e)
            if matches!(e.kind, ConnectErrorKind::UntrustedCertificate | ConnectErrorKind::TlsSetup)),
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
        matches!(&error, ClientError::Connect(e) if e.kind == ConnectErrorKind::NotHttp),
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

/// A certificate and key that do not fit, or a file that is not there, are refused at
/// startup in one line that ends with what to give instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_and_key_that_do_not_fit_are_refused_at_startup() {
    let certs = certificates("mismatch");
    let other = certificates("mismatch-other");
    let missing = certs.cert.with_file_name("missing.pem");
    for (cert, key, said) in [
        (&certs.cert, &other.key, "the TLS certificate and key do not go together: ".to_owned()),
        (
            &missing,
            &certs.key,
            format!("cannot read the TLS certificate chain {}: ", missing.display()),
        ),
    ] {
        let output = tokio::process::Command::new(tether_binary().unwrap())
            .args(["serve", "--listen", "ws://127.0.0.1:0"])
            .args(["--tls-cert", path(cert), "--tls-key", path(key)])
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.starts_with(&format!("tether: {said}")), "{stderr}");
        assert!(
            last.ends_with(
                "; give --tls-cert the certificate chain and --tls-key its private key, both PEM \
                 files this user can read, or use --tls-self-signed"
            ),
            "{stderr}"
        );
    }
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

/// `tether serve --listen wss://localhost:0 --tls-self-signed`: a certificate made at startup,
/// its fingerprint printed under the URL; a client that pins it gets in (whatever name it
/// connects to), one that pins another is told both fingerprints, as ssh tells of a changed
/// host key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_server_is_trusted_by_its_printed_fingerprint() {
    use tokio::io::AsyncBufReadExt as _;
    let mut server = tokio::process::Command::new(tether_binary().unwrap())
        .args(["serve", "--listen", "wss://localhost:0", "--tls-self-signed"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(server.stdout.take().unwrap()).lines();
    let url = lines.next_line().await.unwrap().unwrap();
    assert!(url.starts_with("wss://127.0.0.1:"), "{url}");
    let fingerprint = lines.next_line().await.unwrap().unwrap();
    let fingerprint = fingerprint.strip_prefix("fingerprint ").unwrap().to_owned();
    assert!(fingerprint.starts_with("SHA256:") && fingerprint.len() == 7 + 64, "{fingerprint}");

    let exec = |url: String, pin: String| async move {
        tokio::process::Command::new(tether_binary().unwrap())
            .args(["exec", "--url", &url, "--tls-fingerprint", &pin, "--", "echo", "pinned"])
            .env_remove("TETHER_TLS_CA_FILE")
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap()
    };
    let output = exec(url.clone(), fingerprint.clone()).await;
    assert_eq!((output.status.code(), output.stdout.as_slice()), (Some(0), &b"pinned\n"[..]));
    // As openssl prints it (upper case, colons), and by another name than the URL's.
    let hex = fingerprint.trim_start_matches("SHA256:").to_uppercase();
    let colons: Vec<&str> = (0..32).map(|i| &hex[2 * i..2 * i + 2]).collect();
    let by_name = url.replacen("127.0.0.1", "localhost", 1);
    let output = exec(by_name, colons.join(":")).await;
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));

    let other = format!("SHA256:{}", "00".repeat(32));
    let output = exec(url.clone(), other.clone()).await;
    assert_eq!(output.status.code(), Some(255));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "tether exec: cannot connect to {url}: the server's certificate is {fingerprint}, not the pinned {other}; a server restarted with --tls-self-signed has a new certificate (--tls-self-signed-dir keeps one): pin the fingerprint it printed, if you trust that it is the server"
        )
    );
    let _ = server.start_kill();
}

/// The usual recipe, `openssl req -x509 … -addext subjectAltName=…`, makes a self-signed
/// certificate marked CA:TRUE. Given as the client's CA file it is trusted (as curl trusts it)
/// for the names it carries, and for no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usual_self_signed_certificate_is_its_own_ca_file() {
    let dir = std::env::temp_dir().join(format!("tether-tls-own-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".into()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    let (cert_file, key_file) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let args = ["--tls-cert", path(&cert_file), "--tls-key", path(&key_file)];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();

    let options = ClientOptions { tls_ca_file: Some(cert_file.clone()), ..Default::default() };
    let client = ExecServerClient::connect(&server.url, options.clone()).await.unwrap();
    assert_eq!(echo(&client, "own-ca").await, b"over tls\n");
    // The certificate is for 127.0.0.1 only.
    let by_name = server.url.replacen("127.0.0.1", "localhost", 1);
    let error = ExecServerClient::connect(&by_name, options).await.err().unwrap();
    assert!(
        matches!(&error, ClientError::Connect(e) if e.kind == ConnectErrorKind::UntrustedCertificate),
        "{error}"
    );
    assert!(error.to_string().contains("is not for the host name connected to"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `wss://` without a certificate is a mistake said at startup, with the way out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wss_listener_without_a_certificate_is_refused_at_startup() {
    let output = tokio::process::Command::new(tether_binary().unwrap())
        .args(["serve", "--listen", "wss://127.0.0.1:0"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).trim_end(),
        "tether: --listen wss://127.0.0.1:0 needs a certificate: add --tls-self-signed, or --tls-cert and --tls-key"
    );
}
