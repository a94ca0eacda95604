//! Tests of the comparison statistics on synthetic reports.

use super::*;
use crate::report::Percentiles;
use crate::report::TimelineRow;

/// A report of `seconds` one-second intervals whose latencies are `f(interval, i)` µs for
/// `per_interval` requests each.
fn report(seconds: u64, per_interval: u64, f: impl Fn(u64, u64) -> u64) -> Report {
    let mut all = hist::new_histogram();
    let timeline = (0..seconds)
        .map(|s| {
            let mut h = hist::new_histogram();
            for i in 0..per_interval {
                hist::record(&mut h, f(s, i));
            }
            hist::merge(&mut all, &h).unwrap();
            TimelineRow {
                interval: s,
                t_s: s as f64,
                completed: per_interval,
                response_hist: hist::to_text(&hist::SparseHist::from_dense(&h)).unwrap(),
                ..TimelineRow::default()
            }
        })
        .collect();
    let mut r = Report {
        run_id: "r".into(),
        scenario: "s".into(),
        duration_s: seconds as f64,
        planned_duration_s: seconds as f64,
        timeline,
        ..Report::default()
    };
    r.totals.completed = seconds * per_interval;
    r.totals.throughput_rps = per_interval as f64;
    r.latency.response_time = Percentiles::of(&all);
    r
}

/// A noisy but stationary latency: a deterministic pseudo-random spread from 1 to ~5 ms.
fn noisy(seed: u64) -> impl Fn(u64, u64) -> u64 {
    move |s, i| {
        let x = (s * 7919 + i * 104_729 + seed * 15_485_863) % 1_000_003;
        1_000 + x * x % 4_000 + if i % 250 == 0 { 20_000 } else { 0 }
    }
}

fn verdicts(c: &Comparison) -> Vec<(Metric, Verdict)> {
    c.run()
        .unwrap()
        .rows
        .iter()
        .map(|r| (r.metric, r.verdict))
        .collect()
}

#[test]
fn identical_runs_are_within_noise() {
    let r = report(20, 500, noisy(1));
    let c = compare(&r, &r, &Options::default()).unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let run = c.run().unwrap();
    assert_eq!(run.noise, Noise::Intervals { blocks: 20 });
    for row in &run.rows {
        assert_eq!(row.change, Some(0.0), "{row:?}");
        assert_eq!(row.verdict, Verdict::WithinNoise, "{row:?}");
        let [lo, hi] = row.ci.unwrap();
        assert!(lo <= 0.0 && hi >= 0.0, "{row:?}");
    }
    // The figures are the report's, bit for bit.
    let p99 = &run.rows[2];
    assert_eq!(p99.base, Some(r.latency.response_time.p99_us as f64));
    assert!(check_limits(&c, &["p99=10%".parse().unwrap()])
        .iter()
        .all(|l| !l.breached));
}

#[test]
fn two_runs_of_the_same_process_are_within_noise() {
    let (b, n) = (report(20, 500, noisy(1)), report(20, 500, noisy(2)));
    let c = compare(&b, &n, &Options::default()).unwrap();
    for (m, v) in verdicts(&c) {
        assert_eq!(v, Verdict::WithinNoise, "{m:?}: {:?}", c.run());
    }
}

#[test]
fn doubled_latencies_are_a_regression_beyond_the_limit() {
    let b = report(20, 500, noisy(1));
    let f = noisy(1);
    let n = report(20, 500, move |s, i| 2 * f(s, i));
    let c = compare(&b, &n, &Options::default()).unwrap();
    let run = c.run().unwrap();
    for row in run.rows.iter().filter(|r| r.metric.is_latency()) {
        assert_eq!(row.verdict, Verdict::Regression, "{row:?}");
        let ch = row.change.unwrap();
        assert!((0.95..1.05).contains(&ch), "{row:?}");
        assert!(row.ci.unwrap()[0] > 0.5, "{row:?}");
    }
    let checks = check_limits(&c, &["p99=10%".parse().unwrap()]);
    assert!(checks[0].breached, "{checks:?}");
    // Under a generous limit the same regression passes.
    assert!(!check_limits(&c, &["p99=150%".parse().unwrap()])[0].breached);
    // And seen the other way round it is an improvement.
    let back = compare(&n, &b, &Options::default()).unwrap();
    assert!(back.run().unwrap().rows[..6]
        .iter()
        .all(|r| r.verdict == Verdict::Improvement));
}

#[test]
fn short_runs_fall_back_to_sample_noise_and_are_deterministic() {
    let b = report(3, 400, noisy(1));
    let f = noisy(1);
    let n = report(3, 400, move |s, i| 2 * f(s, i));
    let c = compare(&b, &n, &Options::default()).unwrap();
    assert_eq!(c.run().unwrap().noise, Noise::Samples);
    assert_eq!(c.run().unwrap().rows[2].verdict, Verdict::Regression);
    assert_eq!(c, compare(&b, &n, &Options::default()).unwrap());
    let same = compare(&b, &report(3, 400, noisy(3)), &Options::default()).unwrap();
    assert_eq!(same.run().unwrap().rows[0].verdict, Verdict::WithinNoise);
}

/// `r` split into two phases of `seconds / 2` each, with their exact figures.
fn two_phases(mut r: Report, seconds: u64) -> Report {
    let half = seconds / 2;
    r.phases = (0..2)
        .map(|i| {
            let mut h = hist::new_histogram();
            for row in &r.timeline[(i * half) as usize..((i + 1) * half) as usize] {
                hist::merge(&mut h, &hist::from_text(&row.response_hist).unwrap()).unwrap();
            }
            crate::report::PhaseReport {
                index: i as u32,
                name: ["warm", "main"][i as usize].into(),
                start_s: (i * half) as f64,
                duration_s: half as f64,
                completed: h.len(),
                latency: crate::report::Latency {
                    response_time: Percentiles::of(&h),
                    ..Default::default()
                },
                ..Default::default()
            }
        })
        .collect();
    r
}

#[test]
fn phases_are_compared_one_by_one_and_stratify_the_whole_run() {
    // The second phase is slower in both runs; only the new run's second phase doubles.
    let f = noisy(1);
    let b = two_phases(
        report(20, 300, |s, i| f(s, i) * if s >= 10 { 3 } else { 1 }),
        20,
    );
    let n = two_phases(
        report(20, 300, |s, i| f(s, i) * if s >= 10 { 6 } else { 1 }),
        20,
    );
    let c = compare(&b, &n, &Options::default()).unwrap();
    let names: Vec<(Scope, &str, Noise)> = c
        .sections
        .iter()
        .map(|s| (s.scope, s.name.as_str(), s.noise))
        .collect();
    assert_eq!(
        names,
        [
            (Scope::Run, "", Noise::Intervals { blocks: 20 }),
            (Scope::Phase, "warm", Noise::Intervals { blocks: 10 }),
            (Scope::Phase, "main", Noise::Intervals { blocks: 10 }),
        ]
    );
    let p99 = |s: &Section| {
        s.rows
            .iter()
            .find(|r| r.metric == Metric::P99)
            .unwrap()
            .clone()
    };
    assert_eq!(p99(&c.sections[1]).verdict, Verdict::WithinNoise);
    assert_eq!(p99(&c.sections[1]).change, Some(0.0));
    assert_eq!(p99(&c.sections[2]).verdict, Verdict::Regression);
    assert_eq!(p99(&c.sections[0]).verdict, Verdict::Regression);
    // The phase figures are the report's own.
    assert_eq!(
        p99(&c.sections[2]).base,
        Some(b.phases[1].latency.response_time.p99_us as f64)
    );
}

#[test]
fn unlike_runs_are_named() {
    let b = report(5, 10, noisy(1));
    let mut n = b.clone();
    n.scenario = "other".into();
    n.target = "http://elsewhere:80".into();
    n.planned_duration_s = 60.0;
    n.outcome = RunOutcome::Failed;
    let w = comparability(&b, &n).join("\n");
    for needle in [
        "scenario differs",
        "planned duration",
        "new run did not succeed",
    ] {
        assert!(w.contains(needle), "{w}");
    }
    // A target known on one side only is not called different.
    assert!(!w.contains("target"), "{w}");
    // Arrivals rounded to ticks against exact ones: the same load otherwise.
    let (mut b, mut n) = (b.clone(), b.clone());
    b.arrival_resolution_us = Some(1000);
    n.arrival_resolution_us = Some(0);
    let w = comparability(&b, &n).join("\n");
    assert!(
        w.contains("load differs: ")
            && w.contains("in 1ms ticks (base)")
            && w.contains("exact arrival times (new)"),
        "{w}"
    );
}

#[test]
fn limits_parse_with_units() {
    let l: Limit = "p99=10%".parse().unwrap();
    assert_eq!((l.metric, l.max), (Metric::P99, 0.10));
    let l: Limit = "error_rate=0.5pp".parse().unwrap();
    assert_eq!(l.metric, Metric::ErrorRate);
    assert!((l.max - 0.005).abs() < 1e-12);
    assert_eq!("p99.9=+5%".parse::<Limit>().unwrap().metric, Metric::P999);
    assert_eq!(l.to_string(), "error_rate=0.5pp");
    for bad in ["p99", "p98=10%", "p99=10", "p99=-1%", "p99=1pp", "p99=x%"] {
        assert!(bad.parse::<Limit>().is_err(), "{bad}");
    }
}

#[test]
fn an_empty_run_has_no_data_rather_than_a_verdict() {
    let b = report(5, 10, noisy(1));
    // Every request failed: intervals with failures and no latency histogram.
    let mut n = report(5, 10, noisy(1));
    for row in &mut n.timeline {
        (row.completed, row.failed) = (0, 10);
        row.response_hist.clear();
    }
    n.totals.completed = 0;
    n.totals.failed = 50;
    n.latency = Default::default();
    let c = compare(&b, &n, &Options::default()).unwrap();
    let run = c.run().unwrap();
    assert_eq!(run.rows[2].verdict, Verdict::NoData);
    let err = run
        .rows
        .iter()
        .find(|r| r.metric == Metric::ErrorRate)
        .unwrap();
    assert_eq!(err.change, Some(1.0));
    assert_eq!(
        run.rows[6].verdict,
        Verdict::Regression,
        "{:?}",
        run.rows[6]
    );
}

/// A warm-up phase is left out of `compare`, as it is of the headline: no section of its own,
/// its intervals out of the whole run's noise, and its time out of the run's throughput.
#[test]
fn a_warm_up_phase_is_not_compared() {
    let f = noisy(1);
    let warm = |mut r: Report| {
        r.phases[0].warmup = true;
        r
    };
    let b = warm(two_phases(report(20, 300, &f), 20));
    let n = warm(two_phases(report(20, 300, &f), 20));
    let c = compare(&b, &n, &Options::default()).unwrap();
    let names: Vec<(Scope, &str, Noise)> = c
        .sections
        .iter()
        .map(|s| (s.scope, s.name.as_str(), s.noise))
        .collect();
    assert_eq!(
        names,
        [
            (Scope::Run, "", Noise::Intervals { blocks: 10 }),
            (Scope::Phase, "main", Noise::Intervals { blocks: 10 }),
        ]
    );
    let rate = c.sections[0]
        .rows
        .iter()
        .find(|r| r.metric == Metric::Throughput)
        .unwrap();
    let want = b.totals.completed as f64 / 10.0;
    assert_eq!(rate.base, Some(want));
}
