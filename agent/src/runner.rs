//! Runs one shard: starts each workload's load model from one T0 (the open model's sessions
//! at their intended times, the closed and constant models' connection tasks), ships interval
//! data, and stops it all when told. The compiled plan is in `plan`; the connection tasks of
//! the closed and constant models in `models`; what one session does in `session`; a connection's request timer in `deadline`; what the
//! sessions record, and how an interval is shipped, in `recorder`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use stampede_proto::v1;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::pool::{Closer, SlotQueue};

#[cfg(test)]
mod books;
mod connects;
mod deadline;
mod endpoints;
mod models;
mod plan;
mod recorder;
mod samples;
mod session;

pub use endpoints::{EndpointSet, EndpointSlot};
use models::{
    closed_connection, closed_streams, drop_queued, end_queue_at, enqueue, late_start_cutoff,
    pooled_connection, pooled_streams, ramped_pooled_connection, ticked_pool, MAX_QUEUED_SLOTS,
};
pub use plan::{Endpoint, Link, Mode, RunSpec, ShardRun, StepPlan};
pub use recorder::{empty_buffers, progress, Recorder, Slot};
use recorder::{final_interval, interval_index, send_parts, InFlight};
#[cfg(test)]
use session::{last_on_connection, think};
use session::{session, At, Line};

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// Every workload ran its schedule to the end.
    Completed,
    /// The run's stop token was cancelled first (an abort, a lapsed lease).
    Stopped,
}

/// Runs the shard from `t0` until every workload's schedule is done and every session has
/// finished, or until `stop` fires. Progress and Done go to `out`.
pub async fn execute(
    run: Arc<ShardRun>,
    t0: Instant,
    out: mpsc::UnboundedSender<v1::AgentMessage>,
    stop: CancellationToken,
) -> RunEnd {
    // One set per target, shared by the workloads that name it.
    let mut sets: Vec<Arc<EndpointSet>> = Vec::new();
    for w in &run.workloads {
        if !sets.iter().any(|s| Arc::ptr_eq(s, &w.endpoints)) {
            sets.push(w.endpoints.clone());
        }
    }
    let endpoints = endpoints::EndpointSets(sets);
    // The run's connection ramp (the scenario's load), whose stages its connects are timed by.
    let ramp = run
        .workloads
        .iter()
        .find_map(|w| w.ramp.as_ref().map(|(stages, _, _)| &stages[..]))
        .unwrap_or(&[]);
    let rec = Arc::new(
        Recorder::per_phase(run.phase_steps())
            .with_endpoints(endpoints)
            .with_samples(t0, run.samples, &run.masked, run.debug)
            .with_ramp(t0, ramp),
    );
    // A target name's addresses, followed while the run goes on.
    let followers: Vec<_> = run
        .follow
        .iter()
        .map(|f| tokio::spawn(crate::resolve::follow(f.clone(), stop.clone())))
        .collect();
    let tracker = TaskTracker::new();

    // The interval ticker.
    let ticker_stop = CancellationToken::new();
    let ticker = {
        let (rec, spec, out, ticker_stop) =
            (rec.clone(), run.clone(), out.clone(), ticker_stop.clone());
        tokio::spawn(async move {
            let mut spare = empty_buffers(spec.phases);
            let mut tick = tokio::time::interval_at(t0 + spec.interval, spec.interval);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let mut next = 0u64;
            let mut watch = crate::selfwatch::SelfWatch::new();
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = ticker_stop.cancelled() => break,
                }
                let now_index = interval_index(t0, spec.interval);
                // Everything recorded so far belongs to intervals < now_index; send it as the
                // newest complete one.
                let interval = now_index.saturating_sub(1).max(next);
                rec.swap(&mut spare);
                let open = rec.connections.open();
                let mut msg = progress(&spec.run_id, interval, &mut spare, open, watch.sample());
                rec.endpoints.attach(&mut msg);
                rec.samples.attach(&mut msg);
                rec.connects.attach(&mut msg);
                if !send_parts(&out, msg) {
                    break;
                }
                next = interval + 1;
            }
            (spare, next)
        })
    };

    let mut queues = Vec::new();
    let mut cutoffs = Vec::new();
    let mut loops = Vec::new();
    let mut connections = Vec::new();
    for spec in &run.workloads {
        let started = start_workload(
            spec,
            &rec,
            &tracker,
            (t0, run.graceful_stop),
            &stop,
            &mut connections,
        );
        loops.extend(started.arrivals);
        queues.extend(started.queue);
        cutoffs.extend(started.cutoff);
    }
    // A stop aborts the connection tasks of the closed and constant models once their
    // graceful stop is over (sooner when they all end: the tracker's wait below). They live
    // for the whole run and do not wait on the stop themselves: that would lock the token's
    // one waiter list at every poll of every connection, on every core. Until then they start
    // no new request (a session reads the token before each) and their requests in flight
    // finish and are recorded; a request still in flight when its task is aborted is counted
    // interrupted as its session is dropped.
    let aborter = {
        let (stop, grace) = (stop.clone(), run.graceful_stop);
        tokio::spawn(async move {
            stop.cancelled().await;
            tokio::time::sleep(grace).await;
            for task in connections {
                task.abort();
            }
        })
    };
    for arrivals in loops {
        if arrivals.await.is_err() {
            tracing::error!("an arrival loop panicked; stopping the run");
            stop.cancel();
        }
    }
    tracker.close();
    tracker.wait().await;
    aborter.abort();
    for f in followers {
        f.abort();
    }
    // The pools have ended: their queues are empty and closed, unless the run stopped early.
    for cutoff in cutoffs {
        cutoff.abort();
    }
    for slots in queues {
        // Stopped early: slots still queued were never started.
        drop_queued(&slots, |phase| rec.drop_arrivals(phase, 1));
    }
    ticker_stop.cancel();
    let (mut spare, next) = match ticker.await {
        Ok(v) => v,
        Err(_) => (empty_buffers(run.phases), 0),
    };
    // Final flush: whatever was recorded since the last tick, in the interval most of it
    // belongs to. A run that ends just after a boundary (the tick for the interval that just
    // ended has not run yet) flushes that interval, not the new one it barely entered.
    let last = final_interval(
        Instant::now().saturating_duration_since(t0),
        run.interval,
        next,
    );
    rec.swap(&mut spare);
    let mut msg = progress(&run.run_id, last, &mut spare, 0, None);
    rec.endpoints.attach(&mut msg);
    rec.samples.attach(&mut msg);
    rec.connects.attach(&mut msg);
    send_parts(&out, msg);
    let end = if stop.is_cancelled() {
        RunEnd::Stopped
    } else {
        RunEnd::Completed
    };
    let _ = out.send(v1::AgentMessage {
        msg: Some(v1::agent_message::Msg::Done(v1::Done {
            run_id: run.run_id.clone(),
            last_interval: last,
            stopped_early: end == RunEnd::Stopped,
            // Filled in by the control loop, which knows why the run was stopped.
            reason: String::new(),
        })),
    });
    end
}

/// What [`start_workload`] started that `execute` waits for or ends.
struct Started {
    /// The arrival loop (open and constant models).
    arrivals: Option<tokio::task::JoinHandle<()>>,
    /// A constant-rate pool's slot queue: a stop counts what it still holds as dropped.
    queue: Option<Arc<SlotQueue>>,
    /// The task that ends that queue one request timeout after the schedule
    /// ([`models::end_queue_at`]), aborted once the pool has ended.
    cutoff: Option<tokio::task::JoinHandle<()>>,
}

/// Starts one workload's load from `t0` plus its start offset: its arrival loop (open and
/// constant models, on a thread of its own) and its connections (closed and constant), whose
/// tasks go to `tasks` for a stop to abort.
fn start_workload(
    spec: &Arc<RunSpec>,
    rec: &Arc<Recorder>,
    tracker: &TaskTracker,
    (t0, graceful_stop): (Instant, std::time::Duration),
    stop: &CancellationToken,
    tasks: &mut Vec<tokio::task::AbortHandle>,
) -> Started {
    let t0 = t0 + spec.start;
    // The arrival loop is a task paced by a timerfd (`arrivals`): tokio's timer has
    // millisecond granularity, the kernel's lands within microseconds of the intended time.
    let (mut queue, mut cutoff) = (None, None);
    let grace = graceful_stop;
    let arrivals = match spec.mode {
        Mode::Arrivals => {
            let (rec, spec, stop, tracker) =
                (rec.clone(), spec.clone(), stop.clone(), tracker.clone());
            Some(tokio::spawn(async move {
                crate::arrivals::run(&spec, &rec, (t0, None), &stop, |a, intended, kind| {
                    if rec.in_flight.load(Ordering::Relaxed) >= spec.capacity {
                        rec.drop_arrivals(a.phase, 1);
                        return;
                    }
                    rec.in_flight.fetch_add(1, Ordering::Relaxed);
                    let (rec, spec, stop) = (rec.clone(), spec.clone(), stop.clone());
                    tokio::spawn(tracker.track_future(async move {
                        // Released however the session ends, a panic included: a lost
                        // slot would shrink the capacity for the rest of the run.
                        let _slot = InFlight(&rec);
                        let sleep = std::pin::pin!(tokio::time::sleep_until(intended));
                        let mut line = Line::new(None, sleep);
                        let at = At {
                            intended,
                            plan: false,
                            phase: a.phase,
                            index: a.index,
                            connection: a.index,
                            kind,
                            fresh: false,
                        };
                        // One wait on the stop per session, not per request; after a stop the
                        // session's request in flight has the graceful stop to finish (it
                        // starts no other), and is counted interrupted if it does not.
                        {
                            let mut running =
                                std::pin::pin!(session(&spec, &rec, at, &stop, &mut line));
                            let stopped = tokio::select! {
                                biased;
                                _ = stop.cancelled() => true,
                                _ = running.as_mut() => false,
                            };
                            if stopped {
                                let _ = tokio::time::timeout(grace, running).await;
                            }
                        }
                        drop(line);
                    }));
                })
                .await
            }))
        }
        Mode::Closed {
            connections,
            duration,
            first,
            total,
            streams,
        } => {
            for c in 0..connections {
                let (rec, spec, stop) = (rec.clone(), spec.clone(), stop.clone());
                let stripe = (first + c as u64, total.max(1));
                let task = if let Some((stages, shard, shards)) = &spec.ramp {
                    // Open while the ramp is above this connection's rank: paced to the
                    // slope, closed (after its session in flight) on the way down.
                    let spans = stampede_core::ramp::spans(
                        stages,
                        stampede_core::ramp::rank(*shard, *shards, c as u64),
                    );
                    tracker.spawn(async move {
                        for (from, to) in spans {
                            let (spec, rec, stop) = (spec.clone(), rec.clone(), stop.clone());
                            closed_connection(spec, rec, t0 + from, t0 + to, stripe, stop).await;
                        }
                    })
                } else if streams > 1 {
                    tracker.spawn(closed_streams(
                        spec,
                        rec,
                        (t0, t0 + duration),
                        stripe,
                        streams,
                        stop,
                    ))
                } else {
                    tracker.spawn(closed_connection(
                        spec,
                        rec,
                        t0,
                        t0 + duration,
                        stripe,
                        stop,
                    ))
                };
                tasks.push(task.abort_handle());
            }
            None
        }
        Mode::Constant {
            connections,
            first,
            streams,
        } => {
            let slots = SlotQueue::new(MAX_QUEUED_SLOTS);
            // A ramping pool reads through the reactor: the tick reads are sized for a pool
            // that holds all its connections from T0.
            let tickable = spec.ramp.is_none();
            let ticks = ticked_pool(spec, connections, streams).filter(|_| tickable).and_then(|tick| {
                crate::ticked::Ticks::new(t0, tick)
                    .inspect_err(|e| {
                        tracing::warn!(error = %e, "no epoll set for the pool's tick reads; its answers are read by the reactor")
                    })
                    .ok()
                    .map(Arc::new)
            });
            for c in 0..connections as u64 {
                let (rec, spec, stop, slots) =
                    (rec.clone(), spec.clone(), stop.clone(), slots.clone());
                let task = if let Some((stages, shard, shards)) = &spec.ramp {
                    // Open while the ramp is above this connection's rank, as in a closed
                    // ramp; the slots follow the rate and go to whichever are open.
                    let spans = stampede_core::ramp::spans(
                        stages,
                        stampede_core::ramp::rank(*shard, *shards, c),
                    );
                    let ramp = (t0, spans, stampede_core::ramp::total(stages));
                    tracker.spawn(ramped_pooled_connection(
                        spec,
                        rec,
                        slots,
                        ramp,
                        first + c,
                        stop,
                    ))
                } else if streams > 1 {
                    tracker.spawn(pooled_streams(spec, rec, slots, first + c, streams, stop))
                } else {
                    let pool = (slots, ticks.clone());
                    tracker.spawn(pooled_connection(spec, rec, pool, first + c, stop))
                };
                tasks.push(task.abort_handle());
            }
            queue = Some(slots.clone());
            cutoff = late_start_cutoff(spec, t0).map(|at| {
                let (slots, rec) = (slots.clone(), rec.clone());
                tokio::spawn(end_queue_at(slots, at, move |phase| {
                    rec.drop_arrivals(phase, 1)
                }))
            });
            let (rec, spec, stop) = (rec.clone(), spec.clone(), stop.clone());
            Some(tokio::spawn(async move {
                // Closing the queue (however this task ends) lets the pool drain it and finish.
                let slots = Closer(slots);
                let mut warned = false;
                let paced = (t0, ticks.as_deref());
                crate::arrivals::run(&spec, &rec, paced, &stop, |a, intended, kind| {
                    if !enqueue(&slots.0, (intended, a.phase, a.index, kind), &mut warned) {
                        rec.drop_arrivals(a.phase, 1);
                    }
                })
                .await;
            }))
        }
    };
    Started {
        arrivals,
        queue,
        cutoff,
    }
}

/// A session's connection, counted in the run's [`crate::net::ConnGauge`] while it lives.
type Tracked<'a> = crate::net::Tracked<'a, Link>;

#[cfg(test)]
mod ramp_tests;

#[cfg(test)]
mod tests {
    use super::{empty_buffers, enqueue, final_interval, progress, InFlight, Recorder, SlotQueue};
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    /// The whole of `scenario` prepared as this agent's one shard, as an `Assign` would.
    pub(super) async fn one_shard(scenario: String) -> super::ShardRun {
        shard(&scenario, 0, 1).await
    }

    /// Shard `index` of `count` of `scenario`, as an `Assign` would prepare it.
    pub(super) async fn shard(scenario: &str, index: u32, count: u32) -> super::ShardRun {
        let assign = stampede_proto::v1::Assign {
            run_id: "r".into(),
            scenario: scenario.to_string(),
            shard_index: index,
            shard_count: count,
            seed: 1,
            interval_ms: 1000,
            ..Default::default()
        };
        let cfg = crate::AgentConfig::new("http://127.0.0.1:1", "a");
        crate::assign::prepare(&cfg, &assign, Default::default())
            .await
            .unwrap()
    }

    /// A stop ends a closed, a constant or an open load at once while every request hangs:
    /// the connection tasks of the first two, which do not wait on the stop themselves, are
    /// aborted, and open-model sessions wait on it once each, rather than being left to the
    /// request timeout. The target accepts four connections, reads a request on
    /// each and never answers (a blocking thread, which holds the paused clock still).
    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_hanging_connections_at_once() {
        use super::{execute, RunEnd};
        use stampede_proto::v1;
        use std::io::Read;
        use tokio::time::Instant;
        for load in [
            "load: { model: closed, connections: 4, duration: 30s }",
            "load: { model: constant, rate: 50, connections: 4, duration: 30s }",
            "phases: [{ duration: 30s, arrival_rate: 50 }]",
        ] {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let held = tokio::task::spawn_blocking(move || {
                (0..4)
                    .map(|_| {
                        let (mut s, _) = listener.accept().unwrap();
                        let mut request = [0u8; 16];
                        s.read_exact(&mut request).unwrap();
                        s
                    })
                    .collect::<Vec<_>>()
            });
            let scenario = format!(
                "name: hang\ntarget: http://{addr}\nrequest_timeout: 60s\ngraceful_stop: 0s\n{load}\n\
                 session:\n  - http: {{ path: / }}\n"
            );
            let run = one_shard(scenario).await;
            let (out, mut messages) = tokio::sync::mpsc::unbounded_channel();
            let stop = tokio_util::sync::CancellationToken::new();
            let run = tokio::spawn(execute(Arc::new(run), Instant::now(), out, stop.clone()));
            let held = held.await.unwrap();
            let stopped = Instant::now();
            stop.cancel();
            assert_eq!(run.await.unwrap(), RunEnd::Stopped, "{load}");
            assert!(
                stopped.elapsed() < Duration::from_millis(100),
                "{load}: stopped after {:?}",
                stopped.elapsed()
            );
            // Four requests were in flight, and none of them ended: with `graceful_stop: 0s`
            // they are counted interrupted at once.
            let (mut started, mut ended, mut interrupted) = (0, 0, 0);
            while let Ok(m) = messages.try_recv() {
                if let Some(v1::agent_message::Msg::Progress(p)) = m.msg {
                    for ph in &p.samples {
                        let c = ph.counters.as_ref().unwrap();
                        started += c.requests_started;
                        ended += c.requests_completed + c.requests_failed;
                        interrupted += c.requests_interrupted;
                    }
                }
            }
            // Open-model sessions go on arriving while the target holds the first four.
            assert!(
                started >= 4 && ended == 0 && interrupted == started,
                "{load}: {started} started, {ended} ended, {interrupted} interrupted"
            );
            drop(held);
        }
    }

    /// A closed session is counted as planned and started in the lock its first request's
    /// start takes, and as ended in the lock its last result takes: two recorder locks per
    /// request, with the same counts as before. The target answers three sessions of two
    /// requests (`/a`, then `/b`) on one kept-alive connection, 200 200, 200 500, 500, then
    /// holds the fourth session's first request until the run stops.
    #[tokio::test(start_paused = true)]
    async fn closed_sessions_are_counted_in_the_locks_of_their_requests() {
        use super::execute;
        use stampede_proto::v1;
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let held = tokio::task::spawn_blocking(move || {
            let (s, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(s.try_clone().unwrap());
            let mut out = s;
            for status in [200, 200, 200, 500, 500, 0] {
                // A request without a body: its head ends at the empty line.
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap() > 0 && !line.ends_with("\r\n\r\n") {}
                if status == 0 {
                    break;
                }
                write!(out, "HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n").unwrap();
            }
            out
        });
        let scenario = format!(
            "name: count\ntarget: http://{addr}\nrequest_timeout: 60s\n\
             load: {{ model: closed, connections: 1, duration: 30s }}\n\
             session:\n  - http: {{ path: /a }}\n  - http: {{ path: /b }}\n"
        );
        let run = one_shard(scenario).await;
        let (out, mut messages) = tokio::sync::mpsc::unbounded_channel();
        let stop = tokio_util::sync::CancellationToken::new();
        super::recorder::TAKES.with(|t| t.set(0));
        let task = tokio::spawn(execute(
            Arc::new(run),
            tokio::time::Instant::now(),
            out,
            stop.clone(),
        ));
        let held = held.await.unwrap();
        stop.cancel();
        task.await.unwrap();
        let mut c = v1::Counters::default();
        while let Ok(m) = messages.try_recv() {
            if let Some(v1::agent_message::Msg::Progress(p)) = m.msg {
                for s in p.samples {
                    let s = s.counters.unwrap();
                    c.sessions_planned += s.sessions_planned;
                    c.sessions_started += s.sessions_started;
                    c.sessions_completed += s.sessions_completed;
                    c.sessions_failed += s.sessions_failed;
                    c.requests_started += s.requests_started;
                    c.requests_completed += s.requests_completed;
                    c.requests_failed += s.requests_failed;
                    c.requests_interrupted += s.requests_interrupted;
                    c.sessions_interrupted += s.sessions_interrupted;
                }
            }
        }
        let counts = [
            c.sessions_planned,
            c.sessions_started,
            c.sessions_completed,
            c.sessions_failed,
            c.requests_started,
            c.requests_completed,
            c.requests_failed,
        ];
        assert_eq!(counts, [4, 4, 1, 2, 6, 3, 2]);
        // The hanging one is interrupted once the graceful stop (the request timeout, at most
        // 5 s) is over, with its session.
        assert_eq!((c.requests_interrupted, c.sessions_interrupted), (1, 1));
        // Five requests ended (two locks each) and one hangs (its start's lock, and its
        // interruption's).
        assert_eq!(super::recorder::TAKES.with(|t| t.get()), 12);
        drop(held);
    }

    /// A think time drawn from a range depends on the run seed and the arrival index only:
    /// a rerun pauses the same, whatever ran before.
    #[tokio::test(start_paused = true)]
    async fn think_times_are_drawn_from_the_seed_and_the_arrival() {
        use stampede_core::scenario::ThinkTime;
        use stampede_core::HumanDuration;
        let t = ThinkTime::Range {
            min: HumanDuration(Duration::from_secs(1)),
            max: HumanDuration(Duration::from_secs(3)),
        };
        let stop = tokio_util::sync::CancellationToken::new();
        let mut pauses = Vec::new();
        for (seed, index) in [(7, 3), (7, 3), (7, 4), (8, 3)] {
            let start = tokio::time::Instant::now();
            let mut rng = None;
            assert!(super::think(&t, &mut rng, (seed, index), &stop)
                .await
                .is_some());
            let first = start.elapsed();
            // The session's second think time continues its stream.
            assert!(super::think(&t, &mut rng, (seed, index), &stop)
                .await
                .is_some());
            pauses.push((first, start.elapsed() - first));
        }
        assert_eq!(pauses[0], pauses[1]);
        assert_ne!(pauses[0], pauses[2]);
        assert_ne!(pauses[0], pauses[3]);
        assert_ne!(pauses[0].0, pauses[0].1);
        for (a, b) in pauses {
            for d in [a, b] {
                assert!(
                    d >= Duration::from_secs(1) && d <= Duration::from_secs(3),
                    "{d:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_panicking_session_gives_its_in_flight_slot_back() {
        let rec = Arc::new(Recorder::new(1, 1));
        rec.in_flight.fetch_add(1, Ordering::Relaxed);
        let r = rec.clone();
        let task = tokio::spawn(async move {
            let _slot = InFlight(&r);
            panic!("a session bug");
        });
        assert!(task.await.unwrap_err().is_panic());
        assert_eq!(rec.in_flight.load(Ordering::Relaxed), 0);
    }

    fn vm_hwm_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            })
            .unwrap_or(0)
    }

    /// A run of 100 phases × 20 request steps: only the phases that record hold an `IntervalStats`
    /// (each is 43 dense histograms, 7.7 MiB), and they are freed after their last flush,
    /// so the recorder holds at most three phases per buffer (the running one, the previous
    /// one finishing, one awaiting its freeing flush), not 100 × 2 × 7.7 MiB = 1.5 GiB.
    #[test]
    fn the_recorder_allocates_only_phases_that_record() {
        let (phases, steps) = (100, 20);
        // Reset the peak RSS so VmHWM measures this test (best effort; other tests are small).
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let before = vm_hwm_kib();
        let rec = Recorder::new(phases, steps);
        let mut spare = empty_buffers(phases);
        let mut most = 0;
        let mut sent = 0u64;
        for phase in 0..phases as u32 {
            for interval in 0..2u64 {
                for i in 0..400u64 {
                    rec.with(phase, |s| {
                        s.record_start(50 + i);
                        s.record_success((i % 20) as usize, 1_000 + i * 37, 900 + i * 31);
                    });
                }
                if phase > 0 && interval == 0 {
                    // A session of the previous phase still finishing.
                    rec.with(phase - 1, |s| s.record_success(0, 5_000, 4_000));
                }
                most = most.max(rec.allocated());
                rec.swap(&mut spare);
                let msg = progress("r", u64::from(phase) * 2 + interval, &mut spare, 0, None);
                if let Some(stampede_proto::v1::agent_message::Msg::Progress(p)) = msg.msg {
                    sent += p.samples.len() as u64;
                }
            }
        }
        rec.swap(&mut spare);
        let _ = progress("r", 999, &mut spare, 0, None);
        rec.swap(&mut spare);
        let _ = progress("r", 1000, &mut spare, 0, None);
        assert!(most <= 3, "{most} phases allocated at once");
        assert_eq!(rec.allocated(), 0);
        assert!(spare.iter().all(Option::is_none));
        assert_eq!(sent, 100 * 2 + 99);
        let peak_mib = vm_hwm_kib().saturating_sub(before.min(vm_hwm_kib())) / 1024;
        let hwm_mib = vm_hwm_kib() / 1024;
        eprintln!("recorder 100 phases x 20 steps: VmHWM {hwm_mib} MiB (+{peak_mib} MiB)");
        assert!(hwm_mib < 200, "VmHWM {hwm_mib} MiB");
    }

    /// A full slot queue refuses (the caller counts the slot dropped) and the warning fires
    /// once; a closed one refuses too.
    #[test]
    fn a_refused_slot_is_reported_dropped() {
        let slots = SlotQueue::new(4);
        let mut warned = false;
        let slot = (tokio::time::Instant::now(), 0, 0, 0);
        let taken = (0..10)
            .filter(|_| enqueue(&slots, slot, &mut warned))
            .count();
        assert_eq!(taken, 4);
        assert!(warned);
        slots.close();
        assert!(!enqueue(&slots, slot, &mut warned));
    }

    /// A request asks the server to close exactly when the request after it on the same
    /// session loop opens a new connection (think times in between do not count).
    #[test]
    fn the_last_request_on_a_connection_is_known() {
        use super::{last_on_connection, StepPlan};
        use stampede_core::scenario::ThinkTime;
        use stampede_core::HumanDuration;
        let req = stampede_core::scenario::HttpRequest::default();
        let http = |new_connection| StepPlan::Http {
            ordinal: 0,
            request: crate::http1::PreparedRequest::new(&req, "h", ""),
            h2: None,
            expect: None,
            repeat: 1,
            new_connection,
        };
        let think = || StepPlan::Think(ThinkTime::Fixed(HumanDuration(Duration::from_secs(1))));
        // One step with a connection per request: every request is the last.
        let steps = [http(true)];
        assert!(last_on_connection(&steps, 0, false));
        assert!(last_on_connection(&steps, 0, true));
        // Kept-alive steps never close.
        let steps = [http(false), think(), http(false)];
        assert!(!last_on_connection(&steps, 0, false));
        assert!(!last_on_connection(&steps, 2, false));
        // A login on a new connection, then a request reusing it: only the second closes,
        // since the next session's login opens its own (across the think time).
        let steps = [http(true), http(false), think()];
        assert!(!last_on_connection(&steps, 0, false));
        assert!(last_on_connection(&steps, 1, false));
        assert!(!last_on_connection(&steps, 1, true));
    }

    #[test]
    fn the_final_flush_goes_to_the_interval_most_of_it_belongs_to() {
        let s = Duration::from_secs(1);
        let ms = Duration::from_millis;
        // Ended 10 ms after the 3 s boundary, before the tick for [2 s, 3 s) ran.
        assert_eq!(final_interval(ms(3010), s, 2), 2);
        // The tick for [2 s, 3 s) ran: what is left belongs to [3 s, 4 s).
        assert_eq!(final_interval(ms(3010), s, 3), 3);
        // Well into an interval.
        assert_eq!(final_interval(ms(3600), s, 3), 3);
        assert_eq!(final_interval(ms(2300), s, 2), 2);
        // A short run that ends before the first tick.
        assert_eq!(final_interval(ms(300), s, 0), 0);
    }
}
#[cfg(test)]
mod future_size {
    /// The size of the future `F` that `_f` returns, without running it.
    fn size_of_future<F>(_f: &dyn Fn() -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// A closed connection's task is allocated once per connection for the whole run: 10,000
    /// connections are 10,000 of them, so what its future holds across awaits (the connect,
    /// a TLS or h2 handshake, a think-time generator, a chunked body's reader) is boxed or
    /// kept out, and this keeps it that way. tokio aligns a task to 128 bytes: the release
    /// build's future of 896 bytes makes a task of 1,024 (it was 1,088 and 1,280 while the
    /// connection task, `session` and its `exchange` were `async fn`s, which hold their
    /// arguments twice). The connect's future (release: 120 bytes; 376 before it was a block and
    /// 176 while tokio's connect read SO_ERROR on every connection) is boxed, but
    /// all of a run's connections hold one at once while they connect.
    #[test]
    #[allow(unreachable_code)]
    fn a_connection_task_stays_small() {
        let task = size_of_future(&|| {
            super::closed_connection(
                unreachable!(),
                unreachable!(),
                unreachable!(),
                unreachable!(),
                unreachable!(),
                unreachable!(),
            )
        });
        let connect = size_of_future(&|| super::Link::open(unreachable!()));
        eprintln!("closed connection task {task} B, connect {connect} B");
        // 1,032 bytes in the test profile once an answer also carried a gRPC status and a
        // streamed reply's arrivals, and the endpoint became a followed slot (976 before).
        // The release build's figure, which sets the task's 128-byte step, is not re-measured.
        assert!(task <= 1056, "a closed connection's future is {task} bytes");
        // Held by every connection at once while a large closed run connects.
        assert!(connect <= 256, "connecting takes {connect} bytes");
    }
}
