//! An interval sent in parts merges into the same report as the interval sent whole: the
//! agent's split, the controller's checks, and the accumulator's merge of every part but the
//! one that completes the interval without closing its rows.

use prost::Message;
use stampede_core::plan::Plan;
use stampede_core::report::{ReportMeta, RunAccumulator};
use stampede_core::scenario::Scenario;
use stampede_core::stats::IntervalStats;
use stampede_proto::convert::{check_progress, sample_to_wire};
use stampede_proto::parts::split;
use stampede_proto::v1;

const STEPS: usize = 40;

fn scenario() -> Scenario {
    let steps: String = (0..STEPS)
        .map(|k| format!("  - {{ name: s{k}, http: {{ path: /s{k} }} }}\n"))
        .collect();
    Scenario::from_yaml(&format!(
        "name: p\ntarget: http://127.0.0.1:8080\nagents: 2\nphases:\n  \
         - {{ duration: 4s, arrival_rate: 20 }}\nsession:\n{steps}"
    ))
    .unwrap()
}

fn accumulator(s: &Scenario) -> RunAccumulator {
    let plan = Plan::new(s, 2, &[], 1).unwrap();
    RunAccumulator::new(s, plan, vec!["a".into(), "b".into()], 1.0)
}

/// Agent `agent`'s interval `interval`: every step with a wide spread of latencies.
fn progress(agent: u64, interval: u64) -> v1::Progress {
    let mut s = IntervalStats::with_steps(STEPS);
    for step in 0..STEPS {
        for i in 0..300u64 {
            let us = 500 + i * 97_003 + step as u64 * 31 + agent * 7 + interval;
            s.record_start(us / 50);
            s.record_success(step, us, us / 3);
        }
        s.record_failure(step, "timeout");
    }
    s.counters_mut().sessions_planned = 20;
    v1::Progress {
        run_id: "r".into(),
        interval,
        samples: vec![sample_to_wire(0, s.settle().unwrap()).unwrap()],
        open_connections: 4,
        ..Default::default()
    }
}

/// What the controller's driver does with each Progress in turn: a part that leaves its
/// interval incomplete is merged without closing it.
fn merge_all(acc: &mut RunAccumulator, messages: &[(usize, v1::Progress)]) {
    for (agent, p) in messages {
        let samples = check_progress(acc, *agent, p).unwrap();
        if p.parts > 1 && p.part + 1 < p.parts {
            acc.add_part(*agent, p.interval, &samples).unwrap();
        } else {
            acc.add_progress(*agent, p.interval, &samples).unwrap();
        }
    }
}

#[test]
fn an_interval_in_parts_merges_into_the_report_it_makes_whole() {
    let s = scenario();
    let whole: Vec<(usize, v1::Progress)> = (0..4)
        .flat_map(|interval| (0..2).map(move |agent| (agent, progress(agent as u64, interval))))
        .collect();
    let budget = 8 * 1024;
    let mut parted = Vec::new();
    for (agent, p) in &whole {
        assert!(p.encoded_len() > 2 * budget, "{} bytes", p.encoded_len());
        parted.extend(split(p.clone(), budget).into_iter().map(|q| (*agent, q)));
    }
    assert!(parted.len() > 3 * whole.len(), "{} parts", parted.len());

    let (mut a, mut b) = (accumulator(&s), accumulator(&s));
    merge_all(&mut a, &whole);
    merge_all(&mut b, &parted);
    let meta = || ReportMeta {
        duration_s: 4.0,
        ..ReportMeta::default()
    };
    let (a, b) = (a.finish(&s, meta()).unwrap(), b.finish(&s, meta()).unwrap());
    assert_eq!(
        serde_json::to_value(&a).unwrap(),
        serde_json::to_value(&b).unwrap()
    );
    assert_eq!(a.totals.completed, 2 * 4 * 300 * STEPS as u64);
    assert!(!a.timeline.is_empty());
}
