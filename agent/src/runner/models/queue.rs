//! A constant-rate pool's slot queue at its edges: the bound on what it holds, and the cutoff
//! past which what is still queued is dropped. Apart from the connections that take from it,
//! as what these drop is counted and never started.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::pool::{RateSlot, Refused, SlotQueue};
use crate::runner::RunSpec;

/// Most constant-rate slots waiting for a free connection. Slots queue while every connection
/// is busy; against a target that stalls, they would pile up at the scheduled rate (1e6/s for
/// a minute is 2 GB). Past this bound (about 24 MiB of slots, seconds of backlog at any rate a
/// pool keeps up with) a slot is dropped and counted, and the report shows the generator fell
/// behind.
pub(in crate::runner) const MAX_QUEUED_SLOTS: usize = 1 << 20;

/// Queues `slot` for the pool; false when it was dropped (queue full, or the pool is gone).
/// Warns once per run when the queue first overflows.
pub(in crate::runner) fn enqueue(slots: &SlotQueue, slot: RateSlot, warned: &mut bool) -> bool {
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
pub(in crate::runner) fn late_start_cutoff(spec: &RunSpec, t0: Instant) -> Option<Instant> {
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
pub(in crate::runner) async fn end_queue_at(
    slots: Arc<SlotQueue>,
    at: Instant,
    dropped: impl FnMut(u32),
) {
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
pub(in crate::runner) fn drop_queued(slots: &SlotQueue, mut dropped: impl FnMut(u32)) -> usize {
    let left = slots.close_and_take();
    for &(_, phase, _, _) in &left {
        dropped(phase);
    }
    left.len()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::runner::models::tests::run_to_end;

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
            let run = crate::runner::tests::one_shard(scenario).await;
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
        let run = crate::runner::tests::one_shard(scenario).await;
        assert_eq!(
            crate::runner::models::ticked_pool(&run.workloads[0], 2, 1),
            None
        );
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
}
