//! The interval recorder of a shard: what its sessions record, per phase, into stats that are
//! swapped out and encoded as one Progress message per interval, outside the lock the sessions
//! take.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use stampede_core::stats::IntervalStats;
use stampede_proto::convert::sample_to_wire;
use stampede_proto::v1;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// One phase's interval stats, allocated when the phase first records something.
pub type Slot = Option<Box<IntervalStats>>;

/// One session's place in [`Recorder::in_flight`], given back on drop.
pub(super) struct InFlight<'a>(pub(super) &'a Recorder);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The interval recorder: an [`IntervalStats`] per phase, double-buffered so the ticker
/// settles and encodes outside the lock.
///
/// An `IntervalStats` is 3 dense histograms of 184 KiB and a sparse entry per request step of
/// its phase's workload (about a hundred bytes until the step records; its histograms are
/// allocated by its first record and freed at each flush), so a slot is allocated only when
/// its phase first records something and freed at the first flush that finds it empty: a run
/// of 100 phases × 20 steps holds the one or two phases running now (twice, for the double
/// buffer), not 100, and a mix of 16 session types × 100 steps holds the steps its sessions
/// ran in the last interval, not 1,600 × 368 KiB.
///
/// The lock is striped, and the stripes cost memory only where there is contention. A
/// thread records into the first stripe until it once finds it held; from then on it records
/// into a spill stripe of its own (threads draw them in turn). An agent on one core, or one
/// whose workers seldom meet, fills (and allocates) the first stripe only; on a many-core
/// agent the workers that would have queued on one lock move apart, each to its own line.
/// The ticker swaps the first stripe out and merges the others into it.
#[derive(Debug)]
pub struct Recorder {
    stripes: Box<[Stripe]>,
    /// Request steps each phase's stats cover: up to the last of its workload's (steps are
    /// numbered across the run; a phase never records another workload's).
    steps: Box<[usize]>,
    /// Sessions started and not yet ended, read against the run's capacity.
    pub in_flight: AtomicUsize,
    /// Connections open, their per-interval peak and how many were opened.
    pub connections: crate::net::ConnGauge,
    /// The run's endpoints, whose figures go out with each interval (empty for a target that
    /// is one address).
    pub endpoints: super::endpoints::EndpointSets,
    /// The first failed requests of each step and error kind (off until [`Self::with_samples`]).
    pub samples: super::samples::SampleRecorder,
    /// Connect times per stage of the run's connection ramp (off until [`Self::with_ramp`]).
    pub connects: super::connects::StageConnects,
}

/// One lock of the recorder, on a cache line of its own (workers on other stripes do not
/// invalidate it).
#[derive(Debug)]
#[repr(align(128))]
struct Stripe(Mutex<Vec<Slot>>);

impl Stripe {
    fn lock(&self) -> MutexGuard<'_, Vec<Slot>> {
        // A panic while holding the lock cannot leave the counters half-written in a way
        // that matters more than losing the run's data, so keep going.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Most stripes a recorder has, whatever the cores.
const MAX_STRIPES: usize = 64;

/// Hands each thread its spill stripe, in turn.
static NEXT_SPILL: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's turn from [`NEXT_SPILL`], drawn on its first contended record; from then
    /// on it records into that spill stripe.
    static SPILL: Cell<Option<usize>> = const { Cell::new(None) };
}

#[cfg(test)]
thread_local! {
    /// How many times [`Recorder::with`] took a lock on this thread (what the sessions'
    /// tests count, on their one-thread runtime).
    pub(super) static TAKES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Recorder {
    /// A recorder with a stripe per core this process may run on, every phase covering
    /// `steps` request steps.
    pub fn new(phases: usize, steps: usize) -> Self {
        Self::per_phase(vec![steps; phases])
    }

    /// A recorder with a stripe per core, phase `p` covering `steps[p]` request steps.
    pub fn per_phase(steps: Vec<usize>) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::striped(steps, cores)
    }

    /// A recorder with `stripes` locks (at least 1, at most `MAX_STRIPES`, 64): what the
    /// recorder benchmark compares.
    pub fn with_stripes(phases: usize, steps: usize, stripes: usize) -> Self {
        Self::striped(vec![steps; phases], stripes)
    }

    fn striped(steps: Vec<usize>, stripes: usize) -> Self {
        let phases = steps.len();
        Self {
            stripes: (0..stripes.clamp(1, MAX_STRIPES))
                .map(|_| Stripe(Mutex::new(empty_buffers(phases))))
                .collect(),
            steps: steps.into_boxed_slice(),
            in_flight: AtomicUsize::new(0),
            connections: crate::net::ConnGauge::default(),
            endpoints: Default::default(),
            samples: Default::default(),
            connects: Default::default(),
        }
    }

    /// The same recorder timing connects per stage of the ramp of `stages` from `t0`.
    pub fn with_ramp(mut self, t0: Instant, stages: &[stampede_core::ramp::Stage]) -> Self {
        self.connects = super::connects::StageConnects::new(t0, stages);
        self
    }

    /// The same recorder sending the figures of the run's `endpoints` (a set per target) too.
    pub fn with_endpoints(mut self, endpoints: super::endpoints::EndpointSets) -> Self {
        self.endpoints = endpoints;
        self
    }

    /// The same recorder sampling failures from `t0` on, when `on`, and keeping the first
    /// `debug` requests for a debug print, `masked` values (the scenario's `${env:...}`
    /// values) written `***` in them.
    pub fn with_samples(mut self, t0: Instant, on: bool, masked: &[String], debug: u32) -> Self {
        self.samples = super::samples::SampleRecorder::new(t0, on, masked, debug);
        self
    }

    /// This thread's stripe: the first until the thread finds it held once, then its spill
    /// stripe for good (waited for when another thread shares it).
    fn lock(&self) -> MutexGuard<'_, Vec<Slot>> {
        #[cfg(test)]
        TAKES.with(|t| t.set(t.get() + 1));
        let spills = self.stripes.len() - 1;
        // One stripe (an agent on one core): no thread-local to read.
        if spills > 0 {
            if let Some(t) = SPILL.with(Cell::get) {
                return self.stripes[1 + t % spills].lock();
            }
        }
        let first = &self.stripes[0];
        match first.0.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) if spills == 0 => first.lock(),
            Err(TryLockError::WouldBlock) => {
                let t = NEXT_SPILL.fetch_add(1, Ordering::Relaxed);
                SPILL.with(|s| s.set(Some(t)));
                self.stripes[1 + t % spills].lock()
            }
        }
    }

    /// Applies `f` to the phase's stats.
    #[inline]
    pub fn with<R>(&self, phase: u32, f: impl FnOnce(&mut IntervalStats) -> R) -> Option<R> {
        let mut slots = self.lock();
        let slot = slots.get_mut(phase as usize)?;
        Some(f(slot.get_or_insert_with(|| self.fresh(phase as usize))))
    }

    /// Empty stats for `phase`, sized to its workload's steps.
    fn fresh(&self, phase: usize) -> Box<IntervalStats> {
        Box::new(IntervalStats::with_steps(
            self.steps.get(phase).copied().unwrap_or(0),
        ))
    }

    /// Counts `n` of the phase's planned sessions as dropped: never started.
    pub fn drop_arrivals(&self, phase: u32, n: u64) {
        self.with(phase, |s| s.counters_mut().dropped_arrivals += n);
    }

    /// Swaps the active buffers with `spare` (which must be reset), returning the filled ones
    /// in `spare`: the first stripe's, with what the other stripes hold merged in (they are
    /// reset, and their empty slots freed), and the interval's connection figures in one
    /// phase's stats (connections belong to no phase; one sample carries them so that phases
    /// never add up one peak twice): the first phase that recorded, or phase 0 when none did.
    pub fn swap(&self, spare: &mut Vec<Slot>) {
        std::mem::swap(&mut *self.stripes[0].lock(), spare);
        for stripe in &self.stripes[1..] {
            let mut slots = stripe.lock();
            for (phase, (from, into)) in slots.iter_mut().zip(spare.iter_mut()).enumerate() {
                match from {
                    Some(s) if !s.is_empty() => {
                        let into = into.get_or_insert_with(|| self.fresh(phase));
                        if let Err(e) = into.add(s) {
                            // Every stats of a run has the same histograms: cannot happen.
                            tracing::error!(error = %e, "an interval's stripe did not merge");
                        }
                        s.reset();
                    }
                    _ => *from = None,
                }
            }
        }
        let (opened, peak) = self.connections.take_interval();
        if opened == 0 && peak == 0 {
            return;
        }
        let carrier = spare.iter().position(Option::is_some).unwrap_or(0);
        if let Some(slot) = spare.get_mut(carrier) {
            let s = slot.get_or_insert_with(|| self.fresh(carrier));
            let c = s.counters_mut();
            c.connections_opened += opened;
            c.peak_open_connections = c.peak_open_connections.max(peak);
        }
    }

    /// Phases holding an allocated [`IntervalStats`] in the active buffers, all stripes together.
    pub fn allocated(&self) -> usize {
        self.stripes
            .iter()
            .map(|s| s.lock().iter().filter(|s| s.is_some()).count())
            .sum()
    }
}

/// The recorder's buffers: one empty slot per phase, nothing allocated.
pub fn empty_buffers(phases: usize) -> Vec<Slot> {
    (0..phases).map(|_| None).collect()
}

/// Builds the Progress message for one interval from filled buffers (what
/// [`Recorder::swap`] returned), then resets the slots that had data (their phase is likely to
/// record again) and frees the ones that had none.
pub fn progress(
    run_id: &str,
    interval: u64,
    filled: &mut [Slot],
    open: u64,
    resources: Option<v1::AgentResources>,
) -> v1::AgentMessage {
    // Settled here, outside the sessions' lock: the steps' histograms are added into the
    // run-wide ones once per interval (see `IntervalStats`), not recorded with every request.
    let samples = filled
        .iter_mut()
        .enumerate()
        .filter_map(|(phase, s)| Some((phase, s.as_deref_mut()?)))
        .filter(|(_, s)| !s.is_empty())
        .filter_map(|(phase, s)| {
            match s
                .settle()
                .map_err(|e| e.to_string())
                .and_then(|s| sample_to_wire(phase as u32, s).map_err(|e| e.to_string()))
            {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::error!(error = %e, "dropping an interval sample that cannot be encoded");
                    None
                }
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
            resources,
            endpoints: Vec::new(),
            failure_samples: Vec::new(),
            stage_connects: Vec::new(),
            debug: Vec::new(),
            ..Default::default()
        })),
    }
}

/// Sends one interval's Progress (what [`progress`] built, with what rides it), in as many
/// parts as it takes to fit what the controller decodes from an agent. False once the control
/// loop is gone.
pub(super) fn send_parts(
    out: &mpsc::UnboundedSender<v1::AgentMessage>,
    msg: v1::AgentMessage,
) -> bool {
    let p = match msg.msg {
        Some(v1::agent_message::Msg::Progress(p)) => p,
        other => return out.send(v1::AgentMessage { msg: other }).is_ok(),
    };
    let parts = stampede_proto::parts::split(p, stampede_proto::parts::PART_BYTES);
    if parts.len() > 1 {
        tracing::debug!(
            parts = parts.len(),
            "an interval too big for one message goes in parts"
        );
    }
    parts.into_iter().all(|part| {
        out.send(v1::AgentMessage {
            msg: Some(v1::agent_message::Msg::Progress(part)),
        })
        .is_ok()
    })
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

#[cfg(test)]
mod tests {
    use super::{empty_buffers, Recorder};

    /// A record that finds the first stripe held goes to a spill stripe instead of waiting,
    /// and its thread keeps to that stripe; the swap merges it into the interval, resets it,
    /// and frees it at the first swap that finds it empty. Uncontended records never
    /// allocate a spill stripe.
    #[test]
    fn a_contended_record_spills_and_is_merged_at_the_swap() {
        let rec = Recorder::with_stripes(2, 1, 4);
        rec.with(1, |s| s.record_success(0, 100, 90));
        assert_eq!(rec.allocated(), 1, "uncontended: the first stripe only");
        {
            let _held = rec.stripes[0].lock();
            rec.with(1, |s| s.record_success(0, 300, 200));
            rec.with(0, |s| s.counters_mut().sessions_planned += 2);
        }
        // The first stripe is free again, but this thread now records into its spill.
        rec.with(1, |s| s.record_success(0, 500, 400));
        assert_eq!(rec.allocated(), 3, "phase 1 twice, phase 0 in the spill");
        let mut spare = empty_buffers(2);
        rec.swap(&mut spare);
        let one = spare[1].as_mut().unwrap().settle().unwrap();
        assert_eq!(one.counters.requests_completed, 3);
        assert_eq!(one.response.len(), 3);
        assert_eq!(one.response.max(), 500);
        assert_eq!(spare[0].as_ref().unwrap().counters().sessions_planned, 2);
        // The spill stripe is reset, not freed, after it had data; freed once found empty.
        assert_eq!(rec.allocated(), 2);
        let mut again = empty_buffers(2);
        rec.swap(&mut again);
        assert!(again.iter().all(Option::is_none), "nothing recorded since");
        assert_eq!(rec.allocated(), 0);
    }
}
