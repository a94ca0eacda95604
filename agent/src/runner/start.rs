//! Starts one workload's load by its model: the arrival loop, the connection tasks, and a
//! constant-rate pool's slot queue and cutoff. Apart from `execute`, which only waits for and
//! ends what this starts, so the run reads whole without the models' details.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::models::{
    closed_connection, closed_streams, end_queue_at, enqueue, late_start_cutoff, pooled_connection,
    pooled_streams, ramped_pooled_connection, ticked_pool, MAX_QUEUED_SLOTS,
};
use super::recorder::InFlight;
use super::session::{session, At, Boxed, Http1Path, Inline, Line};
use super::stop::Stop;
use super::{Mode, Recorder, RunSpec};
use crate::pool::{Closer, SlotQueue};

/// What [`start_workload`] started that `execute` waits for or ends.
pub(super) struct Started {
    /// The arrival loop (open and constant models).
    pub(super) arrivals: Option<tokio::task::JoinHandle<()>>,
    /// A constant-rate pool's slot queue: a stop counts what it still holds as dropped.
    pub(super) queue: Option<Arc<SlotQueue>>,
    /// The task that ends that queue one request timeout after the schedule
    /// ([`end_queue_at`]), aborted once the pool has ended.
    pub(super) cutoff: Option<tokio::task::JoinHandle<()>>,
}

/// Starts one workload's load from `t0` plus its start offset: its arrival loop (open and
/// constant models, on a thread of its own) and its connections (closed and constant), whose
/// tasks go to `tasks` for a stop to abort.
pub(super) fn start_workload(
    spec: &Arc<RunSpec>,
    rec: &Arc<Recorder>,
    tracker: &TaskTracker,
    (t0, graceful_stop): (Instant, std::time::Duration),
    stop: &Stop,
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
                            let mut running = std::pin::pin!(session::<Inline>(
                                &spec, &rec, at, &stop, &mut line
                            ));
                            let stopped = tokio::select! {
                                biased;
                                () = stop.fired() => true,
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
            // Without static HTTP/1.1 steps, a session's task boxes that exchange and is a size
            // class smaller ([`Http1Path`]).
            let boxed = !spec.has_static_http1();
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
                    if boxed {
                        tracker.spawn(ramped_closed::<Boxed>(spec, rec, t0, spans, stripe, stop))
                    } else {
                        tracker.spawn(ramped_closed::<Inline>(spec, rec, t0, spans, stripe, stop))
                    }
                } else if streams > 1 {
                    tracker.spawn(closed_streams(
                        spec,
                        rec,
                        (t0, t0 + duration),
                        stripe,
                        streams,
                        stop,
                    ))
                } else if boxed {
                    let end = t0 + duration;
                    tracker.spawn(closed_connection::<Boxed>(spec, rec, t0, end, stripe, stop))
                } else {
                    let end = t0 + duration;
                    tracker.spawn(closed_connection::<Inline>(
                        spec, rec, t0, end, stripe, stop,
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

/// A ramped closed connection: open for each of its `spans` of the run (from `t0`) in turn.
async fn ramped_closed<P: Http1Path>(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    t0: Instant,
    spans: Vec<(std::time::Duration, std::time::Duration)>,
    stripe: (u64, u64),
    stop: Stop,
) {
    for (from, to) in spans {
        let (spec, rec, stop) = (spec.clone(), rec.clone(), stop.clone());
        closed_connection::<P>(spec, rec, t0 + from, t0 + to, stripe, stop).await;
    }
}
