//! What a capacity search found, per what and why: the sustainable rate per target core,
//! and the first limit the data shows at the first failing step.
//!
//! "The knee is at 2,400 req/s" says little on its own: 2,400 req/s on 4 target cores is
//! 600 req/s per core, which is what a capacity plan multiplies. And a knee has a cause the
//! figures often show: the target's CPU stopped growing with the load (saturated), one
//! endpoint was far slower than the others, the generator fell behind (then the knee is not
//! the target's at all), or the latency SLO failed while the target's CPU still had room (a
//! lock, I/O or a dependency). Each cause is named only when its figures are there.

use super::{Search, StepVerdict};

/// What one step's report says about the target, beside the verdict.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetSide {
    /// Mean CPU cores the observed target used over the step (`observe:`), if observed.
    pub cpu_cores: Option<f64>,
    /// The endpoint whose p99 was more than twice the others' median: (address, its p99 µs,
    /// the others' median p99 µs).
    pub slow_endpoint: Option<(String, u64, u64)>,
    /// The pod behind a cluster target throttled in the largest share of its CFS periods,
    /// when notable (`stampede_core::pods::THROTTLED_NOTABLE`): (pod, share).
    pub throttled_pod: Option<(String, f64)>,
    /// Each target's figures and verdict, when the step loaded several
    /// ([`super::targets`]).
    pub targets: Vec<super::targets::TargetStep>,
}

impl TargetSide {
    /// The target's side of one step's report; `slos` (as given to the search) judge each
    /// target of a run that loads several.
    pub fn of(report: &crate::report::Report, slos: &[crate::threshold::Threshold]) -> Self {
        Self {
            cpu_cores: report
                .target_resources
                .as_ref()
                .map(|t| t.cpu_cores.total)
                .filter(|c| c.is_finite() && *c > 0.0),
            slow_endpoint: crate::endpoints::slow_endpoint(&report.endpoints)
                .map(|(e, median)| (e.address.clone(), e.p99_us, median)),
            throttled_pod: report.target_resources.as_ref().and_then(|t| {
                crate::pods::most_throttled(&t.pods).map(|(p, share)| (p.to_string(), share))
            }),
            targets: super::targets::judge(report, slos),
        }
    }
}

/// The target CPU grew less than half as fast as the load between two steps: it was at its
/// limit (a core count, a CPU quota).
const SATURATED_GROWTH: f64 = 0.5;

/// One line per finding: the sustainable rate and its requests per target core, then the
/// likely cause of the first failure. `sides` holds each verdict's target side, in the
/// search's order.
pub fn findings(search: &Search, sides: &[TargetSide]) -> Vec<String> {
    let side = |v: &StepVerdict| {
        search
            .verdicts
            .iter()
            .position(|x| std::ptr::eq(x, v))
            .and_then(|i| sides.get(i))
    };
    let mut out = Vec::new();
    let axis = search.spec.axis;
    let ok = search.sustainable();
    if let Some(v) = ok {
        match side(v).and_then(|s| s.cpu_cores) {
            Some(cores) => out.push(format!(
                "at the {} the target served {:.0} req/s per core ({:.1} req/s on {:.2} cores)",
                match axis {
                    super::Axis::Rate => "sustainable rate".to_string(),
                    super::Axis::Connections => format!("largest concurrency ({})", axis.fmt(v.level)),
                },
                v.achieved_rps / cores,
                v.achieved_rps,
                cores
            )),
            None => out.push(
                "requests per target core: not known (add `observe:` with the target's Prometheus endpoint)"
                    .to_string(),
            ),
        }
    }
    if let Some(g) = search.generator_stop() {
        out.push(generator_line(search, g));
    }
    let per_target = super::targets::capacities(search, &per_step_targets(sides));
    out.extend(super::targets::finding(search, &per_target));
    let Some(f) = search.first_failing() else {
        return out;
    };
    let fs = side(f).cloned().unwrap_or_default();
    if let Some((addr, p99, median)) = &fs.slow_endpoint {
        out.push(format!(
            "limit at {}: one slow endpoint, {addr} (p99 {} against {} for the others)",
            axis.fmt(f.level),
            ms(*p99),
            ms(*median)
        ));
    }
    if let Some((pod, share)) = &fs.throttled_pod {
        out.push(format!(
            "target CPU: pod {pod} throttled {:.0} % at the knee ({})",
            share * 100.0,
            axis.fmt(f.level)
        ));
    }
    let cores = (ok.and_then(|v| side(v)?.cpu_cores), fs.cpu_cores);
    match (ok, cores) {
        // The offered load grows with the level: the rate's planned requests, or connections.
        (Some(v), (Some(c0), Some(c1))) if v.level > 0.0 => {
            let load = f.level / v.level - 1.0;
            let cpu = c1 / c0 - 1.0;
            if load > 0.0 && cpu < SATURATED_GROWTH * load {
                out.push(format!(
                    "limit at {}: target CPU saturated at {c1:.2} cores (+{:.0}% load, +{:.0}% CPU)",
                    axis.fmt(f.level),
                    load * 100.0,
                    cpu.max(0.0) * 100.0
                ));
            } else if fs.slow_endpoint.is_none() {
                out.push(format!(
                    "limit at {}: the SLO failed while target CPU still grew with the load ({c1:.2} cores): a lock, I/O or a dependency",
                    axis.fmt(f.level)
                ));
            }
        }
        (None, (_, Some(c1))) if fs.slow_endpoint.is_none() => out.push(format!(
            "limit at {}: the first step already failed, the target on {c1:.2} cores ({:.0} req/s per core); try a lower --start",
            axis.fmt(f.level),
            f.achieved_rps / c1
        )),
        _ if fs.slow_endpoint.is_none() && fs.cpu_cores.is_none() => out.push(format!(
            "limit at {}: cause not known without the target's CPU (`observe:`)",
            axis.fmt(f.level)
        )),
        _ => {}
    }
    out
}

/// Each step's target rows, in the search's order.
pub fn per_step_targets(sides: &[TargetSide]) -> Vec<&[super::targets::TargetStep]> {
    sides.iter().map(|s| s.targets.as_slice()).collect()
}

/// The search stopped at `g`, the generator its limit: which agent, and how many agents
/// the search needs.
fn generator_line(search: &Search, g: &StepVerdict) -> String {
    let axis = search.spec.axis;
    let mut line = format!(
        "generator limited at {}: {}; this is not the target's knee",
        axis.fmt(g.level),
        g.generator
            .as_ref()
            .map_or_else(String::new, |l| l.cause.to_string())
    );
    let limit = g.generator.as_ref();
    match (
        limit.and_then(|l| l.agents_needed),
        limit.and_then(|l| l.cpu_us_per_request),
        search.sustainable(),
    ) {
        (Some(n), Some(us), Some(ok)) => line.push_str(&format!(
            "; reaching {} needs {n} agents ({us:.0} µs of agent CPU per request at {})",
            axis.fmt(search.top()),
            ok.name
        )),
        _ => line.push_str("; add agents (or give them more CPU) and search again"),
    }
    line
}

fn ms(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.0} ms", us as f64 / 1e3)
    } else {
        format!("{:.1} ms", us as f64 / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{SearchSpec, StepKind};
    use super::*;

    fn step(rate: f64, holds: bool) -> StepVerdict {
        StepVerdict {
            name: format!("s {rate}"),
            kind: StepKind::Stair,
            level: rate,
            planned_rps: rate,
            achieved_rps: rate,
            completed: 1,
            failed: 0,
            p50_us: 1,
            p99_us: 1,
            holds,
            reason: None,
            generator: None,
        }
    }

    fn search(steps: &[(f64, bool)]) -> Search {
        let mut s =
            Search::new(SearchSpec::new(Some(100.0), Some(100.0), None, 5, 0, 0.95).unwrap());
        for (r, h) in steps {
            s.record(step(*r, *h));
        }
        s
    }

    fn cores(c: f64) -> TargetSide {
        TargetSide {
            cpu_cores: Some(c),
            ..Default::default()
        }
    }

    /// 400 req/s held on 0.8 cores: 500 per core; at 500 req/s the CPU grew 2 % for 25 %
    /// more load: saturated.
    #[test]
    fn per_core_and_a_saturated_cpu() {
        let s = search(&[(400.0, true), (500.0, false)]);
        let f = findings(&s, &[cores(0.8), cores(0.816)]);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].contains("500 req/s per core"), "{}", f[0]);
        assert!(
            f[1].contains("target CPU saturated at 0.82 cores"),
            "{}",
            f[1]
        );
    }

    /// The CPU grew with the load, but the SLO failed: not the CPU.
    #[test]
    fn an_slo_failing_with_cpu_to_spare() {
        let s = search(&[(400.0, true), (500.0, false)]);
        let f = findings(&s, &[cores(0.2), cores(0.25)]);
        assert!(f[1].contains("a lock, I/O or a dependency"), "{f:?}");
    }

    /// The generator's stop is named with its agent and the agents needed, and no limit of
    /// the target is made of it.
    #[test]
    fn the_generator_stop_is_not_a_knee() {
        let mut s = search(&[(100.0, true)]);
        let mut g = step(200.0, false);
        g.generator = Some(crate::capacity::GeneratorLimit {
            cause: crate::capacity::GeneratorCause::Cpu {
                agent: "a-2".into(),
                cpu_pct: 97.0,
                cores: 1.0,
            },
            cpu_us_per_request: Some(1500.0),
            agents_needed: Some(3),
        });
        s.record(g);
        let f = findings(&s, &[TargetSide::default(), cores(0.3)]);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].contains("not known"), "{f:?}");
        assert_eq!(
            f[1],
            "generator limited at 200/s: agent a-2 at 97% of its 1 core(s); this is not the \
             target's knee; reaching 500/s needs 3 agents (1500 µs of agent CPU per request at s 100)"
        );
    }

    /// A throttled pod at the first failing step is named, beside the CPU's own finding.
    #[test]
    fn a_throttled_pod_is_named_at_the_knee() {
        let s = search(&[(400.0, true), (500.0, false)]);
        let hot = TargetSide {
            throttled_pod: Some(("web-2".into(), 0.42)),
            ..cores(0.816)
        };
        let f = findings(&s, &[cores(0.8), hot]);
        assert!(
            f.iter()
                .any(|l| l == "target CPU: pod web-2 throttled 42 % at the knee (500/s)"),
            "{f:?}"
        );
        assert!(f.iter().any(|l| l.contains("saturated")), "{f:?}");
    }

    #[test]
    fn the_generator_and_a_slow_endpoint_are_named() {
        let s = search(&[(100.0, true), (200.0, false)]);
        let slow = TargetSide {
            slow_endpoint: Some(("127.0.0.2:80".into(), 41_000, 2_000)),
            ..cores(0.5)
        };
        let f = findings(&s, &[cores(0.25), slow]);
        assert!(
            f[1].contains("one slow endpoint, 127.0.0.2:80 (p99 41 ms against 2.0 ms"),
            "{f:?}"
        );
        assert_eq!(
            f.len(),
            2,
            "the CPU grew with the load: no other cause: {f:?}"
        );
    }
}
