//! Helpers the scenario files share.
#![allow(dead_code)]

pub mod codex;
pub mod origins;
pub mod tree;

use serde_json::{Value, json};
use tether_testkit::client::b64decode;

/// `process/start` params for a `/bin/sh -c` script in pipe mode.
pub fn exec(id: &str, script: &str) -> Value {
    json!({
        "processId": id,
        "argv": ["/bin/sh", "-c", script],
        "cwd": "file:///tmp",
        "env": {"PATH": "/usr/bin:/bin"},
        "tty": false,
    })
}

#[allow(unused_imports)]
pub use tether_testkit::process_stats::is_alive;

/// Whether `pid` ends soon (a killed process closes its pipes a moment before it finishes
/// dying): within 10 s, "soon" on a loaded machine, seen on its pidfd as it happens.
pub async fn dies_soon(pid: u32) -> bool {
    tether_testkit::process_stats::ends_within(pid, std::time::Duration::from_secs(10)).await
}

/// The text of a `process/read` result's chunks, concatenated.
pub fn text(chunks: &Value) -> String {
    chunks
        .as_array()
        .unwrap()
        .iter()
        .map(|c| String::from_utf8(b64decode(&c["chunk"])).unwrap())
        .collect()
}

/// An executor user's home with a `CODEX_HOME` in it, and room beside it for repositories and
/// roots, removed when dropped. A server started by [`ExecutorHome::started`] runs with this
/// `HOME` and `CODEX_HOME`, so it finds only what a test put there.
pub struct ExecutorHome {
    root: std::path::PathBuf,
}

impl ExecutorHome {
    /// A fresh home under `/var/tmp` (the reference will not sandbox with `CODEX_HOME` in
    /// `/tmp`), named after the test file's `kind`, the target and the scenario.
    pub fn new(kind: &str, target: tether_testkit::Target, name: &str) -> Self {
        let root = std::path::PathBuf::from(format!(
            "/var/tmp/tether-{kind}-{}-{target:?}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("home/.codex")).unwrap();
        Self { root }
    }

    pub fn path(&self, relative: &str) -> std::path::PathBuf {
        self.root.join(relative)
    }

    pub fn uri(&self, relative: &str) -> String {
        format!("file://{}", self.path(relative).display())
    }

    /// Writes `contents` at `relative`, creating its directories.
    pub fn write(&self, relative: &str, contents: impl AsRef<[u8]>) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    /// A server with this `HOME` and `CODEX_HOME`, and a client past the handshake.
    pub async fn started(
        &self,
        target: tether_testkit::Target,
    ) -> (tether_testkit::ServerProcess, tether_testkit::RpcClient) {
        self.started_with(target, &[], &[]).await
    }

    /// [`Self::started`], with `args` on the server's command line and `env` beside `HOME` and
    /// `CODEX_HOME` in its environment.
    pub async fn started_with(
        &self,
        target: tether_testkit::Target,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> (tether_testkit::ServerProcess, tether_testkit::RpcClient) {
        let home = self.path("home").display().to_string();
        let codex_home = self.path("home/.codex").display().to_string();
        let mut all = vec![("HOME", home.as_str()), ("CODEX_HOME", codex_home.as_str())];
        all.extend_from_slice(env);
        let server =
            tether_testkit::ServerProcess::start_with_env(target, args, &all).await.unwrap();
        let (client, _) =
            tether_testkit::RpcClient::connect_initialized(&server.url).await.unwrap();
        (server, client)
    }
}

impl Drop for ExecutorHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// `GET /metrics` over plain HTTP/1.1: (status, body).
pub async fn scrape(
    server: &tether_testkit::ServerProcess,
    authorization: Option<&str>,
) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: {}\r\n{auth}Connection: close\r\n\r\n",
        server.addr()
    );
    tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// The value of the sample named exactly `name` (with its labels).
pub fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{name} missing from:\n{text}"))
        .parse()
        .unwrap()
}

/// The status and body an upgrade to `url` gets with `authorization` (if any).
pub async fn upgrade(url: &str, authorization: Option<&str>) -> (u16, String) {
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
            .unwrap();
    if let Some(value) = authorization {
        request.headers_mut().insert("authorization", value.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((_, response)) => (response.status().as_u16(), String::new()),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let body = response.body().as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            (response.status().as_u16(), body.into_owned())
        }
        Err(error) => panic!("upgrade failed: {error}"),
    }
}

/// A path as the `file:` URI a client sends (the tests' paths need no escaping).
pub fn uri(path: &std::path::Path) -> String {
    format!("file://{}", path.display())
}

/// Codex's `-s workspace-write` intent for `project`: everything readable, the project root
/// and `/tmp` writable, the protected names read-only, the network restricted. With
/// `policy_context`, as the `fs/*` writes carry it.
pub fn workspace_write(project: &std::path::Path, policy_context: bool) -> Value {
    let special = |kind: &str, access: &str| json!({"path": {"type": "special", "value": {"kind": kind}}, "access": access});
    let mut entries = vec![
        special("root", "read"),
        special("project_roots", "write"),
        special("slash_tmp", "write"),
    ];
    entries.extend([".git", ".agents", ".codex", ".aws"].map(|name| {
        json!({"path": {"type": "special", "value": {"kind": "project_roots", "subpath": name}},
            "access": "read", "missing_path_behavior": "skip"})
    }));
    let mut intent = json!({
        "permissions": {"type": "managed",
            "file_system": {"type": "restricted", "entries": entries}, "network": "restricted"},
        "cwd": uri(project),
        "workspaceRoots": [uri(project)],
        "windowsSandboxLevel": "disabled",
        "useLegacyLandlock": false,
    });
    if policy_context {
        intent["policyContext"] = json!({"cwd": uri(project), "workspaceRoots": [uri(project)]});
        intent["userHomeDir"] = json!("file:///root");
    }
    intent
}

/// A `tether serve` whose log a test reads: started on `ws://127.0.0.1:0` with `args` and
/// `env` (`None` removes the variable), its URL read from its first line of output.
pub struct LoggingServer {
    pub child: tokio::process::Child,
    pub url: String,
    pub log: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
}

impl LoggingServer {
    pub async fn start(args: &[&str], env: &[(&str, Option<&str>)]) -> Self {
        use tokio::io::AsyncBufReadExt as _;
        let mut command =
            tokio::process::Command::new(tether_testkit::server::tether_binary().unwrap());
        command.args(["serve", "--listen", "ws://127.0.0.1:0"]).args(args);
        for (name, value) in env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
        let mut url = String::new();
        stdout.read_line(&mut url).await.unwrap();
        let log = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        Self { child, url: url.trim().to_owned(), log }
    }
}

/// Reads a terminal into `seen` until it holds `needle` (within 30 s).
pub async fn read_until(
    reader: &mut (impl tokio::io::AsyncReadExt + Unpin),
    needle: &str,
    seen: &mut String,
) {
    let mut buffer = [0u8; 4096];
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while !seen.contains(needle) {
            let n = reader.read(&mut buffer).await.unwrap();
            assert!(n > 0, "the terminal closed; seen: {seen:?}");
            seen.push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{needle:?} never came; seen: {seen:?}"));
}
