//! `--hostile`: attackers beside the soak's honest clients, aimed at the server directly (not
//! through the cutting proxy). The honest clients' verdict is unchanged — nothing lost, nothing
//! failed — and the attackers' effect is reported next to it.
//!
//! - **Idle strangers:** TCP connections that never send a byte, [`IDLE_SOCKETS`] held open
//!   at once and replaced as the server closes them.
//! - **Trickling heads:** request heads sent a byte every 100 ms, never finished.
//! - **Stalled readers:** a session starts an endless `yes` and stops reading its socket; the
//!   time until the session can be resumed elsewhere is measured (the server should let the
//!   stalled connection go within its pong timeout).
//! - **Vanishing clients:** a session starts a command and drops its connection without a word.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tether_testkit::RpcClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Idle connections the attack keeps open at once: more than the server lets wait for their
/// upgrade (256), so that its cap, not only its deadline, is what holds.
pub const IDLE_SOCKETS: usize = 400;

/// Trickling connections at once.
const TRICKLERS: usize = 8;

/// How long a stalled reader's session may take to be resumable before the attack calls it a
/// failure: far past any pong timeout a soak runs with.
const RESUME_GIVE_UP: Duration = Duration::from_secs(60);

/// What the attackers did, and what they saw.
#[derive(Default)]
pub struct Attacks {
    pub idle_sockets: AtomicU64,
    pub trickles: AtomicU64,
    pub stalled_readers: AtomicU64,
    pub vanished_clients: AtomicU64,
    /// The longest a stalled reader's session took to become resumable.
    pub worst_resume_ms: AtomicU64,
    /// Stalled sessions never released within [`RESUME_GIVE_UP`], or attacks that broke in a
    /// way an honest client would see.
    pub failures: AtomicU64,
}

/// Starts every attacker against the server at `addr` (`url` for WebSockets); they stop at
/// `deadline`.
pub fn start(
    addr: String,
    url: String,
    deadline: Instant,
    attacks: Arc<Attacks>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = vec![
        tokio::spawn(idle_strangers(addr.clone(), deadline, attacks.clone())),
        tokio::spawn(stalled_readers(url.clone(), deadline, attacks.clone())),
        tokio::spawn(vanishing_clients(url, deadline, attacks.clone())),
    ];
    for _ in 0..TRICKLERS {
        tasks.push(tokio::spawn(trickler(addr.clone(), deadline, attacks.clone())));
    }
    tasks
}

async fn idle_strangers(addr: String, deadline: Instant, attacks: Arc<Attacks>) {
    let mut open = VecDeque::with_capacity(IDLE_SOCKETS);
    while Instant::now() < deadline {
        if let Ok(socket) = TcpStream::connect(&addr).await {
            open.push_back(socket);
            attacks.idle_sockets.fetch_add(1, Ordering::Relaxed);
        }
        if open.len() > IDLE_SOCKETS {
            open.pop_front();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn trickler(addr: String, deadline: Instant, attacks: Arc<Attacks>) {
    while Instant::now() < deadline {
        let Ok(socket) = TcpStream::connect(&addr).await else { continue };
        attacks.trickles.fetch_add(1, Ordering::Relaxed);
        let (mut reader, mut writer) = socket.into_split();
        let closed = async move {
            let mut buf = [0u8; 512];
            while !matches!(reader.read(&mut buf).await, Ok(0) | Err(_)) {}
        };
        let trickle = async move {
            let head = b"GET / HTTP/1.1\r\nHost: soak\r\nX-Slow: ";
            for byte in head.iter().chain(std::iter::repeat(&b'a')) {
                if writer.write_all(&[*byte]).await.is_err() || Instant::now() > deadline {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::select! {
            () = closed => {}
            () = trickle => {}
        }
    }
}

async fn stalled_readers(url: String, deadline: Instant, attacks: Arc<Attacks>) {
    while Instant::now() < deadline {
        let Ok((mut stalled, session)) = RpcClient::connect_initialized(&url).await else {
            attacks.failures.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let Some(session) = session["sessionId"].as_str().map(str::to_owned) else { continue };
        let start = json!({"processId": "flood", "argv": ["yes", "stalled reader"],
            "cwd": "file:///tmp", "env": {"PATH": "/usr/bin:/bin"}, "tty": false});
        if stalled.send_request("process/start", start).await.is_err() {
            continue;
        }
        attacks.stalled_readers.fetch_add(1, Ordering::Relaxed);
        // From here on nothing reads `stalled`.
        let stalled_at = Instant::now();
        let resumed = loop {
            if stalled_at.elapsed() > RESUME_GIVE_UP {
                break None;
            }
            if let Ok(mut again) = RpcClient::connect(&url).await
                && let Ok(Ok(_)) = again.initialize(Some(&session)).await
            {
                break Some(again);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let Some(mut resumed) = resumed else {
            attacks.failures.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let waited = stalled_at.elapsed().as_millis() as u64;
        attacks.worst_resume_ms.fetch_max(waited, Ordering::Relaxed);
        let _ = resumed.ok("process/terminate", json!({"processId": "flood"})).await;
        drop(stalled);
    }
}

async fn vanishing_clients(url: String, deadline: Instant, attacks: Arc<Attacks>) {
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        if let Ok((mut client, _)) = RpcClient::connect_initialized(&url).await {
            let start = json!({"processId": format!("left-{n}"), "argv": ["sleep", "3"],
                "cwd": "file:///tmp", "env": {"PATH": "/usr/bin:/bin"}, "tty": false});
            let _ = client.send_request("process/start", start).await;
            // Dropped without a Close frame.
            drop(client);
            attacks.vanished_clients.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
