//! One interval's Progress in as many messages as it needs.
//!
//! The controller decodes at most [`MAX_AGENT_MESSAGE_BYTES`] per agent message, and an
//! interval can hold more than that: every request step of a wide-spread run has its own
//! histograms, and the failure samples, debug exchanges and endpoints at their bounds take
//! most of the limit by themselves. Rather than cap what a run may measure by what one
//! message holds, the agent splits such an interval into parts ([`split`]), each under the
//! limit, and the controller merges the parts as they come and counts the interval delivered
//! once it has them all (`part`, `parts` on the wire).
//!
//! Every list of a Progress is additive (samples merge into the run's sums, endpoints and
//! connect times into theirs, failure samples are kept in arrival order), so a part carries
//! whole entries of each list; a phase sample bigger than a part is cut between request
//! steps, its counters and phase histograms in the first share (`first_step` 0) and empty in
//! the others. The agent's resources ride part 0 only. One request step always fits a part:
//! its histograms are at most four of [`COUNTS_LEN`] buckets.

use prost::Message;
use stampede_core::hist::{SparseHist, COUNTS_LEN};
use stampede_core::scenario::MAX_AGENT_MESSAGE_BYTES;

use crate::v1;

/// Most bytes of one part: the decode limit less room for the message that wraps it.
pub const PART_BYTES: usize = MAX_AGENT_MESSAGE_BYTES - 1024;

/// Most parts one interval may come in. An interval at every bound of a validated scenario
/// needs far fewer (see the message-limit tests); the controller refuses a part numbered past
/// this, so a broken agent cannot make it hold thousands of half-delivered intervals.
pub const MAX_PARTS: u32 = 1024;

/// How many parts the interval of a Progress numbered `part` of `parts` comes in (0 or 1
/// `parts`: the whole interval, part 0), when that is a numbering the controller takes: `None`
/// for a part past the count or a count past [`MAX_PARTS`]. The one rule the decoder and the
/// controller's bookkeeping of parts both apply.
pub fn part_count(part: u32, parts: u32) -> Option<u32> {
    let of = parts.max(1);
    (part < of && of <= MAX_PARTS).then_some(of)
}

// The worst one step can weigh: four histograms of every bucket at the longest varint, plus
// its counters and error kinds (bounded far below the slack).
const _: () = assert!(4 * COUNTS_LEN * 10 + 64 * 1024 < PART_BYTES / 2);

/// Bytes a `first_step`, `part` or `parts` field takes at most (key and a 32-bit varint).
const SMALL_FIELD: usize = 6;

/// The bytes an entry of `len` bytes takes in a repeated message field numbered below 16.
fn field_len(len: usize) -> usize {
    1 + prost::length_delimiter_len(len) + len
}

/// `p` as parts of at most `budget` bytes each, in the order they are to be sent: `p` itself
/// when it fits. Each part names the interval, its number and the number of parts.
pub fn split(p: v1::Progress, budget: usize) -> Vec<v1::Progress> {
    if p.encoded_len() <= budget {
        return vec![p];
    }
    let v1::Progress {
        run_id,
        interval,
        samples,
        open_connections,
        resources,
        endpoints,
        failure_samples,
        debug,
        stage_connects,
        ..
    } = p;
    let base = v1::Progress {
        run_id,
        interval,
        open_connections,
        ..Default::default()
    };
    let mut packer = Packer::new(base, resources, budget);
    for s in samples {
        packer.sample(s);
    }
    packer.entries(endpoints, |p| &mut p.endpoints);
    packer.entries(failure_samples, |p| &mut p.failure_samples);
    packer.entries(debug, |p| &mut p.debug);
    packer.entries(stage_connects, |p| &mut p.stage_connects);
    packer.finish()
}

/// Fills parts in order, opening the next when an entry does not fit the current one.
struct Packer {
    base: v1::Progress,
    /// Bytes a part without entries takes.
    base_len: usize,
    budget: usize,
    parts: Vec<v1::Progress>,
    /// Bytes the current (last) part takes.
    used: usize,
    /// Entries in the current part.
    held: usize,
}

impl Packer {
    fn new(base: v1::Progress, resources: Option<v1::AgentResources>, budget: usize) -> Self {
        let base_len = base.encoded_len() + 2 * SMALL_FIELD;
        let first = v1::Progress {
            resources,
            ..base.clone()
        };
        let used = first.encoded_len() + 2 * SMALL_FIELD;
        Packer {
            base,
            base_len,
            budget,
            parts: vec![first],
            used,
            held: 0,
        }
    }

    fn open_part(&mut self) {
        self.parts.push(self.base.clone());
        self.used = self.base_len;
        self.held = 0;
    }

    /// Whether the current part holds more than a new one would: entries, or part 0's
    /// resources.
    fn holds_more(&self) -> bool {
        self.held > 0 || self.used > self.base_len
    }

    /// The part an entry of `len` bytes goes in: the current one if it fits there, else a new
    /// one (where an entry too big for any part goes alone).
    fn room(&mut self, len: usize) -> &mut v1::Progress {
        if self.used + len > self.budget && self.holds_more() {
            self.open_part();
        }
        self.used += len;
        self.held += 1;
        self.parts.last_mut().expect("a packer always holds a part")
    }

    /// Places whole entries of one list, each in the part it fits.
    fn entries<T: Message>(&mut self, items: Vec<T>, list: fn(&mut v1::Progress) -> &mut Vec<T>) {
        for item in items {
            let len = field_len(item.encoded_len());
            list(self.room(len)).push(item);
        }
    }

    /// Places a phase sample: whole where it fits, else cut between its steps.
    fn sample(&mut self, mut s: v1::PhaseSample) {
        let len = field_len(s.encoded_len());
        if self.used + len <= self.budget || self.base_len + len <= self.budget {
            self.room(len).samples.push(s);
            return;
        }
        if self.holds_more() {
            self.open_part();
        }
        let steps = std::mem::take(&mut s.steps);
        let phase = s.phase;
        let mut share = s;
        let mut share_len = share.encoded_len() + SMALL_FIELD;
        for (k, step) in steps.into_iter().enumerate() {
            let step_len = field_len(step.encoded_len());
            if self.used + field_len(share_len + step_len) > self.budget && !share.steps.is_empty()
            {
                let done = std::mem::replace(&mut share, empty_share(phase, k));
                self.room(field_len(share_len)).samples.push(done);
                self.open_part();
                share_len = share.encoded_len() + SMALL_FIELD;
            }
            share_len += step_len;
            share.steps.push(step);
        }
        self.room(field_len(share_len)).samples.push(share);
    }

    /// The parts, numbered.
    fn finish(mut self) -> Vec<v1::Progress> {
        let parts = u32::try_from(self.parts.len()).unwrap_or(u32::MAX);
        for (k, p) in self.parts.iter_mut().enumerate() {
            p.part = k as u32;
            p.parts = parts;
        }
        self.parts
    }
}

/// A later share of a phase sample: steps from `first_step` on, no counts of its own.
fn empty_share(phase: u32, first_step: usize) -> v1::PhaseSample {
    let empty = stampede_core::hist::encode_wire_sparse(&SparseHist::default()).unwrap_or_default();
    v1::PhaseSample {
        phase,
        counters: Some(v1::Counters::default()),
        response_hist: empty.clone(),
        service_hist: empty.clone(),
        lag_hist: empty,
        steps: Vec::new(),
        first_step: u32::try_from(first_step).unwrap_or(u32::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::sample_to_wire;
    use stampede_core::stats::IntervalStats;

    /// A phase sample of `steps` steps, each with `distinct` latencies spread over a minute.
    fn wide(phase: u32, steps: usize, distinct: u64) -> v1::PhaseSample {
        let mut s = IntervalStats::with_steps(steps);
        for step in 0..steps {
            for i in 0..distinct {
                let us = 1_000 + i * (60_000_000 / distinct.max(1)) + step as u64;
                s.record_success(step, us, us / 2);
            }
            s.record_failure(step, "timeout");
        }
        s.counters_mut().sessions_planned = 7;
        sample_to_wire(phase, s.settle().unwrap()).unwrap()
    }

    fn progress(samples: Vec<v1::PhaseSample>) -> v1::Progress {
        v1::Progress {
            run_id: "r".into(),
            interval: 9,
            samples,
            open_connections: 3,
            resources: Some(v1::AgentResources {
                cpu_share: 0.5,
                ..Default::default()
            }),
            stage_connects: (0..40)
                .map(|stage| v1::StageConnects {
                    stage,
                    hist: wide(0, 1, 300).response_hist,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_progress_that_fits_is_sent_as_it_is() {
        let p = progress(vec![wide(0, 2, 10)]);
        assert_eq!(split(p.clone(), PART_BYTES), vec![p]);
    }

    /// Each part fits its budget, names the interval, and together they hold every entry once:
    /// a phase sample cut between steps keeps its counters in its first share only, and its
    /// steps, numbered by `first_step`, in order.
    #[test]
    fn an_interval_over_the_budget_is_cut_into_parts_that_hold_it_all() {
        let p = progress(vec![wide(0, 3, 50), wide(1, 60, 400), wide(2, 2, 50)]);
        let budget = 24 * 1024;
        assert!(p.encoded_len() > 3 * budget, "{}", p.encoded_len());
        let parts = split(p.clone(), budget);
        let n = parts.len() as u32;
        assert!(n > 3, "{n} parts");
        for (k, part) in parts.iter().enumerate() {
            assert!(
                part.encoded_len() <= budget,
                "part {k}: {} bytes",
                part.encoded_len()
            );
            assert_eq!((part.part, part.parts), (k as u32, n));
            assert_eq!((part.interval, part.open_connections), (9, 3));
            assert_eq!(part.resources.is_some(), k == 0);
            let mut phases: Vec<_> = part.samples.iter().map(|s| s.phase).collect();
            phases.dedup();
            assert_eq!(
                phases.len(),
                part.samples.len(),
                "one share of a phase per part"
            );
        }
        for original in &p.samples {
            let shares: Vec<_> = parts
                .iter()
                .flat_map(|q| &q.samples)
                .filter(|s| s.phase == original.phase)
                .collect();
            assert_eq!(shares[0].counters, original.counters);
            assert_eq!(shares[0].response_hist, original.response_hist);
            assert_eq!(shares[0].first_step, 0);
            let mut next = 0;
            for s in &shares {
                assert_eq!(s.first_step as usize, next);
                next += s.steps.len();
            }
            let steps: Vec<_> = shares
                .iter()
                .flat_map(|s| s.steps.iter().cloned())
                .collect();
            assert_eq!(steps, original.steps);
            if shares.len() > 1 {
                assert_eq!(shares[1].counters, Some(v1::Counters::default()));
            }
        }
        assert!(
            parts
                .iter()
                .flat_map(|q| &q.samples)
                .filter(|s| s.phase == 1)
                .count()
                > 1,
            "the wide phase is cut"
        );
        let connects: Vec<_> = parts
            .iter()
            .flat_map(|q| q.stage_connects.clone())
            .collect();
        assert_eq!(connects, p.stage_connects);
    }
}
