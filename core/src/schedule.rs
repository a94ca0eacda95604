//! The arrival schedule of an open-model run: when each session starts, relative to T0.
//!
//! The cumulative expected arrival count Λ(t) is the integral of the (piecewise-linear) rate.
//! Arrivals are points on the Λ axis ("levels") mapped back to time by inverting Λ:
//!
//! - **uniform**: levels k + ½ for k = 0, 1, 2, …
//! - **poisson**: a unit-rate Poisson process on the Λ axis (time rescaling), drawn
//!   *hierarchically* so that any count can be had without walking the arrivals: the Λ axis is
//!   cut into leaves of [`POISSON_LEAF`] expected arrivals under a binary tree; the root's
//!   count is Poisson, every inner node splits its count between its halves binomially, and a
//!   leaf places its count as sorted uniform points. Each node draws from its own ChaCha
//!   stream (its heap number), so the process is one deterministic function of the seed.
//!
//! Either way the schedule is one deterministic sequence, which is what makes exact sharding
//! possible: every agent walks the same sequence and keeps its own indices. Everything that
//! only needs counts — arrivals per phase, the index range of a phase, the arrivals in a
//! window — is arithmetic over phases (uniform) or a tree descent (poisson), never a walk:
//! the cost is the same for 10 arrivals/s over a minute as for 1e7/s over a year.

use std::ops::Range;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Binomial, Distribution, Poisson};

use crate::scenario::{ArrivalProcess, Phase};

/// Expected arrivals per leaf of the Poisson tree: a leaf's points are generated and sorted
/// together, so this bounds the schedule's working memory (about 8 KiB of `f64`s).
pub const POISSON_LEAF: f64 = 1024.0;

/// One planned arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Position in the whole-test schedule (0-based).
    pub index: u64,
    /// Intended start, in nanoseconds after T0.
    pub at_ns: u64,
    /// Index of the phase it belongs to.
    pub phase: u32,
}

/// A phase laid out on the time axis with its cumulative count at the start.
#[derive(Debug, Clone, Copy)]
struct Segment {
    start_s: f64,
    duration_s: f64,
    rate0: f64,
    rate1: f64,
    /// Λ at the segment's start.
    cum0: f64,
}

impl Segment {
    fn expected(&self) -> f64 {
        (self.rate0 + self.rate1) / 2.0 * self.duration_s
    }
    /// Solves Λ(start + τ) = cum0 + y for τ in [0, duration].
    fn invert(&self, y: f64) -> f64 {
        let a = (self.rate1 - self.rate0) / (2.0 * self.duration_s);
        let b = self.rate0;
        // a τ² + b τ − y = 0, in the form that stays stable when a → 0.
        let disc = (b * b + 4.0 * a * y).max(0.0);
        let denom = b + disc.sqrt();
        let tau = if denom > 0.0 { 2.0 * y / denom } else { 0.0 };
        tau.clamp(0.0, self.duration_s)
    }
    /// Λ(start + τ) − cum0 for τ in [0, duration].
    fn integral(&self, tau: f64) -> f64 {
        let tau = tau.clamp(0.0, self.duration_s);
        let slope = if self.duration_s > 0.0 {
            (self.rate1 - self.rate0) / self.duration_s
        } else {
            0.0
        };
        self.rate0 * tau + slope * tau * tau / 2.0
    }
    /// The rate at start + τ.
    fn rate_at(&self, tau: f64) -> f64 {
        if self.duration_s > 0.0 {
            self.rate0 + (self.rate1 - self.rate0) * (tau / self.duration_s).clamp(0.0, 1.0)
        } else {
            self.rate0
        }
    }
}

/// The whole-test schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    segments: Vec<Segment>,
    total: f64,
    process: ArrivalProcess,
    seed: u64,
    /// Poisson: depth of the tree whose leaves cover [0, total).
    depth: u32,
    /// Arrival times are rounded down to a multiple of this (0: exact).
    resolution_ns: u64,
}

impl Schedule {
    /// The whole-test schedule of `phases` with `process` arrivals (Poisson ones drawn from
    /// `seed`), at exact times until [`Schedule::with_resolution`].
    pub fn new(phases: &[Phase], process: ArrivalProcess, seed: u64) -> Self {
        let mut segments = Vec::with_capacity(phases.len());
        let (mut start_s, mut cum) = (0.0, 0.0);
        for p in phases {
            let seg = Segment {
                start_s,
                duration_s: p.duration.as_secs_f64(),
                rate0: p.arrival_rate,
                rate1: p.end_rate(),
                cum0: cum,
            };
            cum += seg.expected();
            start_s += seg.duration_s;
            segments.push(seg);
        }
        let mut depth = 0;
        while POISSON_LEAF * 2f64.powi(depth as i32) < cum && depth < 62 {
            depth += 1;
        }
        Self {
            segments,
            total: cum,
            process,
            seed,
            depth,
            resolution_ns: 0,
        }
    }

    /// Rounds every arrival's time down to a multiple of `tick` (a zero tick keeps them
    /// exact). The arrivals of one tick are then due at one instant, so an agent sends them on
    /// one wake-up instead of one each; none is due later than its exact time, the order and
    /// the phase of each stay, and so do the counts.
    pub fn with_resolution(mut self, tick: std::time::Duration) -> Self {
        self.resolution_ns = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// The tick arrival times are rounded down to (zero: exact).
    pub fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.resolution_ns)
    }

    /// Λ over the whole test: the expected number of arrivals.
    pub fn expected_total(&self) -> f64 {
        self.total
    }

    /// The test's length in seconds (the phases' durations added up).
    pub fn length_s(&self) -> f64 {
        self.segments
            .last()
            .map_or(0.0, |s| s.start_s + s.duration_s)
    }

    /// Iterates all arrivals in time order.
    pub fn iter(&self) -> ScheduleIter<'_> {
        ScheduleIter {
            schedule: self,
            next_index: 0,
            segment: 0,
            leaf: 0,
            points: Vec::new(),
            next_point: 0,
        }
    }

    /// Number of arrivals in the whole schedule, without walking it.
    pub fn total_arrivals(&self) -> u64 {
        self.count_below(self.total)
    }

    /// Index range of each phase's arrivals in the whole-test schedule, without walking it:
    /// phase `p` owns the arrivals whose level lies in `[Λ(start_p), Λ(end_p))`.
    pub fn phase_ranges(&self) -> Vec<Range<u64>> {
        let n = self.segments.len();
        let mut bounds: Vec<u64> = self
            .segments
            .iter()
            .map(|s| self.count_below(s.cum0))
            .collect();
        bounds.push(self.count_below(self.total));
        (0..n)
            .map(|p| bounds[p]..bounds[p + 1].max(bounds[p]))
            .collect()
    }

    /// Number of arrivals per phase.
    pub fn count_per_phase(&self) -> Vec<u64> {
        self.phase_ranges()
            .into_iter()
            .map(|r| r.end - r.start)
            .collect()
    }

    /// How many arrivals have a level below `x` (at most `total`): the index of the first
    /// arrival at or after level `x`.
    pub fn count_below(&self, x: f64) -> u64 {
        let x = x.min(self.total);
        if x.is_nan() || x <= 0.0 {
            return 0;
        }
        match self.process {
            ArrivalProcess::Uniform => uniform_count_below(x),
            ArrivalProcess::Poisson => self.poisson_count_below(x),
        }
    }

    /// When arrival `index` is due, in seconds after T0, and its phase; `None` past the last
    /// arrival. Exact for uniform arrivals (the iterator's level `index + ½`); for Poisson
    /// arrivals the time at which `index + ½` arrivals are expected (no walk), and the exact
    /// phase.
    pub fn time_of(&self, index: u64) -> Option<(f64, usize)> {
        let phase = self
            .phase_ranges()
            .iter()
            .position(|r| r.contains(&index))?;
        let level = index as f64 + 0.5;
        let i = self
            .segments
            .partition_point(|s| s.cum0 <= level)
            .saturating_sub(1);
        let seg = self.segments.get(i)?;
        Some((seg.start_s + seg.invert(level - seg.cum0), phase))
    }

    /// Λ(t) for t in seconds after T0.
    pub fn cumulative(&self, t: f64) -> f64 {
        if t <= 0.0 {
            return 0.0;
        }
        let i = self
            .segments
            .partition_point(|s| s.start_s <= t)
            .saturating_sub(1);
        match self.segments.get(i) {
            Some(s) => s.cum0 + s.integral(t - s.start_s),
            None => 0.0,
        }
    }

    fn rate_at(&self, t: f64) -> f64 {
        let i = self
            .segments
            .partition_point(|s| s.start_s <= t)
            .saturating_sub(1);
        self.segments
            .get(i)
            .filter(|s| t < s.start_s + s.duration_s)
            .map_or(0.0, |s| s.rate_at(t - s.start_s))
    }

    /// The most arrivals expected within any window of `hold_s` seconds: the maximum of
    /// Λ(t + hold) − Λ(t), found exactly over the piecewise-quadratic sliding integral
    /// (checked at every breakpoint and at the interior stationary points between them).
    pub fn max_window(&self, hold_s: f64) -> f64 {
        let len = self.length_s();
        if hold_s.is_nan() || hold_s >= len {
            return self.total;
        }
        let last = len - hold_s;
        let mut points = vec![0.0, last];
        for s in &self.segments {
            for b in [s.start_s, s.start_s + s.duration_s] {
                for c in [b, b - hold_s] {
                    if (0.0..=last).contains(&c) {
                        points.push(c);
                    }
                }
            }
        }
        points.sort_by(f64::total_cmp);
        points.dedup();
        let window = |t: f64| self.cumulative(t + hold_s) - self.cumulative(t);
        let slope = |t: f64| self.rate_at(t + hold_s) - self.rate_at(t);
        let mut best = points.iter().map(|&t| window(t)).fold(0.0, f64::max);
        for w in points.windows(2) {
            let (a, b) = (w[0], w[1]);
            if b - a <= 0.0 {
                continue;
            }
            // Between breakpoints both rates are affine, so the slope is affine too.
            let (m1, m2) = (a + (b - a) / 3.0, a + 2.0 * (b - a) / 3.0);
            let (d1, d2) = (slope(m1), slope(m2));
            // A falling slope is a concave piece: its maximum is where the slope is zero.
            if d2 < d1 {
                let t = m1 + (m2 - m1) * d1 / (d1 - d2);
                if (a..=b).contains(&t) {
                    best = best.max(window(t));
                }
            }
        }
        best.min(self.total)
    }

    /// The most arrivals to plan for within any window of `hold_s` seconds: exact for uniform
    /// arrivals (a half-open Λ window of length L holds at most ⌈L⌉ levels k + ½); for
    /// Poisson, the expectation plus six standard deviations. Never more than the schedule.
    pub fn peak_in_window(&self, hold_s: f64) -> u64 {
        let l = self.max_window(hold_s);
        let bound = match self.process {
            ArrivalProcess::Uniform => l.ceil(),
            ArrivalProcess::Poisson => (l + 6.0 * l.sqrt() + 1.0).ceil(),
        };
        (bound.max(0.0) as u64).min(self.total_arrivals())
    }

    /// Poisson: the ChaCha stream of tree node `heap` (root 1, children 2i and 2i + 1).
    fn node_rng(&self, heap: u64) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(heap);
        rng
    }

    /// Poisson: how many points leaf `leaf` holds (descends from the root).
    fn leaf_count(&self, leaf: u64) -> u64 {
        let mut n = self.root_count();
        let mut heap = 1u64;
        for level in (0..self.depth).rev() {
            let left = self.split(heap, n);
            if (leaf >> level) & 1 == 0 {
                n = left;
                heap *= 2;
            } else {
                n -= left;
                heap = heap * 2 + 1;
            }
        }
        n
    }

    fn root_count(&self) -> u64 {
        let lambda = POISSON_LEAF * 2f64.powi(self.depth as i32);
        Poisson::new(lambda).map_or(0, |p| p.sample(&mut self.node_rng(0)) as u64)
    }

    /// Points of node `heap`'s count `n` that fall in its left half.
    fn split(&self, heap: u64, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        Binomial::new(n, 0.5).map_or(0, |b| b.sample(&mut self.node_rng(heap)))
    }

    /// Poisson: the sorted levels of leaf `leaf`'s points.
    fn leaf_points(&self, leaf: u64, out: &mut Vec<f64>) {
        out.clear();
        let n = self.leaf_count(leaf);
        let mut rng = self.node_rng((1u64 << self.depth) + leaf);
        let lo = leaf as f64 * POISSON_LEAF;
        out.extend((0..n).map(|_| lo + rng.random::<f64>() * POISSON_LEAF));
        out.sort_by(f64::total_cmp);
    }

    fn poisson_count_below(&self, x: f64) -> u64 {
        let (mut n, mut heap, mut count) = (self.root_count(), 1u64, 0u64);
        let (mut lo, mut width) = (0.0, POISSON_LEAF * 2f64.powi(self.depth as i32));
        for _ in 0..self.depth {
            let left = self.split(heap, n);
            width /= 2.0;
            if x <= lo + width {
                n = left;
                heap *= 2;
            } else {
                count += left;
                n -= left;
                lo += width;
                heap = heap * 2 + 1;
            }
        }
        let leaf = heap - (1u64 << self.depth);
        let mut points = Vec::new();
        self.leaf_points(leaf, &mut points);
        count + points.iter().take_while(|&&l| l < x).count() as u64
    }
}

/// Uniform levels are k + ½: how many lie below `x`, exact in `f64` (the same comparison the
/// iterator makes).
fn uniform_count_below(x: f64) -> u64 {
    let mut c = (x - 0.5).ceil().max(0.0) as u64;
    while c > 0 && (c - 1) as f64 + 0.5 >= x {
        c -= 1;
    }
    while (c as f64 + 0.5) < x {
        c += 1;
    }
    c
}

/// Iterator over a [`Schedule`].
#[derive(Debug, Clone)]
pub struct ScheduleIter<'a> {
    schedule: &'a Schedule,
    next_index: u64,
    segment: usize,
    /// Poisson: the next leaf to generate, and the current leaf's points.
    leaf: u64,
    points: Vec<f64>,
    next_point: usize,
}

impl ScheduleIter<'_> {
    fn next_level(&mut self) -> Option<f64> {
        let s = self.schedule;
        match s.process {
            ArrivalProcess::Uniform => Some(self.next_index as f64 + 0.5),
            ArrivalProcess::Poisson => loop {
                if let Some(&l) = self.points.get(self.next_point) {
                    self.next_point += 1;
                    return Some(l);
                }
                if self.leaf as f64 * POISSON_LEAF >= s.total || self.leaf >> s.depth > 0 {
                    return None;
                }
                s.leaf_points(self.leaf, &mut self.points);
                self.leaf += 1;
                self.next_point = 0;
            },
        }
    }
}

impl Iterator for ScheduleIter<'_> {
    type Item = Arrival;

    fn next(&mut self) -> Option<Arrival> {
        let level = self.next_level()?;
        if level >= self.schedule.total {
            return None;
        }
        let segs = &self.schedule.segments;
        while self.segment + 1 < segs.len() && segs[self.segment + 1].cum0 <= level {
            self.segment += 1;
        }
        let seg = &segs[self.segment];
        let t = seg.start_s + seg.invert(level - seg.cum0);
        let exact = (t * 1e9).round() as u64;
        let tick = self.schedule.resolution_ns;
        let arrival = Arrival {
            index: self.next_index,
            at_ns: if tick > 1 {
                exact - exact % tick
            } else {
                exact
            },
            phase: self.segment as u32,
        };
        self.next_index += 1;
        Some(arrival)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::HumanDuration;

    fn phase(secs: f64, rate: f64, ramp_to: Option<f64>) -> Phase {
        Phase {
            name: None,
            duration: HumanDuration::from_secs_f64(secs),
            arrival_rate: rate,
            ramp_to,
            warmup: false,
        }
    }

    #[test]
    fn time_of_is_the_walk_for_uniform_arrivals() {
        let phases = [
            phase(2.0, 5.0, Some(20.0)),
            phase(0.5, 0.0, None),
            phase(1.0, 8.0, None),
        ];
        let s = Schedule::new(&phases, ArrivalProcess::Uniform, 0);
        for a in s.iter() {
            let (t, p) = s.time_of(a.index).unwrap();
            assert_eq!((t * 1e9).round() as u64, a.at_ns, "arrival {}", a.index);
            assert_eq!(p, a.phase as usize);
        }
        assert_eq!(s.time_of(s.total_arrivals()), None);
        let poisson = Schedule::new(&phases, ArrivalProcess::Poisson, 9);
        for a in poisson.iter() {
            let (t, p) = poisson.time_of(a.index).unwrap();
            assert_eq!(p, a.phase as usize);
            assert!((0.0..=3.5).contains(&t));
        }
    }

    #[test]
    fn constant_rate_is_evenly_spaced() {
        let s = Schedule::new(&[phase(1.0, 4.0, None)], ArrivalProcess::Uniform, 0);
        let times: Vec<u64> = s.iter().map(|a| a.at_ns).collect();
        assert_eq!(
            times,
            vec![125_000_000, 375_000_000, 625_000_000, 875_000_000]
        );
    }

    /// A resolution moves each arrival to the start of its tick and nothing else: the same
    /// arrivals, indexes and phases, in order, none later than exact and none a tick earlier.
    #[test]
    fn a_resolution_rounds_arrivals_down_to_their_tick() {
        let phases = [phase(2.0, 3000.0, None), phase(1.0, 700.0, Some(5000.0))];
        let tick = std::time::Duration::from_millis(1);
        for process in [ArrivalProcess::Uniform, ArrivalProcess::Poisson] {
            let exact: Vec<_> = Schedule::new(&phases, process, 3).iter().collect();
            let ticked: Vec<_> = Schedule::new(&phases, process, 3)
                .with_resolution(tick)
                .iter()
                .collect();
            assert_eq!(exact.len(), ticked.len());
            for (e, t) in exact.iter().zip(&ticked) {
                assert_eq!((e.index, e.phase), (t.index, t.phase));
                assert_eq!(t.at_ns % 1_000_000, 0);
                assert!(t.at_ns <= e.at_ns && e.at_ns - t.at_ns < 1_000_000);
            }
            // 3,000/s in 1 ms ticks: three arrivals per tick, each tick sent at once.
            let first_tick = ticked.iter().filter(|a| a.at_ns == 1_000_000).count();
            if process == ArrivalProcess::Uniform {
                assert_eq!(first_tick, 3);
            }
        }
        let zero = Schedule::new(&phases, ArrivalProcess::Uniform, 0)
            .with_resolution(std::time::Duration::ZERO);
        assert!(zero.iter().any(|a| a.at_ns % 1_000_000 != 0));
    }

    #[test]
    fn ramp_counts_match_the_integral() {
        let phases = [phase(10.0, 20.0, None), phase(10.0, 20.0, Some(100.0))];
        let s = Schedule::new(&phases, ArrivalProcess::Uniform, 0);
        assert_eq!(s.count_per_phase(), vec![200, 600]);
        let all: Vec<_> = s.iter().collect();
        assert!(all.windows(2).all(|w| w[0].at_ns <= w[1].at_ns));
        assert!(all.iter().all(|a| a.at_ns < 20_000_000_000));
    }

    #[test]
    fn ramp_down_to_zero_works() {
        let s = Schedule::new(&[phase(10.0, 10.0, Some(0.0))], ArrivalProcess::Uniform, 0);
        assert_eq!(s.count_per_phase(), vec![50]);
        let last = s.iter().last().unwrap();
        assert!(last.at_ns <= 10_000_000_000);
    }

    #[test]
    fn poisson_is_deterministic_and_near_the_mean() {
        let phases = [phase(100.0, 50.0, None)];
        let a: Vec<_> = Schedule::new(&phases, ArrivalProcess::Poisson, 7)
            .iter()
            .collect();
        let b: Vec<_> = Schedule::new(&phases, ArrivalProcess::Poisson, 7)
            .iter()
            .collect();
        assert_eq!(a, b);
        // mean 5000, sd ~71: 6 sd either side.
        assert!((4570..=5430).contains(&a.len()), "{}", a.len());
        let c: Vec<_> = Schedule::new(&phases, ArrivalProcess::Poisson, 8)
            .iter()
            .collect();
        assert_ne!(a, c);
    }

    #[test]
    fn zero_rate_phase_has_no_arrivals() {
        let phases = [phase(5.0, 0.0, None), phase(1.0, 2.0, None)];
        let s = Schedule::new(&phases, ArrivalProcess::Uniform, 0);
        let all: Vec<_> = s.iter().collect();
        assert_eq!(all.len(), 2);
        assert!(all.iter().all(|a| a.phase == 1 && a.at_ns >= 5_000_000_000));
    }

    fn walked(s: &Schedule) -> Vec<u64> {
        let mut counts = vec![0u64; s.segments.len()];
        for a in s.iter() {
            counts[a.phase as usize] += 1;
        }
        counts
    }

    #[test]
    fn counts_without_walking_equal_the_walk() {
        let shapes: Vec<Vec<Phase>> = vec![
            vec![phase(10.0, 20.0, None), phase(10.0, 20.0, Some(100.0))],
            vec![
                phase(3.3, 0.7, Some(13.1)),
                phase(0.4, 0.0, None),
                phase(7.0, 3.0, Some(0.0)),
            ],
            vec![phase(1.0, 0.5, None)],
            vec![phase(2.0, 1234.5, Some(10.0)), phase(1.0, 5000.0, None)],
        ];
        for phases in &shapes {
            for process in [ArrivalProcess::Uniform, ArrivalProcess::Poisson] {
                for seed in [0, 1, 99] {
                    let s = Schedule::new(phases, process, seed);
                    let walk = walked(&s);
                    assert_eq!(s.count_per_phase(), walk, "{process:?} seed {seed}");
                    assert_eq!(s.total_arrivals(), walk.iter().sum::<u64>());
                    let ranges = s.phase_ranges();
                    for a in s.iter() {
                        assert!(ranges[a.phase as usize].contains(&a.index));
                    }
                }
            }
        }
    }

    #[test]
    fn a_year_at_the_maximum_rate_is_counted_at_once() {
        let phases = [phase(5.0, 10.0, None), phase(366.0 * 86_400.0, 1e7, None)];
        for process in [ArrivalProcess::Uniform, ArrivalProcess::Poisson] {
            let s = Schedule::new(&phases, process, 3);
            let counts = s.count_per_phase();
            let expected = 366.0 * 86_400.0 * 1e7;
            let rel = (counts[1] as f64 - expected).abs() / expected;
            assert!(rel < 1e-6, "{process:?}: {counts:?}");
            assert_eq!(s.count_per_phase(), counts, "deterministic");
        }
        // The uniform count is exact.
        let s = Schedule::new(&phases, ArrivalProcess::Uniform, 0);
        assert_eq!(s.count_per_phase(), vec![50, 316_224_000_000_000]);
    }

    #[test]
    fn max_window_matches_a_fine_scan() {
        let phases = [
            phase(4.0, 10.0, Some(200.0)),
            phase(3.0, 200.0, Some(50.0)),
            phase(2.0, 120.0, None),
        ];
        let s = Schedule::new(&phases, ArrivalProcess::Uniform, 0);
        for hold in [0.25, 1.0, 2.5, 5.0, 8.9, 20.0] {
            let mut best: f64 = 0.0;
            let mut t = 0.0;
            while t + hold <= s.length_s() + 1e-9 {
                best = best.max(s.cumulative(t + hold) - s.cumulative(t));
                t += 0.001;
            }
            if hold >= s.length_s() {
                best = s.expected_total();
            }
            let got = s.max_window(hold);
            assert!(
                got >= best - 1e-6 && got <= best + 0.5,
                "hold {hold}: {got} vs {best}"
            );
        }
    }
}
