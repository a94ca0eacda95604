//! Comparing two runs (`stampede compare`): every figure from the reports' exact merged data,
//! and the uncertainty of each change estimated from the per-interval histograms, so that
//! noise is not called a regression. Pure: no I/O, seeded, deterministic.
//!
//! **Noise.** The timeline intervals of each run (or of one phase of it) are grouped into at
//! most [`MAX_BLOCKS`] blocks of consecutive intervals, within each phase. A replicate draws
//! as many blocks, with replacement and phase by phase, from each run, re-merges their
//! histograms and recomputes every figure (a stratified block bootstrap: it sees drift between
//! intervals, not only sampling noise, and keeps the run's mix of phases). Throughput is a count
//! over a fixed time: its replicates redraw the count from a Poisson law. The spread of
//! the change over the replicates, shifted onto the exact change, is its confidence interval.
//! When a run has fewer than [`MIN_BLOCKS`] intervals (a run of a few seconds) a block
//! bootstrap has too few blocks to say anything, so each bucket count of the merged histogram
//! is redrawn from a Poisson law instead: sampling noise only. Steps have no per-interval
//! histograms: their interval is the whole run's, widened by √(run samples ÷ step samples),
//! which overstates the noise rather than understating it.
//!
//! **Verdict.** A change is a regression or an improvement only when its confidence interval
//! excludes zero *and* it is at least the minimum effect ([`Options::min_effect`], 5 % by
//! default; for the error rate [`MIN_EFFECT_ERROR_RATE`]): a bootstrap within each run cannot
//! see the drift from one run to the next (two runs of one scenario against one server differ
//! by a few percent in some figure with tight intervals), and the histograms resolve values to
//! 0.1 %. Anything else is within noise.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

mod noise;

use noise::{by_phase, decode, report_figures, rows, scope_noise, window, Figures};

use crate::hist::{self, HistError};
use crate::report::{Report, RunOutcome};

/// At most this many blocks of consecutive intervals per run and scope.
pub const MAX_BLOCKS: usize = 40;
/// Fewer blocks than this: the merged histogram is resampled bucket by bucket instead.
pub const MIN_BLOCKS: usize = 8;
/// Smallest error-rate change (a difference of rates: 0.01 percentage points) called a change.
pub const MIN_EFFECT_ERROR_RATE: f64 = 0.0001;

/// A report that cannot be compared, or a regression limit that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A timeline row's histogram does not decode (a hand-edited or truncated report).
    #[error("{run} report, timeline interval {interval}: {error}")]
    Hist {
        /// Which of the two reports: `base` or `new`.
        run: &'static str,
        /// The row's interval index.
        interval: u64,
        /// What the codec refused.
        error: HistError,
    },
    /// A report written with another histogram spec: its buckets cannot be compared with ours.
    #[error("{run} report uses histogram spec {got:?}, not Stampede's {expected:?}")]
    Spec {
        /// Which of the two reports: `base` or `new`.
        run: &'static str,
        /// The report's spec.
        got: hist::HistSpec,
        /// Stampede's.
        expected: hist::HistSpec,
    },
    /// A `--max-regression` without `=`.
    #[error("--max-regression `{0}`: expected METRIC=LIMIT, e.g. p99=10% or error_rate=0.5pp")]
    LimitSyntax(String),
    /// A `--max-regression` naming a metric that is not compared.
    #[error("--max-regression `{0}`: unknown metric; one of {keys}", keys = Metric::KEYS)]
    UnknownMetric(String),
    /// A `--max-regression` limit that is negative, not a number, or without its unit.
    #[error("--max-regression `{0}`: the limit must be a non-negative number with a unit, e.g. 10% (error_rate: 0.5pp)")]
    LimitValue(String),
}

/// A compared figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Median response time, µs.
    P50,
    /// 90th percentile of the response time, µs.
    P90,
    /// 99th percentile of the response time, µs.
    P99,
    /// 99.9th percentile of the response time, µs.
    P999,
    /// The largest response time, µs.
    Max,
    /// Mean response time, µs.
    Mean,
    /// Completed requests per second (for the whole run, over its length without warm-up); a
    /// drop is the regression.
    Throughput,
    /// Failed requests over finished ones, a fraction; its change is a difference of rates.
    ErrorRate,
}

impl Metric {
    /// Every metric, in the order of a section's rows.
    pub const ALL: [Metric; 8] = [
        Metric::P50,
        Metric::P90,
        Metric::P99,
        Metric::P999,
        Metric::Max,
        Metric::Mean,
        Metric::Throughput,
        Metric::ErrorRate,
    ];
    const KEYS: &'static str = "p50, p90, p99, p999, max, mean, throughput, error_rate";

    /// The key of `--max-regression` and of the JSON output.
    pub fn key(self) -> &'static str {
        match self {
            Metric::P50 => "p50",
            Metric::P90 => "p90",
            Metric::P99 => "p99",
            Metric::P999 => "p999",
            Metric::Max => "max",
            Metric::Mean => "mean",
            Metric::Throughput => "throughput",
            Metric::ErrorRate => "error_rate",
        }
    }

    /// How people write it.
    pub fn label(self) -> &'static str {
        match self {
            Metric::P999 => "p99.9",
            Metric::ErrorRate => "error rate",
            m => m.key(),
        }
    }

    /// A latency in microseconds (the other two are a rate and a fraction).
    pub fn is_latency(self) -> bool {
        !matches!(self, Metric::Throughput | Metric::ErrorRate)
    }

    /// Higher is worse (all but throughput).
    pub fn higher_is_worse(self) -> bool {
        self != Metric::Throughput
    }

    /// The error rate's change is a difference of rates; every other change is relative.
    pub fn absolute_change(self) -> bool {
        self == Metric::ErrorRate
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl FromStr for Metric {
    type Err = CompareError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let k = s.trim().to_ascii_lowercase().replace(['-', '.'], "_");
        Metric::ALL
            .into_iter()
            .find(|m| m.key() == k || (k == "p99_9" && *m == Metric::P999))
            .ok_or_else(|| CompareError::UnknownMetric(s.to_string()))
    }
}

/// Settings of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Options {
    /// Bootstrap replicates per run and scope.
    pub resamples: u32,
    /// Seed of the resampling (the same seed gives the same intervals).
    pub seed: u64,
    /// Confidence level of the intervals, e.g. 0.95.
    pub confidence: f64,
    /// Smallest relative change called a regression or an improvement, e.g. 0.05.
    pub min_effect: f64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            resamples: 1000,
            seed: 17,
            confidence: 0.95,
            min_effect: 0.05,
        }
    }
}

/// What a change means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Worse by at least the smallest effect, beyond the noise: the change's confidence interval
    /// excludes zero (without interval data, the change alone decides). A figure that moves from
    /// zero, whose relative change is undefined, is a regression or an improvement.
    Regression,
    /// Better by at least the smallest effect, beyond the noise (as for a regression).
    Improvement,
    /// A change smaller than the smallest effect, or whose confidence interval includes zero.
    WithinNoise,
    /// One of the runs has no sample for this figure (say, no completed request).
    NoData,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Regression => "regression",
            Verdict::Improvement => "improvement",
            Verdict::WithinNoise => "within noise",
            Verdict::NoData => "no data",
        })
    }
}

/// How a section's noise was estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum Noise {
    /// Block bootstrap over the timeline intervals: `blocks` per run (the smaller of the two).
    Intervals {
        /// The smaller of the two runs' counts of blocks of consecutive intervals.
        blocks: usize,
    },
    /// Too few intervals: the merged histogram resampled bucket by bucket (Poisson).
    Samples,
    /// The whole run's interval, widened by √(run samples ÷ step samples).
    ScaledFromRun,
    /// Neither report carries interval histograms.
    None,
}

/// One figure of both runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Which figure the row compares.
    pub metric: Metric,
    /// Latencies in µs, throughput in requests/s, the error rate as a fraction; absent when the
    /// run has no sample for it.
    pub base: Option<f64>,
    /// The same figure of the new run.
    pub new: Option<f64>,
    /// `new / base − 1`; for the error rate `new − base`. Absent when undefined (base 0).
    pub change: Option<f64>,
    /// Confidence interval of `change`, same unit.
    pub ci: Option<[f64; 2]>,
    /// What the change means, given the noise.
    pub verdict: Verdict,
}

/// What a section covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The whole run (its headline figures, warm-up left out).
    Run,
    /// One phase, when both runs have the same phases (more than one); warm-up phases are skipped.
    Phase,
    /// One step both runs have, when a run has more than one.
    Step,
}

/// The rows of one scope: the whole run, one phase, or one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Section {
    /// What the section covers.
    pub scope: Scope,
    /// The phase's or step's name (empty for the whole run).
    pub name: String,
    /// How the confidence intervals of its rows were estimated.
    pub noise: Noise,
    /// One row per metric compared, in the order of [`Metric::ALL`]: all of them for the run,
    /// fewer for a phase or a step.
    pub rows: Vec<Row>,
}

/// What identifies one of the compared runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The report's `run_id`.
    pub run_id: String,
    /// The report's scenario name.
    pub scenario: String,
    /// The report's target, without credentials; empty for a report written before it had one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target: String,
    /// How the run ended.
    pub outcome: RunOutcome,
    /// The run's T0: Unix time, milliseconds.
    pub started_at_unix_ms: u64,
    /// Seconds from T0 to the run's end.
    pub duration_s: f64,
    /// How many agents ran it.
    pub agents: usize,
    /// Timeline intervals with a response-time histogram.
    pub intervals: usize,
    /// Its completed requests (the headline, warm-up left out).
    pub completed: u64,
}

/// The comparison of two runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The run compared against.
    pub base: RunInfo,
    /// The run judged against `base`.
    pub new: RunInfo,
    /// Why the two runs may not be like for like.
    pub warnings: Vec<String>,
    /// The settings the comparison used.
    pub options: Options,
    /// The whole run first, then phases, then steps.
    pub sections: Vec<Section>,
}

impl Comparison {
    /// The whole-run section.
    pub fn run(&self) -> Option<&Section> {
        self.sections.iter().find(|s| s.scope == Scope::Run)
    }
}

/// A user's limit on a regression: `p99=10%`, `throughput=5%` (a drop), `error_rate=0.5pp`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Limit {
    /// The figure the limit applies to.
    pub metric: Metric,
    /// Relative (0.10 for 10 %); for the error rate a difference of rates (0.005 for 0.5 pp).
    pub max: f64,
}

impl FromStr for Limit {
    type Err = CompareError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| CompareError::LimitSyntax(s.to_string()))?;
        let metric: Metric = k
            .parse()
            .map_err(|_| CompareError::UnknownMetric(s.into()))?;
        let v = v.trim().trim_start_matches('+');
        // The error rate is itself a percentage: its limit is in percentage points, `%` or `pp`.
        let number = v
            .strip_suffix("pp")
            .filter(|_| metric.absolute_change())
            .or_else(|| v.strip_suffix('%'))
            .ok_or_else(|| CompareError::LimitValue(s.to_string()))?;
        let x: f64 = number
            .trim()
            .parse()
            .map_err(|_| CompareError::LimitValue(s.to_string()))?;
        if !x.is_finite() || x < 0.0 {
            return Err(CompareError::LimitValue(s.to_string()));
        }
        Ok(Limit {
            metric,
            max: x / 100.0,
        })
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = if self.metric.absolute_change() {
            "pp"
        } else {
            "%"
        };
        write!(f, "{}={}{unit}", self.metric.key(), self.max * 100.0)
    }
}

/// A limit judged against the whole-run rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitCheck {
    /// The limit as the user gave it.
    pub limit: Limit,
    /// The whole run's change of the figure (as in its row); absent when undefined.
    pub change: Option<f64>,
    /// The whole run's verdict on the figure.
    pub verdict: Verdict,
    /// A significant regression beyond the limit.
    pub breached: bool,
}

/// Judges `limits` on the whole run: a limit is breached by a significant regression whose
/// change is beyond it (noise never breaches a limit).
pub fn check_limits(c: &Comparison, limits: &[Limit]) -> Vec<LimitCheck> {
    limits
        .iter()
        .map(|l| {
            let row = c
                .run()
                .and_then(|s| s.rows.iter().find(|r| r.metric == l.metric));
            let (change, verdict) = row.map_or((None, Verdict::NoData), |r| (r.change, r.verdict));
            let worse = change.map(|c| if l.metric.higher_is_worse() { c } else { -c });
            LimitCheck {
                limit: *l,
                change,
                verdict,
                breached: verdict == Verdict::Regression && worse.is_none_or(|w| w > l.max),
            }
        })
        .collect()
}

fn info(r: &Report) -> RunInfo {
    RunInfo {
        run_id: r.run_id.clone(),
        scenario: r.scenario.clone(),
        target: r.target.clone(),
        outcome: r.outcome,
        started_at_unix_ms: r.started_at_unix_ms,
        duration_s: r.duration_s,
        agents: r.agents.len(),
        intervals: r
            .timeline
            .iter()
            .filter(|t| !t.response_hist.is_empty())
            .count(),
        completed: r.totals.completed,
    }
}

/// Compares `new` with `base`: the whole run, each phase when both have the same phases (more
/// than one), and each step both have (when a run has more than one).
pub fn compare(base: &Report, new: &Report, opts: &Options) -> Result<Comparison, CompareError> {
    for (r, run) in [(base, "base"), (new, "new")] {
        if r.hist_spec != hist::SPEC {
            return Err(CompareError::Spec {
                run,
                got: r.hist_spec,
                expected: hist::SPEC,
            });
        }
    }
    let d = decode(base, new)?;
    let mut sections = Vec::new();

    let strata = [by_phase(base, &d.runs[0]), by_phase(new, &d.runs[1])];
    let (noise, run_spread) = scope_noise(&d, opts, strata, 0);
    let (fb, fn_) = (report_figures(base), report_figures(new));
    sections.push(Section {
        scope: Scope::Run,
        name: String::new(),
        noise,
        rows: rows(opts, fb, fn_, &run_spread, &Metric::ALL),
    });

    let same_phases = base.phases.len() == new.phases.len() && base.phases.len() > 1;
    if same_phases {
        let n = base.phases.len();
        for (i, (pb, pn)) in base.phases.iter().zip(&new.phases).enumerate() {
            // A warm-up is not the service's steady state: not compared.
            if pb.warmup || pn.warmup {
                continue;
            }
            let parts = [(pb, 0), (pn, 1)].map(|(p, r)| {
                window(
                    &d.runs[r],
                    p.start_s,
                    p.start_s + p.duration_s,
                    i == 0,
                    i + 1 == n,
                )
            });
            let (noise, sp) = scope_noise(&d, opts, parts.map(|p| vec![p]), 1 + i as u64);
            let f = |p: &crate::report::PhaseReport| {
                Figures::of(
                    &p.latency.response_time,
                    p.completed,
                    p.failed,
                    p.duration_s,
                )
            };
            let name = if pb.name == pn.name {
                pb.name.clone()
            } else {
                format!("{} / {}", pb.name, pn.name)
            };
            sections.push(Section {
                scope: Scope::Phase,
                name,
                noise,
                rows: rows(
                    opts,
                    f(pb),
                    f(pn),
                    &sp,
                    &[
                        Metric::P50,
                        Metric::P99,
                        Metric::Throughput,
                        Metric::ErrorRate,
                    ],
                ),
            });
        }
    }

    if base.steps.len() > 1 || new.steps.len() > 1 {
        for sb in &base.steps {
            let Some(sn) = new.steps.iter().find(|s| s.name == sb.name) else {
                continue;
            };
            let count = |s: &crate::report::StepReport, r: &Report| {
                (
                    s.latency.response_time.count.max(1) as f64,
                    r.latency.response_time.count.max(1) as f64,
                )
            };
            let ((cb, rb), (cn, rn)) = (count(sb, base), count(sn, new));
            let scale = (rb / cb).max(rn / cn).sqrt();
            let sp = run_spread.map(|s| s.map(|(lo, hi)| (lo * scale, hi * scale)));
            let f = |s: &crate::report::StepReport, r: &Report| {
                Figures::of(
                    &s.latency.response_time,
                    s.completed,
                    s.failed,
                    r.duration_s,
                )
            };
            sections.push(Section {
                scope: Scope::Step,
                name: sb.name.clone(),
                noise: if sections[0].noise == Noise::None {
                    Noise::None
                } else {
                    Noise::ScaledFromRun
                },
                rows: rows(
                    opts,
                    f(sb, base),
                    f(sn, new),
                    &sp,
                    &[Metric::P50, Metric::P99, Metric::ErrorRate],
                ),
            });
        }
    }

    Ok(Comparison {
        base: info(base),
        new: info(new),
        warnings: comparability(base, new),
        options: *opts,
        sections,
    })
}

/// Why `base` and `new` may not be like for like (empty when they are).
pub fn comparability(base: &Report, new: &Report) -> Vec<String> {
    let mut w = Vec::new();
    let mut differ = |what: &str, b: String, n: String| {
        if b != n {
            w.push(format!("{what} differs: {b} (base) vs {n} (new)"));
        }
    };
    differ("scenario", base.scenario.clone(), new.scenario.clone());
    if !base.target.is_empty() && !new.target.is_empty() {
        differ("target", base.target.clone(), new.target.clone());
    }
    differ("load", base.load_description(), new.load_description());
    differ(
        "planned duration",
        format!("{:.1}s", base.planned_duration_s),
        format!("{:.1}s", new.planned_duration_s),
    );
    differ(
        "agent count",
        base.agents.len().to_string(),
        new.agents.len().to_string(),
    );
    if base.load.is_none() && new.load.is_none() {
        differ(
            "planned requests",
            base.totals.planned.to_string(),
            new.totals.planned.to_string(),
        );
    }
    let phases = |r: &Report| {
        r.phases
            .iter()
            .map(|p| format!("{} {:.1}s", p.name, p.duration_s))
            .collect::<Vec<_>>()
            .join(", ")
    };
    differ("phases", phases(base), phases(new));
    for (r, which) in [(base, "base"), (new, "new")] {
        if r.outcome != RunOutcome::Succeeded {
            w.push(format!(
                "the {which} run did not succeed ({:?}): its figures cover less than was planned",
                r.outcome
            ));
        }
        if r.generator.behind_schedule {
            w.push(format!(
                "the {which} run's generator fell behind its schedule: its latencies describe the generator too"
            ));
        }
        if r.timeline.iter().all(|t| t.response_hist.is_empty()) {
            w.push(format!(
                "the {which} report has no interval histograms: no noise estimate, every change is shown without a confidence interval"
            ));
        }
    }
    w
}

#[cfg(test)]
mod tests;
