//! Whether a step measured the generator rather than the target, and how many agents the
//! search would need not to.
//!
//! A generator at its limit looks like a target at its knee: latency up, throughput flat. A
//! step where an agent's CPU reached [`CPU_LIMIT_SHARE`] of the cores it may use, where its
//! ports toward a destination reached [`PORTS_LIMIT_SHARE`] of those usable or ran out, or
//! where the agents fell behind their schedule (sessions started late, arrivals dropped), says nothing
//! about the target, so the search stops there rather than call it a knee. The agents' own CPU
//! at the last step that held, per request, says how many agents the rest of the search needs.

use crate::report::{Report, CPU_LIMIT_SHARE, PORTS_LIMIT_SHARE};

/// Why a step's figures are the generator's.
#[derive(Debug, Clone, PartialEq)]
pub enum GeneratorCause {
    /// The agent's CPU reached [`CPU_LIMIT_SHARE`] of the cores it may use in an interval.
    Cpu {
        /// The agent's id.
        agent: String,
        /// Its CPU in its busiest interval, percent of the cores it may use.
        cpu_pct: f64,
        /// The cores it may use.
        cores: f64,
    },
    /// The agent's ports toward a destination reached [`PORTS_LIMIT_SHARE`] of those it may
    /// use, or some of its connects there found no free port.
    Ports {
        /// The agent's id.
        agent: String,
        /// The destination's `ip:port`.
        destination: String,
        /// Its ports held toward it at their peak, percent of those usable (0 when unknown).
        ports_pct: f64,
        /// Its connects there that found no free port.
        addr_not_available: u64,
    },
    /// Most sessions started late, or arrivals were dropped: the agents could not keep to
    /// the schedule. `agent` is the one with the most late sessions, if known.
    Behind {
        /// The agent with the most late sessions; `None` when none was late (arrivals were
        /// dropped).
        agent: Option<String>,
        /// Sessions that started more than 10 ms late, all agents together.
        late: u64,
        /// Planned sessions never started, all agents together.
        dropped: u64,
    },
}

impl std::fmt::Display for GeneratorCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cpu {
                agent,
                cpu_pct,
                cores,
            } => write!(f, "agent {agent} at {cpu_pct:.0}% of its {cores} core(s)"),
            Self::Ports {
                agent,
                destination,
                ports_pct,
                addr_not_available,
            } => write!(
                f,
                "agent {agent} out of ports toward {destination} ({ports_pct:.0}% held, \
                 {addr_not_available} connects without a free port)"
            ),
            Self::Behind {
                agent,
                late,
                dropped,
            } => {
                write!(
                    f,
                    "the agents fell behind their schedule ({late} late, {dropped} dropped)"
                )?;
                match agent {
                    Some(a) => write!(f, ", agent {a} the latest"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// The generator stopped the search at a step: why, and what it would take not to.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorLimit {
    /// Why the step's figures are the generator's.
    pub cause: GeneratorCause,
    /// Microseconds of agent CPU (all agents together) per completed request, at the last
    /// step that held; `None` without such a step or without CPU figures.
    pub cpu_us_per_request: Option<f64>,
    /// Agents the search needs to reach its highest level with every agent below
    /// [`CPU_LIMIT_SHARE`] of its cores, by that cost; `None` when it is not known.
    pub agents_needed: Option<u32>,
}

/// The cause, when `report`'s step was limited by its generator. Lateness counts only when
/// over half the sessions started late (or any arrival was dropped): a generator at its limit
/// cannot catch up, so most of its sessions are late, while a machine shared with other work
/// delays a minority of them in bursts, which is no reason to end a search. CPU counts in the
/// agent's busiest interval, the report's own rule.
pub fn generator_cause(report: &Report) -> Option<GeneratorCause> {
    let busiest = report
        .agents
        .iter()
        .filter(|a| a.cpu_max_pct.is_finite())
        .max_by(|a, b| a.cpu_max_pct.total_cmp(&b.cpu_max_pct));
    if let Some(a) = busiest.filter(|a| a.cpu_max_pct >= CPU_LIMIT_SHARE * 100.0) {
        return Some(GeneratorCause::Cpu {
            agent: a.id.clone(),
            cpu_pct: a.cpu_max_pct,
            cores: a.cores,
        });
    }
    let out_of_ports = report.agents.iter().find_map(|a| {
        a.destinations
            .iter()
            .find(|d| {
                d.addr_not_available > 0
                    || a.usable_ports > 0
                        && d.ports_max as f64 >= PORTS_LIMIT_SHARE * a.usable_ports as f64
            })
            .map(|d| GeneratorCause::Ports {
                agent: a.id.clone(),
                destination: d.address.clone(),
                ports_pct: d.ports_pct,
                addr_not_available: d.addr_not_available,
            })
    });
    if out_of_ports.is_some() {
        return out_of_ports;
    }
    let g = &report.generator;
    let started = report.totals.sessions.started.max(1);
    if g.dropped_arrivals > 0 || g.late_arrivals.saturating_mul(2) > started {
        let agent = report
            .agents
            .iter()
            .filter(|a| a.late_arrivals > 0)
            .max_by_key(|a| a.late_arrivals)
            .map(|a| a.id.clone());
        return Some(GeneratorCause::Behind {
            agent,
            late: g.late_arrivals,
            dropped: g.dropped_arrivals,
        });
    }
    None
}

/// Microseconds of agent CPU per completed request over `report`'s run: every agent's mean
/// CPU share times its cores times the run's length, over the requests completed. `None`
/// when no request completed or no agent reported its CPU.
pub fn cpu_us_per_request(report: &Report) -> Option<f64> {
    let cpu_s: f64 = report
        .agents
        .iter()
        .filter(|a| a.cpu_mean_pct.is_finite() && a.cores.is_finite())
        .map(|a| a.cpu_mean_pct.max(0.0) / 100.0 * a.cores.max(0.0) * report.duration_s)
        .sum();
    let done = report.totals.completed;
    (done > 0 && cpu_s > 0.0 && cpu_s.is_finite()).then(|| cpu_s * 1e6 / done as f64)
}

/// Agents needed to serve `rps` requests per second at `cpu_us` microseconds of agent CPU
/// each, every agent on `cores` cores kept below [`CPU_LIMIT_SHARE`] of them; at least one
/// more than `agents`, the count that was just found short. `None` for figures that cannot
/// give an answer.
pub fn agents_needed(rps: f64, cpu_us: f64, cores: f64, agents: u32) -> Option<u32> {
    let per_agent = CPU_LIMIT_SHARE * cores * 1e6;
    if !(rps.is_finite() && cpu_us.is_finite() && per_agent.is_finite())
        || rps <= 0.0
        || cpu_us <= 0.0
        || per_agent <= 0.0
    {
        return None;
    }
    let n = (rps * cpu_us / per_agent).ceil();
    let n = if n >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        n as u32
    };
    Some(n.max(agents.saturating_add(1)))
}

/// The whole judgement: `limited` is the step the generator limited, `good` the last step
/// that held (with the requests per second it achieved and its level), `top` the highest
/// level the search would try, and `agents` the agents it ran with. Requests per second at
/// `top` are the good step's scaled by level: exact for a rate, an upper bound for
/// connections (a target serves at most proportionally more).
pub fn limit(
    limited: &Report,
    good: Option<(&Report, f64, f64)>,
    top: f64,
    agents: u32,
) -> Option<GeneratorLimit> {
    let cause = generator_cause(limited)?;
    let cores = limited
        .agents
        .iter()
        .map(|a| a.cores)
        .filter(|c| c.is_finite() && *c > 0.0)
        .fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.min(c))));
    let cpu_us = good.and_then(|(r, _, _)| cpu_us_per_request(r));
    let rps_at_top = good
        .filter(|(_, _, level)| *level > 0.0)
        .map(|(_, rps, level)| rps * top.max(level) / level);
    // Ports are not CPU: more source addresses (or connections reused) fix them, not a
    // count of agents sized from CPU time.
    let agents_needed = match (&cause, rps_at_top, cpu_us, cores) {
        (GeneratorCause::Ports { .. }, ..) => None,
        (_, Some(rps), Some(us), Some(c)) => agents_needed(rps, us, c, agents),
        _ => None,
    };
    Some(GeneratorLimit {
        cause,
        cpu_us_per_request: cpu_us,
        agents_needed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{AgentReport, SessionTotals, Totals};

    fn report(cpu: &[(&str, f64, f64)], completed: u64, duration_s: f64) -> Report {
        Report {
            duration_s,
            totals: Totals {
                completed,
                sessions: SessionTotals {
                    started: completed,
                    ..SessionTotals::default()
                },
                ..Totals::default()
            },
            agents: cpu
                .iter()
                .map(|(id, max, mean)| AgentReport {
                    id: (*id).into(),
                    cpu_max_pct: *max,
                    cpu_mean_pct: *mean,
                    cores: 1.0,
                    ..AgentReport::default()
                })
                .collect(),
            ..Report::default()
        }
    }

    /// The busiest agent at 90 % or more of its cores is named; below it, nothing.
    #[test]
    fn an_agent_at_its_cpu_limit_is_the_cause() {
        let r = report(&[("a-1", 40.0, 30.0), ("a-2", 96.0, 80.0)], 1000, 2.0);
        assert_eq!(
            generator_cause(&r),
            Some(GeneratorCause::Cpu {
                agent: "a-2".into(),
                cpu_pct: 96.0,
                cores: 1.0
            })
        );
        assert_eq!(
            generator_cause(&r).unwrap().to_string(),
            "agent a-2 at 96% of its 1 core(s)"
        );
        let r = report(&[("a-1", 89.9, 70.0)], 1000, 2.0);
        assert_eq!(generator_cause(&r), None);
    }

    /// Ports toward a destination at 90 % of those usable, or a connect without a free port,
    /// is the generator, and no CPU estimate sizes the agents then.
    #[test]
    fn an_agent_out_of_ports_is_the_cause() {
        use crate::report::DestinationReport;
        let mut r = report(&[("a-1", 20.0, 10.0), ("a-2", 20.0, 10.0)], 1000, 2.0);
        let dest = |ports_max, addr_not_available| DestinationReport {
            address: "10.0.0.9:80".into(),
            ports_max,
            ports_pct: ports_max as f64 / 10.0,
            addr_not_available,
            ..DestinationReport::default()
        };
        r.agents[1].usable_ports = 1000;
        r.agents[1].destinations = vec![dest(899, 0)];
        assert_eq!(generator_cause(&r), None);
        r.agents[1].destinations = vec![dest(900, 0)];
        assert_eq!(
            generator_cause(&r).unwrap().to_string(),
            "agent a-2 out of ports toward 10.0.0.9:80 (90% held, 0 connects without a free port)"
        );
        r.agents[1].destinations = vec![dest(10, 3)];
        assert!(matches!(
            generator_cause(&r),
            Some(GeneratorCause::Ports {
                addr_not_available: 3,
                ..
            })
        ));
        let good = report(&[("a-1", 30.0, 25.0), ("a-2", 20.0, 15.0)], 4000, 2.0);
        let l = limit(&r, Some((&good, 400.0, 40.0)), 100.0, 2).unwrap();
        assert_eq!(l.agents_needed, None);
    }

    /// Over half the sessions late, or any arrival dropped, is the generator; half is not.
    #[test]
    fn lateness_past_the_threshold_is_the_cause() {
        let mut r = report(&[("a-1", 20.0, 10.0), ("a-2", 20.0, 10.0)], 100, 2.0);
        r.generator.late_arrivals = 50;
        assert_eq!(generator_cause(&r), None);
        r.generator.late_arrivals = 51;
        r.agents[1].late_arrivals = 51;
        let c = generator_cause(&r).unwrap();
        assert_eq!(
            c.to_string(),
            "the agents fell behind their schedule (51 late, 0 dropped), agent a-2 the latest"
        );
        r.generator.late_arrivals = 0;
        r.agents[1].late_arrivals = 0;
        r.generator.dropped_arrivals = 1;
        assert!(matches!(
            generator_cause(&r),
            Some(GeneratorCause::Behind { agent: None, .. })
        ));
    }

    /// Two agents at a mean 25 % and 15 % of one core over 2 s: 0.8 CPU seconds for 4,000
    /// requests, 200 µs each. At the search's top, 1,000 req/s (400 at level 40, scaled to
    /// level 100), that is 0.2 cores, one agent's worth: still one more than the two that
    /// were short.
    #[test]
    fn cpu_per_request_sizes_the_agents() {
        let good = report(&[("a-1", 30.0, 25.0), ("a-2", 20.0, 15.0)], 4000, 2.0);
        let us = cpu_us_per_request(&good).unwrap();
        assert!((us - 200.0).abs() < 1e-9, "{us}");
        let limited = report(&[("a-1", 97.0, 90.0), ("a-2", 50.0, 40.0)], 5000, 2.0);
        let l = limit(&limited, Some((&good, 400.0, 40.0)), 100.0, 2).unwrap();
        assert_eq!(l.agents_needed, Some(3));
        // 20,000 req/s at the top: 4 s of CPU a second over 0.9 core each: 5 agents.
        let l = limit(&limited, Some((&good, 400.0, 40.0)), 2000.0, 2).unwrap();
        assert_eq!(l.agents_needed, Some(5));
        assert_eq!(l.cpu_us_per_request, Some(us));
        // No step held: the cause is still known, the count is not.
        let l = limit(&limited, None, 2000.0, 2).unwrap();
        assert_eq!((l.cpu_us_per_request, l.agents_needed), (None, None));
        assert!(limit(&good, Some((&good, 400.0, 40.0)), 100.0, 2).is_none());
    }

    #[test]
    fn figures_that_cannot_size_anything_give_none() {
        assert_eq!(agents_needed(0.0, 10.0, 1.0, 1), None);
        assert_eq!(agents_needed(10.0, f64::NAN, 1.0, 1), None);
        assert_eq!(agents_needed(10.0, 10.0, 0.0, 1), None);
        assert_eq!(agents_needed(1e30, 1e30, 1.0, 1), Some(u32::MAX));
        assert_eq!(cpu_us_per_request(&report(&[], 10, 1.0)), None);
        assert_eq!(
            cpu_us_per_request(&report(&[("a", 5.0, 5.0)], 0, 1.0)),
            None
        );
    }
}
