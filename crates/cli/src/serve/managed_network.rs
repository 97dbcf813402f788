//! The managed-network flags of `codex exec-server`: checked as the reference checks them and
//! kept in the server's configuration ([`tether_server::managed_network`]), which says what
//! each makes the managed proxies do.

use clap::Args;
use tether_server::managed_network::{HostPort, ManagedNetwork};

#[derive(Args)]
#[command(next_help_heading = "Managed network")]
pub struct ManagedNetworkArgs {
    /// Route managed Linux sandbox TCP through the SOCKS proxy: every sandboxed start with a
    /// managed proxy gets transparent TCP, whether its launch asks for it or not.
    #[arg(long)]
    linux_sandbox_transparent_tcp: bool,

    /// Send every connection of the managed SOCKS5 listener (transparent TCP's too) through
    /// this HTTP CONNECT proxy, refusing what it cannot carry; a start held to a managed
    /// network without a proxy of the executor's own is refused.
    #[arg(long, value_name = "HOST:PORT")]
    tcp_upstream_proxy: Option<HostPort>,

    /// Send allowed private addresses (RFC 1918, 100.64/10, IPv6 unique-local) through the
    /// upstream proxy that applies instead of directly; with none for the protocol they still
    /// go directly, and loopback always stays local. Needs no --tcp-upstream-proxy.
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
}
