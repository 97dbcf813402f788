//! Which loopback peers are this server's own sandboxed commands.
//!
//! A sandbox with the network enabled shares the host's loopback, so a command in it can
//! connect to the server that confines it and, once in, start a command outside any sandbox —
//! with no token when the server needs none on loopback. The server asks [`is_sandboxed_peer`]
//! of every loopback connection while sandboxes run: the kernel's socket table names the
//! inode of the peer's socket, and if a process in one of this server's sandboxes (a
//! descendant of a bubblewrap it started, [`register`]) holds that socket, the connection is
//! closed before a byte of it is read.
//!
//! What this cannot see: a connection relayed by a process outside the sandbox (a proxy on
//! the host that the sandbox may reach). Authentication is the answer there.

use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};

use crate::proc_stat;

/// The pids of the bubblewrap processes running this server's sandboxes.
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Vec<i32>> {
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One running sandbox, known by its bubblewrap's pid until dropped.
#[derive(Debug)]
pub struct LiveSandbox(i32);

impl Drop for LiveSandbox {
    fn drop(&mut self) {
        let mut live = live();
        if let Some(at) = live.iter().position(|pid| *pid == self.0) {
            live.swap_remove(at);
        }
    }
}

/// Notes that the sandbox whose bubblewrap is `pid` runs, until the guard is dropped.
pub fn register(pid: u32) -> LiveSandbox {
    let pid = pid as i32;
    live().push(pid);
    LiveSandbox(pid)
}

/// Whether any sandbox of this server runs now: the cheap question asked first.
pub fn any_live() -> bool {
    !live().is_empty()
}

/// Whether the TCP connection `peer` made to `local` is held by a process in one of this
/// server's sandboxes. Reads `/proc`: call it off the async threads.
pub fn is_sandboxed_peer(local: SocketAddr, peer: SocketAddr) -> bool {
    let roots = live().clone();
    if roots.is_empty() || !peer.ip().is_loopback() && !is_mapped_loopback(peer) {
        return false;
    }
    let Some(inode) = socket_inode(local, peer) else { return false };
    let wanted = format!("socket:[{inode}]");
    sandboxed_processes(&roots).into_iter().any(|pid| holds(pid, &wanted))
}

fn is_mapped_loopback(peer: SocketAddr) -> bool {
    match peer {
        SocketAddr::V6(v6) => v6.ip().to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        SocketAddr::V4(_) => false,
    }
}

/// The inode of the peer's end of the connection, from the kernel's socket table: the row
/// whose local address is the peer's and whose remote address is ours.
fn socket_inode(local: SocketAddr, peer: SocketAddr) -> Option<u64> {
    let (table, ours, theirs) = match (local, peer) {
        (SocketAddr::V4(l), SocketAddr::V4(p)) => ("/proc/net/tcp", hex_v4(l), hex_v4(p)),
        (SocketAddr::V6(l), SocketAddr::V6(p)) => ("/proc/net/tcp6", hex_v6(l), hex_v6(p)),
        _ => return None,
    };
    let text = std::fs::read_to_string(table).ok()?;
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local_field, remote_field, inode) = (fields.get(1)?, fields.get(2)?, fields.get(9)?);
        (local_field.eq_ignore_ascii_case(&theirs) && remote_field.eq_ignore_ascii_case(&ours))
            .then(|| inode.parse().ok())
            .flatten()
    })
}

/// An address as the socket table writes it: the address as the machine stores the 32-bit
/// word, then the port.
fn hex_v4(addr: std::net::SocketAddrV4) -> String {
    format!("{:08X}:{:04X}", u32::from_ne_bytes(addr.ip().octets()), addr.port())
}

/// An IPv6 address as the socket table writes it: four 32-bit words, each as the machine
/// stores it.
fn hex_v6(addr: std::net::SocketAddrV6) -> String {
    let octets = addr.ip().octets();
    let words: String = octets
        .chunks(4)
        .map(|word| format!("{:08X}", u32::from_ne_bytes([word[0], word[1], word[2], word[3]])))
        .collect();
    format!("{words}:{:04X}", addr.port())
}

/// Every process below one of `roots` (bubblewrap and all it started), by walking each
/// process's parent up the tree.
fn sandboxed_processes(roots: &[i32]) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let parents: std::collections::HashMap<i32, i32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, proc_stat::read(pid)?.ppid)))
        .collect();
    parents
        .keys()
        .copied()
        .filter(|pid| {
            let mut at = *pid;
            // A chain longer than the table is a loop the reads raced into.
            for _ in 0..=parents.len() {
                if roots.contains(&at) {
                    return true;
                }
                match parents.get(&at) {
                    Some(&parent) if parent > 0 => at = parent,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}

/// Whether `pid` holds a descriptor that is `socket`.
fn holds(pid: i32, socket: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.filter_map(Result::ok)
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == socket))
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::*;

    #[test]
    fn the_peer_socket_of_a_loopback_connection_is_found_in_the_table() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_served, peer) = listener.accept().unwrap();
        let local = listener.local_addr().unwrap();
        let inode = socket_inode(local, peer).expect("the peer's socket is in the table");
        let ours = format!("socket:[{inode}]");
        use std::os::fd::AsRawFd;
        let held = std::fs::read_link(format!("/proc/self/fd/{}", client.as_raw_fd())).unwrap();
        assert_eq!(held.to_string_lossy(), ours);
        assert!(holds(std::process::id() as i32, &ours));
    }

    #[test]
    fn only_processes_below_a_live_sandbox_count() {
        // This test's own process stands in for a sandbox's bubblewrap: it, and nothing
        // outside it, is below it.
        let me = std::process::id() as i32;
        let below = sandboxed_processes(&[me]);
        assert!(below.contains(&me));
        assert!(!below.contains(&1));
        let parent = proc_stat::read(me).unwrap().ppid;
        assert!(!below.contains(&parent));
    }
}
