//! [`RunAccumulator`]: every agent's per-interval, per-phase [`SparseStats`] added up per phase
//! and per timeline interval (per agent only counters and the start lag), checked against the
//! run before anything is added, and turned into the live snapshot and the final [`Report`]
//! (assembled in `assemble`).

use std::collections::BTreeMap;

mod assemble;
mod resources;

pub(crate) use assemble::without_userinfo;
pub use assemble::{ReportMeta, INSECURE_TLS_WARNING};
pub use resources::{
    DestinationReport, DestinationSample, ResourceSample, CPU_LIMIT_SHARE, MAX_DESTINATIONS,
    PORTS_LIMIT_SHARE,
};

use super::{ConnectionsReport, LiveSnapshot, Report, TimelineRow};
use crate::hist::{self, HistError, SparseHist};
use crate::plan::Plan;
use crate::scenario::Scenario;
use crate::stats::{Counters, SparseStats};
/// Per agent the report needs only counters and the start-lag percentiles, so that is all
/// that is kept (no response/service/step histograms per agent).
#[derive(Debug, Clone)]
struct AgentAcc {
    id: String,
    counters: Counters,
    lag: SparseHist,
    lost: bool,
    clock_offset_us: i64,
    /// The highest per-interval peak of open connections this agent reported.
    peak_open: u64,
    /// Highest interval this agent has reported as complete.
    reported_through: Option<u64>,
    /// Requests it started in closed loads' phases (which plan nothing: started is planned).
    closed_started: u64,
    /// Lost with its last data never delivered: what may be missing.
    unreported: Option<super::Unreported>,
}

/// Adds up a run's interval data.
#[derive(Debug, Clone)]
pub struct RunAccumulator {
    plan: Plan,
    interval_s: f64,
    phases: Vec<SparseStats>,
    agents: Vec<AgentAcc>,
    /// Timeline intervals some live agent has not reported yet; at most [`MAX_OPEN_INTERVALS`].
    /// Only counters, response and service time are kept (what a [`TimelineRow`] shows).
    open: BTreeMap<u64, SparseStats>,
    closed: Vec<TimelineRow>,
    n_steps: usize,
    /// Highest interval index the run can produce (duration, longest session and slack).
    max_interval: u64,
    /// The run's counters over every phase: the largest sums, checked before adding.
    total_counters: Counters,
    /// Per phase, whether it is a closed load's: no schedule, so planned requests are the
    /// started ones.
    closed_phases: Vec<bool>,
    /// Per phase, its length in seconds (planned rates are its requests over it).
    phase_s: Vec<f64>,
    /// Session types of the run (a sample counts at most these).
    n_types: usize,
    /// The windowed thresholds' interval figures and verdicts.
    windows: super::windows::Windows,
    /// Each agent's use of its host (CPU, memory, open files) over the run.
    usage: Vec<resources::AgentUse>,
    /// Each agent's CPU per timeline interval not yet closed into a row.
    cpu_rows: BTreeMap<u64, Vec<Option<f64>>>,
    /// The run's figures per endpoint (`endpoints:`, or a target name's addresses), added as
    /// agents send them.
    pub endpoints: crate::endpoints::EndpointAccumulator,
    /// The first failure samples of each step and error kind, as agents send them.
    pub samples: crate::samples::SampleMerge,
    /// The least interval every live agent has reported through, as last taken (`None`: to
    /// be taken again), so that [`RunAccumulator::reported_through`] takes it only when it
    /// may have moved.
    horizon: Option<u64>,
    /// Connect times per stage of the load's connection ramp, as agents send them.
    pub stage_connects: super::StageConnects,
}

/// Agent data that does not fit the run.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// An agent index past the run's agents.
    #[error("agent index {0} is not part of the run")]
    UnknownAgent(usize),
    /// A phase index past the scenario's phases.
    #[error("phase index {0} is not part of the scenario")]
    UnknownPhase(u32),
    /// A sample with more request steps than the scenario has.
    #[error("too many request steps: {0}")]
    TooManySteps(usize),
    /// A session type index past the scenario's types.
    #[error("session type index {0} is not part of the scenario")]
    UnknownSessionType(u32),
    /// An interval past the last the run can produce (its duration, its longest session and two
    /// minutes of slack).
    #[error("interval {got} is beyond the run's last possible interval {max}")]
    IntervalOutOfRange {
        /// The interval the data named.
        got: u64,
        /// The last interval the run accepts ([`RunAccumulator::max_interval`]).
        max: u64,
    },
    /// Adding the data would saturate one of the run's counters.
    #[error("counters would overflow")]
    CounterOverflow,
    /// A resource sample with a figure that is negative or not finite.
    #[error("resource figures that are not finite or negative")]
    BadResources,
    /// Connect times for a stage the load's ramp does not have.
    #[error("stage index {0} is not part of the load's stages")]
    UnknownStage(u32),
    /// A histogram that does not decode or does not fit the spec.
    #[error(transparent)]
    Hist(#[from] HistError),
}

/// Timeline intervals kept open waiting for a slow agent. Beyond this the oldest is closed
/// (its late data then lands in a later row; the totals stay exact), so a silent agent
/// cannot make the controller hold one merged interval per second of the run.
pub const MAX_OPEN_INTERVALS: usize = 30;

/// Intervals accepted past the run's planned end and its longest session.
const INTERVAL_SLACK_S: f64 = 120.0;

impl RunAccumulator {
    /// The accumulator of a run of `scenario` planned as `plan`: `agent_ids` in shard order (an
    /// agent's index in every later call), intervals of `interval_s` seconds.
    pub fn new(scenario: &Scenario, plan: Plan, agent_ids: Vec<String>, interval_s: f64) -> Self {
        let n_steps = scenario.step_names().len();
        let n_agents = agent_ids.len();
        let horizon_s = scenario.duration().as_secs_f64()
            + crate::ports::worst_case_session(scenario).as_secs_f64()
            + INTERVAL_SLACK_S;
        Self {
            phases: (0..scenario.effective_phases().len())
                .map(|_| SparseStats {
                    steps: vec![Default::default(); n_steps],
                    ..SparseStats::default()
                })
                .collect(),
            agents: agent_ids
                .into_iter()
                .map(|id| AgentAcc {
                    id,
                    counters: Counters::default(),
                    lag: SparseHist::default(),
                    lost: false,
                    clock_offset_us: 0,
                    peak_open: 0,
                    reported_through: None,
                    closed_started: 0,
                    unreported: None,
                })
                .collect(),
            plan,
            interval_s,
            open: BTreeMap::new(),
            closed: Vec::new(),
            n_steps,
            closed_phases: scenario.closed_phases(),
            phase_s: scenario
                .effective_phases()
                .iter()
                .map(|p| p.duration.as_secs_f64())
                .collect(),
            n_types: scenario
                .workload_views()
                .iter()
                .map(|w| w.types.len())
                .sum(),
            total_counters: Counters::default(),
            windows: super::windows::Windows::new(scenario, interval_s),
            usage: vec![Default::default(); n_agents],
            cpu_rows: BTreeMap::new(),
            endpoints: Default::default(),
            samples: Default::default(),
            stage_connects: super::StageConnects::new(scenario.ramp_stages().len()),
            horizon: None,
            max_interval: (horizon_s / interval_s.max(1e-3))
                .ceil()
                .min(u64::MAX as f64) as u64,
        }
    }

    /// Highest interval index [`RunAccumulator::add`] accepts.
    pub fn max_interval(&self) -> u64 {
        self.max_interval
    }

    /// Timeline intervals closed so far (every live agent reported them): a windowed
    /// threshold has new windows to judge when this grows.
    pub fn closed_rows(&self) -> usize {
        self.closed.len()
    }

    /// Number of phases (a Progress carries at most one sample per phase).
    pub fn phase_count(&self) -> usize {
        self.phases.len()
    }

    /// Approximate heap bytes held by the merged data (for budgets and tests).
    pub fn heap_bytes(&self) -> usize {
        let phases: usize = self.phases.iter().map(SparseStats::heap_bytes).sum();
        let open: usize = self.open.values().map(SparseStats::heap_bytes).sum();
        let agents: usize = self
            .agents
            .iter()
            .map(|a| {
                std::mem::size_of::<AgentAcc>()
                    + a.id.capacity()
                    + a.lag.heap_bytes()
                    + a.counters.errors.len() * 64
            })
            .sum();
        let closed: usize = self
            .closed
            .iter()
            .map(|r| {
                std::mem::size_of::<TimelineRow>()
                    + r.response_hist.capacity()
                    + r.service_hist.capacity()
                    + r.errors.len() * 64
            })
            .sum();
        phases + open + agents + closed
    }

    /// The plan the run follows: its seed and planned sessions per agent and phase.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Adds one agent's data for one interval and phase. Data that does not fit the run
    /// (unknown agent or phase, too many steps, an interval past the run's end, counters that
    /// would overflow) is refused whole, before anything is added.
    pub fn add(
        &mut self,
        agent: usize,
        interval: u64,
        phase: u32,
        stats: &SparseStats,
    ) -> Result<(), MergeError> {
        self.check(agent, interval, phase, stats)?;
        self.total_counters.add(&stats.counters);
        self.phases[phase as usize].add(stats);
        let closed = self
            .closed_phases
            .get(phase as usize)
            .copied()
            .unwrap_or(false);
        let a = &mut self.agents[agent];
        if closed {
            a.closed_started = a
                .closed_started
                .saturating_add(stats.counters.requests_started);
        }
        a.counters.add(&stats.counters);
        a.lag.add(&stats.lag);
        a.peak_open = a.peak_open.max(stats.counters.peak_open_connections);
        // Late data for an interval already closed goes into the last open or a new row;
        // the totals above are exact either way.
        let slot = match self.closed.last() {
            Some(last) if interval <= last.interval => last.interval.saturating_add(1),
            _ => interval,
        };
        if !self.windows.is_empty() {
            let planned = self
                .plan
                .requests_of(phase as usize, stats.counters.sessions_planned);
            self.windows.add(slot, phase, stats, planned);
        }
        // A timeline row needs only the counters and the two latency histograms.
        let row = self.open.entry(slot).or_default();
        row.counters.add(&stats.counters);
        row.response.add(&stats.response);
        row.service.add(&stats.service);
        while self.open.len() > MAX_OPEN_INTERVALS {
            if let Some((k, s)) = self.open.pop_first() {
                let row = self.row(k, &s)?;
                self.closed.push(row);
                self.cpu_rows.remove(&k);
                self.windows.close_through(k);
            }
        }
        Ok(())
    }

    /// An agent of the run and an interval within its horizon: what every message an agent
    /// sends must name.
    fn check_agent_interval(&self, agent: usize, interval: u64) -> Result<(), MergeError> {
        if agent >= self.agents.len() {
            return Err(MergeError::UnknownAgent(agent));
        }
        if interval > self.max_interval {
            return Err(MergeError::IntervalOutOfRange {
                got: interval,
                max: self.max_interval,
            });
        }
        Ok(())
    }

    /// Everything [`RunAccumulator::add`] refuses.
    pub fn check(
        &self,
        agent: usize,
        interval: u64,
        phase: u32,
        stats: &SparseStats,
    ) -> Result<(), MergeError> {
        if agent >= self.agents.len() {
            return Err(MergeError::UnknownAgent(agent));
        }
        if phase as usize >= self.phases.len() {
            return Err(MergeError::UnknownPhase(phase));
        }
        if stats.steps.len() > self.n_steps {
            return Err(MergeError::TooManySteps(stats.steps.len()));
        }
        if let Some((&t, _)) = stats.counters.session_types.last_key_value() {
            if t as usize >= self.n_types {
                return Err(MergeError::UnknownSessionType(t));
            }
        }
        if interval > self.max_interval {
            return Err(MergeError::IntervalOutOfRange {
                got: interval,
                max: self.max_interval,
            });
        }
        // Every other sum (phase, agent, interval) is at most the run's total.
        if !self.total_counters.fits(&stats.counters) {
            return Err(MergeError::CounterOverflow);
        }
        Ok(())
    }

    /// Everything [`RunAccumulator::add_progress`] refuses: what [`RunAccumulator::check`]
    /// refuses of any sample, and counters that fit one sample at a time but not all of them
    /// together.
    pub fn check_progress(
        &self,
        agent: usize,
        interval: u64,
        samples: &[(u32, SparseStats)],
    ) -> Result<(), MergeError> {
        // A Progress without samples still names its agent and interval.
        self.check_agent_interval(agent, interval)?;
        let mut sum = Counters::default();
        for (phase, s) in samples {
            self.check(agent, interval, *phase, s)?;
            if !sum.fits(&s.counters) {
                return Err(MergeError::CounterOverflow);
            }
            sum.add(&s.counters);
        }
        if !self.total_counters.fits(&sum) {
            return Err(MergeError::CounterOverflow);
        }
        Ok(())
    }

    /// Merges one agent's Progress for `interval` (its samples, one per phase), whole or not
    /// at all, then notes that the agent has reported through `interval`. A Progress
    /// [`RunAccumulator::check_progress`] refuses changes nothing.
    pub fn add_progress(
        &mut self,
        agent: usize,
        interval: u64,
        samples: &[(u32, SparseStats)],
    ) -> Result<(), MergeError> {
        self.add_part(agent, interval, samples)?;
        self.reported_through(agent, interval)
    }

    /// Merges one part of an interval an agent sent in several messages, whole or not at all,
    /// without counting the interval reported: the rows stay open for its other parts, and
    /// [`RunAccumulator::add_progress`] of the part that completes it closes them.
    pub fn add_part(
        &mut self,
        agent: usize,
        interval: u64,
        samples: &[(u32, SparseStats)],
    ) -> Result<(), MergeError> {
        self.check_progress(agent, interval, samples)?;
        for (phase, s) in samples {
            self.add(agent, interval, *phase, s)?;
        }
        Ok(())
    }

    /// Number of request steps (a sample carries at most this many).
    pub fn step_count(&self) -> usize {
        self.n_steps
    }

    /// Notes that `agent` has sent everything up to and including `interval`, and closes
    /// the intervals every live agent has reported.
    pub fn reported_through(&mut self, agent: usize, interval: u64) -> Result<(), MergeError> {
        let a = self
            .agents
            .get_mut(agent)
            .ok_or(MergeError::UnknownAgent(agent))?;
        let before = a.reported_through;
        a.reported_through = Some(before.map_or(interval, |r| r.max(interval)));
        // The least of the live agents' moves only when the agent that held it reports: a
        // thousand agents' minimum taken at every Progress made a fleet's merge quadratic.
        let horizon = match (self.horizon, before) {
            (Some(h), Some(b)) if b > h => Some(h),
            _ => {
                self.horizon = self
                    .agents
                    .iter()
                    .filter(|a| !a.lost)
                    .map(|a| a.reported_through)
                    .min()
                    .flatten();
                self.horizon
            }
        };
        if let Some(h) = horizon {
            self.close_through(Some(h))?;
        }
        Ok(())
    }

    /// Records an agent's estimated clock offset (agent − controller, µs) for its report row; an
    /// index past the run's agents is ignored.
    pub fn set_clock_offset(&mut self, agent: usize, offset_us: i64) {
        if let Some(a) = self.agents.get_mut(agent) {
            a.clock_offset_us = offset_us;
        }
    }

    /// Counts an agent lost: timeline intervals no longer wait for its data, and what it did not
    /// deliver counts in the lost share. An index past the run's agents is ignored.
    pub fn mark_lost(&mut self, agent: usize) {
        if let Some(a) = self.agents.get_mut(agent) {
            a.lost = true;
            // The least of the live agents may move up without it: taken again.
            self.horizon = None;
        }
    }

    /// Whether the agent was marked lost (an index past the run's agents is not).
    pub fn is_lost(&self, agent: usize) -> bool {
        self.agents.get(agent).is_some_and(|a| a.lost)
    }

    /// Where a lost agent's books end (seconds after T0: the end of the last interval it
    /// delivered, in order) and at most how many requests it started in the `window_s`
    /// seconds after that which never reached the run: its planned requests not on the books,
    /// and no more than its busiest phase's planned rate over the window. Recorded into the
    /// report; a closed load plans no rate, so its bound is unknown (`None`).
    pub fn mark_unreported(&mut self, agent: usize, delivered: u64, window_s: f64) {
        let window_s = window_s.max(0.0);
        let open = !self.closed_phases.iter().any(|c| *c);
        let requests_max = open.then(|| {
            let peak = self
                .plan
                .requests
                .get(agent)
                .into_iter()
                .flatten()
                .zip(&self.phase_s)
                .map(|(&n, &d)| if d > 0.0 { n as f64 / d } else { n as f64 })
                .fold(0.0f64, f64::max);
            let left = self.agent_planned_requests(agent).saturating_sub(
                self.agents
                    .get(agent)
                    .map_or(0, |a| a.counters.requests_started),
            );
            // Saturating: the float is finite and non-negative.
            ((peak * window_s).ceil() as u64).min(left)
        });
        if let Some(a) = self.agents.get_mut(agent) {
            a.unreported = Some(super::Unreported {
                books_end_s: delivered as f64 * self.interval_s,
                window_s,
                requests_max,
            });
        }
    }

    /// What a lost agent may have sent that is not on the books, once recorded.
    pub fn unreported(&self, agent: usize) -> Option<super::Unreported> {
        self.agents.get(agent).and_then(|a| a.unreported)
    }

    /// Share of the planned requests that lost agents did not deliver, 0..=1.
    pub fn lost_share(&self) -> f64 {
        let total = self.plan.total_requests();
        if total == 0 {
            return 0.0;
        }
        let undelivered: u64 = self
            .agents
            .iter()
            .enumerate()
            .filter(|(_, a)| a.lost)
            .map(|(i, a)| {
                self.agent_planned_requests(i)
                    .saturating_sub(a.counters.requests_started)
            })
            .sum();
        undelivered as f64 / total as f64
    }

    fn agent_planned_requests(&self, agent: usize) -> u64 {
        let closed = self.agents.get(agent).map_or(0, |a| a.closed_started);
        self.plan.agent_requests(agent).saturating_add(closed)
    }

    /// Planned requests so far: the sessions planned so far in each phase, as requests.
    fn planned_so_far(&self) -> u64 {
        self.phases.iter().enumerate().fold(0u64, |a, (i, p)| {
            a.saturating_add(self.plan.requests_of(i, p.counters.sessions_planned))
        })
    }

    fn close_through(&mut self, horizon: Option<u64>) -> Result<(), MergeError> {
        let keys: Vec<u64> = self
            .open
            .keys()
            .copied()
            .filter(|k| horizon.is_none_or(|h| *k <= h))
            .collect();
        for k in keys {
            if let Some(stats) = self.open.remove(&k) {
                self.closed.push(self.row(k, &stats)?);
                self.cpu_rows.remove(&k);
            }
        }
        // Windows end on closed intervals, with data or not (a window of silence counts).
        let through = match horizon {
            Some(h) => Some(h),
            None => self.closed.last().map(|r| r.interval),
        };
        if let Some(h) = through {
            self.windows.close_through(h);
        }
        Ok(())
    }

    fn row(&self, interval: u64, s: &SparseStats) -> Result<TimelineRow, MergeError> {
        let b64 = hist::to_text;
        // Only the figures a row shows: one walk of each histogram, not a full percentile row.
        let [p50, p90, p99] = s.response.values_at_quantiles([0.50, 0.90, 0.99]);
        Ok(TimelineRow {
            interval,
            t_s: interval as f64 * self.interval_s,
            sessions_planned: s.counters.sessions_planned,
            completed: s.counters.requests_completed,
            failed: s.counters.requests_failed,
            errors: s.counters.errors.clone(),
            rps: s.counters.requests_completed as f64 / self.interval_s,
            response_p50_us: p50,
            response_p90_us: p90,
            response_p99_us: p99,
            response_max_us: s.response.max(),
            service_p99_us: s.service.value_at_quantile(0.99),
            peak_open: s.counters.peak_open_connections,
            connections_opened: s.counters.connections_opened,
            response_hist: b64(&s.response)?,
            service_hist: b64(&s.service)?,
            agent_cpu_pct: self.agent_cpu(interval),
            endpoints: Vec::new(),
        })
    }

    /// The run's connection figures: opened is a plain sum; the peak is the largest
    /// per-interval sum of agents' peaks, over the intervals in `timeline`, the closed rows and
    /// the still-open ones (a live report has no timeline yet).
    fn connections(&self, c: &Counters, timeline: &[TimelineRow]) -> ConnectionsReport {
        let rows = timeline.iter().chain(&self.closed).map(|r| r.peak_open);
        let open = self.open.values().map(|s| s.counters.peak_open_connections);
        ConnectionsReport {
            opened: c.connections_opened,
            peak_open: rows.chain(open).max().unwrap_or(0),
        }
    }

    /// Merged counters over every phase.
    pub fn totals(&self) -> Result<SparseStats, MergeError> {
        let mut t = SparseStats {
            steps: vec![Default::default(); self.n_steps],
            ..SparseStats::default()
        };
        for p in &self.phases {
            t.add(p);
        }
        Ok(t)
    }

    /// Merged figures of the phases not marked in `warm` (the headline: warm-up left out).
    fn headline(&self, warm: &[bool]) -> SparseStats {
        let mut t = SparseStats {
            steps: vec![Default::default(); self.n_steps],
            ..SparseStats::default()
        };
        for (i, p) in self.phases.iter().enumerate() {
            if !warm.get(i).copied().unwrap_or(false) {
                t.add(p);
            }
        }
        t
    }

    /// A live view of the run so far.
    pub fn snapshot(&self, elapsed_s: f64) -> Result<LiveSnapshot, MergeError> {
        let t = self.totals()?;
        let [p50_us, p99_us] = t.response.values_at_quantiles([0.50, 0.99]);
        Ok(LiveSnapshot {
            elapsed_s,
            planned_so_far: self.planned_so_far(),
            completed: t.counters.requests_completed,
            failed: t.counters.requests_failed,
            // Before the first interval closes, the average so far (not a misleading 0).
            rps: self.closed.last().map_or_else(
                || t.counters.requests_completed as f64 / elapsed_s.max(1e-3),
                |row| row.rps,
            ),
            p50_us,
            p99_us,
            active_agents: self.agents.iter().filter(|a| !a.lost).count() as u32,
            errors: t.counters.errors.clone(),
            busiest_agent: self.busiest_agent(),
            target_cpu_cores: None,
        })
    }

    /// Builds the final report. `meta` carries what the accumulator does not know.
    pub fn finish(mut self, scenario: &Scenario, meta: ReportMeta) -> Result<Report, MergeError> {
        self.close_through(None)?;
        if let Some(last) = self.closed.last().map(|r| r.interval) {
            self.windows.finish(last);
        }
        let timeline = std::mem::take(&mut self.closed);
        let mut report = self.build(scenario, meta, timeline, false)?;
        // The default error verdict, unless the user wrote a run-wide error_rate threshold.
        if let (Some(limit), Ok(ts)) = (scenario.max_error_rate(), scenario.parsed_thresholds()) {
            if !ts.iter().any(|t| t.is_run_error_rate()) {
                let t = crate::threshold::Threshold::default_error_rate(limit);
                report.thresholds.push(t.evaluate(&report));
            }
        }
        report.judge_delivery();
        report.judge_shortfall(scenario.max_dropped());
        resources::name_generator_limit(&mut report);
        let agents: Vec<String> = self.agents.iter().map(|a| a.id.clone()).collect();
        // A secret source's values never reach a report, whoever sent them.
        report.failure_samples = self.samples.report(&scenario.step_names(), &agents, |src| {
            scenario
                .data
                .get(src)
                .filter(|d| d.secret.is_none())
                .map(|d| d.columns.as_slice())
        });
        Ok(report)
    }

    /// A report of the run so far, `elapsed_s` after T0, for live threshold evaluation
    /// (`abort_on_fail`). It has no timeline, and "planned" means planned *so far*: the
    /// sessions the agents have dispatched up to now (times requests per session), less the
    /// requests still in flight, so `throughput >= 99% planned` compares what finished with
    /// what could have finished. Throughputs divide by the time elapsed (within each phase).
    pub fn live_report(&self, scenario: &Scenario, elapsed_s: f64) -> Result<Report, MergeError> {
        let meta = ReportMeta {
            duration_s: elapsed_s,
            ..ReportMeta::default()
        };
        self.build(scenario, meta, Vec::new(), true)
    }
}

#[cfg(test)]
mod tests;
