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

use base64::Engine as _;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Poisson};
use serde::{Deserialize, Serialize};

use crate::hist::{self, HistError};
use crate::report::{LoadSummary, Percentiles, Report, RunOutcome};

/// At most this many blocks of consecutive intervals per run and scope.
pub const MAX_BLOCKS: usize = 40;
/// Fewer blocks than this: the merged histogram is resampled bucket by bucket instead.
pub const MIN_BLOCKS: usize = 8;
/// Smallest error-rate change (a difference of rates: 0.01 percentage points) called a change.
pub const MIN_EFFECT_ERROR_RATE: f64 = 0.0001;

/// A report that cannot be compared.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("{run} report, timeline interval {interval}: the response-time histogram is not valid base64")]
    Base64 { run: &'static str, interval: u64 },
    #[error("{run} report, timeline interval {interval}: {source}")]
    Hist {
        run: &'static str,
        interval: u64,
        source: HistError,
    },
    #[error("{run} report uses histogram spec {got:?}, not Stampede's {expected:?}")]
    Spec {
        run: &'static str,
        got: hist::HistSpec,
        expected: hist::HistSpec,
    },
    #[error("--max-regression `{0}`: expected METRIC=LIMIT, e.g. p99=10% or error_rate=0.5pp")]
    LimitSyntax(String),
    #[error("--max-regression `{0}`: unknown metric; one of {keys}", keys = Metric::KEYS)]
    UnknownMetric(String),
    #[error("--max-regression `{0}`: the limit must be a non-negative number with a unit, e.g. 10% (error_rate: 0.5pp)")]
    LimitValue(String),
}

/// A compared figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    P50,
    P90,
    P99,
    P999,
    Max,
    Mean,
    Throughput,
    ErrorRate,
}

impl Metric {
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
    Regression,
    Improvement,
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
    Intervals { blocks: usize },
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
    pub metric: Metric,
    /// Latencies in µs, throughput in requests/s, the error rate as a fraction; absent when the
    /// run has no sample for it.
    pub base: Option<f64>,
    pub new: Option<f64>,
    /// `new / base − 1`; for the error rate `new − base`. Absent when undefined (base 0).
    pub change: Option<f64>,
    /// Confidence interval of `change`, same unit.
    pub ci: Option<[f64; 2]>,
    pub verdict: Verdict,
}

/// What a section covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Run,
    Phase,
    Step,
}

/// The rows of one scope: the whole run, one phase, or one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Section {
    pub scope: Scope,
    /// The phase's or step's name (empty for the whole run).
    pub name: String,
    pub noise: Noise,
    pub rows: Vec<Row>,
}

/// What identifies one of the compared runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub run_id: String,
    pub scenario: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target: String,
    pub outcome: RunOutcome,
    pub started_at_unix_ms: u64,
    pub duration_s: f64,
    pub agents: usize,
    /// Timeline intervals with a response-time histogram.
    pub intervals: usize,
    pub completed: u64,
}

/// The comparison of two runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub base: RunInfo,
    pub new: RunInfo,
    /// Why the two runs may not be like for like.
    pub warnings: Vec<String>,
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
    pub limit: Limit,
    pub change: Option<f64>,
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

/// The eight figures of one scope, indexed by [`Metric`]; NaN where there is no sample.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Figures([f64; 8]);

impl Figures {
    fn of(p: &Percentiles, completed: u64, failed: u64, seconds: f64) -> Self {
        let lat = |v: f64| if p.count > 0 { v } else { f64::NAN };
        let finished = completed.saturating_add(failed);
        Figures([
            lat(p.p50_us as f64),
            lat(p.p90_us as f64),
            lat(p.p99_us as f64),
            lat(p.p999_us as f64),
            lat(p.max_us as f64),
            lat(p.mean_us),
            if seconds > 0.0 {
                completed as f64 / seconds
            } else {
                f64::NAN
            },
            if finished > 0 {
                failed as f64 / finished as f64
            } else {
                f64::NAN
            },
        ])
    }
    fn get(&self, m: Metric) -> f64 {
        self.0[m.index()]
    }
}

/// The change of `m` from `b` to `n`, NaN when undefined.
fn change(m: Metric, b: f64, n: f64) -> f64 {
    if m.absolute_change() {
        n - b
    } else if b > 0.0 {
        n / b - 1.0
    } else if b == 0.0 && n == 0.0 {
        0.0
    } else {
        f64::NAN
    }
}

/// The distinct buckets of both runs, by highest equivalent value (what percentiles report).
#[derive(Debug, Default)]
struct Table {
    highest: Vec<u64>,
    median: Vec<u64>,
}

/// One timeline interval, its buckets as (index into [`Table`], count).
#[derive(Debug, Clone, Default)]
struct Interval {
    t_s: f64,
    buckets: Vec<(u32, u64)>,
    completed: u64,
    failed: u64,
    seconds: f64,
}

/// The decoded intervals of both runs over one table.
struct Decoded {
    table: Table,
    runs: [Vec<Interval>; 2],
}

fn interval_s(r: &Report) -> f64 {
    match r.timeline.as_slice() {
        [a, b, ..] if b.t_s > a.t_s => b.t_s - a.t_s,
        _ => 1.0,
    }
}

/// An interval's buckets as decoded: (highest equivalent, median equivalent, count).
type RawBuckets = Vec<(u64, u64, u64)>;

/// Decodes every interval's response-time histogram, as (highest, median, count) buckets.
fn decode_run(r: &Report, run: &'static str) -> Result<Vec<(Interval, RawBuckets)>, CompareError> {
    let len = interval_s(r);
    r.timeline
        .iter()
        .map(|row| {
            let mut raw = Vec::new();
            if !row.response_hist.is_empty() {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(&row.response_hist)
                    .map_err(|_| CompareError::Base64 {
                        run,
                        interval: row.interval,
                    })?;
                let h = hist::decode(&bytes).map_err(|source| CompareError::Hist {
                    run,
                    interval: row.interval,
                    source,
                })?;
                for v in h.iter_recorded() {
                    let at = v.value_iterated_to();
                    raw.push((
                        h.highest_equivalent(at),
                        h.median_equivalent(at),
                        v.count_at_value(),
                    ));
                }
            }
            Ok((
                Interval {
                    t_s: row.t_s,
                    buckets: Vec::new(),
                    completed: row.completed,
                    failed: row.failed,
                    seconds: len,
                },
                raw,
            ))
        })
        .collect()
}

fn decode(base: &Report, new: &Report) -> Result<Decoded, CompareError> {
    let runs = [decode_run(base, "base")?, decode_run(new, "new")?];
    let mut all: Vec<(u64, u64)> = runs
        .iter()
        .flatten()
        .flat_map(|(_, raw)| raw.iter().map(|&(h, m, _)| (h, m)))
        .collect();
    all.sort_unstable();
    all.dedup_by_key(|x| x.0);
    let table = Table {
        highest: all.iter().map(|x| x.0).collect(),
        median: all.iter().map(|x| x.1).collect(),
    };
    let index = |h: u64| table.highest.binary_search(&h).unwrap_or(0) as u32;
    let [b, n] = runs.map(|run| {
        run.into_iter()
            .map(|(mut iv, raw)| {
                iv.buckets = raw.iter().map(|&(h, _, c)| (index(h), c)).collect();
                iv
            })
            .collect::<Vec<_>>()
    });
    Ok(Decoded {
        table,
        runs: [b, n],
    })
}

/// Intervals merged: counts summed per bucket.
fn merge(parts: &[&Interval]) -> Interval {
    let mut buckets: Vec<(u32, u64)> = parts.iter().flat_map(|p| p.buckets.clone()).collect();
    buckets.sort_unstable_by_key(|b| b.0);
    let mut merged: Vec<(u32, u64)> = Vec::with_capacity(buckets.len());
    for (i, c) in buckets {
        match merged.last_mut() {
            Some(last) if last.0 == i => last.1 = last.1.saturating_add(c),
            _ => merged.push((i, c)),
        }
    }
    Interval {
        t_s: parts.first().map_or(0.0, |p| p.t_s),
        buckets: merged,
        completed: parts.iter().map(|p| p.completed).sum(),
        failed: parts.iter().map(|p| p.failed).sum(),
        seconds: parts.iter().map(|p| p.seconds).sum(),
    }
}

/// Blocks of consecutive intervals per stratum (phase), at most [`MAX_BLOCKS`] in all, shared
/// in proportion to the strata's lengths (at least one each).
fn blocks(strata: &[Vec<&Interval>]) -> Vec<Vec<Interval>> {
    let total: usize = strata.iter().map(Vec::len).sum();
    strata
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| {
            let n = (MAX_BLOCKS * s.len())
                .div_ceil(total.max(1))
                .clamp(1, s.len());
            (0..n)
                .map(|b| merge(&s[b * s.len() / n..(b + 1) * s.len() / n]))
                .collect()
        })
        .collect()
}

/// The figures of dense bucket counts `acc` (indexed like `table`), exactly as
/// [`Percentiles::of`] computes them.
fn figures(acc: &[u64], table: &Table, completed: u64, failed: u64, seconds: f64) -> Figures {
    let total: u64 = acc.iter().sum();
    let mut p = Percentiles {
        count: total,
        ..Percentiles::default()
    };
    if total > 0 {
        let qs = [0.5, 0.9, 0.99, 0.999];
        let mut found = [0u64; 4];
        let targets = qs.map(|q: f64| ((q * total as f64).ceil() as u64).max(1));
        let (mut so_far, mut next, mut mean) = (0u64, 0usize, 0.0f64);
        for (i, &n) in acc.iter().enumerate() {
            if n == 0 {
                continue;
            }
            so_far += n;
            while next < 4 && so_far >= targets[next] {
                found[next] = table.highest[i];
                next += 1;
            }
            mean += table.median[i] as f64 * n as f64 / total as f64;
            p.max_us = table.highest[i];
        }
        [p.p50_us, p.p90_us, p.p99_us, p.p999_us] = found;
        p.mean_us = mean;
    }
    Figures::of(&p, completed, failed, seconds)
}

/// Replicates of one run's figures over `strata` (its phases, or one phase), and the figures
/// of all of them merged. Blocks are drawn within their stratum, so a replicate keeps the
/// run's mix of phases. Throughput is a count over a fixed time: its replicates redraw the
/// count (Poisson), whatever the mode.
fn resample(
    strata: &[Vec<&Interval>],
    table: &Table,
    opts: &Options,
    stream: u64,
    poisson: bool,
) -> (Figures, Vec<Figures>) {
    let all: Vec<&Interval> = strata.iter().flatten().copied().collect();
    let whole = merge(&all);
    let mut acc = vec![0u64; table.highest.len()];
    for &(i, c) in &whole.buckets {
        acc[i as usize] += c;
    }
    let point = figures(&acc, table, whole.completed, whole.failed, whole.seconds);
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    rng.set_stream(stream);
    let draw = |rng: &mut ChaCha8Rng, n: u64| -> u64 {
        match Poisson::new(n as f64) {
            Ok(d) if n > 0 => d.sample(rng) as u64,
            _ => 0,
        }
    };
    let strata_blocks = blocks(strata);
    let reps = (0..opts.resamples)
        .map(|_| {
            acc.iter_mut().for_each(|a| *a = 0);
            let mut f = if poisson {
                for &(i, c) in &whole.buckets {
                    acc[i as usize] = draw(&mut rng, c);
                }
                let (c, f) = (
                    draw(&mut rng, whole.completed),
                    draw(&mut rng, whole.failed),
                );
                figures(&acc, table, c, f, whole.seconds)
            } else {
                let (mut c, mut f, mut s) = (0u64, 0u64, 0.0f64);
                for blocks in &strata_blocks {
                    for _ in 0..blocks.len() {
                        let b = &blocks[rng.random_range(0..blocks.len())];
                        for &(i, n) in &b.buckets {
                            acc[i as usize] += n;
                        }
                        c += b.completed;
                        f += b.failed;
                        s += b.seconds;
                    }
                }
                figures(&acc, table, c, f, s)
            };
            if whole.seconds > 0.0 {
                f.0[Metric::Throughput.index()] =
                    draw(&mut rng, whole.completed) as f64 / whole.seconds;
            }
            f
        })
        .collect();
    (point, reps)
}

/// Per metric, the confidence interval of the change less the change itself (where the
/// replicates put the change relative to the point), from the two runs' replicates.
type Spread = [Option<(f64, f64)>; 8];

fn spread(opts: &Options, points: (Figures, Figures), reps: (&[Figures], &[Figures])) -> Spread {
    let alpha = (1.0 - opts.confidence).clamp(0.0, 1.0);
    Metric::ALL.map(|m| {
        let mut d: Vec<f64> = reps
            .0
            .iter()
            .zip(reps.1)
            .map(|(b, n)| change(m, b.get(m), n.get(m)))
            .filter(|x| x.is_finite())
            .collect();
        let at = change(m, points.0.get(m), points.1.get(m));
        if d.len() * 2 < reps.0.len().max(1) || !at.is_finite() {
            return None;
        }
        d.sort_unstable_by(f64::total_cmp);
        let last = (d.len() - 1) as f64;
        let lo = d[(alpha / 2.0 * last).floor() as usize];
        let hi = d[((1.0 - alpha / 2.0) * last).ceil() as usize];
        Some((lo - at, hi - at))
    })
}

fn opt(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// The rows of one scope from its exact figures and the spread of its changes.
fn rows(opts: &Options, b: Figures, n: Figures, spread: &Spread, metrics: &[Metric]) -> Vec<Row> {
    metrics
        .iter()
        .map(|&m| {
            let (bv, nv) = (opt(b.get(m)), opt(n.get(m)));
            let ch = opt(change(m, b.get(m), n.get(m)));
            let ci = ch
                .zip(spread[m.index()])
                .map(|(c, (lo, hi))| [c + lo, c + hi]);
            let min = if m.absolute_change() {
                MIN_EFFECT_ERROR_RATE
            } else {
                opts.min_effect
            };
            let worse_up = m.higher_is_worse();
            let verdict = match (bv, nv, ch) {
                (None, _, _) | (_, None, _) => Verdict::NoData,
                // Undefined relative change (from zero): a change no noise explains.
                (Some(b), Some(n), None) => {
                    if (n > b) == worse_up {
                        Verdict::Regression
                    } else {
                        Verdict::Improvement
                    }
                }
                (_, _, Some(c)) => {
                    // Without interval data there is no noise estimate: the change alone
                    // decides (the comparison warns about it).
                    let significant =
                        ci.is_none_or(|[lo, hi]| lo > 0.0 || hi < 0.0) && c.abs() >= min;
                    if !significant {
                        Verdict::WithinNoise
                    } else if (c > 0.0) == worse_up {
                        Verdict::Regression
                    } else {
                        Verdict::Improvement
                    }
                }
            };
            Row {
                metric: m,
                base: bv,
                new: nv,
                change: ch,
                ci,
                verdict,
            }
        })
        .collect()
}

/// Figures of a scope from the report's exact numbers.
fn report_figures(r: &Report) -> Figures {
    Figures::of(
        &r.latency.response_time,
        r.totals.completed,
        r.totals.failed,
        r.duration_s,
    )
}

/// Which intervals of `run` fall in `[start, end)`; the first phase takes anything earlier,
/// the last anything later (late responses of the last sessions).
fn window(run: &[Interval], start: f64, end: f64, first: bool, last: bool) -> Vec<&Interval> {
    const EPS: f64 = 1e-6;
    run.iter()
        .filter(|iv| (first || iv.t_s >= start - EPS) && (last || iv.t_s < end - EPS))
        .collect()
}

/// Noise of one scope: replicates of both runs over their intervals, and the spread.
fn scope_noise(
    d: &Decoded,
    opts: &Options,
    strata: [Vec<Vec<&Interval>>; 2],
    scope_index: u64,
) -> (Noise, Spread) {
    let has = |p: &Vec<Vec<&Interval>>| {
        p.iter()
            .flatten()
            .any(|iv| !iv.buckets.is_empty() || iv.failed > 0)
    };
    if !has(&strata[0]) || !has(&strata[1]) || opts.resamples == 0 {
        return (Noise::None, [None; 8]);
    }
    let count = |p: &Vec<Vec<&Interval>>| blocks(p).iter().map(Vec::len).sum::<usize>();
    let nblocks = count(&strata[0]).min(count(&strata[1]));
    let poisson = nblocks < MIN_BLOCKS;
    let (pb, rb) = resample(&strata[0], &d.table, opts, scope_index * 2, poisson);
    let (pn, rn) = resample(&strata[1], &d.table, opts, scope_index * 2 + 1, poisson);
    let noise = if poisson {
        Noise::Samples
    } else {
        Noise::Intervals { blocks: nblocks }
    };
    (noise, spread(opts, (pb, pn), (&rb, &rn)))
}

/// A run's intervals by phase (the strata of its whole-run bootstrap).
fn by_phase<'a>(r: &Report, run: &'a [Interval]) -> Vec<Vec<&'a Interval>> {
    if r.phases.is_empty() {
        return vec![run.iter().collect()];
    }
    let n = r.phases.len();
    r.phases
        .iter()
        .enumerate()
        .map(|(i, p)| window(run, p.start_s, p.start_s + p.duration_s, i == 0, i + 1 == n))
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

fn load_text(r: &Report) -> String {
    match &r.load {
        Some(LoadSummary {
            model,
            connections,
            rate: Some(rate),
            ..
        }) => format!("{model} {rate}/s over {connections} connections"),
        Some(l) => format!("{} {} connections", l.model, l.connections),
        None => format!("{} arrivals", r.arrival),
    }
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
    differ("load", load_text(base), load_text(new));
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
mod tests {
    use super::*;
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
                    response_hist: base64::engine::general_purpose::STANDARD
                        .encode(hist::encode(&h).unwrap()),
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
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(&row.response_hist)
                        .unwrap();
                    hist::merge(&mut h, &hist::decode(&bytes).unwrap()).unwrap();
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
}
