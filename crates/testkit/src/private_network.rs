//! A network of a test's own, with private and public addresses the host need not have: a
//! scenario runs on a thread moved into new network and mount namespaces, whose loopback
//! interface holds the addresses below beside `127.0.0.1` and `::1`, and whose `/etc/hosts`
//! names [`PUBLIC_NAME`]. Whatever the scenario starts there — servers, their commands, peers
//! listening on those addresses, its client's connections — is in those namespaces, which
//! have no way out and go away with the thread: nothing of the host's network or files is
//! touched, and nothing is left to remove but the hosts file the mount showed.
//!
//! Namespaces are per thread, so the scenario runs on a runtime of its own on that thread
//! (blocking work it starts runs on threads that thread makes, in the same namespaces). Needs
//! `CAP_SYS_ADMIN` (root, as the sandbox tests), `ip` (iproute2) and `mount`.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{Context, bail};

/// An RFC 1918 address.
pub const PRIVATE_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// A carrier-grade NAT address (`100.64.0.0/10`), private too.
pub const SHARED_V4: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 1);
/// An IPv6 unique-local address (`fc00::/7`), private too.
pub const UNIQUE_LOCAL_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x77);
/// A public address (the retired 6to4 relay block, routed nowhere today), standing for a
/// host on the internet; in the namespace it is the namespace's own.
pub const PUBLIC_V4: Ipv4Addr = Ipv4Addr::new(192, 88, 99, 1);

/// A name `/etc/hosts` gives [`PUBLIC_V4`] in the namespace: a public host known by name.
pub const PUBLIC_NAME: &str = "public.test";

/// Every address the namespace's loopback interface holds besides `127.0.0.1` and `::1`.
pub const ADDRESSES: [IpAddr; 4] = [
    IpAddr::V4(PRIVATE_V4),
    IpAddr::V4(SHARED_V4),
    IpAddr::V6(UNIQUE_LOCAL_V6),
    IpAddr::V4(PUBLIC_V4),
];

/// Runs `scenario` in a network namespace of its own (see the module). `Err` if the namespace
/// could not be made (not root, no `ip`); a panic in the scenario is the caller's panic.
pub async fn run<F, Fut>(scenario: F) -> anyhow::Result<Fut::Output>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future,
    Fut::Output: Send + 'static,
{
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let hosts = std::env::temp_dir().join(format!(
        "tether-private-network-{}-{}.hosts",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let names = format!("127.0.0.1 localhost\n::1 localhost\n{PUBLIC_V4} {PUBLIC_NAME}\n");
    std::fs::write(&hosts, names).context("cannot write the private network's hosts file")?;
    let shown = hosts.clone();
    let thread = std::thread::Builder::new()
        .name("private-network".into())
        .spawn(move || -> anyhow::Result<Fut::Output> {
            enter(&shown)?;
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            Ok(runtime.block_on(scenario()))
        })
        .context("cannot start the private network's thread")?;
    let joined = tokio::task::spawn_blocking(move || thread.join()).await;
    let _ = std::fs::remove_file(&hosts);
    match joined? {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Moves the calling thread into new network and mount namespaces, readies the loopback and
/// shows `hosts` as `/etc/hosts`.
fn enter(hosts: &std::path::Path) -> anyhow::Result<()> {
    use rustix::thread::UnshareFlags;
    // SAFETY: the network and mount namespaces are unshared (with the filesystem attributes a
    // mount namespace takes along), never the descriptor table (`UnshareFlags::FILES`), so
    // every descriptor of the process stays usable on every thread.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET | UnshareFlags::NEWNS) }
        .context("cannot make network and mount namespaces (CAP_SYS_ADMIN is needed)")?;
    // A command run from this thread is in its namespaces. Mounts made here stay here.
    run_tool("mount", &["--make-rprivate", "/"])?;
    run_tool("mount", &["--bind", &hosts.display().to_string(), "/etc/hosts"])?;
    ip(&["link", "set", "lo", "up"])?;
    for address in ADDRESSES {
        match address {
            IpAddr::V4(v4) => ip(&["addr", "add", &format!("{v4}/32"), "dev", "lo"])?,
            IpAddr::V6(v6) => {
                ip(&["-6", "addr", "add", &format!("{v6}/128"), "dev", "lo", "nodad"])?
            }
        }
    }
    Ok(())
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    run_tool("ip", args)
}

fn run_tool(tool: &str, args: &[&str]) -> anyhow::Result<()> {
    let status = std::process::Command::new(tool)
        .args(args)
        .status()
        .with_context(|| format!("cannot run `{tool}`"))?;
    if !status.success() {
        bail!("`{tool} {}` failed: {status}", args.join(" "));
    }
    Ok(())
}
