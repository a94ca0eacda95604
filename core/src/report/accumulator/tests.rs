//! The accumulator against scenarios of each kind: merges, verdicts, bounds.

use super::assemble::without_userinfo;
use super::*;
use crate::report::RunOutcome;

fn closed(connections: u32) -> Scenario {
    let text = format!(
        "name: c\ntarget: http://h:1\nload: {{ model: closed, connections: {connections}, duration: 3s }}\nsession:\n  - http: {{ path: / }}\n"
    );
    Scenario::from_yaml(&text).unwrap()
}

fn gauge(opened: u64, peak: u64) -> crate::stats::SparseStats {
    let mut s = crate::stats::SparseStats::default();
    s.counters.connections_opened = opened;
    s.counters.peak_open_connections = peak;
    s
}

#[test]
fn peak_open_is_the_max_over_intervals_of_the_sum_over_agents() {
    let s = closed(300);
    let plan = Plan::new(&s, 2, &[], 0).unwrap();
    let mut acc = RunAccumulator::new(&s, plan, vec!["a".into(), "b".into()], 1.0);
    // Interval 0: a ramps to 100, b to 50. Interval 1: a 120, b 90. Interval 2: a 10.
    for (agent, interval, opened, peak) in [
        (0, 0, 100, 100),
        (1, 0, 50, 50),
        (1, 1, 45, 90),
        (0, 1, 25, 120),
        (0, 2, 0, 10),
    ] {
        acc.add(agent, interval, 0, &gauge(opened, peak)).unwrap();
    }
    // Live (nothing closed yet): the open intervals count.
    let live = acc.live_report(&s, 2.5).unwrap();
    assert_eq!(live.connections.peak_open, 210);
    acc.reported_through(0, 1).unwrap();
    acc.reported_through(1, 1).unwrap();
    assert_eq!(acc.live_report(&s, 2.5).unwrap().connections.peak_open, 210);

    let r = acc.finish(&s, ReportMeta::default()).unwrap();
    assert_eq!(
        r.connections,
        ConnectionsReport {
            opened: 220,
            peak_open: 210
        }
    );
    let rows: Vec<(u64, u64)> = r
        .timeline
        .iter()
        .map(|t| (t.peak_open, t.connections_opened))
        .collect();
    assert_eq!(rows, [(150, 150), (210, 70), (10, 0)]);
    let agents: Vec<u64> = r.agents.iter().map(|a| a.peak_open).collect();
    assert_eq!(agents, [120, 90]);

    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["connections"]["peak_open"], 210);
    assert_eq!(json["timeline"][1]["peak_open"], 210);
}

#[test]
fn the_target_is_kept_without_credentials() {
    assert_eq!(
        without_userinfo("http://u:p@h:1/a@b"),
        "http://h:1/a@b".to_string()
    );
    assert_eq!(without_userinfo("unix:///tmp/s"), "unix:///tmp/s");
    let s = closed(2);
    let plan = Plan::new(&s, 1, &[], 0).unwrap();
    let acc = RunAccumulator::new(&s, plan, vec!["a".into()], 1.0);
    let r = acc.finish(&s, ReportMeta::default()).unwrap();
    assert_eq!(r.target, "http://h:1");
}

#[test]
fn reports_without_connection_figures_still_load() {
    let mut json = serde_json::to_value(Report::default()).unwrap();
    let obj = json.as_object_mut().unwrap();
    obj.remove("connections");
    let back: Report = serde_json::from_value(json).unwrap();
    assert_eq!(back.connections, ConnectionsReport::default());
}

fn counted(completed: u64, failed: u64) -> crate::stats::SparseStats {
    let mut s = crate::stats::SparseStats::default();
    s.counters.requests_started = completed + failed;
    s.counters.requests_completed = completed;
    s.counters.requests_failed = failed;
    if failed > 0 {
        s.counters.errors.insert("connect_refused".into(), failed);
    }
    s
}

#[test]
fn a_progress_whose_samples_overflow_only_together_is_refused_whole() {
    let s = closed(2);
    let plan = Plan::new(&s, 1, &[], 0).unwrap();
    let mut acc = RunAccumulator::new(&s, plan, vec!["a".into()], 1.0);
    let half = counted(u64::MAX / 2 + 1, 0);
    assert!(acc.check(0, 0, 0, &half).is_ok());
    let samples = [(0, half.clone()), (0, half)];
    assert!(matches!(
        acc.add_progress(0, 0, &samples),
        Err(MergeError::CounterOverflow)
    ));
    assert_eq!(acc.totals().unwrap().counters, Counters::default());
    acc.add_progress(0, 0, &samples[..1]).unwrap();
    let t = acc.totals().unwrap().counters;
    assert_eq!(t.requests_completed, u64::MAX / 2 + 1);
    // The rest of what `check` refuses is refused whole too.
    assert!(matches!(
        acc.add_progress(1, 0, &samples[..1]),
        Err(MergeError::UnknownAgent(1))
    ));
    assert!(matches!(
        acc.add_progress(0, 0, &[(0, counted(1, 0)), (7, counted(1, 0))]),
        Err(MergeError::UnknownPhase(7))
    ));
    // Without samples, the agent and the interval are still checked.
    assert!(matches!(
        acc.check_progress(1, 0, &[]),
        Err(MergeError::UnknownAgent(1))
    ));
    assert!(matches!(
        acc.check_progress(0, u64::MAX, &[]),
        Err(MergeError::IntervalOutOfRange { .. })
    ));
    acc.add_progress(0, 1, &[]).unwrap();
    assert_eq!(acc.totals().unwrap().counters, t);
}

/// Two agents each sending the largest bucket count the decoder accepts, for the same
/// interval: the merged row and the report still encode (they failed, and the run ended
/// `failed` without a report).
#[test]
fn the_largest_counts_agents_can_send_still_make_a_report() {
    let s = closed(2);
    let plan = Plan::new(&s, 2, &[], 0).unwrap();
    let mut acc = RunAccumulator::new(&s, plan, vec!["a".into(), "b".into()], 1.0);
    let mut h = hist::new_histogram();
    h.record_n(1_000, i64::MAX as u64).unwrap();
    let huge = crate::stats::SparseStats {
        response: hist::decode_sparse(&hist::encode_wire(&h).unwrap()).unwrap(),
        ..counted(1, 0)
    };
    for agent in 0..2 {
        acc.add_progress(agent, 0, &[(0, huge.clone())]).unwrap();
    }
    let r = acc.finish(&s, ReportMeta::default()).unwrap();
    assert_eq!(r.timeline.len(), 1);
    assert_eq!(r.totals.completed, 2);
}

#[test]
fn a_run_that_delivered_nothing_is_failed_and_errors_breach_the_default_verdict() {
    let s = closed(2);
    let run = |completed, failed| {
        let plan = Plan::new(&s, 1, &[], 0).unwrap();
        let mut acc = RunAccumulator::new(&s, plan, vec!["a".into()], 1.0);
        acc.add(0, 0, 0, &counted(completed, failed)).unwrap();
        acc.finish(&s, ReportMeta::default()).unwrap()
    };
    let none = run(0, 0);
    assert_eq!(none.outcome, RunOutcome::Failed);
    assert_eq!(none.message.as_deref(), Some("no request was sent"));
    let refused = run(0, 40);
    assert_eq!(refused.outcome, RunOutcome::Failed);
    assert_eq!(
        refused.message.as_deref(),
        Some("no request succeeded: all 40 failed (connect_refused 40)")
    );
    // Some failures: the run succeeded, but the default error verdict (1%) breaches.
    let some = run(90, 10);
    assert_eq!(some.outcome, RunOutcome::Succeeded);
    let v = some.thresholds.last().unwrap();
    assert_eq!(v.expr, "error_rate < 1% (default)");
    assert!(!v.passed);
    assert!(run(1000, 1).thresholds_passed());
    // A user's run-wide error_rate threshold replaces the default; `none` turns it off.
    let mut own = s.clone();
    own.thresholds = vec!["error_rate < 20%".into()];
    let plan = Plan::new(&own, 1, &[], 0).unwrap();
    let mut acc = RunAccumulator::new(&own, plan, vec!["a".into()], 1.0);
    acc.add(0, 0, 0, &counted(90, 10)).unwrap();
    let r = acc.finish(&own, ReportMeta::default()).unwrap();
    assert_eq!(r.thresholds.len(), 1);
    assert!(r.thresholds_passed());
    let mut off = s.clone();
    off.max_error_rate = Some("none".into());
    assert_eq!(off.max_error_rate(), None);
    off.max_error_rate = Some("5%".into());
    assert_eq!(off.max_error_rate(), Some(0.05));
    off.max_error_rate = Some("lots".into());
    assert!(off
        .validate()
        .unwrap_err()
        .to_string()
        .contains("max_error_rate"));
}

/// Timeline rows close once every live agent has reported them: when the agent that held
/// the others back reports, not when one ahead of it does, and without a lost agent.
#[test]
fn rows_close_through_the_least_live_agent_only() {
    let s = closed(3);
    let plan = Plan::new(&s, 3, &[], 0).unwrap();
    let agents = vec!["a".into(), "b".into(), "c".into()];
    let mut acc = RunAccumulator::new(&s, plan, agents, 1.0);
    let report = |acc: &mut RunAccumulator, agent: usize, interval: u64| {
        acc.add_progress(agent, interval, &[(0, counted(1, 0))])
            .unwrap();
    };
    for i in 0..3 {
        report(&mut acc, 0, i);
    }
    report(&mut acc, 1, 0);
    assert_eq!(acc.closed_rows(), 0, "c has reported nothing");
    report(&mut acc, 2, 0);
    assert_eq!(acc.closed_rows(), 1, "all three through 0");
    report(&mut acc, 0, 3);
    assert_eq!(acc.closed_rows(), 1, "a was ahead already");
    report(&mut acc, 2, 1);
    assert_eq!(acc.closed_rows(), 1, "b still at 0");
    report(&mut acc, 1, 1);
    assert_eq!(acc.closed_rows(), 2, "all three through 1");
    // c is lost at 1: rows close on a and b alone.
    acc.mark_lost(2);
    report(&mut acc, 1, 2);
    assert_eq!(acc.closed_rows(), 3, "a and b through 2");
    report(&mut acc, 1, 3);
    assert_eq!(acc.closed_rows(), 4, "a and b through 3");
}
