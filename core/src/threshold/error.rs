//! Why a threshold expression does not parse: the expression as written, and one variant per
//! mistake, each message saying what to write instead.

use super::MAX_WINDOW_S;

/// A threshold expression that does not parse; the message quotes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{expr}`: {problem}")]
pub struct ThresholdError {
    /// The expression as given.
    pub expr: String,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a threshold expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// No comparison operator.
    #[error("expected `metric < value` (operators: < <= > >=)")]
    NoOperator,
    /// `window(` without its closing `).`.
    #[error("expected `window(DURATION).metric`, like window(30s).p99")]
    WindowSyntax,
    /// A window that is not a duration with a unit.
    #[error("the window takes a duration with a unit, like window(30s)")]
    WindowUnit,
    /// A window off the report's one-second intervals, or longer than a day.
    #[error("a window is a whole number of seconds from 1s to {MAX_WINDOW_S}s (the report's intervals are 1s), not {given}")]
    WindowLength {
        /// The window as written.
        given: String,
    },
    /// Two windows in one expression.
    #[error("give one window(...)")]
    TwoWindows,
    /// A scope without its closing `).`.
    #[error("expected `SCOPE(NAME).metric` (phase, step, workload, session or endpoint)")]
    ScopeSyntax,
    /// `phase()` and the like, naming nothing.
    #[error("the scope name is empty")]
    EmptyScopeName,
    /// An endpoint scope that is neither an address nor `*`.
    #[error("endpoint(...) takes an ip:port (`[v6]:port` for IPv6) or `*`")]
    EndpointAddress,
    /// An error-rate limit that is neither a percentage nor a fraction below 1.
    #[error("error_rate takes a percentage like 0.1% or a fraction below 1 like 0.001 (a bare 1 is ambiguous: write 1% or 100%)")]
    ErrorRateLimit,
    /// `N% planned` with something else than a percentage.
    #[error("expected a percentage of planned, like `99% planned`")]
    PlannedShare,
    /// A throughput limit that is not a number.
    #[error("throughput takes requests per second, or `N% planned`")]
    ThroughputLimit,
    /// A negative or infinite throughput limit.
    #[error("throughput must be >= 0")]
    NegativeThroughput,
    /// A stream figure outside a `step()` scope.
    #[error("ttfb and gap belong to a streamed step: write step(NAME).ttfb.p99")]
    StreamOutsideStep,
    /// A stream figure in a window.
    #[error("ttfb and gap are judged on the whole run, not a window")]
    StreamWindow,
    /// A stream statistic that is not a latency statistic.
    #[error("unknown statistic in `{metric}` (try ttfb.p99, gap.p50, gap.max)")]
    UnknownStreamStat {
        /// The metric as written.
        metric: String,
    },
    /// A metric name the grammar does not know.
    #[error("unknown metric `{metric}` (try p99, p99.9, max, mean, error_rate, throughput)")]
    UnknownMetric {
        /// The metric as written.
        metric: String,
    },
    /// A latency limit without `us`, `ms` or `s`.
    #[error("a latency limit needs a unit: us, ms or s")]
    LatencyUnit,
    /// Throughput in a step or session scope, where arrivals are not counted.
    #[error("throughput is not defined per step or session type")]
    ThroughputScope,
    /// An endpoint scope in a window.
    #[error("an endpoint scope is judged on the whole run, not in a window(...)")]
    EndpointWindow,
    /// A figure an endpoint does not record.
    #[error("an endpoint has p50, p99, error_rate and throughput (requests/s)")]
    EndpointMetric,
}
