//! Sockets shared by every protocol driver: how a connection is opened (one place, so source
//! addresses and socket options apply to all of them) and how socket errors map to the
//! report's error kinds.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::RwLock;

use stampede_core::stats::error_kind;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// The process-wide source addresses connections bind from (`stampede agent --source-ips`),
/// used round-robin. Empty: the kernel picks the source address.
static SOURCES: RwLock<Vec<IpAddr>> = RwLock::new(Vec::new());
static NEXT_SOURCE: AtomicUsize = AtomicUsize::new(0);

/// Sets the source addresses every connection of this process binds from, round-robin
/// (each multiplies the agent's port budget: `docs/design.md`). Each address is checked by
/// binding to it once, so a typo fails at start and not as errors mid-run.
pub fn set_source_addresses(ips: &[IpAddr]) -> io::Result<()> {
    for ip in ips {
        std::net::UdpSocket::bind(SocketAddr::new(*ip, 0)).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("source address {ip} is not usable on this host: {e}"),
            )
        })?;
    }
    *SOURCES.write().unwrap_or_else(|p| p.into_inner()) = ips.to_vec();
    Ok(())
}

/// The source addresses set by [`set_source_addresses`].
pub fn source_addresses() -> Vec<IpAddr> {
    SOURCES.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The next source address of `dest`'s family, round-robin.
fn next_source(dest: &SocketAddr) -> Option<IpAddr> {
    let sources = SOURCES.read().unwrap_or_else(|p| p.into_inner());
    let fitting = sources
        .iter()
        .filter(|ip| ip.is_ipv4() == dest.is_ipv4())
        .count();
    if fitting == 0 {
        return None;
    }
    let k = NEXT_SOURCE.fetch_add(1, Ordering::Relaxed) % fitting;
    sources
        .iter()
        .filter(|ip| ip.is_ipv4() == dest.is_ipv4())
        .nth(k)
        .copied()
}

/// Starts a non-blocking connect to `addr` and registers the socket with the runtime: no
/// Nagle, and bound to the next source address when the agent has any (with
/// IP_BIND_ADDRESS_NO_PORT before the bind, so the bind reserves no port and the kernel picks
/// it at connect time per 4-tuple: each source address gets the whole ephemeral range for
/// each destination).
///
/// Built here rather than with tokio's `TcpSocket::connect`, which reads SO_ERROR after every
/// connect: [`connect_tcp`] reads it only when the socket reports an error (EPOLLERR), one
/// system call less on every successful connection.
fn start_connect(addr: &SocketAddr) -> io::Result<TcpStream> {
    use nix::sys::socket::{self as sock, sockopt, AddressFamily, SockFlag, SockType};
    let family = if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd = sock::socket(
        family,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // Latency matters more than packet count for a load generator.
    let _ = sock::setsockopt(&fd, sockopt::TcpNoDelay, &true);
    if let Some(source) = next_source(addr) {
        // Best effort: without it (old kernels) bind picks the port, with a smaller budget.
        let _ = sock::setsockopt(&fd, sockopt::IpBindAddressNoPort, &true);
        let local = sock::SockaddrStorage::from(SocketAddr::new(source, 0));
        sock::bind(fd.as_raw_fd(), &local)?;
    }
    let dialed = &crate::selfwatch::ports::DIALED;
    dialed.dialed(addr);
    match sock::connect(fd.as_raw_fd(), &sock::SockaddrStorage::from(*addr)) {
        Ok(()) | Err(nix::errno::Errno::EINPROGRESS) => {}
        Err(e) => {
            if e == nix::errno::Errno::EADDRNOTAVAIL {
                dialed.no_port(addr);
            }
            return Err(e.into());
        }
    }
    TcpStream::from_std(std::net::TcpStream::from(fd))
}

/// The connections a run holds open (every transport: one count per TCP, TLS, HTTP/1.1, h2
/// or Unix connection and per UDP socket): the current number, its peak since the last
/// interval boundary, and how many were opened. Three atomics and no lock, so opening and
/// dropping a connection stays free of locks and allocation; the report's `connections`
/// figures come from here.
#[derive(Debug, Default)]
pub struct ConnGauge {
    open: AtomicU64,
    peak: AtomicU64,
    opened: AtomicU64,
}

impl ConnGauge {
    /// Connections open right now.
    pub fn open(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    /// Counts `conn` as opened and open; the returned guard un-counts it when dropped, so
    /// every way a connection goes away (closed, failed, its session cancelled) is counted.
    pub fn track<T>(&self, conn: T) -> Tracked<'_, T> {
        let now = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
        self.opened.fetch_add(1, Ordering::Relaxed);
        Tracked {
            conn,
            gauge: self,
            counted: true,
            endpoint: NO_ENDPOINT,
        }
    }

    /// Another handle on a connection already counted (a stream of a shared HTTP/2
    /// connection): it changes no count.
    pub fn shared<T>(&self, conn: T) -> Tracked<'_, T> {
        Tracked {
            conn,
            gauge: self,
            counted: false,
            endpoint: NO_ENDPOINT,
        }
    }

    /// Ends an interval: returns `(opened, peak)` since the previous call, and starts the
    /// next interval's peak at the connections open now (held connections count in every
    /// interval they span, not only in the one they were opened in).
    pub fn take_interval(&self) -> (u64, u64) {
        let opened = self.opened.swap(0, Ordering::Relaxed);
        let peak = self.peak.swap(0, Ordering::Relaxed);
        // A connect racing with the swap raises the new peak itself (fetch_max after its
        // increment); one counted just before it is in `peak`.
        self.peak.fetch_max(self.open(), Ordering::Relaxed);
        (opened, peak)
    }
}

/// A connection counted in a [`ConnGauge`] for as long as it lives.
#[derive(Debug)]
pub struct Tracked<'a, T> {
    /// The connection itself.
    pub conn: T,
    gauge: &'a ConnGauge,
    /// False for a handle on a connection counted elsewhere (another stream of a shared
    /// HTTP/2 connection).
    counted: bool,
    /// The id of the endpoint it was opened to ([`NO_ENDPOINT`]: the target's one address),
    /// so that a session notices when the run's endpoints moved its connection elsewhere.
    pub endpoint: u32,
}

/// The endpoint id of a connection to the target's one address.
pub const NO_ENDPOINT: u32 = u32::MAX;

impl<T> Drop for Tracked<'_, T> {
    fn drop(&mut self) {
        if self.counted {
            self.gauge.open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Why a request failed, as a report error kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure(pub &'static str);

/// What an idle connection's socket shows, read by [`idle_socket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleSocket {
    /// Nothing to read: as far as this end can tell, still open.
    Open,
    /// The peer's end (its keep-alive timeout closed it) or a reset.
    Closed,
    /// Bytes nobody asked for: an HTTP `408`, a TLS alert before the close, or what a raw
    /// protocol sends on its own.
    Unasked,
}

/// Reads an idle connection's state with one `recv` that peeks and never waits, so a caller
/// asks it only of a connection that sat idle for a while (`runner::session::forget_if_gone`).
pub fn idle_socket(fd: std::os::fd::RawFd) -> IdleSocket {
    use nix::sys::socket::{recv, MsgFlags};
    let mut byte = [0u8; 1];
    match recv(fd, &mut byte, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT) {
        Ok(0) => IdleSocket::Closed,
        Ok(_) => IdleSocket::Unasked,
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => IdleSocket::Open,
        Err(_) => IdleSocket::Closed,
    }
}

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

/// Maps an error on an open connection to its kind. A TLS error after the handshake (an
/// alert: with TLS 1.3 a server refuses a client certificate, or its absence, only after the
/// client finished its side of the handshake) is `tls_refused` or another `tls_*` reason.
pub fn io_failure(e: &io::Error, writing: bool) -> Failure {
    if let Some(kind) = crate::tls::tls_kind(e) {
        return Failure(kind);
    }
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
/// With source addresses set ([`set_source_addresses`]) it binds from the next one of the
/// destination's family.
///
/// A function returning an async block, whose one await is the socket's connect: every
/// connection's first request holds this future while it connects (a closed run of 10,000
/// connections holds 10,000 at once on one thread), and nested `async fn`s each held their
/// arguments again around it.
#[allow(clippy::manual_async_fn)] // the arguments held once: see above
pub fn connect_tcp(
    addr: &SocketAddr,
) -> impl Future<Output = Result<TcpStream, Failure>> + use<'_> {
    async move {
        let stream = start_connect(addr).map_err(|e| connect_failure(&e))?;
        connected(&stream).await?;
        Ok(stream)
    }
}

/// Waits until a started connect has completed, and says why when it failed.
async fn connected(stream: &TcpStream) -> Result<(), Failure> {
    std::future::poll_fn(|cx| stream.poll_write_ready(cx))
        .await
        .map_err(|e| connect_failure(&e))?;
    // A refused or failed connect sets the socket's error (EPOLLERR, whose readiness this
    // reads without a system call); only then does SO_ERROR hold the reason. A connection
    // that the peer resets later fails on its first I/O.
    if stream.try_io(Interest::ERROR, || Ok(())).is_ok() {
        if let Some(e) = stream.take_error().map_err(|e| connect_failure(&e))? {
            return Err(connect_failure(&e));
        }
    }
    Ok(())
}

/// A TCP connection opened by [`connect_tcp_sending`].
#[derive(Debug)]
pub struct Opened {
    /// The connected socket.
    pub stream: TcpStream,
    /// How many bytes of the first request left with the connect (all of them, but for a
    /// request larger than a fresh socket's send buffer; none when the connect was still
    /// in progress).
    pub sent: usize,
    /// When the connect was known complete: the first request's send time.
    pub at: tokio::time::Instant,
}

/// [`connect_tcp`] that also sends `first`, the connection's first request, as soon as the
/// connect has completed: at once when it completed inside `connect(2)`, as a connect to a
/// loopback or same-host target does (the handshake runs in the call's own softirq work).
/// The request then leaves without first waiting for the reactor to report the socket
/// writable: one task wake-up, poll and epoll event less per connection (about 1,200 of a
/// connection's 6,600 user-space instructions: docs/performance.md), and no scheduler round
/// between the connect's end and the send. A connect still in progress makes the send fail
/// with `EAGAIN`; it is then awaited as [`connect_tcp`] does and nothing is sent. An error
/// from that send is the connect's, and is reported as one.
#[allow(clippy::manual_async_fn)] // the arguments held once: see connect_tcp
pub fn connect_tcp_sending<'a>(
    addr: &'a SocketAddr,
    first: &'a [u8],
) -> impl Future<Output = Result<Opened, Failure>> + use<'a> {
    async move {
        let stream = start_connect(addr).map_err(|e| connect_failure(&e))?;
        let at = tokio::time::Instant::now();
        match send_now(&stream, first) {
            Ok(sent) => return Ok(Opened { stream, sent, at }),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(connect_failure(&e)),
        }
        connected(&stream).await?;
        Ok(Opened {
            stream,
            sent: 0,
            at: tokio::time::Instant::now(),
        })
    }
}

/// One non-blocking `send` on the socket, past the runtime's readiness (which knows nothing
/// of a socket it has not yet polled).
fn send_now(stream: &TcpStream, bytes: &[u8]) -> io::Result<usize> {
    use nix::sys::socket::{send, MsgFlags};
    loop {
        match send(stream.as_raw_fd(), bytes, MsgFlags::MSG_NOSIGNAL) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

/// Opens a connection to an HTTP target: TCP, then the TLS handshake when `tls` is given.
#[allow(clippy::manual_async_fn)] // the arguments held once: see connect_tcp
pub fn connect_http<'a>(
    addr: &'a SocketAddr,
    tls: Option<&'a crate::tls::TlsClient>,
) -> impl Future<Output = Result<crate::tls::Io, Failure>> + use<'a> {
    async move {
        use tokio_util::either::Either;
        let tcp = connect_tcp(addr).await?;
        Ok(match tls {
            None => Either::Left(tcp),
            // Boxed: the handshake's future is a kilobyte, and inline it would make every
            // plain connect (10,000 at once at the start of a large closed run) that large too.
            Some(t) => Either::Right(Box::new(Box::pin(t.handshake(tcp)).await?)),
        })
    }
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

#[cfg(test)]
mod tests {
    use super::ConnGauge;

    /// The three states an idle socket can show, on real sockets: nothing to read, bytes the
    /// peer sent unasked (peeked, so still there to read), and the peer's end.
    #[test]
    fn an_idle_socket_is_open_holds_unasked_bytes_or_is_closed() {
        use super::{idle_socket, IdleSocket};
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        let (mine, mut peer) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(idle_socket(mine.as_raw_fd()), IdleSocket::Open);
        peer.write_all(b"408").unwrap();
        assert_eq!(idle_socket(mine.as_raw_fd()), IdleSocket::Unasked);
        let mut read = [0u8; 3];
        (&mine).read_exact(&mut read).unwrap();
        assert_eq!(&read, b"408");
        drop(peer);
        assert_eq!(idle_socket(mine.as_raw_fd()), IdleSocket::Closed);
    }

    /// SO_ERROR is read only when the socket reports an error: a refused connect must still
    /// be told apart from a good one, on both families, with no option left unset.
    #[tokio::test]
    async fn a_connect_reads_its_error_only_when_the_socket_reports_one() {
        for any in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = tokio::net::TcpListener::bind(any).await else {
                continue; // no IPv6 on this host
            };
            let open = listener.local_addr().unwrap();
            let stream = super::connect_tcp(&open).await.expect("connects");
            assert_eq!(stream.peer_addr().unwrap(), open);
            assert!(stream.nodelay().unwrap(), "no Nagle on {open}");
            let (_accepted, from) = listener.accept().await.unwrap();
            assert_eq!(from, stream.local_addr().unwrap());
            drop(listener);
            let refused = super::connect_tcp(&open).await.err();
            assert_eq!(
                refused,
                Some(super::Failure(super::error_kind::CONNECT_REFUSED)),
                "{open}"
            );
        }
    }

    /// A connect that completes inside `connect(2)` (loopback) carries the first request
    /// with it, and a refused one is still a refused connect, on both families.
    #[tokio::test]
    async fn a_completed_connect_sends_the_first_request_at_once() {
        use tokio::io::AsyncReadExt as _;
        for any in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = tokio::net::TcpListener::bind(any).await else {
                continue; // no IPv6 on this host
            };
            let open = listener.local_addr().unwrap();
            let o = super::connect_tcp_sending(&open, b"GET / HTTP/1.1\r\n\r\n")
                .await
                .expect("connects");
            assert_eq!(o.sent, 18, "{open}");
            assert!(o.stream.nodelay().unwrap(), "no Nagle on {open}");
            let (mut accepted, _) = listener.accept().await.unwrap();
            let mut got = [0u8; 18];
            accepted.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"GET / HTTP/1.1\r\n\r\n");
            drop(listener);
            let refused = super::connect_tcp_sending(&open, b"x").await.err();
            assert_eq!(
                refused,
                Some(super::Failure(super::error_kind::CONNECT_REFUSED)),
                "{open}"
            );
        }
    }

    /// A connect still in progress when `connect(2)` returns (here: its SYN dropped by a
    /// listener whose accept queue is full, and sent again a second later) sends nothing
    /// early: it is awaited, and the request goes the usual way after it.
    #[tokio::test]
    async fn a_connect_in_progress_is_awaited_and_sends_nothing_early() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        // A backlog of 0 holds one connection not yet accepted; the next SYN is dropped.
        let listener = socket.listen(0).unwrap();
        let addr = listener.local_addr().unwrap();
        let filler = super::connect_tcp(&addr).await.expect("the queued one");
        let opening = tokio::spawn(async move { super::connect_tcp_sending(&addr, b"hi").await });
        // The spawned connect runs up to its wait (its SYN dropped) before this task resumes
        // (one thread); then the queue gets room, and the SYN's retransmission completes it.
        tokio::task::yield_now().await;
        assert!(!opening.is_finished(), "the connect is still in progress");
        drop(listener.accept().await.unwrap());
        let o = opening
            .await
            .unwrap()
            .expect("connects once the queue has room");
        assert_eq!(o.sent, 0, "nothing sent before the connect completed");
        let mut stream = o.stream;
        stream.write_all(b"hi").await.unwrap();
        let (mut accepted, _) = listener.accept().await.unwrap();
        let mut got = [0u8; 2];
        accepted.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hi");
        drop(filler);
    }

    #[test]
    fn the_gauge_counts_open_connections_and_their_peak_per_interval() {
        let g = ConnGauge::default();
        assert_eq!(g.take_interval(), (0, 0));
        let a = g.track(());
        let b = g.track(());
        let c = g.track(());
        drop(b);
        assert_eq!(g.open(), 2);
        // Interval 0: three opened, three at once at the peak.
        assert_eq!(g.take_interval(), (3, 3));
        // Interval 1: nothing opened, but the two held connections are its peak.
        drop(a);
        assert_eq!(g.take_interval(), (0, 2));
        let d = g.track(());
        drop(c);
        drop(d);
        assert_eq!(g.open(), 0);
        assert_eq!(g.take_interval(), (1, 2));
        assert_eq!(g.take_interval(), (0, 0));
    }
}
