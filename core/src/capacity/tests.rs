//! The search's walk over levels, its verdicts, and the merged report.

use super::*;

fn verdict(name: &str, kind: StepKind, rate: f64, holds: bool) -> StepVerdict {
    StepVerdict {
        name: name.into(),
        kind,
        level: rate,
        planned_rps: rate,
        achieved_rps: rate,
        completed: 0,
        failed: 0,
        p50_us: 0,
        p99_us: 0,
        holds,
        reason: (!holds).then(|| "x".into()),
        generator: None,
    }
}

/// Drives a search against a system whose true capacity is `knee`.
fn drive(spec: SearchSpec, knee: f64) -> (Search, Vec<f64>) {
    let mut s = Search::new(spec);
    let mut tried = Vec::new();
    while let Some((name, kind, rate)) = s.next_step() {
        tried.push(rate);
        s.record(verdict(&name, kind, rate, rate <= knee));
        assert!(tried.len() < 100);
    }
    (s, tried)
}

#[test]
fn spec_from_arguments() {
    let s = SearchSpec::new(None, None, Some(200.0), 20, 3, 0.95).unwrap();
    assert_eq!((s.start, s.step), (20.0, 20.0));
    assert_eq!(s.stair().len(), 10);
    assert_eq!(s.stair().last(), Some(&200.0));
    let s = SearchSpec::new(Some(40.0), Some(20.0), None, 5, 3, 0.95).unwrap();
    assert_eq!(s.stair(), vec![40.0, 60.0, 80.0, 100.0, 120.0]);
    assert!(SearchSpec::new(None, Some(5.0), None, 5, 3, 0.95).is_err());
    assert!(SearchSpec::new(Some(-1.0), Some(5.0), None, 5, 3, 0.95).is_err());
    assert!(SearchSpec::new(Some(50.0), Some(5.0), Some(10.0), 5, 3, 0.95).is_err());
    assert!(SearchSpec::new(Some(5.0), Some(5.0), None, 5, 3, 0.0).is_err());
}

#[test]
fn stair_then_bisection_finds_the_knee() {
    let spec = SearchSpec::new(Some(40.0), Some(20.0), Some(200.0), 20, 3, 0.95).unwrap();
    let (s, tried) = drive(spec, 93.0);
    // Stair up to the first failure (100), then 3 bisections between 80 and 100.
    assert_eq!(tried, vec![40.0, 60.0, 80.0, 100.0, 90.0, 95.0, 93.0]);
    assert_eq!(s.sustainable().unwrap().level, 93.0);
    assert_eq!(s.first_failing().unwrap().level, 95.0);
}

/// Connections step in whole numbers: the stair 2, 6, 10 fails at 10, and the bisection
/// narrows a knee at 8 down to the connection (8 holds, 9 fails) and stops there.
#[test]
fn a_concurrency_search_bisects_to_the_connection() {
    let spec = SearchSpec::new(Some(2.0), Some(4.0), Some(30.0), 20, 5, 0.95)
        .unwrap()
        .with_axis(Axis::Connections)
        .unwrap();
    let mut s = Search::new(spec);
    let mut tried = Vec::new();
    while let Some((name, kind, n)) = s.next_step() {
        if tried.is_empty() {
            assert_eq!(name, "s1 2 conn");
        }
        tried.push(n);
        s.record(verdict(&name, kind, n, n <= 8.0));
    }
    assert_eq!(tried, vec![2.0, 6.0, 10.0, 8.0, 9.0]);
    assert_eq!(s.sustainable().unwrap().level, 8.0);
    assert_eq!(s.first_failing().unwrap().level, 9.0);
    assert_eq!(s.verdicts[3].name, "b1 8 conn");
    for (start, step, max, field) in [
        (Some(1.5), Some(2.0), None, "start"),
        (Some(2.0), Some(0.5), None, "step"),
        (Some(2.0), Some(2.0), Some(10.5), "max"),
    ] {
        let e = SearchSpec::new(start, step, max, 5, 3, 0.95)
            .unwrap()
            .with_axis(Axis::Connections)
            .unwrap_err();
        assert_eq!(e, SearchSpecError::NotWhole(field));
        assert!(e.to_string().starts_with(&format!("--{field}: ")), "{e}");
    }
}

/// A step the generator limited is never the knee: the search stops there, no bisection
/// follows, the target's first failure is none, and what held below it stands.
#[test]
fn the_generator_stops_the_search_without_a_knee() {
    let spec = SearchSpec::new(Some(100.0), Some(100.0), Some(1000.0), 20, 3, 0.95).unwrap();
    let mut s = Search::new(spec);
    let mut tried = Vec::new();
    while let Some((name, kind, r)) = s.next_step() {
        tried.push(r);
        let mut v = verdict(&name, kind, r, r < 300.0);
        if r >= 300.0 {
            v.generator = Some(GeneratorLimit {
                cause: GeneratorCause::Cpu {
                    agent: "a-1".into(),
                    cpu_pct: 97.0,
                    cores: 1.0,
                },
                cpu_us_per_request: Some(3000.0),
                agents_needed: Some(4),
            });
        }
        s.record(v);
    }
    assert_eq!(tried, vec![100.0, 200.0, 300.0]);
    assert!(s.first_failing().is_none());
    assert_eq!(s.sustainable().unwrap().level, 200.0);
    assert_eq!(s.generator_stop().unwrap().level, 300.0);
    assert_eq!(s.top(), 1000.0);
}

/// A real step report whose agent reached 95 % of its core: the verdict blames the
/// generator, not the SLO the overloaded agent also broke, and sizes the agents from the
/// last good step's CPU per request.
#[test]
fn judge_blames_a_busy_agent_not_the_target() {
    let mut good = step_report(50.0, &[50, 50], true);
    good.duration_s = 2.0;
    good.agents = vec![crate::report::AgentReport {
        id: "a-1".into(),
        cpu_max_pct: 50.0,
        cpu_mean_pct: 45.0,
        cores: 1.0,
        ..Default::default()
    }];
    let mut busy = step_report(100.0, &[100, 100], false);
    busy.agents = vec![crate::report::AgentReport {
        cpu_max_pct: 95.0,
        ..good.agents[0].clone()
    }];
    let ctx = StepContext {
        axis: Axis::Rate,
        last_good: Some((&good, 50.0, 50.0)),
        top: 400.0,
        agents: 1,
    };
    let v = judge("s2 100/s", StepKind::Stair, 100.0, 2.0, &busy, 0.95, ctx);
    assert!(!v.holds);
    assert_eq!(
        v.reason.as_deref(),
        Some("the generator was the limit, not the target: agent a-1 at 95% of its 1 core(s)")
    );
    let g = v.generator.unwrap();
    // 0.45 × 1 core × 2 s over 100 requests: 9,000 µs each; 400/s needs 3.6 cores: 4 agents.
    assert!((g.cpu_us_per_request.unwrap() - 9000.0).abs() < 1e-6);
    assert_eq!(g.agents_needed, Some(4));
    let ok = judge("s1 50/s", StepKind::Stair, 50.0, 2.0, &good, 0.95, ctx);
    assert!(ok.holds && ok.generator.is_none(), "{ok:?}");
}

#[test]
fn no_failure_up_to_max_and_failure_at_the_first_step() {
    let spec = SearchSpec::new(Some(10.0), Some(10.0), Some(30.0), 20, 3, 0.95).unwrap();
    let (s, tried) = drive(spec.clone(), 1000.0);
    assert_eq!(tried, vec![10.0, 20.0, 30.0]);
    assert_eq!(s.sustainable().unwrap().level, 30.0);
    assert!(s.first_failing().is_none());
    let (s, tried) = drive(spec, 1.0);
    assert_eq!(tried, vec![10.0]);
    assert!(s.sustainable().is_none());
    assert_eq!(s.first_failing().unwrap().level, 10.0);
}

fn step_report(rate: f64, completed_per_s: &[u64], p99_ok: bool) -> Report {
    let mut h = hist::new_histogram();
    hist::record(&mut h, 1000);
    let enc = hist::to_text(&hist::SparseHist::from_dense(&h)).unwrap();
    Report {
        run_id: format!("run-{rate}"),
        planned_duration_s: completed_per_s.len() as f64,
        duration_s: completed_per_s.len() as f64 + 0.2,
        totals: Totals {
            planned: (rate * completed_per_s.len() as f64) as u64,
            completed: completed_per_s.iter().sum(),
            sessions: SessionTotals {
                planned: (rate * completed_per_s.len() as f64) as u64,
                ..SessionTotals::default()
            },
            ..Totals::default()
        },
        phases: vec![PhaseReport {
            name: "phase-1".into(),
            completed: completed_per_s.iter().sum(),
            ..PhaseReport::default()
        }],
        thresholds: vec![ThresholdResult {
            expr: "p99 < 50ms".into(),
            measured: if p99_ok { 10_000.0 } else { 90_000.0 },
            limit: 50_000.0,
            passed: p99_ok,
            measured_text: if p99_ok { "10.00ms" } else { "90.00ms" }.into(),
            window: None,
        }],
        timeline: completed_per_s
            .iter()
            .enumerate()
            .map(|(i, c)| TimelineRow {
                interval: i as u64,
                t_s: i as f64,
                completed: *c,
                response_hist: enc.clone(),
                service_hist: enc.clone(),
                ..TimelineRow::default()
            })
            .collect(),
        ..Report::default()
    }
}

fn ctx() -> StepContext<'static> {
    StepContext {
        axis: Axis::Rate,
        last_good: None,
        top: 100.0,
        agents: 1,
    }
}

#[test]
fn judge_names_the_slo_and_the_achieved_rate() {
    let ok = judge(
        "s1 50/s",
        StepKind::Stair,
        50.0,
        3.0,
        &step_report(50.0, &[50, 50, 49], true),
        0.95,
        ctx(),
    );
    assert!(ok.holds, "{ok:?}");
    let slow = judge(
        "s2 100/s",
        StepKind::Stair,
        100.0,
        3.0,
        &step_report(100.0, &[80, 80, 80], true),
        0.95,
        ctx(),
    );
    assert!(!slow.holds);
    assert_eq!(
        slow.reason.as_deref(),
        Some("achieved 80.0/s of planned 100.0/s (80.0% within the step)")
    );
    let late = judge(
        "s3",
        StepKind::Stair,
        50.0,
        3.0,
        &step_report(50.0, &[50, 50, 50], false),
        0.95,
        ctx(),
    );
    assert_eq!(
        late.reason.as_deref(),
        Some("`p99 < 50ms` measured 90.00ms")
    );
}

/// A closed load has no schedule: requests in flight at the step's end are no shortfall,
/// and only the SLOs judge it.
#[test]
fn a_connections_step_is_judged_on_its_slos_alone() {
    let ctx = StepContext {
        axis: Axis::Connections,
        ..ctx()
    };
    let r = step_report(100.0, &[80, 80, 80], true);
    let v = judge("s2 3 conn", StepKind::Stair, 3.0, 3.0, &r, 0.95, ctx);
    assert!(v.holds, "{v:?}");
    assert_eq!((v.planned_rps, v.achieved_rps), (0.0, 80.0));
    let r = step_report(100.0, &[80, 80, 80], false);
    let v = judge("s2 3 conn", StepKind::Stair, 3.0, 3.0, &r, 0.95, ctx);
    assert_eq!(v.reason.as_deref(), Some("`p99 < 50ms` measured 90.00ms"));
}

#[test]
fn merged_report_keeps_every_step_as_a_phase() {
    let parts = vec![
        ("s1 50/s".to_string(), step_report(50.0, &[50, 50], true)),
        (
            "s2 100/s".to_string(),
            step_report(100.0, &[100, 90], false),
        ),
    ];
    let m = merge_steps("cap", &parts).unwrap();
    assert_eq!(m.phases.len(), 2);
    assert_eq!(m.phases[1].name, "s2 100/s");
    // The second step follows the first's last row: no empty second between them.
    assert_eq!(m.phases[1].start_s, 2.0);
    assert_eq!(m.totals.completed, 290);
    assert_eq!(m.totals.planned, 300);
    assert_eq!(m.timeline.len(), 4);
    assert_eq!(m.timeline[2].t_s, 2.0);
    assert_eq!(m.timeline[3].interval, 3);
    // Every interval histogram (one sample each) is merged into the overall latency.
    assert_eq!(m.latency.response_time.count, 4);
    assert_eq!(m.thresholds[1].expr, "s2 100/s: p99 < 50ms");
    assert!(!m.thresholds[1].passed);
}

/// Step reports read from files are not trusted: counts at the top of `u64` add up
/// saturating instead of overflowing (a panic in debug builds, a wrap in release).
#[test]
fn merging_steps_with_huge_counts_saturates() {
    let mut a = step_report(50.0, &[50], true);
    a.totals.completed = u64::MAX - 1;
    a.totals.failed = u64::MAX;
    a.totals.errors.insert("reset".into(), u64::MAX);
    let parts = vec![("s1".to_string(), a.clone()), ("s2".to_string(), a)];
    let m = merge_steps("cap", &parts).unwrap();
    assert_eq!(m.totals.completed, u64::MAX);
    assert_eq!(m.totals.failed, u64::MAX);
    assert_eq!(m.totals.errors["reset"], u64::MAX);
}
