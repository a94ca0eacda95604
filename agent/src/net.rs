//! Sockets shared by every protocol driver: how a connection is opened (one place, so source
//! addresses and socket options apply to all of them) and how socket errors map to the
//! report's error kinds.

use std::io;
use std::net::SocketAddr;

use stampede_core::stats::error_kind;
use tokio::net::TcpStream;

/// Why a request failed, as a report error kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure(pub &'static str);

/// Maps a connect error to its kind.
pub fn connect_failure(e: &io::Error) -> Failure {
    Failure(match e.kind() {
        io::ErrorKind::ConnectionRefused => error_kind::CONNECT_REFUSED,
        io::ErrorKind::AddrNotAvailable => error_kind::ADDR_NOT_AVAILABLE,
        io::ErrorKind::TimedOut => error_kind::CONNECT_TIMEOUT,
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => error_kind::RESET,
        _ => error_kind::CONNECT,
    })
}

/// Maps an error on an open connection to its kind.
pub fn io_failure(e: &io::Error, writing: bool) -> Failure {
    Failure(match e.kind() {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => error_kind::RESET,
        io::ErrorKind::TimedOut => error_kind::TIMEOUT,
        io::ErrorKind::UnexpectedEof => error_kind::RESET,
        _ if writing => error_kind::WRITE,
        _ => error_kind::READ,
    })
}

/// Opens a TCP connection to `addr` with the options a load generator wants (no Nagle).
pub async fn connect_tcp(addr: SocketAddr) -> Result<TcpStream, Failure> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| connect_failure(&e))?;
    // Latency matters more than packet count for a load generator.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Opens a Unix stream connection to `path` (local targets only).
pub async fn connect_unix(path: &std::path::Path) -> Result<tokio::net::UnixStream, Failure> {
    tokio::net::UnixStream::connect(path).await.map_err(|e| {
        // A missing socket file is the Unix form of "nobody listens there".
        if e.kind() == io::ErrorKind::NotFound {
            Failure(error_kind::CONNECT_REFUSED)
        } else {
            connect_failure(&e)
        }
    })
}

/// Opens a UDP socket connected to `addr` (an ephemeral local port; only `addr` can answer).
pub async fn connect_udp(addr: SocketAddr) -> Result<tokio::net::UdpSocket, Failure> {
    let local: SocketAddr = if addr.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = tokio::net::UdpSocket::bind(local)
        .await
        .map_err(|e| connect_failure(&e))?;
    socket
        .connect(addr)
        .await
        .map_err(|e| connect_failure(&e))?;
    Ok(socket)
}
