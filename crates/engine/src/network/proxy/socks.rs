//! The SOCKS5 side of a process's proxy (RFC 1928, no authentication): the handshake is
//! fast-socks5's; for `CONNECT`, the destination decided by [`super::gate`] like any other,
//! and the reply sent once the destination has been reached — directly, or through the
//! operator's mandatory TCP upstream when there is one ([`super::upstream::tcp`]). `UDP
//! ASSOCIATE` opens an association on the proxy's UDP relay ([`super::udp`]) when the launch
//! asked for one (`enableSocks5Udp`); without it, and always for `BIND`, the answer is
//! "command not supported".
//!
//! A destination allowed but not reached is answered as the reference answers it: "connection
//! refused" when it refused, or when the TCP upstream did not carry it; "host unreachable"
//! otherwise.

use std::net::SocketAddr;
use std::sync::Arc;

use fast_socks5::server::Socks5ServerProtocol;
use fast_socks5::util::target_addr::TargetAddr;
use fast_socks5::{ReplyError, Socks5Command};
use tether_protocol::network::ProxyProtocol;
use tokio::net::TcpStream;
use tracing::debug;

use super::gate::{self, Admission, Target};
use super::upstream::tcp::Destination;
use super::{HANDSHAKE_TIMEOUT, Proxy, splice, udp};

/// Serves one SOCKS5 connection from the process.
pub(super) async fn serve(proxy: Arc<Proxy>, stream: TcpStream, client: SocketAddr) {
    let handshake = async {
        let protocol = Socks5ServerProtocol::accept_no_auth(stream).await?;
        protocol.read_command().await
    };
    let (protocol, command, target) = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await
    {
        Ok(Ok(read)) => read,
        Ok(Err(error)) => return debug!(%error, "SOCKS5 handshake failed"),
        Err(_) => return debug!("SOCKS5 handshake timed out"),
    };
    match command {
        Socks5Command::TCPConnect => {}
        Socks5Command::UDPAssociate => {
            return match udp::open(&proxy, client, &target) {
                Ok((relay, association)) => match protocol.reply_success(relay).await {
                    Ok(control) => association.run(control).await,
                    Err(error) => debug!(%error, "SOCKS5 reply failed"),
                },
                Err(refused) => {
                    let reply = match refused {
                        udp::NotOpened::Unsupported => ReplyError::CommandNotSupported,
                        udp::NotOpened::Full => ReplyError::GeneralFailure,
                    };
                    let _ = protocol.reply_error(&reply).await;
                }
            };
        }
        Socks5Command::TCPBind => {
            let _ = protocol.reply_error(&ReplyError::CommandNotSupported).await;
            return;
        }
    }
    // The name as the command gave it, for a TCP upstream's `CONNECT`; policies and reports
    // take it normalized.
    let (named, port) = match &target {
        TargetAddr::Ip(address) => (address.ip().to_string(), address.port()),
        TargetAddr::Domain(name, port) => (name.clone(), *port),
    };
    let host = gate::normalized(&named);
    let target =
        Target { protocol: ProxyProtocol::Socks5Tcp, host: &host, port, method: None, client };
    let addresses = match proxy.admit(target).await {
        Admission::Go(addresses) => addresses,
        Admission::Refused(..) => {
            let _ = protocol.reply_error(&ReplyError::ConnectionNotAllowed).await;
            return;
        }
    };
    let reached = match &proxy.config.routes.tcp {
        Some(route) => route.open(Destination::of(&named, port)).await.map_err(|error| {
            debug!(
                error = &error as &dyn std::error::Error,
                "SOCKS5 destination not carried by the TCP upstream"
            );
            ReplyError::ConnectionRefused
        }),
        None => gate::connect(&addresses).await.map_err(|error| {
            debug!(%error, "SOCKS5 destination unreachable");
            match error.kind() {
                std::io::ErrorKind::ConnectionRefused => ReplyError::ConnectionRefused,
                _ => ReplyError::HostUnreachable,
            }
        }),
    };
    let upstream = match reached {
        Ok(upstream) => upstream,
        Err(reply) => {
            let _ = protocol.reply_error(&reply).await;
            return;
        }
    };
    let bound = upstream.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    match protocol.reply_success(bound).await {
        Ok(stream) => splice(stream, upstream).await,
        Err(error) => debug!(%error, "SOCKS5 reply failed"),
    }
}
