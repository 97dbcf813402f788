//! A raw JSON-RPC client over a real WebSocket: it sends exactly what a test says and shows
//! exactly what the server answered, notifications included.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

/// How long a test waits for any one message before it calls the server stuck.
pub const RECV_TIMEOUT: Duration = Duration::from_secs(20);

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub struct RpcClient {
    socket: Socket,
    next_id: i64,
    /// Notifications that arrived while waiting for a response, oldest first.
    notifications: VecDeque<Value>,
    /// Responses that arrived while waiting for another id.
    responses: Vec<Value>,
}

/// A JSON-RPC error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    /// `error.data`, when the server sent one.
    pub data: Option<Value>,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

impl RpcClient {
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let (socket, _) = connect_async(url).await.with_context(|| format!("connect {url}"))?;
        Ok(Self { socket, next_id: 1, notifications: VecDeque::new(), responses: Vec::new() })
    }

    /// Connects with `Authorization: Bearer <token>`.
    pub async fn connect_bearer(url: &str, token: &str) -> anyhow::Result<Self> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut request = url.into_client_request()?;
        request.headers_mut().insert("authorization", format!("Bearer {token}").parse()?);
        let (socket, _) = connect_async(request).await.with_context(|| format!("connect {url}"))?;
        Ok(Self { socket, next_id: 1, notifications: VecDeque::new(), responses: Vec::new() })
    }

    /// Connects to a `ws://` URL from the local address `source` (any port): another client's
    /// address, on loopback, where the whole of 127.0.0.0/8 is this machine.
    pub async fn connect_from(url: &str, source: std::net::IpAddr) -> anyhow::Result<Self> {
        let address = url.trim_start_matches("ws://").trim_end_matches('/');
        let server: std::net::SocketAddr =
            address.parse().with_context(|| format!("address of {url}"))?;
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket
            .bind(std::net::SocketAddr::new(source, 0))
            .with_context(|| format!("bind {source}"))?;
        let tcp = socket.connect(server).await.with_context(|| format!("connect {url}"))?;
        let (socket, _) = tokio_tungstenite::client_async(url, MaybeTlsStream::Plain(tcp))
            .await
            .with_context(|| format!("upgrade {url}"))?;
        Ok(Self { socket, next_id: 1, notifications: VecDeque::new(), responses: Vec::new() })
    }

    /// `initialize` asking the session to wait `ttl_secs` for a resume once detached
    /// (`detachedTtlSecs`), then `initialized`; the session id.
    pub async fn initialize_detachable(&mut self, ttl_secs: u64) -> anyhow::Result<String> {
        let params = json!({"clientName": "tether-tests", "detachedTtlSecs": ttl_secs});
        let result = self.call("initialize", params).await?.map_err(anyhow::Error::new)?;
        self.notify("initialized", json!({})).await?;
        let id = result["sessionId"].as_str().context("initialize answered no sessionId")?;
        Ok(id.to_owned())
    }

    /// Connects and completes the handshake; returns the client and the initialize result.
    pub async fn connect_initialized(url: &str) -> anyhow::Result<(Self, Value)> {
        let mut client = Self::connect(url).await?;
        let result = client.initialize(None).await?.map_err(anyhow::Error::new)?;
        Ok((client, result))
    }

    /// `initialize` (optionally resuming), then `initialized` if it succeeded.
    pub async fn initialize(
        &mut self,
        resume: Option<&str>,
    ) -> anyhow::Result<Result<Value, RpcError>> {
        let mut params = json!({"clientName": "tether-tests"});
        if let Some(id) = resume {
            params["resumeSessionId"] = json!(id);
        }
        let result = self.call("initialize", params).await?;
        if result.is_ok() {
            self.notify("initialized", json!({})).await?;
        }
        Ok(result)
    }

    /// Sends a request and waits for its reply.
    pub async fn call(
        &mut self,
        method: &str,
        params: Value,
    ) -> anyhow::Result<Result<Value, RpcError>> {
        let id = self.send_request(method, params).await?;
        self.response(id).await
    }

    /// Sends a request and returns its result, failing the test on an error reply.
    pub async fn ok(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.call(method, params).await?.with_context(|| format!("{method} failed"))
    }

    /// Sends a request and returns its error, failing the test on a success reply.
    pub async fn err(&mut self, method: &str, params: Value) -> anyhow::Result<RpcError> {
        match self.call(method, params).await? {
            Ok(result) => bail!("{method} unexpectedly succeeded: {result}"),
            Err(error) => Ok(error),
        }
    }

    /// Sends a request without waiting; returns its id.
    pub async fn send_request(&mut self, method: &str, params: Value) -> anyhow::Result<i64> {
        let id = self.next_id;
        self.next_id += 1;
        self.send_json(&json!({"id": id, "method": method, "params": params})).await?;
        Ok(id)
    }

    pub async fn notify(&mut self, method: &str, params: Value) -> anyhow::Result<()> {
        self.send_json(&json!({"method": method, "params": params})).await
    }

    pub async fn send_json(&mut self, value: &Value) -> anyhow::Result<()> {
        self.send_text(&value.to_string()).await
    }

    pub async fn send_text(&mut self, text: &str) -> anyhow::Result<()> {
        self.socket.send(Message::text(text)).await.context("send")
    }

    pub async fn send_binary(&mut self, bytes: Vec<u8>) -> anyhow::Result<()> {
        self.socket.send(Message::binary(bytes)).await.context("send")
    }

    /// Waits for the reply to request `id`, keeping notifications and other replies aside.
    pub async fn response(&mut self, id: i64) -> anyhow::Result<Result<Value, RpcError>> {
        self.response_to(&json!(id)).await
    }

    /// Waits for the reply whose id is `id` (any JSON id, `-1` for parse errors).
    pub async fn response_to(&mut self, id: &Value) -> anyhow::Result<Result<Value, RpcError>> {
        loop {
            if let Some(index) = self.responses.iter().position(|r| &r["id"] == id) {
                return Ok(to_result(self.responses.remove(index)));
            }
            let message = self.next_message().await?;
            if message.get("method").is_some() {
                self.notifications.push_back(message);
            } else {
                self.responses.push(message);
            }
        }
    }

    /// The next notification, waiting for one if none is queued.
    pub async fn notification(&mut self) -> anyhow::Result<Value> {
        loop {
            if let Some(notification) = self.notifications.pop_front() {
                return Ok(notification);
            }
            let message = self.next_message().await?;
            if message.get("method").is_some() {
                return Ok(message);
            }
            self.responses.push(message);
        }
    }

    /// The next message of any kind, in arrival order (queued ones are not consulted).
    pub async fn next_message(&mut self) -> anyhow::Result<Value> {
        loop {
            let frame = tokio::time::timeout(RECV_TIMEOUT, self.socket.next())
                .await
                .context("no message within the timeout")?
                .context("connection closed")??;
            match frame {
                Message::Text(text) => return Ok(serde_json::from_str(&text)?),
                Message::Binary(bytes) => return Ok(serde_json::from_slice(&bytes)?),
                Message::Close(_) => bail!("connection closed"),
                _ => continue,
            }
        }
    }

    /// The next message, which must be binary, as its bytes (Tether's `binaryBlocks`: JSON, a
    /// NUL, attached bytes). Messages of other kinds before it are kept for later.
    pub async fn next_binary(&mut self) -> anyhow::Result<Vec<u8>> {
        loop {
            match self.next_frame().await? {
                Message::Binary(bytes) => return Ok(bytes.to_vec()),
                Message::Text(text) => self.keep(serde_json::from_str(&text)?),
                Message::Close(_) => bail!("connection closed"),
                _ => {}
            }
        }
    }

    /// The next message as it came: JSON text, or a binary message's bytes (JSON, a NUL,
    /// attached bytes). Nothing is kept or skipped but pings and pongs.
    pub async fn next_text_or_binary(&mut self) -> anyhow::Result<Result<Value, Vec<u8>>> {
        loop {
            match self.next_frame().await? {
                Message::Text(text) => return Ok(Ok(serde_json::from_str(&text)?)),
                Message::Binary(bytes) => return Ok(Err(bytes.to_vec())),
                Message::Close(_) => bail!("connection closed"),
                _ => {}
            }
        }
    }

    /// Whether the server closes the connection within `within` (reading and discarding
    /// anything it still sends).
    pub async fn is_closed_within(&mut self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.socket.next()).await {
                Err(_) => return false,
                Ok(None) | Ok(Some(Err(_))) | Ok(Some(Ok(Message::Close(_)))) => return true,
                Ok(Some(Ok(_))) => continue,
            }
        }
    }

    /// Collects a process's notifications until it has them all: its `process/closed` and every
    /// sequence number below it (the reference may send them out of order). Returns them in
    /// arrival order; notifications of other processes stay queued.
    pub async fn process_events(&mut self, process_id: &str) -> anyhow::Result<Vec<Value>> {
        self.process_events_after(process_id, 0).await
    }

    /// Like [`Self::process_events`], for a client that has seen everything up to `after_seq`
    /// (it resumed a session and caught up with `process/read`).
    pub async fn process_events_after(
        &mut self,
        process_id: &str,
        after_seq: u64,
    ) -> anyhow::Result<Vec<Value>> {
        let mut events = Vec::new();
        let mut others = VecDeque::new();
        let mut closed_seq = None;
        while closed_seq.is_none_or(|seq| (events.len() as u64) < seq - after_seq) {
            let notification = self.notification().await?;
            let seq = notification["params"]["seq"].as_u64().unwrap_or_default();
            if notification["params"]["processId"] != process_id || seq <= after_seq {
                others.push_back(notification);
                continue;
            }
            if notification["method"] == "process/closed" {
                closed_seq = notification["params"]["seq"].as_u64();
            }
            events.push(notification);
        }
        others.extend(self.notifications.drain(..));
        self.notifications = others;
        Ok(events)
    }

    /// The notifications that arrived while waiting for responses and were not consumed yet.
    pub fn take_notifications(&mut self) -> Vec<Value> {
        self.notifications.drain(..).collect()
    }

    /// Sends a WebSocket ping and waits for the matching pong.
    pub async fn ping(&mut self, payload: &[u8]) -> anyhow::Result<()> {
        self.socket.send(Message::Ping(payload.to_vec().into())).await?;
        loop {
            match self.next_frame().await? {
                Message::Pong(data) if data.as_ref() == payload => return Ok(()),
                Message::Text(text) => self.keep(serde_json::from_str(&text)?),
                _ => {}
            }
        }
    }

    /// Waits for the server's next WebSocket ping.
    pub async fn server_ping(&mut self) -> anyhow::Result<()> {
        loop {
            match self.next_frame().await? {
                Message::Ping(_) => return Ok(()),
                Message::Text(text) => self.keep(serde_json::from_str(&text)?),
                _ => {}
            }
        }
    }

    async fn next_frame(&mut self) -> anyhow::Result<Message> {
        Ok(tokio::time::timeout(RECV_TIMEOUT, self.socket.next())
            .await
            .context("no frame within the timeout")?
            .context("connection closed")??)
    }

    fn keep(&mut self, message: Value) {
        if message.get("method").is_some() {
            self.notifications.push_back(message);
        } else {
            self.responses.push(message);
        }
    }

    /// Closes the connection cleanly.
    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}

fn to_result(message: Value) -> Result<Value, RpcError> {
    match message.get("error") {
        Some(error) => Err(RpcError {
            code: error["code"].as_i64().unwrap_or_default(),
            message: error["message"].as_str().unwrap_or_default().to_owned(),
            data: error.get("data").cloned(),
        }),
        None => Ok(message["result"].clone()),
    }
}

/// Decodes a base64 string from the wire.
pub fn b64decode(text: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text.as_str().unwrap_or_default())
        .expect("base64")
}

/// Encodes bytes for the wire.
pub fn b64encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Output of a process from its notifications, per stream, in sequence order.
pub fn output_of(events: &[Value], stream: &str) -> Vec<u8> {
    let mut chunks: Vec<(u64, Vec<u8>)> = events
        .iter()
        .filter(|e| e["method"] == "process/output" && e["params"]["stream"] == stream)
        .map(|e| {
            (e["params"]["seq"].as_u64().unwrap_or_default(), b64decode(&e["params"]["chunk"]))
        })
        .collect();
    chunks.sort_by_key(|(seq, _)| *seq);
    chunks.into_iter().flat_map(|(_, bytes)| bytes).collect()
}
