//! The port budget (design.md §3.7): before a run, the peak number of connections each agent
//! holds open at once to each target ip:port, checked against the agent's ephemeral port range
//! times its number of source addresses. A run that cannot fit is refused before any load is
//! sent, with the number of agents it would need.
//!
//! Every connection from one source address to one destination ip:port needs its own local
//! port, so an agent can hold at most `ephemeral ports × source addresses` connections to one
//! target at once. How many it holds:
//!
//! - **closed** load: its share of `connections` (one each, for the whole run);
//! - **constant** load: its share of the pool's `connections`;
//! - **arrival phases**: every session holds one connection (a `new_connection` step replaces
//!   it; it never holds two) for at most the worst-case session length — every request taking
//!   the full `request_timeout`, every think time at its maximum. The bound is the largest
//!   number of the agent's own arrivals within any window of that length, walking the exact
//!   (seeded) schedule, and never more than the agent's session capacity.
//!
//! **TIME_WAIT.** The agent closes its connections first, so the agent's side keeps each
//! closed connection in TIME_WAIT (60 s on Linux), and a port in TIME_WAIT to the same
//! ip:port is not free for a new connect unless `net.ipv4.tcp_tw_reuse` allows it (the
//! default, 2, allows it on loopback only). This check counts concurrent connections only: a
//! run that opens new connections faster than `ports × source addresses / 60 s` per agent
//! (one-request sessions at high rates, `new_connection: true`) also needs `tcp_tw_reuse=1`,
//! more source addresses or more agents — or it fails at run time with `addr_not_available`.

use std::collections::VecDeque;
use std::time::Duration;

use crate::scenario::{Scenario, ThinkTime};
use crate::schedule::Schedule;
use crate::shard::{split_evenly, ShardError, ShardMap};

/// What one agent has to spend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPorts {
    pub id: String,
    /// Ports in its ephemeral range (`high − low + 1`); 0 when unknown (not checked).
    pub ephemeral_ports: u32,
    /// Local source addresses it binds from (at least 1).
    pub source_addresses: u32,
}

impl AgentPorts {
    /// Connections it can hold open to one ip:port at once; `None` when unknown.
    pub fn budget(&self) -> Option<u64> {
        (self.ephemeral_ports > 0)
            .then(|| u64::from(self.ephemeral_ports) * u64::from(self.source_addresses.max(1)))
    }
}

/// Peak concurrent connections per agent to one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demand {
    /// `host:port`.
    pub target: String,
    /// `per_agent[shard]`.
    pub per_agent: Vec<u64>,
}

/// A run that does not fit its agents' ports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortBudgetError {
    #[error(
        "port budget: needs {needed} concurrent connections to {target} per agent but agent {agent} has {ports} ephemeral ports × {sources} source address{plural}; this run needs at least {agents_needed} agents (or more source addresses per agent: stampede agent --source-ips)"
    )]
    Exceeded {
        target: String,
        needed: u64,
        agent: String,
        ports: u32,
        sources: u32,
        plural: &'static str,
        agents_needed: u64,
    },
    #[error(transparent)]
    Shard(#[from] ShardError),
}

/// `host:port` of an `http://` or `https://` target URL (default ports 80 and 443).
pub fn endpoint(url: &str) -> Option<String> {
    let (rest, port) = match url.strip_prefix("http://") {
        Some(r) => (r, 80),
        None => (url.strip_prefix("https://")?, 443),
    };
    let authority = rest.split('/').next().filter(|a| !a.is_empty())?;
    let has_port = match authority.rfind(']') {
        Some(close) => authority[close..].contains(':'),
        None => authority.contains(':'),
    };
    Some(if has_port {
        authority.to_string()
    } else {
        format!("{authority}:{port}")
    })
}

/// The longest one session can hold its connection: every request taking the whole
/// `request_timeout`, every think time at its maximum.
pub fn worst_case_session(scenario: &Scenario) -> Duration {
    let timeout = scenario.request_timeout.0;
    scenario
        .session
        .iter()
        .map(|s| match s.think_time {
            Some(ThinkTime::Fixed(d)) => d.0,
            Some(ThinkTime::Range { max, .. }) => max.0,
            None => timeout * s.repeat(),
        })
        .sum()
}

/// Peak concurrent connections of each of `agents` agents to each target of the scenario.
/// `capacities[shard]` is the most sessions that agent runs at once (missing: no cap).
pub fn demand(
    scenario: &Scenario,
    agents: u32,
    seed: u64,
    capacities: &[u32],
) -> Result<Vec<Demand>, ShardError> {
    let Some(target) = scenario.target.as_deref().and_then(endpoint) else {
        return Ok(Vec::new());
    };
    let per_agent = match &scenario.load {
        Some(load) => split_evenly(u64::from(load.connections), agents),
        None => arrival_peaks(scenario, agents, seed, worst_case_session(scenario))?
            .into_iter()
            .enumerate()
            .map(|(i, p)| capacities.get(i).map_or(p, |&c| p.min(u64::from(c.max(1)))))
            .collect(),
    };
    Ok(vec![Demand { target, per_agent }])
}

/// For each agent, the most of its arrivals within any window of length `hold`.
fn arrival_peaks(
    scenario: &Scenario,
    agents: u32,
    seed: u64,
    hold: Duration,
) -> Result<Vec<u64>, ShardError> {
    let map = ShardMap::new(agents, &[])?;
    let schedule = Schedule::new(&scenario.effective_phases(), scenario.arrival, seed);
    let hold_ns = u64::try_from(hold.as_nanos()).unwrap_or(u64::MAX);
    let mut windows: Vec<VecDeque<u64>> = vec![VecDeque::new(); agents as usize];
    let mut peaks = vec![0u64; agents as usize];
    for a in schedule.iter() {
        let k = map.owner(a.index) as usize;
        let w = &mut windows[k];
        // A session that arrived at t holds its connection until at most t + hold.
        while w
            .front()
            .is_some_and(|&t| t.saturating_add(hold_ns) <= a.at_ns)
        {
            w.pop_front();
        }
        w.push_back(a.at_ns);
        peaks[k] = peaks[k].max(w.len() as u64);
    }
    Ok(peaks)
}

/// Checks every demand against the agents (in shard order). The error names the first agent
/// that cannot fit and how many agents the run would need.
pub fn check(demands: &[Demand], agents: &[AgentPorts]) -> Result<(), PortBudgetError> {
    for d in demands {
        for (need, agent) in d.per_agent.iter().zip(agents) {
            let Some(budget) = agent.budget() else {
                continue;
            };
            if *need > budget {
                let total: u64 = d.per_agent.iter().sum();
                let sources = agent.source_addresses.max(1);
                return Err(PortBudgetError::Exceeded {
                    target: d.target.clone(),
                    needed: *need,
                    agent: agent.id.clone(),
                    ports: agent.ephemeral_ports,
                    sources,
                    plural: if sources == 1 { "" } else { "es" },
                    agents_needed: total.div_ceil(budget).max(d.per_agent.len() as u64 + 1),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(body: &str) -> Scenario {
        Scenario::from_yaml(&format!(
            "name: p\ntarget: http://127.0.0.1:8080\n{body}session:\n  - http: {{ path: / }}\n"
        ))
        .unwrap()
    }

    fn agents(n: usize, ports: u32, sources: u32) -> Vec<AgentPorts> {
        (0..n)
            .map(|i| AgentPorts {
                id: format!("a-{}", i + 1),
                ephemeral_ports: ports,
                source_addresses: sources,
            })
            .collect()
    }

    #[test]
    fn endpoints() {
        assert_eq!(
            endpoint("http://127.0.0.1:8080/x").as_deref(),
            Some("127.0.0.1:8080")
        );
        assert_eq!(endpoint("http://svc").as_deref(), Some("svc:80"));
        assert_eq!(endpoint("https://svc/").as_deref(), Some("svc:443"));
        assert_eq!(endpoint("http://[::1]").as_deref(), Some("[::1]:80"));
        assert_eq!(endpoint("http://[::1]:9").as_deref(), Some("[::1]:9"));
        assert_eq!(endpoint("ftp://x"), None);
    }

    #[test]
    fn closed_load_needs_its_share_and_names_the_agents_needed() {
        let s = scenario("load: { model: closed, connections: 100000, duration: 5s }\n");
        let d = demand(&s, 1, 0, &[]).unwrap();
        assert_eq!(d[0].per_agent, vec![100_000]);
        let e = check(&d, &agents(1, 28_232, 1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "port budget: needs 100000 concurrent connections to 127.0.0.1:8080 per agent but agent a-1 has 28232 ephemeral ports × 1 source address; this run needs at least 4 agents (or more source addresses per agent: stampede agent --source-ips)"
        );
        // Four agents fit; so does one with four source addresses.
        let d4 = demand(&s, 4, 0, &[]).unwrap();
        assert_eq!(d4[0].per_agent, vec![25_000; 4]);
        assert!(check(&d4, &agents(4, 28_232, 1)).is_ok());
        assert!(check(&d, &agents(1, 28_232, 4)).is_ok());
        // An unknown range is not checked.
        assert!(check(&d, &agents(1, 0, 1)).is_ok());
    }

    #[test]
    fn constant_load_needs_its_pool_share() {
        let s = scenario("load: { model: constant, rate: 100, connections: 7, duration: 5s }\n");
        assert_eq!(demand(&s, 2, 0, &[]).unwrap()[0].per_agent, vec![4, 3]);
    }

    #[test]
    fn arrivals_hold_a_connection_for_the_worst_case_session() {
        // 1000/s with a 2 s timeout: at most 2000 sessions within any 2 s window.
        let s =
            scenario("phases:\n  - { duration: 10s, arrival_rate: 1000 }\nrequest_timeout: 2s\n");
        assert_eq!(worst_case_session(&s), Duration::from_secs(2));
        let d = demand(&s, 1, 0, &[]).unwrap();
        assert_eq!(d[0].per_agent, vec![2000]);
        // Two agents share the arrivals exactly.
        assert_eq!(
            demand(&s, 2, 0, &[1_000_000, 1_000_000]).unwrap()[0].per_agent,
            vec![1000, 1000]
        );
        // Capped by what the agent runs at once (more arrivals are dropped, not connected).
        assert_eq!(demand(&s, 1, 0, &[500]).unwrap()[0].per_agent, vec![500]);
        // Capped by the sessions planned: a short phase plans fewer than the window holds.
        let short =
            scenario("phases:\n  - { duration: 1s, arrival_rate: 1000 }\nrequest_timeout: 10s\n");
        assert_eq!(demand(&short, 1, 0, &[]).unwrap()[0].per_agent, vec![1000]);
        let e = check(&d, &agents(1, 1500, 1)).unwrap_err();
        assert!(e.to_string().contains("needs at least 2 agents"), "{e}");
    }

    #[test]
    fn think_time_and_repeats_lengthen_the_hold() {
        let s = Scenario::from_yaml(
            "name: p\ntarget: http://h:1\nphases:\n  - { duration: 1s, arrival_rate: 1 }\nrequest_timeout: 1s\nsession:\n  - http: { path: / }\n    repeat: 3\n  - think_time: { min: 1s, max: 4s }\n",
        )
        .unwrap();
        assert_eq!(worst_case_session(&s), Duration::from_secs(7));
    }
}
