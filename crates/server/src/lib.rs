//! The Tether exec-server: transports, connections, sessions and method dispatch over the
//! engine.
//!
//! - [`config`]: every knob and default, with the reason for each.
//! - [`auth`] and [`jwt`]: who may open a WebSocket (capability token, signed bearer token).
//! - [`listen`]: `--listen` parsing.
//! - [`managed_network`]: the managed-network settings, checked as the reference checks them,
//!   and what they mean to the engine's managed proxies.
//! - [`transport`]: a connection's frames and outbound queue, the WebSocket upgrade and TLS.
//!   Before its upgrade a connection is a stranger's: deadlines and a cap.
//! - `serve`: each transport's connections (WebSocket routes, stdio), each handed to a
//!   processor.
//! - [`descriptors`]: making the connection limit fit the file-descriptor limit.
//! - [`drain`]: a graceful stop — no new sessions, running processes given a grace to finish.
//! - [`signals`]: SIGTERM and SIGINT to a drain, then the shutdown
//!   ([`Server::run_until_signalled`]).
//! - [`hardening`]: what the server process keeps from its commands (its `/proc` entries, the
//!   descriptors it inherited).
//! - `processor`: one connection's message loop — handshake, dispatch, long-polls.
//! - `handlers`: one module per method family (`process`, `fs`, `http`), thin over the engine.
//! - `registry` and `session`: sessions outlive connections; detach, resume, expiry.
//! - `rpc_error`: engine errors to JSON-RPC codes.
//! - `metrics`: `GET /metrics`, in Prometheus text format.
//!
//! Imports point one way, down this order: `config` (with `auth`, `jwt`, `managed_network`,
//! `metrics`, `rpc_error`), `transport`, `session`, `registry`, `state`, `drain`, `signals`,
//! `handlers`, `processor`, `serve`.
//!
//! Architecture invariant: handlers stay thin. Anything that runs processes belongs in
//! `tether-engine`; anything about bytes on the wire belongs in `tether-protocol`.

// The module docs are maps for readers of the code, private modules included: they resolve
// under `cargo doc --document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

mod asks;
pub mod auth;
pub mod config;
mod contained;
pub mod descriptors;
pub mod drain;
mod handlers;
pub mod hardening;
pub mod jwt;
pub mod listen;
pub mod managed_network;
mod metrics;
mod processor;
mod registry;
mod rpc_error;
mod serve;
mod session;
pub mod signals;
mod state;
pub mod transport;

use std::net::SocketAddr;
use std::sync::Arc;

pub use config::ServerConfig;
pub use drain::{Drain, DrainEnd};
pub use listen::{DEFAULT_LISTEN, ListenAddress};
pub use signals::StopSignals;
use tokio_util::sync::CancellationToken;

use state::ServerState;

/// A bound, not yet serving, server.
pub struct Server {
    state: Arc<ServerState>,
    listener: Listener,
    /// [`ServerConfig::metrics_listen`], bound.
    metrics: Option<tokio::net::TcpListener>,
}

enum Listener {
    WebSocket(tokio::net::TcpListener),
    Stdio,
}

impl Server {
    /// Binds the listen address. For WebSocket, the port is taken here, so the caller can print
    /// the real address before serving.
    ///
    /// A WebSocket address other than loopback is refused without authentication unless the
    /// config says `insecure_no_auth`: whoever reaches an unauthenticated port runs commands.
    pub async fn bind(listen: &ListenAddress, config: ServerConfig) -> std::io::Result<Self> {
        let listener = match listen {
            ListenAddress::WebSocket { addr, tls } => {
                if *tls && config.tls.is_none() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!(
                            "{listen} needs a certificate: give --tls-cert and --tls-key, or --tls-self-signed"
                        ),
                    ));
                }
                if !addr.ip().is_loopback()
                    && !config.ws_auth.is_enabled()
                    && !config.insecure_no_auth
                {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        format!(
                            "refusing to listen on {addr} without authentication: anyone who reaches it could run commands. Use --ws-auth capability-token (or signed-bearer-token), or say --insecure-no-auth if the network is trusted"
                        ),
                    ));
                }
                Listener::WebSocket(tokio::net::TcpListener::bind(addr).await?)
            }
            ListenAddress::Stdio => Listener::Stdio,
        };
        let metrics = match config.metrics_listen {
            Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(|error| {
                std::io::Error::new(error.kind(), format!("--metrics-listen {addr}: {error}"))
            })?),
            None => None,
        };
        Ok(Self { state: ServerState::new(config), listener, metrics })
    }

    /// The bound metrics address (`--metrics-listen`), if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|listener| listener.local_addr().ok())
    }

    /// The bound WebSocket address, or `None` for stdio.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.listener {
            Listener::WebSocket(listener) => listener.local_addr().ok(),
            Listener::Stdio => None,
        }
    }

    /// The URL clients connect to (`ws://127.0.0.1:PORT`, or `wss://` with TLS), or `None` for
    /// stdio.
    pub fn url(&self) -> Option<String> {
        let scheme = if self.state.config.tls.is_some() { "wss" } else { "ws" };
        self.local_addr().map(|addr| format!("{scheme}://{addr}"))
    }

    /// The handle that drains this server (see [`drain`]); take it before [`Self::serve`].
    pub fn drain(&self) -> Drain {
        Drain::new(self.state.clone())
    }

    /// Serves until a stop signal, with the drain and second-signal policy of [`signals`]:
    /// the way a server should run under a supervisor or a terminal. `also` is a stop of the
    /// embedder's own, taken as a SIGTERM (`std::future::pending()` for none). Install
    /// `signals` before binding, so that a stop as the server starts is not lost.
    pub async fn run_until_signalled(
        self,
        signals: StopSignals,
        also: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let shutdown = CancellationToken::new();
        tokio::spawn(signals::drain_on_signals(signals, also, self.drain(), shutdown.clone()));
        self.serve(shutdown).await
    }

    /// Serves until `shutdown` is cancelled (or, for stdio, until stdin ends), then ends every
    /// session and kills their processes.
    pub async fn serve(self, shutdown: CancellationToken) -> std::io::Result<()> {
        let metrics = self.metrics.map(|listener| {
            tokio::spawn(serve::websocket::serve_metrics(
                listener,
                self.state.clone(),
                shutdown.clone(),
            ))
        });
        let result = match self.listener {
            Listener::WebSocket(listener) => {
                serve::websocket::serve(listener, self.state.clone(), shutdown).await
            }
            Listener::Stdio => {
                serve::stdio::serve(self.state.clone(), shutdown).await;
                Ok(())
            }
        };
        self.state.sessions.shutdown();
        if let Some(metrics) = metrics {
            metrics.abort();
        }
        result
    }
}
