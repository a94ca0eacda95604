//! Runs one shard: starts each workload's load model from one T0 (the open model's sessions
//! at their intended times, the closed and constant models' connection tasks), ships interval
//! data, and stops it all when told. What one workload starts, by its model, is in `start`;
//! the compiled plan in `plan`; the connection tasks of the closed and constant models in
//! `models`; what one session does in `session`; a connection's request timer in `deadline`;
//! what the sessions record, and how an interval is shipped, in `recorder`.

use std::sync::Arc;

use stampede_proto::v1;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

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
mod start;
pub(crate) mod stop;

pub use endpoints::{EndpointSet, EndpointSlot};
use models::drop_queued;
pub use plan::{Away, Endpoint, Link, Mode, RunSpec, ShardRun, StepPlan};
pub use recorder::{empty_buffers, progress, Recorder, Slot};
use recorder::{final_interval, interval_index, send_parts};
use start::start_workload;

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
    for set in run
        .workloads
        .iter()
        .flat_map(|w| std::iter::once(&w.endpoints).chain(w.away.iter().map(|a| &a.endpoints)))
    {
        if !sets.iter().any(|s| Arc::ptr_eq(s, set)) {
            sets.push(set.clone());
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
    let load_stop = stop::Stop::new(stop.clone());

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
            &load_stop,
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
        let (stop, grace) = (load_stop.clone(), run.graceful_stop);
        tokio::spawn(async move {
            // Also what sets the flag the sessions read before each request.
            stop.fired().await;
            tokio::time::sleep(grace).await;
            for task in connections {
                task.abort();
            }
        })
    };
    for arrivals in loops {
        if arrivals.await.is_err() {
            tracing::error!("an arrival loop panicked; stopping the run");
            load_stop.stop();
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

/// A session's connection, counted in the run's [`crate::net::ConnGauge`] while it lives.
type Tracked<'a> = crate::net::Tracked<'a, Link>;

#[cfg(test)]
mod ramp_tests;

#[cfg(test)]
mod tests;
