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
//!
//! The types are here; reading an expression is in `parse`, judging a report in `evaluate`.

use serde::{Deserialize, Serialize};

mod error;
mod evaluate;
mod parse;
pub use error::{Problem, ThresholdError};
pub use evaluate::{evaluate_all, live_breach};
pub(crate) use parse::parse_fraction;

/// Where a threshold looks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scope {
    /// The whole run's headline figures (warm-up phases left out).
    Run,
    /// The phase of this name (`phase(NAME)`), warm-up or not.
    Phase(String),
    /// The request step of this name as the report names it (`step(NAME)`).
    Step(String),
    /// The workload of this name (`workload(NAME)`), its phases together.
    Workload(String),
    /// A session type of a weighted mix, by name (in any workload).
    Session(String),
    /// One endpoint by its `ip:port`, or every endpoint ([`ALL_ENDPOINTS`]): each must pass,
    /// because a merged percentile hides one slow backend.
    Endpoint(String),
    /// The workloads aimed at one target, by its `host:port` (a `unix://` target by its
    /// path): with an auth service and an API in one run, each has its own latency budget.
    Target(String),
}

/// The `endpoint(*)` scope: every endpoint of the run.
pub const ALL_ENDPOINTS: &str = "*";

/// The comparison: the threshold passes when `measured op limit` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// `<`: below the limit.
    Lt,
    /// `<=`: at most the limit.
    Le,
    /// `>`: above the limit.
    Gt,
    /// `>=`: at least the limit.
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
        /// Service time (`service.` prefix) rather than response time.
        service: bool,
        /// Which statistic of it.
        stat: LatencyStat,
    },
    /// A streamed step's arrival statistic in microseconds (`step(NAME).ttfb.p99`).
    Stream {
        /// Time to first event or gap between events.
        figure: StreamFigure,
        /// Which statistic of it.
        stat: LatencyStat,
    },
    /// Failed requests over finished ones, a fraction.
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

/// Which statistic of a latency histogram a threshold reads.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum LatencyStat {
    /// `min`: the lowest value.
    Min,
    /// `mean`: the mean of the recorded values.
    Mean,
    /// `max`: the highest value.
    Max,
    /// `p50` … `p99.99` (or `median`): the quantile as a fraction, 0.99 for `p99`.
    Quantile(f64),
}

/// A parsed threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    /// The expression as written (in the scenario, or `--slo`); its result repeats it.
    pub expr: String,
    /// Where it looks.
    pub scope: Scope,
    /// What it reads.
    pub metric: Metric,
    /// How the measured value is compared with `limit`.
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
    /// The expression as written (the default error verdict says `(default)`).
    pub expr: String,
    /// The measured value, in the metric's unit (µs, fraction, requests/s); NaN (`null` in
    /// JSON) when there was nothing to measure.
    #[serde(deserialize_with = "nan_if_null")]
    pub measured: f64,
    /// The limit, in the metric's unit (µs, fraction, requests/s).
    pub limit: f64,
    /// Whether the measured value met the limit; never true when there was nothing to measure.
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

impl Threshold {
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

#[cfg(test)]
mod tests;
