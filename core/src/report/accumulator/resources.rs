//! The agents' own use of their hosts (the generator watching itself): per interval, each
//! agent's CPU share of the cores it may use, its resident memory and open files. Kept per
//! agent as peaks and a mean, and per open timeline interval as each agent's CPU, so the
//! timeline shows every agent's CPU per interval and the report can name an agent that was
//! the limit.

use super::{MergeError, RunAccumulator};

/// An agent's CPU share at or above this, in any interval, makes it a possible limit of the
/// run: past it, its sessions queue behind each other and their latency is the generator's.
pub const CPU_LIMIT_SHARE: f64 = 0.9;

/// One agent's use of its host over one interval, as it reported it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ResourceSample {
    /// CPU time over wall time, as a share of the cores it may use.
    pub cpu_share: f64,
    pub rss_bytes: u64,
    pub open_files: u64,
    /// The cores it may use.
    pub cores: f64,
}

/// One agent's figures over the run.
#[derive(Debug, Clone, Default)]
pub(super) struct AgentUse {
    pub cpu_max: f64,
    pub cpu_sum: f64,
    pub samples: u64,
    pub rss_max: u64,
    pub files_max: u64,
    pub cores: f64,
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

    /// Each agent's CPU in `interval`, in percent (`None`: it sent none), for its row.
    pub(super) fn agent_cpu(&self, interval: u64) -> Vec<Option<f64>> {
        self.cpu_rows.get(&interval).cloned().unwrap_or_default()
    }
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
}
