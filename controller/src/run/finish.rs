//! The end of a run: build the report, persist it, then publish it.

use stampede_core::report::{Report, ReportMeta, RunAccumulator, RunOutcome};
use stampede_proto::v1;

use super::{evict_finished, Driver, RunState};

impl Driver {
    /// Builds the report, persists it, and only then declares the run finished.
    pub(super) fn finish(
        &self,
        acc: RunAccumulator,
        outcome: RunOutcome,
        message: Option<String>,
        started_at_unix_ms: u64,
        duration_s: f64,
    ) {
        let meta = ReportMeta {
            run_id: self.h.run_id.clone(),
            outcome,
            message: message.clone(),
            started_at_unix_ms,
            duration_s,
        };
        let mut report = match acc.finish(&self.scenario, meta) {
            Ok(mut r) => {
                r.threshold_abort = self.threshold_abort.clone();
                r.target_resources = self.target_resources.clone();
                self.name_pods(&mut r);
                r
            }
            Err(e) => {
                self.h
                    .set_state(RunState::Failed, format!("building the report failed: {e}"));
                return;
            }
        };
        // The report's verdict, not the driver's: a run that delivered nothing is failed.
        let state = RunState::of_outcome(report.outcome);
        let message = report.message.clone().or(message);
        let (json, state, message) = match self.inner.store.save(&report) {
            Ok(json) => {
                self.h
                    .persisted
                    .store(true, std::sync::atomic::Ordering::Release);
                let cfg = &self.inner.cfg;
                let removed = self
                    .inner
                    .store
                    .prune(cfg.reports_keep, cfg.reports_max_age);
                if removed > 0 {
                    tracing::info!(removed, "old reports removed (retention)");
                }
                (json, state, message.unwrap_or_default())
            }
            Err(e) => {
                // Still hand the report to watchers, failed: a run whose report is lost must
                // not pass in CI (the CLI's exit code follows the report's outcome).
                let message = unstored(&mut report, &e.to_string());
                let json = serde_json::to_string_pretty(&report).unwrap_or_default();
                (json, RunState::Failed, message)
            }
        };
        if self.h.persisted.load(std::sync::atomic::Ordering::Acquire) {
            self.inner.store.clear_in_flight(&self.h.run_id);
        }
        let _ = self.h.report_json.set(json.clone());
        self.h.set_state(state, message);
        let _ = self.h.events.send(v1::RunEvent {
            event: Some(v1::run_event::Event::ReportJson(json)),
        });
        evict_finished(&self.inner);
    }
}

/// Marks a report that could not be stored as failed, its message saying why (before the
/// run's own message, if any); returns the message.
fn unstored(report: &mut Report, why: &str) -> String {
    let mut message = format!("the report could not be persisted: {why}");
    if let Some(m) = report.message.as_deref().filter(|m| !m.is_empty()) {
        message.push_str("; ");
        message.push_str(m);
    }
    report.outcome = RunOutcome::Failed;
    report.message = Some(message.clone());
    message
}
