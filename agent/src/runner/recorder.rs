//! The interval recorder of a shard: what its sessions record, per phase, into stats that are
//! swapped out and encoded as one Progress message per interval, outside the lock the sessions
//! take.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use stampede_core::stats::Stats;
use stampede_proto::convert::sample_to_wire;
use stampede_proto::v1;
use tokio::time::Instant;

/// One phase's interval stats, allocated when the phase first records something.
pub(super) type Slot = Option<Box<Stats>>;

/// One session's place in [`Recorder::in_flight`], given back on drop.
pub(super) struct InFlight<'a>(pub(super) &'a Recorder);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The interval recorder: a [`Stats`] per phase, double-buffered so the ticker encodes
/// outside the lock.
///
/// A `Stats` is (3 + 2 × request steps) dense histograms of 184 KiB, so a slot is allocated
/// only when its phase first records something and freed at the first flush that finds it
/// empty: a run of 100 phases × 20 steps holds the one or two phases running now (twice, for
/// the double buffer), not 100.
#[derive(Debug)]
pub struct Recorder {
    active: Mutex<Vec<Slot>>,
    steps: usize,
    pub in_flight: AtomicUsize,
    /// Connections open, their per-interval peak and how many were opened.
    pub connections: crate::net::ConnGauge,
}

#[cfg(test)]
thread_local! {
    /// How many times [`Recorder::with`] took the lock on this thread (what the sessions'
    /// tests count, on their one-thread runtime).
    pub(super) static TAKES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Recorder {
    pub fn new(phases: usize, steps: usize) -> Self {
        Self {
            active: Mutex::new(empty_buffers(phases)),
            steps,
            in_flight: AtomicUsize::new(0),
            connections: crate::net::ConnGauge::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Slot>> {
        // A panic while holding the lock cannot leave the counters half-written in a way
        // that matters more than losing the run's data, so keep going.
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `f` to the phase's stats.
    #[inline]
    pub fn with<R>(&self, phase: u32, f: impl FnOnce(&mut Stats) -> R) -> Option<R> {
        #[cfg(test)]
        TAKES.with(|t| t.set(t.get() + 1));
        let mut slots = self.lock();
        let slot = slots.get_mut(phase as usize)?;
        Some(f(slot.get_or_insert_with(|| {
            Box::new(Stats::with_steps(self.steps))
        })))
    }

    /// Swaps the active buffers with `spare` (which must be reset), returning the filled ones
    /// in `spare`, with the interval's connection figures in one phase's stats (connections
    /// belong to no phase; one sample carries them so that phases never add up one peak twice):
    /// the first phase that recorded, or phase 0 when none did.
    pub fn swap(&self, spare: &mut Vec<Slot>) {
        std::mem::swap(&mut *self.lock(), spare);
        let (opened, peak) = self.connections.take_interval();
        if opened == 0 && peak == 0 {
            return;
        }
        let steps = self.steps;
        let carrier = match spare.iter().position(Option::is_some) {
            Some(i) => spare.get_mut(i),
            None => spare.first_mut(),
        };
        if let Some(slot) = carrier {
            let s = slot.get_or_insert_with(|| Box::new(Stats::with_steps(steps)));
            s.counters.connections_opened += opened;
            s.counters.peak_open_connections = s.counters.peak_open_connections.max(peak);
        }
    }

    /// Phases holding an allocated [`Stats`] in the active buffer.
    pub fn allocated(&self) -> usize {
        self.lock().iter().filter(|s| s.is_some()).count()
    }
}

/// The recorder's buffers: one empty slot per phase, nothing allocated.
pub(super) fn empty_buffers(phases: usize) -> Vec<Slot> {
    (0..phases).map(|_| None).collect()
}

/// Builds the Progress message for one interval from filled buffers, then resets the slots
/// that had data (their phase is likely to record again) and frees the ones that had none.
pub(super) fn progress(
    run_id: &str,
    interval: u64,
    filled: &mut [Slot],
    open: u64,
) -> v1::AgentMessage {
    let samples = filled
        .iter()
        .enumerate()
        .filter_map(|(phase, s)| Some((phase, s.as_deref()?)))
        .filter(|(_, s)| !s.is_empty())
        .filter_map(|(phase, s)| match sample_to_wire(phase as u32, s) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::error!(error = %e, "dropping an interval sample that cannot be encoded");
                None
            }
        })
        .collect();
    for slot in filled.iter_mut() {
        match slot {
            Some(s) if !s.is_empty() => s.reset(),
            _ => *slot = None,
        }
    }
    v1::AgentMessage {
        msg: Some(v1::agent_message::Msg::Progress(v1::Progress {
            run_id: run_id.to_string(),
            interval,
            samples,
            open_connections: open,
        })),
    }
}

/// The interval of the final flush at `elapsed` since T0, given that intervals before `next`
/// were sent: the one that started at least half an interval ago.
pub(super) fn final_interval(elapsed: Duration, interval: Duration, next: u64) -> u64 {
    let half_back = elapsed.saturating_sub(interval / 2);
    ((half_back.as_nanos() / interval.as_nanos().max(1)) as u64).max(next)
}

pub(super) fn interval_index(t0: Instant, interval: Duration) -> u64 {
    let elapsed = Instant::now().saturating_duration_since(t0);
    (elapsed.as_nanos() / interval.as_nanos().max(1)) as u64
}
