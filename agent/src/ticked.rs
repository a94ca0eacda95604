//! Connections read at the arrival loop's ticks instead of by the reactor, for a constant-rate
//! pool at low and middling rates.
//!
//! At 5,000 requests/s in 1 ms ticks the generator's thread sleeps between ticks, and every
//! time the kernel makes a socket readable it wakes the thread: the tick's timer and two or
//! three bursts of answers, each a wake-up from idle, which costs more than the requests' own
//! work (`docs/performance.md`, "Constant rate: wake-ups and ticks"). A socket the reactor does
//! not know wakes nobody. So a pooled connection's socket is taken out of the reactor once it
//! is open, and the arrival loop, already awake at each tick to send that tick's slots, wakes
//! the connections that have just sent, whose answers are nearly always there by then
//! ([`Ticks::wake_ready`]); each reads what has come. One whose answer is not there yet waits
//! in an epoll set of the pool's own that nobody blocks on, which the tick asks without
//! waiting, so a slow or hung target costs no read per tick. Each read returns the kernel's
//! receive time of the data it read (`SO_TIMESTAMPNS`), which is when the answer arrived,
//! however late it was read: response times stay exact, and are not lengthened by a wake-up's
//! latency as the reactor's are.
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

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{self as sock, sockopt, ControlMessageOwned, MsgFlags};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The ticks of one constant-rate pool: the connections waiting for the next tick, those
/// waiting for data in the pool's epoll set, and the two clocks read together, which turn the
/// kernel's receive times (wall-clock time) into the monotonic instants every other time of
/// the run is taken on.
///
/// A connection that has just sent a request waits for the next tick without a system call:
/// its answer is nearly always there by then. A read that finds nothing puts the socket in
/// the epoll set, which is the pool's own and which nobody blocks on: each tick asks it,
/// without waiting, which of those sockets got something, wakes only their connections and
/// takes them out again. So a slow answer costs two `epoll_ctl` calls, and a connection
/// whose target does not answer costs nothing until its request times out, while sockets
/// that answer in time never enter the set (an epoll set's member costs a callback on each
/// packet it receives, and a tick that finds nobody there makes no call).
#[derive(Debug)]
pub struct Ticks {
    origin: Instant,
    tick: Duration,
    epoll: Epoll,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Connections woken at the next tick, whatever it finds: those that have just sent, and
    /// those whose write would block.
    next: Vec<Waker>,
    /// One per open connection of the pool, by token (the token its socket's events carry):
    /// its waker while it waits in the epoll set.
    slots: Vec<Option<Waker>>,
    /// Tokens of closed connections, for the next to open.
    free: Vec<usize>,
    /// How many sockets are in the epoll set.
    in_set: usize,
    /// What one tick takes from the epoll set and wakes (kept: no allocation per tick).
    events: Vec<EpollEvent>,
    woken: Vec<Waker>,
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

/// Events taken from the epoll set per call; a tick calls again while it fills them.
const EVENTS_PER_CALL: usize = 256;

impl Ticks {
    /// Ticks every `tick` from `origin` (the arrival grid: arrival times are rounded down to
    /// it, so the arrival loop's timer fires on these instants anyway), with an epoll set of
    /// its own; failing only when the set cannot be made (the pool then reads by the reactor).
    pub fn new(origin: Instant, tick: Duration) -> io::Result<Self> {
        Ok(Self {
            origin,
            tick: tick.max(Duration::from_micros(1)),
            epoll: Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?,
            state: Mutex::new(State {
                next: Vec::new(),
                slots: Vec::new(),
                free: Vec::new(),
                in_set: 0,
                events: vec![EpollEvent::empty(); EVENTS_PER_CALL],
                woken: Vec::new(),
                clocks: Clocks::now(),
            }),
        })
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

    /// Whether a connection waits for a tick.
    pub fn waiting(&self) -> bool {
        let s = self.lock();
        s.in_set > 0 || !s.next.is_empty()
    }

    /// The tick: wakes the connections waiting for it, and those in the epoll set whose
    /// sockets got data (or an end, or an error); they read when they are next polled, and
    /// leave the set once they have read something. It also reads the clocks their receive
    /// times are turned into instants with.
    pub fn wake_ready(&self) {
        let mut woken = {
            let mut s = self.lock();
            if s.in_set == 0 && s.next.is_empty() {
                return;
            }
            let State {
                next,
                slots,
                in_set,
                events,
                woken,
                ..
            } = &mut *s;
            woken.append(next);
            // Level-triggered sockets stay ready until read, and come round again after the
            // rest: as many calls as it takes to see each once.
            for _ in 0..in_set.div_ceil(events.len()) {
                // Never blocks. An error (none is expected of a valid set) wakes every
                // connection in it, whose read is then tried: always right, only dearer.
                let Ok(n) = self.epoll.wait(events, EpollTimeout::ZERO) else {
                    woken.extend(slots.iter_mut().filter_map(Option::take));
                    break;
                };
                for e in &events[..n] {
                    let slot = usize::try_from(e.data())
                        .ok()
                        .and_then(|t| slots.get_mut(t));
                    woken.extend(slot.and_then(Option::take));
                }
                if n < events.len() {
                    break;
                }
            }
            if woken.is_empty() {
                return;
            }
            s.clocks = Clocks::now();
            std::mem::take(&mut s.woken)
        };
        for w in woken.drain(..) {
            w.wake();
        }
        let mut s = self.lock();
        if s.woken.capacity() < woken.capacity() {
            s.woken = woken;
        }
    }

    /// A token for a connection just opened.
    fn add(&self) -> usize {
        let mut s = self.lock();
        s.free.pop().unwrap_or_else(|| {
            s.slots.push(None);
            s.slots.len() - 1
        })
    }

    /// Frees the token of a connection about to close (closing its socket takes it out of
    /// the epoll set, should it be there).
    fn remove(&self, token: usize, in_set: bool) {
        let mut s = self.lock();
        let Some(slot) = s.slots.get_mut(token) else {
            return;
        };
        *slot = None;
        s.in_set -= usize::from(in_set);
        s.free.push(token);
    }

    /// Wakes `waker` at the next tick.
    fn next_tick(&self, waker: &Waker) {
        self.lock().next.push(waker.clone());
    }

    /// Wakes `waker` at the first tick after `sock` gets data, putting it in the epoll set
    /// unless it is there (`in_set`); a socket that holds data already is reported at the
    /// next tick.
    fn when_readable(
        &self,
        (token, in_set): (usize, bool),
        sock: &std::net::TcpStream,
        waker: &Waker,
    ) -> io::Result<()> {
        let mut s = self.lock();
        let Some(slot) = s.slots.get_mut(token) else {
            return Err(io::Error::other("a connection without its token"));
        };
        match slot {
            Some(w) => w.clone_from(waker),
            None => *slot = Some(waker.clone()),
        }
        if !in_set {
            // Level-triggered: reported at every tick until it has been read and has left.
            let interest = EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP;
            if let Err(e) = self
                .epoll
                .add(sock, EpollEvent::new(interest, token as u64))
            {
                *slot = None;
                return Err(e.into());
            }
            s.in_set += 1;
        }
        Ok(())
    }

    /// Takes a socket in the epoll set out of it, once it has been read.
    fn leave(&self, token: usize, sock: &std::net::TcpStream) {
        let mut s = self.lock();
        if let Some(slot) = s.slots.get_mut(token) {
            *slot = None;
        }
        s.in_set -= 1;
        // It cannot fail for a socket in the set; were it to, the socket would stay, and its
        // events find no waker.
        let _ = self.epoll.delete(sock);
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
/// that cannot go on waits for a tick of its [`Ticks`] (a read, for the first tick after data
/// came), never for readiness.
#[derive(Debug)]
pub struct Ticked {
    sock: std::net::TcpStream,
    ticks: Arc<Ticks>,
    /// Its place among the pool's connections (what its epoll events carry).
    token: usize,
    /// Its socket is in the pool's epoll set: a read found nothing, and none found data since.
    in_set: bool,
    /// A request went out and nothing was read since: its answer cannot be there yet, so the
    /// first read waits for the tick without trying (one system call less per request).
    sent: bool,
    /// When the data last read arrived (the kernel's receive time of its last segment).
    arrived: Option<Instant>,
}

impl Ticked {
    /// Takes an open connection out of the reactor, and asks the kernel for receive times.
    /// `sent`: a request went out with the connect, so the first read waits for the next tick
    /// without trying, as after any request.
    pub fn new(stream: tokio::net::TcpStream, ticks: Arc<Ticks>, sent: bool) -> io::Result<Self> {
        let sock = stream.into_std()?;
        sock::setsockopt(&sock, sockopt::ReceiveTimestampns, &true).map_err(io::Error::from)?;
        let token = ticks.add();
        Ok(Self {
            sock,
            ticks,
            token,
            in_set: false,
            sent,
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

    /// Waits in the pool's epoll set for data to read.
    fn when_readable(&mut self, cx: &Context<'_>) -> io::Result<()> {
        let at = (self.token, self.in_set);
        self.ticks.when_readable(at, &self.sock, cx.waker())?;
        self.in_set = true;
        Ok(())
    }
}

impl AsRawFd for Ticked {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.sock.as_raw_fd()
    }
}

impl Drop for Ticked {
    fn drop(&mut self) {
        self.ticks.remove(self.token, self.in_set);
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
            this.ticks.next_tick(cx.waker());
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
                    if std::mem::take(&mut this.in_set) {
                        this.ticks.leave(this.token, &this.sock);
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => {
                    return match this.when_readable(cx) {
                        Ok(()) => Poll::Pending,
                        Err(e) => Poll::Ready(Err(e)),
                    };
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
                    this.ticks.next_tick(cx.waker());
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
        let ticks = Arc::new(Ticks::new(Instant::now(), tick).unwrap());
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut conn = Conn::over(Ticked::new(stream, ticks.clone(), false).unwrap());
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
                    ticks.wake_ready();
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

    /// A waker that counts its wakes.
    struct Counted(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    impl Counted {
        fn new() -> (Arc<Self>, std::task::Waker) {
            let c = Arc::new(Self(0.into()));
            (c.clone(), c.into())
        }
        fn count(&self) -> usize {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// Polls `t`'s read once with `waker`: the bytes read, or `None` while it waits.
    fn poll_read_once(t: &mut Ticked, waker: &std::task::Waker) -> Option<usize> {
        use tokio::io::AsyncRead;
        let mut cx = std::task::Context::from_waker(waker);
        let mut buf = [0u8; 256];
        let mut buf = tokio::io::ReadBuf::new(&mut buf);
        match std::pin::Pin::new(t).poll_read(&mut cx, &mut buf) {
            std::task::Poll::Ready(r) => Some(r.map(|()| buf.filled().len()).unwrap()),
            std::task::Poll::Pending => None,
        }
    }

    /// Sends `data` on `t` (the pool's write path, which marks a request as out).
    fn send(t: &mut Ticked, data: &[u8], waker: &std::task::Waker) {
        use tokio::io::AsyncWrite;
        let mut cx = std::task::Context::from_waker(waker);
        match std::pin::Pin::new(t).poll_write(&mut cx, data) {
            std::task::Poll::Ready(r) => assert_eq!(r.unwrap(), data.len()),
            std::task::Poll::Pending => panic!("a short write blocked"),
        }
    }

    /// Blocks until `t`'s socket has something to read (or 5 s pass): the kernel's readiness,
    /// not a sleep.
    fn until_readable(t: &Ticked) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let mut fds = [PollFd::new(t.sock.as_fd(), PollFlags::POLLIN)];
        assert_eq!(poll(&mut fds, PollTimeout::from(5_000u16)).unwrap(), 1);
    }

    /// After a request a connection waits for the next tick without a system call; if its
    /// answer is not there by then, it waits in the pool's epoll set, and a tick wakes it only
    /// once something came: one waiting on a target that does not answer is left asleep
    /// however many ticks pass, and woken once its target closes. A connection leaves the set
    /// once it has read, or when it closes.
    #[tokio::test]
    async fn a_slow_answer_waits_in_the_epoll_set_and_only_it_is_woken() {
        let ticks = Arc::new(Ticks::new(Instant::now(), Duration::from_millis(1)).unwrap());
        let target = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = target.local_addr().unwrap();
        let open = || {
            let ticks = ticks.clone();
            async move {
                let s = tokio::net::TcpStream::connect(addr).await.unwrap();
                Ticked::new(s, ticks, false).unwrap()
            }
        };
        let request = b"GET / HTTP/1.1\r\nhost: t\r\n\r\n";
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let (mut hung, mut slow) = (open().await, open().await);
        let (mut hung_end, _) = target.accept().unwrap();
        let (mut slow_end, _) = target.accept().unwrap();
        let (hung_wakes, hung_waker) = Counted::new();
        let (slow_wakes, slow_waker) = Counted::new();
        let wakes = || (hung_wakes.count(), slow_wakes.count());

        // Both send; the first reads wait for the next tick, which wakes both.
        send(&mut hung, request, &hung_waker);
        send(&mut slow, request, &slow_waker);
        for end in [&mut hung_end, &mut slow_end] {
            assert_eq!(end.read(&mut [0; 256]).unwrap(), request.len());
        }
        assert_eq!(poll_read_once(&mut hung, &hung_waker), None);
        assert_eq!(poll_read_once(&mut slow, &slow_waker), None);
        ticks.wake_ready();
        assert_eq!(wakes(), (1, 1));

        // Neither answer is there: both wait in the set, and ticks leave them asleep.
        assert_eq!(poll_read_once(&mut hung, &hung_waker), None);
        assert_eq!(poll_read_once(&mut slow, &slow_waker), None);
        assert!(hung.in_set && slow.in_set);
        for _ in 0..100 {
            ticks.wake_ready();
        }
        assert_eq!(
            wakes(),
            (1, 1),
            "a tick woke a connection with nothing to read"
        );

        // The slow answer comes: the next tick wakes its connection alone, which reads it
        // and leaves the set.
        slow_end.write_all(answer).unwrap();
        until_readable(&slow);
        ticks.wake_ready();
        assert_eq!(wakes(), (1, 2));
        assert_eq!(poll_read_once(&mut slow, &slow_waker), Some(answer.len()));
        assert!(!slow.in_set);
        for _ in 0..10 {
            ticks.wake_ready();
        }
        assert_eq!(wakes(), (1, 2));
        assert!(ticks.waiting(), "the hung connection still waits");

        // The hung target closes: the tick wakes its connection, which reads the end.
        drop(hung_end);
        until_readable(&hung);
        ticks.wake_ready();
        assert_eq!(wakes(), (2, 2));
        assert_eq!(poll_read_once(&mut hung, &hung_waker), Some(0));
        assert!(!ticks.waiting());

        // A connection closed while it waits in the set leaves it.
        send(&mut slow, request, &slow_waker);
        assert_eq!(poll_read_once(&mut slow, &slow_waker), None);
        ticks.wake_ready();
        assert_eq!(slow_end.read(&mut [0; 256]).unwrap(), request.len());
        assert_eq!(poll_read_once(&mut slow, &slow_waker), None);
        assert!(slow.in_set && ticks.waiting());
        drop(slow);
        assert!(!ticks.waiting(), "a closed connection is still counted");
    }

    /// The tick after an instant is the next one on the grid, never the instant itself.
    #[test]
    fn ticks_fall_on_the_grid() {
        let origin = Instant::now();
        let ticks = Ticks::new(origin, Duration::from_millis(1)).unwrap();
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
