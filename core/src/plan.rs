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

/// Planned sessions per agent and phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub agents: u32,
    pub seed: u64,
    /// `sessions[agent][phase]`: planned sessions.
    pub sessions: Vec<Vec<u64>>,
    pub requests_per_session: u64,
}

impl Plan {
    /// Cuts each phase's index range into shards by arithmetic: the cost depends on the
    /// number of phases and agents, never on the number of arrivals.
    pub fn new(
        scenario: &Scenario,
        agents: u32,
        weights: &[u32],
        seed: u64,
    ) -> Result<Self, ShardError> {
        let map = ShardMap::new(agents, weights)?;
        let phases = scenario.effective_phases();
        let schedule = Schedule::new(&phases, scenario.arrival, seed);
        let ranges = schedule.phase_ranges();
        let mut sessions = vec![vec![0u64; phases.len()]; agents as usize];
        let mut below = map.owned_below(ranges.first().map_or(0, |r| r.start));
        for (p, range) in ranges.iter().enumerate() {
            let upto = map.owned_below(range.end);
            for (agent, (hi, lo)) in upto.iter().zip(&below).enumerate() {
                sessions[agent][p] = hi - lo;
            }
            below = upto;
        }
        Ok(Self {
            agents,
            seed,
            sessions,
            requests_per_session: scenario.requests_per_session(),
        })
    }

    /// Planned sessions of one shard, per phase: the same arithmetic as [`Plan::new`] for one
    /// agent, which checks its assignment against it and counts what a stop leaves undone.
    pub fn shard_sessions(
        scenario: &Scenario,
        shard: &Shard,
        seed: u64,
    ) -> Result<Vec<u64>, ShardError> {
        let map = ShardMap::new(shard.count, &shard.weights)?;
        let me = shard.index as usize;
        if me >= shard.count as usize {
            return Err(ShardError::IndexOutOfRange {
                index: shard.index,
                count: shard.count,
            });
        }
        let schedule = Schedule::new(&scenario.effective_phases(), scenario.arrival, seed);
        Ok(schedule
            .phase_ranges()
            .iter()
            .map(|r| map.owned_below(r.end)[me] - map.owned_below(r.start)[me])
            .collect())
    }

    /// Connections per agent for a closed or constant load (empty for arrival phases):
    /// counts differ by at most one.
    pub fn connections(scenario: &Scenario, agents: u32) -> Vec<u64> {
        scenario.load.as_ref().map_or_else(Vec::new, |l| {
            crate::shard::split_evenly(u64::from(l.connections), agents)
        })
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

    pub fn total_sessions(&self) -> u64 {
        self.sessions.iter().flatten().sum()
    }

    pub fn total_requests(&self) -> u64 {
        self.total_sessions()
            .saturating_mul(self.requests_per_session)
    }
}
