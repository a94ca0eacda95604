//! Connect times per stage of a connection ramp: how long each connect (with its TLS or h2
//! handshake) took, in the stage it began in. A ramp that outruns the target's accept queue
//! shows here first, as connect times that climb stage by stage while the requests on the
//! connections already open still look fine.
//!
//! Kept sparse, per stage, only for the stages that recorded since the last interval (one or
//! two at a time), and sent with each interval's Progress, in the one histogram spec.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use stampede_core::hist::{self as codec, SparseHist};
use stampede_core::ramp::Stage;
use stampede_proto::v1;
use tokio::time::Instant;

/// The run's ramp (its T0 and each stage's end), and the connect times recorded since the
/// last interval, by stage.
#[derive(Debug, Default)]
pub struct StageConnects {
    ramp: Option<(Instant, Box<[Duration]>)>,
    hists: Mutex<BTreeMap<u32, SparseHist>>,
}

impl StageConnects {
    /// Connect times of the ramp of `stages` from `t0`; nothing is recorded without stages.
    pub fn new(t0: Instant, stages: &[Stage]) -> Self {
        if stages.is_empty() {
            return Self::default();
        }
        let ends = stages
            .iter()
            .scan(Duration::ZERO, |end, s| {
                *end = end.saturating_add(s.duration.0);
                Some(*end)
            })
            .collect();
        Self {
            ramp: Some((t0, ends)),
            hists: Mutex::default(),
        }
    }

    /// The stage a connect that began at `began` belongs to: the one running then (the last
    /// one after the ramp's end, whose connections are still being replaced).
    fn stage(&self, began: Instant) -> Option<u32> {
        let (t0, ends) = self.ramp.as_ref()?;
        let at = began.saturating_duration_since(*t0);
        let i = ends.partition_point(|end| *end <= at).min(ends.len() - 1);
        u32::try_from(i).ok()
    }

    /// Records a connect that began at `began` and was open at `open`.
    pub fn record(&self, began: Instant, open: Instant) {
        let Some(stage) = self.stage(began) else {
            return;
        };
        let us = open.saturating_duration_since(began).as_micros();
        let us = u64::try_from(us).unwrap_or(u64::MAX);
        let mut hists = self.hists.lock().unwrap_or_else(|p| p.into_inner());
        hists.entry(stage).or_default().record_n(us, 1);
    }

    /// Moves the connect times recorded since the last call into the Progress `msg`.
    pub fn attach(&self, msg: &mut v1::AgentMessage) {
        if self.ramp.is_none() {
            return;
        }
        let taken = std::mem::take(&mut *self.hists.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(v1::agent_message::Msg::Progress(p)) = msg.msg.as_mut() {
            p.stage_connects = taken
                .into_iter()
                .filter_map(|(stage, h)| match codec::encode_wire_sparse(&h) {
                    Ok(hist) => Some(v1::StageConnects { stage, hist }),
                    Err(e) => {
                        tracing::error!(error = %e, "dropping connect times that cannot be encoded");
                        None
                    }
                })
                .collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_core::duration::HumanDuration;

    fn stage(connections: u32, ms: u64) -> Stage {
        Stage {
            connections,
            duration: HumanDuration(Duration::from_millis(ms)),
        }
    }

    /// Each connect counts in the stage it began in, and leaves with the next Progress.
    #[tokio::test(start_paused = true)]
    async fn connects_count_in_the_stage_they_began_in() {
        let t0 = Instant::now();
        let c = StageConnects::new(t0, &[stage(10, 1000), stage(50, 500)]);
        let ms = Duration::from_millis;
        c.record(t0, t0 + ms(2));
        c.record(t0 + ms(999), t0 + ms(1003));
        c.record(t0 + ms(1000), t0 + ms(1010));
        c.record(t0 + ms(4000), t0 + ms(4020));
        let mut msg = v1::AgentMessage {
            msg: Some(v1::agent_message::Msg::Progress(v1::Progress::default())),
        };
        c.attach(&mut msg);
        let Some(v1::agent_message::Msg::Progress(p)) = msg.msg else {
            unreachable!()
        };
        let got: Vec<(u32, u64, u64)> = p
            .stage_connects
            .iter()
            .map(|s| {
                let h = codec::decode_sparse(&s.hist).unwrap();
                (s.stage, h.len(), h.max())
            })
            .collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!((got[0].0, got[0].1, got[1].0, got[1].1), (0, 2, 1, 2));
        // The one spec's precision: 3 significant digits.
        assert!((4_000..4_005).contains(&got[0].2), "{got:?}");
        assert!((20_000..20_020).contains(&got[1].2), "{got:?}");
        // Taken: the next Progress carries nothing.
        let mut again = v1::AgentMessage {
            msg: Some(v1::agent_message::Msg::Progress(v1::Progress::default())),
        };
        c.attach(&mut again);
        let Some(v1::agent_message::Msg::Progress(p)) = again.msg else {
            unreachable!()
        };
        assert!(p.stage_connects.is_empty());
        // Without a ramp nothing is kept.
        let none = StageConnects::new(t0, &[]);
        none.record(t0, t0 + ms(1));
        assert!(none.hists.lock().unwrap().is_empty());
    }
}
