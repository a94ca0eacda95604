//! The noise estimate of `compare`: the reports' interval histograms decoded over one bucket
//! table, the stratified block bootstrap (or the Poisson resampling of short runs), and the
//! rows with their confidence intervals and verdicts. See the parent module for the method.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Poisson};

use super::{
    CompareError, Metric, Noise, Options, Row, Verdict, MAX_BLOCKS, MIN_BLOCKS,
    MIN_EFFECT_ERROR_RATE,
};
use crate::hist;
use crate::report::{Percentiles, Report};

/// The eight figures of one scope, indexed by [`Metric`]; NaN where there is no sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Figures([f64; 8]);

impl Figures {
    pub(super) fn of(p: &Percentiles, completed: u64, failed: u64, seconds: f64) -> Self {
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
    pub(super) fn get(&self, m: Metric) -> f64 {
        self.0[m.index()]
    }
}

/// The change of `m` from `b` to `n`, NaN when undefined.
pub(super) fn change(m: Metric, b: f64, n: f64) -> f64 {
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
pub(super) struct Table {
    highest: Vec<u64>,
    median: Vec<u64>,
}

/// One timeline interval, its buckets as (index into [`Table`], count).
#[derive(Debug, Clone, Default)]
pub(super) struct Interval {
    pub(super) t_s: f64,
    buckets: Vec<(u32, u64)>,
    completed: u64,
    failed: u64,
    seconds: f64,
}

/// The decoded intervals of both runs over one table.
pub(super) struct Decoded {
    pub(super) table: Table,
    pub(super) runs: [Vec<Interval>; 2],
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
                let h =
                    hist::from_text(&row.response_hist).map_err(|error| CompareError::Hist {
                        run,
                        interval: row.interval,
                        error,
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

pub(super) fn decode(base: &Report, new: &Report) -> Result<Decoded, CompareError> {
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
pub(super) type Spread = [Option<(f64, f64)>; 8];

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

pub(super) fn opt(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// The rows of one scope from its exact figures and the spread of its changes.
pub(super) fn rows(
    opts: &Options,
    b: Figures,
    n: Figures,
    spread: &Spread,
    metrics: &[Metric],
) -> Vec<Row> {
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
pub(super) fn report_figures(r: &Report) -> Figures {
    // The headline leaves warm-up phases out: so does the time its throughput is over.
    let warm_s: f64 = r
        .phases
        .iter()
        .filter(|p| p.warmup)
        .map(|p| p.duration_s)
        .sum();
    Figures::of(
        &r.latency.response_time,
        r.totals.completed,
        r.totals.failed,
        (r.duration_s - warm_s).max(0.0),
    )
}

/// Which intervals of `run` fall in `[start, end)`; the first phase takes anything earlier,
/// the last anything later (late responses of the last sessions).
pub(super) fn window(
    run: &[Interval],
    start: f64,
    end: f64,
    first: bool,
    last: bool,
) -> Vec<&Interval> {
    const EPS: f64 = 1e-6;
    run.iter()
        .filter(|iv| (first || iv.t_s >= start - EPS) && (last || iv.t_s < end - EPS))
        .collect()
}

/// Noise of one scope: replicates of both runs over their intervals, and the spread.
pub(super) fn scope_noise(
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
/// Warm-up phases are left out, as they are of the headline figures.
pub(super) fn by_phase<'a>(r: &Report, run: &'a [Interval]) -> Vec<Vec<&'a Interval>> {
    if r.phases.is_empty() {
        return vec![run.iter().collect()];
    }
    let n = r.phases.len();
    let strata: Vec<Vec<&Interval>> = r
        .phases
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.warmup)
        .map(|(i, p)| window(run, p.start_s, p.start_s + p.duration_s, i == 0, i + 1 == n))
        .collect();
    if strata.is_empty() {
        return vec![run.iter().collect()];
    }
    strata
}
