//! The scenario parser on untrusted text (what `SubmitRun` hands the controller, what the CLI
//! reads), both entry points, then what the controller computes from a scenario it accepted.
//! Errors are fine; a panic, a timeout or a blown memory limit is a bug. A scenario that
//! parses must survive its own JSON form (the CLI re-sends scenarios as JSON after inlining
//! files), unchanged.

#![no_main]

use libfuzzer_sys::fuzz_target;
use stampede_core::plan::Plan;
use stampede_core::report::{ReportMeta, RunAccumulator};
use stampede_core::scenario::{Scenario, ScenarioError};

type Parse = fn(&str) -> Result<Scenario, ScenarioError>;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsers: [(&str, Parse); 2] = [
        ("from_yaml", Scenario::from_yaml),
        ("from_yaml_loadless", Scenario::from_yaml_loadless),
    ];
    for (name, parse) in parsers {
        if let Ok(s) = parse(text) {
            accepted(name, parse, &s);
        }
    }
});

fn accepted(name: &str, parse: Parse, s: &Scenario) {
    let json = serde_json::to_string(s).expect("an accepted scenario serialises");
    match parse(&json) {
        Ok(again) => assert_eq!(
            &again, s,
            "{name}: the JSON form parses differently: {json}"
        ),
        Err(e) => panic!("{name}: the JSON form of an accepted scenario is refused: {e}\n{json}"),
    }
    // What the controller derives before and during a run.
    let _ = (
        s.duration(),
        s.step_names(),
        s.requests_per_session(),
        s.is_closed(),
    );
    let _ = stampede_core::ports::worst_case_session(s);
    let _ = s.target.as_ref().and_then(stampede_core::ports::endpoint);
    let _ = s.parsed_thresholds();
    let agents = s.agents.unwrap_or(1).min(8);
    let seed = s.seed.unwrap_or(7);
    let _ = s.check_data_supply(seed);
    let _ = stampede_core::ports::demand(s, agents, seed, &[]);
    let Ok(plan) = Plan::new(s, agents, &[], seed) else {
        return;
    };
    let ids = (0..agents).map(|i| format!("agent-{i}")).collect();
    let acc = RunAccumulator::new(s, plan, ids, 1.0);
    let _ = acc.snapshot(1.0);
    let _ = acc.live_report(s, 1.0);
    let meta = ReportMeta {
        duration_s: s.duration().as_secs_f64(),
        ..ReportMeta::default()
    };
    if let Ok(report) = acc.finish(s, meta) {
        let _ = serde_json::to_string(&report);
    }
}
