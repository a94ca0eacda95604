//! Pass/fail thresholds evaluated on the merged report, e.g. `p99 < 50ms`,
//! `error_rate < 0.1%`, `throughput >= 99% planned`, `phase(ramp).p99.9 <= 200ms`,
//! `step(login).service.p99 < 20ms`, `step(chat).ttfb.p99 < 500ms`.
//!
//! Grammar: `[scope.]metric op value`, where scope is `phase(NAME)`, `step(NAME)`,
//! `workload(NAME)`, `session(NAME)` (a session type of a mix), or `endpoint(IP:PORT)` /
//! `endpoint(*)` (one of the target's endpoints, or every one of them: `p50`, `p99`,
//! `error_rate` and `throughput`);
//! metric is a latency (`min`, `mean`, `max`, `p50` … `p99.99`, optionally prefixed by
//! `service.`; response time otherwise; in a `step()` scope also `ttfb.` or `gap.`, a streamed
//! step's time to first event and gap between events), `error_rate`, or `throughput`; op is `<`, `<=`, `>`,
//! `>=`; value is a duration (`us`, `ms`, `s`), a percentage or fraction (`error_rate`), or
//! requests/s or `N% planned` (`throughput`).

use serde::{Deserialize, Serialize};

use crate::report::{Percentiles, Report};

mod error;
pub use error::{Problem, ThresholdError};

/// Where a threshold looks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scope {
    Run,
    Phase(String),
    Step(String),
    Workload(String),
    /// A session type of a weighted mix, by name (in any workload).
    Session(String),
    /// One endpoint by its `ip:port`, or every endpoint ([`ALL_ENDPOINTS`]): each must pass,
    /// because a merged percentile hides one slow backend.
    Endpoint(String),
}

/// The `endpoint(*)` scope: every endpoint of the run.
pub const ALL_ENDPOINTS: &str = "*";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    /// Whether `measured op limit` holds.
    pub fn holds(self, measured: f64, limit: f64) -> bool {
        match self {
            Op::Lt => measured < limit,
            Op::Le => measured <= limit,
            Op::Gt => measured > limit,
            Op::Ge => measured >= limit,
        }
    }
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Metric {
    /// A latency statistic in microseconds; `quantile` is `None` for min/mean/max.
    Latency {
        service: bool,
        stat: LatencyStat,
    },
    /// A streamed step's arrival statistic in microseconds (`step(NAME).ttfb.p99`).
    Stream {
        figure: StreamFigure,
        stat: LatencyStat,
    },
    ErrorRate,
    /// Completed requests per second.
    Throughput,
    /// Completed requests as a fraction of planned.
    ThroughputOfPlanned,
}

/// Which arrival figure of a streamed step a threshold reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamFigure {
    /// From the intended send to the first event.
    Ttfb,
    /// Between events.
    Gap,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum LatencyStat {
    Min,
    Mean,
    Max,
    Quantile(f64),
}

/// A parsed threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    pub expr: String,
    pub scope: Scope,
    pub metric: Metric,
    pub op: Op,
    /// Limit in the metric's unit: µs, a fraction, or requests/s.
    pub limit: f64,
    /// `window(30s).`: judged on the worst window of this many seconds (whole seconds, so a
    /// window is a whole number of report intervals), not on the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_s: Option<u64>,
}

/// Longest `window(...)` a threshold may ask for.
pub const MAX_WINDOW_S: u64 = 24 * 3600;

/// Which span of the run a windowed verdict is about.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowSpan {
    /// Start of the window, seconds after T0.
    pub from_s: f64,
    /// End of the window, seconds after T0.
    pub to_s: f64,
}

/// The verdict on one threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThresholdResult {
    pub expr: String,
    /// The measured value, in the metric's unit (µs, fraction, requests/s); NaN (`null` in
    /// JSON) when there was nothing to measure.
    #[serde(deserialize_with = "nan_if_null")]
    pub measured: f64,
    pub limit: f64,
    pub passed: bool,
    /// Human form of the measured value.
    pub measured_text: String,
    /// A windowed threshold: the window it was judged on (the worst one), so a failure says
    /// when the service broke.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowSpan>,
}

/// JSON has no NaN: serde_json writes it as `null`, and reads `null` back here as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn bad(expr: &str, problem: Problem) -> ThresholdError {
    ThresholdError {
        expr: expr.to_string(),
        problem,
    }
}

fn parse_latency_stat(s: &str) -> Option<LatencyStat> {
    match s {
        "min" => Some(LatencyStat::Min),
        "mean" | "avg" => Some(LatencyStat::Mean),
        "max" => Some(LatencyStat::Max),
        "median" => Some(LatencyStat::Quantile(0.5)),
        _ => {
            let n: f64 = s.strip_prefix('p')?.parse().ok()?;
            (n > 0.0 && n < 100.0).then_some(LatencyStat::Quantile(n / 100.0))
        }
    }
}

/// Takes a leading `window(D).` off `text`: the window in whole seconds, and the rest.
fn strip_window<'t>(expr: &str, text: &'t str) -> Result<(Option<u64>, &'t str), ThresholdError> {
    let Some(rest) = text.strip_prefix("window(") else {
        return Ok((None, text));
    };
    let (d, tail) = rest
        .split_once(").")
        .ok_or_else(|| bad(expr, Problem::WindowSyntax))?;
    let us = parse_duration_us(d.trim()).ok_or_else(|| bad(expr, Problem::WindowUnit))?;
    let secs = us / 1e6;
    if secs < 1.0 || secs.fract() != 0.0 || secs > MAX_WINDOW_S as f64 {
        return Err(bad(
            expr,
            Problem::WindowLength {
                given: d.to_string(),
            },
        ));
    }
    Ok((Some(secs as u64), tail))
}

fn parse_duration_us(s: &str) -> Option<f64> {
    let (num, mult) = if let Some(n) = s.strip_suffix("us").or_else(|| s.strip_suffix("µs")) {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e6)
    } else {
        return None;
    };
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v * mult)
}

/// A percentage (`0.1%`) or a fraction below 1 (`0.001`). A bare `1` (or more) is refused:
/// users who write `error_rate < 1` mean 1 %, and reading it as 100 % passes every run.
pub(crate) fn parse_fraction(s: &str) -> Option<f64> {
    let v = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().ok()? / 100.0,
        None => {
            let v = s.parse::<f64>().ok()?;
            if v >= 1.0 {
                return None;
            }
            v
        }
    };
    (v.is_finite() && (0.0..=1.0).contains(&v)).then_some(v)
}

impl Threshold {
    /// Parses one expression; the error says what is wrong with it.
    pub fn parse(expr: &str) -> Result<Self, ThresholdError> {
        let text = expr.trim();
        let (lhs, op, rhs) = ["<=", ">=", "<", ">"]
            .iter()
            .find_map(|op| text.split_once(op).map(|(l, r)| (l.trim(), *op, r.trim())))
            .ok_or_else(|| bad(expr, Problem::NoOperator))?;
        let op = match op {
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            _ => Op::Ge,
        };
        let (mut window_s, lhs) = strip_window(expr, lhs)?;
        let scoped = ["phase(", "step(", "workload(", "session(", "endpoint("]
            .iter()
            .find_map(|p| lhs.strip_prefix(p).map(|rest| (*p, rest)));
        let (scope, metric_text) = if let Some((kind, rest)) = scoped {
            let (name, tail) = rest
                .split_once(").")
                .ok_or_else(|| bad(expr, Problem::ScopeSyntax))?;
            if name.is_empty() {
                return Err(bad(expr, Problem::EmptyScopeName));
            }
            let name = name.to_string();
            let scope = match kind {
                "phase(" => Scope::Phase(name),
                "step(" => Scope::Step(name),
                "workload(" => Scope::Workload(name),
                "endpoint(" if name == ALL_ENDPOINTS => Scope::Endpoint(name),
                "endpoint(" => Scope::Endpoint(
                    name.parse::<std::net::SocketAddr>()
                        .map_err(|_| bad(expr, Problem::EndpointAddress))?
                        .to_string(),
                ),
                _ => Scope::Session(name),
            };
            (scope, tail)
        } else {
            (Scope::Run, lhs)
        };
        // `phase(x).window(2s).p99` as well as `window(2s).phase(x).p99`.
        let (inner, metric_text) = strip_window(expr, metric_text)?;
        if inner.is_some() {
            if window_s.is_some() {
                return Err(bad(expr, Problem::TwoWindows));
            }
            window_s = inner;
        }
        let (metric, limit) = match metric_text {
            "error_rate" => (
                Metric::ErrorRate,
                parse_fraction(rhs).ok_or_else(|| bad(expr, Problem::ErrorRateLimit))?,
            ),
            "throughput" | "rps" => {
                if let Some(pct) = rhs.strip_suffix("planned") {
                    (
                        Metric::ThroughputOfPlanned,
                        parse_fraction(pct.trim())
                            .ok_or_else(|| bad(expr, Problem::PlannedShare))?,
                    )
                } else {
                    let v: f64 = rhs
                        .trim_end_matches("/s")
                        .trim()
                        .parse()
                        .map_err(|_| bad(expr, Problem::ThroughputLimit))?;
                    if !v.is_finite() || v < 0.0 {
                        return Err(bad(expr, Problem::NegativeThroughput));
                    }
                    (Metric::Throughput, v)
                }
            }
            m if m.starts_with("ttfb.") || m.starts_with("gap.") => {
                let (figure, stat) = match m.split_once('.') {
                    Some(("ttfb", s)) => (StreamFigure::Ttfb, s),
                    Some((_, s)) => (StreamFigure::Gap, s),
                    None => (StreamFigure::Gap, m),
                };
                if !matches!(scope, Scope::Step(_)) {
                    return Err(bad(expr, Problem::StreamOutsideStep));
                }
                if window_s.is_some() {
                    return Err(bad(expr, Problem::StreamWindow));
                }
                let stat = parse_latency_stat(stat).ok_or_else(|| {
                    bad(
                        expr,
                        Problem::UnknownStreamStat {
                            metric: m.to_string(),
                        },
                    )
                })?;
                let limit =
                    parse_duration_us(rhs).ok_or_else(|| bad(expr, Problem::LatencyUnit))?;
                (Metric::Stream { figure, stat }, limit)
            }
            m => {
                let (service, stat) = match m.strip_prefix("service.") {
                    Some(s) => (true, s),
                    None => (false, m.strip_prefix("response.").unwrap_or(m)),
                };
                let stat = parse_latency_stat(stat).ok_or_else(|| {
                    bad(
                        expr,
                        Problem::UnknownMetric {
                            metric: m.to_string(),
                        },
                    )
                })?;
                let limit =
                    parse_duration_us(rhs).ok_or_else(|| bad(expr, Problem::LatencyUnit))?;
                (Metric::Latency { service, stat }, limit)
            }
        };
        if matches!(scope, Scope::Step(_) | Scope::Session(_))
            && matches!(metric, Metric::Throughput | Metric::ThroughputOfPlanned)
        {
            return Err(bad(expr, Problem::ThroughputScope));
        }
        if matches!(scope, Scope::Endpoint(_)) {
            if window_s.is_some() {
                return Err(bad(expr, Problem::EndpointWindow));
            }
            let ok = match metric {
                Metric::Latency { service, stat } => {
                    !service && matches!(stat, LatencyStat::Quantile(q) if q == 0.5 || q == 0.99)
                }
                Metric::ErrorRate | Metric::Throughput => true,
                Metric::ThroughputOfPlanned | Metric::Stream { .. } => false,
            };
            if !ok {
                return Err(bad(expr, Problem::EndpointMetric));
            }
        }
        Ok(Self {
            expr: expr.to_string(),
            scope,
            metric,
            op,
            limit,
            window_s,
        })
    }

    /// The default error verdict ([`DEFAULT_MAX_ERROR_RATE`] unless the scenario says
    /// otherwise): `error_rate < limit` over the whole run, marked as the default.
    pub fn default_error_rate(limit: f64) -> Self {
        Self {
            expr: format!("error_rate < {}% (default)", limit * 100.0),
            scope: Scope::Run,
            metric: Metric::ErrorRate,
            op: Op::Lt,
            limit,
            window_s: None,
        }
    }

    /// True for a run-wide `error_rate` threshold: with one the default error verdict is
    /// not added, the user has said what they accept.
    pub fn is_run_error_rate(&self) -> bool {
        self.scope == Scope::Run && self.metric == Metric::ErrorRate && self.window_s.is_none()
    }

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
        match &self.scope {
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
            Scope::Phase(_) | Scope::Workload(_) => {
                let p = match &self.scope {
                    Scope::Phase(name) => r.phases.iter().find(|p| &p.name == name)?,
                    Scope::Workload(name) => {
                        &r.workloads
                            .iter()
                            .find(|w| &w.figures.name == name)?
                            .figures
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

/// The error rate a run may have without thresholds before it is flagged (exit 1): a run with
/// failures should not pass CI silently. `max_error_rate:` in the scenario changes it, and a
/// run-wide `error_rate` threshold replaces it.
pub const DEFAULT_MAX_ERROR_RATE: f64 = 0.01;

/// Live evaluation (`abort_on_fail`) waits this long after T0 before judging anything.
pub const ABORT_GRACE_S: f64 = 2.0;
/// Live evaluation judges a threshold only once its scope (the run, the phase or the step)
/// has this many finished (completed or failed) requests: a p99 over a handful of samples is
/// noise, not a breach.
pub const ABORT_MIN_REQUESTS: u64 = 100;

impl Threshold {
    /// Finished requests in this threshold's scope; `None` when the scope does not exist.
    pub fn scope_samples(&self, r: &Report) -> Option<u64> {
        match &self.scope {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Latency, PhaseReport, Totals};

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
}
