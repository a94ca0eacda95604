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

use std::collections::BTreeMap;

use base64::Engine as _;

mod findings;
pub use findings::{findings, TargetSide};

use crate::hist;
use crate::report::{
    AgentReport, Generator, Latency, Percentiles, PhaseReport, Report, RunOutcome, SessionTotals,
    StepReport, TimelineRow, Totals,
};
use crate::threshold::ThresholdResult;

/// How the search walks the rates.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchSpec {
    /// First stair rate, arrivals per second.
    pub start: f64,
    /// Stair increment.
    pub step: f64,
    /// Highest rate tried; `None` stops after `max_steps` stair steps.
    pub max: Option<f64>,
    pub max_steps: u32,
    /// Bisection steps after the stair found a failing rate.
    pub bisect: u32,
    /// Least share of the planned requests that must complete within a step.
    pub min_achieved: f64,
}

/// Why the search's flags cannot make a stair; each message names the flag.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SearchSpecError {
    /// A rate that is zero, negative or not a number.
    #[error("--{flag}: must be > 0")]
    NotPositive { flag: &'static str },
    /// Neither a start nor a maximum: nothing to build the stair from.
    #[error("give --start R --step S, or --max R")]
    NoRates,
    /// The stair would stop before its first step.
    #[error("--max {max} is below --start {start}")]
    MaxBelowStart { max: f64, start: f64 },
    /// No step at all to run.
    #[error("--max-steps: must be >= 1")]
    NoSteps,
    /// A share outside (0, 100 %].
    #[error("--min-achieved: must be a share between 0 and 100%")]
    MinAchieved,
}

impl SearchSpec {
    /// From the command line: `--start R --step S`, `--max R` (start and step default to a
    /// tenth of it), or both.
    pub fn new(
        start: Option<f64>,
        step: Option<f64>,
        max: Option<f64>,
        max_steps: u32,
        bisect: u32,
        min_achieved: f64,
    ) -> Result<Self, SearchSpecError> {
        let positive = |flag: &'static str, v: Option<f64>| match v {
            Some(x) if !(x.is_finite() && x > 0.0) => Err(SearchSpecError::NotPositive { flag }),
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
            (None, _, None) => return Err(SearchSpecError::NoRates),
        };
        if let Some(max) = max {
            if max < start {
                return Err(SearchSpecError::MaxBelowStart { max, start });
            }
        }
        if max_steps == 0 {
            return Err(SearchSpecError::NoSteps);
        }
        if !(min_achieved > 0.0 && min_achieved <= 1.0) {
            return Err(SearchSpecError::MinAchieved);
        }
        Ok(Self {
            start,
            step,
            max,
            max_steps,
            bisect,
            min_achieved,
        })
    }

    /// The stair's rates, in order.
    pub fn stair(&self) -> Vec<f64> {
        let mut rates = Vec::new();
        for k in 0..self.max_steps {
            let r = round_rate(self.start + f64::from(k) * self.step);
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
    Stair,
    Bisect,
}

/// The verdict on one step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepVerdict {
    /// The phase name in the combined report, e.g. `s3 120/s`.
    pub name: String,
    pub kind: StepKind,
    /// Arrivals per second.
    pub rate: f64,
    /// Requests per second planned (rate × requests per session).
    pub planned_rps: f64,
    /// Requests completed within the step's duration, per second.
    pub achieved_rps: f64,
    pub completed: u64,
    pub failed: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub holds: bool,
    /// Why the step failed: the SLO and its measured value, the achieved rate, or the
    /// generator falling behind.
    pub reason: Option<String>,
}

/// Judges one step's report against the SLOs (already evaluated into `report.thresholds`,
/// since each step's scenario carries them) and the keep-up rules.
pub fn judge(
    name: &str,
    kind: StepKind,
    rate: f64,
    duration_s: f64,
    report: &Report,
    min_achieved: f64,
) -> StepVerdict {
    let requests_per_session = if report.totals.sessions.planned > 0 {
        report.totals.planned as f64 / report.totals.sessions.planned as f64
    } else {
        1.0
    };
    let planned_rps = rate * requests_per_session;
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
    if planned > 0 && (in_window as f64) < min_achieved * planned as f64 {
        reasons.push(format!(
            "achieved {achieved_rps:.1}/s of planned {planned_rps:.1}/s ({:.1}% within the step)",
            in_window as f64 * 100.0 / planned as f64
        ));
    }
    // The report flags any lateness (over 0.1% of sessions); a step only blames the generator
    // when over 5% of its sessions started late, or arrivals were dropped, so a scheduling
    // hiccup on the agent's CPU does not turn into "add agents". A generator that is really the
    // limit is late for most sessions.
    let g = &report.generator;
    let started = report.totals.sessions.started.max(1);
    if g.dropped_arrivals > 0 || g.late_arrivals * 20 > started {
        reasons.push(format!(
            "the generator fell behind its schedule ({} late, {} dropped): the agents are the limit, not the target — add agents",
            g.late_arrivals, g.dropped_arrivals
        ));
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
        rate,
        planned_rps,
        achieved_rps,
        completed: report.totals.completed,
        failed: report.totals.failed,
        p50_us: report.latency.response_time.p50_us,
        p99_us: report.latency.response_time.p99_us,
        holds: reasons.is_empty(),
        reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
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
    pub spec: SearchSpec,
    stair: Vec<f64>,
    pub verdicts: Vec<StepVerdict>,
    bisected: u32,
    stair_done: bool,
}

impl Search {
    pub fn new(spec: SearchSpec) -> Self {
        Self {
            stair: spec.stair(),
            spec,
            verdicts: Vec::new(),
            bisected: 0,
            stair_done: false,
        }
    }

    /// The next step to run (name, kind, rate), or `None` when the search is over.
    pub fn next_step(&mut self) -> Option<(String, StepKind, f64)> {
        if !self.stair_done {
            let k = self
                .verdicts
                .iter()
                .filter(|v| v.kind == StepKind::Stair)
                .count();
            let failed = self.verdicts.iter().any(|v| !v.holds);
            if !failed {
                if let Some(&r) = self.stair.get(k) {
                    return Some((format!("s{} {}/s", k + 1, fmt_rate(r)), StepKind::Stair, r));
                }
            }
            self.stair_done = true;
        }
        if self.bisected >= self.spec.bisect {
            return None;
        }
        let hi = self.first_failing()?.rate;
        let lo = self.sustainable().map_or(0.0, |v| v.rate);
        let mid = round_rate((lo + hi) / 2.0);
        // Stop when the interval is too narrow to split (1 % of the rate, or the rounding).
        if mid <= lo || mid >= hi || hi - lo <= 0.01 * hi || lo == 0.0 {
            return None;
        }
        self.bisected += 1;
        Some((
            format!("b{} {}/s", self.bisected, fmt_rate(mid)),
            StepKind::Bisect,
            mid,
        ))
    }

    pub fn record(&mut self, v: StepVerdict) {
        self.verdicts.push(v);
    }

    /// The highest rate that held and is below every failing rate.
    pub fn sustainable(&self) -> Option<&StepVerdict> {
        let cap = self.first_failing().map_or(f64::INFINITY, |f| f.rate);
        self.verdicts
            .iter()
            .filter(|v| v.holds && v.rate < cap)
            .max_by(|a, b| a.rate.total_cmp(&b.rate))
    }

    /// The lowest rate that failed.
    pub fn first_failing(&self) -> Option<&StepVerdict> {
        self.verdicts
            .iter()
            .filter(|v| !v.holds)
            .min_by(|a, b| a.rate.total_cmp(&b.rate))
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
    let b64 = base64::engine::general_purpose::STANDARD;
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
                    let bytes = b64
                        .decode(text)
                        .map_err(|e| hist::HistError::Decode(format!("base64: {e}")))?;
                    hist::merge(h, &hist::decode(&bytes)?)?;
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
mod tests {
    use super::*;

    fn verdict(name: &str, kind: StepKind, rate: f64, holds: bool) -> StepVerdict {
        StepVerdict {
            name: name.into(),
            kind,
            rate,
            planned_rps: rate,
            achieved_rps: rate,
            completed: 0,
            failed: 0,
            p50_us: 0,
            p99_us: 0,
            holds,
            reason: (!holds).then(|| "x".into()),
        }
    }

    /// Drives a search against a system whose true capacity is `knee`.
    fn drive(spec: SearchSpec, knee: f64) -> (Search, Vec<f64>) {
        let mut s = Search::new(spec);
        let mut tried = Vec::new();
        while let Some((name, kind, rate)) = s.next_step() {
            tried.push(rate);
            s.record(verdict(&name, kind, rate, rate <= knee));
            assert!(tried.len() < 100);
        }
        (s, tried)
    }

    #[test]
    fn spec_from_arguments() {
        let s = SearchSpec::new(None, None, Some(200.0), 20, 3, 0.95).unwrap();
        assert_eq!((s.start, s.step), (20.0, 20.0));
        assert_eq!(s.stair().len(), 10);
        assert_eq!(s.stair().last(), Some(&200.0));
        let s = SearchSpec::new(Some(40.0), Some(20.0), None, 5, 3, 0.95).unwrap();
        assert_eq!(s.stair(), vec![40.0, 60.0, 80.0, 100.0, 120.0]);
        assert!(SearchSpec::new(None, Some(5.0), None, 5, 3, 0.95).is_err());
        assert!(SearchSpec::new(Some(-1.0), Some(5.0), None, 5, 3, 0.95).is_err());
        assert!(SearchSpec::new(Some(50.0), Some(5.0), Some(10.0), 5, 3, 0.95).is_err());
        assert!(SearchSpec::new(Some(5.0), Some(5.0), None, 5, 3, 0.0).is_err());
    }

    #[test]
    fn stair_then_bisection_finds_the_knee() {
        let spec = SearchSpec::new(Some(40.0), Some(20.0), Some(200.0), 20, 3, 0.95).unwrap();
        let (s, tried) = drive(spec, 93.0);
        // Stair up to the first failure (100), then 3 bisections between 80 and 100.
        assert_eq!(tried, vec![40.0, 60.0, 80.0, 100.0, 90.0, 95.0, 93.0]);
        assert_eq!(s.sustainable().unwrap().rate, 93.0);
        assert_eq!(s.first_failing().unwrap().rate, 95.0);
    }

    #[test]
    fn no_failure_up_to_max_and_failure_at_the_first_step() {
        let spec = SearchSpec::new(Some(10.0), Some(10.0), Some(30.0), 20, 3, 0.95).unwrap();
        let (s, tried) = drive(spec.clone(), 1000.0);
        assert_eq!(tried, vec![10.0, 20.0, 30.0]);
        assert_eq!(s.sustainable().unwrap().rate, 30.0);
        assert!(s.first_failing().is_none());
        let (s, tried) = drive(spec, 1.0);
        assert_eq!(tried, vec![10.0]);
        assert!(s.sustainable().is_none());
        assert_eq!(s.first_failing().unwrap().rate, 10.0);
    }

    fn step_report(rate: f64, completed_per_s: &[u64], p99_ok: bool) -> Report {
        let mut h = hist::new_histogram();
        hist::record(&mut h, 1000);
        let enc = base64::engine::general_purpose::STANDARD.encode(hist::encode(&h).unwrap());
        Report {
            run_id: format!("run-{rate}"),
            planned_duration_s: completed_per_s.len() as f64,
            duration_s: completed_per_s.len() as f64 + 0.2,
            totals: Totals {
                planned: (rate * completed_per_s.len() as f64) as u64,
                completed: completed_per_s.iter().sum(),
                sessions: SessionTotals {
                    planned: (rate * completed_per_s.len() as f64) as u64,
                    ..SessionTotals::default()
                },
                ..Totals::default()
            },
            phases: vec![PhaseReport {
                name: "phase-1".into(),
                completed: completed_per_s.iter().sum(),
                ..PhaseReport::default()
            }],
            thresholds: vec![ThresholdResult {
                expr: "p99 < 50ms".into(),
                measured: if p99_ok { 10_000.0 } else { 90_000.0 },
                limit: 50_000.0,
                passed: p99_ok,
                measured_text: if p99_ok { "10.00ms" } else { "90.00ms" }.into(),
                window: None,
            }],
            timeline: completed_per_s
                .iter()
                .enumerate()
                .map(|(i, c)| TimelineRow {
                    interval: i as u64,
                    t_s: i as f64,
                    completed: *c,
                    response_hist: enc.clone(),
                    service_hist: enc.clone(),
                    ..TimelineRow::default()
                })
                .collect(),
            ..Report::default()
        }
    }

    #[test]
    fn judge_names_the_slo_and_the_achieved_rate() {
        let ok = judge(
            "s1 50/s",
            StepKind::Stair,
            50.0,
            3.0,
            &step_report(50.0, &[50, 50, 49], true),
            0.95,
        );
        assert!(ok.holds, "{ok:?}");
        let slow = judge(
            "s2 100/s",
            StepKind::Stair,
            100.0,
            3.0,
            &step_report(100.0, &[80, 80, 80], true),
            0.95,
        );
        assert!(!slow.holds);
        assert_eq!(
            slow.reason.as_deref(),
            Some("achieved 80.0/s of planned 100.0/s (80.0% within the step)")
        );
        let late = judge(
            "s3",
            StepKind::Stair,
            50.0,
            3.0,
            &step_report(50.0, &[50, 50, 50], false),
            0.95,
        );
        assert_eq!(
            late.reason.as_deref(),
            Some("`p99 < 50ms` measured 90.00ms")
        );
    }

    #[test]
    fn merged_report_keeps_every_step_as_a_phase() {
        let parts = vec![
            ("s1 50/s".to_string(), step_report(50.0, &[50, 50], true)),
            (
                "s2 100/s".to_string(),
                step_report(100.0, &[100, 90], false),
            ),
        ];
        let m = merge_steps("cap", &parts).unwrap();
        assert_eq!(m.phases.len(), 2);
        assert_eq!(m.phases[1].name, "s2 100/s");
        // The second step follows the first's last row: no empty second between them.
        assert_eq!(m.phases[1].start_s, 2.0);
        assert_eq!(m.totals.completed, 290);
        assert_eq!(m.totals.planned, 300);
        assert_eq!(m.timeline.len(), 4);
        assert_eq!(m.timeline[2].t_s, 2.0);
        assert_eq!(m.timeline[3].interval, 3);
        // Every interval histogram (one sample each) is merged into the overall latency.
        assert_eq!(m.latency.response_time.count, 4);
        assert_eq!(m.thresholds[1].expr, "s2 100/s: p99 < 50ms");
        assert!(!m.thresholds[1].passed);
    }

    /// Step reports read from files are not trusted: counts at the top of `u64` add up
    /// saturating instead of overflowing (a panic in debug builds, a wrap in release).
    #[test]
    fn merging_steps_with_huge_counts_saturates() {
        let mut a = step_report(50.0, &[50], true);
        a.totals.completed = u64::MAX - 1;
        a.totals.failed = u64::MAX;
        a.totals.errors.insert("reset".into(), u64::MAX);
        let parts = vec![("s1".to_string(), a.clone()), ("s2".to_string(), a)];
        let m = merge_steps("cap", &parts).unwrap();
        assert_eq!(m.totals.completed, u64::MAX);
        assert_eq!(m.totals.failed, u64::MAX);
        assert_eq!(m.totals.errors["reset"], u64::MAX);
    }
}
