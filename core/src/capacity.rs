//! Capacity search (`stampede capacity`): the stair-step plan, the verdict on each step, the
//! bisection around the knee, and one report that holds every step as a phase.
//!
//! Each step is one run of the scenario's session at one constant arrival rate. A step
//! *holds* when every SLO passes on its merged data (exactly, at the end of the step, or live
//! through `abort_on_fail`), the generator kept to its schedule, and the target kept up:
//! the requests completed within the step's duration are at least `min_achieved` of those
//! planned. Requests still in flight when the step ends (about rate × latency of them) do not
//! count as achieved, so `min_achieved` leaves room for them (default 95 %).
//!
//! The stair runs `start, start + step, …` up to `max` (or `max_steps` steps); at the first
//! step that fails, a bisection between the last rate that held and the first that failed
//! narrows the knee down in `bisect` more steps.
//!
//! The same search walks connections instead of a rate ([`Axis::Connections`]): each step is
//! a closed load ramped to N connections, and the answer is the largest concurrency that
//! meets the SLOs. A step whose generator was the limit ([`generator`]) is never a knee: the
//! search stops there.

use std::collections::BTreeMap;

mod findings;
pub mod generator;
pub mod targets;
pub use findings::{findings, per_step_targets, TargetSide};
pub use generator::{GeneratorCause, GeneratorLimit};

use crate::hist;
use crate::report::{
    AgentReport, Generator, Latency, Percentiles, PhaseReport, Report, RunOutcome, SessionTotals,
    StepReport, TimelineRow, Totals,
};
use crate::threshold::ThresholdResult;

/// What a search varies from step to step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Axis {
    /// The arrival rate (sessions per second) of an open load.
    #[default]
    Rate,
    /// The connections of a closed load: what gateways, WebSocket hubs and connection pools
    /// run out of.
    Connections,
}

impl Axis {
    /// A level as the search keeps it: rates to 0.1/s (whole above 20/s), connections whole.
    pub fn round(self, level: f64) -> f64 {
        match self {
            Self::Rate => round_rate(level),
            Self::Connections => level.round().max(1.0),
        }
    }

    /// A level with its unit: `120/s`, `40 conn`.
    pub fn fmt(self, level: f64) -> String {
        match self {
            Self::Rate => format!("{}/s", fmt_rate(level)),
            Self::Connections => format!("{level:.0} conn"),
        }
    }
}

/// A search's arguments that cannot describe a search, naming the flag.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SearchSpecError {
    /// A level or increment that is zero, negative or not a number.
    #[error("--{0}: must be > 0")]
    NotPositive(&'static str),
    /// Connections come whole.
    #[error("--{0}: connections are a whole number, at least 1")]
    NotWhole(&'static str),
    /// Neither the first level and its increment nor the highest level were given.
    #[error("give --start N --step S, or --max N")]
    NoLevels,
    /// The highest level is below the first.
    #[error("--max {max} is below --start {start}")]
    MaxBelowStart {
        /// The `--max` given.
        max: f64,
        /// The `--start` given, or its default.
        start: f64,
    },
    /// `--max-steps 0`: a stair without a step.
    #[error("--max-steps: must be >= 1")]
    NoSteps,
    /// A least achieved share outside (0, 100 %].
    #[error("--min-achieved: must be a share between 0 and 100%")]
    MinAchieved,
}

/// How the search walks the levels (rates, or connections).
#[derive(Debug, Clone, PartialEq)]
pub struct SearchSpec {
    /// What the levels are.
    pub axis: Axis,
    /// First stair level: arrivals per second, or connections.
    pub start: f64,
    /// Stair increment.
    pub step: f64,
    /// Highest rate tried; `None` stops after `max_steps` stair steps.
    pub max: Option<f64>,
    /// Most stair steps; with `max`, the stair also ends at the last level not above it.
    pub max_steps: u32,
    /// Bisection steps after the stair found a failing rate.
    pub bisect: u32,
    /// Least share of the planned requests that must complete within a step.
    pub min_achieved: f64,
}

impl SearchSpec {
    /// From the command line: `--start R --step S`, `--max R` (start and step default to a
    /// tenth of it), or both. A rate search; see [`SearchSpec::with_axis`].
    pub fn new(
        start: Option<f64>,
        step: Option<f64>,
        max: Option<f64>,
        max_steps: u32,
        bisect: u32,
        min_achieved: f64,
    ) -> Result<Self, SearchSpecError> {
        let positive = |name: &'static str, v: Option<f64>| match v {
            Some(x) if !(x.is_finite() && x > 0.0) => Err(SearchSpecError::NotPositive(name)),
            _ => Ok(v),
        };
        let (start, step, max) = (
            positive("start", start)?,
            positive("step", step)?,
            positive("max", max)?,
        );
        let (start, step) = match (start, step, max) {
            (Some(a), Some(s), _) => (a, s),
            (a, s, Some(m)) => (a.unwrap_or(m / 10.0), s.unwrap_or(m / 10.0)),
            (Some(a), None, None) => (a, a),
            (None, _, None) => return Err(SearchSpecError::NoLevels),
        };
        if let Some(m) = max {
            if m < start {
                return Err(SearchSpecError::MaxBelowStart { max: m, start });
            }
        }
        if max_steps == 0 {
            return Err(SearchSpecError::NoSteps);
        }
        if !(min_achieved > 0.0 && min_achieved <= 1.0) {
            return Err(SearchSpecError::MinAchieved);
        }
        Ok(Self {
            axis: Axis::Rate,
            start,
            step,
            max,
            max_steps,
            bisect,
            min_achieved,
        })
    }

    /// The same search over `axis`. Connections must be whole: a start, step or max of
    /// connections with a fraction is refused rather than rounded behind the user's back.
    pub fn with_axis(mut self, axis: Axis) -> Result<Self, SearchSpecError> {
        if axis == Axis::Connections {
            let whole = |v: f64| v >= 1.0 && v.fract() == 0.0;
            for (name, v) in [
                ("start", Some(self.start)),
                ("step", Some(self.step)),
                ("max", self.max),
            ] {
                if v.is_some_and(|v| !whole(v)) {
                    return Err(SearchSpecError::NotWhole(name));
                }
            }
        }
        self.axis = axis;
        Ok(self)
    }

    /// The stair's levels, in order.
    pub fn stair(&self) -> Vec<f64> {
        let mut rates = Vec::new();
        for k in 0..self.max_steps {
            let r = self.axis.round(self.start + f64::from(k) * self.step);
            if self.max.is_some_and(|m| r > m + 1e-9) {
                break;
            }
            rates.push(r);
        }
        rates
    }
}

/// Rates are kept to 0.1/s (and whole numbers above 20/s), so names and tables stay legible.
pub fn round_rate(r: f64) -> f64 {
    if r >= 20.0 {
        r.round()
    } else {
        (r * 10.0).round() / 10.0
    }
}

/// Whether a step came from the stair or from the bisection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// A level of the stair, `start + k × step`.
    Stair,
    /// Halfway between the highest level that held and the lowest that failed.
    Bisect,
}

/// The verdict on one step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepVerdict {
    /// The phase name in the combined report, e.g. `s3 120/s` or `s3 40 conn`.
    pub name: String,
    /// Where the step came from.
    pub kind: StepKind,
    /// The step's level: arrivals per second, or connections.
    pub level: f64,
    /// Requests per second planned (rate × requests per session).
    pub planned_rps: f64,
    /// Requests completed within the step's duration, per second.
    pub achieved_rps: f64,
    /// Completed requests of the step's run (the headline, warm-up left out).
    pub completed: u64,
    /// Failed requests of the step's run.
    pub failed: u64,
    /// Median response time of the step's run, µs.
    pub p50_us: u64,
    /// 99th percentile of the response time of the step's run, µs.
    pub p99_us: u64,
    /// The step met every SLO and kept up (achieved its share of the planned rate, its run
    /// completed, its generator was not the limit): `reason` is `None`.
    pub holds: bool,
    /// Why the step failed: the SLO and its measured value, the achieved rate, or the
    /// generator being the limit.
    pub reason: Option<String>,
    /// The generator, not the target, was the limit of this step: it failed, and it is not
    /// the target's knee. The search stops at it.
    pub generator: Option<GeneratorLimit>,
}

/// What a step's verdict needs from the search around it, to size the agents when the
/// generator was the limit.
#[derive(Debug, Clone, Copy)]
pub struct StepContext<'a> {
    /// What the levels are (the search's axis).
    pub axis: Axis,
    /// The report of the last step that held, with its achieved requests per second and its
    /// level: its agent CPU per request sizes the agents.
    pub last_good: Option<(&'a Report, f64, f64)>,
    /// The highest level the search would try.
    pub top: f64,
    /// The agents the step ran on.
    pub agents: u32,
}

/// Judges one step's report against the SLOs (already evaluated into `report.thresholds`,
/// since each step's scenario carries them) and the keep-up rules. A step whose generator
/// was the limit fails on that alone (its SLO figures are the generator's), with the agents
/// the search would need.
pub fn judge(
    name: &str,
    kind: StepKind,
    level: f64,
    duration_s: f64,
    report: &Report,
    min_achieved: f64,
    ctx: StepContext<'_>,
) -> StepVerdict {
    let requests_per_session = if report.totals.sessions.planned > 0 {
        report.totals.planned as f64 / report.totals.sessions.planned as f64
    } else {
        1.0
    };
    // A closed load has no plan: it does what the target lets it.
    let planned_rps = match ctx.axis {
        Axis::Rate => level * requests_per_session,
        Axis::Connections => 0.0,
    };
    // Completed within the step: the timeline rows that start before its end (a report
    // narrowed to one workload has no timeline of its own: all its completed requests count).
    let in_window: u64 = if report.timeline.is_empty() {
        report.totals.completed
    } else {
        report
            .timeline
            .iter()
            .filter(|row| row.t_s < duration_s - 1e-9)
            .map(|row| row.completed)
            .sum()
    };
    let achieved_rps = in_window as f64 / duration_s.max(1e-9);
    let planned = report.totals.planned;
    let mut reasons = Vec::new();
    if let Some(a) = &report.threshold_abort {
        reasons.push(format!(
            "`{}` measured {} (live, at {:.1} s)",
            a.expr, a.measured_text, a.at_s
        ));
    }
    for t in report.thresholds.iter().filter(|t| !t.passed) {
        if report
            .threshold_abort
            .as_ref()
            .is_none_or(|a| a.expr != t.expr)
        {
            reasons.push(format!("`{}` measured {}", t.expr, t.measured_text));
        }
    }
    // A closed load's "planned" is what it started: there is no schedule to keep up with.
    if ctx.axis == Axis::Rate && planned > 0 && (in_window as f64) < min_achieved * planned as f64 {
        reasons.push(format!(
            "achieved {achieved_rps:.1}/s of planned {planned_rps:.1}/s ({:.1}% within the step)",
            in_window as f64 * 100.0 / planned as f64
        ));
    }
    let generator = generator::limit(report, ctx.last_good, ctx.top, ctx.agents);
    if let Some(g) = &generator {
        // The SLO figures of this step are the generator's: they are not a reason.
        reasons = vec![format!(
            "the generator was the limit, not the target: {}",
            g.cause
        )];
    }
    if report.outcome != RunOutcome::Succeeded && report.threshold_abort.is_none() {
        reasons.push(format!(
            "the run did not complete: {}",
            report.message.clone().unwrap_or_default()
        ));
    }
    StepVerdict {
        name: name.to_string(),
        kind,
        level,
        planned_rps,
        achieved_rps,
        completed: report.totals.completed,
        failed: report.totals.failed,
        p50_us: report.latency.response_time.p50_us,
        p99_us: report.latency.response_time.p99_us,
        holds: reasons.is_empty(),
        reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
        generator,
    }
}

/// `report` narrowed to workload `name` (a search that varies one workload while the others
/// hold): its totals and latencies are the workload's; the generator's verdict, the
/// thresholds and the outcome stay the run's. The timeline is left out (it is the run's, all
/// workloads together), so the workload's completed requests count whole. `None` when the
/// report has no such workload.
pub fn narrow_to_workload(report: &Report, name: &str) -> Option<Report> {
    let w = report.workloads.iter().find(|w| w.figures.name == name)?;
    let f = &w.figures;
    let mut r = report.clone();
    r.timeline.clear();
    r.totals.planned = f.planned;
    r.totals.started = f.started;
    r.totals.completed = f.completed;
    r.totals.failed = f.failed;
    r.totals.interrupted = f.interrupted;
    r.totals.errors = f.errors.clone();
    r.totals.sessions = w.sessions.clone();
    r.latency = f.latency.clone();
    Some(r)
}

/// The search's state: feed it verdicts, ask it for the next rate.
#[derive(Debug, Clone)]
pub struct Search {
    /// What the search walks.
    pub spec: SearchSpec,
    stair: Vec<f64>,
    /// Every step run so far, in order.
    pub verdicts: Vec<StepVerdict>,
    bisected: u32,
    stair_done: bool,
}

impl Search {
    /// A search that has run nothing yet.
    pub fn new(spec: SearchSpec) -> Self {
        Self {
            stair: spec.stair(),
            spec,
            verdicts: Vec::new(),
            bisected: 0,
            stair_done: false,
        }
    }

    /// The next step to run (name, kind, level), or `None` when the search is over: the
    /// stair and the bisection are done, or the generator was the limit.
    pub fn next_step(&mut self) -> Option<(String, StepKind, f64)> {
        if self.generator_stop().is_some() {
            return None;
        }
        let axis = self.spec.axis;
        if !self.stair_done {
            let k = self
                .verdicts
                .iter()
                .filter(|v| v.kind == StepKind::Stair)
                .count();
            let failed = self.verdicts.iter().any(|v| !v.holds);
            if !failed {
                if let Some(&r) = self.stair.get(k) {
                    return Some((format!("s{} {}", k + 1, axis.fmt(r)), StepKind::Stair, r));
                }
            }
            self.stair_done = true;
        }
        if self.bisected >= self.spec.bisect {
            return None;
        }
        let hi = self.first_failing()?.level;
        let lo = self.sustainable().map_or(0.0, |v| v.level);
        let mid = axis.round((lo + hi) / 2.0);
        // Stop when the interval is too narrow to split (1 % of the rate, or the rounding).
        if mid <= lo || mid >= hi || hi - lo <= 0.01 * hi || lo == 0.0 {
            return None;
        }
        self.bisected += 1;
        Some((
            format!("b{} {}", self.bisected, axis.fmt(mid)),
            StepKind::Bisect,
            mid,
        ))
    }

    /// The highest level the search would try: `max`, or the top of the stair.
    pub fn top(&self) -> f64 {
        self.spec
            .max
            .or_else(|| self.stair.last().copied())
            .unwrap_or(self.spec.start)
    }

    /// The step at which the generator was the limit (and the search stopped), if any.
    pub fn generator_stop(&self) -> Option<&StepVerdict> {
        self.verdicts.iter().find(|v| v.generator.is_some())
    }

    /// Adds the verdict of the step [`Search::next_step`] gave; the next step depends on it.
    pub fn record(&mut self, v: StepVerdict) {
        self.verdicts.push(v);
    }

    /// The highest level that held and is below every failing level (the generator's too).
    pub fn sustainable(&self) -> Option<&StepVerdict> {
        let cap = self
            .verdicts
            .iter()
            .filter(|v| !v.holds)
            .map(|v| v.level)
            .fold(f64::INFINITY, f64::min);
        self.verdicts
            .iter()
            .filter(|v| v.holds && v.level < cap)
            .max_by(|a, b| a.level.total_cmp(&b.level))
    }

    /// The lowest level at which the target failed: a step the generator limited is not one.
    pub fn first_failing(&self) -> Option<&StepVerdict> {
        self.verdicts
            .iter()
            .filter(|v| !v.holds && v.generator.is_none())
            .min_by(|a, b| a.level.total_cmp(&b.level))
    }
}

/// `120`, `7.5`.
pub fn fmt_rate(r: f64) -> String {
    if (r - r.round()).abs() < 1e-9 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// Merges the reports of the search's steps (each a one-phase run) into one report: each
/// step is a phase, placed one after the other on the timeline. Totals, errors and the
/// overall latencies are exact (the latencies re-merge every interval histogram); the
/// per-step-name (session step) latencies and the generator lag are the worst over the runs,
/// an upper bound, since the reports do not carry those histograms per interval.
pub fn merge_steps(name: &str, parts: &[(String, Report)]) -> Result<Report, hist::HistError> {
    let mut out = Report {
        scenario: name.to_string(),
        hist_spec: hist::SPEC,
        ..Report::default()
    };
    let Some((_, first)) = parts.first() else {
        return Ok(out);
    };
    out.run_id = first.run_id.clone();
    out.started_at_unix_ms = first.started_at_unix_ms;
    out.arrival = first.arrival.clone();
    out.seed = first.seed;
    let mut response = hist::new_histogram();
    let mut service = hist::new_histogram();
    let mut offset = 0.0_f64;
    let mut interval = 0u64;
    let mut steps: BTreeMap<String, StepReport> = BTreeMap::new();
    let mut step_order: Vec<String> = Vec::new();
    let mut agents: Vec<AgentReport> = Vec::new();
    let mut worst_lag: Option<Percentiles> = None;
    for (phase_name, r) in parts {
        for p in &r.phases {
            out.phases.push(PhaseReport {
                index: out.phases.len() as u32,
                // A step of several workloads keeps each one's phase apart.
                name: if r.phases.len() > 1 {
                    format!("{phase_name}/{}", p.name)
                } else {
                    phase_name.clone()
                },
                start_s: offset + p.start_s,
                ..p.clone()
            });
        }
        for row in &r.timeline {
            for (text, h) in [
                (&row.response_hist, &mut response),
                (&row.service_hist, &mut service),
            ] {
                if !text.is_empty() {
                    hist::merge(h, &hist::from_text(text)?)?;
                }
            }
            out.timeline.push(TimelineRow {
                interval,
                t_s: offset + row.t_s,
                ..row.clone()
            });
            interval += 1;
        }
        add_totals(&mut out.totals, &r.totals);
        for s in &r.steps {
            let e = steps.entry(s.name.clone()).or_insert_with(|| {
                step_order.push(s.name.clone());
                StepReport {
                    name: s.name.clone(),
                    ..StepReport::default()
                }
            });
            e.completed = e.completed.saturating_add(s.completed);
            e.failed = e.failed.saturating_add(s.failed);
            e.interrupted = e.interrupted.saturating_add(s.interrupted);
            add_errors(&mut e.errors, &s.errors);
            e.latency = worst_latency(&e.latency, &s.latency);
        }
        for a in &r.agents {
            match agents.iter_mut().find(|x| x.id == a.id) {
                Some(x) => {
                    x.planned = x.planned.saturating_add(a.planned);
                    x.started = x.started.saturating_add(a.started);
                    x.completed = x.completed.saturating_add(a.completed);
                    x.failed = x.failed.saturating_add(a.failed);
                    x.interrupted = x.interrupted.saturating_add(a.interrupted);
                    x.lost |= a.lost;
                    x.clock_offset_us = a.clock_offset_us;
                    x.lag_p99_us = x.lag_p99_us.max(a.lag_p99_us);
                    x.lag_max_us = x.lag_max_us.max(a.lag_max_us);
                    x.late_arrivals = x.late_arrivals.saturating_add(a.late_arrivals);
                }
                None => agents.push(a.clone()),
            }
        }
        let g = &r.generator;
        out.generator.late_arrivals = out.generator.late_arrivals.saturating_add(g.late_arrivals);
        out.generator.dropped_arrivals = out
            .generator
            .dropped_arrivals
            .saturating_add(g.dropped_arrivals);
        out.generator.out_of_range = out.generator.out_of_range.saturating_add(g.out_of_range);
        out.generator.behind_schedule |= g.behind_schedule;
        out.generator
            .warnings
            .extend(g.warnings.iter().map(|w| format!("{phase_name}: {w}")));
        if worst_lag.as_ref().is_none_or(|l| g.lag.p99_us > l.p99_us) {
            worst_lag = Some(g.lag.clone());
        }
        out.thresholds
            .extend(r.thresholds.iter().map(|t| ThresholdResult {
                expr: format!("{phase_name}: {}", t.expr),
                ..t.clone()
            }));
        out.planned_duration_s += r.planned_duration_s;
        // The next step starts on the interval after this one's last row: the wait for the
        // agents' final data, or a step cut short by its SLOs, would otherwise show as a
        // stretch of zero throughput that no load ever had.
        let row_end = r.timeline.last().map_or(0.0, |row| row.t_s + 1.0);
        offset += if r.timeline.is_empty() {
            r.duration_s.max(r.planned_duration_s).ceil()
        } else {
            row_end.ceil()
        };
    }
    out.duration_s = offset;
    let t = &mut out.totals;
    let finished = t.completed.saturating_add(t.failed);
    t.error_count = t.errors.values().sum();
    t.error_rate = if finished > 0 {
        t.failed as f64 / finished as f64
    } else {
        0.0
    };
    t.throughput_rps = t.completed as f64 / offset.max(1e-9);
    t.achieved_ratio = if t.planned > 0 {
        t.completed as f64 / t.planned as f64
    } else {
        0.0
    };
    out.latency = Latency {
        response_time: Percentiles::of(&response),
        service_time: Percentiles::of(&service),
    };
    out.steps = step_order
        .into_iter()
        .filter_map(|n| steps.remove(&n))
        .collect();
    out.agents = agents;
    out.generator = Generator {
        lag: worst_lag.unwrap_or_default(),
        ..out.generator
    };
    Ok(out)
}

fn add_errors(dst: &mut BTreeMap<String, u64>, src: &BTreeMap<String, u64>) {
    for (k, v) in src {
        let e = dst.entry(k.clone()).or_default();
        *e = e.saturating_add(*v);
    }
}

fn add_totals(dst: &mut Totals, src: &Totals) {
    dst.planned = dst.planned.saturating_add(src.planned);
    dst.started = dst.started.saturating_add(src.started);
    dst.completed = dst.completed.saturating_add(src.completed);
    dst.failed = dst.failed.saturating_add(src.failed);
    dst.interrupted = dst.interrupted.saturating_add(src.interrupted);
    add_errors(&mut dst.errors, &src.errors);
    dst.bytes_sent = dst.bytes_sent.saturating_add(src.bytes_sent);
    dst.bytes_received = dst.bytes_received.saturating_add(src.bytes_received);
    let (d, s) = (&mut dst.sessions, &src.sessions);
    *d = SessionTotals {
        planned: d.planned.saturating_add(s.planned),
        started: d.started.saturating_add(s.started),
        completed: d.completed.saturating_add(s.completed),
        failed: d.failed.saturating_add(s.failed),
        interrupted: d.interrupted.saturating_add(s.interrupted),
        dropped: d.dropped.saturating_add(s.dropped),
        started_late: d.started_late.saturating_add(s.started_late),
    };
}

fn worst(a: &Percentiles, b: &Percentiles) -> Percentiles {
    if a.count == 0 {
        return b.clone();
    }
    if b.count == 0 {
        return a.clone();
    }
    let n = a.count + b.count;
    Percentiles {
        count: n,
        min_us: a.min_us.min(b.min_us),
        mean_us: (a.mean_us * a.count as f64 + b.mean_us * b.count as f64) / n as f64,
        stdev_us: a.stdev_us.max(b.stdev_us),
        p50_us: a.p50_us.max(b.p50_us),
        p75_us: a.p75_us.max(b.p75_us),
        p90_us: a.p90_us.max(b.p90_us),
        p95_us: a.p95_us.max(b.p95_us),
        p99_us: a.p99_us.max(b.p99_us),
        p999_us: a.p999_us.max(b.p999_us),
        p9999_us: a.p9999_us.max(b.p9999_us),
        max_us: a.max_us.max(b.max_us),
    }
}

fn worst_latency(a: &Latency, b: &Latency) -> Latency {
    Latency {
        response_time: worst(&a.response_time, &b.response_time),
        service_time: worst(&a.service_time, &b.service_time),
    }
}

#[cfg(test)]
mod tests;
