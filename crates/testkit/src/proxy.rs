//! A TCP proxy that cuts connections on demand: the network failure a recovering client must
//! ride through, made real and repeatable.

use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// Forwards `127.0.0.1:<port>` to an upstream address until dropped.
pub struct FaultProxy {
    /// `ws://127.0.0.1:<port>`, for a client to connect to instead of the server.
    pub url: String,
    control: Arc<Control>,
    acceptor: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Control {
    links: Mutex<Vec<AbortHandle>>,
    down: Mutex<bool>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("ws://{}", listener.local_addr()?);
        let control = Arc::new(Control::default());
        let upstream = upstream.to_owned();
        let acceptor_control = control.clone();
        let acceptor = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *acceptor_control.down.lock().unwrap() {
                    drop(client);
                    continue;
                }
                let upstream = upstream.clone();
                let link = tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&upstream).await else { return };
                    let mut client = client;
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
                acceptor_control.links.lock().unwrap().push(link.abort_handle());
            }
        });
        Ok(Self { url, control, acceptor })
    }

    /// Drops every open connection abruptly, both ways, as a network failure would.
    pub fn cut(&self) {
        for link in self.control.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    /// While down, new connections are accepted and dropped at once (an unreachable network
    /// that still answers SYNs fails the same way for the client: a failed handshake).
    pub fn set_down(&self, down: bool) {
        *self.control.down.lock().unwrap() = down;
        if down {
            self.cut();
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.cut();
    }
}
