//! What the controller does with the Progress messages of a run's agents: protobuf decoding
//! (prost), the checks (`convert::check_progress`: sizes, phases, steps, intervals, histograms,
//! counters that would overflow), the merge (`RunAccumulator::add_progress`), then the live
//! view, the live thresholds and the final report. Errors are fine; a panic is a bug, and a
//! Progress the checks accept must merge.
//!
//! Input: frames of `[agent][length: u16 LE][Progress bytes]` for a run of two agents (agent
//! bytes ≥ 2 name an agent the run does not have; 0xff marks agent 1 lost instead).

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use prost::Message;
use stampede_core::plan::Plan;
use stampede_core::report::{ReportMeta, RunAccumulator};
use stampede_core::scenario::Scenario;
use stampede_core::threshold::{live_breach, Threshold};
use stampede_proto::convert::check_progress;
use stampede_proto::v1;

const SCENARIO: &str = r#"
name: fuzz-progress
target: http://127.0.0.1:8080
agents: 2
phases:
  - { name: warm-up, duration: 3s, arrival_rate: 20 }
  - { name: ramp, duration: 3s, arrival_rate: 20, ramp_to: 50 }
session:
  - name: login
    http: { method: POST, path: /login, body: x }
  - think_time: 10ms
  - name: read
    http: { method: GET, path: /data }
    repeat: 3
thresholds:
  - p99 < 50ms
  - error_rate < 1%
  - throughput >= 99% planned
  - phase(ramp).p99.9 <= 200ms
  - step(login).service.p99 < 20ms
abort_on_fail: true
"#;

fn scenario() -> &'static (Scenario, Vec<Threshold>) {
    static S: OnceLock<(Scenario, Vec<Threshold>)> = OnceLock::new();
    S.get_or_init(|| {
        let s = Scenario::from_yaml(SCENARIO).expect("the fuzz scenario is valid");
        let t = s.parsed_thresholds().expect("its thresholds parse");
        (s, t)
    })
}

fuzz_target!(|data: &[u8]| {
    let (s, thresholds) = scenario();
    let plan = Plan::new(s, 2, &[], 1).expect("a plan for two agents");
    let mut acc = RunAccumulator::new(s, plan, vec!["a".into(), "b".into()], 1.0);
    let mut rest = data;
    while let [agent, lo, hi, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len());
        let (frame, tail) = tail.split_at(len);
        rest = tail;
        if *agent == 0xff {
            acc.mark_lost(1);
            continue;
        }
        let Ok(p) = v1::Progress::decode(frame) else {
            continue;
        };
        let agent = usize::from(*agent);
        if let Ok(samples) = check_progress(&acc, agent, &p) {
            acc.add_progress(agent, p.interval, &samples)
                .expect("a checked Progress merges");
        }
        let elapsed = (p.interval as f64).min(1e6);
        let _ = acc.snapshot(elapsed);
        if let Ok(live) = acc.live_report(s, elapsed) {
            let _ = live_breach(thresholds, &live, elapsed);
        }
    }
    let _ = acc.lost_share();
    let meta = ReportMeta {
        duration_s: 6.0,
        ..ReportMeta::default()
    };
    if let Ok(report) = acc.finish(s, meta) {
        serde_json::to_string(&report).expect("a report serialises");
    }
});
