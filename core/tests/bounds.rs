//! One property per bound `validate` enforces for the agents and the controller: random
//! scenarios near each limit are accepted at it and refused one past it, the error naming the
//! field and the limit, so what validates is what agents and the controller will hold.

use proptest::prelude::*;
use stampede_core::endpoints::MAX_ENDPOINTS;
use stampede_core::scenario::{
    Scenario, MAX_AGENTS, MAX_DEBUG, MAX_PHASES, MAX_PHASE_STEPS, MAX_REQUEST_STEPS,
    MAX_SETUP_VALUES, MAX_STEPS, MAX_THRESHOLDS,
};
use stampede_core::workload::{MAX_MIX_PERIOD, MAX_SESSION_TYPES, MAX_WORKLOADS};

const HEAD: &str = "name: b\ntarget: http://127.0.0.1:1\n";

fn phases(n: usize) -> String {
    let one = "{ duration: 1s, arrival_rate: 1 }";
    format!("phases: [ {} ]\n", vec![one; n].join(", "))
}

fn steps(n: usize) -> String {
    format!("[ {} ]", vec!["{ http: { path: / } }"; n].join(", "))
}

/// A scenario with `n` of the item a bound counts, everything else small.
fn with(bound: Bound, n: usize) -> String {
    let session = format!("session: {}\n", steps(1));
    match bound {
        Bound::Agents => format!("{HEAD}agents: {n}\n{}{session}", phases(1)),
        Bound::Thresholds => {
            let t = vec!["'p99 < 1s'"; n].join(", ");
            format!("{HEAD}thresholds: [ {t} ]\n{}{session}", phases(1))
        }
        Bound::Phases => format!("{HEAD}{}{session}", phases(n)),
        Bound::Steps => format!("{HEAD}{}session: {}\n", phases(1), steps(n)),
        Bound::SetupValues => {
            let e: Vec<String> = (0..n)
                .map(|i| format!("v{i}: {{ header: x-{i} }}"))
                .collect();
            format!(
                "{HEAD}{}setup:\n  - http: {{ path: /t }}\n    extract: {{ {} }}\n{session}",
                phases(1),
                e.join(", ")
            )
        }
        Bound::Debug => format!("{HEAD}debug: {n}\n{}{session}", phases(1)),
        Bound::Workloads => {
            let w: Vec<String> = (0..n)
                .map(|i| {
                    format!(
                        "  - {{ name: w{i}, {}, session: {} }}\n",
                        phases(1).trim_end(),
                        steps(1)
                    )
                })
                .collect();
            format!("{HEAD}workloads:\n{}", w.concat())
        }
        Bound::SessionTypes => mix(n, 1, 1),
        Bound::MixWeights => format!(
            "{HEAD}{}sessions:\n  - {{ name: a, weight: {}, steps: {} }}\n  - {{ name: b, weight: 1, steps: {} }}\n",
            phases(1),
            n - 1,
            steps(1),
            steps(1)
        ),
        Bound::Endpoints => {
            let e: Vec<String> = (0..n)
                .map(|i| format!("'127.0.{}.{}:80'", i / 250, i % 250 + 1))
                .collect();
            format!("{HEAD}endpoints: [ {} ]\n{}{session}", e.join(", "), phases(1))
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Bound {
    Agents,
    Thresholds,
    Phases,
    Steps,
    SetupValues,
    Debug,
    Workloads,
    SessionTypes,
    MixWeights,
    Endpoints,
}

impl Bound {
    /// The limit and the field its refusal names.
    fn limit(self) -> (usize, &'static str) {
        match self {
            Bound::Agents => (MAX_AGENTS as usize, "agents"),
            Bound::Thresholds => (MAX_THRESHOLDS, "thresholds"),
            Bound::Phases => (MAX_PHASES, "phases"),
            Bound::Steps => (MAX_STEPS, "session"),
            Bound::SetupValues => (MAX_SETUP_VALUES, "setup"),
            Bound::Debug => (MAX_DEBUG as usize, "debug"),
            Bound::Workloads => (MAX_WORKLOADS, "workloads"),
            Bound::SessionTypes => (MAX_SESSION_TYPES, "sessions"),
            Bound::MixWeights => (MAX_MIX_PERIOD as usize, "sessions"),
            Bound::Endpoints => (MAX_ENDPOINTS, "endpoints"),
        }
    }
}

fn bound() -> impl Strategy<Value = Bound> {
    prop_oneof![
        Just(Bound::Agents),
        Just(Bound::Thresholds),
        Just(Bound::Phases),
        Just(Bound::Steps),
        Just(Bound::SetupValues),
        Just(Bound::Debug),
        Just(Bound::Workloads),
        Just(Bound::SessionTypes),
        Just(Bound::MixWeights),
        Just(Bound::Endpoints),
    ]
}

/// A mix of `types` session types of `steps` steps over `phases` phases.
fn mix(types: usize, steps_each: usize, phase_count: usize) -> String {
    let types: Vec<String> = (0..types)
        .map(|t| {
            format!(
                "  - {{ name: t{t}, weight: 1, steps: {} }}\n",
                steps(steps_each)
            )
        })
        .collect();
    format!("{HEAD}{}sessions:\n{}", phases(phase_count), types.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn each_counted_bound_holds_at_its_limit_and_refuses_past_it(
        b in bound(),
        below in 0usize..4,
        past in 1usize..4,
    ) {
        let (limit, field) = b.limit();
        let at = limit - below;
        prop_assert!(Scenario::from_yaml(&with(b, at)).is_ok(), "{b:?} at {at}");
        let e = Scenario::from_yaml(&with(b, limit + past)).unwrap_err().to_string();
        prop_assert!(e.starts_with(&format!("{field}: ")), "{b:?}: {e}");
        prop_assert!(e.contains(&limit.to_string()), "{b:?} names no limit: {e}");
    }

    /// The statistics agents and the controller hold per request step: a mix validates
    /// exactly when its request steps and phases × steps fit their caps.
    #[test]
    fn step_statistics_validate_only_within_their_caps(
        types in 1usize..=MAX_SESSION_TYPES,
        steps_each in 1usize..=MAX_STEPS,
        phase_count in 1usize..=40,
    ) {
        let total = types * steps_each;
        let fits = total <= MAX_REQUEST_STEPS && total * phase_count <= MAX_PHASE_STEPS;
        let r = Scenario::from_yaml(&mix(types, steps_each, phase_count));
        match r {
            Ok(s) => {
                prop_assert!(fits, "{types} × {steps_each} over {phase_count} phases validated");
                prop_assert_eq!(s.step_names().len(), total);
            }
            Err(e) => {
                prop_assert!(!fits, "{types} × {steps_each} over {phase_count}: {e}");
                prop_assert!(e.to_string().starts_with("sessions: "), "{e}");
            }
        }
    }
}
