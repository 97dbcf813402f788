//! What every connection of one server shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tether_engine::fs::LocalFileSystem;
use tether_engine::http::LocalHttpClient;
use tether_protocol::process::ProcessSignal;
use tether_protocol::session::{Capabilities, EnvironmentInfo, TetherExtensions};

use tether_engine::capabilities::InventoryCache;
use tether_engine::shell_snapshot::ShellSnapshots;

use crate::config::ServerConfig;
use crate::metrics::Metrics;
use crate::registry::SessionRegistry;

pub(crate) struct ServerState {
    pub config: ServerConfig,
    pub fs: LocalFileSystem,
    /// One client for every connection, so they share its connection pool.
    pub http: Arc<LocalHttpClient>,
    /// The executor's installed skills and plugins, kept while nothing under them changes.
    pub inventory: Arc<InventoryCache>,
    /// Users' shell states, captured once per scope for `shellSnapshot` starts.
    pub snapshots: ShellSnapshots,
    pub sessions: Arc<SessionRegistry>,
    /// Computed once at start: the executor does not change under a running server.
    pub environment_info: EnvironmentInfo,
    pub metrics: Arc<Metrics>,
    /// One permit per open WebSocket connection ([`ServerConfig::max_connections`]).
    pub connections: Arc<tokio::sync::Semaphore>,
    /// Set when a drain starts: new sessions are refused, `/readyz` says 503.
    pub drain: DrainFlag,
}

impl ServerState {
    pub(crate) fn new(config: ServerConfig) -> Arc<Self> {
        Arc::new(Self {
            sessions: SessionRegistry::new(config.detached_session_ttl, config.processes.clone()),
            environment_info: tether_engine::environment::environment_info(capabilities()),
            fs: LocalFileSystem::with_whole_read_budget(config.whole_read_budget_bytes),
            http: Arc::new(LocalHttpClient::new()),
            inventory: Arc::new(InventoryCache::default()),
            snapshots: ShellSnapshots::default(),
            metrics: Arc::new(Metrics::default()),
            connections: Arc::new(tokio::sync::Semaphore::new(config.max_connections)),
            drain: DrainFlag::default(),
            config,
        })
    }
}

/// The optional features this server serves. Each flag gates request fields a client will
/// send, so only what is really implemented is advertised.
fn capabilities() -> Capabilities {
    Capabilities {
        network_proxy_launch: true,
        network_proxy_review_domains: true,
        network_proxy_transparent_tcp: true,
        credential_masking: true,
        // Custom providers are masked as the built-in secrets are (the reference takes them
        // and masks none of them); one that cannot be honoured is left out and logged.
        credential_masking_custom_providers: true,
        sandboxed_file_streaming: true,
        fs_watch_missing: true,
        http_header_env_vars: true,
        file_write_streaming: true,
        environment_config_read: true,
        capability_discovery_v2: true,
        capability_discovery_sandbox: true,
        shell_snapshot_v2: true,
        // A sandbox with `/` writable keeps the standard devices, the denied paths and the
        // protected names (a link among them refused), as the reference's does
        // (`sandbox::a_writable_root_keeps_standard_devices_and_every_restriction`).
        linux_root_write_preserves_devices: true,
        linux_approved_root_write_preserves_restrictions: true,
        tether_extensions: Some(TetherExtensions {
            pty_size: true,
            close_stdin: true,
            process_list: true,
            oldest_retained_seq: true,
            signals: ProcessSignal::ALL.to_vec(),
            fs_metadata: true,
            binary_blocks: true,
            session_ttl: true,
            attached_http_bodies: true,
            attached_output: true,
            sessions: true,
            port_forward: true,
        }),
        ..Capabilities::default()
    }
}

/// Whether the server is draining ([`crate::drain`]): set once, never cleared (a drain ends in
/// a shutdown).
#[derive(Default)]
pub(crate) struct DrainFlag(AtomicBool);

impl DrainFlag {
    pub(crate) fn is_draining(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    pub(crate) fn start(&self) {
        self.0.store(true, Ordering::Release);
    }
}
