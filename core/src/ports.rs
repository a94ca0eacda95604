//! The port budget (`docs/design.md`): before a run, the peak number of connections each agent
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
//!   it; it never holds two to one destination, and one more to each step's own `target:`)
//!   for at most the worst-case session length — every request taking
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

use std::time::Duration;

use crate::scenario::{Scenario, StepKind, ThinkTime};
use crate::schedule::Schedule;
use crate::shard::{split_evenly, ShardError};

/// What one agent has to spend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPorts {
    /// The agent's id, as it registered.
    pub id: String,
    /// Ports in its ephemeral range (`high − low + 1`); 0 when unknown (not checked).
    pub ephemeral_ports: u32,
    /// Local source addresses it binds from (at least 1).
    pub source_addresses: u32,
    /// The source address it connects from (its pod IP, or the address the controller sees).
    /// Agents with the same `host` share one port range: six agent processes on one machine
    /// have the ports of one address, not six. Empty: the agent is counted on its own.
    pub host: String,
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
    /// The agents sharing one source address need more connections to one destination at once than
    /// its ports allow.
    #[error(
        "port budget: needs {needed} concurrent connections to {target} from {origin} but it has {ports} ephemeral ports × {sources} source address{plural} = {budget} per destination; this run needs at least {agents_needed} agents with their own source address (or more source addresses per agent: stampede agent --source-ips)"
    )]
    Exceeded {
        /// The destination, `host:port`.
        target: String,
        /// Connections those agents hold open at once at their peak, together.
        needed: Thousands,
        /// Who connects from there: an agent, or a source address with the agents that share it.
        origin: String,
        /// Ports in the ephemeral range of the first of them.
        ports: Thousands,
        /// Its source addresses.
        sources: u32,
        /// `es` when there are several source addresses: the message's grammar.
        plural: &'static str,
        /// Connections the address can hold to one destination at once (the smallest budget among
        /// the agents sharing it).
        budget: Thousands,
        /// Agents with their own source address the whole demand needs (at least 2).
        agents_needed: u64,
    },
    /// The agents' shards cannot be cut.
    #[error(transparent)]
    Shard(#[from] ShardError),
}

/// A count printed with thousands separators (`28,232`), as people read port budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thousands(pub u64);

impl std::fmt::Display for Thousands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let digits = self.0.to_string();
        let mut out = String::with_capacity(digits.len() + digits.len() / 3);
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        f.write_str(&out)
    }
}

/// `host:port` of a target that spends local ports: `http://` and `https://` (default
/// ports 80 and 443), `tcp://` and `udp://` (a UDP socket connected to its target holds a
/// local port just like a TCP connection). `unix://` spends none.
pub fn endpoint(target: &crate::target::Target) -> Option<String> {
    target.socket_authority()
}

/// The longest one session can hold its connection: every request taking the whole
/// `request_timeout`, every think time at its maximum. Saturates instead of overflowing (a
/// valid scenario may ask for a year-long timeout times 2³² repeats).
pub fn worst_case_session(scenario: &Scenario) -> Duration {
    scenario
        .step_lists()
        .iter()
        .map(|(_, steps)| worst_case_steps(scenario, steps))
        .max()
        .unwrap_or_default()
}

/// The longest one session of these steps can hold its connection.
fn worst_case_steps(scenario: &Scenario, steps: &[crate::scenario::Step]) -> Duration {
    let timeout = scenario.request_timeout.0;
    steps
        .iter()
        .map(|s| match s.kind {
            StepKind::Think(ThinkTime::Fixed(d)) => d.0,
            StepKind::Think(ThinkTime::Range { max, .. }) => max.0,
            _ => timeout.saturating_mul(s.repeat()),
        })
        .fold(Duration::ZERO, Duration::saturating_add)
}

/// Peak concurrent connections of each of `agents` agents to each target of the scenario.
/// `capacities[shard]` is the most sessions that agent runs at once (missing: no cap).
/// Arithmetic over the phases: instant for any valid scenario.
pub fn demand(
    scenario: &Scenario,
    agents: u32,
    seed: u64,
    capacities: &[u32],
) -> Result<Vec<Demand>, ShardError> {
    if agents == 0 {
        return Err(ShardError::NoShards);
    }
    // Workloads add up per destination, as if they all peaked at once (conservative): the
    // arrival-phase sessions (capped by each agent's capacity, which they share), then the
    // closed and constant loads' connections. Each workload spends ports towards its own
    // target; the scenario's `endpoints:` split those of the scenario's target.
    let several = scenario.named_workloads();
    let mut groups: Vec<Group> = Vec::new();
    for w in scenario.workload_views() {
        // Where its sessions hold connections: its target, and each step's own target (a
        // session keeps one connection to each it calls, beside its own).
        let mut places: Vec<(String, bool)> = Vec::new();
        if let Some(target) = w.target.and_then(endpoint) {
            places.push((
                target,
                !w.own_target() || w.target == scenario.target.as_ref(),
            ));
        }
        for t in w
            .types
            .iter()
            .flat_map(|t| t.steps)
            .filter_map(|s| s.target.as_ref())
        {
            let top = scenario.target.as_ref() == Some(t);
            if let Some(place) = endpoint(t).filter(|p| !places.iter().any(|(q, _)| q == p)) {
                places.push((place, top));
            }
        }
        for (target, top) in places {
            add_demand(
                &mut groups,
                &w,
                (target, top),
                (scenario, agents, seed, several),
            );
        }
    }
    let mut out = Vec::new();
    for (target, top, sessions, pooled) in groups {
        let per_agent: Vec<u64> = pooled
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let open = capacities
                    .get(i)
                    .map_or(sessions, |&c| sessions.min(u64::from(c.max(1))));
                open.saturating_add(*p)
            })
            .collect();
        let n = scenario.endpoints.list().len();
        if n == 0 || !top {
            out.push(Demand { target, per_agent });
            continue;
        }
        // Several endpoints: each destination ip:port has its own ports, and connection `i`
        // goes to endpoint `i mod n`, so an agent holds at most ⌈its connections / n⌉ to each.
        out.extend(scenario.endpoints.list().iter().map(|e| Demand {
            target: e.clone(),
            per_agent: per_agent.iter().map(|p| p.div_ceil(n as u64)).collect(),
        }));
    }
    Ok(out)
}

/// Per destination: `host:port`, whether it is the scenario's target, the arrival sessions
/// and the pooled connections per agent.
type Group = (String, bool, u64, Vec<u64>);

/// Adds what workload `w` holds open at once towards `target` to its group.
fn add_demand(
    groups: &mut Vec<Group>,
    w: &crate::workload::View<'_>,
    (target, top): (String, bool),
    (scenario, agents, seed, several): (&Scenario, u32, u64, bool),
) {
    let g = match groups.iter().position(|g| g.0 == target) {
        Some(i) => &mut groups[i],
        None => {
            groups.push((target, top, 0, vec![0u64; agents as usize]));
            groups.last_mut().expect("just pushed")
        }
    };
    g.1 |= top;
    match w.load {
        Some(load) => {
            for (a, c) in
                g.3.iter_mut()
                    .zip(split_evenly(u64::from(load.connections), agents))
            {
                *a = a.saturating_add(c);
            }
        }
        None => {
            let schedule = Schedule::new(
                &w.effective_phases(false),
                scenario.arrival,
                w.seed(seed, several),
            );
            let hold = w
                .types
                .iter()
                .map(|t| worst_case_steps(scenario, t.steps))
                .max()
                .unwrap_or_default();
            let peak = schedule.peak_in_window(hold.as_secs_f64());
            // Arrival i goes to agent i mod n: any run of `peak` consecutive arrivals
            // gives one agent at most ⌈peak / n⌉ of them.
            g.2 = g.2.saturating_add(peak.div_ceil(u64::from(agents)));
        }
    }
}

/// Checks every demand against the agents (in shard order): the agents that share a source
/// address add up their needs against that address's ports. The error names the address,
/// the budget and how many agents with their own address the run would need.
pub fn check(demands: &[Demand], agents: &[AgentPorts]) -> Result<(), PortBudgetError> {
    for d in demands {
        let mut groups: Vec<(&str, u64, Vec<&AgentPorts>)> = Vec::new();
        for (need, agent) in d.per_agent.iter().zip(agents) {
            let key = if agent.host.is_empty() {
                agent.id.as_str()
            } else {
                agent.host.as_str()
            };
            match groups.iter_mut().find(|g| g.0 == key) {
                Some(g) => {
                    g.1 = g.1.saturating_add(*need);
                    g.2.push(agent);
                }
                None => groups.push((key, *need, vec![agent])),
            }
        }
        for (key, need, members) in groups {
            let Some(budget) = members.iter().filter_map(|a| a.budget()).min() else {
                continue;
            };
            if need <= budget {
                continue;
            }
            let first = members[0];
            let total: u64 = d.per_agent.iter().sum();
            let sources = first.source_addresses.max(1);
            let source = match (first.host.is_empty(), members.len()) {
                (true, _) => format!("agent {key}"),
                (false, 1) => format!("source address {key} (agent {})", first.id),
                (false, n) => format!("source address {key} ({n} agents share it)"),
            };
            return Err(PortBudgetError::Exceeded {
                target: d.target.clone(),
                needed: Thousands(need),
                origin: source,
                ports: Thousands(u64::from(first.ephemeral_ports)),
                sources,
                plural: if sources == 1 { "" } else { "es" },
                budget: Thousands(budget),
                agents_needed: total.div_ceil(budget).max(2),
            });
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
                host: format!("10.0.0.{}", i + 1),
            })
            .collect()
    }

    fn on_one_host(mut a: Vec<AgentPorts>) -> Vec<AgentPorts> {
        for x in &mut a {
            x.host = "127.0.0.1".into();
        }
        a
    }

    #[test]
    fn endpoints() {
        let t = |u: &str| crate::target::Target::parse(u).unwrap();
        assert_eq!(
            endpoint(&t("http://127.0.0.1:8080/x")).as_deref(),
            Some("127.0.0.1:8080")
        );
        assert_eq!(endpoint(&t("http://svc")).as_deref(), Some("svc:80"));
        assert_eq!(endpoint(&t("https://svc/")).as_deref(), Some("svc:443"));
        assert_eq!(endpoint(&t("http://[::1]")).as_deref(), Some("[::1]:80"));
        assert_eq!(endpoint(&t("http://[::1]:9")).as_deref(), Some("[::1]:9"));
        assert_eq!(endpoint(&t("tcp://h:7")).as_deref(), Some("h:7"));
        assert_eq!(endpoint(&t("udp://[::1]:53")).as_deref(), Some("[::1]:53"));
        assert_eq!(endpoint(&t("unix:///tmp/s")), None);
    }

    #[test]
    fn closed_load_needs_its_share_and_names_the_agents_needed() {
        let s = scenario("load: { model: closed, connections: 100000, duration: 5s }\n");
        let d = demand(&s, 1, 0, &[]).unwrap();
        assert_eq!(d[0].per_agent, vec![100_000]);
        let e = check(&d, &agents(1, 28_232, 1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "port budget: needs 100,000 concurrent connections to 127.0.0.1:8080 from source address 10.0.0.1 (agent a-1) but it has 28,232 ephemeral ports × 1 source address = 28,232 per destination; this run needs at least 4 agents with their own source address (or more source addresses per agent: stampede agent --source-ips)"
        );
        // Four agents fit; so does one with four source addresses.
        let d4 = demand(&s, 4, 0, &[]).unwrap();
        assert_eq!(d4[0].per_agent, vec![25_000; 4]);
        assert!(check(&d4, &agents(4, 28_232, 1)).is_ok());
        assert!(check(&d, &agents(1, 28_232, 4)).is_ok());
        // An unknown range is not checked.
        assert!(check(&d, &agents(1, 0, 1)).is_ok());
    }

    /// Each workload spends ports towards its own target; workloads naming the same one add
    /// up, and `endpoints:` split only the scenario's target.
    #[test]
    fn each_target_has_its_own_budget() {
        let s = Scenario::from_yaml(
            "name: p\ntarget: http://10.0.0.1:80\nendpoints: [\"10.0.0.5:80\", \"10.0.0.6:80\"]\nworkloads:\n\
             \x20 - { name: a, load: { model: closed, connections: 10, duration: 1s }, session: [ { http: { path: / } } ] }\n\
             \x20 - { name: b, target: \"tcp://10.0.0.2:7\", load: { model: closed, connections: 30, duration: 1s }, session: [ { tcp: { send: { text: hi }, framing: length_prefixed } } ] }\n\
             \x20 - { name: c, target: \"tcp://10.0.0.2:7\", load: { model: closed, connections: 4, duration: 1s }, session: [ { tcp: { send: { text: hi }, framing: length_prefixed } } ] }\n",
        )
        .unwrap();
        let d = demand(&s, 2, 0, &[]).unwrap();
        let got: Vec<(&str, &[u64])> = d
            .iter()
            .map(|d| (d.target.as_str(), d.per_agent.as_slice()))
            .collect();
        assert_eq!(
            got,
            [
                ("10.0.0.5:80", &[3, 3][..]),
                ("10.0.0.6:80", &[3, 3][..]),
                ("10.0.0.2:7", &[17, 17][..]),
            ]
        );
    }

    /// A session keeps a connection to each step's own target beside its workload's: each
    /// destination is counted the connections that hold one there, a step target named
    /// twice once.
    #[test]
    fn a_steps_own_target_is_a_destination_of_its_own() {
        let s = Scenario::from_yaml(
            "name: p\ntarget: http://10.0.0.1:80\nload: { model: closed, connections: 10, duration: 1s }\n\
             session:\n  - { target: \"http://10.0.0.9:8080\", http: { path: /login } }\n\
             \x20 - { http: { path: / } }\n  - { target: \"http://10.0.0.9:8080\", http: { path: /me } }\n",
        )
        .unwrap();
        let d = demand(&s, 2, 0, &[]).unwrap();
        let got: Vec<(&str, &[u64])> = d
            .iter()
            .map(|d| (d.target.as_str(), d.per_agent.as_slice()))
            .collect();
        assert_eq!(
            got,
            [("10.0.0.1:80", &[5, 5][..]), ("10.0.0.9:8080", &[5, 5][..])]
        );
    }

    /// With `endpoints:`, each endpoint is a destination of its own: 100,000 connections over
    /// four endpoints fit one agent's 28,232 ports, where one target would not.
    #[test]
    fn the_budget_is_checked_per_endpoint() {
        let s = Scenario::from_yaml(
            "name: p\ntarget: http://svc:8080\n\
             endpoints: [\"10.0.0.1:8080\", \"10.0.0.2:8080\", \"10.0.0.3:8080\", \"10.0.0.4:8080\"]\n\
             load: { model: closed, connections: 100001, duration: 5s }\nsession: [ { http: { path: / } } ]\n",
        )
        .unwrap();
        let d = demand(&s, 1, 0, &[]).unwrap();
        assert_eq!(d.len(), 4);
        assert_eq!(d[3].target, "10.0.0.4:8080");
        assert!(d.iter().all(|d| d.per_agent == vec![25_001]));
        assert!(check(&d, &agents(1, 28_232, 1)).is_ok());
        let e = check(&d, &agents(1, 20_000, 1)).unwrap_err().to_string();
        assert!(e.contains("to 10.0.0.1:8080"), "{e}");
    }

    #[test]
    fn agents_sharing_one_address_share_its_ports_for_every_transport() {
        for target in [
            "tcp://127.0.0.1:9",
            "udp://127.0.0.1:9",
            "http://127.0.0.1:9",
        ] {
            let step = match &target[..3] {
                "tcp" => "tcp: { send: { text: ping }, framing: length_prefixed }",
                "udp" => "udp: { send: { text: ping } }",
                _ => "http: { path: / }",
            };
            let s = Scenario::from_yaml(&format!(
                "name: p\ntarget: {target}\nload: {{ model: closed, connections: 60000, duration: 10s }}\nsession:\n  - {step}\n"
            ))
            .unwrap();
            let d = demand(&s, 6, 0, &[]).unwrap();
            assert_eq!(d[0].per_agent, vec![10_000; 6]);
            // Six agents with their own addresses fit; the same six on one address do not.
            assert!(check(&d, &agents(6, 28_232, 1)).is_ok());
            let e = check(&d, &on_one_host(agents(6, 28_232, 1)))
                .unwrap_err()
                .to_string();
            assert!(e.contains("needs 60,000 concurrent connections to 127.0.0.1:9 from source address 127.0.0.1 (6 agents share it)"), "{e}");
            assert!(
                e.contains("28,232 per destination") && e.contains("at least 3 agents"),
                "{e}"
            );
        }
    }

    #[test]
    fn demand_is_arithmetic_even_for_a_year_at_the_maximum_rate() {
        let s = scenario(
            "phases:\n  - { duration: 527040m, arrival_rate: 10000000 }\nrequest_timeout: 20s\n",
        );
        let d = demand(&s, 4, 0, &[]).unwrap();
        assert_eq!(d[0].per_agent, vec![50_000_000; 4]);
    }

    #[test]
    fn a_ramp_peaks_where_the_rate_is_highest() {
        // 0 → 1000/s over 10 s, then 10 s at 100/s; a 1 s window peaks at the ramp's end:
        // Λ(10) − Λ(9) = 950.
        let s = scenario(
            "phases:\n  - { duration: 10s, arrival_rate: 0, ramp_to: 1000 }\n  - { duration: 10s, arrival_rate: 100 }\nrequest_timeout: 1s\n",
        );
        assert_eq!(demand(&s, 1, 0, &[]).unwrap()[0].per_agent, vec![950]);
    }

    #[test]
    fn worst_case_session_saturates() {
        let steps: String = (0..200)
            .map(|_| "  - http: { path: / }\n    repeat: 4294967295\n".to_string())
            .collect();
        let s = Scenario::from_yaml(&format!(
            "name: p\ntarget: http://h:1\nphases:\n  - {{ duration: 1s, arrival_rate: 1 }}\nrequest_timeout: 527040m\nsession:\n{steps}"
        ));
        if let Ok(s) = s {
            assert_eq!(worst_case_session(&s), Duration::MAX);
        }
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
