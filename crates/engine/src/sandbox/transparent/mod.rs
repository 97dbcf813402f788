//! Transparent TCP (`networkProxy.proxy.transparentTcp`): a proxied sandbox whose command's
//! outbound TCP reaches the managed proxy even when the program ignores the proxy variables,
//! so the domain policy holds for every connection, not only for well-behaved clients.
//!
//! The inner stage, before the command starts, makes a TUN device in the sandbox's network
//! namespace and routes every destination but loopback through it, IPv4 and IPv6 ([`tun`]);
//! serves names on `127.0.0.53` (the sandbox's `/etc/resolv.conf`), each name given an
//! address of its own in each family ([`dns`]); and carries each connection the command makes over the TUN device to the managed
//! SOCKS5 proxy, by name where the address was one it gave ([`stack`]). Then it gives up the
//! capabilities this took, and only then starts the command.
//!
//! UDP is not routed: what cannot go through the proxy goes nowhere. Neither is IPv6 on a
//! kernel without it (or with it off), where an IPv6 destination is unreachable.

pub mod dns;
pub mod stack;
pub mod tun;

use std::net::UdpSocket;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

/// What the inner stage made while it still held the capabilities, ready to serve.
pub struct Prepared {
    device: OwnedFd,
    names: UdpSocket,
}

/// Makes the device and binds the name server, then drops every capability; `Err` is a line
/// for the command's stderr, and the command must not run.
pub fn prepare() -> Result<Prepared, String> {
    let device = tun::make()
        .map_err(|error| format!("failed to prepare transparent TCP namespace: {error}"))?;
    let names = UdpSocket::bind(dns::LISTEN)
        .map_err(|error| format!("failed to start transparent TCP name server: {error}"))?;
    tun::drop_capabilities()
        .map_err(|error| format!("failed to protect transparent TCP processes: {error}"))?;
    Ok(Prepared { device, names })
}

impl Prepared {
    /// Serves, on two threads of this stage, until the sandbox ends: the name server, and the
    /// relay to the SOCKS5 forwarder at `socks` on the sandbox's loopback.
    pub fn start(self, socks: u16) {
        let table = Arc::new(Mutex::new(dns::FakeNames::default()));
        let shared = Arc::clone(&table);
        let names = self.names;
        std::thread::spawn(move || dns::serve(names, shared));
        let relay = stack::Relay::new(self.device, socks, table);
        std::thread::spawn(move || relay.run());
    }
}
