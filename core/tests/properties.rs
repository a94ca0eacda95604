//! Property tests of the core invariants (exact sharding, one histogram spec: `docs/design.md`)
//! and the scenario schema.

use std::collections::BTreeMap;

use proptest::prelude::*;
use stampede_core::hist;
use stampede_core::plan::Plan;
use stampede_core::report::{ReportMeta, RunAccumulator};
use stampede_core::scenario::{ArrivalProcess, Phase, Scenario};
use stampede_core::schedule::Schedule;
use stampede_core::shard::Shard;
use stampede_core::stats::{SparseStats, Stats};
use stampede_core::HumanDuration;

fn phase_strategy() -> impl Strategy<Value = Phase> {
    (
        1u64..20_000, // duration in ms
        prop_oneof![0.0..5.0f64, 0.0..400.0f64, Just(0.5), Just(0.0)],
        proptest::option::of(prop_oneof![0.0..400.0f64, Just(0.0)]),
    )
        .prop_map(|(ms, rate, ramp_to)| Phase {
            name: None,
            duration: HumanDuration(std::time::Duration::from_millis(ms)),
            arrival_rate: rate,
            ramp_to,
            warmup: false,
        })
}

fn process() -> impl Strategy<Value = ArrivalProcess> {
    prop_oneof![Just(ArrivalProcess::Uniform), Just(ArrivalProcess::Poisson)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The union of all shards is exactly the single-agent schedule; no arrival is lost or
    /// duplicated, and per phase the shard sizes differ by at most one.
    #[test]
    fn shards_partition_the_schedule(
        phases in proptest::collection::vec(phase_strategy(), 1..4),
        agents in 1u32..=64,
        proc_ in process(),
        seed in any::<u64>(),
    ) {
        let schedule = Schedule::new(&phases, proc_, seed);
        let single: Vec<_> = schedule.iter().collect();
        let mut union = Vec::with_capacity(single.len());
        let mut per_phase = vec![vec![0u64; phases.len()]; agents as usize];
        for k in 0..agents {
            let f = Shard::new(k, agents).filter().unwrap();
            for a in schedule.iter().filter(|a| f.owns(a.index)) {
                per_phase[k as usize][a.phase as usize] += 1;
                union.push(a);
            }
        }
        union.sort_by_key(|a| a.index);
        prop_assert_eq!(&union, &single);
        for p in 0..phases.len() {
            let sizes: Vec<u64> = per_phase.iter().map(|s| s[p]).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            prop_assert!(hi - lo <= 1, "phase {p}: sizes {sizes:?}");
        }
    }

    /// Weighted shards follow the weights exactly over every full period, and still partition.
    #[test]
    fn weighted_shards_partition(weights in proptest::collection::vec(1u32..10, 1..8), n in 0u64..500) {
        let count = weights.len() as u32;
        let filters: Vec<_> = (0..count)
            .map(|k| Shard { index: k, count, weights: weights.clone() }.filter().unwrap())
            .collect();
        let period: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let mut owned = vec![0u64; weights.len()];
        for i in 0..period * (n % 5 + 1) {
            let owners: Vec<usize> = (0..filters.len()).filter(|&k| filters[k].owns(i)).collect();
            prop_assert_eq!(owners.len(), 1);
            owned[owners[0]] += 1;
        }
        for (k, &w) in weights.iter().enumerate() {
            prop_assert_eq!(owned[k], u64::from(w) * (n % 5 + 1));
        }
    }

    /// Uniform arrivals: each phase plans the integral of its rate, within one.
    #[test]
    fn uniform_phase_counts_match_integral(phases in proptest::collection::vec(phase_strategy(), 1..5)) {
        let counts = Schedule::new(&phases, ArrivalProcess::Uniform, 0).count_per_phase();
        for (p, c) in phases.iter().zip(&counts) {
            prop_assert!((*c as f64 - p.expected_arrivals()).abs() <= 1.0 + 1e-9,
                "planned {c}, integral {}", p.expected_arrivals());
        }
    }

    /// Arrivals are in time order and inside their phase.
    #[test]
    fn arrivals_are_ordered_and_in_phase(phases in proptest::collection::vec(phase_strategy(), 1..4), proc_ in process(), seed in any::<u64>()) {
        let mut bounds = vec![0u64];
        for p in &phases { bounds.push(bounds.last().unwrap() + p.duration.as_nanos()); }
        let mut last = 0;
        for a in Schedule::new(&phases, proc_, seed).iter() {
            prop_assert!(a.at_ns >= last);
            last = a.at_ns;
            let p = a.phase as usize;
            prop_assert!(a.at_ns + 1 >= bounds[p] && a.at_ns <= bounds[p + 1] + 1, "{a:?} {bounds:?}");
        }
    }

    /// Histogram merge is addition: any order gives the same histogram, counts add up, and the
    /// codec round-trips exactly.
    #[test]
    fn merge_is_order_independent(values in proptest::collection::vec((0usize..5, 1u64..3_600_000_000), 0..400), perm_seed in any::<u64>()) {
        let mut parts: Vec<_> = (0..5).map(|_| hist::new_histogram()).collect();
        for (k, v) in &values { hist::record(&mut parts[*k], *v); }
        let decoded: Vec<_> = parts.iter().map(|h| hist::decode(&hist::encode(h).unwrap()).unwrap()).collect();
        prop_assert_eq!(&decoded, &parts);
        let mut forward = hist::new_histogram();
        for h in &decoded { hist::merge(&mut forward, h).unwrap(); }
        let mut order: Vec<usize> = (0..5).collect();
        let mut s = perm_seed;
        for i in (1..order.len()).rev() { s = s.wrapping_mul(6364136223846793005).wrapping_add(1); order.swap(i, (s >> 33) as usize % (i + 1)); }
        let mut shuffled = hist::new_histogram();
        for &i in &order { hist::merge(&mut shuffled, &decoded[i]).unwrap(); }
        prop_assert_eq!(&forward, &shuffled);
        prop_assert_eq!(forward.len(), values.len() as u64);
    }

    /// The merged report does not depend on the order in which agents' intervals arrive.
    #[test]
    fn report_is_order_independent(samples in proptest::collection::vec((0usize..3, 0u64..5, 0u32..2, 1u64..100_000, any::<bool>()), 1..60)) {
        let scenario = Scenario::from_yaml(include_str!("../../examples/demo.yaml")).unwrap();
        let plan = Plan::new(&scenario, 3, &[], 1).unwrap();
        let ids = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let build = |order: &[(usize, u64, u32, u64, bool)]| {
            let mut acc = RunAccumulator::new(&scenario, plan.clone(), ids.clone(), 1.0);
            for &(agent, interval, phase, us, ok) in order {
                let mut s = Stats::with_steps(1);
                s.counters.requests_started += 1;
                if ok { s.record_success(0, us, us / 2 + 1) } else { s.record_failure(0, "status") }
                acc.add(agent, interval, phase, &SparseStats::from(&s)).unwrap();
            }
            let mut r = acc.finish(&scenario, ReportMeta { duration_s: 12.0, ..ReportMeta::default() }).unwrap();
            r.timeline.clear(); // rows close in arrival order; totals must not
            r
        };
        let forward = build(&samples);
        let mut reversed = samples.clone();
        reversed.reverse();
        let backward = build(&reversed);
        prop_assert_eq!(&forward, &backward);
        let agent_sum: u64 = forward.agents.iter().map(|a| a.completed).sum();
        prop_assert_eq!(forward.totals.completed, agent_sum);
        let phase_sum: u64 = forward.phases.iter().map(|p| p.completed).sum();
        prop_assert_eq!(forward.totals.completed, phase_sum);
        prop_assert_eq!(forward.latency.response_time.count, forward.totals.completed);
    }
}

fn load_scenario(model: &str, rate: f64, connections: u32, ms: u64) -> Scenario {
    let rate = if model == "constant" {
        format!("rate: {rate}, ")
    } else {
        String::new()
    };
    let text = format!(
        "name: load\ntarget: http://h:1\nload: {{ model: {model}, {rate}connections: {connections}, duration: {ms}ms }}\nsession:\n  - http: {{ path: / }}\n"
    );
    Scenario::from_yaml(&text).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A constant-rate load plans exactly the uniform schedule of one phase at rate R: the
    /// shards holding its connections partition it, differ by at most one slot, and its
    /// connections split evenly.
    #[test]
    fn constant_load_shards_exactly(
        rate in prop_oneof![0.1..50.0f64, 1.0..5_000.0f64, Just(0.5)],
        ms in 1u64..20_000,
        connections in 1u32..500,
        agents in 1u32..=16,
    ) {
        let s = load_scenario("constant", rate, connections, ms);
        let phases = s.effective_phases();
        prop_assert_eq!(phases.len(), 1);
        let single = Schedule::new(&phases, ArrivalProcess::Uniform, 0).iter().count() as u64;
        prop_assert!((single as f64 - rate * ms as f64 / 1000.0).abs() <= 1.0 + 1e-9);
        let plan = Plan::new(&s, agents, &[], 7).unwrap();
        prop_assert_eq!(plan.total_sessions(), single);
        // Slots go to the agents holding connections (all of them when there are enough
        // connections), differing by at most one; an agent without a connection runs none.
        let holding = agents.min(connections) as usize;
        let per_agent: Vec<u64> = (0..agents as usize).map(|a| plan.agent_sessions(a)).collect();
        let (lo, hi) = (per_agent[..holding].iter().min().unwrap(), per_agent[..holding].iter().max().unwrap());
        prop_assert!(hi - lo <= 1, "{per_agent:?}");
        prop_assert!(per_agent[holding..].iter().all(|s| *s == 0), "{per_agent:?}");
        let conns = Plan::connections(&s, agents);
        prop_assert_eq!(conns.iter().sum::<u64>(), u64::from(connections));
        let (lo, hi) = (conns.iter().min().unwrap(), conns.iter().max().unwrap());
        prop_assert!(hi - lo <= 1, "{conns:?}");
    }

    /// A closed load has no schedule (nothing planned) and splits its connections evenly.
    #[test]
    fn closed_load_splits_connections(connections in 1u32..10_000, agents in 1u32..=64) {
        let s = load_scenario("closed", 0.0, connections, 1000);
        let plan = Plan::new(&s, agents, &[], 0).unwrap();
        prop_assert_eq!(plan.total_sessions(), 0);
        let conns = Plan::connections(&s, agents);
        prop_assert_eq!(conns.len(), agents as usize);
        prop_assert_eq!(conns.iter().sum::<u64>(), u64::from(connections));
        let (lo, hi) = (conns.iter().min().unwrap(), conns.iter().max().unwrap());
        prop_assert!(hi - lo <= 1, "{conns:?}");
    }
}

#[test]
fn closed_report_plans_what_it_started() {
    let s = load_scenario("closed", 0.0, 10, 2000);
    let plan = Plan::new(&s, 2, &[], 0).unwrap();
    let mut acc = RunAccumulator::new(&s, plan, vec!["a".into(), "b".into()], 1.0);
    for agent in 0..2 {
        let mut st = Stats::with_steps(1);
        for _ in 0..10 {
            st.counters.sessions_planned += 1;
            st.record_start(0);
            st.counters.requests_started += 1;
            st.record_success(0, 100, 90);
        }
        st.counters.requests_started += 1;
        st.record_failure(0, "timeout");
        acc.add(agent, 0, 0, &SparseStats::from(&st)).unwrap();
    }
    let r = acc
        .finish(
            &s,
            ReportMeta {
                duration_s: 2.0,
                ..ReportMeta::default()
            },
        )
        .unwrap();
    assert_eq!(r.phases.len(), 1);
    assert_eq!(r.phases[0].name, "closed");
    assert_eq!(r.totals.planned, 22);
    assert_eq!(r.totals.completed, 20);
    assert!((r.totals.achieved_ratio - 20.0 / 22.0).abs() < 1e-9);
    assert_eq!(r.agents.iter().map(|a| a.planned).sum::<u64>(), 22);
    let load = r.load.unwrap();
    assert_eq!(load.model, "closed");
    assert_eq!(load.connections, 10);
    assert!((load.achieved_rps - 10.0).abs() < 1e-9);
}

#[test]
fn low_rate_over_many_agents_loses_nothing() {
    // 0.5/s for 7 s over 7 agents: 3 or 4 arrivals, some agents get none, none is lost.
    let text = "name: low\ntarget: http://h:1\nphases:\n  - { duration: 7s, arrival_rate: 0.5 }\nsession:\n  - http: { path: / }\n";
    let s = Scenario::from_yaml(text).unwrap();
    let plan = Plan::new(&s, 7, &[], 0).unwrap();
    assert_eq!(plan.total_sessions(), 3); // arrivals at Λ = 0.5, 1.5, 2.5 of a total 3.5
    assert!(plan.sessions.iter().all(|a| a[0] <= 1));
}

fn schema_validator() -> jsonschema::Validator {
    jsonschema::validator_for(&stampede_core::scenario::json_schema()).unwrap()
}

#[test]
fn committed_schema_matches_the_types() {
    let generated =
        serde_json::to_string_pretty(&stampede_core::scenario::json_schema()).unwrap() + "\n";
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../schema/scenario.schema.json"
    );
    if std::env::var_os("STAMPEDE_BLESS").is_some() {
        std::fs::write(path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "schema/scenario.schema.json is stale: run `STAMPEDE_BLESS=1 cargo test -p stampede-core`"
    );
}

#[test]
fn every_example_validates_against_the_schema_and_parses() {
    let validator = schema_validator();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let mut seen = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let value: serde_json::Value = serde_norway::from_str(&text).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| format!("{}: {}", e.instance_path(), e))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
        Scenario::from_yaml(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        seen.insert(path, ());
    }
    assert!(seen.len() >= 3, "examples missing: {seen:?}");
}

#[test]
fn schema_rejects_what_validation_rejects() {
    let validator = schema_validator();
    for bad in [
        "name: x\nphases: 3\nsession: []\n",
        "name: x\nphases:\n  - { duration: 10, arrival_rate: 1 }\nsession: []\n",
        "name: x\nphases:\n  - { duration: 1s, arrival_rate: 1 }\nsession:\n  - ftp: {}\n",
    ] {
        let value: serde_json::Value = serde_norway::from_str(bad).unwrap();
        assert!(!validator.is_valid(&value), "schema accepted {bad}");
        assert!(Scenario::from_yaml(bad).is_err());
    }
}

/// Values spread over the whole spec, dense at the low end as latencies are, plus the bounds.
fn latency_values() -> impl Strategy<Value = Vec<(usize, u64)>> {
    proptest::collection::vec(
        (
            0usize..5,
            prop_oneof![
                0u64..3_000,
                1_000u64..200_000,
                1u64..3_600_000_000,
                Just(0u64),
                Just(3_600_000_000u64),
                Just(4_000_000_000u64),
            ],
        ),
        0..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The sparse form is exact: decoding the wire bytes sparsely gives the same buckets as
    /// decoding them densely, re-encoding gives the same bytes, and every percentile, the
    /// mean and the stdev are the same bits as hdrhistogram's.
    #[test]
    fn sparse_equals_dense(values in latency_values()) {
        use stampede_core::hist::SparseHist;
        use stampede_core::report::Percentiles;
        let mut dense = hist::new_histogram();
        let mut direct = SparseHist::default();
        for (k, v) in &values {
            hist::record(&mut dense, *v);
            direct.record_n(*v, *k as u64 + 1);
            if *k > 0 { dense.record_n((*v).clamp(1, 3_600_000_000), *k as u64).unwrap(); }
        }
        let bytes = hist::encode(&dense).unwrap();
        let sparse = hist::decode_sparse(&bytes).unwrap();
        prop_assert_eq!(&sparse, &SparseHist::from_dense(&dense));
        prop_assert_eq!(&sparse, &direct);
        prop_assert_eq!(sparse.len(), dense.len());
        prop_assert_eq!(hist::encode_sparse(&sparse).unwrap(), bytes);
        prop_assert_eq!(Percentiles::of_sparse(&sparse), Percentiles::of(&dense));
        for q in [0.0, 0.1, 0.5, 0.999, 1.0] {
            prop_assert_eq!(sparse.value_at_quantile(q), dense.value_at_quantile(q));
        }
        // Several at once, in one walk when they ascend and one walk each when not.
        let ascending = [0.0, 0.1, 0.5, 0.5, 0.999, 1.0, 1.5];
        prop_assert_eq!(sparse.values_at_quantiles(ascending), ascending.map(|q| dense.value_at_quantile(q)));
        let mixed = [0.999, 0.0, 0.5, 1.5, 0.1];
        prop_assert_eq!(sparse.values_at_quantiles(mixed), mixed.map(|q| dense.value_at_quantile(q)));
        prop_assert_eq!(sparse.min(), dense.min());
        prop_assert_eq!(sparse.max(), dense.max());
        let medians: Vec<(u64, u64)> = dense.iter_recorded().map(|v| (dense.median_equivalent(v.value_iterated_to()), v.count_at_value())).collect();
        prop_assert_eq!(sparse.iter_medians().collect::<Vec<_>>(), medians);
    }

    /// Sparse merge is addition: any order gives the same histogram, equal to the dense merge
    /// (same percentiles, same encoded .hlog bytes).
    #[test]
    fn sparse_merge_is_order_independent_and_equals_dense(values in latency_values(), perm_seed in any::<u64>()) {
        use stampede_core::hist::SparseHist;
        use stampede_core::report::Percentiles;
        let mut parts: Vec<_> = (0..5).map(|_| hist::new_histogram()).collect();
        for (k, v) in &values { hist::record(&mut parts[*k], *v); }
        let sparse: Vec<SparseHist> = parts.iter().map(|h| hist::decode_sparse(&hist::encode(h).unwrap()).unwrap()).collect();
        let mut dense = hist::new_histogram();
        let mut forward = SparseHist::default();
        for (h, s) in parts.iter().zip(&sparse) {
            hist::merge(&mut dense, h).unwrap();
            forward.add(s);
        }
        let mut order: Vec<usize> = (0..5).collect();
        let mut s = perm_seed;
        for i in (1..order.len()).rev() { s = s.wrapping_mul(6364136223846793005).wrapping_add(1); order.swap(i, (s >> 33) as usize % (i + 1)); }
        let mut shuffled = SparseHist::default();
        for &i in &order { shuffled.add(&sparse[i]); }
        prop_assert_eq!(&forward, &shuffled);
        prop_assert_eq!(forward.len(), values.len() as u64);
        prop_assert_eq!(&forward, &SparseHist::from_dense(&dense));
        prop_assert_eq!(Percentiles::of_sparse(&forward), Percentiles::of(&dense));
        prop_assert_eq!(hist::encode_sparse(&forward).unwrap(), hist::encode(&dense).unwrap());
    }
}

#[test]
fn hostile_sparse_input_is_refused_without_panicking() {
    use stampede_core::report::MergeError;
    use stampede_core::stats::Counters;
    let scenario = Scenario::from_yaml(include_str!("../../examples/demo.yaml")).unwrap();
    let plan = Plan::new(&scenario, 1, &[], 1).unwrap();
    let mut acc = RunAccumulator::new(&scenario, plan, vec!["a".into()], 1.0);
    let big = SparseStats {
        counters: Counters {
            requests_completed: u64::MAX,
            ..Counters::default()
        },
        ..SparseStats::default()
    };
    acc.add(0, 0, 0, &big).unwrap();
    assert!(matches!(
        acc.add(0, 1, 0, &big),
        Err(MergeError::CounterOverflow)
    ));
    assert!(matches!(
        acc.add(0, u64::MAX, 0, &SparseStats::default()),
        Err(MergeError::IntervalOutOfRange { .. })
    ));
    let last = acc.max_interval();
    acc.add(0, last, 0, &SparseStats::default()).unwrap();
    acc.reported_through(0, u64::MAX).unwrap();
    acc.add(0, 0, 0, &SparseStats::default()).unwrap();
    let r = acc.finish(&scenario, ReportMeta::default()).unwrap();
    assert_eq!(r.totals.completed, u64::MAX);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Each agent receives only the rows of the keys it runs: without wrapping, the shares
    /// are pairwise disjoint and their union is exactly the rows the run uses (each once);
    /// with it, every key still finds its row. Whatever the agent count, every key an agent
    /// runs finds in its share the row it gets with one agent (`per: session` and
    /// `per: request`, `sequence` and `shuffle`).
    #[test]
    fn agents_receive_exactly_their_own_rows(
        rows in 1usize..400,
        phases in proptest::collection::vec(phase_strategy(), 1..3),
        agents in 1u32..=32,
        shuffle in any::<bool>(),
        per_request in any::<bool>(),
        repeat in 1u32..4,
        wrap in any::<bool>(),
        seed in any::<u64>(),
    ) {
        use stampede_core::data::share::Share;
        use stampede_core::data::{DataOrder, DataScope, DataSource, Keys, OnExhausted};
        use stampede_core::shard::ShardMap;
        let mut scenario = Scenario::from_yaml(&format!(r#"
name: t
target: http://127.0.0.1:1
phases: [ {{ duration: 1s, arrival_rate: 1 }} ]
data: {{ users: {{ on_exhausted: wrap, columns: [x], rows: [["0"]] }} }}
session:
  - http: {{ path: /static }}
  - http: {{ path: '/${{users.x}}' }}
    repeat: {repeat}
"#)).unwrap();
        scenario.phases = phases;
        let source = DataSource {
            order: if shuffle { DataOrder::Shuffle } else { DataOrder::Sequence },
            per: if per_request { DataScope::Request } else { DataScope::Session },
            on_exhausted: if wrap { OnExhausted::Wrap } else { OnExhausted::Stop },
            columns: vec!["x".into()],
            rows: stampede_core::data::Rows::from_rows((0..rows).map(|i| [i.to_string()])).unwrap(),
            ..Default::default()
        };
        let pass = source.pass("users", seed);
        let schedule = Schedule::new(&scenario.phases, ArrivalProcess::Uniform, seed);
        let per_session = if per_request { u64::from(repeat) } else { 1 };
        let reach = schedule.total_arrivals() * per_session;
        // The row every key gets with one agent (the reference), by walking the keys.
        let expected = |key: u64| -> Option<&str> {
            let n = rows as u64;
            let p = if key < n { key } else if wrap { key % n } else { return None };
            source.rows.row(pass[p as usize] as usize).and_then(|r| r.get(0))
        };
        let map = ShardMap::new(agents, &[]).unwrap();
        let keys = Keys::new(&scenario, "users", &source, seed, &map);
        prop_assert_eq!(keys.reach, Some(reach));
        prop_assert_eq!(keys.per_session, per_session);
        let mut all = Vec::new();
        for k in 0..agents {
            let positions = keys.positions(&source, k);
            let share = Share::of(&source, &pass, &positions).unwrap();
            let f = Shard::new(k, agents).filter().unwrap();
            for a in schedule.iter().filter(|a| f.owns(a.index)) {
                for r in 0..per_session {
                    let key = a.index * per_session + r;
                    let got = share.row(key).map(|row| share.cell(row, 0));
                    prop_assert_eq!(got, expected(key), "agent {} key {}", k, key);
                }
            }
            all.extend(positions);
        }
        all.sort_unstable();
        let used = reach.min(rows as u64);
        if !wrap || reach <= rows as u64 {
            prop_assert_eq!(all, (0..used as u32).collect::<Vec<_>>(), "shares overlap or miss a row");
        }
    }
}
