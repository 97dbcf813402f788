//! The TUN device a transparent-TCP sandbox routes through, made by the inner stage in the
//! sandbox's own network namespace, and the capabilities that takes, given up before anything
//! else runs there.
//!
//! bubblewrap keeps three capabilities for this stage alone ([`CAPABILITIES`]): `NET_ADMIN`
//! to make the device and its route, `NET_BIND_SERVICE` for the name server's port 53, and
//! `SETPCAP` to drop the other two from the bounding set (so that no later `execve`, even as
//! the namespace's root, gets them back). [`drop_capabilities`] then clears every set and
//! checks that nothing is left; a stage that cannot prove it exits without running the command.

use std::ffi::CStr;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The device's name inside the sandbox.
pub const NAME: &CStr = c"tethertun";

/// The kernel's side of the device: the source of every connection the command makes, as in
/// the reference (`192.0.2.1/32`, a documentation range no real destination uses).
pub const KERNEL_ADDRESS: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

/// The kernel's side's IPv6 address, as the reference's (`2001:db8::1/128`, documentation
/// addresses again).
pub const KERNEL_ADDRESS6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

/// The packets the device carries at most, the kernel's default for a TUN device.
pub const MTU: usize = 1500;

/// What bubblewrap must keep for this stage (`--cap-add`), and this stage gives up.
pub const CAPABILITIES: [&str; 3] = ["CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE", "CAP_SETPCAP"];

const CAP_SETPCAP: i32 = 8;
const CAP_NET_BIND_SERVICE: i32 = 10;
const CAP_NET_ADMIN: i32 = 12;

fn check(result: libc::c_int) -> std::io::Result<libc::c_int> {
    if result < 0 { Err(std::io::Error::last_os_error()) } else { Ok(result) }
}

/// `struct ifreq` with the device's name and nothing else set.
fn request() -> libc::ifreq {
    // SAFETY: `ifreq` is plain data; all zeroes is a valid value.
    let mut ifreq: libc::ifreq = unsafe { std::mem::zeroed() };
    for (at, byte) in NAME.to_bytes().iter().enumerate() {
        ifreq.ifr_name[at] = *byte as libc::c_char;
    }
    ifreq
}

fn socket_address(address: Ipv4Addr) -> libc::sockaddr {
    let inet = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from(address).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: `sockaddr_in` and `sockaddr` have the same size; the kernel reads it by family.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(inet) }
}

/// The kernel's `struct rtentry` (`<net/route.h>`), which the `libc` crate does not carry for
/// glibc targets: one route, for `SIOCADDRT`.
#[repr(C)]
struct RouteEntry {
    pad1: libc::c_ulong,
    destination: libc::sockaddr,
    gateway: libc::sockaddr,
    mask: libc::sockaddr,
    flags: libc::c_ushort,
    pad2: libc::c_short,
    pad3: libc::c_ulong,
    pad4: *mut libc::c_void,
    metric: libc::c_short,
    device: *mut libc::c_char,
    mtu: libc::c_ulong,
    window: libc::c_ulong,
    initial_rtt: libc::c_ushort,
}

/// The kernel's `struct in6_rtmsg` (`<linux/ipv6_route.h>`), whose members the `libc` crate
/// keeps private: one IPv6 route, for `SIOCADDRT` on an IPv6 socket.
#[repr(C)]
struct Route6Entry {
    destination: libc::in6_addr,
    source: libc::in6_addr,
    gateway: libc::in6_addr,
    kind: u32,
    destination_length: u16,
    source_length: u16,
    metric: u32,
    info: libc::c_ulong,
    flags: u32,
    interface: libc::c_int,
}

/// Makes the device (non-blocking, raw IP packets without a header), gives the kernel's side
/// its addresses, brings it up, and routes every destination that is not the sandbox's own
/// loopback through it: IPv4, and IPv6 where the kernel has it ([`route_ipv6`]). Needs
/// `CAP_NET_ADMIN` in the namespace.
pub fn make() -> std::io::Result<OwnedFd> {
    // SAFETY: plain system calls on descriptors made here, with structures set up above; each
    // result is checked.
    unsafe {
        let flags = libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK;
        let device = OwnedFd::from_raw_fd(check(libc::open(c"/dev/net/tun".as_ptr(), flags))?);
        let mut ifreq = request();
        ifreq.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
        check(libc::ioctl(device.as_raw_fd(), libc::TUNSETIFF, &mut ifreq))?;

        let control = OwnedFd::from_raw_fd(check(libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        ))?);
        let control = control.as_raw_fd();
        let mut ifreq = request();
        ifreq.ifr_ifru.ifru_addr = socket_address(KERNEL_ADDRESS);
        check(libc::ioctl(control, libc::SIOCSIFADDR, &mut ifreq))?;
        let mut ifreq = request();
        ifreq.ifr_ifru.ifru_netmask = socket_address(Ipv4Addr::BROADCAST);
        check(libc::ioctl(control, libc::SIOCSIFNETMASK, &mut ifreq))?;
        let mut ifreq = request();
        check(libc::ioctl(control, libc::SIOCGIFFLAGS, &mut ifreq))?;
        ifreq.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        check(libc::ioctl(control, libc::SIOCSIFFLAGS, &mut ifreq))?;

        let mut name = NAME.to_bytes_with_nul().to_vec();
        let mut route = RouteEntry {
            pad1: 0,
            destination: socket_address(Ipv4Addr::UNSPECIFIED),
            gateway: socket_address(Ipv4Addr::UNSPECIFIED),
            mask: socket_address(Ipv4Addr::UNSPECIFIED),
            flags: libc::RTF_UP,
            pad2: 0,
            pad3: 0,
            pad4: std::ptr::null_mut(),
            metric: 0,
            device: name.as_mut_ptr().cast(),
            mtu: 0,
            window: 0,
            initial_rtt: 0,
        };
        check(libc::ioctl(control, libc::SIOCADDRT, &mut route))?;
        let mut ifreq = request();
        check(libc::ioctl(control, libc::SIOCGIFINDEX, &mut ifreq))?;
        let _ = route_ipv6(ifreq.ifr_ifru.ifru_ifindex);
        Ok(device)
    }
}

/// Gives the device (its index `index`) the kernel's IPv6 address and the default IPv6
/// route, as the reference's has them. A kernel without IPv6, or with it turned off, refuses:
/// the sandbox then has no IPv6 but its loopback, and an IPv6 destination is unreachable —
/// still no way out but the proxy.
fn route_ipv6(index: libc::c_int) -> std::io::Result<()> {
    // SAFETY: plain system calls on a descriptor made here, with structures set up here;
    // each result is checked.
    unsafe {
        let control = OwnedFd::from_raw_fd(check(libc::socket(
            libc::AF_INET6,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        ))?);
        let mut address = libc::in6_ifreq {
            ifr6_addr: libc::in6_addr { s6_addr: KERNEL_ADDRESS6.octets() },
            ifr6_prefixlen: 128,
            ifr6_ifindex: index,
        };
        check(libc::ioctl(control.as_raw_fd(), libc::SIOCSIFADDR, &mut address))?;
        let unspecified = libc::in6_addr { s6_addr: [0; 16] };
        let mut route = Route6Entry {
            destination: unspecified,
            source: unspecified,
            gateway: unspecified,
            kind: 0,
            destination_length: 0,
            source_length: 0,
            metric: 1,
            info: 0,
            flags: libc::RTF_UP as u32,
            interface: index,
        };
        check(libc::ioctl(control.as_raw_fd(), libc::SIOCADDRT, &mut route))?;
    }
    Ok(())
}

/// Gives up every capability, in every set, for good; `Err` says which is still held, and the
/// stage must then run nothing.
pub fn drop_capabilities() -> Result<(), String> {
    // SAFETY: plain system calls with constant arguments and structures made here.
    unsafe {
        // The bounding set first (`SETPCAP` last: it is what lets the others go), so no
        // `execve` gives any back; then the ambient set, which bubblewrap filled so this
        // stage would have them; then what this process holds now.
        for capability in [CAP_NET_ADMIN, CAP_NET_BIND_SERVICE, CAP_SETPCAP] {
            libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0);
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        let mut header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
        let none = [CapData::default(); 2];
        libc::syscall(libc::SYS_capset, &mut header, none.as_ptr());
    }
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|error| format!("cannot read this stage's capabilities: {error}"))?;
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let held = status
            .lines()
            .find_map(|line| line.strip_prefix(set)?.strip_prefix(':'))
            .map(str::trim)
            .ok_or_else(|| format!("this stage's {set} is not shown"))?;
        if u64::from_str_radix(held, 16) != Ok(0) {
            return Err(format!("capabilities are still held after dropping them ({set} {held})"));
        }
    }
    Ok(())
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}
