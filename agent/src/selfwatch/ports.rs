//! Ephemeral ports toward each destination the agent dials: how many sockets of its network
//! namespace hold a local port toward that ip:port (open, and in TIME_WAIT), and how many of
//! its connects failed for want of one (`EADDRNOTAVAIL`). Each connection from one source
//! address to one destination needs a port of its own, so a generator that runs out of them
//! fails connects while the target has plenty to spare; these figures let the report say so.
//!
//! Destinations are recorded as they are dialed ([`DIALED`], from `net::start_connect`): a
//! bounded list, read under a shared lock on every connect. The sockets are counted once per
//! interval by the kernel's socket dump ([`diag`]), filtered there by destination port; where
//! it is not to be had, from `/proc/net/tcp` and `/proc/net/tcp6`, streamed line by line with
//! every line and field bounded: nothing the file says is trusted as a length.

mod diag;

use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use stampede_proto::v1;

/// Most destinations followed per run: a run's targets and endpoints, with room to spare.
/// Connects to others still work; their ports are not counted.
pub const MAX_DESTINATIONS: usize = 64;

/// Longest line read from `/proc/net/tcp{,6}` (theirs are under 160 bytes); a longer one is
/// skipped.
const MAX_LINE: usize = 512;

/// Most lines read from each file, or records from each dump, per sample: a million sockets
/// is past what one agent holds; beyond, the count stops there rather than spend the agent's
/// CPU on it.
const MAX_LINES: usize = 1 << 20;

/// TCP states, as `/proc/net/tcp` writes them.
const TIME_WAIT: u8 = 0x06;
const LISTEN: u8 = 0x0A;

/// One destination dialed, and its connects that found no free port.
#[derive(Debug)]
struct Dest {
    addr: SocketAddr,
    no_port: AtomicU64,
}

/// The destinations dialed: a bounded list, read under a shared lock on every connect.
#[derive(Debug, Default)]
pub struct Registry {
    dests: RwLock<Vec<Dest>>,
}

/// The process's registry, which `net::start_connect` records into.
pub static DIALED: Registry = Registry::new();

impl Registry {
    /// An empty registry; `const` so that [`DIALED`] can be a static.
    pub const fn new() -> Self {
        Self {
            dests: RwLock::new(Vec::new()),
        }
    }

    /// Records that a connection to `addr` is being opened (kept once per destination, up
    /// to [`MAX_DESTINATIONS`]).
    pub fn dialed(&self, addr: &SocketAddr) {
        if self.known(addr, |_| ()) {
            return;
        }
        let mut dests = self.dests.write().unwrap_or_else(|p| p.into_inner());
        if dests.len() < MAX_DESTINATIONS && !dests.iter().any(|d| d.addr == *addr) {
            dests.push(Dest {
                addr: *addr,
                no_port: AtomicU64::new(0),
            });
        }
    }

    /// Counts a connect to `addr` that failed for want of a local port (`EADDRNOTAVAIL`).
    pub fn no_port(&self, addr: &SocketAddr) {
        self.known(addr, |d| {
            d.no_port.fetch_add(1, Ordering::Relaxed);
        });
    }

    /// Applies `f` to `addr`'s entry under the shared lock; false when it has none.
    fn known(&self, addr: &SocketAddr, f: impl FnOnce(&Dest)) -> bool {
        let dests = self.dests.read().unwrap_or_else(|p| p.into_inner());
        match dests.iter().find(|d| d.addr == *addr) {
            Some(d) => {
                f(d);
                true
            }
            None => false,
        }
    }

    /// Each destination's sockets now, and its connects without a port since the last
    /// sample, counted by the kernel's socket dump ([`diag`]), or from `/proc/net/tcp` and
    /// `tcp6` where that dump cannot be had.
    pub fn sample(&self) -> Vec<v1::DestinationPorts> {
        self.sample_with(|addrs| {
            diag::count(addrs, MAX_LINES).unwrap_or_else(|e| {
                tracing::debug!(error = %e, "counting sockets from /proc/net/tcp");
                count_in_files(&["/proc/net/tcp", "/proc/net/tcp6"], addrs)
            })
        })
    }

    /// [`Self::sample`] with the sockets counted from `files` (`/proc/net/tcp` and `tcp6`).
    pub fn sample_from(&self, files: &[&str]) -> Vec<v1::DestinationPorts> {
        self.sample_with(|addrs| count_in_files(files, addrs))
    }

    /// The sample, with each destination's sockets counted by `count` (same order). A
    /// destination with neither sockets nor failed connects is left out and forgotten (a
    /// later connect records it again), so the list follows what the agent dials now, not
    /// what an earlier run did. Nothing is counted when nothing was dialed.
    fn sample_with(
        &self,
        count: impl FnOnce(&[SocketAddr]) -> Vec<SocketCounts>,
    ) -> Vec<v1::DestinationPorts> {
        let addrs: Vec<SocketAddr> = {
            let dests = self.dests.read().unwrap_or_else(|p| p.into_inner());
            dests.iter().map(|d| d.addr).collect()
        };
        if addrs.is_empty() {
            return Vec::new();
        }
        let counts = count(&addrs);
        let mut dests = self.dests.write().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        dests.retain(|d| {
            let c = addrs
                .iter()
                .position(|a| *a == d.addr)
                .and_then(|i| counts.get(i).copied())
                .unwrap_or_default();
            let no_port = d.no_port.swap(0, Ordering::Relaxed);
            let seen = c.in_use > 0 || c.time_wait > 0 || no_port > 0;
            if seen {
                out.push(v1::DestinationPorts {
                    address: d.addr.to_string(),
                    in_use: c.in_use,
                    time_wait: c.time_wait,
                    addr_not_available: no_port,
                });
            }
            seen
        });
        out
    }
}

/// The sockets toward each of `addrs` (same order) in the `/proc/net/tcp`-format files that
/// open.
fn count_in_files(files: &[&str], addrs: &[SocketAddr]) -> Vec<SocketCounts> {
    let mut counts = vec![SocketCounts::default(); addrs.len()];
    for path in files {
        if let Ok(f) = std::fs::File::open(path) {
            count_sockets(f, addrs, &mut counts);
        }
    }
    counts
}

/// Sockets toward one destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketCounts {
    /// Any state but TIME_WAIT (and LISTEN, which holds no port toward anyone).
    pub in_use: u64,
    /// In TIME_WAIT: closed by this side, still holding their local port for a while.
    pub time_wait: u64,
}

impl SocketCounts {
    /// Counts one socket in `state` (as `/proc/net/tcp` and `sock_diag` number them).
    fn add(&mut self, state: u8) {
        if state == TIME_WAIT {
            self.time_wait += 1;
        } else {
            self.in_use += 1;
        }
    }
}

/// Adds the sockets of one `/proc/net/tcp{,6}` file whose remote end is one of `addrs` to
/// `counts` (same order). Lines that do not parse are skipped.
pub fn count_sockets(file: impl Read, addrs: &[SocketAddr], counts: &mut [SocketCounts]) {
    let mut r = BufReader::with_capacity(64 * 1024, file);
    let mut line = Vec::with_capacity(MAX_LINE);
    for _ in 0..MAX_LINES {
        line.clear();
        // Reads at most MAX_LINE + 1 bytes of the line; the rest of a longer one is skipped.
        match r
            .by_ref()
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.len() > MAX_LINE {
            if skip_line(&mut r).is_err() {
                return;
            }
            continue;
        }
        let Some((remote, state)) = parse_line(&line) else {
            continue;
        };
        if state == LISTEN {
            continue;
        }
        if let Some(i) = addrs.iter().position(|a| *a == remote) {
            counts[i].add(state);
        }
    }
}

/// Consumes the rest of an over-long line.
fn skip_line(r: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|b| *b == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                r.consume(n);
            }
        }
    }
}

/// One socket line: `sl local rem st ...`; its remote address and state. `None` for the
/// header and anything malformed.
pub fn parse_line(line: &[u8]) -> Option<(SocketAddr, u8)> {
    let text = std::str::from_utf8(line).ok()?;
    let mut fields = text.split_ascii_whitespace();
    let sl = fields.next()?.strip_suffix(':')?;
    if sl.is_empty() || !sl.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let _local = fields.next()?;
    let remote = parse_addr(fields.next()?)?;
    let state = fields.next()?;
    if state.len() != 2 {
        return None;
    }
    Some((remote, u8::from_str_radix(state, 16).ok()?))
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6): the address in 32-bit words
/// as the kernel holds them (network byte order, printed as native integers), the port in
/// hex.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    if port.len() != 4 || !port.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let w = ip.get(i * 8..i * 8 + 8)?;
        if !w.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(u32::from_str_radix(w, 16).ok()?.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as the kernel writes them, in this machine's byte order.
    fn v4_line(remote: SocketAddr, state: u8) -> String {
        let SocketAddr::V4(a) = remote else {
            unreachable!()
        };
        let word = u32::from_ne_bytes(a.ip().octets());
        format!(
            "   7: 0100007F:C350 {word:08X}:{:04X} {state:02X} 00000000:00000000 00:00000000 00000000  1000        0 424242 1 0000000000000000 20 4 30 10 -1\n",
            a.port()
        )
    }

    #[test]
    fn socket_lines_parse_and_malformed_ones_are_skipped() {
        let dest: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(parse_line(v4_line(dest, 1).as_bytes()), Some((dest, 1)));
        let v6: SocketAddr = "[::1]:443".parse().unwrap();
        let line = "   0: 00000000000000000000000001000000:D431 00000000000000000000000001000000:01BB 06 00000000:00000000 03:00001234 00000000     0        0 0 3 0000000000000000\n";
        if cfg!(target_endian = "little") {
            assert_eq!(parse_line(line.as_bytes()), Some((v6, TIME_WAIT)));
        }
        for bad in [
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt",
            "",
            "   0: 0100007F:1F90",
            "   0: 0100007F:1F90 0100007F:1F9 01",
            "   0: 0100007F:1F90 0100007G:1F90 01",
            "   0: 0100007F:1F90 0100007F:+F90 01",
            "   0: 0100007F:1F90 0100007F1:1F90 01",
            "   0: 0100007F:1F90 0100007F:1F90 1",
            "   0: 0100007F:1F90 0100007F:1F90 ZZ",
            "   0 0100007F:1F90 0100007F:1F90 01",
            "\u{e9}\u{e9}: 0100007F:1F90 0100007F:1F90 01",
        ] {
            assert_eq!(parse_line(bad.as_bytes()), None, "{bad:?}");
        }
    }

    /// Open and TIME_WAIT sockets toward each destination are counted apart; listeners,
    /// other destinations, an over-long line and garbage are not counted.
    #[test]
    fn sockets_are_counted_per_destination_and_state() {
        let a: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let b: SocketAddr = "10.1.2.3:443".parse().unwrap();
        let other: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut file = String::from("  sl  local_address rem_address   st\n");
        for (d, st, n) in [
            (a, 1, 5),
            (a, TIME_WAIT, 3),
            (b, 1, 2),
            (a, LISTEN, 1),
            (other, 1, 4),
        ] {
            for _ in 0..n {
                file.push_str(&v4_line(d, st));
            }
        }
        file.push_str(&"x".repeat(10_000));
        file.push('\n');
        file.push_str("garbage\n");
        file.push_str(&v4_line(b, 8));
        let mut counts = [SocketCounts::default(); 2];
        count_sockets(file.as_bytes(), &[a, b], &mut counts);
        assert_eq!(
            counts,
            [
                SocketCounts {
                    in_use: 5,
                    time_wait: 3
                },
                SocketCounts {
                    in_use: 3,
                    time_wait: 0
                }
            ]
        );
    }

    /// Real sockets on loopback: 12 connections to a listener show as 12 in use toward it;
    /// the agent's side of the 5 it closes first waits in TIME_WAIT and shows there. A
    /// destination with no socket left is forgotten; connects without a port are counted
    /// once, then reset.
    #[test]
    fn real_sockets_are_counted_toward_their_destination() {
        // A port the connections of other tests went to may still have their TIME_WAIT
        // toward it (binding it again is allowed): the test takes one without any.
        let (listener, dest) = (0..50)
            .find_map(|_| {
                let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let dest = listener.local_addr().unwrap();
                let probe = Registry::new();
                probe.dialed(&dest);
                let waiting = probe.sample().first().map_or(0, |s| s.time_wait);
                (waiting == 0).then_some((listener, dest))
            })
            .expect("a loopback port without TIME_WAIT sockets toward it");
        let reg = Registry::new();
        reg.dialed(&dest);
        reg.dialed(&dest);
        let mut clients: Vec<_> = (0..12)
            .map(|_| std::net::TcpStream::connect(dest).unwrap())
            .collect();
        let servers: Vec<_> = (0..12).map(|_| listener.accept().unwrap().0).collect();
        reg.no_port(&dest);
        reg.no_port(&dest);
        let s = reg.sample();
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].address, dest.to_string());
        assert_eq!(
            (s[0].in_use, s[0].time_wait, s[0].addr_not_available),
            (12, 0, 2)
        );
        // The client closes first: its side goes to TIME_WAIT once the server closes too.
        for c in clients.drain(..5) {
            drop(c);
        }
        let mut servers = servers;
        for mut srv in servers.drain(..5) {
            use std::io::Read;
            let mut b = [0u8; 1];
            assert_eq!(srv.read(&mut b).unwrap(), 0, "the client's FIN");
        }
        let s = reg.sample();
        assert_eq!(
            (s[0].in_use, s[0].time_wait, s[0].addr_not_available),
            (7, 5, 0),
            "{s:?}"
        );
        // The file, where the kernel's dump cannot be had, counts the same sockets.
        let s = reg.sample_from(&["/proc/net/tcp", "/proc/net/tcp6"]);
        assert_eq!((s[0].in_use, s[0].time_wait), (7, 5), "{s:?}");
        // Nothing dialed elsewhere is counted, and a destination without sockets goes.
        let idle = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        reg.dialed(&idle.local_addr().unwrap());
        assert_eq!(reg.sample().len(), 1);
        assert_eq!(reg.dests.read().unwrap().len(), 1);
    }
}
