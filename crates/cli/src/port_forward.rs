//! `tether port-forward`: a local port whose connections reach a port on the executor's
//! loopback, as `kubectl port-forward` and `ssh -L` do. The forwarding is the client
//! library's ([`tether_client::PortForward`]); this parses the spec, listens, says where,
//! and stops on Ctrl-C or SIGTERM.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::bail;
use clap::Args;
use tether_client::PortForward;

const PORT_FORWARD_HELP: &str = "\
Examples:
  tether port-forward --url ws://127.0.0.1:4500 8080:3000      127.0.0.1:8080 here, 3000 there
  tether port-forward --url ws://127.0.0.1:4500 3000           the same port on both sides
  tether port-forward --url build 0:3000                       any free port here (printed)
  tether port-forward --url ws://127.0.0.1:4500 0.0.0.0:8080:3000   here on every interface

It prints the line `Forwarding 127.0.0.1:8080 -> executor 127.0.0.1:3000` on stderr and runs
until Ctrl-C or SIGTERM. Only the executor's loopback is reached (127.0.0.1 there).

Exit codes: 0 stopped by Ctrl-C or SIGTERM; 1 the port here is taken, the executor could not be
reached or cannot forward ports, or the session was lost (one line on stderr says why).";

#[derive(Args)]
#[command(after_help = PORT_FORWARD_HELP)]
pub struct PortForwardArgs {
    #[command(flatten)]
    reach: crate::sessions::Reach,

    /// `[LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT`, or `REMOTE_PORT` for the same port here. The
    /// local address is 127.0.0.1 unless given (`[::1]:8080:3000` for IPv6); a local port of 0
    /// takes any free one.
    #[arg(value_name = "[LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT", value_parser = parse_spec)]
    spec: Spec,
}

/// Where to listen here, and which port to reach on the executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spec {
    local: SocketAddr,
    remote_port: u16,
}

fn parse_spec(text: &str) -> Result<Spec, String> {
    let port = |word: &str| {
        word.parse::<u16>().map_err(|_| format!("`{word}` is not a port (0 to 65535)"))
    };
    let (rest, remote) = match text.rsplit_once(':') {
        Some((rest, remote)) => (Some(rest), port(remote)?),
        None => (None, port(text)?),
    };
    if remote == 0 {
        return Err("the executor's port cannot be 0".into());
    }
    let local = match rest {
        None => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), remote),
        Some(rest) => match rest.rsplit_once(':') {
            None => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port(rest)?),
            Some((address, local_port)) => {
                let address = address.trim_start_matches('[').trim_end_matches(']');
                let ip = address.parse::<IpAddr>().map_err(|_| {
                    format!("`{address}` is not an IP address to listen on (e.g. 127.0.0.1)")
                })?;
                SocketAddr::new(ip, port(local_port)?)
            }
        },
    };
    Ok(Spec { local, remote_port: remote })
}

pub async fn port_forward(args: PortForwardArgs) -> anyhow::Result<()> {
    let Spec { local, remote_port } = args.spec;
    let listener = match tokio::net::TcpListener::bind(local).await {
        Ok(listener) => listener,
        Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => bail!(
            "{local} is already in use here: pick another local port (LOCAL_PORT:{remote_port}), or 0 for any free one"
        ),
        Err(error) => {
            return Err(anyhow::Error::new(error).context(format!("cannot listen on {local}")));
        }
    };
    let executor = args.reach.trust.over(crate::executors::resolve(&args.reach.url)?);
    let client =
        crate::report::connect(&executor, executor.client_options("tether-port-forward")?).await?;
    if !client.tether_extensions().port_forward {
        client.disconnect();
        bail!(
            "this exec-server cannot forward ports (the portForward extension): point --url at a Tether server"
        );
    }
    let forward = PortForward::new(client.clone(), listener, remote_port);
    let listening = forward.local_addr()?;
    eprintln!("Forwarding {listening} -> executor 127.0.0.1:{remote_port}");
    let ran = forward.run(stop_signal(), |note| eprintln!("tether port-forward: {note}")).await;
    client.disconnect();
    Ok(ran?)
}

/// Ctrl-C or SIGTERM.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).ok();
    let terminated = async {
        match terminate.as_mut() {
            Some(terminate) => {
                terminate.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminated => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_read_as_kubectl_and_ssh_write_them() {
        let spec = |text: &str| parse_spec(text).map(|s| (s.local.to_string(), s.remote_port));
        assert_eq!(spec("3000"), Ok(("127.0.0.1:3000".into(), 3000)));
        assert_eq!(spec("8080:3000"), Ok(("127.0.0.1:8080".into(), 3000)));
        assert_eq!(spec("0:3000"), Ok(("127.0.0.1:0".into(), 3000)));
        assert_eq!(spec("0.0.0.0:8080:3000"), Ok(("0.0.0.0:8080".into(), 3000)));
        assert_eq!(spec("[::1]:8080:3000"), Ok(("[::1]:8080".into(), 3000)));
        assert!(spec("8080:0").is_err());
        assert!(spec("http:3000").is_err());
        assert!(spec("host.example:8080:3000").is_err());
        assert!(spec("70000").is_err());
    }
}
