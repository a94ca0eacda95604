//! The interval recorder's memory follows what the sessions did, not the scenario's size. A
//! counting allocator (this test binary's only global allocator) measures the peak live heap
//! while a recorder for a mix of 16 session types × 100 request steps takes 30 intervals of
//! 2 to 3 sessions each (each session runs the 100 steps of its type), flushed and encoded
//! as the ticker does.
//!
//! With a dense pair of histograms per step (2 × 184 KiB), one phase's stats were 1,600 ×
//! 368 KiB = 575 MiB, twice for the double buffer: an agent peaked at 1.84 GB for this mix.
//! Now a step holds a sparse pair only in the intervals it records in: the budget is the
//! three dense run-wide histograms per buffer (2 × 3 × 184 KiB), a hundred bytes per step
//! entry (2 × 1,600), the steps that recorded (at most 300 per interval, a few hundred bytes
//! each) and the encoded message, with room to spare: 8 MiB.

#![allow(unsafe_code)] // the counting allocator only forwards to the system allocator
#![warn(clippy::undocumented_unsafe_blocks)]

use std::sync::atomic::Ordering;

use stampede_agent::runner::{empty_buffers, progress, Recorder};
use stampede_proto::v1;

#[path = "../../core/tests/support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{LIVE, PEAK};

const TYPES: usize = 16;
const STEPS: usize = 100;
const BUDGET: usize = 8 << 20;

/// A deterministic pseudo-random stream.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }
}

#[test]
fn a_mix_of_1600_steps_holds_what_its_sessions_did() {
    let rec = Recorder::with_stripes(1, TYPES * STEPS, 2);
    let mut spare = empty_buffers(1);
    let mut rng = Lcg(7);
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let (mut recorded, mut sent_steps) = (0u64, 0u64);
    for interval in 0..30u64 {
        for _ in 0..2 + rng.next() % 2 {
            let first = (rng.next() as usize % TYPES) * STEPS;
            rec.with(0, |s| {
                s.counters_mut().sessions_started += 1;
                s.record_start(1 + rng.next() % 500);
            });
            for step in first..first + STEPS {
                let r = 200 + rng.next() % 20_000;
                rec.with(0, |s| s.record_success(step, r, r - 100));
                recorded += 1;
            }
        }
        rec.swap(&mut spare);
        let msg = progress("run", interval, &mut spare, 0, None);
        let Some(v1::agent_message::Msg::Progress(p)) = msg.msg else {
            panic!("not a progress message");
        };
        assert_eq!(p.samples.len(), 1);
        sent_steps += p.samples[0]
            .steps
            .iter()
            .filter(|s| s.requests_completed > 0)
            .count() as u64;
    }
    let peak = PEAK.load(Ordering::Relaxed) - base;
    eprintln!(
        "{recorded} requests over {sent_steps} step-intervals: peak live heap {} KiB (budget {} KiB)",
        peak >> 10,
        BUDGET >> 10
    );
    assert!(sent_steps >= 30 * 200, "{sent_steps}");
    assert!(peak < BUDGET, "peak {peak} bytes, budget {BUDGET}");
}
