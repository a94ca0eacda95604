//! Property tests of exact weighted session mixes: every agent runs the exact mix over every
//! period of its own arrivals, the run as a whole is exact, and the plan's per-type counts
//! (arithmetic) equal what agents walking their shards run.

use proptest::prelude::*;
use stampede_core::plan::Plan;
use stampede_core::scenario::Scenario;
use stampede_core::schedule::Schedule;
use stampede_core::shard::Shard;
use stampede_core::workload::Mix;

/// A one-workload scenario: a uniform phase of `arrivals` over 10 s and a mix of `weights`.
fn mixed(weights: &[u32], arrivals: u64) -> Scenario {
    let types: Vec<String> = weights
        .iter()
        .enumerate()
        .map(|(t, w)| {
            format!("  - {{ name: t{t}, weight: {w}, steps: [ {{ http: {{ method: GET, path: /t{t} }} }} ] }}")
        })
        .collect();
    let text = format!(
        "name: mix\ntarget: http://127.0.0.1:1\nseed: 3\nphases: [ {{ duration: 10s, arrival_rate: {} }} ]\nsessions:\n{}\n",
        arrivals as f64 / 10.0,
        types.join("\n")
    );
    Scenario::from_yaml(&text).unwrap()
}

/// The session types agent `k` of `n` runs, in order: its own arrivals of the schedule, each
/// reading the mix at the agent's offset plus its own count (what the agent's arrival loop
/// does).
fn walk(s: &Scenario, k: u32, n: u32) -> Vec<u32> {
    let w = &s.workload_views()[0];
    let mix = w.mix();
    let offset = mix.offset(u64::from(k), u64::from(n));
    let filter = Shard::new(k, n).filter().unwrap();
    let schedule = Schedule::new(&w.effective_phases(false), s.arrival, w.seed(3, false));
    schedule
        .iter()
        .filter(|a| filter.owns(a.index))
        .enumerate()
        .map(|(j, _)| mix.pick(offset + j as u64))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any `P` consecutive own arrivals of any agent hold each type exactly `weight` times;
    /// between whole periods each agent is within two of each type's exact share (so the run
    /// is within two per agent, and exact when every agent's count is a multiple of the
    /// period); the plan counts what agents run.
    #[test]
    fn every_agent_runs_the_exact_mix_and_the_plan_counts_it(
        weights in proptest::collection::vec(1u32..12, 1..6),
        agents in 1u32..12,
        arrivals in 1u64..1500,
    ) {
        let s = mixed(&weights, arrivals);
        let period: u64 = weights.iter().map(|w| u64::from(*w)).sum();
        let plan = Plan::new(&s, agents, &[], 3).unwrap();
        let mut total = vec![0u64; weights.len()];
        let mut all = 0u64;
        for k in 0..agents {
            let kinds = walk(&s, k, agents);
            for window in kinds.windows(period as usize) {
                let mut c = vec![0u64; weights.len()];
                for t in window {
                    c[*t as usize] += 1;
                }
                let want: Vec<u64> = weights.iter().map(|w| u64::from(*w)).collect();
                prop_assert_eq!(c, want, "agent {} of {}", k, agents);
            }
            let mut mine = vec![0u64; weights.len()];
            for t in &kinds {
                mine[*t as usize] += 1;
            }
            prop_assert_eq!(&plan.types[k as usize], &mine, "plan of agent {}", k);
            for (t, c) in mine.iter().enumerate() {
                // Between whole periods, a window read from any offset of a smooth weighted
                // round-robin table is off its exact share by less than two of each type.
                let exact = kinds.len() as f64 * f64::from(weights[t]) / period as f64;
                prop_assert!((*c as f64 - exact).abs() < 2.0);
                total[t] += c;
            }
            all += kinds.len() as u64;
        }
        for (t, c) in total.iter().enumerate() {
            let exact = all as f64 * f64::from(weights[t]) / period as f64;
            prop_assert!((*c as f64 - exact).abs() < 2.0 * f64::from(agents), "type {} got {} of {}", t, c, exact);
        }
        prop_assert_eq!(plan.sessions_per_type().iter().sum::<u64>(), plan.total_sessions());
    }
}

/// The example: 120 arrivals, 3 agents and a 3:1 mix give 90 and 30 exactly, each
/// agent 30 and 10.
#[test]
fn three_to_one_over_three_agents_is_exact() {
    let s = mixed(&[3, 1], 120);
    let plan = Plan::new(&s, 3, &[], 3).unwrap();
    assert_eq!(plan.sessions_per_type(), vec![90, 30]);
    for k in 0..3 {
        assert_eq!(plan.types[k], vec![30, 10]);
    }
}

/// The table reads the same under any stream offset: a window of a period is exact wherever
/// it starts, which is what lets agents start at different offsets.
#[test]
fn a_period_is_exact_from_any_offset() {
    let m = Mix::new(&[5, 2, 1]).unwrap();
    for from in 0..16 {
        assert_eq!(m.counts(from, 8), vec![5, 2, 1]);
    }
}
