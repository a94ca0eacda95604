//! Judging thresholds on a report: the figure each one reads, formatted in its unit, over
//! the whole run or live while it runs.

use super::{
    LatencyStat, Metric, Op, Scope, StreamFigure, Threshold, ThresholdResult, ABORT_GRACE_S,
    ABORT_MIN_REQUESTS, ALL_ENDPOINTS,
};
use crate::report::{Percentiles, Report};

impl Threshold {
    /// Evaluates against a report. A scope that names no phase or step fails with a message,
    /// and so does a scope with no finished request: a threshold never passes on nothing.
    pub fn evaluate(&self, r: &Report) -> ThresholdResult {
        if let Scope::Endpoint(which) = &self.scope {
            return self.evaluate_endpoints(which, r);
        }
        let measured = match self.scope_samples(r) {
            Some(0) => {
                return ThresholdResult {
                    expr: self.expr.clone(),
                    measured: f64::NAN,
                    limit: self.limit,
                    passed: false,
                    measured_text: "no finished requests".to_string(),
                    window: None,
                }
            }
            _ => self.measure(r),
        };
        let (measured, passed, text) = match measured {
            Some(v) => (v, self.op.holds(v, self.limit), self.format(v)),
            None => (f64::NAN, false, "no such phase or step".to_string()),
        };
        ThresholdResult {
            expr: self.expr.clone(),
            measured,
            limit: self.limit,
            passed,
            measured_text: text,
            window: None,
        }
    }

    /// Formats a measured value in the metric's unit (`12.30ms`, `4.000%`, `980.0/s`).
    pub fn format(&self, v: f64) -> String {
        match self.metric {
            Metric::Latency { .. } | Metric::Stream { .. } => {
                if v < 1e3 {
                    format!("{v:.0}µs")
                } else if v < 1e6 {
                    format!("{:.2}ms", v / 1e3)
                } else {
                    format!("{:.3}s", v / 1e6)
                }
            }
            Metric::ErrorRate | Metric::ThroughputOfPlanned => format!("{:.3}%", v * 100.0),
            Metric::Throughput => format!("{v:.1}/s"),
        }
    }

    /// An endpoint scope: the one endpoint, or each of them, judged on its own figures; the
    /// verdict is the worst endpoint's (the first that fails), named in the text.
    fn evaluate_endpoints(&self, which: &str, r: &Report) -> ThresholdResult {
        let result = |measured: f64, passed: bool, measured_text: String| ThresholdResult {
            expr: self.expr.clone(),
            measured,
            limit: self.limit,
            passed,
            measured_text,
            window: None,
        };
        let rows: Vec<&crate::endpoints::EndpointReport> = r
            .endpoints
            .iter()
            .filter(|e| which == ALL_ENDPOINTS || e.address == which)
            .collect();
        if rows.is_empty() {
            return result(
                f64::NAN,
                false,
                "no such endpoint in the report".to_string(),
            );
        }
        let mut worst: Option<(f64, bool, &str)> = None;
        for e in rows {
            let Some(v) = self.endpoint_value(e, r.duration_s) else {
                return result(
                    f64::NAN,
                    false,
                    format!("no finished requests at {}", e.address),
                );
            };
            let passed = self.op.holds(v, self.limit);
            // The first failing endpoint, else the one closest to its limit.
            let closer = match worst {
                None => true,
                Some((w, wp, _)) => {
                    (wp && !passed)
                        || (wp == passed
                            && passed
                            && match self.op {
                                Op::Lt | Op::Le => v > w,
                                Op::Gt | Op::Ge => v < w,
                            })
                }
            };
            if closer {
                worst = Some((v, passed, &e.address));
            }
        }
        let (v, passed, at) = worst.unwrap_or((f64::NAN, false, ""));
        result(v, passed, format!("{} at {at}", self.format(v)))
    }

    /// One endpoint's figure for this threshold's metric; `None` when it finished nothing.
    fn endpoint_value(&self, e: &crate::endpoints::EndpointReport, duration_s: f64) -> Option<f64> {
        let n = e.completed.saturating_add(e.failed);
        if n == 0 {
            return None;
        }
        Some(match self.metric {
            Metric::Latency {
                stat: LatencyStat::Quantile(q),
                ..
            } if q <= 0.5 => e.p50_us as f64,
            Metric::Latency { .. } => e.p99_us as f64,
            Metric::ErrorRate => e.failed as f64 / n as f64,
            Metric::Throughput | Metric::ThroughputOfPlanned => {
                e.completed as f64 / duration_s.max(1e-9)
            }
            Metric::Stream { .. } => return None,
        })
    }

    fn measure(&self, r: &Report) -> Option<f64> {
        let latency = |p: &Percentiles, stat: LatencyStat| -> f64 {
            match stat {
                LatencyStat::Min => p.min_us as f64,
                LatencyStat::Mean => p.mean_us,
                LatencyStat::Max => p.max_us as f64,
                LatencyStat::Quantile(q) => quantile(p, q),
            }
        };
        let rate = |completed: u64, failed: u64| {
            let n = completed.saturating_add(failed);
            if n == 0 {
                0.0
            } else {
                failed as f64 / n as f64
            }
        };
        let scope = self.judged_scope(r);
        match scope {
            Scope::Run => Some(match self.metric {
                Metric::Latency { service, stat } => latency(
                    if service {
                        &r.latency.service_time
                    } else {
                        &r.latency.response_time
                    },
                    stat,
                ),
                Metric::ErrorRate => r.totals.error_rate,
                Metric::Stream { .. } => return None,
                Metric::Throughput => r.totals.throughput_rps,
                Metric::ThroughputOfPlanned => r.totals.achieved_ratio,
            }),
            Scope::Phase(_) | Scope::Workload(_) | Scope::Target(_) => {
                let p = match scope {
                    Scope::Phase(name) => r.phases.iter().find(|p| &p.name == name)?,
                    Scope::Workload(name) => {
                        &r.workloads
                            .iter()
                            .find(|w| &w.figures.name == name)?
                            .figures
                    }
                    Scope::Target(name) => {
                        &r.targets.iter().find(|t| &t.figures.name == name)?.figures
                    }
                    _ => return None,
                };
                Some(match self.metric {
                    Metric::Latency { service, stat } => latency(
                        if service {
                            &p.latency.service_time
                        } else {
                            &p.latency.response_time
                        },
                        stat,
                    ),
                    Metric::ErrorRate => rate(p.completed, p.failed),
                    Metric::Stream { .. } => return None,
                    Metric::Throughput => p.throughput_rps,
                    Metric::ThroughputOfPlanned => {
                        if p.planned == 0 {
                            1.0
                        } else {
                            p.completed as f64 / p.planned as f64
                        }
                    }
                })
            }
            // A step and a session type have latencies and an error rate, no throughput.
            Scope::Step(_) | Scope::Session(_) => {
                let (l, completed, failed, stream) = match &self.scope {
                    Scope::Step(name) => {
                        let s = r.steps.iter().find(|s| &s.name == name)?;
                        (&s.latency, s.completed, s.failed, s.stream.as_ref())
                    }
                    Scope::Session(name) => {
                        let t = session_type(r, name)?;
                        (&t.latency, t.requests_completed, t.requests_failed, None)
                    }
                    _ => return None,
                };
                Some(match self.metric {
                    Metric::Latency { service, stat } => latency(
                        if service {
                            &l.service_time
                        } else {
                            &l.response_time
                        },
                        stat,
                    ),
                    // A step that streamed nothing has nothing to judge.
                    Metric::Stream { figure, stat } => {
                        let s = stream?;
                        let p = match figure {
                            StreamFigure::Ttfb => &s.ttfb,
                            StreamFigure::Gap => &s.gap,
                        };
                        if p.count == 0 {
                            return None;
                        }
                        latency(p, stat)
                    }
                    Metric::ErrorRate => rate(completed, failed),
                    Metric::Throughput | Metric::ThroughputOfPlanned => return None,
                })
            }
            // Judged endpoint by endpoint (`evaluate_endpoints`).
            Scope::Endpoint(_) => None,
        }
    }
}

/// Reads a quantile from the report's fixed percentiles; others take the next one up
/// (never optimistic).
fn quantile(p: &Percentiles, q: f64) -> f64 {
    let table = [
        (0.50, p.p50_us),
        (0.75, p.p75_us),
        (0.90, p.p90_us),
        (0.95, p.p95_us),
        (0.99, p.p99_us),
        (0.999, p.p999_us),
        (0.9999, p.p9999_us),
    ];
    table
        .iter()
        .find(|(tq, _)| *tq >= q - 1e-12)
        .map_or(p.max_us, |(_, v)| *v) as f64
}

impl Threshold {
    /// The scope whose figures `r` judges: a run of one target has no target rows, so a
    /// `target()` scope reads the run's (its name was checked against the scenario's targets
    /// before the run).
    fn judged_scope(&self, r: &Report) -> &Scope {
        match &self.scope {
            Scope::Target(_) if r.targets.is_empty() => &Scope::Run,
            s => s,
        }
    }

    /// Finished requests in this threshold's scope; `None` when the scope does not exist.
    pub fn scope_samples(&self, r: &Report) -> Option<u64> {
        match self.judged_scope(r) {
            // Saturating: the counts come from agents (as the report's own totals).
            Scope::Run => Some(r.totals.completed.saturating_add(r.totals.failed)),
            Scope::Phase(name) => r
                .phases
                .iter()
                .find(|p| &p.name == name)
                .map(|p| p.completed.saturating_add(p.failed)),
            Scope::Step(name) => r
                .steps
                .iter()
                .find(|s| &s.name == name)
                .map(|s| s.completed.saturating_add(s.failed)),
            Scope::Workload(name) => r
                .workloads
                .iter()
                .find(|w| &w.figures.name == name)
                .map(|w| w.figures.completed.saturating_add(w.figures.failed)),
            Scope::Session(name) => session_type(r, name)
                .map(|t| t.requests_completed.saturating_add(t.requests_failed)),
            Scope::Target(name) => r
                .targets
                .iter()
                .find(|t| &t.figures.name == name)
                .map(|t| t.figures.completed.saturating_add(t.figures.failed)),
            Scope::Endpoint(which) => {
                let mut rows = r
                    .endpoints
                    .iter()
                    .filter(|e| which == ALL_ENDPOINTS || &e.address == which)
                    .peekable();
                rows.peek()?;
                // Every endpoint must have enough requests: the smallest count.
                rows.map(|e| e.completed.saturating_add(e.failed)).min()
            }
        }
    }
}

/// The session type `name` of a mix, in whichever workload has it.
fn session_type<'r>(r: &'r Report, name: &str) -> Option<&'r crate::report::SessionTypeReport> {
    r.workloads
        .iter()
        .flat_map(|w| &w.session_types)
        .find(|t| t.name == name)
}

/// The first threshold a live report breaches, if any, judged only after
/// [`ABORT_GRACE_S`] and on scopes with at least [`ABORT_MIN_REQUESTS`] finished requests.
/// `live` is a report built with [`crate::report::RunAccumulator::live_report`].
pub fn live_breach(
    thresholds: &[Threshold],
    live: &Report,
    elapsed_s: f64,
) -> Option<ThresholdResult> {
    if elapsed_s < ABORT_GRACE_S {
        return None;
    }
    thresholds
        .iter()
        .filter_map(|t| {
            if t.window_s.is_some() {
                // Judged by the accumulator on the windows closed so far, each with at
                // least ABORT_MIN_REQUESTS finished requests (see `report::windows`).
                return live.thresholds.iter().find(|v| v.expr == t.expr).cloned();
            }
            t.scope_samples(live)
                .is_some_and(|n| n >= ABORT_MIN_REQUESTS)
                .then(|| t.evaluate(live))
        })
        .find(|v| !v.passed && v.measured.is_finite())
}

/// Evaluates all thresholds.
pub fn evaluate_all(thresholds: &[Threshold], r: &Report) -> Vec<ThresholdResult> {
    thresholds.iter().map(|t| t.evaluate(r)).collect()
}
