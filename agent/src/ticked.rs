//! Connections read at the arrival loop's ticks instead of by the reactor, for a constant-rate
//! pool at low and middling rates.
//!
//! At 5,000 requests/s in 1 ms ticks the generator's thread sleeps between ticks, and every
//! time the kernel makes a socket readable it wakes the thread: the tick's timer and two or
//! three bursts of answers, each a wake-up from idle, which costs more than the requests'
//! own work (`docs/efficiency.md`, sessions 16 and 22). A socket the reactor does not know
//! wakes nobody. So a pooled connection's socket is taken out of the reactor once it is open,
//! and the arrival loop, already awake at each tick to send that tick's slots, wakes the
//! connections waiting for answers ([`Ticks::wake_all`]); each reads what has come. Each read
//! returns the kernel's receive time of the data it read (`SO_TIMESTAMPNS`), which is when
//! the answer arrived, however late it was read: response times stay exact, and are not
//! lengthened by a wake-up's latency as the reactor's are.
//!
//! What it costs: a connection stays busy until the tick after its answer, so the pool serves
//! up to a tick's slots fewer at once. The pool uses it only when it has many connections to
//! spare for that (`runner::models::ticked_pool`).

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::socket::{self as sock, sockopt, ControlMessageOwned, MsgFlags};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The ticks of one constant-rate pool: the connections waiting for an answer, and the two
/// clocks read together, which turn the kernel's receive times (wall-clock time) into the
/// monotonic instants every other time of the run is taken on.
#[derive(Debug)]
pub struct Ticks {
    origin: Instant,
    tick: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    waiting: Vec<Waker>,
    /// The buffer `waiting` is swapped with at each wake-up (no allocation per tick).
    spare: Vec<Waker>,
    clocks: Clocks,
}

/// The monotonic clock and the wall clock (ns since the epoch), read one right after the other.
#[derive(Debug, Clone, Copy)]
struct Clocks {
    mono: Instant,
    wall: i128,
}

impl Clocks {
    fn now() -> Self {
        Self {
            mono: Instant::now(),
            wall: wall_ns(SystemTime::now()),
        }
    }
}

fn wall_ns(t: SystemTime) -> i128 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

/// How far a receive time may lie from the clocks' last reading before they are read again.
/// Between the two, the wall clock may be slewed (at most 500 ppm): within this, by at most
/// 2.5 µs.
const CLOCKS_FRESH_NS: i128 = 5_000_000;

impl Ticks {
    /// Ticks every `tick` from `origin` (the arrival grid: arrival times are rounded down to
    /// it, so the arrival loop's timer fires on these instants anyway).
    pub fn new(origin: Instant, tick: Duration) -> Self {
        Self {
            origin,
            tick: tick.max(Duration::from_micros(1)),
            state: Mutex::new(State {
                waiting: Vec::new(),
                spare: Vec::new(),
                clocks: Clocks::now(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The first tick after `now`.
    pub fn after(&self, now: Instant) -> Instant {
        let since = now.saturating_duration_since(self.origin).as_nanos();
        let tick = self.tick.as_nanos();
        let k = since / tick + 1;
        self.origin + Duration::from_nanos(u64::try_from(k * tick).unwrap_or(u64::MAX))
    }

    /// Whether a connection waits for the next tick.
    pub fn waiting(&self) -> bool {
        !self.lock().waiting.is_empty()
    }

    /// Wakes every connection waiting for a tick (they read when they are next polled), and
    /// reads the clocks their receive times are turned into instants with.
    pub fn wake_all(&self) {
        let mut woken = {
            let mut s = self.lock();
            if s.waiting.is_empty() {
                return;
            }
            s.clocks = Clocks::now();
            let spare = std::mem::take(&mut s.spare);
            std::mem::replace(&mut s.waiting, spare)
        };
        for w in woken.drain(..) {
            w.wake();
        }
        let mut s = self.lock();
        if s.spare.capacity() < woken.capacity() {
            s.spare = woken;
        }
    }

    fn register(&self, waker: &Waker) {
        self.lock().waiting.push(waker.clone());
    }

    /// The instant of a kernel receive time (wall clock), through the clocks read at the last
    /// tick, or read now when that reading is too far from it to trust.
    fn instant_of(&self, wall: i128) -> Instant {
        let mut s = self.lock();
        if (wall - s.clocks.wall).abs() > CLOCKS_FRESH_NS {
            s.clocks = Clocks::now();
        }
        let c = s.clocks;
        drop(s);
        let offset = wall - c.wall;
        let d = Duration::from_nanos(u64::try_from(offset.unsigned_abs()).unwrap_or(u64::MAX));
        if offset >= 0 {
            c.mono + d
        } else {
            c.mono.checked_sub(d).unwrap_or(c.mono)
        }
    }
}

/// Room for one `SCM_TIMESTAMPNS` control message, aligned as the kernel writes it.
#[repr(C, align(8))]
struct ControlBuf([u8; 64]);

/// A TCP connection outside the reactor: reads and writes are tried when polled, and a poll
/// that cannot go on waits for the next tick of its [`Ticks`], never for readiness.
#[derive(Debug)]
pub struct Ticked {
    sock: std::net::TcpStream,
    ticks: Arc<Ticks>,
    /// A request went out and nothing was read since: its answer cannot be there yet, so the
    /// first read waits for the tick without trying (one system call less per request).
    sent: bool,
    /// When the data last read arrived (the kernel's receive time of its last segment).
    arrived: Option<Instant>,
}

impl Ticked {
    /// Takes an open connection out of the reactor, and asks the kernel for receive times.
    pub fn new(stream: tokio::net::TcpStream, ticks: Arc<Ticks>) -> io::Result<Self> {
        let sock = stream.into_std()?;
        sock::setsockopt(&sock, sockopt::ReceiveTimestampns, &true).map_err(io::Error::from)?;
        Ok(Self {
            sock,
            ticks,
            sent: false,
            arrived: None,
        })
    }

    /// When the data read last arrived, once: the end of the answer just read. `None` when
    /// the kernel gave no receive time: it stamps packets only a little after the first
    /// socket on the machine asks it to (deferred work), so the first answers of a run on an
    /// otherwise quiet machine may have none, and are timed at their read instead.
    pub fn take_arrival(&mut self) -> Option<Instant> {
        self.arrived.take()
    }

    fn wait(&self, cx: &Context<'_>) {
        self.ticks.register(cx.waker());
    }
}

impl AsyncRead for Ticked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if std::mem::take(&mut this.sent) {
            this.wait(cx);
            return Poll::Pending;
        }
        let mut control = ControlBuf([0; 64]);
        loop {
            // Up to 4 KiB at a time: the part handed to the kernel is zeroed first.
            let into = buf.initialize_unfilled_to(buf.remaining().min(4096));
            let mut iov = [io::IoSliceMut::new(into)];
            match sock::recvmsg::<()>(
                this.sock.as_raw_fd(),
                &mut iov,
                Some(&mut control.0),
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(msg) => {
                    let n = msg.bytes;
                    let wall = msg.cmsgs().ok().and_then(|mut c| {
                        c.find_map(|m| match m {
                            ControlMessageOwned::ScmTimestampns(ts) => {
                                Some(ts.tv_sec() as i128 * 1_000_000_000 + ts.tv_nsec() as i128)
                            }
                            _ => None,
                        })
                    });
                    if n > 0 {
                        this.arrived = wall.map(|w| this.ticks.instant_of(w));
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => {
                    this.wait(cx);
                    return Poll::Pending;
                }
                Err(e) => return Poll::Ready(Err(e.into())),
            }
        }
    }
}

impl AsyncWrite for Ticked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        use std::io::Write;
        let this = self.get_mut();
        loop {
            match (&this.sock).write(data) {
                Ok(n) => {
                    this.sent |= n > 0;
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    this.wait(cx);
                    return Poll::Pending;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.sock.shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::{Read, Write};
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Ticked, Ticks};
    use crate::http1::{Conn, PreparedRequest};

    /// A target that answers every request at once on each of its first `connections`
    /// connections, each on a thread of its own (so that it answers while the test's runtime
    /// waits). Also the target of the tick-read pool's run in `runner::models`.
    pub(crate) fn answering_target(connections: usize) -> std::net::SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in listener.incoming().take(connections) {
                let mut s = s.unwrap();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if n == 0 || s.write_all(ok).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    /// An answer on a connection read at ticks is read at the first tick after it came and no
    /// sooner (nothing but the tick wakes the reader), and is timed by its arrival: before the
    /// tick, within a few milliseconds of the send. Real sockets and the real clock, because
    /// the kernel's receive times are on it; 20 ms ticks, three requests after the first
    /// stamped answer.
    #[tokio::test]
    async fn answers_are_read_at_the_tick_and_timed_when_they_came() {
        let tick = Duration::from_millis(20);
        let addr = answering_target(1);
        let ticks = Arc::new(Ticks::new(Instant::now(), tick));
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut conn = Conn::over(Ticked::new(stream, ticks.clone()).unwrap());
        let req = stampede_core::scenario::HttpRequest {
            path: stampede_core::template::Template::literal("/"),
            ..Default::default()
        };
        let req = PreparedRequest::new(&req, "t", "");
        let driver = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep_until(ticks.after(Instant::now())).await;
                    ticks.wake_all();
                }
            })
        };
        // The kernel turns receive timestamps on for the whole machine a little after the
        // first socket asks for them (deferred work), so on a machine where no socket had
        // them the first answers may come without one (`session` then times them at the
        // read). Exchange until one comes with a receive time, within 50 answers.
        let mut unstamped = 0;
        loop {
            conn.request(&req).await.unwrap();
            if conn.io_mut().take_arrival().is_some() {
                break;
            }
            unstamped += 1;
            assert!(unstamped < 50, "no receive time in {unstamped} answers");
        }
        for _ in 0..3 {
            let sent = Instant::now();
            let first_tick = ticks.after(sent);
            let resp = conn.request(&req).await.unwrap();
            let read = Instant::now();
            assert_eq!((resp.status, resp.bytes_received), (200, 40));
            let arrived = conn.io_mut().take_arrival().expect("a receive time");
            assert!(
                read >= first_tick,
                "read {:?} before the tick",
                first_tick - read
            );
            assert!(
                arrived >= sent - Duration::from_micros(100),
                "arrived before the send"
            );
            assert!(arrived < read, "the arrival is the read's time");
            assert!(
                arrived - sent < (read - sent) / 2,
                "arrived {:?} after the send, read {:?} after it",
                arrived - sent,
                read - sent
            );
            assert!(!ticks.waiting());
        }
        driver.abort();
    }

    /// The tick after an instant is the next one on the grid, never the instant itself.
    #[test]
    fn ticks_fall_on_the_grid() {
        let origin = Instant::now();
        let ticks = Ticks::new(origin, Duration::from_millis(1));
        let ms = Duration::from_millis;
        assert_eq!(ticks.after(origin), origin + ms(1));
        assert_eq!(ticks.after(origin + ms(3)), origin + ms(4));
        assert_eq!(
            ticks.after(origin + Duration::from_micros(3_500)),
            origin + ms(4)
        );
        // Before the origin (a pool made before its start): the first tick.
        assert_eq!(ticks.after(origin - ms(5)), origin + ms(1));
    }
}
