//! Turns a [`RunAccumulator`]'s merged figures into a [`Report`]: planned against achieved per
//! phase and in total, per step and per agent, the generator's verdict and warnings, and the
//! thresholds evaluated on the result.

use std::collections::HashMap;

use super::super::{
    targets, workloads, AgentReport, Generator, Latency, LoadSummary, Percentiles, PhaseReport,
    Report, RunOutcome, SessionTotals, StepReport, TimelineRow, Totals,
};
use super::{MergeError, RunAccumulator};
use crate::hist;
use crate::scenario::Scenario;
use crate::stats::{Counters, SparseStats};

impl RunAccumulator {
    pub(super) fn build(
        &self,
        scenario: &Scenario,
        meta: ReportMeta,
        timeline: Vec<TimelineRow>,
        live: bool,
    ) -> Result<Report, MergeError> {
        // The headline figures leave warm-up phases out; the generator's figures and the
        // connections (counted in phase 0's samples) are the whole run's.
        let effective = scenario.effective_phases();
        let warm: Vec<bool> = effective.iter().map(|p| p.warmup).collect();
        let all_stats = self.totals()?;
        let totals_stats = self.headline(&warm);
        let c = &totals_stats.counters;
        let starts = scenario.phase_starts();
        let warm_s: f64 = effective
            .iter()
            .zip(&starts)
            .filter(|(p, _)| p.warmup)
            .map(|(p, start)| (meta.duration_s - start).clamp(0.0, p.duration.as_secs_f64()))
            .sum();
        let duration_s = (meta.duration_s - warm_s).max(1e-9);
        // Per phase, planned (requests, sessions). A closed load has no schedule: what it
        // started is what it planned, so the achieved ratio is completed over started. Live:
        // planned so far, less what is still in flight (it cannot have finished yet).
        let plan_sessions = self.plan.sessions_per_phase();
        let plan_requests = self.plan.requests_per_phase();
        let planned: Vec<(u64, u64)> = self
            .phases
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let c = &s.counters;
                if live {
                    let in_flight = c.requests_started.saturating_sub(
                        c.requests_completed
                            .saturating_add(c.requests_failed)
                            .saturating_add(c.requests_interrupted),
                    );
                    (
                        self.plan
                            .requests_of(i, c.sessions_planned)
                            .saturating_sub(in_flight),
                        c.sessions_planned,
                    )
                } else if self.closed_phases.get(i).copied().unwrap_or(false) {
                    (c.requests_started, c.sessions_planned)
                } else {
                    (
                        plan_requests.get(i).copied().unwrap_or(0),
                        plan_sessions.get(i).copied().unwrap_or(0),
                    )
                }
            })
            .collect();
        let (total_planned, sessions_planned) = planned
            .iter()
            .zip(&warm)
            .filter(|(_, w)| !**w)
            .fold((0u64, 0u64), |(r, s), ((pr, ps), _)| {
                (r.saturating_add(*pr), s.saturating_add(*ps))
            });

        let phases: Vec<PhaseReport> = effective
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let s = &self.phases[i];
                let start_s = starts.get(i).copied().unwrap_or(0.0);
                let d = p.duration.as_secs_f64();
                // Live, a phase's rate counts only the part of it that has elapsed.
                let rate_over = if live {
                    (meta.duration_s - start_s).clamp(1e-9, d.max(1e-9))
                } else {
                    d
                };
                PhaseReport {
                    index: i as u32,
                    name: p.display_name(i),
                    start_s,
                    duration_s: d,
                    planned: planned[i].0,
                    started: s.counters.requests_started,
                    completed: s.counters.requests_completed,
                    failed: s.counters.requests_failed,
                    interrupted: s.counters.requests_interrupted,
                    errors: s.counters.errors.clone(),
                    sessions_planned: planned[i].1,
                    throughput_rps: s.counters.requests_completed as f64 / rate_over,
                    latency: Latency::of(s),
                    warmup: p.warmup,
                }
            })
            .collect();

        let steps = scenario
            .step_names()
            .into_iter()
            .zip(&totals_stats.steps)
            .map(|(name, s)| StepReport {
                name,
                completed: s.requests_completed,
                failed: s.requests_failed,
                interrupted: s.requests_interrupted,
                errors: s.errors.clone(),
                latency: Latency {
                    response_time: Percentiles::of_sparse(&s.response),
                    service_time: Percentiles::of_sparse(&s.service),
                },
                throughput_rps: s.requests_completed as f64 / duration_s,
                stream: crate::report::StreamLatency::of(s, duration_s),
            })
            .collect();

        let agents: Vec<AgentReport> = self
            .agents
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let planned = self.agent_planned_requests(i);
                let lag = Percentiles::of_sparse(&a.lag);
                AgentReport {
                    id: a.id.clone(),
                    shard: i as u32,
                    planned,
                    started: a.counters.requests_started,
                    completed: a.counters.requests_completed,
                    failed: a.counters.requests_failed,
                    interrupted: a.counters.requests_interrupted,
                    lost: a.lost,
                    lost_share: if a.lost && total_planned > 0 {
                        planned.saturating_sub(a.counters.requests_started) as f64
                            / total_planned as f64
                    } else {
                        0.0
                    },
                    clock_offset_us: a.clock_offset_us,
                    lag_p99_us: lag.p99_us,
                    lag_max_us: lag.max_us,
                    late_arrivals: a.counters.late_arrivals,
                    peak_open: a.peak_open,
                    cpu_max_pct: pct(self.usage[i].cpu_max),
                    cpu_mean_pct: pct(self.usage[i].cpu_sum / self.usage[i].samples.max(1) as f64),
                    cores: self.usage[i].cores,
                    rss_max_bytes: self.usage[i].rss_max,
                    open_files_max: self.usage[i].files_max,
                    usable_ports: self.usage[i].usable_ports,
                    destinations: self.usage[i].destinations(),
                    unreported: a.unreported,
                }
            })
            .collect();

        let mut generator =
            generator_verdict(&all_stats, &all_stats.counters, &agents, meta.outcome);
        if scenario.insecure_tls() {
            generator
                .warnings
                .insert(0, INSECURE_TLS_WARNING.to_string());
        }
        let finished = c.requests_completed.saturating_add(c.requests_failed);
        let report = Report {
            run_id: meta.run_id,
            scenario: scenario.name.clone(),
            target: scenario
                .target
                .as_ref()
                .map(|t| without_userinfo(t.as_str()))
                .unwrap_or_default(),
            outcome: meta.outcome,
            message: meta.message,
            started_at_unix_ms: meta.started_at_unix_ms,
            duration_s: meta.duration_s,
            planned_duration_s: scenario.duration().as_secs_f64(),
            arrival: format!("{:?}", scenario.arrival).to_lowercase(),
            arrival_resolution_us: (!scenario.is_closed()).then(|| {
                u64::try_from(scenario.arrival_resolution().as_micros()).unwrap_or(u64::MAX)
            }),
            seed: self.plan.seed,
            load: scenario.load.as_ref().map(|l| LoadSummary {
                model: match l.model {
                    crate::scenario::LoadModel::Closed => "closed".into(),
                    crate::scenario::LoadModel::Constant => "constant".into(),
                },
                connections: l.connections,
                rate: l.rate,
                target_rps: l
                    .rate
                    .map(|r| r * self.plan.per_session.first().copied().unwrap_or(0.0)),
                achieved_rps: c.requests_completed as f64 / l.duration.as_secs_f64().max(1e-9),
                stages: self.stage_connects.report(&l.stages),
            }),
            hist_spec: hist::SPEC,
            totals: Totals {
                planned: total_planned,
                started: c.requests_started,
                completed: c.requests_completed,
                failed: c.requests_failed,
                interrupted: c.requests_interrupted,
                errors: c.errors.clone(),
                error_count: c.error_count(),
                error_rate: if finished > 0 {
                    c.requests_failed as f64 / finished as f64
                } else {
                    0.0
                },
                throughput_rps: c.requests_completed as f64 / duration_s,
                achieved_ratio: if total_planned > 0 {
                    c.requests_completed as f64 / total_planned as f64
                } else {
                    0.0
                },
                sessions: SessionTotals {
                    planned: sessions_planned,
                    started: c.sessions_started,
                    completed: c.sessions_completed,
                    failed: c.sessions_failed,
                    interrupted: c.sessions_interrupted,
                    dropped: c.dropped_arrivals,
                    started_late: totals_stats
                        .lag
                        .count_above(super::super::UNDELIVERED_LAG_US),
                },
                bytes_sent: c.bytes_sent,
                bytes_received: c.bytes_received,
                compressed: (c.bytes_compressed > 0 || c.bytes_decoded > 0).then_some(
                    super::super::CompressedSizes {
                        wire_bytes: c.bytes_compressed,
                        decoded_bytes: c.bytes_decoded,
                    },
                ),
                status_codes: c.status_codes.clone(),
                grpc_statuses: c
                    .grpc_statuses
                    .iter()
                    .map(|(code, n)| {
                        let name = crate::grpc::status_name(*code).unwrap_or("UNKNOWN");
                        (name.to_string(), *n)
                    })
                    .collect(),
                mean_response_bytes: if finished > 0 {
                    c.bytes_received as f64 / finished as f64
                } else {
                    0.0
                },
                mean_request_bytes: if c.requests_started > 0 {
                    c.bytes_sent as f64 / c.requests_started as f64
                } else {
                    0.0
                },
            },
            latency: Latency::of(&totals_stats),
            generator,
            connections: self.connections(&all_stats.counters, &timeline),
            workloads: workloads::reports(
                scenario,
                &self.plan,
                &phases,
                &self.phases,
                &totals_stats,
                &warm,
            ),
            targets: targets::reports(scenario, &phases, &self.phases, &warm),
            phases,
            steps,
            lost_share: self.lost_share(),
            agents,
            thresholds: Vec::new(),
            threshold_abort: None,
            timeline,
            endpoints: Vec::new(),
            target_resources: None,
            failure_samples: Vec::new(),
        };
        let mut report = report;
        self.endpoint_rows(scenario, &mut report);
        // Thresholds parsed when the scenario was validated; evaluate on the merged data.
        if let Ok(ts) = scenario.parsed_thresholds() {
            report.thresholds = crate::threshold::evaluate_all(&ts, &report);
        }
        // A windowed threshold's verdict is its worst window (live: its first breach).
        for w in self.windows.results(live) {
            if let Some(t) = report.thresholds.iter_mut().find(|t| t.expr == w.expr) {
                *t = w;
            }
        }
        Ok(report)
    }
}

impl RunAccumulator {
    /// The per-endpoint rows of the run and of each timeline interval. A target name that
    /// kept one address has no table: its one row would repeat the run's figures.
    fn endpoint_rows(&self, scenario: &Scenario, report: &mut Report) {
        let listed = crate::endpoints::listed(scenario.endpoints.list());
        let rows = self.endpoints.report(&listed);
        if listed.is_empty() && rows.len() < 2 && !scenario.endpoints.is_service() {
            return;
        }
        report.endpoints = rows;
        for row in &mut report.timeline {
            row.endpoints = self.endpoints.interval(row.interval, &listed);
        }
    }
}

/// A share as a percentage, to 0.1.
fn pct(share: f64) -> f64 {
    (share * 1000.0).round() / 10.0
}

/// `scheme://user:password@host/path` without `user:password@`.
pub(crate) fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// The report's first warning when a run did not verify the target's TLS certificate.
pub const INSECURE_TLS_WARNING: &str =
    "TLS certificate verification was OFF (tls.insecure_skip_verify): \
     any certificate was accepted, so these results may come from whoever answered; \
     use it only against your own self-signed test targets";

/// Inputs of the final report the accumulator cannot know.
#[derive(Debug, Clone, Default)]
pub struct ReportMeta {
    /// The run's id, as the controller named it.
    pub run_id: String,
    /// How the run ended as the controller saw it; the report may still judge it `failed` (nothing
    /// succeeded) or `incomplete` (too many sessions never started).
    pub outcome: RunOutcome,
    /// Why it failed or was aborted.
    pub message: Option<String>,
    /// T0: Unix time, milliseconds.
    pub started_at_unix_ms: u64,
    /// Seconds from T0 to the run's end.
    pub duration_s: f64,
}

/// How the generator kept up. Sessions that never started because the run was stopped
/// (aborted, failed, an agent lost) are the stop's doing, not the generator's: they are
/// reported as such and do not make the run "behind schedule".
fn generator_verdict(
    t: &SparseStats,
    c: &Counters,
    agents: &[AgentReport],
    outcome: RunOutcome,
) -> Generator {
    let lag = Percentiles::of_sparse(&t.lag);
    let mut warnings = Vec::new();
    if c.late_arrivals > 0 {
        warnings.push(format!(
            "{} of {} sessions started more than {} ms late: the generator fell behind its schedule \
             (response times still count from the intended start)",
            c.late_arrivals,
            c.sessions_started,
            crate::stats::LATE_THRESHOLD_US / 1000
        ));
    }
    let stopped = outcome != RunOutcome::Succeeded;
    if c.dropped_arrivals > 0 {
        warnings.push(if stopped {
            format!(
                "{} planned sessions were not started because the run stopped early ({})",
                c.dropped_arrivals,
                format!("{outcome:?}").to_lowercase()
            )
        } else {
            format!(
                "{} planned sessions were never started: no session slot or connection was free for them \
                 in time (the in-flight cap, a full slot queue, or a slot still queued one request timeout \
                 after the schedule's end)",
                c.dropped_arrivals
            )
        });
    }
    if c.out_of_range > 0 {
        warnings.push(format!(
            "{} latencies fell outside the histogram range (1 µs to 1 h) and were recorded at its bounds",
            c.out_of_range
        ));
    }
    let by_id: HashMap<&str, &AgentReport> = agents.iter().map(|a| (a.id.as_str(), a)).collect();
    for a in by_id.values().filter(|a| a.lost) {
        warnings.push(format!(
            "agent {} was lost; {:.2}% of the planned load was not delivered",
            a.id,
            a.lost_share * 100.0
        ));
    }
    let mut limiting_agents = Vec::new();
    for a in agents {
        if a.cpu_max_pct >= super::CPU_LIMIT_SHARE * 100.0 {
            warnings.push(format!(
                "agent {} CPU {:.0}% of its {} core(s) in its busiest interval: the generator, \
                 not the target, may be the limit (add agents, or give them more CPU)",
                a.id, a.cpu_max_pct, a.cores
            ));
            limiting_agents.push(a.id.clone());
        }
        for d in &a.destinations {
            let full = a.usable_ports > 0
                && d.ports_max as f64 >= super::PORTS_LIMIT_SHARE * a.usable_ports as f64;
            if full {
                warnings.push(format!(
                    "agent {} ports toward {} {:.0}% of its {} usable ({} open, {} in TIME_WAIT at \
                     peak): the generator, not the target, may be the limit (add agents or source \
                     addresses, widen net.ipv4.ip_local_port_range, or reuse connections)",
                    a.id, d.address, d.ports_pct, a.usable_ports, d.in_use_max, d.time_wait_max
                ));
            }
            if d.addr_not_available > 0 {
                warnings.push(format!(
                    "agent {} failed {} connects to {} for want of a free local port \
                     (addr_not_available): the generator, not the target, was the limit",
                    a.id, d.addr_not_available, d.address
                ));
            }
            if (full || d.addr_not_available > 0) && !limiting_agents.contains(&a.id) {
                limiting_agents.push(a.id.clone());
            }
        }
    }
    warnings.sort();
    let behind = c.sessions_started > 0 && c.late_arrivals * 1000 > c.sessions_started
        || (c.dropped_arrivals > 0 && !stopped);
    Generator {
        lag,
        late_arrivals: c.late_arrivals,
        dropped_arrivals: c.dropped_arrivals,
        out_of_range: c.out_of_range,
        behind_schedule: behind,
        warnings,
        limiting_agents,
    }
}
