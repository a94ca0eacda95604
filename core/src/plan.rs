//! The run plan: the whole-test schedule cut into shards, with planned counts per agent and
//! phase. Computed by the controller before a run, and checked again by each agent.
//!
//! Load models: a `constant` load is the schedule of one synthetic phase at its rate, so its
//! slots are sharded exactly like arrivals; a `closed` load has no schedule (its synthetic
//! phase has rate 0), so it plans 0 sessions and the report counts planned = started. The
//! connections of both are split with [`crate::shard::split_evenly`] ([`Plan::connections`]).

use serde::{Deserialize, Serialize};

use crate::scenario::Scenario;
use crate::schedule::Schedule;
use crate::shard::{Shard, ShardError, ShardMap};

/// The longest a constant-rate pool goes on starting the slots still queued after its
/// schedule has ended (its request timeout, when that is shorter). A queued slot started
/// later than that is late by more than a request timeout and can only show the backlog,
/// which the dropped count shows as well; against a target that hangs, a pool would
/// otherwise serve its queue a few connections per timeout for as long as the queue lasts.
pub const LATE_START_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long past the run's length and one worst-case session the controller waits for an
/// agent to finish before it counts the agent lost: [`LATE_START_LIMIT`], in which a pool
/// may still start a session, and five seconds for its last reports to arrive.
pub const FINISH_MARGIN: std::time::Duration =
    std::time::Duration::from_secs(LATE_START_LIMIT.as_secs() + 5);

/// Planned sessions per agent and phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Agents the run is cut into (shards).
    pub agents: u32,
    /// The run's seed; with several workloads each derives its own from it and its name.
    pub seed: u64,
    /// `sessions[agent][phase]`: planned sessions (global phase indexes, workload after
    /// workload).
    pub sessions: Vec<Vec<u64>>,
    /// `requests[agent][phase]`: the requests those sessions send (each session type's
    /// count times its requests).
    pub requests: Vec<Vec<u64>>,
    /// `types[agent][type]`: planned sessions per session type (global type indexes).
    pub types: Vec<Vec<u64>>,
    /// Per phase, the requests of one of its sessions, weighted by the mix: how live views
    /// turn sessions started so far into requests, and how closed loads plan.
    pub per_session: Vec<f64>,
}

impl Plan {
    /// Cuts each workload's phase index ranges into shards by arithmetic, and each agent's
    /// arrivals into session types by its mix: the cost depends on the number of phases,
    /// types and agents, never on the number of arrivals.
    pub fn new(
        scenario: &Scenario,
        agents: u32,
        weights: &[u32],
        seed: u64,
    ) -> Result<Self, ShardError> {
        ShardMap::new(agents, weights)?;
        let views = scenario.workload_views();
        let n_phases: usize = views.iter().map(|w| w.phase_count()).sum();
        let n_types: usize = views.iter().map(|w| w.types.len()).sum();
        let mut plan = Self {
            agents,
            seed,
            sessions: vec![vec![0u64; n_phases]; agents as usize],
            requests: vec![vec![0u64; n_phases]; agents as usize],
            types: vec![vec![0u64; n_types]; agents as usize],
            per_session: Vec::with_capacity(n_phases),
        };
        let several = scenario.named_workloads();
        for w in &views {
            let schedule = Schedule::new(
                &w.effective_phases(false),
                scenario.arrival,
                w.seed(seed, several),
            );
            let ranges = schedule.phase_ranges();
            let shards = w.shards(agents);
            let map = ShardMap::new(shards, weights.get(..shards as usize).unwrap_or_default())?;
            let mix = w.mix();
            let requests: Vec<u64> = w.types.iter().map(|t| t.requests()).collect();
            let weight: u64 = w.types.iter().map(|t| u64::from(t.weight)).sum();
            let mean = w
                .types
                .iter()
                .zip(&requests)
                .map(|(t, r)| f64::from(t.weight) * *r as f64)
                .sum::<f64>()
                / weight.max(1) as f64;
            plan.per_session
                .extend(std::iter::repeat_n(mean, w.phase_count()));
            let mut below = map.owned_below(ranges.first().map_or(0, |r| r.start));
            // Each agent's own arrivals so far in this workload: its position in the mix.
            let mut done = vec![0u64; agents as usize];
            for (p, range) in ranges.iter().enumerate() {
                let upto = map.owned_below(range.end);
                for (agent, (hi, lo)) in upto.iter().zip(&below).enumerate() {
                    let n = hi - lo;
                    let counts =
                        mix.counts(mix.offset(agent as u64, u64::from(shards)) + done[agent], n);
                    done[agent] += n;
                    plan.sessions[agent][w.phase_base + p] = n;
                    plan.requests[agent][w.phase_base + p] = counts
                        .iter()
                        .zip(&requests)
                        .fold(0u64, |a, (c, r)| a.saturating_add(c.saturating_mul(*r)));
                    for (t, c) in counts.iter().enumerate() {
                        plan.types[agent][w.type_base + t] += c;
                    }
                }
                below = upto;
            }
        }
        Ok(plan)
    }

    /// Planned sessions of one shard, per phase: the same arithmetic as [`Plan::new`] for one
    /// agent, which checks its assignment against it and counts what a stop leaves undone.
    pub fn shard_sessions(
        scenario: &Scenario,
        shard: &Shard,
        seed: u64,
    ) -> Result<Vec<u64>, ShardError> {
        ShardMap::new(shard.count, &shard.weights)?;
        let me = shard.index as usize;
        if me >= shard.count as usize {
            return Err(ShardError::IndexOutOfRange {
                index: shard.index,
                count: shard.count,
            });
        }
        let several = scenario.named_workloads();
        let mut out = Vec::new();
        for w in scenario.workload_views() {
            let shards = w.shards(shard.count);
            let ranges = Schedule::new(
                &w.effective_phases(false),
                scenario.arrival,
                w.seed(seed, several),
            )
            .phase_ranges();
            if me >= shards as usize {
                out.extend(std::iter::repeat_n(0, ranges.len()));
                continue;
            }
            let weights = shard.weights.get(..shards as usize).unwrap_or_default();
            let map = ShardMap::new(shards, weights)?;
            out.extend(
                ranges
                    .iter()
                    .map(|r| map.owned_below(r.end)[me] - map.owned_below(r.start)[me]),
            );
        }
        Ok(out)
    }

    /// Connections per agent for a closed or constant load (empty for arrival phases):
    /// counts differ by at most one.
    pub fn connections(scenario: &Scenario, agents: u32) -> Vec<u64> {
        let mut out = Vec::new();
        for w in scenario.workload_views() {
            if let Some(l) = w.load {
                let split = crate::shard::split_evenly(u64::from(l.connections), agents);
                out.resize(split.len(), 0);
                for (o, c) in out.iter_mut().zip(split) {
                    *o += c;
                }
            }
        }
        out
    }

    /// Planned sessions per phase, all agents together.
    pub fn sessions_per_phase(&self) -> Vec<u64> {
        let phases = self.sessions.first().map_or(0, Vec::len);
        (0..phases)
            .map(|p| self.sessions.iter().map(|a| a[p]).sum())
            .collect()
    }

    /// Planned sessions of one agent, all phases.
    pub fn agent_sessions(&self, agent: usize) -> u64 {
        self.sessions.get(agent).map_or(0, |a| a.iter().sum())
    }

    /// Planned sessions, every agent and phase together.
    pub fn total_sessions(&self) -> u64 {
        self.sessions.iter().flatten().sum()
    }

    /// Planned requests, every agent and phase together (saturating).
    pub fn total_requests(&self) -> u64 {
        self.requests
            .iter()
            .flatten()
            .fold(0u64, |a, r| a.saturating_add(*r))
    }

    /// Planned requests of one agent, all phases.
    pub fn agent_requests(&self, agent: usize) -> u64 {
        self.requests
            .get(agent)
            .map_or(0, |a| a.iter().fold(0u64, |x, r| x.saturating_add(*r)))
    }

    /// Planned requests per phase, all agents together.
    pub fn requests_per_phase(&self) -> Vec<u64> {
        let phases = self.requests.first().map_or(0, Vec::len);
        (0..phases)
            .map(|p| {
                self.requests
                    .iter()
                    .fold(0u64, |a, r| a.saturating_add(r[p]))
            })
            .collect()
    }

    /// Planned sessions per session type, all agents together.
    pub fn sessions_per_type(&self) -> Vec<u64> {
        let types = self.types.first().map_or(0, Vec::len);
        (0..types)
            .map(|t| self.types.iter().map(|a| a[t]).sum())
            .collect()
    }

    /// `sessions` started in phase `phase` as requests (live views and closed loads).
    pub fn requests_of(&self, phase: usize, sessions: u64) -> u64 {
        let per = self.per_session.get(phase).copied().unwrap_or(0.0);
        (sessions as f64 * per).round().min(u64::MAX as f64) as u64
    }
}
