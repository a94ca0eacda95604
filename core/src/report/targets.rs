//! The report's view of each target of a run whose workloads load several: the workloads
//! aimed at one `host:port` merged into one row, so an auth service and an API each get
//! their own latency, error rate and `target(NAME)` thresholds. Built from the per-phase
//! data the accumulator already holds, as the workloads' rows are; when steps name targets
//! of their own (a login service inside an API's session), from those steps' figures.

use serde::{Deserialize, Serialize};

use super::workloads::Merged;
use super::PhaseReport;
use crate::scenario::Scenario;
use crate::stats::SparseStats;

/// One target of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetReport {
    /// Its workloads together, as one phase row: `name` is the target's `host:port` (what
    /// `target(NAME)` names), `start_s` the first workload's start, `duration_s` until the
    /// last one ends.
    #[serde(flatten)]
    pub figures: PhaseReport,
    /// The first of its workloads' target URLs, without credentials.
    pub url: String,
    /// The workloads aimed at it, by name.
    pub workloads: Vec<String>,
}

/// Every target's row, in the order the workloads first name them; empty when the run loads
/// one target (its figures are the run's). `warm` marks the warm-up phases, left out.
pub(super) fn reports(
    scenario: &Scenario,
    phase_rows: &[PhaseReport],
    phases: &[SparseStats],
    warm: &[bool],
) -> Vec<TargetReport> {
    let views = scenario.workload_views();
    let names = crate::workload::target_names(&views);
    if names.len() < 2 {
        return Vec::new();
    }
    // A session whose steps go to several targets: each target's figures are its steps'.
    let by_steps = crate::workload::steps_have_targets(&views);
    names
        .into_iter()
        .enumerate()
        .map(|(index, name)| {
            let steps = crate::workload::target_steps(&views, &name);
            let aimed: Vec<_> = views
                .iter()
                .filter(|w| match by_steps {
                    true => w
                        .types
                        .iter()
                        .flat_map(|t| t.aimed(w.target))
                        .any(|(i, _)| steps.contains(&i)),
                    false => w.target.is_some_and(|t| t.scope_name() == name),
                })
                .collect();
            let merged = if by_steps {
                Merged::of_steps(&steps, warm, phases)
            } else {
                Merged::of(
                    aimed
                        .iter()
                        .map(|w| w.phase_base..w.phase_base + w.phase_count()),
                    warm,
                    phase_rows,
                    phases,
                )
            };
            let url = url_of(&views, &name)
                .map(|t| super::accumulator::without_userinfo(t.as_str()))
                .unwrap_or_default();
            let start = aimed.iter().map(|w| w.start).min().unwrap_or_default();
            let end = aimed
                .iter()
                .map(|w| w.start + w.duration())
                .max()
                .unwrap_or_default();
            TargetReport {
                figures: merged.figures(
                    index as u32,
                    name,
                    start.as_secs_f64(),
                    end.saturating_sub(start).as_secs_f64(),
                ),
                url,
                workloads: aimed.iter().map(|w| w.name.to_string()).collect(),
            }
        })
        .collect()
}

/// The first URL that names the target called `name`: a workload's or a step's.
fn url_of<'a>(
    views: &[crate::workload::View<'a>],
    name: &str,
) -> Option<&'a crate::target::Target> {
    views.iter().find_map(|w| {
        w.target
            .into_iter()
            .chain(
                w.types
                    .iter()
                    .flat_map(|t| t.steps.iter().filter_map(|s| s.target.as_ref())),
            )
            .find(|t| t.scope_name() == name)
    })
}
