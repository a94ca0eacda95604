//! Connect times per stage of a connection ramp, merged from every agent: each connect (with
//! its handshake) counts in the stage it began in. A ramp that outruns the target's accept
//! queue shows as connect times that climb stage by stage while the requests on connections
//! already open still look fine.

use serde::{Deserialize, Serialize};

use super::{MergeError, Percentiles};
use crate::hist::SparseHist;
use crate::ramp::Stage;

/// One stage of the ramp, in the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageReport {
    /// Its index in the load's `stages`.
    pub index: u32,
    /// Connections open at its end, all agents together.
    pub connections: u32,
    /// When it starts, seconds after T0.
    pub start_s: f64,
    /// How long it lasts, seconds.
    pub duration_s: f64,
    /// Connect times of the connects that began in it (the last stage also holds those
    /// after the ramp's end).
    pub connect: Percentiles,
}

/// The connect-time histogram of each stage, added as agents send them.
#[derive(Debug, Clone, Default)]
pub struct StageConnects {
    hists: Vec<SparseHist>,
}

impl StageConnects {
    /// Empty histograms for a ramp of `stages` stages (none: nothing is accepted).
    pub fn new(stages: usize) -> Self {
        Self {
            hists: vec![SparseHist::default(); stages],
        }
    }

    /// Adds one agent's connect times for `stage`; a stage the ramp does not have is refused.
    pub fn add(&mut self, stage: u32, h: &SparseHist) -> Result<(), MergeError> {
        let into = self
            .hists
            .get_mut(stage as usize)
            .ok_or(MergeError::UnknownStage(stage))?;
        into.add(h);
        Ok(())
    }

    /// Each stage of `stages` with its connect times.
    pub fn report(&self, stages: &[Stage]) -> Vec<StageReport> {
        let mut start = 0.0;
        stages
            .iter()
            .zip(&self.hists)
            .enumerate()
            .map(|(i, (s, h))| {
                let r = StageReport {
                    index: i as u32,
                    connections: s.connections,
                    start_s: start,
                    duration_s: s.duration.0.as_secs_f64(),
                    connect: Percentiles::of_sparse(h),
                };
                start += r.duration_s;
                r
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{ReportMeta, RunAccumulator};
    use crate::scenario::Scenario;

    /// Two agents' connect times merge per stage exactly as one histogram would hold them
    /// all; the report carries each stage with its level, span and connect percentiles, in
    /// its JSON too; a stage the ramp lacks is refused.
    #[test]
    fn connect_times_merge_per_stage_into_the_report() {
        let s = Scenario::from_yaml(
            "name: r\ntarget: http://h:1\nload: { model: closed, stages: [ { connections: 100, duration: 2s }, { connections: 300, duration: 3s } ] }\nsession: [ { http: { path: / } } ]\n",
        )
        .unwrap();
        let plan = crate::plan::Plan::new(&s, 2, &[], 0).unwrap();
        let mut acc = RunAccumulator::new(&s, plan, vec!["a-1".into(), "a-2".into()], 1.0);
        let mut all = [SparseHist::default(), SparseHist::default()];
        for (agent_us, stage) in [(100u64, 0u32), (1_000, 0), (5_000, 1), (40_000, 1)] {
            let mut h = SparseHist::default();
            for k in 1..=50 {
                h.record_n(agent_us * k / 10, 1);
            }
            all[stage as usize].add(&h);
            acc.stage_connects.add(stage, &h).unwrap();
        }
        assert!(matches!(
            acc.stage_connects.add(2, &SparseHist::default()),
            Err(MergeError::UnknownStage(2))
        ));
        let r = acc.finish(&s, ReportMeta::default()).unwrap();
        let stages = &r.load.as_ref().unwrap().stages;
        assert_eq!(stages.len(), 2);
        assert_eq!(
            (
                stages[1].index,
                stages[1].connections,
                stages[1].start_s,
                stages[1].duration_s
            ),
            (1, 300, 2.0, 3.0)
        );
        for (st, h) in stages.iter().zip(&all) {
            assert_eq!(st.connect, Percentiles::of_sparse(h));
            assert_eq!(st.connect.count, 100);
        }
        assert!(stages[1].connect.p99_us > stages[0].connect.max_us);
        let again: crate::report::Report =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(&again.load.unwrap().stages, stages);
    }
}
