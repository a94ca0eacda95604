//! [`IntervalStats`]: the form of [`Stats`] an agent records into during one interval, whose
//! run-wide latency histograms are added up from the steps' once, when the interval is sent,
//! instead of being recorded with every request.
//!
//! Every request belongs to one request step, so a unit's run-wide response and service
//! histograms are the sum of its steps'. Recording a request into both is two histogram
//! records more per request (about 150 instructions of the 3,700 a closed keep-alive request
//! costs the agent in user space); adding the steps up is one pass per non-empty step and
//! interval, a copy of the step's counts when the run has one step.

use hdrhistogram::Histogram;

use super::{Counters, SparseStepStats};
use crate::hist::HistError;
use crate::stats::Stats;

/// [`Stats`] being recorded, whose run-wide response and service histograms may still lack
/// the requests recorded into the steps: [`IntervalStats::settle`] adds them, once. Any mix of
/// records, adds and settles gives the [`Stats`] that recording everything eagerly gives.
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalStats {
    stats: Stats,
    /// The run-wide histograms hold the steps' requests: from here on a request is recorded
    /// into both, until [`IntervalStats::reset`].
    settled: bool,
}

impl IntervalStats {
    /// Empty stats for `steps` request steps, not settled.
    pub fn with_steps(steps: usize) -> Self {
        Self {
            stats: Stats::with_steps(steps),
            settled: false,
        }
    }

    /// The counters, which every record updates at once (only histograms are deferred).
    pub fn counters(&self) -> &Counters {
        &self.stats.counters
    }

    /// The counters, for counts the recording methods do not keep (planned and dropped sessions,
    /// bytes, statuses).
    pub fn counters_mut(&mut self) -> &mut Counters {
        &mut self.stats.counters
    }

    /// Records one successful request of request-step `step`: into the step's histograms
    /// only, until settled.
    #[inline]
    pub fn record_success(&mut self, step: usize, response_us: u64, service_us: u64) {
        self.stats
            .record_success_in(step, response_us, service_us, self.settled);
    }

    /// Records one failed request of request-step `step` (no latency: nothing deferred).
    #[inline]
    pub fn record_failure(&mut self, step: usize, kind: &str) {
        self.stats.record_failure(step, kind);
    }

    /// Records a streamed reply's time to first event and gaps (step histograms only: nothing
    /// deferred).
    pub fn record_stream(&mut self, step: usize, ttfb_us: Option<u64>, gaps_us: &[u64]) {
        self.stats.record_stream(step, ttfb_us, gaps_us);
    }

    /// Records one request of request-step `step` sent and never answered (no latency).
    pub fn record_interrupted(&mut self, step: usize) {
        self.stats.record_interrupted(step);
    }

    /// Records the start of a session `lag_us` behind its intended time (the lag histogram
    /// has no steps: nothing deferred).
    #[inline]
    pub fn record_start(&mut self, lag_us: u64) {
        self.stats.record_start(lag_us);
    }

    /// Adds another unit into this one; settled if either was.
    pub fn add(&mut self, o: &IntervalStats) -> Result<(), HistError> {
        if o.settled {
            self.settle()?;
        }
        self.stats.add(&o.stats)?;
        if self.settled && !o.settled {
            let s = &mut self.stats;
            add_steps(&mut s.response, &mut s.service, &o.stats.steps);
        }
        Ok(())
    }

    /// The unit, complete: the first call adds the steps' histograms into the run-wide ones.
    pub fn settle(&mut self) -> Result<&Stats, HistError> {
        if !self.settled {
            let s = &mut self.stats;
            add_steps(&mut s.response, &mut s.service, &s.steps);
            self.settled = true;
        }
        Ok(&self.stats)
    }

    /// Clears all counts, keeping allocations, and records deferred again.
    pub fn reset(&mut self) {
        self.stats.reset();
        self.settled = false;
    }

    /// Whether nothing was counted or recorded in this interval.
    pub fn is_empty(&self) -> bool {
        self.stats.is_empty()
    }
}

/// Adds the steps' latency histograms into `response` and `service`.
fn add_steps(
    response: &mut Histogram<u64>,
    service: &mut Histogram<u64>,
    steps: &[SparseStepStats],
) {
    for st in steps {
        st.response.add_to_dense(response);
        st.service.add_to_dense(service);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::IntervalStats;
    use crate::stats::Stats;

    /// What a unit is told: records (the step may be one the run does not have), adds of
    /// another unit, settles.
    #[derive(Debug, Clone)]
    enum Op {
        Success(usize, u64, u64),
        Failure(usize),
        Start(u64),
        Settle,
        /// Adds a unit that recorded these, settled or not.
        Add(Vec<(usize, u64, u64)>, bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Latencies past the histograms' range and below 1 µs count as out of range.
        let us = prop_oneof![0u64..5_000, Just(u64::MAX / 2)];
        let rec = (0usize..4, us.clone(), us.clone());
        prop_oneof![
            6 => rec.clone().prop_map(|(s, r, v)| Op::Success(s, r, v)),
            1 => (0usize..4).prop_map(Op::Failure),
            1 => us.prop_map(Op::Start),
            1 => Just(Op::Settle),
            1 => (prop::collection::vec(rec, 0..6), any::<bool>()).prop_map(|(r, s)| Op::Add(r, s)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Whatever the order of records, adds and settles, the settled unit is the one that
        /// recording every request eagerly (into its step and the run-wide histograms) gives.
        #[test]
        fn a_settled_interval_is_the_eagerly_recorded_one(ops in prop::collection::vec(op(), 0..40)) {
            const STEPS: usize = 3;
            let mut deferred = IntervalStats::with_steps(STEPS);
            let mut eager = Stats::with_steps(STEPS);
            for op in ops {
                match op {
                    Op::Success(s, r, v) => {
                        deferred.record_success(s, r, v);
                        eager.record_success(s, r, v);
                    }
                    Op::Failure(s) => {
                        deferred.record_failure(s, "reset");
                        eager.record_failure(s, "reset");
                    }
                    Op::Start(lag) => {
                        deferred.record_start(lag);
                        eager.record_start(lag);
                    }
                    Op::Settle => {
                        deferred.settle().unwrap();
                    }
                    Op::Add(records, settled) => {
                        let mut other = IntervalStats::with_steps(STEPS);
                        for &(s, r, v) in &records {
                            other.record_success(s, r, v);
                            eager.record_success(s, r, v);
                        }
                        if settled {
                            other.settle().unwrap();
                        }
                        deferred.add(&other).unwrap();
                    }
                }
            }
            prop_assert_eq!(deferred.settle().unwrap(), &eager);
            // Settling again changes nothing.
            prop_assert_eq!(deferred.settle().unwrap(), &eager);
        }
    }

    /// A reset unit records deferred again, from nothing.
    #[test]
    fn a_reset_unit_defers_again() {
        let mut s = IntervalStats::with_steps(1);
        s.record_success(0, 100, 90);
        s.settle().unwrap();
        s.reset();
        assert!(s.is_empty());
        s.record_success(0, 200, 150);
        let mut eager = Stats::with_steps(1);
        eager.record_success(0, 200, 150);
        assert_eq!(s.settle().unwrap(), &eager);
    }
}
