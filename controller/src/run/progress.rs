//! One agent's Progress merged into the run: its figures, per-endpoint rows, failure samples,
//! connect times, debug exchanges and resource figures, each refused apart when it does not
//! fit the run.

use stampede_core::report::RunAccumulator;
use stampede_proto::convert::check_progress;
use stampede_proto::v1;

use super::received::Delivery;
use super::Driver;

impl Driver {
    /// Validates, decodes (once) and merges one agent's Progress. A Progress that does not
    /// fit the run is refused whole and logged; nothing of it is counted.
    pub(super) fn merge(
        &self,
        acc: &mut RunAccumulator,
        i: usize,
        agent_id: &str,
        progress: &v1::Progress,
        delivery: Delivery,
    ) {
        let samples = match check_progress(acc, i, progress) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(run = %self.h.run_id, agent = %agent_id, error = %e, "rejected progress");
                return;
            }
        };
        self.inner.metrics.progress(
            &self.h.run_id,
            agent_id,
            progress.interval,
            progress.open_connections,
            &samples,
        );
        // A part of an interval leaves its rows open for the parts still to come.
        let added = if delivery == Delivery::Whole {
            acc.add_progress(i, progress.interval, &samples)
        } else {
            acc.add_part(i, progress.interval, &samples)
        };
        if let Err(e) = added {
            tracing::error!(run = %self.h.run_id, agent = %agent_id, error = %e, "rejected progress data");
            return;
        }
        // Per-endpoint figures ride the same Progress (a replayed one was refused above).
        let listed = stampede_core::endpoints::listed(self.scenario.endpoints.list());
        match stampede_proto::convert::endpoints_from_wire(progress, &listed) {
            Ok(rows) => {
                for (address, s) in rows {
                    acc.endpoints.add(progress.interval, address, &s);
                }
            }
            Err(e) => {
                tracing::error!(run = %self.h.run_id, agent = %agent_id, error = %e, "rejected endpoint figures");
            }
        }
        // Failure samples ride the same Progress, refused apart from the figures.
        match stampede_proto::samples::samples_from_wire(progress, acc.step_count()) {
            Ok(samples) => acc.samples.add(i as u32, &samples),
            Err(e) => {
                tracing::error!(run = %self.h.run_id, agent = %agent_id, error = %e, "rejected failure samples");
            }
        }
        let stages = self.scenario.ramp_stages().len();
        let connects = stampede_proto::connects::stage_connects_from_wire(progress, stages)
            .and_then(|all| {
                all.iter().try_for_each(|(stage, h)| {
                    acc.stage_connects
                        .add(*stage, h)
                        .map_err(stampede_proto::ConvertError::from)
                })
            });
        if let Err(e) = connects {
            tracing::warn!(run = %self.h.run_id, agent = %agent_id, error = %e, "rejected connect times");
        }
        if !progress.debug.is_empty() {
            self.forward_debug(agent_id, progress, acc.step_count());
        }
        if let Some(r) = &progress.resources {
            let added = stampede_proto::resources::resources_from_wire(r).and_then(|s| {
                acc.add_resources(i, progress.interval, s)
                    .map_err(stampede_proto::ConvertError::from)
            });
            if let Err(e) = added {
                tracing::warn!(run = %self.h.run_id, agent = %agent_id, error = %e, "rejected resource figures");
            }
        }
    }

    /// `stampede run --debug N`: passes an agent's requests and answers on to the run's
    /// watchers as they arrive, the first N of the run in all; a list that does not fit the
    /// run is refused whole and logged.
    fn forward_debug(&self, agent_id: &str, progress: &v1::Progress, steps: usize) {
        use std::sync::atomic::Ordering;
        if let Err(e) = stampede_proto::samples::debug_from_wire(progress, steps) {
            tracing::error!(run = %self.h.run_id, agent = %agent_id, error = %e, "rejected debug exchanges");
            return;
        }
        let left = self.debug_left.load(Ordering::Relaxed);
        let n = progress.debug.len().min(left as usize);
        if n == 0 {
            return;
        }
        self.debug_left.store(left - n as u32, Ordering::Relaxed);
        let _ = self.h.events.send(v1::RunEvent {
            event: Some(v1::run_event::Event::Debug(v1::DebugExchanges {
                agent: agent_id.to_string(),
                exchanges: progress.debug[..n].to_vec(),
            })),
        });
    }
}
