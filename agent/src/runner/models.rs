//! The connection tasks of the closed and constant models: each runs its sessions back to
//! back on one connection (closed) or takes the next due slot from the pool's queue
//! (constant), alone or as several HTTP/2 streams on one shared connection, for the whole run
//! or, on a ramp, over the spans its rank is open. They live for the
//! whole run and do not wait on the stop: `execute` aborts them.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::session::{forget_if_gone, session, At, Ended, Line};
use super::{Endpoint, Link, Recorder, RunSpec, StepPlan, Tracked};
use crate::net::NO_ENDPOINT;
use crate::pool::{RateSlot, Refused, SlotQueue};
use crate::ticked::Ticks;

/// One connection of a closed load: runs the session back to back, keeping the connection
/// between sessions, until `end` (a session running at `end` finishes). `stripe` is the
/// connection's global index and the stride between its sessions' indexes (the number of
/// connections); with a mix, the connection's `k`-th session runs the type at `k` plus the
/// connection's own offset in the table.
#[allow(clippy::manual_async_fn)] // the arguments held once: see the body
pub(super) fn closed_connection(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    t0: Instant,
    end: Instant,
    (index, stride): (u64, u64),
    stop: CancellationToken,
) -> impl Future<Output = ()> {
    // An async block, not an `async fn`: an async fn's future holds its arguments twice (as
    // passed and as moved into its body), and this future exists once per connection for
    // the whole run.
    async move {
        // A stop before `t0` aborts this task like any other time (`execute`).
        let mut sleep = pin!(tokio::time::sleep_until(t0));
        sleep.as_mut().await;
        // The loop inline, not through `closed_loop`: nesting would hold the arguments twice.
        let mut line = Line::new(None, sleep);
        let offset = spec.mix.offset(index, stride);
        let mut own = 0u64;
        let mut now = Instant::now();
        while let Some(at) = next_closed(
            &spec,
            (now, end),
            (index, stride),
            index,
            (offset, own),
            &stop,
        ) {
            match session(&spec, &rec, at, &stop, &mut line).await {
                Ended::Ran(t) => now = t,
                Ended::Exhausted => break,
            }
            own += 1;
        }
        drop(line);
    }
}

/// The next session of a closed stripe (its `own`-th, with index `first + own × stride`),
/// due `now` (when the one before it ended) and counted as planned when it starts; `None`
/// once `end` has passed or the run stopped.
fn next_closed(
    spec: &RunSpec,
    (now, end): (Instant, Instant),
    (first, stride): (u64, u64),
    connection: u64,
    (offset, own): (u64, u64),
    stop: &CancellationToken,
) -> Option<At> {
    if now >= end || stop.is_cancelled() {
        return None;
    }
    Some(At {
        intended: now,
        plan: true,
        phase: spec.phase_base,
        index: first + own * stride,
        connection,
        kind: spec.mix.pick(offset.wrapping_add(own)),
        fresh: true,
    })
}

/// One connection of a closed load carrying `streams` sessions at once (HTTP/2): opened
/// once and counted once; stream `s` of connection `c` of `C` runs the sessions of the
/// virtual stripe `c·streams + s` of `C·streams` (its indexes and its place in the mix),
/// with connection `c`'s data rows. A stream whose connection fails opens one of its own.
pub(super) async fn closed_streams(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    (t0, end): (Instant, Instant),
    (connection, total): (u64, u64),
    streams: u64,
    stop: CancellationToken,
) {
    // A stop before `t0` aborts this task like any other time (`execute`).
    tokio::time::sleep_until(t0).await;
    let link = open_shared(&spec, &rec, connection).await;
    let loops = (0..streams).map(|s| {
        let conn = stream_handle(link.as_ref(), &rec);
        let stripe = (connection * streams + s, total * streams);
        closed_loop(&spec, &rec, (t0, end), stripe, connection, conn, &stop)
    });
    futures::future::join_all(loops).await;
    drop(link);
}

/// Opens the connection that several streams share, counted once; `None` when it cannot be
/// opened now (each stream then opens its own, and its session records why).
async fn open_shared<'a>(
    spec: &RunSpec,
    rec: &'a Recorder,
    connection: u64,
) -> Option<Tracked<'a>> {
    let endpoint = spec.endpoint_index(connection);
    let target = spec.endpoint(&endpoint);
    let began = Instant::now();
    let link = tokio::time::timeout(spec.request_timeout, Box::pin(Link::open(target)))
        .await
        .ok()?
        .ok()?;
    rec.connects.record(began, Instant::now());
    rec.endpoints.opened(&endpoint);
    let mut tracked = rec.connections.track(link);
    tracked.endpoint = endpoint.as_ref().map_or(NO_ENDPOINT, |s| s.id);
    Some(tracked)
}

/// A handle for one stream on the shared connection `link` (not counted again); `None`
/// when there is none, and the stream then opens a connection of its own.
fn stream_handle<'a>(link: Option<&Tracked<'a>>, rec: &'a Recorder) -> Option<Tracked<'a>> {
    link.and_then(|l| Some((l.conn.share()?, l.endpoint)))
        .map(|(l, endpoint)| {
            let mut handle = rec.connections.shared(l);
            handle.endpoint = endpoint;
            handle
        })
}

/// The loop of [`closed_connection`]: sessions back to back on `conn` (opened on first use
/// when `None`) until `end`, the `k`-th with index `index + k × stride`.
async fn closed_loop<'a>(
    spec: &RunSpec,
    rec: &'a Recorder,
    (t0, end): (Instant, Instant),
    (index, stride): (u64, u64),
    connection: u64,
    conn: Option<Tracked<'a>>,
    stop: &CancellationToken,
) {
    let sleep = pin!(tokio::time::sleep_until(t0));
    let mut line = Line::new(conn, sleep);
    let offset = spec.mix.offset(index, stride);
    let mut own = 0u64;
    let mut now = Instant::now();
    while let Some(at) = next_closed(
        spec,
        (now, end),
        (index, stride),
        connection,
        (offset, own),
        stop,
    ) {
        match session(spec, rec, at, stop, &mut line).await {
            Ended::Ran(t) => now = t,
            Ended::Exhausted => break,
        }
        own += 1;
    }
    drop(line);
}

/// Most constant-rate slots waiting for a free connection. Slots queue while every connection
/// is busy; against a target that stalls, they would pile up at the scheduled rate (1e6/s for
/// a minute is 2 GB). Past this bound (about 24 MiB of slots, seconds of backlog at any rate a
/// pool keeps up with) a slot is dropped and counted, and the report shows the generator fell
/// behind.
pub(super) const MAX_QUEUED_SLOTS: usize = 1 << 20;

/// Queues `slot` for the pool; false when it was dropped (queue full, or the pool is gone).
/// Warns once per run when the queue first overflows.
pub(super) fn enqueue(slots: &SlotQueue, slot: RateSlot, warned: &mut bool) -> bool {
    match slots.push(slot) {
        Ok(()) => true,
        Err(Refused::Full) => {
            if !*warned {
                *warned = true;
                tracing::warn!(
                    queued = slots.bound(),
                    "every connection is busy and the slot queue is full: dropping slots (counted as dropped arrivals)"
                );
            }
            false
        }
        Err(Refused::Closed) => false,
    }
}

/// When a constant-rate pool whose schedule starts at `t0` stops starting the slots still
/// queued: its schedule's end plus one request timeout, at most
/// [`stampede_core::plan::LATE_START_LIMIT`]; `None` past what `Instant` holds.
pub(super) fn late_start_cutoff(spec: &RunSpec, t0: Instant) -> Option<Instant> {
    let length = Duration::try_from_secs_f64(spec.schedule.length_s()).ok()?;
    let window = spec
        .request_timeout
        .min(stampede_core::plan::LATE_START_LIMIT);
    t0.checked_add(length)?.checked_add(window)
}

/// Closes `slots` at `at` and counts what is still queued then as dropped, through
/// `dropped` (called with each slot's phase), warning once when there was any. A pool whose
/// target hangs then ends once its sessions in flight have, instead of serving its queue a
/// few connections per request timeout until the controller counts the agent lost; slots
/// the arrival loop queues later are refused and counted dropped by it.
pub(super) async fn end_queue_at(slots: Arc<SlotQueue>, at: Instant, dropped: impl FnMut(u32)) {
    tokio::time::sleep_until(at).await;
    let late = drop_queued(&slots, dropped);
    if late > 0 {
        tracing::warn!(
            slots = late,
            "slots still queued one request timeout after the schedule's end were never started (counted as dropped arrivals)"
        );
    }
}

/// Closes `slots` and passes the phase of each slot never started to `dropped`; returns
/// how many there were.
pub(super) fn drop_queued(slots: &SlotQueue, mut dropped: impl FnMut(u32)) -> usize {
    let left = slots.close_and_take();
    for &(_, phase, _, _) in &left {
        dropped(phase);
    }
    left.len()
}

/// One connection of a constant-rate pool (the run's connection `connection`): takes the next
/// due slot from the shared queue and runs the session for it, from the slot's intended time;
/// read at `ticks` when the pool reads at ticks ([`ticked_pool`]).
pub(super) async fn pooled_connection(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    (slots, ticks): (Arc<SlotQueue>, Option<Arc<Ticks>>),
    connection: u64,
    stop: CancellationToken,
) {
    pooled_loop(
        &spec,
        &rec,
        (&slots, ticks),
        connection,
        (None, None),
        &stop,
    )
    .await;
}

/// One connection of a constant-rate pool that ramps: open over each of its `spans` (offsets
/// from `t0`, from [`stampede_core::ramp::spans`]), opened at the span's start, so the
/// connects follow the ramp's slope whatever the queue holds, and taking due slots from the
/// shared queue like any connection of the pool until the span's end (a session running then
/// finishes). A span that lasts to the ramp's end `last` lasts until the queue closes
/// instead: the pool then serves what is still due, as a pool that does not ramp does.
pub(super) async fn ramped_pooled_connection(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    slots: Arc<SlotQueue>,
    (t0, spans, last): (Instant, Vec<(Duration, Duration)>, Duration),
    connection: u64,
    stop: CancellationToken,
) {
    for (from, to) in spans {
        tokio::time::sleep_until(t0 + from).await;
        if stop.is_cancelled() {
            return;
        }
        // A connect that fails now is tried again by the first slot's session, which
        // records why it failed.
        let conn = open_shared(&spec, &rec, connection).await;
        let until = (to < last).then(|| t0 + to);
        pooled_loop(
            &spec,
            &rec,
            (&slots, None),
            connection,
            (conn, until),
            &stop,
        )
        .await;
    }
}

/// The next slot of `slots`, waiting at most until `until` (none: until the queue closes);
/// `None` once it is closed and empty, or `until` has come. Cancelling the wait takes nothing
/// from the queue: a slot is taken only by the call that returns it.
async fn next_slot(slots: &SlotQueue, until: Option<Instant>) -> Option<RateSlot> {
    match until {
        None => slots.pop().await,
        Some(at) if Instant::now() >= at => None,
        Some(at) => tokio::time::timeout_at(at, slots.pop())
            .await
            .ok()
            .flatten(),
    }
}

/// How many connections a pool that reads at ticks must have per slot of a tick: a
/// connection read at ticks stays busy until the tick after its answer, so it serves up to a
/// tick's slots fewer at once; with this many, that is at most an eighth of the pool.
const TICKED_CONNECTIONS_PER_SLOT: f64 = 8.0;

/// The tick a constant-rate pool of `connections` (`streams` each) reads its answers at, or
/// `None` when it reads them through the reactor as they come ([`crate::ticked`]). It reads
/// at ticks when every session is one static HTTP/1.1 request over plain TCP (a session of
/// several requests would send each after the tick its answer is read at, later than it was
/// due), arrivals come in ticks (`arrival_resolution` above zero) at one slot a tick or more
/// (below that the thread wakes for the arrivals anyway, and a tick read only adds a timer
/// to arm), and the pool has [`TICKED_CONNECTIONS_PER_SLOT`] connections for each slot of a
/// tick.
pub(super) fn ticked_pool(spec: &RunSpec, connections: usize, streams: u64) -> Option<Duration> {
    let tick = spec.schedule.resolution();
    let one_request = |steps: &Vec<StepPlan>| {
        matches!(
            steps.as_slice(),
            [StepPlan::Http {
                repeat: 1,
                new_connection: false,
                h2: None,
                ..
            }]
        )
    };
    let length = spec.schedule.length_s();
    let planned: u64 = spec.planned.iter().sum();
    let per_tick = if length > 0.0 {
        planned as f64 / length * tick.as_secs_f64()
    } else {
        f64::INFINITY
    };
    let eligible = streams == 1
        && matches!(spec.target, Endpoint::Http(_, None))
        && spec.dynamic.is_none()
        && !tick.is_zero()
        && spec.types.iter().all(one_request)
        && per_tick >= 1.0
        && connections as f64 >= TICKED_CONNECTIONS_PER_SLOT * per_tick;
    eligible.then_some(tick)
}

/// One connection of a constant-rate pool carrying `streams` slots at once (HTTP/2): opened
/// once and counted once, each stream taking slots from the queue like a connection of its
/// own. A stream whose connection fails opens one of its own.
pub(super) async fn pooled_streams(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    slots: Arc<SlotQueue>,
    connection: u64,
    streams: u64,
    stop: CancellationToken,
) {
    let link = open_shared(&spec, &rec, connection).await;
    let loops = (0..streams).map(|_| {
        let conn = stream_handle(link.as_ref(), &rec);
        pooled_loop(&spec, &rec, (&slots, None), connection, (conn, None), &stop)
    });
    futures::future::join_all(loops).await;
    drop(link);
}

/// The loop of [`pooled_connection`]: the next due slot's session on `conn` (opened on first
/// use when `None`), until the queue closes, `until` comes (a ramp's connection closing on
/// the way down) or the run stops.
async fn pooled_loop<'a>(
    spec: &RunSpec,
    rec: &'a Recorder,
    (slots, ticks): (&SlotQueue, Option<Arc<Ticks>>),
    connection: u64,
    (conn, until): (Option<Tracked<'a>>, Option<Instant>),
    stop: &CancellationToken,
) {
    let sleep = pin!(tokio::time::sleep_until(Instant::now()));
    let mut line = Line::new(conn, sleep);
    line.ticks = ticks;
    // When the connection's last session ended.
    let mut idle_from = None;
    // A stop aborts this loop's task (`execute`) once its graceful stop is over; the queue
    // closes when the arrivals end. A slot taken after the stop is never started.
    while let Some((intended, phase, index, kind)) = next_slot(slots, until).await {
        if stop.is_cancelled() {
            rec.drop_arrivals(phase, 1);
            break;
        }
        // Idle until now, not until the slot's time: a slot taken late has left the
        // connection idle for longer.
        if let Some(t) = idle_from {
            forget_if_gone(&mut line.conn, || {
                Instant::now().saturating_duration_since(t)
            });
        }
        let at = At {
            intended,
            plan: false,
            phase,
            index,
            connection,
            kind,
            fresh: false,
        };
        idle_from = match session(spec, rec, at, stop, &mut line).await {
            Ended::Ran(t) => Some(t),
            Ended::Exhausted => idle_from,
        };
    }
    drop(line);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    /// A constant-rate pool reads at ticks only where that cannot cost it: one static
    /// HTTP/1.1 request per session over plain TCP, arrivals in ticks, a slot a tick or
    /// more, and eight connections for each slot of a tick.
    #[tokio::test]
    async fn a_pool_reads_at_ticks_only_where_it_has_room() {
        let ms = Duration::from_millis;
        let cases = [
            ("rate: 5000, connections: 50", "", "", Some(ms(1))),
            ("rate: 5000, connections: 39", "", "", None),
            ("rate: 1000, connections: 8", "", "", Some(ms(1))),
            ("rate: 999, connections: 50", "", "", None),
            (
                "rate: 100, connections: 20",
                "arrival_resolution: 20ms\n",
                "",
                Some(ms(20)),
            ),
            (
                "rate: 5000, connections: 50",
                "arrival_resolution: 0s\n",
                "",
                None,
            ),
            (
                "rate: 5000, connections: 50",
                "",
                "  - http: { path: /b }\n",
                None,
            ),
            ("rate: 5000, connections: 50", "", "    repeat: 2\n", None),
            (
                "rate: 5000, connections: 50",
                "",
                "    new_connection: true\n",
                None,
            ),
        ];
        for (load, extra, step, expect) in cases {
            let scenario = format!(
                "name: t\ntarget: http://127.0.0.1:1\n{extra}\
                 load: {{ model: constant, {load}, duration: 10s }}\n\
                 session:\n  - http: {{ path: / }}\n{step}"
            );
            let run = super::super::tests::one_shard(scenario).await;
            let spec = &run.workloads[0];
            let crate::runner::Mode::Constant {
                connections,
                streams,
                ..
            } = spec.mode
            else {
                panic!("{load}: not a constant load");
            };
            let got = super::ticked_pool(spec, connections, streams);
            assert_eq!(got, expect, "{load} {extra:?} {step:?}");
        }
    }

    /// A constant-rate run whose pool reads at ticks (20 ms here) completes every slot, ends
    /// when the last answer is read, and times each answer when it came, not when it was read
    /// at the tick after it: the target answers at once, so response times stay far below the
    /// tick. Real sockets and the real clock (the kernel's receive times are on it); 1 s.
    #[tokio::test]
    async fn a_pool_read_at_ticks_loses_nothing_and_times_answers_when_they_came() {
        use crate::runner::RunEnd;
        let addr = crate::ticked::tests::answering_target(20);
        let scenario = format!(
            "name: ticks\ntarget: http://{addr}\narrival_resolution: 20ms\nrequest_timeout: 5s\n\
             load: {{ model: constant, rate: 100, connections: 20, duration: 1s }}\n\
             session:\n  - http: {{ path: / }}\n"
        );
        let run = super::super::tests::one_shard(scenario).await;
        assert_eq!(
            super::ticked_pool(&run.workloads[0], 20, 1),
            Some(Duration::from_millis(20))
        );
        let (end, t) = run_to_end(run).await;
        assert_eq!(end, RunEnd::Completed);
        assert_eq!(t.counters.requests_completed, 100);
        assert_eq!(t.counters.requests_failed, 0);
        assert_eq!(t.counters.dropped_arrivals, 0);
        let p50 = t.service.value_at_quantile(0.5);
        assert!(p50 < 10_000, "service time p50 {p50} µs: timed when read");
    }

    /// A pool read at ticks whose target accepts connections and never answers (a listener
    /// that never accepts: the kernel completes the connects) counts every slot as a timeout
    /// or a drop, and its run ends once the last request has timed out: the connections that
    /// wait in the pool's epoll set leave it when they close. Real sockets; 0.3 s of load,
    /// 200 ms timeouts.
    #[tokio::test]
    async fn a_pool_read_at_ticks_ends_when_its_target_never_answers() {
        use crate::runner::RunEnd;
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap();
        let scenario = format!(
            "name: hung\ntarget: http://{addr}\narrival_resolution: 20ms\nrequest_timeout: 200ms\n\
             load: {{ model: constant, rate: 100, connections: 20, duration: 300ms }}\n\
             session:\n  - http: {{ path: / }}\n"
        );
        let run = super::super::tests::one_shard(scenario).await;
        assert!(super::ticked_pool(&run.workloads[0], 20, 1).is_some());
        let (end, t) = run_to_end(run).await;
        assert_eq!(end, RunEnd::Completed);
        let c = &t.counters;
        assert_eq!(c.requests_completed, 0);
        assert!(c.requests_failed >= 20, "{c:?}");
        assert_eq!(c.requests_failed + c.dropped_arrivals, 30, "{c:?}");
        drop(silent);
    }

    /// What [`closing_target`] answers an HTTP/1.1 request with.
    const HTTP_OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

    /// A keep-alive target on threads of its own that answers each read with `reply` and
    /// closes each connection once it has been idle for `idle_close` (its keep-alive timeout;
    /// `None`: never), counting the connections it accepted (at most 64, then it stops
    /// accepting).
    fn closing_target(
        idle_close: Option<Duration>,
        reply: &'static [u8],
    ) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for s in listener.incoming().take(64) {
                let mut s = s.unwrap();
                s.set_nodelay(true).unwrap();
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    s.set_read_timeout(idle_close).unwrap();
                    let mut buf = [0u8; 1024];
                    // A read that times out is the keep-alive timeout: the socket closes.
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(reply).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    /// A pool hands its slots to the connection idle the shortest time, so at a low rate one
    /// connection takes them all and sits idle between them, past a short keep-alive
    /// timeout (30 ms here). A connection idle that long is checked before it is used: one
    /// the server closed is opened again instead of failing its request, and one still open
    /// is kept. Both reading paths: by the reactor (4/s, 250 ms apart) and at ticks (100 ms
    /// ticks, 10/s: one or two connections, each idle about a tick or more). Real sockets and the
    /// real clock; 1 s each.
    #[tokio::test]
    async fn a_pooled_connection_the_server_closed_while_idle_is_opened_again() {
        use crate::runner::RunEnd;
        use std::sync::atomic::Ordering;
        let ms = Duration::from_millis;
        let cases = [
            ("", "rate: 4", None, Some(ms(30)), 4..=4),
            ("", "rate: 4", None, None, 1..=1),
            (
                "arrival_resolution: 100ms\n",
                "rate: 10",
                Some(ms(100)),
                Some(ms(30)),
                10..=10,
            ),
            (
                "arrival_resolution: 100ms\n",
                "rate: 10",
                Some(ms(100)),
                None,
                1..=2,
            ),
        ];
        for (extra, rate, tick, idle_close, opened) in cases {
            let (addr, accepted) = closing_target(idle_close, HTTP_OK);
            let scenario = format!(
                "name: idle\ntarget: http://{addr}\n{extra}request_timeout: 2s\n\
                 load: {{ model: constant, {rate}, connections: 8, duration: 1s }}\n\
                 session:\n  - http: {{ path: / }}\n"
            );
            let run = super::super::tests::one_shard(scenario).await;
            assert_eq!(super::ticked_pool(&run.workloads[0], 8, 1), tick, "{rate}");
            let planned = run.workloads[0].planned.iter().sum::<u64>();
            let (end, t) = run_to_end(run).await;
            let c = &t.counters;
            let case = format!("{rate} {tick:?} {idle_close:?}: {c:?}");
            assert_eq!(end, RunEnd::Completed, "{case}");
            assert_eq!(c.requests_completed, planned, "{case}");
            assert_eq!(c.requests_failed, 0, "{case}");
            let accepted = accepted.load(Ordering::SeqCst);
            assert!(opened.contains(&accepted), "{accepted} opened: {case}");
        }
    }

    /// An HTTP/2 (h2c) target on a thread of its own that ends each connection with a GOAWAY
    /// once it has been idle for `idle_close` (`None`: never), counting the connections it
    /// accepted (at most 64).
    fn closing_h2_target(
        idle_close: Option<Duration>,
    ) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                for _ in 0..64 {
                    let Ok((tcp, _)) = listener.accept().await else {
                        return;
                    };
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    // Without it, Nagle holds the answer while the SETTINGS ack before it waits
                    // for the client's delayed ACK: 40 ms a request.
                    tcp.set_nodelay(true).unwrap();
                    tokio::spawn(async move {
                        let Ok(mut conn) = h2::server::handshake(tcp).await else {
                            return;
                        };
                        let forever = Duration::from_secs(3600);
                        loop {
                            let next = conn.accept();
                            match tokio::time::timeout(idle_close.unwrap_or(forever), next).await {
                                Ok(Some(Ok((_, mut respond)))) => {
                                    let ok = http::Response::new(());
                                    let _ = respond.send_response(ok, true);
                                }
                                Ok(_) => return,
                                // Idle for its timeout: a GOAWAY, then the end.
                                Err(_) => {
                                    conn.graceful_shutdown();
                                    while let Some(Ok(_)) = conn.accept().await {}
                                    return;
                                }
                            }
                        }
                    });
                }
            });
        });
        (addr, accepted)
    }

    /// A closed connection sits idle through its sessions' think times, here 100 ms against a
    /// keep-alive timeout of 30 ms: after such a pause it is checked before it is used, and one
    /// the server closed is opened again instead of failing the next request (one still open
    /// is kept). HTTP/1.1, HTTP/2 (whose connection is ended by a GOAWAY) and a raw `tcp://`
    /// stream. Two connections, a request and a think time per session; real sockets and the
    /// real clock, 1 s each. What is asserted holds at any speed: every request completed,
    /// none failed, and a connection opened per session exactly when the server closes idle
    /// ones; the count of sessions is bounded, not judged as a rate.
    #[tokio::test]
    async fn a_closed_connection_the_server_closed_during_a_think_time_is_opened_again() {
        use crate::runner::RunEnd;
        use std::sync::atomic::Ordering;
        let ms = Duration::from_millis;
        let http = "  - http: { path: / }\n";
        let tcp = "  - tcp: { send: { text: hi }, framing: { fixed: 2 } }\n";
        let cases = [
            ("http", "", http, Some(ms(30))),
            ("http", "", http, None),
            ("http", "http_version: \"2\"\n", http, Some(ms(30))),
            ("http", "http_version: \"2\"\n", http, None),
            ("tcp", "", tcp, Some(ms(30))),
            ("tcp", "", tcp, None),
        ];
        for (scheme, version, step, idle_close) in cases {
            let (addr, accepted) = match (scheme, version) {
                ("tcp", _) => closing_target(idle_close, b"ok"),
                (_, "") => closing_target(idle_close, HTTP_OK),
                _ => closing_h2_target(idle_close),
            };
            let scenario = format!(
                "name: think\ntarget: {scheme}://{addr}\n{version}request_timeout: 2s\n\
                 load: {{ model: closed, connections: 2, duration: 1s }}\n\
                 session:\n{step}  - think_time: 100ms\n"
            );
            let run = super::super::tests::one_shard(scenario).await;
            let (end, t) = run_to_end(run).await;
            let c = &t.counters;
            let case = format!("{scheme} {version}{idle_close:?}: {c:?}");
            assert_eq!(end, RunEnd::Completed, "{case}");
            assert_eq!(c.requests_failed, 0, "{case}");
            // A connection runs a session (a request and a think time of 100 ms) back to back
            // for 1 s: at most eleven whatever the speed, and at least two however slow the
            // machine, so at least one request followed a think time and its check.
            assert!((4..=22).contains(&c.requests_completed), "{case}");
            let accepted = accepted.load(Ordering::SeqCst) as u64;
            match idle_close {
                // A connection per session: each was closed during the think time before it.
                Some(_) => assert_eq!(accepted, c.requests_completed, "{case}"),
                None => assert_eq!(accepted, 2, "{case}"),
            }
        }
    }

    /// A constant-rate pool stops starting queued slots one request timeout after its
    /// schedule's end, at most `LATE_START_LIMIT` after it; what is still queued then is
    /// counted dropped with its phase, and the queue refuses later slots. Paused clock.
    #[tokio::test(start_paused = true)]
    async fn slots_still_queued_after_the_cutoff_are_dropped() {
        use crate::pool::{Refused, SlotQueue};
        use tokio::time::Instant;
        let limit = stampede_core::plan::LATE_START_LIMIT;
        let t0 = Instant::now();
        for (timeout, window) in [("300ms", Duration::from_millis(300)), ("1h", limit)] {
            let scenario = format!(
                "name: late\ntarget: http://127.0.0.1:1\nrequest_timeout: {timeout}\n\
                 load: {{ model: constant, rate: 10, connections: 1, duration: 2s }}\n\
                 session:\n  - http: {{ path: / }}\n"
            );
            let run = super::super::tests::one_shard(scenario).await;
            let cutoff = super::late_start_cutoff(&run.workloads[0], t0);
            assert_eq!(
                cutoff,
                Some(t0 + Duration::from_secs(2) + window),
                "{timeout}"
            );
        }
        let slots = SlotQueue::new(16);
        for (i, phase) in [0, 1, 1].into_iter().enumerate() {
            slots.push((t0, phase, i as u64, 0)).unwrap();
        }
        let dropped = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = dropped.clone();
        let end = tokio::spawn(super::end_queue_at(
            slots.clone(),
            t0 + Duration::from_secs(1),
            move |phase| seen.lock().unwrap().push(phase),
        ));
        // Before the cutoff the pool still takes what is queued.
        tokio::time::sleep(Duration::from_millis(999)).await;
        assert_eq!(slots.pop().await.map(|s| s.2), Some(0));
        assert!(dropped.lock().unwrap().is_empty());
        end.await.unwrap();
        assert_eq!(Instant::now(), t0 + Duration::from_secs(1));
        assert_eq!(*dropped.lock().unwrap(), [1, 1]);
        assert_eq!(slots.push((t0, 0, 3, 0)), Err(Refused::Closed));
        assert_eq!(slots.pop().await, None);
    }

    /// A constant-rate pool whose target never answers ends one request timeout after its
    /// schedule, not when the last queued slot has had its turn: two connections, 50 slots in
    /// 0.5 s and 300 ms timeouts would serve the queue for 7.5 s; instead the slots still
    /// queued at 0.8 s are dropped, and the run ends once the requests in flight then have
    /// timed out. Real sockets (a listener that never accepts: the kernel completes the
    /// connects).
    #[tokio::test]
    async fn a_pool_whose_target_hangs_drops_its_queue_after_the_schedule() {
        use crate::runner::RunEnd;
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap();
        let scenario = format!(
            "name: hung\ntarget: http://{addr}\nrequest_timeout: 300ms\n\
             load: {{ model: constant, rate: 100, connections: 2, duration: 500ms }}\n\
             session:\n  - http: {{ path: / }}\n"
        );
        let run = super::super::tests::one_shard(scenario).await;
        assert_eq!(super::ticked_pool(&run.workloads[0], 2, 1), None);
        let started = std::time::Instant::now();
        let (end, t) = run_to_end(run).await;
        let took = started.elapsed();
        assert_eq!(end, RunEnd::Completed);
        assert!(took < Duration::from_secs(3), "the run took {took:?}");
        let c = &t.counters;
        assert_eq!(c.requests_completed, 0);
        // Two at 0, two at 0.3 s and two at 0.6 s time out; a slow machine may start fewer.
        assert!((2..=8).contains(&c.requests_failed), "{c:?}");
        assert_eq!(c.requests_failed + c.dropped_arrivals, 50, "{c:?}");
        drop(silent);
    }

    /// Executes `run` to its end (within 20 s): how it ended, and its progress added up.
    async fn run_to_end(
        run: crate::runner::plan::ShardRun,
    ) -> (crate::runner::RunEnd, stampede_core::stats::SparseStats) {
        let (out, mut messages) = tokio::sync::mpsc::unbounded_channel();
        let stop = tokio_util::sync::CancellationToken::new();
        let start = tokio::time::Instant::now();
        let run = crate::runner::execute(Arc::new(run), start, out, stop);
        let end = tokio::time::timeout(Duration::from_secs(20), run)
            .await
            .expect("the run ended within 20 s");
        let mut total: Option<stampede_core::stats::SparseStats> = None;
        while let Ok(m) = messages.try_recv() {
            if let Some(stampede_proto::v1::agent_message::Msg::Progress(p)) = m.msg {
                for w in &p.samples {
                    let (_, s) = stampede_proto::convert::sample_from_wire("s", w, 1).unwrap();
                    match total.as_mut() {
                        Some(t) => t.add(&s),
                        None => total = Some(s),
                    }
                }
            }
        }
        (end, total.expect("progress was sent"))
    }
}
