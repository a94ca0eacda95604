//! Capacity per target: in a run that loads several targets (an auth service and an API),
//! which one reaches its limit first, and at what level of the search.
//!
//! A merged percentile hides the slow target the way it hides a slow endpoint: 90 % of the
//! requests going to a fast API keep the run's p99 low while the auth service behind the
//! other 10 % is past its knee. So at every step each target's own requests are judged
//! against the latency and error-rate SLOs (an unscoped `p99 < 50ms` is read as
//! `target(NAME).p99 < 50ms` for each), and the SLOs scoped to a target judge it as written.
//! A rate or throughput SLO is the search's (a target with less of the load would fail it
//! for that alone), and a windowed unscoped SLO needs the target's interval histograms,
//! which a report does not keep per target: both judge the step, not each target.
//!
//! The step's own verdict does not change: it is judged as before (the run, or the varied
//! workload). The per-target verdicts say which target set the limit, and whether a target
//! whose load was held still degraded as another one's load grew (a shared dependency).

use super::{Search, StepVerdict};
use crate::report::Report;
use crate::threshold::{Metric, Scope, Threshold, ThresholdResult};

/// One target's figures and verdict at one step.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetStep {
    /// The target's `host:port`, as `target(NAME)` names it.
    pub name: String,
    /// Requests completed at this target over the step.
    pub completed: u64,
    /// Requests failed at this target over the step.
    pub failed: u64,
    /// Its median response time, µs.
    pub p50_us: u64,
    /// Its 99th percentile response time, µs.
    pub p99_us: u64,
    /// The SLOs it failed, each with its measured value; `None` when it met them all.
    pub failing: Option<String>,
}

impl TargetStep {
    /// It met every SLO that judges it.
    pub fn holds(&self) -> bool {
        self.failing.is_none()
    }
}

/// Each target's figures and verdict in one step's report; empty when the run loads one
/// target (its figures are the step's own). `slos` are the search's, as given (before any
/// scoping to a varied workload).
pub fn judge(report: &Report, slos: &[Threshold]) -> Vec<TargetStep> {
    report
        .targets
        .iter()
        .map(|t| {
            let name = &t.figures.name;
            let failing: Vec<String> = slos
                .iter()
                .filter_map(|slo| verdict(report, slo, name))
                .filter(|r| !r.passed)
                .map(|r| format!("`{}` measured {}", r.expr, r.measured_text))
                .collect();
            TargetStep {
                name: name.clone(),
                completed: t.figures.completed,
                failed: t.figures.failed,
                p50_us: t.figures.latency.response_time.p50_us,
                p99_us: t.figures.latency.response_time.p99_us,
                failing: (!failing.is_empty()).then(|| failing.join("; ")),
            }
        })
        .collect()
}

/// `slo`'s result on target `name`, or `None` when it does not judge targets one by one.
fn verdict(report: &Report, slo: &Threshold, name: &str) -> Option<ThresholdResult> {
    match &slo.scope {
        // The controller judged it with the step (windows included).
        Scope::Target(n) if n == name => Some(
            report
                .thresholds
                .iter()
                .find(|r| r.expr == slo.expr)
                .cloned()
                .unwrap_or_else(|| slo.evaluate(report)),
        ),
        Scope::Run
            if slo.window_s.is_none()
                && matches!(slo.metric, Metric::Latency { .. } | Metric::ErrorRate) =>
        {
            let scoped = Threshold {
                expr: format!("target({name}).{}", slo.expr.trim()),
                scope: Scope::Target(name.to_string()),
                ..slo.clone()
            };
            Some(scoped.evaluate(report))
        }
        _ => None,
    }
}

/// What the search found for one target.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetCapacity {
    /// The target's `host:port`.
    pub name: String,
    /// The highest level at which it met the SLOs, below every level at which it failed.
    pub sustainable: Option<f64>,
    /// Its p99 at that level, µs.
    pub sustainable_p99_us: Option<u64>,
    /// The lowest level at which it failed, with the SLOs it failed there.
    pub first_failing: Option<(f64, String)>,
    /// The highest level it was judged at.
    pub highest: f64,
}

/// Each target's capacity over the search, in the order the steps name them; `per_step`
/// holds each verdict's target rows, in the search's order. A step the generator limited
/// judges no target: its figures are the generator's.
pub fn capacities(search: &Search, per_step: &[&[TargetStep]]) -> Vec<TargetCapacity> {
    let judged: Vec<(&StepVerdict, &[TargetStep])> = search
        .verdicts
        .iter()
        .zip(per_step.iter().copied())
        .filter(|(v, _)| v.generator.is_none())
        .collect();
    let mut names: Vec<&str> = Vec::new();
    for t in judged.iter().flat_map(|(_, ts)| ts.iter()) {
        if !names.contains(&t.name.as_str()) {
            names.push(&t.name);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let rows: Vec<(f64, &TargetStep)> = judged
                .iter()
                .filter_map(|(v, ts)| Some((v.level, ts.iter().find(|t| t.name == name)?)))
                .collect();
            let first_failing = rows
                .iter()
                .filter(|(_, t)| !t.holds())
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(level, t)| (*level, t.failing.clone().unwrap_or_default()));
            let cap = first_failing.as_ref().map_or(f64::INFINITY, |f| f.0);
            let held = rows
                .iter()
                .filter(|(level, t)| t.holds() && *level < cap)
                .max_by(|a, b| a.0.total_cmp(&b.0));
            TargetCapacity {
                name: name.to_string(),
                sustainable: held.map(|(level, _)| *level),
                sustainable_p99_us: held.map(|(_, t)| t.p99_us),
                first_failing,
                highest: rows.iter().map(|(l, _)| *l).fold(0.0, f64::max),
            }
        })
        .collect()
}

/// The finding about targets, when at least one failed on its own requests: the first to
/// fail, and the others' state at that level.
pub fn finding(search: &Search, caps: &[TargetCapacity]) -> Option<String> {
    let axis = search.spec.axis;
    let first = caps
        .iter()
        .filter_map(|c| Some((c, c.first_failing.as_ref()?)))
        .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0))?;
    let (c, (level, why)) = first;
    let others: Vec<String> = caps
        .iter()
        .filter(|o| o.name != c.name)
        .map(|o| match &o.first_failing {
            Some((l, _)) if l <= level => format!("{} failed there too", o.name),
            Some((l, _)) => format!("{} held until {}", o.name, axis.fmt(*l)),
            None => format!("{} held at every step", o.name),
        })
        .collect();
    let mut line = format!(
        "the first target to fail: {} at {} ({why})",
        c.name,
        axis.fmt(*level)
    );
    if !others.is_empty() {
        line.push_str(&format!("; {}", others.join(", ")));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::{SearchSpec, StepKind};
    use crate::report::{Percentiles, PhaseReport, TargetReport};

    fn target(name: &str, completed: u64, failed: u64, p99_us: u64) -> TargetReport {
        let mut figures = PhaseReport {
            name: name.into(),
            completed,
            failed,
            ..PhaseReport::default()
        };
        figures.latency.response_time = Percentiles {
            count: completed,
            p50_us: p99_us / 2,
            p99_us,
            max_us: p99_us,
            ..Percentiles::default()
        };
        TargetReport {
            figures,
            ..TargetReport::default()
        }
    }

    fn slos(exprs: &[&str]) -> Vec<Threshold> {
        exprs.iter().map(|e| Threshold::parse(e).unwrap()).collect()
    }

    /// An unscoped latency SLO judges each target on its own requests; a throughput SLO
    /// and a windowed one are the search's; a target-scoped one judges its target only.
    #[test]
    fn each_target_is_judged_on_its_own_requests() {
        let report = Report {
            targets: vec![
                target("auth:8081", 100, 0, 80_000),
                target("api:8082", 900, 0, 2_000),
            ],
            ..Report::default()
        };
        let rows = judge(
            &report,
            &slos(&[
                "p99 < 50ms",
                "throughput > 1000000",
                "window(2s).p99 < 1ms",
                "target(api:8082).error_rate < 1%",
            ]),
        );
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0].failing.as_deref(),
            Some("`target(auth:8081).p99 < 50ms` measured 80.00ms")
        );
        assert!(rows[1].holds(), "{rows:?}");
        assert_eq!((rows[1].completed, rows[1].p99_us), (900, 2_000));
        // One target: no rows.
        assert!(judge(&Report::default(), &slos(&["p99 < 50ms"])).is_empty());
    }

    fn step(level: f64, generator: bool) -> StepVerdict {
        StepVerdict {
            name: format!("s {level}"),
            kind: StepKind::Stair,
            level,
            planned_rps: level,
            achieved_rps: level,
            completed: 1,
            failed: 0,
            p50_us: 1,
            p99_us: 1,
            holds: !generator,
            reason: None,
            generator: generator.then(|| crate::capacity::GeneratorLimit {
                cause: crate::capacity::GeneratorCause::Cpu {
                    agent: "a".into(),
                    cpu_pct: 99.0,
                    cores: 1.0,
                },
                cpu_us_per_request: None,
                agents_needed: None,
            }),
        }
    }

    fn row(name: &str, p99_us: u64, fails: bool) -> TargetStep {
        TargetStep {
            name: name.into(),
            completed: 10,
            failed: 0,
            p50_us: p99_us / 2,
            p99_us,
            failing: fails.then(|| format!("`target({name}).p99 < 50ms` measured slow")),
        }
    }

    /// auth fails from 300/s (and the 250/s bisection holds), api holds throughout; the
    /// generator's step judges neither.
    #[test]
    fn each_target_gets_its_own_knee() {
        let mut s =
            Search::new(SearchSpec::new(Some(100.0), Some(100.0), None, 5, 0, 0.95).unwrap());
        let per_step = [
            (
                100.0,
                false,
                vec![row("auth:1", 10, false), row("api:2", 1, false)],
            ),
            (
                200.0,
                false,
                vec![row("auth:1", 20, false), row("api:2", 1, false)],
            ),
            (
                300.0,
                false,
                vec![row("auth:1", 90, true), row("api:2", 2, false)],
            ),
            (
                250.0,
                false,
                vec![row("auth:1", 40, false), row("api:2", 2, false)],
            ),
            (
                400.0,
                true,
                vec![row("auth:1", 99, true), row("api:2", 99, true)],
            ),
        ];
        for (level, generator, _) in &per_step {
            s.record(step(*level, *generator));
        }
        let rows: Vec<&[TargetStep]> = per_step.iter().map(|(_, _, r)| r.as_slice()).collect();
        let caps = capacities(&s, &rows);
        assert_eq!(caps.len(), 2);
        assert_eq!(caps[0].name, "auth:1");
        assert_eq!(caps[0].sustainable, Some(250.0));
        assert_eq!(caps[0].sustainable_p99_us, Some(40));
        assert_eq!(caps[0].first_failing.as_ref().map(|f| f.0), Some(300.0));
        assert_eq!(caps[1].sustainable, Some(300.0));
        assert_eq!(caps[1].first_failing, None);
        assert_eq!(caps[1].highest, 300.0);
        assert_eq!(
            finding(&s, &caps).unwrap(),
            "the first target to fail: auth:1 at 300/s (`target(auth:1).p99 < 50ms` measured \
             slow); api:2 held at every step"
        );
        // Nobody failed: no finding.
        let none = capacities(&s, &[rows[0], rows[1]]);
        assert_eq!(finding(&s, &none), None);
    }
}
