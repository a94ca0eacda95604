//! The arrival schedule of an open-model run: when each session starts, relative to T0.
//!
//! The cumulative expected arrival count Λ(t) is the integral of the (piecewise-linear) rate.
//! Uniform arrivals are at Λ(t) = k + ½ for k = 0, 1, 2, …; Poisson arrivals are at
//! Λ(t) = S_k, where S_k is a sum of unit-rate exponential gaps (time rescaling). Either way
//! the schedule is one deterministic sequence given the seed, which is what makes exact
//! sharding possible: every agent walks the same sequence and keeps its own indices.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::scenario::{ArrivalProcess, Phase};

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
}

/// The whole-test schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    segments: Vec<Segment>,
    total: f64,
    process: ArrivalProcess,
    seed: u64,
}

impl Schedule {
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
        Self {
            segments,
            total: cum,
            process,
            seed,
        }
    }

    /// Λ over the whole test: the expected number of arrivals.
    pub fn expected_total(&self) -> f64 {
        self.total
    }

    /// Iterates all arrivals in time order.
    pub fn iter(&self) -> ScheduleIter<'_> {
        ScheduleIter {
            schedule: self,
            next_index: 0,
            level: 0.0,
            segment: 0,
            rng: ChaCha8Rng::seed_from_u64(self.seed),
        }
    }

    /// Number of arrivals per phase (walks the schedule once).
    pub fn count_per_phase(&self) -> Vec<u64> {
        let mut counts = vec![0u64; self.segments.len()];
        for a in self.iter() {
            counts[a.phase as usize] += 1;
        }
        counts
    }
}

/// Iterator over a [`Schedule`].
#[derive(Debug, Clone)]
pub struct ScheduleIter<'a> {
    schedule: &'a Schedule,
    next_index: u64,
    /// Λ of the last arrival (Poisson) — uniform derives it from the index.
    level: f64,
    segment: usize,
    rng: ChaCha8Rng,
}

impl Iterator for ScheduleIter<'_> {
    type Item = Arrival;

    fn next(&mut self) -> Option<Arrival> {
        let level = match self.schedule.process {
            ArrivalProcess::Uniform => self.next_index as f64 + 0.5,
            ArrivalProcess::Poisson => {
                // Exp(1) by inversion; 1 - u is in (0, 1].
                let u: f64 = self.rng.random();
                self.level + -(1.0 - u).ln()
            }
        };
        if level >= self.schedule.total {
            return None;
        }
        self.level = level;
        let segs = &self.schedule.segments;
        while self.segment + 1 < segs.len() && segs[self.segment + 1].cum0 <= level {
            self.segment += 1;
        }
        let seg = &segs[self.segment];
        let t = seg.start_s + seg.invert(level - seg.cum0);
        let arrival = Arrival {
            index: self.next_index,
            at_ns: (t * 1e9).round() as u64,
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
}
