//! `stampede plan`: the dry run. What a scenario would ask of each agent and of each source
//! address's ports, and whether the controller would refuse it — without sending any load.
//!
//! Everything is arithmetic over the phases (`core::plan`, `core::ports`), so the answer is
//! instant and small for any valid scenario, 10/s for a minute or 1e7/s for a year.

use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;
use stampede_core::plan::Plan;
use stampede_core::ports::{self, AgentPorts, Thousands};
use stampede_core::Scenario;

/// Linux's default ephemeral range, 32768–60999, when this machine's cannot be read.
const DEFAULT_EPHEMERAL_PORTS: u32 = 28_232;
/// Above this many agent × phase cells, the JSON leaves the full share matrix out (the
/// per-phase minimum and maximum say the same for equal shares, which differ by at most one).
const MAX_SHARE_CELLS: usize = 100_000;

/// Options of `stampede plan`.
#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// The scenario file.
    pub scenario: PathBuf,
    /// Agents to plan for (default: the scenario's `agents`, else 1).
    #[arg(long)]
    pub agents: Option<u32>,
    /// The source addresses the agents connect from, handed to the agents in turn; `each` when
    /// every agent has its own (agent pods). Default: one address shared by all agents (one
    /// machine, or `run --local`), which is what their ports allow there.
    #[arg(long, value_delimiter = ',')]
    pub source_ips: Vec<String>,
    /// Ephemeral ports per source address (default: this machine's
    /// net.ipv4.ip_local_port_range, else 28,232).
    #[arg(long)]
    pub ephemeral_ports: Option<u32>,
    /// Sessions one agent runs at once (`stampede agent --capacity`).
    #[arg(long, default_value_t = 10_000)]
    pub capacity: u32,
    /// `text` or `json`.
    #[arg(long, default_value = "text")]
    pub output: String,
}

/// The plan, as `--output json` prints it.
#[derive(Debug, Serialize)]
pub struct PlanReport {
    /// The scenario's `name`.
    pub scenario: String,
    /// Agents the run would be sharded over.
    pub agents: u32,
    /// The scenario's length, in seconds.
    pub duration_s: f64,
    /// Sessions the schedule starts over the whole run.
    pub sessions: u64,
    /// Requests those sessions would send, if each runs to its end.
    pub requests: u64,
    /// The schedule, phase by phase.
    pub phases: Vec<PhasePlan>,
    /// `shares[agent][phase]`: planned sessions; left out for very large plans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shares: Option<Vec<Vec<u64>>>,
    /// Peak concurrent connections expected per agent to the target (empty: none, e.g. unix).
    pub peak_connections_per_agent: Vec<u64>,
    /// The target's host and port; `None` for a Unix socket.
    pub target: Option<String>,
    /// The port budget per source address, since each connection holds a local port.
    pub budget: Vec<AddressBudget>,
    /// Why the controller would refuse the run; empty when it would run.
    pub refusals: Vec<String>,
    /// Where the agents' slots (their capacity, a constant load's connections) cannot carry
    /// the plan, or carry it only if sessions stay within a latency budget shorter than the
    /// request timeout; a run that then drops sessions ends `incomplete`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The share of the planned sessions the slots can start at all, from the think times
    /// alone (1 when they fit).
    pub deliverable: f64,
}

/// One phase of the schedule and how evenly its sessions split across agents.
#[derive(Debug, Serialize)]
pub struct PhasePlan {
    /// The phase's `name`, or `phase-N` (from 1).
    pub name: String,
    /// When the phase starts, in seconds from T0.
    pub start_s: f64,
    /// The phase's length, in seconds.
    pub duration_s: f64,
    /// Sessions the phase starts, all agents together.
    pub sessions: u64,
    /// The fewest of them any one agent starts.
    pub per_agent_min: u64,
    /// The most of them any one agent starts.
    pub per_agent_max: u64,
}

/// The port budget of one source address towards the target.
#[derive(Debug, Serialize)]
pub struct AddressBudget {
    /// The host the agents send from: agents on one host share its local ports.
    pub source: String,
    /// Agents that send from it.
    pub agents: u32,
    /// Local ports its agents' peak connections need together.
    pub needed: u64,
    /// Local ports one source address has (the ephemeral range).
    pub ports: u64,
    /// Whether `needed` fits in `ports`.
    pub fits: bool,
}

/// Builds the plan of `scenario` for the given options.
pub fn plan(scenario: &Scenario, args: &PlanArgs) -> Result<PlanReport> {
    let agents = args.agents.or(scenario.agents).unwrap_or(1);
    if agents == 0 || agents > stampede_core::scenario::MAX_AGENTS {
        anyhow::bail!(
            "--agents: must be between 1 and {}",
            stampede_core::scenario::MAX_AGENTS
        );
    }
    let seed = scenario.seed.unwrap_or(0);
    let p = Plan::new(scenario, agents, &[], seed)?;
    let phase_defs = scenario.effective_phases();
    let starts = scenario.phase_starts();
    let phases = phase_defs
        .iter()
        .enumerate()
        .map(|(i, ph)| {
            let col = p.sessions.iter().map(|a| a[i]);
            PhasePlan {
                name: ph.display_name(i),
                start_s: starts.get(i).copied().unwrap_or(0.0),
                duration_s: ph.duration.as_secs_f64(),
                sessions: col.clone().sum(),
                per_agent_min: col.clone().min().unwrap_or(0),
                per_agent_max: col.max().unwrap_or(0),
            }
        })
        .collect();
    let ports_each = args.ephemeral_ports.unwrap_or_else(local_ephemeral_ports);
    let capacities = vec![args.capacity; agents as usize];
    let demands = ports::demand(scenario, agents, seed, &capacities)?;
    let hosts: Vec<String> = (0..agents as usize)
        .map(|i| match args.source_ips.as_slice() {
            [] => "this host".to_string(),
            [each] if each == "each" => format!("agent-{}", i + 1),
            ips => ips[i % ips.len()].clone(),
        })
        .collect();
    let agent_ports: Vec<AgentPorts> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| AgentPorts {
            id: format!("agent-{}", i + 1),
            ephemeral_ports: ports_each,
            source_addresses: 1,
            host: h.clone(),
        })
        .collect();
    let mut budget = Vec::new();
    let mut refusals = Vec::new();
    let (target, peaks) = match demands.first() {
        Some(d) => {
            let mut seen: Vec<&str> = Vec::new();
            for h in &hosts {
                if seen.contains(&h.as_str()) {
                    continue;
                }
                seen.push(h);
                let (n, needed) = hosts
                    .iter()
                    .zip(&d.per_agent)
                    .filter(|(x, _)| *x == h)
                    .fold((0u32, 0u64), |(n, s), (_, need)| {
                        (n + 1, s.saturating_add(*need))
                    });
                budget.push(AddressBudget {
                    source: h.clone(),
                    agents: n,
                    needed,
                    ports: u64::from(ports_each),
                    fits: needed <= u64::from(ports_each),
                });
            }
            if let Err(e) = ports::check(&demands, &agent_ports) {
                refusals.push(e.to_string());
            }
            (Some(d.target.clone()), d.per_agent.clone())
        }
        None => (None, Vec::new()),
    };
    let cells = agents as usize * phase_defs.len();
    let timeout = scenario.request_timeout.0;
    let budgets = stampede_core::delivery::budgets(scenario, agents, args.capacity);
    let mut warnings: Vec<String> = budgets
        .iter()
        .filter(|b| b.undeliverable() || b.budget < timeout)
        .map(|b| {
            b.text(if b.what.starts_with("phase") {
                "session slots (--capacity)"
            } else {
                "connections"
            })
        })
        .collect();
    warnings.extend(stampede_core::delivery::ramp_warnings(scenario));
    let deliverable = budgets.iter().map(|b| b.deliverable).fold(1.0f64, f64::min);
    Ok(PlanReport {
        scenario: scenario.name.clone(),
        agents,
        duration_s: scenario.duration().as_secs_f64(),
        sessions: p.total_sessions(),
        requests: p.total_requests(),
        phases,
        shares: (cells <= MAX_SHARE_CELLS).then(|| p.sessions.clone()),
        peak_connections_per_agent: peaks,
        target,
        budget,
        refusals,
        warnings,
        deliverable,
    })
}

/// This machine's ephemeral port count (as an agent here would register it), or Linux's
/// default.
fn local_ephemeral_ports() -> u32 {
    let r = stampede_agent::ephemeral_ports();
    if r.high >= r.low && r.low > 0 {
        r.high - r.low + 1
    } else {
        DEFAULT_EPHEMERAL_PORTS
    }
}

/// The plan as text.
pub fn render(r: &PlanReport, closed: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "plan of {}: {} agent(s), {:.1}s",
        r.scenario, r.agents, r.duration_s
    );
    if closed {
        let _ = writeln!(
            out,
            "  closed model: requests back to back, nothing planned ahead"
        );
    } else {
        let _ = writeln!(
            out,
            "  {} sessions, {} requests planned",
            Thousands(r.sessions),
            Thousands(r.requests)
        );
    }
    for ph in &r.phases {
        let _ = writeln!(
            out,
            "  phase {:<16} at {:>9.1}s for {:>9.1}s: {:>15} sessions, {} to {} per agent",
            ph.name,
            ph.start_s,
            ph.duration_s,
            Thousands(ph.sessions).to_string(),
            Thousands(ph.per_agent_min),
            Thousands(ph.per_agent_max)
        );
    }
    if let Some(t) = &r.target {
        let max = r
            .peak_connections_per_agent
            .iter()
            .max()
            .copied()
            .unwrap_or(0);
        let total: u64 = r.peak_connections_per_agent.iter().sum();
        let _ = writeln!(
            out,
            "  peak concurrent connections to {t}: up to {} per agent, {} in all",
            Thousands(max),
            Thousands(total)
        );
        for b in &r.budget {
            let _ = writeln!(
                out,
                "  port budget {} → {t}: needs {} of {} ephemeral ports ({} agent(s)): {}",
                b.source,
                Thousands(b.needed),
                Thousands(b.ports),
                b.agents,
                if b.fits { "ok" } else { "REFUSED" }
            );
        }
    }
    for w in &r.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    if r.refusals.is_empty() && r.deliverable < 1.0 {
        let _ = writeln!(
            out,
            "verdict: the controller would run it, but at most {:.1}% of the planned sessions can start: it would end incomplete",
            r.deliverable * 100.0
        );
    } else if r.refusals.is_empty() {
        let _ = writeln!(out, "verdict: the controller would run it");
    } else {
        for why in &r.refusals {
            let _ = writeln!(out, "verdict: REFUSED — {why}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(agents: u32, source_ips: &[&str]) -> PlanArgs {
        PlanArgs {
            scenario: PathBuf::new(),
            agents: Some(agents),
            source_ips: source_ips.iter().map(|s| s.to_string()).collect(),
            ephemeral_ports: Some(28_232),
            capacity: 10_000,
            output: "text".into(),
        }
    }

    #[test]
    fn one_address_for_sixty_thousand_tcp_connections_is_refused() {
        let s = Scenario::from_yaml(
            "name: t\ntarget: tcp://127.0.0.1:9\nload: { model: closed, connections: 60000, duration: 10s }\nsession:\n  - tcp: { send: { text: ping }, framing: length_prefixed }\n",
        )
        .unwrap();
        let r = plan(&s, &args(6, &[])).unwrap();
        assert_eq!(r.peak_connections_per_agent, vec![10_000; 6]);
        assert_eq!(r.budget.len(), 1);
        assert!(!r.budget[0].fits);
        let text = render(&r, true);
        assert!(text.contains("28,232"), "{text}");
        assert!(text.contains("REFUSED"), "{text}");
        // The same agents with their own addresses fit.
        let r = plan(&s, &args(6, &["each"])).unwrap();
        assert!(r.refusals.is_empty(), "{:?}", r.refusals);
        assert_eq!(r.budget.len(), 6);
    }

    /// 40 sessions/s that think 2 s on one agent of capacity 20: a quarter can start, and
    /// the verdict says so; without the think time, the latency budget is the warning.
    #[test]
    fn a_capacity_too_small_for_the_plan_is_a_warning_with_the_share() {
        let text = |think: &str| {
            format!("name: c\ntarget: http://127.0.0.1:9\nphases: [ {{ name: steady, duration: 4s, arrival_rate: 40 }} ]\nsession:\n  - http: {{ path: / }}\n{think}")
        };
        let mut a = args(1, &[]);
        a.capacity = 20;
        let s = Scenario::from_yaml(&text("  - think_time: 2s\n")).unwrap();
        let r = plan(&s, &a).unwrap();
        assert_eq!(r.deliverable, 0.25);
        let out = render(&r, false);
        assert!(
            out.contains("at most 25.0% of its sessions can start"),
            "{out}"
        );
        assert!(
            out.contains("verdict: the controller would run it, but at most 25.0%"),
            "{out}"
        );
        let s = Scenario::from_yaml(&text("")).unwrap();
        let out = render(&plan(&s, &a).unwrap(), false);
        assert!(
            out.contains("a session may take at most 500ms on average"),
            "{out}"
        );
        assert!(
            out.contains("verdict: the controller would run it\n"),
            "{out}"
        );
        // The default capacity leaves a budget far above the request timeout: no warning.
        let out = render(&plan(&s, &args(1, &[])).unwrap(), false);
        assert!(!out.contains("warning"), "{out}");
    }

    #[test]
    fn a_day_at_a_million_per_second_plans_instantly() {
        let s = Scenario::from_yaml(
            "name: h\ntarget: http://127.0.0.1:9\nrequest_timeout: 1ms\nphases:\n  - { duration: 5s, arrival_rate: 10 }\n  - { duration: 1440m, arrival_rate: 1000000 }\nsession:\n  - http: { path: / }\n",
        )
        .unwrap();
        let r = plan(&s, &args(6, &[])).unwrap();
        assert_eq!(r.sessions, 50 + 86_400_000_000);
        assert_eq!(r.phases[1].per_agent_max - r.phases[1].per_agent_min, 0);
        assert!(r.refusals.is_empty(), "{:?}", r.refusals);
    }
}
