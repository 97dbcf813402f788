//! The managed-network flags of `codex exec-server`: checked as the reference checks them and
//! kept in the server's configuration ([`tether_server::managed_network`]). Transparent TCP
//! takes effect; the upstream-proxy pair is kept but not yet acted on.

use clap::Args;
use tether_server::managed_network::{HostPort, ManagedNetwork};

#[derive(Args)]
#[command(next_help_heading = "Managed network")]
pub struct ManagedNetworkArgs {
    /// Route managed Linux sandbox TCP through the SOCKS proxy: every sandboxed start with a
    /// managed proxy gets transparent TCP, whether its launch asks for it or not.
    #[arg(long)]
    linux_sandbox_transparent_tcp: bool,

    /// Require this HTTP CONNECT proxy for raw TCP from the managed SOCKS listener. Changes
    /// nothing yet.
    #[arg(long, value_name = "HOST:PORT")]
    tcp_upstream_proxy: Option<HostPort>,

    /// Let permitted private IP destinations use the upstream proxy (loopback stays local).
    /// Changes nothing yet.
    #[arg(long, env = "CODEX_EXEC_SERVER_PROXY_PRIVATE_IPS_VIA_UPSTREAM")]
    proxy_private_ips_via_upstream: bool,
}

impl ManagedNetworkArgs {
    pub fn settings(&self) -> ManagedNetwork {
        ManagedNetwork {
            transparent_tcp: self.linux_sandbox_transparent_tcp,
            tcp_upstream_proxy: self.tcp_upstream_proxy.clone(),
            proxy_private_ips_via_upstream: self.proxy_private_ips_via_upstream,
        }
    }

    /// Whether any was given, for the log.
    pub fn any(&self) -> bool {
        self.settings() != ManagedNetwork::default()
    }
}
