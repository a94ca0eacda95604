//! The report's view of each workload: its phases merged into one row, and its session types,
//! planned against achieved. Built from what the accumulator already holds per phase and per
//! step (a session type's requests are exactly its steps' requests), so nothing extra is
//! recorded on the hot path but one counter per session of a mix.

use serde::{Deserialize, Serialize};

use super::{Latency, Percentiles, PhaseReport, SessionTotals};
use crate::plan::Plan;
use crate::scenario::Scenario;
use crate::stats::{SparseStats, SparseStepStats};

/// One workload of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadReport {
    /// Its phases together, as one phase row: `index` is the workload's, `start_s` its start
    /// offset, `duration_s` how long it generated load.
    #[serde(flatten)]
    pub figures: PhaseReport,
    /// What it loaded (its own `target:` or the scenario's), without credentials; empty in
    /// reports written before workloads had targets of their own.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target: String,
    /// `phases`, `closed` or `constant`.
    pub model: String,
    /// Its phases' names in the report's `phases`.
    pub phases: Vec<String>,
    /// Its sessions, warm-up phases left out, with the same books as the run's `totals.sessions`.
    pub sessions: SessionTotals,
    /// Its session types (one, `default`, for a `session:`), planned against achieved.
    pub session_types: Vec<SessionTypeReport>,
}

/// One session type of a workload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionTypeReport {
    /// The session type's `name` (`default` for a `session:`).
    pub name: String,
    /// Its `weight` in the workload's mix.
    pub weight: u32,
    /// Its share of the workload's sessions as asked: weight over the sum of the weights.
    pub share: f64,
    /// Planned sessions (a closed load plans none: there, planned is what was started).
    pub planned: u64,
    /// Sessions of this type started.
    pub started: u64,
    /// Sessions of this type whose every request succeeded.
    pub completed: u64,
    /// Sessions of this type that ended with a failed request.
    pub failed: u64,
    /// Sessions still running when the run stopped.
    #[serde(default)]
    pub interrupted: u64,
    /// Its share of the sessions the workload started.
    pub achieved_share: f64,
    /// Its requests (its steps' requests together).
    pub requests_completed: u64,
    /// Failed requests of its steps.
    pub requests_failed: u64,
    /// The latencies of its steps' successful requests.
    pub latency: Latency,
}

/// Every workload's report, from the run's phase rows, step rows, merged per-phase data and
/// totals; `warm` marks the warm-up phases, left out of a workload's figures as of the run's.
pub(super) fn reports(
    scenario: &Scenario,
    plan: &Plan,
    phase_rows: &[PhaseReport],
    phases: &[SparseStats],
    totals: &SparseStats,
    warm: &[bool],
) -> Vec<WorkloadReport> {
    let planned_types = plan.sessions_per_type();
    let named = scenario.named_workloads();
    scenario
        .workload_views()
        .iter()
        .map(|w| {
            let merged = Merged::of(
                std::iter::once(w.phase_base..w.phase_base + w.phase_count()),
                warm,
                phase_rows,
                phases,
            );
            let sum = |f: fn(&PhaseReport) -> u64| merged.sum(f);
            let c = &merged.stats.counters;
            let duration_s = w.duration().as_secs_f64();
            let total_weight: u64 = w.types.iter().map(|t| u64::from(t.weight)).sum();
            let closed = w.is_closed();
            // A mix counts each type's start where it counts the session's: their sum is this.
            let started_all = c.sessions_started;
            let session_types = w
                .types
                .iter()
                .enumerate()
                .map(|(t, ty)| {
                    let counts = if w.types.len() == 1 {
                        crate::stats::TypeCounts {
                            started: c.sessions_started,
                            completed: c.sessions_completed,
                            failed: c.sessions_failed,
                            interrupted: c.sessions_interrupted,
                        }
                    } else {
                        type_counts(c, w.type_base + t)
                    };
                    let mut steps = SparseStepStats::default();
                    let first = ty.step_base;
                    for s in totals
                        .steps
                        .get(first..first + ty.request_steps())
                        .unwrap_or_default()
                    {
                        steps.add(s);
                    }
                    SessionTypeReport {
                        name: ty.name.to_string(),
                        weight: ty.weight,
                        share: f64::from(ty.weight) / total_weight.max(1) as f64,
                        planned: if closed {
                            counts.started
                        } else {
                            planned_types.get(w.type_base + t).copied().unwrap_or(0)
                        },
                        started: counts.started,
                        completed: counts.completed,
                        failed: counts.failed,
                        interrupted: counts.interrupted,
                        achieved_share: if started_all > 0 {
                            counts.started as f64 / started_all as f64
                        } else {
                            0.0
                        },
                        requests_completed: steps.requests_completed,
                        requests_failed: steps.requests_failed,
                        latency: Latency {
                            response_time: Percentiles::of_sparse(&steps.response),
                            service_time: Percentiles::of_sparse(&steps.service),
                        },
                    }
                })
                .collect();
            WorkloadReport {
                figures: merged.figures(
                    w.index as u32,
                    w.name.to_string(),
                    w.start.as_secs_f64(),
                    duration_s,
                ),
                target: w
                    .target
                    .map(|t| super::accumulator::without_userinfo(t.as_str()))
                    .unwrap_or_default(),
                model: match w.load.map(|l| l.model) {
                    None => "phases".into(),
                    Some(crate::scenario::LoadModel::Closed) => "closed".into(),
                    Some(crate::scenario::LoadModel::Constant) => "constant".into(),
                },
                phases: w
                    .effective_phases(named)
                    .iter()
                    .enumerate()
                    .map(|(i, p)| p.display_name(i))
                    .collect(),
                sessions: SessionTotals {
                    planned: sum(|r| r.sessions_planned),
                    started: c.sessions_started,
                    completed: c.sessions_completed,
                    failed: c.sessions_failed,
                    interrupted: c.sessions_interrupted,
                    dropped: c.dropped_arrivals,
                    started_late: merged.stats.lag.count_above(super::UNDELIVERED_LAG_US),
                },
                session_types,
            }
        })
        .collect()
}

fn type_counts(c: &crate::stats::Counters, t: usize) -> crate::stats::TypeCounts {
    u32::try_from(t)
        .ok()
        .and_then(|t| c.session_types.get(&t))
        .copied()
        .unwrap_or_default()
}

/// Measured phases merged into one row: a workload's, or a target's (its workloads').
/// Warm-up phases are left out, as of the run's headline.
pub(super) struct Merged<'a> {
    /// The phases' data, merged.
    pub(super) stats: SparseStats,
    /// The phases' report rows.
    rows: Vec<&'a PhaseReport>,
}

impl<'a> Merged<'a> {
    /// The measured phases of `ranges` (global phase indexes).
    pub(super) fn of(
        ranges: impl Iterator<Item = std::ops::Range<usize>>,
        warm: &[bool],
        phase_rows: &'a [PhaseReport],
        phases: &[SparseStats],
    ) -> Self {
        let mut stats = SparseStats::default();
        let mut rows = Vec::new();
        for i in ranges.flatten() {
            if warm.get(i).copied().unwrap_or(false) {
                continue;
            }
            if let Some(p) = phases.get(i) {
                stats.add(p);
            }
            rows.extend(phase_rows.get(i));
        }
        Self { stats, rows }
    }

    /// The requests of `steps` (global ordinals) over the measured phases, as one unit: the
    /// figures of a target that a session's steps share with others. It has no rows, so no
    /// plan of its own: its `planned` is what it started.
    pub(super) fn of_steps(steps: &[usize], warm: &[bool], phases: &[SparseStats]) -> Self {
        let mut sum = crate::stats::SparseStepStats::default();
        for (i, p) in phases.iter().enumerate() {
            if warm.get(i).copied().unwrap_or(false) {
                continue;
            }
            for s in steps.iter().filter_map(|&o| p.steps.get(o)) {
                sum.add(s);
            }
        }
        let mut stats = SparseStats::default();
        let c = &mut stats.counters;
        c.requests_started = sum
            .requests_completed
            .saturating_add(sum.requests_failed)
            .saturating_add(sum.requests_interrupted);
        c.requests_completed = sum.requests_completed;
        c.requests_failed = sum.requests_failed;
        c.requests_interrupted = sum.requests_interrupted;
        c.errors = sum.errors;
        stats.response = sum.response;
        stats.service = sum.service;
        Self {
            stats,
            rows: Vec::new(),
        }
    }

    /// A figure summed over the phases' rows.
    pub(super) fn sum(&self, f: fn(&PhaseReport) -> u64) -> u64 {
        self.rows.iter().fold(0u64, |a, r| a.saturating_add(f(r)))
    }

    /// The merged row, named and placed as the caller's row.
    pub(super) fn figures(
        &self,
        index: u32,
        name: String,
        start_s: f64,
        duration_s: f64,
    ) -> PhaseReport {
        let c = &self.stats.counters;
        PhaseReport {
            index,
            name,
            start_s,
            duration_s,
            planned: if self.rows.is_empty() {
                c.requests_started
            } else {
                self.sum(|r| r.planned)
            },
            started: c.requests_started,
            completed: c.requests_completed,
            failed: c.requests_failed,
            interrupted: c.requests_interrupted,
            errors: c.errors.clone(),
            sessions_planned: self.sum(|r| r.sessions_planned),
            throughput_rps: c.requests_completed as f64 / duration_s.max(1e-9),
            latency: Latency::of(&self.stats),
            warmup: false,
        }
    }
}
