//! The sandbox's name server under transparent TCP: every name gets an address of its own from
//! a private range ([`FakeNames`]), so that a connection to that address can be sent to the
//! proxy with the *name* it was made for, and decided on the name, as a proxied request is.
//!
//! It answers on `127.0.0.53:53`, which the sandbox's `/etc/resolv.conf` names
//! ([`RESOLV_CONF`]), as the reference's does. A name's `A` answer is from `198.18.0.0/16` (the
//! range set aside for benchmarking networks), its `AAAA` answer from `fdc0:de00::/32` (unique
//! local addresses), both numbered alike, as the reference numbers them: the first name is
//! `198.18.0.1` and `fdc0:de00::1`. No real destination uses either range. Any other type is
//! answered with no records. `localhost` is the sandbox's own loopback.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::sync::{Arc, Mutex};

/// What the sandbox's `/etc/resolv.conf` holds.
pub const RESOLV_CONF: &str = "nameserver 127.0.0.53\n";

/// Where the name server listens, inside the sandbox's network namespace.
pub const LISTEN: (Ipv4Addr, u16) = (Ipv4Addr::new(127, 0, 0, 53), 53);

/// The first two octets of every IPv4 address handed out (`198.18.0.0/16`).
const FAKE_PREFIX: [u8; 2] = [198, 18];

/// The first 32 bits of every IPv6 address handed out (`fdc0:de00::/32`); the name's number
/// is the last 16, the rest zero.
const FAKE_PREFIX6: [u16; 2] = [0xfdc0, 0xde00];

/// Names one sandbox may resolve: each holds at most a 253-byte name twice (both directions),
/// so the table stays under 9 MiB however hostile the command; a build resolves tens. Past it,
/// a new name is refused (`SERVFAIL`) and the names already given keep working.
pub const MAX_NAMES: usize = 16_384;

/// A DNS message over UDP is at most 512 bytes without EDNS; EDNS allows more, and a query
/// has no reason to be larger than this.
const MAX_QUERY_BYTES: usize = 4_096;

/// Longest name in text form (DNS's limit).
const MAX_NAME_BYTES: usize = 253;

/// The time-to-live of an answer: the address never changes for the sandbox's life, but a
/// resolver that caches it long gains nothing.
const TTL_SECONDS: u32 = 1;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;
const RCODE_SERVFAIL: u16 = 2;

/// Whether `address` is in a range names are given addresses from.
pub fn is_made_up(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(address) => address.octets()[..2] == FAKE_PREFIX,
        IpAddr::V6(address) => address.segments()[..2] == FAKE_PREFIX6,
    }
}

/// The number a made-up address stands for.
fn number_of(address: IpAddr) -> Option<u16> {
    match address {
        IpAddr::V4(v4) if is_made_up(address) => {
            let [.., high, low] = v4.octets();
            Some(u16::from_be_bytes([high, low]))
        }
        IpAddr::V6(v6) if is_made_up(address) && v6.segments()[2..7] == [0; 5] => {
            Some(v6.segments()[7])
        }
        _ => None,
    }
}

/// The names handed out, by number (from 1). Shared between the name server and the TCP
/// relay.
#[derive(Debug, Default)]
pub struct FakeNames {
    numbers: HashMap<String, u16>,
    /// Name `n` at `n - 1`.
    names: Vec<String>,
}

impl FakeNames {
    /// The number of `name` (lower case), given now if it has none; `None` once the table is
    /// full.
    fn number_for(&mut self, name: &str) -> Option<u16> {
        if let Some(number) = self.numbers.get(name) {
            return Some(*number);
        }
        if self.names.len() >= MAX_NAMES {
            return None;
        }
        let number = u16::try_from(self.names.len() + 1).ok()?;
        self.numbers.insert(name.to_owned(), number);
        self.names.push(name.to_owned());
        Some(number)
    }

    /// The IPv4 address of `name`: from 198.18.0.1 on, as the reference's.
    pub fn address_for(&mut self, name: &str) -> Option<Ipv4Addr> {
        let [high, low] = self.number_for(name)?.to_be_bytes();
        Some(Ipv4Addr::new(FAKE_PREFIX[0], FAKE_PREFIX[1], high, low))
    }

    /// The IPv6 address of `name`, numbered as its IPv4 one (`fdc0:de00::1` first).
    pub fn address6_for(&mut self, name: &str) -> Option<Ipv6Addr> {
        let number = self.number_for(name)?;
        let [first, second] = FAKE_PREFIX6;
        Some(Ipv6Addr::new(first, second, 0, 0, 0, 0, 0, number))
    }

    /// The name an address of either family was handed out for.
    pub fn name_of(&self, address: IpAddr) -> Option<&str> {
        let number = usize::from(number_of(address)?);
        self.names.get(number.checked_sub(1)?).map(String::as_str)
    }
}

/// A question: its name (lower case, dots between labels) and type, and where it ends.
#[derive(Debug, PartialEq, Eq)]
struct Question {
    name: String,
    kind: u16,
    end: usize,
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

/// The one question of a standard query, or `None` for anything else (which goes unanswered,
/// as a malformed packet is).
fn question(packet: &[u8]) -> Option<Question> {
    if !(12..=MAX_QUERY_BYTES).contains(&packet.len()) {
        return None;
    }
    let flags = u16_at(packet, 2)?;
    // A query (QR 0), opcode QUERY (0), with exactly one question.
    if flags & 0xf800 != 0 || u16_at(packet, 4)? != 1 {
        return None;
    }
    let mut labels: Vec<String> = Vec::new();
    let mut at = 12;
    let mut length = 0;
    loop {
        let size = usize::from(*packet.get(at)?);
        at += 1;
        if size == 0 {
            break;
        }
        // A compression pointer has no place in a question; a label is at most 63 bytes.
        if size > 63 {
            return None;
        }
        let label = packet.get(at..at + size)?;
        if !label.iter().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_')) {
            return None;
        }
        length += size + usize::from(!labels.is_empty());
        if length > MAX_NAME_BYTES {
            return None;
        }
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        at += size;
    }
    let kind = u16_at(packet, at)?;
    if u16_at(packet, at + 2)? != CLASS_IN {
        return None;
    }
    Some(Question { name: labels.join("."), kind, end: at + 4 })
}

/// The answer to `packet`, or `None` when it is not a query this server answers.
pub fn answer(packet: &[u8], names: &Mutex<FakeNames>) -> Option<Vec<u8>> {
    let question = question(packet)?;
    let given = |name: &str| {
        let mut names = names.lock().unwrap_or_else(|poison| poison.into_inner());
        match question.kind {
            TYPE_A => names.address_for(name).map(IpAddr::V4),
            _ => names.address6_for(name).map(IpAddr::V6),
        }
    };
    let (address, rcode) = match (question.kind, question.name.as_str()) {
        (_, "") => (None, 0),
        (TYPE_A, "localhost") => (Some(IpAddr::V4(Ipv4Addr::LOCALHOST)), 0),
        (TYPE_AAAA, "localhost") => (Some(IpAddr::V6(Ipv6Addr::LOCALHOST)), 0),
        (TYPE_A | TYPE_AAAA, name) => match given(name) {
            Some(address) => (Some(address), 0),
            None => (None, RCODE_SERVFAIL),
        },
        _ => (None, 0),
    };
    let recursion_desired = u16_at(packet, 2)? & 0x0100;
    // QR, recursion desired as asked, recursion available, and the code.
    let flags = 0x8080 | recursion_desired | rcode;
    let mut reply = Vec::with_capacity(question.end + 16);
    reply.extend_from_slice(&packet[..2]);
    reply.extend_from_slice(&flags.to_be_bytes());
    reply.extend_from_slice(&1u16.to_be_bytes());
    reply.extend_from_slice(&u16::from(address.is_some()).to_be_bytes());
    reply.extend_from_slice(&[0, 0, 0, 0]);
    reply.extend_from_slice(&packet[12..question.end]);
    if let Some(address) = address {
        // The name by pointer to the question (offset 12), the type asked, class IN, TTL,
        // the address's length and the address.
        let octets = match address {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        reply.extend_from_slice(&[0xc0, 0x0c]);
        reply.extend_from_slice(&question.kind.to_be_bytes());
        reply.extend_from_slice(&CLASS_IN.to_be_bytes());
        reply.extend_from_slice(&TTL_SECONDS.to_be_bytes());
        reply.extend_from_slice(&(octets.len() as u16).to_be_bytes());
        reply.extend_from_slice(&octets);
    }
    Some(reply)
}

/// Serves `socket` (bound at [`LISTEN`]) until it fails; for a thread of the inner stage.
pub fn serve(socket: UdpSocket, names: Arc<Mutex<FakeNames>>) {
    let mut packet = vec![0u8; MAX_QUERY_BYTES + 1];
    loop {
        let Ok((size, peer)) = socket.recv_from(&mut packet) else { return };
        if let Some(reply) = answer(&packet[..size], &names) {
            let _ = socket.send_to(&reply, peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `name` of type `kind`, id 0x1234, recursion desired.
    fn query(name: &str, kind: u16) -> Vec<u8> {
        let mut packet = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.').filter(|l| !l.is_empty()) {
            packet.push(label.len() as u8);
            packet.extend_from_slice(label.as_bytes());
        }
        packet.push(0);
        packet.extend_from_slice(&kind.to_be_bytes());
        packet.extend_from_slice(&CLASS_IN.to_be_bytes());
        packet
    }

    fn address_in(reply: &[u8]) -> Option<Ipv4Addr> {
        let octets: [u8; 4] = reply[reply.len() - 4..].try_into().unwrap();
        (u16_at(reply, 6) == Some(1)).then_some(Ipv4Addr::from(octets))
    }

    #[test]
    fn each_name_gets_an_address_of_its_own_and_keeps_it() {
        let names = Mutex::new(FakeNames::default());
        let first = answer(&query("Example.COM", TYPE_A), &names).unwrap();
        assert_eq!(&first[..2], &[0x12, 0x34]);
        assert_eq!(u16_at(&first, 2), Some(0x8180));
        assert_eq!(address_in(&first), Some(Ipv4Addr::new(198, 18, 0, 1)));
        let second = answer(&query("api.github.com", TYPE_A), &names).unwrap();
        assert_eq!(address_in(&second), Some(Ipv4Addr::new(198, 18, 0, 2)));
        let again = answer(&query("example.com", TYPE_A), &names).unwrap();
        assert_eq!(address_in(&again), Some(Ipv4Addr::new(198, 18, 0, 1)));
        let six = answer(&query("api.github.com", TYPE_AAAA), &names).unwrap();
        let octets: [u8; 16] = six[six.len() - 16..].try_into().unwrap();
        assert_eq!(u16_at(&six, 6), Some(1));
        assert_eq!(Ipv6Addr::from(octets), "fdc0:de00::2".parse::<Ipv6Addr>().unwrap());
        let names = names.lock().unwrap();
        let by = |text: &str| names.name_of(text.parse().unwrap());
        assert_eq!(by("198.18.0.2"), Some("api.github.com"));
        assert_eq!(by("fdc0:de00::2"), Some("api.github.com"));
        assert_eq!(by("fdc0:de00::1"), Some("example.com"));
        for never in ["198.18.0.3", "198.18.0.0", "fdc0:de00::3", "fdc0:de00:1::1", "10.0.0.1"] {
            assert_eq!(by(never), None, "{never}");
        }
    }

    #[test]
    fn other_types_and_localhost_give_no_made_up_address() {
        let names = Mutex::new(FakeNames::default());
        let mx = answer(&query("example.com", 15), &names).unwrap();
        assert_eq!(u16_at(&mx, 6), Some(0), "no answer records");
        assert_eq!(u16_at(&mx, 2).unwrap() & 0x000f, 0, "NOERROR");
        let local = answer(&query("localhost", TYPE_A), &names).unwrap();
        assert_eq!(address_in(&local), Some(Ipv4Addr::LOCALHOST));
        let local6 = answer(&query("localhost", TYPE_AAAA), &names).unwrap();
        assert_eq!(local6[local6.len() - 16..], Ipv6Addr::LOCALHOST.octets());
        assert!(names.lock().unwrap().names.is_empty());
    }

    #[test]
    fn malformed_packets_go_unanswered() {
        let names = Mutex::new(FakeNames::default());
        let mut response = query("example.com", TYPE_A);
        response[2] |= 0x80;
        let mut two_questions = query("example.com", TYPE_A);
        two_questions[5] = 2;
        let mut pointer = query("example.com", TYPE_A);
        pointer[12] = 0xc0;
        let odd_byte = query("exa mple.com", TYPE_A);
        let long_name = vec!["a".repeat(63); 5].join(".");
        for bad in [
            &b"short"[..],
            &response,
            &two_questions,
            &pointer,
            &odd_byte,
            &query(&long_name, TYPE_A),
            &query("example.com", TYPE_A)[..20],
        ] {
            assert_eq!(answer(bad, &names), None, "{bad:?}");
        }
    }

    #[test]
    fn a_full_table_refuses_new_names_and_keeps_the_old() {
        let names = Mutex::new(FakeNames::default());
        for n in 0..MAX_NAMES {
            assert!(names.lock().unwrap().address_for(&format!("n{n}.example")).is_some());
        }
        let refused = answer(&query("one-more.example", TYPE_A), &names).unwrap();
        assert_eq!(u16_at(&refused, 2).unwrap() & 0x000f, RCODE_SERVFAIL);
        assert_eq!(address_in(&refused), None);
        let old = answer(&query("n0.example", TYPE_A), &names).unwrap();
        assert_eq!(address_in(&old), Some(Ipv4Addr::new(198, 18, 0, 1)));
    }
}
