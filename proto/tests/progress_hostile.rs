//! Hostile input: the Progress messages agents send, through what the controller
//! does with them — protobuf decoding, `convert::check_progress`, `RunAccumulator::add_progress`,
//! the live view and the report. Random and hostile messages are refused or merged, never a
//! panic, and a Progress the checks accept always merges; what an agent encodes comes back
//! exactly. The same input as the `progress` fuzz target (`fuzz/README.md`).

use std::collections::HashMap;

use proptest::prelude::*;
use prost::Message;
use stampede_core::hist;
use stampede_core::plan::Plan;
use stampede_core::report::{ReportMeta, RunAccumulator};
use stampede_core::scenario::Scenario;
use stampede_core::stats::{SparseStats, Stats};
use stampede_proto::convert::{check_progress, sample_to_wire};
use stampede_proto::v1;

const SCENARIO: &str = "name: p\ntarget: http://127.0.0.1:8080\nagents: 2\nphases:\n  \
    - { duration: 3s, arrival_rate: 20 }\n  - { duration: 3s, arrival_rate: 20, ramp_to: 50 }\n\
    session:\n  - { name: a, http: { path: /a } }\n  - { name: b, http: { path: /b }, repeat: 2 }\n\
    thresholds: [\"p99 < 50ms\", \"error_rate < 1%\", \"throughput >= 99% planned\"]\n";

fn accumulator() -> (Scenario, RunAccumulator) {
    let s = Scenario::from_yaml(SCENARIO).unwrap();
    let plan = Plan::new(&s, 2, &[], 1).unwrap();
    let acc = RunAccumulator::new(&s, plan, vec!["a".into(), "b".into()], 1.0);
    (s, acc)
}

/// What the controller does with one Progress from agent `agent`.
fn merge(acc: &mut RunAccumulator, agent: usize, p: &v1::Progress) -> Result<(), TestCaseError> {
    if let Ok(samples) = check_progress(acc, agent, p) {
        let added = acc.add_progress(agent, p.interval, &samples);
        prop_assert!(added.is_ok(), "checked, then refused: {:?}", added.err());
    }
    let _ = acc.snapshot(p.interval as f64);
    Ok(())
}

/// One agent's interval as it records it.
fn stats() -> impl Strategy<Value = Stats> {
    proptest::collection::vec((0usize..3, 0u64..5_000_000, any::<bool>()), 0..40).prop_map(|rec| {
        let mut s = Stats::with_steps(2);
        for (step, us, ok) in rec {
            s.record_start(us / 100);
            if ok {
                s.record_success(step, us, us / 2);
                s.counters.count_status(200);
            } else {
                s.record_failure(step, "timeout");
            }
        }
        s
    })
}

/// A histogram field as an agent, a broken agent or an attacker might fill it.
fn hist_bytes() -> impl Strategy<Value = Vec<u8>> {
    let valid = proptest::collection::vec(1u64..3_600_000_000, 0..20).prop_map(|v| {
        let mut h = hist::new_histogram();
        for x in v {
            hist::record(&mut h, x);
        }
        hist::encode_wire(&h).unwrap()
    });
    prop_oneof![
        3 => valid.clone(),
        1 => (valid, any::<usize>(), any::<u8>()).prop_map(|(mut b, at, x)| {
            let at = at % b.len();
            b[at] = x;
            b
        }),
        1 => proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

fn big() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..100,
        Just(u64::MAX / 2 + 1),
        Just(u64::MAX),
        any::<u64>()
    ]
}

fn counters() -> impl Strategy<Value = v1::Counters> {
    (
        proptest::collection::vec(big(), 8),
        proptest::collection::hash_map("[a-z_]{0,70}", big(), 0..4),
        proptest::collection::hash_map(prop_oneof![100u32..1000, any::<u32>()], big(), 0..4),
        prop_oneof![0u64..1000, Just(1u64 << 30), any::<u64>()],
    )
        .prop_map(|(n, errors, status_codes, peak)| v1::Counters {
            sessions_planned: n[0],
            sessions_started: n[1],
            sessions_completed: n[2],
            requests_started: n[3],
            requests_completed: n[4],
            requests_failed: n[5],
            bytes_sent: n[6],
            bytes_received: n[7],
            errors: errors.into_iter().collect::<HashMap<_, _>>(),
            status_codes: status_codes.into_iter().collect::<HashMap<_, _>>(),
            peak_open_connections: peak,
            ..v1::Counters::default()
        })
}

fn step() -> impl Strategy<Value = v1::StepSample> {
    (
        (big(), big()),
        (hist_bytes(), hist_bytes(), hist_bytes(), hist_bytes()),
    )
        .prop_map(|((done, failed), (r, s, t, g))| v1::StepSample {
            requests_completed: done,
            requests_failed: failed,
            requests_interrupted: failed / 2,
            errors: HashMap::new(),
            response_hist: r,
            service_hist: s,
            ttfb_hist: t,
            gap_hist: g,
        })
}

fn sample() -> impl Strategy<Value = v1::PhaseSample> {
    (
        prop_oneof![0u32..3, any::<u32>()],
        proptest::option::of(counters()),
        hist_bytes(),
        hist_bytes(),
        hist_bytes(),
        proptest::collection::vec(step(), 0..4),
        prop_oneof![Just(0u32), 0u32..4, any::<u32>()],
    )
        .prop_map(
            |(phase, counters, r, s, l, steps, first_step)| v1::PhaseSample {
                phase,
                counters,
                response_hist: r,
                service_hist: s,
                lag_hist: l,
                steps,
                first_step,
            },
        )
}

/// (agent, Progress) as the controller receives them.
fn hostile_progress() -> impl Strategy<Value = (usize, v1::Progress)> {
    (
        0usize..3,
        prop_oneof![0u64..10, 100u64..200, any::<u64>()],
        proptest::collection::vec(sample(), 0..4),
        prop_oneof![Just((0u32, 0u32)), (0u32..4, 0u32..4), any::<(u32, u32)>()],
    )
        .prop_map(|(agent, interval, samples, (part, parts))| {
            (
                agent,
                v1::Progress {
                    run_id: "r".into(),
                    interval,
                    samples,
                    open_connections: 0,
                    resources: None,
                    endpoints: Vec::new(),
                    failure_samples: Vec::new(),
                    stage_connects: Vec::new(),
                    debug: Vec::new(),
                    part,
                    parts,
                },
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// What agents encode comes back exactly, and merges.
    #[test]
    fn progress_round_trips(phase0 in stats(), phase1 in stats(), interval in 0u64..10) {
        let (_, mut acc) = accumulator();
        let p = v1::Progress {
            run_id: "r".into(),
            interval,
            samples: vec![sample_to_wire(0, &phase0).unwrap(), sample_to_wire(1, &phase1).unwrap()],
            open_connections: 3,
            resources: None,
            endpoints: Vec::new(),
            failure_samples: Vec::new(),
            stage_connects: Vec::new(),
            debug: Vec::new(),
            ..Default::default()
        };
        let back = v1::Progress::decode(p.encode_to_vec().as_slice()).unwrap();
        prop_assert_eq!(&back, &p);
        let samples = check_progress(&acc, 1, &back).unwrap();
        prop_assert_eq!(
            samples.clone(),
            vec![(0, SparseStats::from(&phase0)), (1, SparseStats::from(&phase1))]
        );
        acc.add_progress(1, interval, &samples).unwrap();
        let done = acc.totals().unwrap().counters.requests_completed;
        prop_assert_eq!(done, phase0.counters.requests_completed + phase1.counters.requests_completed);
    }

    /// Messages of hostile values, in any order from any agent, then the report.
    #[test]
    fn hostile_progress_never_panics(
        messages in proptest::collection::vec(hostile_progress(), 1..6),
        lose in any::<bool>(),
    ) {
        let (s, mut acc) = accumulator();
        for (i, (agent, p)) in messages.iter().enumerate() {
            if lose && i == 1 {
                acc.mark_lost(1);
            }
            merge(&mut acc, *agent, p)?;
        }
        let _ = acc.live_report(&s, 3.0);
        let report = acc.finish(&s, ReportMeta { duration_s: 6.0, ..ReportMeta::default() });
        if let Ok(r) = report {
            serde_json::to_string(&r).unwrap();
        }
    }

    /// Random bytes, and encoded messages with bytes changed or cut.
    #[test]
    fn hostile_bytes_never_panic(
        (agent, p) in hostile_progress(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in any::<usize>(),
        random in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let (_, mut acc) = accumulator();
        let mut bytes = p.encode_to_vec();
        if !bytes.is_empty() {
            for (at, b) in edits {
                let at = at % bytes.len();
                bytes[at] = b;
            }
        }
        bytes.truncate(cut % (bytes.len() + 1));
        for input in [bytes, random] {
            if let Ok(p) = v1::Progress::decode(input.as_slice()) {
                merge(&mut acc, agent, &p)?;
            }
        }
    }
}
