//! The agents' own use of their hosts (the generator watching itself): per interval, each
//! agent's CPU share of the cores it may use, its resident memory and open files. Kept per
//! agent as peaks and a mean, and per open timeline interval as each agent's CPU, so the
//! timeline shows every agent's CPU per interval and the report can name an agent that was
//! the limit. Per destination dialed, its ephemeral ports (open and in TIME_WAIT) at their
//! peak and the connects that found none: a generator out of ports fails connects while the
//! target has plenty to spare.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{MergeError, RunAccumulator};

/// An agent's CPU share at or above this, in any interval, makes it a possible limit of the
/// run: past it, its sessions queue behind each other and their latency is the generator's.
pub const CPU_LIMIT_SHARE: f64 = 0.9;

/// An agent's ports toward one destination at or above this share of the ports it may use
/// make it a possible limit of the run: past it, connects start failing with
/// `addr_not_available` (or wait for TIME_WAIT to expire), whatever the target can take.
pub const PORTS_LIMIT_SHARE: f64 = 0.9;

/// Most destinations kept per agent (what an agent sends at most in one interval).
pub const MAX_DESTINATIONS: usize = 64;

/// One agent's use of its host over one interval, as it reported it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceSample {
    /// CPU time over wall time, as a share of the cores it may use.
    pub cpu_share: f64,
    /// Its resident memory at the interval's end, bytes.
    pub rss_bytes: u64,
    /// Its open file descriptors (sockets included) at the interval's end.
    pub open_files: u64,
    /// The cores it may use.
    pub cores: f64,
    /// Local ports usable toward one destination (its ephemeral range times its source
    /// addresses); 0 when unknown.
    pub usable_ports: u64,
    /// Its sockets toward each destination it dials, at the interval's end.
    pub destinations: Vec<DestinationSample>,
}

/// An agent's sockets toward one destination at an interval's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestinationSample {
    /// The destination's `ip:port`.
    pub address: SocketAddr,
    /// Sockets in any state but TIME_WAIT: each holds a local port.
    pub in_use: u64,
    /// Sockets in TIME_WAIT: closed by the agent first, their port still held.
    pub time_wait: u64,
    /// Connects during the interval that failed for want of a local port (EADDRNOTAVAIL).
    pub addr_not_available: u64,
}

/// One destination of one agent over the run, in the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DestinationReport {
    /// `ip:port`.
    pub address: String,
    /// Most sockets toward it that held a port at an interval's end (open and TIME_WAIT).
    pub ports_max: u64,
    /// `ports_max` as a share of the agent's usable ports, percent (0 when unknown).
    pub ports_pct: f64,
    /// Most sockets toward it open (not in TIME_WAIT) at an interval's end.
    pub in_use_max: u64,
    /// Most sockets toward it in TIME_WAIT at an interval's end.
    pub time_wait_max: u64,
    /// Connects to it that failed for want of a local port, over the run.
    pub addr_not_available: u64,
}

/// One destination's figures over the run.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DestUse {
    held_max: u64,
    in_use_max: u64,
    time_wait_max: u64,
    addr_not_available: u64,
}

/// One agent's figures over the run.
#[derive(Debug, Clone, Default)]
pub(super) struct AgentUse {
    pub(crate) cpu_max: f64,
    pub(crate) cpu_sum: f64,
    pub(crate) samples: u64,
    pub(crate) rss_max: u64,
    pub(crate) files_max: u64,
    pub(crate) cores: f64,
    pub(crate) usable_ports: u64,
    pub(crate) ports: BTreeMap<SocketAddr, DestUse>,
}

impl AgentUse {
    /// Its destinations, most ports first.
    pub(crate) fn destinations(&self) -> Vec<DestinationReport> {
        let mut out: Vec<DestinationReport> = self
            .ports
            .iter()
            .map(|(a, d)| DestinationReport {
                address: a.to_string(),
                ports_max: d.held_max,
                ports_pct: if self.usable_ports > 0 {
                    (d.held_max as f64 * 1000.0 / self.usable_ports as f64).round() / 10.0
                } else {
                    0.0
                },
                in_use_max: d.in_use_max,
                time_wait_max: d.time_wait_max,
                addr_not_available: d.addr_not_available,
            })
            .collect();
        out.sort_by(|a, b| {
            b.ports_max
                .cmp(&a.ports_max)
                .then(a.address.cmp(&b.address))
        });
        out
    }
}

/// The most a CPU share may be (a process may briefly count more time than its quota).
const MAX_SHARE: f64 = 64.0;

impl RunAccumulator {
    /// Adds one agent's resource figures for `interval`. Values an agent cannot have (not
    /// finite, negative) are refused; an interval past the run's end too.
    pub fn add_resources(
        &mut self,
        agent: usize,
        interval: u64,
        s: ResourceSample,
    ) -> Result<(), MergeError> {
        self.check_agent_interval(agent, interval)?;
        if !(s.cpu_share.is_finite() && s.cores.is_finite()) || s.cpu_share < 0.0 || s.cores < 0.0 {
            return Err(MergeError::BadResources);
        }
        let share = s.cpu_share.min(MAX_SHARE);
        let n = self.agents.len();
        let u = &mut self.usage[agent];
        u.cpu_max = u.cpu_max.max(share);
        u.cpu_sum += share;
        u.samples += 1;
        u.rss_max = u.rss_max.max(s.rss_bytes);
        u.files_max = u.files_max.max(s.open_files);
        u.cores = s.cores;
        u.usable_ports = s.usable_ports;
        for d in &s.destinations {
            if u.ports.len() >= MAX_DESTINATIONS && !u.ports.contains_key(&d.address) {
                continue;
            }
            let e = u.ports.entry(d.address).or_default();
            e.held_max = e.held_max.max(d.in_use.saturating_add(d.time_wait));
            e.in_use_max = e.in_use_max.max(d.in_use);
            e.time_wait_max = e.time_wait_max.max(d.time_wait);
            e.addr_not_available = e.addr_not_available.saturating_add(d.addr_not_available);
        }
        // As for the counters: late figures for a closed interval go to the next row.
        let slot = match self.closed.last() {
            Some(last) if interval <= last.interval => last.interval.saturating_add(1),
            _ => interval,
        };
        let row = self.cpu_rows.entry(slot).or_insert_with(|| vec![None; n]);
        row[agent] = Some((share * 1000.0).round() / 10.0);
        while self.cpu_rows.len() > 2 * super::MAX_OPEN_INTERVALS {
            self.cpu_rows.pop_first();
        }
        Ok(())
    }

    /// The agent with the highest CPU in the newest interval any agent reported it for.
    pub(super) fn busiest_agent(&self) -> Option<crate::report::AgentCpu> {
        let (_, row) = self.cpu_rows.last_key_value()?;
        let (i, cpu_pct) = row
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, (*p)?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))?;
        Some(crate::report::AgentCpu {
            agent: self.agents.get(i)?.id.clone(),
            cpu_pct,
        })
    }

    /// Each agent's CPU in `interval`, in percent (`None`: it sent none), for its row.
    pub(super) fn agent_cpu(&self, interval: u64) -> Vec<Option<f64>> {
        self.cpu_rows.get(&interval).cloned().unwrap_or_default()
    }
}

/// A verdict other than a clean pass, on a run whose generator reached a limit, says so in
/// the run's message: the failure may be the generator's, not the target's.
pub(super) fn name_generator_limit(report: &mut crate::report::Report) {
    let clean =
        report.outcome == crate::report::RunOutcome::Succeeded && report.thresholds_passed();
    if clean || report.generator.limiting_agents.is_empty() {
        return;
    }
    let note = format!(
        "the generator, not the target, may have been the limit: agent {} (see the generator's warnings)",
        report.generator.limiting_agents.join(", agent ")
    );
    report.message = Some(match report.message.take() {
        Some(m) => format!("{m}; {note}"),
        None => note,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Plan;
    use crate::report::ReportMeta;
    use crate::scenario::Scenario;

    /// Two agents, one at 97 % of its core in its busiest interval: the timeline carries each
    /// agent's CPU per interval, the agents their peaks, and the report names the busy one.
    #[test]
    fn an_agent_at_its_cpu_limit_is_named() {
        let s = Scenario::from_yaml(
            "name: c\ntarget: http://h:1\nload: { model: closed, connections: 4, duration: 3s }\nsession: [ { http: { path: / } } ]\n",
        )
        .unwrap();
        let plan = Plan::new(&s, 2, &[], 0).unwrap();
        let mut acc = RunAccumulator::new(&s, plan, vec!["a-1".into(), "a-2".into()], 1.0);
        let mut done = crate::stats::SparseStats::default();
        done.counters.requests_started = 10;
        done.counters.requests_completed = 10;
        for i in 0..3u64 {
            for (agent, cpu) in [(0, 0.2), (1, 0.5 + 0.235 * i as f64)] {
                let sample = ResourceSample {
                    cpu_share: cpu,
                    rss_bytes: (10 + i) << 20,
                    open_files: 12,
                    cores: 1.0,
                    ..Default::default()
                };
                acc.add_resources(agent, i, sample).unwrap();
                acc.add_progress(agent, i, &[(0, done.clone())]).unwrap();
            }
        }
        let bad = ResourceSample {
            cpu_share: f64::NAN,
            ..Default::default()
        };
        assert!(acc.add_resources(0, 3, bad).is_err());
        assert!(acc.add_resources(2, 0, ResourceSample::default()).is_err());
        let r = acc.finish(&s, ReportMeta::default()).unwrap();
        let cpu: Vec<Vec<Option<f64>>> =
            r.timeline.iter().map(|t| t.agent_cpu_pct.clone()).collect();
        assert_eq!(
            cpu,
            vec![
                vec![Some(20.0), Some(50.0)],
                vec![Some(20.0), Some(73.5)],
                vec![Some(20.0), Some(97.0)]
            ]
        );
        assert_eq!(r.agents[1].cpu_max_pct, 97.0);
        assert!((r.agents[1].cpu_mean_pct - 73.5).abs() < 1e-9);
        assert_eq!(r.agents[1].rss_max_bytes, 12 << 20);
        assert_eq!(r.agents[0].open_files_max, 12);
        assert_eq!(r.generator.limiting_agents, vec!["a-2".to_string()]);
        let w = r
            .generator
            .warnings
            .iter()
            .find(|w| w.starts_with("agent a-2 CPU 97%"))
            .expect("a warning naming the agent");
        assert!(
            w.contains("the generator, not the target, may be the limit"),
            "{w}"
        );
    }

    /// Ports per destination: the peak of each agent's sockets (open and TIME_WAIT) toward
    /// each destination, its share of the usable ports, and the connects that found none.
    /// An agent past 90 % of its ports, or out of them, is named as the limit; one well
    /// below is not.
    #[test]
    fn an_agent_out_of_ports_toward_a_destination_is_named() {
        let s = Scenario::from_yaml(
            "name: c\ntarget: http://h:1\nload: { model: closed, connections: 4, duration: 3s }\nsession: [ { http: { path: / } } ]\n",
        )
        .unwrap();
        let plan = Plan::new(&s, 3, &[], 0).unwrap();
        let ids = vec!["a-1".into(), "a-2".into(), "a-3".into()];
        let mut acc = RunAccumulator::new(&s, plan, ids, 1.0);
        let target: std::net::SocketAddr = "10.0.0.9:8080".parse().unwrap();
        let other: std::net::SocketAddr = "10.0.0.7:5432".parse().unwrap();
        let mut done = crate::stats::SparseStats::default();
        done.counters.requests_started = 10;
        done.counters.requests_completed = 10;
        let dest = |address, in_use, time_wait, addr_not_available| DestinationSample {
            address,
            in_use,
            time_wait,
            addr_not_available,
        };
        for i in 0..3u64 {
            // a-1 climbs past its 1,000 ports toward the target (TIME_WAIT included); a-2
            // runs out once; a-3 stays at a tenth.
            let samples = [
                vec![dest(target, 300 * i, 300 * i, 0), dest(other, 2, 0, 0)],
                vec![dest(target, 500, 0, u64::from(i == 1) * 7)],
                vec![dest(target, 100, 0, 0)],
            ];
            for (agent, destinations) in samples.into_iter().enumerate() {
                let sample = ResourceSample {
                    cpu_share: 0.1,
                    cores: 1.0,
                    usable_ports: 1_000,
                    destinations,
                    ..Default::default()
                };
                acc.add_resources(agent, i, sample).unwrap();
                acc.add_progress(agent, i, &[(0, done.clone())]).unwrap();
            }
        }
        let r = acc.finish(&s, ReportMeta::default()).unwrap();
        let d = &r.agents[0].destinations;
        assert_eq!(r.agents[0].usable_ports, 1_000);
        assert_eq!(
            d[0],
            DestinationReport {
                address: "10.0.0.9:8080".into(),
                ports_max: 1_200,
                ports_pct: 120.0,
                in_use_max: 600,
                time_wait_max: 600,
                addr_not_available: 0,
            }
        );
        assert_eq!(
            (d[1].address.as_str(), d[1].ports_max),
            ("10.0.0.7:5432", 2)
        );
        assert_eq!(r.agents[1].destinations[0].addr_not_available, 7);
        assert_eq!(r.agents[2].destinations[0].ports_pct, 10.0);
        assert_eq!(r.generator.limiting_agents, vec!["a-1", "a-2"]);
        let w = &r.generator.warnings;
        assert!(
            w.iter().any(|w| w.starts_with(
                "agent a-1 ports toward 10.0.0.9:8080 120% of its 1000 usable (600 open, 600 in TIME_WAIT at peak): the generator, not the target, may be the limit"
            )),
            "{w:?}"
        );
        assert!(
            w.iter().any(|w| w.starts_with(
                "agent a-2 failed 7 connects to 10.0.0.9:8080 for want of a free local port"
            )),
            "{w:?}"
        );
        assert!(!w.iter().any(|w| w.contains("a-3")), "{w:?}");
        // A clean pass keeps its message; any other verdict names the generator.
        assert_eq!(r.message, None);
        let mut failed = r.clone();
        failed.outcome = crate::report::RunOutcome::Failed;
        failed.message = Some("threshold p99 < 10ms failed".into());
        name_generator_limit(&mut failed);
        assert_eq!(
            failed.message.as_deref(),
            Some("threshold p99 < 10ms failed; the generator, not the target, may have been the limit: agent a-1, agent a-2 (see the generator's warnings)")
        );
        // The figures survive the report's JSON.
        let again: crate::report::Report =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(again.agents[0].destinations, r.agents[0].destinations);
    }
}
