//! Windowed thresholds (`window(30s).p99 < 50ms`): the worst window of that length, computed
//! exactly from the merged interval data of the threshold's scope — the histograms and
//! counters of every agent for each interval, added up, never a sample or a gauge. A window is
//! a whole number of report intervals; every window ending on a closed interval is judged once,
//! when that interval closes (every live agent has reported it), so a breach is seen live for
//! `abort_on_fail` and the worst window is the verdict at the end.
//!
//! A cumulative threshold hides a late collapse: 10 s of errors at the end of a 5-minute stair
//! is 3 % of the run but 100 % of its last window.

use std::collections::BTreeMap;

use crate::hist::SparseHist;
use crate::scenario::Scenario;
use crate::stats::SparseStats;
use crate::threshold::{
    LatencyStat, Metric, Op, Scope, Threshold, ThresholdResult, WindowSpan, ABORT_MIN_REQUESTS,
};

/// What one threshold's scope takes of an interval sample.
#[derive(Debug, Clone)]
enum Selector {
    /// These phases' samples whole (the run, a phase, a workload).
    Phases(Vec<bool>),
    /// These request steps' figures, in phases marked true (a step, a session type).
    Steps {
        steps: Vec<usize>,
        phases: Vec<bool>,
    },
}

/// One interval's figures in one scope.
#[derive(Debug, Clone, Default)]
struct Cell {
    completed: u64,
    failed: u64,
    /// Planned requests (for `throughput >= N% planned`).
    planned: u64,
    response: SparseHist,
    service: SparseHist,
}

impl Cell {
    fn add(&mut self, o: &Cell) {
        self.completed = self.completed.saturating_add(o.completed);
        self.failed = self.failed.saturating_add(o.failed);
        self.planned = self.planned.saturating_add(o.planned);
        self.response.add(&o.response);
        self.service.add(&o.service);
    }
}

/// A judged window: its value, verdict and intervals.
#[derive(Debug, Clone, Copy)]
struct Judged {
    value: f64,
    passed: bool,
    first: u64,
    last: u64,
}

/// One windowed threshold's state.
#[derive(Debug, Clone)]
struct Track {
    threshold: Threshold,
    /// Intervals per window.
    k: u64,
    sel: Selector,
    /// Interval figures still inside a window yet to be judged.
    cells: BTreeMap<u64, Cell>,
    /// The last interval a window ending there was judged for.
    judged_through: Option<u64>,
    /// The worst window so far (any window with something to measure).
    worst: Option<Judged>,
    /// The first failing window with at least [`ABORT_MIN_REQUESTS`] finished requests: what
    /// `abort_on_fail` acts on.
    breach: Option<Judged>,
}

/// Every windowed threshold of a run.
#[derive(Debug, Clone, Default)]
pub(crate) struct Windows {
    tracks: Vec<Track>,
    interval_s: f64,
    /// Intervals within the planned run (throughput windows past it would count the drain).
    planned_intervals: u64,
}

impl Windows {
    /// The windowed thresholds of `scenario`, for intervals of `interval_s`. Phases with
    /// `warmup: true` count only for `phase()` scopes. A scope that names nothing (refused
    /// by validation) takes nothing.
    pub(crate) fn new(scenario: &Scenario, interval_s: f64) -> Self {
        let thresholds = scenario.parsed_thresholds().unwrap_or_default();
        let phases = scenario.effective_phases();
        let names = crate::scenario::ScopeNames::of(scenario);
        let measured: Vec<bool> = phases.iter().map(|p| !p.warmup).collect();
        let views = scenario.workload_views();
        let interval_s = interval_s.max(1e-3);
        // The measured phases of the workloads `aimed` picks.
        let workloads_phases = |aimed: &dyn Fn(&crate::workload::View<'_>) -> bool| {
            let mut m = vec![false; phases.len()];
            for w in views.iter().filter(|w| aimed(w)) {
                for (i, slot) in m
                    .iter_mut()
                    .enumerate()
                    .skip(w.phase_base)
                    .take(w.phase_count())
                {
                    *slot = measured[i];
                }
            }
            Selector::Phases(m)
        };
        let tracks = thresholds
            .into_iter()
            .filter_map(|t| {
                let window_s = t.window_s?;
                let sel = match &t.scope {
                    Scope::Run => Selector::Phases(measured.clone()),
                    Scope::Phase(n) => {
                        Selector::Phases(names.phases.iter().map(|p| p == n).collect())
                    }
                    Scope::Workload(n) => workloads_phases(&|w| w.name == n),
                    // Steps with targets of their own: a target's requests are its steps'.
                    Scope::Target(n) if crate::workload::steps_have_targets(&views) => {
                        Selector::Steps {
                            steps: crate::workload::target_steps(&views, n),
                            phases: measured.clone(),
                        }
                    }
                    Scope::Target(n) => {
                        workloads_phases(&|w| w.target.is_some_and(|t| &t.scope_name() == n))
                    }
                    Scope::Step(n) => Selector::Steps {
                        steps: names
                            .steps
                            .iter()
                            .enumerate()
                            .filter(|(_, s)| *s == n)
                            .map(|(i, _)| i)
                            .collect(),
                        phases: measured.clone(),
                    },
                    Scope::Session(n) => Selector::Steps {
                        steps: views
                            .iter()
                            .flat_map(|w| &w.types)
                            .filter(|ty| ty.name == n)
                            .flat_map(|ty| ty.step_base..ty.step_base + ty.request_steps())
                            .collect(),
                        phases: measured.clone(),
                    },
                    // Refused when parsed: an endpoint scope has no window.
                    Scope::Endpoint(_) => return None,
                };
                let k = ((window_s as f64 / interval_s).round() as u64).max(1);
                Some(Track {
                    threshold: t,
                    k,
                    sel,
                    cells: BTreeMap::new(),
                    judged_through: None,
                    worst: None,
                    breach: None,
                })
            })
            .collect();
        Self {
            tracks,
            interval_s,
            planned_intervals: (scenario.duration().as_secs_f64() / interval_s).ceil() as u64,
        }
    }

    /// True when the run has no windowed threshold.
    pub(crate) fn is_empty(&self) -> bool {
        self.tracks.is_empty()
    }

    /// Adds one agent's sample of `phase` for interval `slot` (`planned`: its planned
    /// requests).
    pub(crate) fn add(&mut self, slot: u64, phase: u32, stats: &SparseStats, planned: u64) {
        let p = phase as usize;
        for t in &mut self.tracks {
            let cell = match &t.sel {
                Selector::Phases(m) if m.get(p).copied().unwrap_or(false) => Cell {
                    completed: stats.counters.requests_completed,
                    failed: stats.counters.requests_failed,
                    planned,
                    response: stats.response.clone(),
                    service: stats.service.clone(),
                },
                Selector::Steps { steps, phases } if phases.get(p).copied().unwrap_or(false) => {
                    let mut c = Cell::default();
                    for s in steps.iter().filter_map(|&i| stats.steps.get(i)) {
                        c.completed = c.completed.saturating_add(s.requests_completed);
                        c.failed = c.failed.saturating_add(s.requests_failed);
                        c.response.add(&s.response);
                        c.service.add(&s.service);
                    }
                    c
                }
                _ => continue,
            };
            // Late data for an interval already judged goes to the next one (as the
            // timeline does): the totals stay exact.
            let slot = t.judged_through.map_or(slot, |j| slot.max(j + 1));
            t.cells.entry(slot).or_default().add(&cell);
        }
    }

    /// Judges every window that ends on an interval up to `through`, now closed.
    pub(crate) fn close_through(&mut self, through: u64) {
        let planned_intervals = self.planned_intervals;
        let interval_s = self.interval_s;
        for t in &mut self.tracks {
            let from = t.judged_through.map_or(0, |j| j + 1);
            for end in from..=through {
                if end + 1 < t.k {
                    continue;
                }
                judge(t, end + 1 - t.k, end, interval_s, planned_intervals);
            }
            if through >= from {
                t.judged_through = Some(through);
            }
            // Cells no window yet to be judged needs.
            let keep_from = (through + 2).saturating_sub(t.k);
            t.cells = t.cells.split_off(&keep_from);
        }
    }

    /// At the end of the run: a threshold whose window is longer than the run is judged on
    /// everything it has, as one window.
    pub(crate) fn finish(&mut self, last: u64) {
        let (interval_s, planned) = (self.interval_s, self.planned_intervals);
        for t in &mut self.tracks {
            if t.worst.is_none() && !t.cells.is_empty() {
                let first = t.cells.keys().next().copied().unwrap_or(0);
                judge(t, first.min(last), last, interval_s, planned);
            }
        }
    }

    /// The verdict of each windowed threshold by its expression. `live`: a threshold passes
    /// unless a window with at least [`ABORT_MIN_REQUESTS`] finished requests failed; at the
    /// end, the worst window is the verdict.
    pub(crate) fn results(&self, live: bool) -> Vec<ThresholdResult> {
        self.tracks
            .iter()
            .map(|t| {
                let judged = if live {
                    t.breach.or(t.worst.map(|w| Judged { passed: true, ..w }))
                } else {
                    t.worst
                };
                let th = &t.threshold;
                match judged {
                    Some(j) => {
                        let span = WindowSpan {
                            from_s: j.first as f64 * self.interval_s,
                            to_s: (j.last + 1) as f64 * self.interval_s,
                        };
                        ThresholdResult {
                            expr: th.expr.clone(),
                            measured: j.value,
                            limit: th.limit,
                            passed: j.passed,
                            measured_text: format!(
                                "{} in the window {}s–{}s{}",
                                th.format(j.value),
                                span.from_s,
                                span.to_s,
                                if j.passed { " (the worst)" } else { "" }
                            ),
                            window: Some(span),
                        }
                    }
                    None => ThresholdResult {
                        expr: th.expr.clone(),
                        measured: f64::NAN,
                        limit: th.limit,
                        // Live, nothing judged yet is no breach; at the end, nothing
                        // measured never passes.
                        passed: live,
                        measured_text: "no finished requests".into(),
                        window: None,
                    },
                }
            })
            .collect()
    }
}

/// Judges the window of intervals `first..=last` of `t`, keeping the worst and the first
/// breach.
fn judge(t: &mut Track, first: u64, last: u64, interval_s: f64, planned_intervals: u64) {
    let mut c = Cell::default();
    for (_, cell) in t.cells.range(first..=last) {
        c.add(cell);
    }
    let th = &t.threshold;
    let samples = c.completed.saturating_add(c.failed);
    let span_s = (last + 1 - first) as f64 * interval_s;
    let value = match th.metric {
        _ if samples == 0 && !matches!(th.metric, Metric::Throughput) => return,
        Metric::Latency { service, stat } => {
            let h = if service { &c.service } else { &c.response };
            if h.is_empty() {
                return;
            }
            match stat {
                LatencyStat::Min => h.min() as f64,
                LatencyStat::Mean => h.mean(),
                LatencyStat::Max => h.max() as f64,
                LatencyStat::Quantile(q) => h.value_at_quantile(q) as f64,
            }
        }
        // Judged on the whole run only (refused with a window, never tracked live).
        Metric::Stream { .. } => return,
        Metric::ErrorRate => c.failed as f64 / samples as f64,
        // A rate is judged only on windows within the planned run: the drain after it
        // sends nothing new.
        Metric::Throughput if last >= planned_intervals => return,
        Metric::Throughput => c.completed as f64 / span_s,
        Metric::ThroughputOfPlanned if c.planned == 0 => return,
        Metric::ThroughputOfPlanned => c.completed as f64 / c.planned as f64,
    };
    let passed = th.op.holds(value, th.limit);
    let judged = Judged {
        value,
        passed,
        first,
        last,
    };
    let worse = |a: &Judged, b: &Judged| match th.op {
        Op::Lt | Op::Le => a.value > b.value,
        Op::Gt | Op::Ge => a.value < b.value,
    };
    if t.worst.as_ref().is_none_or(|w| worse(&judged, w)) {
        t.worst = Some(judged);
    }
    let enough = samples >= ABORT_MIN_REQUESTS || matches!(th.metric, Metric::Throughput);
    if !passed && enough && t.breach.is_none() {
        t.breach = Some(judged);
    }
}

#[cfg(test)]
mod tests;
