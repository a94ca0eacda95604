//! The sockets toward each destination, from the kernel's socket dump (`NETLINK_SOCK_DIAG`,
//! which `ss` reads). One dump per destination port and family, which the kernel filters
//! itself: a sample costs the sockets toward that port, where `/proc/net/tcp` formats, and the
//! agent parses, every socket of the namespace (a target on the same host can hold a hundred
//! thousand in TIME_WAIT, read once a second). Each record's header is read with the lengths
//! checked: nothing a message says is trusted as a length.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, Parseable, NLMSG_DONE,
    NLMSG_ERROR, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP, SOCK_DIAG_BY_FAMILY};
use netlink_packet_sock_diag::inet::{
    ExtensionFlags, InetRequest, InetResponseHeader, SocketId, StateFlags,
};
use netlink_packet_sock_diag::SockDiagMessage;
use nix::sys::socket::{self as sock, sockopt};
use nix::sys::time::TimeVal;

use super::SocketCounts;

/// Room for one datagram of a dump: the kernel sends at most 32 KiB at a time.
const RECV_BUF: usize = 64 * 1024;

/// Why a dump could not be read; the caller counts from `/proc/net/tcp` instead.
#[derive(Debug, thiserror::Error)]
pub(super) enum DiagError {
    /// The netlink socket could not be opened, written or read (no `sock_diag` here).
    #[error("sock_diag socket: {0}")]
    Socket(#[from] nix::errno::Errno),
    /// The kernel answered the request with an error.
    #[error("sock_diag refused the dump: errno {0}")]
    Refused(i32),
    /// A message was shorter than its header, or its length overran the datagram.
    #[error("malformed sock_diag reply: {0}")]
    Malformed(&'static str),
}

/// The sockets of this network namespace toward each of `addrs` (same order), in any state
/// but LISTEN, reading at most `max_sockets` records per dump (past that the count stops
/// there, as with the file).
pub(super) fn count(
    addrs: &[SocketAddr],
    max_sockets: usize,
) -> Result<Vec<SocketCounts>, DiagError> {
    let mut counts = vec![SocketCounts::default(); addrs.len()];
    let mut buf = vec![0u8; RECV_BUF];
    let mut dumped: Vec<(bool, u16)> = Vec::with_capacity(addrs.len());
    for a in addrs {
        let key = (a.is_ipv4(), a.port());
        if dumped.contains(&key) {
            continue;
        }
        dumped.push(key);
        dump(key, max_sockets, &mut buf, |remote, state| {
            if let Some(i) = addrs.iter().position(|x| *x == remote) {
                counts[i].add(state);
            }
        })?;
    }
    Ok(counts)
}

/// One dump of the TCP sockets of a family whose remote port is `port`, each record's remote
/// address and state given to `each`. A socket of its own per dump, so a dump cut short at
/// `max_sockets` leaves nothing behind for the next one.
fn dump(
    (v4, port): (bool, u16),
    max_sockets: usize,
    buf: &mut [u8],
    mut each: impl FnMut(SocketAddr, u8),
) -> Result<(), DiagError> {
    let fd = open()?;
    let request = request(v4, port);
    sock::sendto(
        fd.as_raw_fd(),
        &request,
        &sock::NetlinkAddr::new(0, 0),
        sock::MsgFlags::empty(),
    )?;
    let mut seen = 0usize;
    loop {
        let n = sock::recv(fd.as_raw_fd(), buf, sock::MsgFlags::empty())?;
        if n == 0 {
            return Err(DiagError::Malformed(
                "the dump ended without its last message",
            ));
        }
        let mut rest = &buf[..n.min(buf.len())];
        while !rest.is_empty() {
            let msg = NetlinkBuffer::new_checked(rest)
                .map_err(|_| DiagError::Malformed("a message's length"))?;
            match msg.message_type() {
                NLMSG_DONE => return Ok(()),
                NLMSG_ERROR => {
                    let code = msg
                        .payload()
                        .get(..4)
                        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                        .ok_or(DiagError::Malformed("an error without its code"))?;
                    return Err(DiagError::Refused(-code));
                }
                SOCK_DIAG_BY_FAMILY => {
                    let h = InetResponseHeader::parse(msg.payload())
                        .map_err(|_| DiagError::Malformed("a socket record"))?;
                    let id = &h.socket_id;
                    each(
                        SocketAddr::new(id.destination_address, id.destination_port),
                        h.state,
                    );
                    seen += 1;
                    if seen >= max_sockets {
                        return Ok(());
                    }
                }
                _ => {}
            }
            // Messages are 4-byte aligned; the last one may end the datagram unpadded.
            let step = (msg.length() as usize).next_multiple_of(4);
            rest = rest.get(step..).unwrap_or(&[]);
        }
    }
}

/// A netlink socket for `sock_diag`, whose reads give up after a second rather than hold
/// the agent's interval ticker.
fn open() -> Result<OwnedFd, DiagError> {
    let fd = sock::socket(
        sock::AddressFamily::Netlink,
        sock::SockType::Datagram,
        sock::SockFlag::SOCK_CLOEXEC,
        sock::SockProtocol::NetlinkSockDiag,
    )?;
    sock::setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(1, 0))?;
    Ok(fd)
}

/// The dump request: TCP sockets of one family in every state but LISTEN whose remote port
/// is `port` (the kernel compares a dump's nonzero ports itself).
fn request(v4: bool, port: u16) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = 1;
    let socket_id = SocketId {
        destination_port: port,
        ..if v4 {
            SocketId::new_v4()
        } else {
            SocketId::new_v6()
        }
    };
    let mut msg = NetlinkMessage::new(
        header,
        NetlinkPayload::from(SockDiagMessage::InetRequest(InetRequest {
            family: if v4 { AF_INET } else { AF_INET6 },
            protocol: IPPROTO_TCP,
            extensions: ExtensionFlags::empty(),
            states: StateFlags::all() - StateFlags::LISTEN,
            socket_id,
        })),
    );
    msg.finalize();
    let mut out = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply cut anywhere, or a length that overruns it, is an error and not a panic.
    #[test]
    fn a_message_whose_length_overruns_the_datagram_is_refused() {
        for bad in [
            &[0u8; 8][..],
            &[255, 255, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ] {
            assert!(NetlinkBuffer::new_checked(bad).is_err());
        }
        let mut short = [0u8; 24];
        short[..4].copy_from_slice(&24u32.to_ne_bytes());
        short[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        let msg = NetlinkBuffer::new_checked(&short[..]).unwrap();
        assert!(InetResponseHeader::parse(msg.payload()).is_err());
    }

    /// The kernel filters a dump by its remote port: sockets toward another port of the same
    /// host do not come back.
    #[test]
    fn a_dump_holds_only_the_sockets_toward_its_port() {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (da, db) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let _ca: Vec<_> = (0..3)
            .map(|_| std::net::TcpStream::connect(da).unwrap())
            .collect();
        let _cb: Vec<_> = (0..2)
            .map(|_| std::net::TcpStream::connect(db).unwrap())
            .collect();
        let mut remotes = Vec::new();
        let mut buf = vec![0u8; RECV_BUF];
        dump((true, da.port()), usize::MAX, &mut buf, |r, st| {
            remotes.push((r, st))
        })
        .unwrap();
        assert!(
            remotes.iter().all(|(r, _)| r.port() == da.port()),
            "{remotes:?}"
        );
        // Established (a TIME_WAIT left by another test's connection to that port may be there).
        assert_eq!(
            remotes
                .iter()
                .filter(|(r, st)| *r == da && *st == 1)
                .count(),
            3
        );
        // A dump cut short stops at its bound.
        let mut n = 0;
        dump((true, da.port()), 2, &mut buf, |_, _| n += 1).unwrap();
        assert_eq!(n, 2);
    }
}
