//! The constant model's connection tasks: each takes the next due slot from the pool's queue,
//! and may read its answers at ticks. Apart from the closed model's, whose sessions are due
//! when the one before ends, not at a rate.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{open_shared, stream_handle};
use crate::pool::{RateSlot, SlotQueue};
use crate::runner::session::{forget_if_gone, session, At, Ended, Inline, Line};
use crate::runner::stop::Stop;
use crate::runner::{Endpoint, Recorder, RunSpec, StepPlan, Tracked};
use crate::ticked::Ticks;

/// One connection of a constant-rate pool (the run's connection `connection`): takes the next
/// due slot from the shared queue and runs the session for it, from the slot's intended time;
/// read at `ticks` when the pool reads at ticks ([`ticked_pool`]).
pub(in crate::runner) async fn pooled_connection(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    (slots, ticks): (Arc<SlotQueue>, Option<Arc<Ticks>>),
    connection: u64,
    stop: Stop,
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
pub(in crate::runner) async fn ramped_pooled_connection(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    slots: Arc<SlotQueue>,
    (t0, spans, last): (Instant, Vec<(Duration, Duration)>, Duration),
    connection: u64,
    stop: Stop,
) {
    for (from, to) in spans {
        tokio::time::sleep_until(t0 + from).await;
        if stop.is_stopped() {
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
pub(in crate::runner) fn ticked_pool(
    spec: &RunSpec,
    connections: usize,
    streams: u64,
) -> Option<Duration> {
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
pub(in crate::runner) async fn pooled_streams(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    slots: Arc<SlotQueue>,
    connection: u64,
    streams: u64,
    stop: Stop,
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
    stop: &Stop,
) {
    let sleep = pin!(tokio::time::sleep_until(Instant::now()));
    let mut line = Line::new(conn, sleep);
    line.ticks = ticks;
    // When the connection's last session ended.
    let mut idle_from = None;
    // A stop aborts this loop's task (`execute`) once its graceful stop is over; the queue
    // closes when the arrivals end. A slot taken after the stop is never started.
    while let Some((intended, phase, index, kind)) = next_slot(slots, until).await {
        if stop.is_stopped() {
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
        idle_from = match session::<Inline>(spec, rec, at, stop, &mut line).await {
            Ended::Ran(t) => Some(t),
            Ended::Exhausted => idle_from,
        };
    }
    drop(line);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::runner::models::tests::{closing_target, run_to_end, HTTP_OK};

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
            let run = crate::runner::tests::one_shard(scenario).await;
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
        let run = crate::runner::tests::one_shard(scenario).await;
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
        let run = crate::runner::tests::one_shard(scenario).await;
        assert!(super::ticked_pool(&run.workloads[0], 20, 1).is_some());
        let (end, t) = run_to_end(run).await;
        assert_eq!(end, RunEnd::Completed);
        let c = &t.counters;
        assert_eq!(c.requests_completed, 0);
        assert!(c.requests_failed >= 20, "{c:?}");
        assert_eq!(c.requests_failed + c.dropped_arrivals, 30, "{c:?}");
        drop(silent);
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
            let run = crate::runner::tests::one_shard(scenario).await;
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
}
