use crate::plan::Plan;
use crate::report::{ReportMeta, RunAccumulator};
use crate::scenario::Scenario;
use crate::stats::SparseStats;
use crate::threshold::{live_breach, Threshold};

/// One interval of one phase: `ok` successes at `ok_us`, `bad` failures at 1 ms.
fn sample(ok: u64, bad: u64, ok_us: u64) -> SparseStats {
    let mut s = SparseStats::default();
    s.counters.sessions_planned = ok + bad;
    s.counters.sessions_started = ok + bad;
    s.counters.requests_started = ok + bad;
    s.counters.requests_completed = ok;
    s.counters.requests_failed = bad;
    if bad > 0 {
        s.counters.errors.insert("status_500".into(), bad);
    }
    let _ = s.response.record_n(ok_us, ok);
    let _ = s.service.record_n(ok_us, ok);
    let _ = s.response.record_n(1000, bad);
    let _ = s.service.record_n(1000, bad);
    s
}

fn scenario(extra: &str) -> Scenario {
    Scenario::from_yaml(&format!(
        "name: w\ntarget: http://h:1\nphases: [ {{ name: steady, duration: 12s, arrival_rate: 100 }} ]\nsession: [ {{ http: {{ path: / }} }} ]\n{extra}"
    ))
    .unwrap()
}

fn accumulator(s: &Scenario) -> RunAccumulator {
    let plan = Plan::new(s, 1, &[], 0).unwrap();
    RunAccumulator::new(s, plan, vec!["a".into()], 1.0)
}

/// 100 requests a second for 12 s, all failing from the 9th second: the cumulative error
/// rate (33 %) hides it, the worst 2 s window (100 %) does not, and it is seen live as soon
/// as the interval that breaks closes.
#[test]
fn a_late_collapse_fails_its_window_and_is_seen_live() {
    let s = scenario(
        "thresholds: [ \"window(2s).error_rate < 5%\", \"error_rate < 40%\" ]\nabort_on_fail: true\n",
    );
    let ts = s.parsed_thresholds().unwrap();
    let mut acc = accumulator(&s);
    let mut breached_at = None;
    for i in 0..12u64 {
        let (ok, bad) = if i < 8 { (100, 0) } else { (0, 100) };
        acc.add_progress(0, i, &[(0, sample(ok, bad, 2000))])
            .unwrap();
        let live = acc.live_report(&s, (i + 1) as f64).unwrap();
        if let Some(b) = live_breach(&ts, &live, (i + 1) as f64) {
            breached_at.get_or_insert((i, b));
        }
    }
    let (at, b) = breached_at.expect("a live breach");
    // Interval 8 is the first that fails: the window 7–9 s has 50 % errors.
    assert_eq!(at, 8);
    assert_eq!(b.expr, "window(2s).error_rate < 5%");
    assert_eq!(b.measured, 0.5);
    assert!(
        b.measured_text.contains("in the window 7s–9s"),
        "{}",
        b.measured_text
    );

    let r = acc.finish(&s, ReportMeta::default()).unwrap();
    let w = &r.thresholds[0];
    assert!(!w.passed);
    assert_eq!(w.measured, 1.0);
    let span = w.window.unwrap();
    assert_eq!((span.from_s, span.to_s), (8.0, 10.0));
    // Cumulative: 400 of 1200 failed, 33 %: under 40 %.
    assert!(r.thresholds[1].passed, "{:?}", r.thresholds[1]);
    assert!((r.totals.error_rate - 1.0 / 3.0).abs() < 1e-12);
}

/// The p99 of a window is the exact quantile of the merged histograms of its intervals and
/// agents; a service that holds everywhere passes with its worst window named.
#[test]
fn window_latency_is_exact_over_agents_and_intervals() {
    let s = scenario("thresholds: [ \"window(3s).p99 < 30ms\", \"window(3s).p50 <= 10ms\" ]\n");
    let plan = Plan::new(&s, 2, &[], 0).unwrap();
    let mut acc = RunAccumulator::new(&s, plan, vec!["a".into(), "b".into()], 1.0);
    for i in 0..12u64 {
        // Agent b is slow (20 ms) in intervals 4..7, 10 of its 50 requests.
        let slow = if (4..7).contains(&i) { 10 } else { 0 };
        acc.add_progress(0, i, &[(0, sample(50, 0, 5_000))])
            .unwrap();
        let mut b = sample(50 - slow, 0, 5_000);
        let _ = b.response.record_n(20_000, slow);
        b.counters.requests_completed = 50;
        acc.add_progress(1, i, &[(0, b)]).unwrap();
    }
    let r = acc.finish(&s, ReportMeta::default()).unwrap();
    let p99 = &r.thresholds[0];
    assert!(p99.passed, "{p99:?}");
    // Every window with a slow interval has at least 10 of its 300 requests at 20 ms, so
    // its p99 is 20 ms (to the histogram's precision); the first of them, 2–5 s, is named.
    assert!((p99.measured - 20_000.0).abs() / 20_000.0 < 0.01, "{p99:?}");
    let span = p99.window.unwrap();
    assert_eq!((span.from_s, span.to_s), (2.0, 5.0));
    assert!(r.thresholds[1].passed);
}

/// A run shorter than its window is judged as one window; a scope names its own figures;
/// warm-up phases count for their own `phase()` scope only.
#[test]
fn short_runs_scopes_and_warm_up() {
    let s = Scenario::from_yaml(
        "name: w\ntarget: http://h:1\nphases:\n  - { name: warm, duration: 2s, arrival_rate: 100, warmup: true }\n  - { name: steady, duration: 2s, arrival_rate: 100 }\nsession: [ { http: { path: / } } ]\nthresholds: [ \"window(10s).error_rate < 5%\", \"phase(warm).window(1s).error_rate < 5%\", \"error_rate < 5%\", \"p99 < 10ms\" ]\n",
    )
    .unwrap();
    let mut acc = accumulator(&s);
    // The warm-up fails half its requests, slowly; the steady phase is clean.
    for i in 0..2u64 {
        acc.add_progress(0, i, &[(0, sample(50, 50, 50_000))])
            .unwrap();
    }
    for i in 2..4u64 {
        acc.add_progress(0, i, &[(1, sample(100, 0, 2_000))])
            .unwrap();
    }
    let meta = ReportMeta {
        duration_s: 4.0,
        ..ReportMeta::default()
    };
    let r = acc.finish(&s, meta).unwrap();
    let verdicts: Vec<(bool, String)> = r
        .thresholds
        .iter()
        .map(|t| (t.passed, t.measured_text.clone()))
        .collect();
    // The run-wide window leaves the warm-up out: 0 % over the steady intervals.
    assert!(verdicts[0].0, "{verdicts:?}");
    assert_eq!(r.thresholds[0].measured, 0.0);
    let span = r.thresholds[0].window.unwrap();
    assert_eq!((span.from_s, span.to_s), (2.0, 4.0));
    // The warm-up's own scope sees its failures.
    assert!(
        !verdicts[1].0 && r.thresholds[1].measured == 0.5,
        "{verdicts:?}"
    );
    // Headline figures: the steady phase only.
    assert_eq!(r.totals.completed, 200);
    assert_eq!(r.totals.failed, 0);
    assert_eq!(r.totals.sessions.planned, r.phases[1].sessions_planned);
    assert!(r.latency.response_time.p99_us < 10_000);
    assert!(verdicts[2].0 && verdicts[3].0, "{verdicts:?}");
    assert!(r.phases[0].warmup && !r.phases[1].warmup);
    assert_eq!(r.phases[0].failed, 100);
    // Throughput over the measured 2 s, not the 4 s with the warm-up.
    assert!((r.totals.throughput_rps - 100.0).abs() < 1e-9);
}

#[test]
fn window_expressions_parse_and_bad_ones_say_why() {
    let t = Threshold::parse("window(30s).p99 < 50ms").unwrap();
    assert_eq!(t.window_s, Some(30));
    let t = Threshold::parse("step(login).window(1m).error_rate < 1%");
    assert!(t.is_err(), "1m has no unit the grammar knows");
    let t = Threshold::parse("window(2s).step(login).error_rate < 1%").unwrap();
    assert_eq!((t.window_s, t.is_run_error_rate()), (Some(2), false));
    for (e, why) in [
        ("window(1500ms).p99 < 1s", "whole number of seconds"),
        ("window(0s).p99 < 1s", "whole number of seconds"),
        ("window(2).p99 < 1s", "duration with a unit"),
        ("window(2s)p99 < 1s", "expected `window(DURATION).metric`"),
        ("window(2s).window(3s).p99 < 1s", "one window"),
    ] {
        let err = Threshold::parse(e).unwrap_err().to_string();
        assert!(err.contains(why), "{e}: {err}");
    }
    // A windowed error rate does not replace the default error verdict.
    assert!(!Threshold::parse("window(2s).error_rate < 1%")
        .unwrap()
        .is_run_error_rate());
}

#[test]
fn every_phase_a_warm_up_is_refused() {
    let e = Scenario::from_yaml(
        "name: w\ntarget: http://h:1\nphases: [ { duration: 2s, arrival_rate: 1, warmup: true } ]\nsession: [ { http: { path: / } } ]\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("every phase is a warm-up"), "{e}");
}
