//! The controller's merged data is bounded by what was recorded, not by agents × steps ×
//! phases × 184 KiB. A counting allocator (this test binary's only global allocator) measures
//! the peak live heap while a [`RunAccumulator`] for 1000 agents, 10 request steps and 5
//! phases takes a minute of realistic 1 Hz data.
//!
//! The budget, computed from the data rather than guessed:
//! * merged histograms: (5 phases + open intervals) × (3 + 2 × 10) histograms, each at most
//!   16 bytes × the distinct buckets the data can hit (`union`), counted ×2 for `Vec` growth;
//! * per agent: its id, counters and the start-lag histogram (16 bytes × lag buckets, ×2);
//! * the closed timeline rows (two base64 histograms each) and 4 MiB of slack for the rest.
//!
//! The dense design held (5 + 1000 + open) × 23 × 184 KiB ≈ 4.2 GiB for the same run.

#![allow(unsafe_code)] // the counting allocator only forwards to the system allocator
#![warn(clippy::undocumented_unsafe_blocks)]

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use stampede_core::hist::SparseHist;
use stampede_core::plan::Plan;
use stampede_core::report::{ReportMeta, RunAccumulator};
use stampede_core::scenario::Scenario;
use stampede_core::stats::{Counters, SparseStats, SparseStepStats};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{LIVE, PEAK};

const AGENTS: usize = 1000;
const STEPS: usize = 10;
const PHASES: usize = 5;
const SECONDS_PER_PHASE: u64 = 12;

/// A deterministic pseudo-random stream (no dependency on the allocator-heavy rand setup).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }
    /// Roughly log-normal latency around 4 ms, 300 µs to ~250 ms.
    fn latency_us(&mut self) -> u64 {
        let u = (self.next() % 10_000) as f64 / 10_000.0;
        let v = (self.next() % 10_000) as f64 / 10_000.0;
        let z = (u + v - 1.0) * 3.0;
        (4_000.0 * (z * 1.4).exp()).clamp(300.0, 250_000.0) as u64
    }
}

/// One agent's one-second sample of one phase: 200 requests over 10 steps.
fn sample(rng: &mut Lcg) -> SparseStats {
    let mut s = SparseStats {
        counters: Counters {
            sessions_planned: 20,
            sessions_started: 20,
            sessions_completed: 20,
            requests_started: 200,
            requests_completed: 200,
            ..Counters::default()
        },
        steps: vec![SparseStepStats::default(); STEPS],
        ..SparseStats::default()
    };
    for _ in 0..20 {
        s.lag.record_n(1 + rng.next() % 3_000, 1);
    }
    for i in 0..200 {
        let (r, sv) = (rng.latency_us(), rng.latency_us() / 2 + 1);
        s.response.record_n(r, 1);
        s.service.record_n(sv, 1);
        let st = &mut s.steps[i % STEPS];
        st.requests_completed += 1;
        st.response.record_n(r, 1);
        st.service.record_n(sv, 1);
    }
    s
}

fn buckets(h: &SparseHist, into: &mut BTreeSet<u64>) {
    into.extend(h.iter_medians().map(|(v, _)| v));
}

#[test]
fn run_accumulator_memory_follows_the_data() {
    let steps: String = (0..STEPS)
        .map(|i| format!("  - name: s{i}\n    http: {{ method: GET, path: /{i} }}\n"))
        .collect();
    let phases: String = (0..PHASES)
        .map(|_| format!("  - duration: {SECONDS_PER_PHASE}s\n    arrival_rate: 20000\n"))
        .collect();
    let yaml = format!(
        "name: memory\ntarget: http://127.0.0.1:9\nagents: {AGENTS}\nphases:\n{phases}session:\n{steps}"
    );
    let scenario = Scenario::from_yaml(&yaml).unwrap();
    let plan = Plan::new(&scenario, AGENTS as u32, &[], 7).unwrap();
    let ids: Vec<String> = (0..AGENTS).map(|i| format!("agent-{i:04}")).collect();

    // A pool of distinct samples, built before measuring; the union of their buckets bounds
    // what any merged histogram can hold.
    let mut rng = Lcg(42);
    let pool: Vec<SparseStats> = (0..64).map(|_| sample(&mut rng)).collect();
    let (mut lat, mut lag) = (BTreeSet::new(), BTreeSet::new());
    for s in &pool {
        buckets(&s.response, &mut lat);
        buckets(&s.service, &mut lat);
        buckets(&s.lag, &mut lag);
    }

    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let mut acc = RunAccumulator::new(&scenario, plan, ids, 1.0);
    let mut sent = 0u64;
    for second in 0..(PHASES as u64 * SECONDS_PER_PHASE) {
        let phase = (second / SECONDS_PER_PHASE) as u32;
        for agent in 0..AGENTS {
            let s = &pool[(agent * 7 + second as usize) % pool.len()];
            acc.add(agent, second, phase, s).unwrap();
            acc.reported_through(agent, second).unwrap();
            sent += s.counters.requests_completed;
        }
    }
    let held = LIVE.load(Ordering::Relaxed) - base;
    let report = acc
        .finish(&scenario, ReportMeta::default())
        .expect("report");
    let peak = PEAK.load(Ordering::Relaxed) - base;
    assert_eq!(report.totals.completed, sent);
    assert_eq!(report.latency.response_time.count, sent);

    let open = 2; // intervals close as soon as every agent reported them
    let hists = (PHASES + open) * (3 + 2 * STEPS);
    let merged = hists * lat.len() * 16 * 2;
    let agents = AGENTS * (64 + 200 + lag.len() * 16 * 2);
    let timeline = (PHASES * SECONDS_PER_PHASE as usize) * 2 * 4 * 1024;
    let budget = merged + agents + timeline + (4 << 20);
    eprintln!(
        "held {} KiB, peak {} KiB (incl. building the report), budget {} KiB; \
         {} latency buckets, {} lag buckets",
        held / 1024,
        peak / 1024,
        budget / 1024,
        lat.len(),
        lag.len()
    );
    assert!(held < budget, "held {held} bytes, budget {budget}");
    assert!(
        peak < budget + (8 << 20),
        "peak {peak} bytes, budget {budget}"
    );
    // And far below the dense design's 4.2 GiB.
    assert!(peak < 64 << 20, "peak {peak} bytes");
}
