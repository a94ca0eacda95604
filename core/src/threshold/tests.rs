use super::*;
use crate::report::{Latency, Percentiles, PhaseReport, Report, Totals};

fn report() -> Report {
    Report {
        latency: Latency {
            response_time: Percentiles {
                p99_us: 40_000,
                p999_us: 250_000,
                max_us: 300_000,
                ..Default::default()
            },
            service_time: Percentiles {
                p99_us: 10_000,
                ..Default::default()
            },
        },
        totals: Totals {
            completed: 1999,
            failed: 1,
            error_rate: 0.0005,
            throughput_rps: 990.0,
            achieved_ratio: 0.995,
            ..Default::default()
        },
        phases: vec![PhaseReport {
            name: "ramp".into(),
            completed: 90,
            failed: 10,
            ..Default::default()
        }],
        ..Report::default()
    }
}

#[test]
fn issue_examples_parse_and_evaluate() {
    let r = report();
    let verdicts: Vec<bool> = [
        "p99 < 50ms",
        "p99.9 < 200ms",
        "error_rate < 0.1%",
        "throughput >= 99% planned",
    ]
    .iter()
    .map(|e| Threshold::parse(e).unwrap().evaluate(&r).passed)
    .collect();
    assert_eq!(verdicts, vec![true, false, true, true]);
}

#[test]
fn scopes_and_service_time() {
    let r = report();
    assert!(
        Threshold::parse("service.p99 <= 10ms")
            .unwrap()
            .evaluate(&r)
            .passed
    );
    let t = Threshold::parse("phase(ramp).error_rate < 5%")
        .unwrap()
        .evaluate(&r);
    assert!(!t.passed);
    assert!((t.measured - 0.1).abs() < 1e-12);
    let missing = Threshold::parse("phase(nope).p99 < 1s")
        .unwrap()
        .evaluate(&r);
    assert!(!missing.passed && missing.measured_text.contains("no such"));
    assert!(
        !Threshold::parse("throughput > 1000")
            .unwrap()
            .evaluate(&r)
            .passed
    );
}

#[test]
fn live_breach_waits_for_grace_and_samples() {
    let mut r = report();
    r.totals.completed = 99;
    r.totals.failed = 0;
    let ts = vec![Threshold::parse("p99.9 < 200ms").unwrap()];
    // p99.9 is 250 ms: a breach, but only 99 samples so far.
    assert!(live_breach(&ts, &r, 10.0).is_none());
    r.totals.completed = 100;
    assert!(live_breach(&ts, &r, ABORT_GRACE_S - 0.1).is_none());
    let b = live_breach(&ts, &r, ABORT_GRACE_S).expect("a breach");
    assert_eq!(b.expr, "p99.9 < 200ms");
    assert_eq!(b.measured, 250_000.0);
    // A phase with 100 finished requests is judged; a missing phase never aborts.
    let ts = vec![
        Threshold::parse("phase(nope).p99 < 1ms").unwrap(),
        Threshold::parse("phase(ramp).error_rate < 5%").unwrap(),
    ];
    let b = live_breach(&ts, &r, 5.0).expect("phase breach");
    assert_eq!(b.expr, "phase(ramp).error_rate < 5%");
    let ok = vec![Threshold::parse("p99 < 50ms").unwrap()];
    assert!(live_breach(&ok, &r, 5.0).is_none());
}

#[test]
fn bad_expressions_say_why() {
    for (e, why) in [
        ("p99 50ms", "expected `metric < value`"),
        ("p99 < 50", "needs a unit"),
        ("p101 < 5ms", "unknown metric"),
        ("error_rate < 150%", "percentage"),
        ("error_rate < 1", "ambiguous"),
        ("throughput > lots", "requests per second"),
        ("step(x).throughput > 5", "not defined per step"),
        ("phase().p99 < 1ms", "empty"),
    ] {
        let err = Threshold::parse(e).unwrap_err().to_string();
        assert!(err.contains(why), "{e}: {err}");
    }
}

#[test]
fn nothing_finished_never_passes() {
    let mut r = report();
    r.totals.completed = 0;
    r.totals.failed = 0;
    r.totals.error_rate = 0.0;
    for e in [
        "error_rate < 1%",
        "p99 < 1s",
        "throughput < 1000",
        "phase(ramp).p99 < 1s",
    ] {
        let mut r = r.clone();
        if e.starts_with("phase") {
            r.phases[0].completed = 0;
            r.phases[0].failed = 0;
        }
        let v = Threshold::parse(e).unwrap().evaluate(&r);
        assert!(!v.passed, "{e} passed on zero samples");
        assert_eq!(v.measured_text, "no finished requests");
        // NaN survives the JSON report (as null).
        let back: ThresholdResult =
            serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
        assert!(back.measured.is_nan());
    }
}

/// Counts come from agents: finished requests past `u64::MAX` saturate instead of
/// overflowing (it panicked in debug builds and wrapped to "no finished requests").
#[test]
fn counts_that_add_up_past_u64_max_saturate() {
    let mut r = report();
    r.totals.completed = u64::MAX;
    r.totals.failed = 1;
    r.phases[0].completed = u64::MAX;
    r.phases[0].failed = 10;
    for e in [
        "error_rate < 1%",
        "phase(ramp).error_rate < 1%",
        "p99 < 50ms",
    ] {
        let t = Threshold::parse(e).unwrap();
        assert_eq!(t.scope_samples(&r), Some(u64::MAX), "{e}");
        assert!(t.evaluate(&r).passed, "{e}");
    }
    assert!(Threshold::parse("step(login).p99 < 1s")
        .unwrap()
        .scope_samples(&r)
        .is_none());
}

#[test]
fn default_error_verdict() {
    let t = Threshold::default_error_rate(DEFAULT_MAX_ERROR_RATE);
    assert!(t.is_run_error_rate());
    assert_eq!(t.expr, "error_rate < 1% (default)");
    let mut r = report();
    assert!(t.evaluate(&r).passed);
    r.totals.error_rate = 0.02;
    assert!(!t.evaluate(&r).passed);
    assert!(!Threshold::parse("phase(ramp).error_rate < 5%")
        .unwrap()
        .is_run_error_rate());
}

fn endpoint(
    address: &str,
    p99_us: u64,
    completed: u64,
    failed: u64,
) -> crate::endpoints::EndpointReport {
    crate::endpoints::EndpointReport {
        address: address.into(),
        completed,
        failed,
        p50_us: p99_us / 2,
        p99_us,
        connections: 1,
        ..Default::default()
    }
}

/// `endpoint(*)` passes only when every endpoint does, and names the one that fails;
/// `endpoint(ADDR)` judges that one; an address not in the report fails.
#[test]
fn endpoint_scopes_judge_each_endpoint_and_name_the_failing_one() {
    let mut r = report();
    r.duration_s = 10.0;
    r.endpoints = vec![
        endpoint("127.0.0.1:80", 2_000, 1_000, 0),
        endpoint("127.0.0.2:80", 41_000, 500, 10),
        endpoint("127.0.0.3:80", 3_000, 1_000, 0),
    ];
    let v = Threshold::parse("endpoint(*).p99 < 50ms")
        .unwrap()
        .evaluate(&r);
    assert!(v.passed, "{v:?}");
    assert_eq!(
        v.measured_text, "41.00ms at 127.0.0.2:80",
        "the closest to its limit"
    );
    let v = Threshold::parse("endpoint(*).p99 < 10ms")
        .unwrap()
        .evaluate(&r);
    assert!(!v.passed);
    assert_eq!(v.measured_text, "41.00ms at 127.0.0.2:80");
    let v = Threshold::parse("endpoint(127.0.0.3:80).p50 < 2ms")
        .unwrap()
        .evaluate(&r);
    assert!(v.passed, "{v:?}");
    let v = Threshold::parse("endpoint(*).error_rate < 1%")
        .unwrap()
        .evaluate(&r);
    assert!(
        !v.passed && v.measured_text.ends_with("at 127.0.0.2:80"),
        "{v:?}"
    );
    let v = Threshold::parse("endpoint(*).throughput >= 60")
        .unwrap()
        .evaluate(&r);
    assert!(
        !v.passed && v.measured_text == "50.0/s at 127.0.0.2:80",
        "{v:?}"
    );
    let v = Threshold::parse("endpoint(10.0.0.1:80).p99 < 1s")
        .unwrap()
        .evaluate(&r);
    assert!(!v.passed && v.measured_text.contains("no such endpoint"));
    assert_eq!(
        Threshold::parse("endpoint(*).p99 < 1s")
            .unwrap()
            .scope_samples(&r),
        Some(510)
    );
}

#[test]
fn endpoint_scopes_refuse_what_an_endpoint_does_not_have() {
    for (expr, why) in [
        ("endpoint(host:80).p99 < 1s", "ip:port"),
        ("endpoint(*).p90 < 1s", "p50, p99"),
        ("endpoint(*).service.p99 < 1s", "p50, p99"),
        ("endpoint(*).throughput >= 99% planned", "p50, p99"),
        ("window(10s).endpoint(*).p99 < 1s", "whole run"),
    ] {
        let e = Threshold::parse(expr).unwrap_err().to_string();
        assert!(e.contains(why), "{expr}: {e}");
    }
    let t = Threshold::parse("endpoint([::1]:80).p99 < 1s").unwrap();
    assert_eq!(t.scope, Scope::Endpoint("[::1]:80".into()));
}
