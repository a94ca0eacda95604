//! The run's size, checked before anything is planned or allocated: workloads and session
//! types, the mixes' weights, phases and their rates, the expected arrivals, and the request
//! steps every agent's recorder and the controller hold statistics for. These bounds sit
//! apart from the field-by-field checks because each one caps memory or time somewhere else
//! (the recorder, the schedule, the report), and its message names the limit.

use super::validate::check_name;
use super::{
    Phase, Scenario, ScenarioError, MAX_ARRIVAL_RATE, MAX_PHASES, MAX_PHASE_STEPS,
    MAX_REQUEST_STEPS, MAX_TOTAL_ARRIVALS,
};

impl Scenario {
    /// The workloads' loads and sessions, their names, the mixes' weights, and the run's
    /// bounds on phases and arrivals over all workloads together.
    pub(super) fn validate_workloads(&self) -> Result<(), ScenarioError> {
        use crate::workload::{MAX_MIX_PERIOD, MAX_SESSION_TYPES, MAX_WORKLOADS};
        if !self.workloads.is_empty() {
            let top = ["phases", "load", "session", "sessions"];
            let given = [
                !self.phases.is_empty(),
                self.load.is_some(),
                !self.session.is_empty(),
                !self.sessions.is_empty(),
            ];
            if let Some((f, _)) = top.iter().zip(given).find(|(_, g)| *g) {
                return Err(ScenarioError::invalid(
                    *f,
                    "with workloads, each workload has its own load and sessions: move it into one",
                ));
            }
            if self.workloads.len() > MAX_WORKLOADS {
                return Err(ScenarioError::invalid(
                    "workloads",
                    format!(
                        "{} workloads; at most {MAX_WORKLOADS}",
                        self.workloads.len()
                    ),
                ));
            }
            let mut names = std::collections::BTreeSet::new();
            for (i, w) in self.workloads.iter().enumerate() {
                check_name(&format!("workloads[{i}].name"), &w.name)?;
                if !names.insert(w.name.as_str()) {
                    return Err(ScenarioError::invalid(
                        format!("workloads[{i}].name"),
                        format!("`{}` names two workloads", w.name),
                    ));
                }
            }
        }
        let views = self.workload_views();
        for w in &views {
            let raw = |f: &str| format!("{}{f}", w.path);
            match w.load {
                None => self.validate_phases(&w.path, w.phases)?,
                Some(load) => self.validate_load(w, load)?,
            }
            let (session, sessions) = if self.workloads.is_empty() {
                (!self.session.is_empty(), !self.sessions.is_empty())
            } else {
                let x = &self.workloads[w.index];
                (!x.session.is_empty(), !x.sessions.is_empty())
            };
            if session && sessions {
                return Err(ScenarioError::invalid(
                    raw("sessions"),
                    "give either session or sessions (a weighted mix), not both",
                ));
            }
            if w.mixed {
                if w.types.len() > MAX_SESSION_TYPES {
                    return Err(ScenarioError::invalid(
                        raw("sessions"),
                        format!(
                            "{} session types; at most {MAX_SESSION_TYPES}",
                            w.types.len()
                        ),
                    ));
                }
                let mut names = std::collections::BTreeSet::new();
                let mut total = 0u64;
                for (t, ty) in w.types.iter().enumerate() {
                    check_name(&raw(&format!("sessions[{t}].name")), ty.name)?;
                    if !names.insert(ty.name) {
                        return Err(ScenarioError::invalid(
                            raw(&format!("sessions[{t}].name")),
                            format!("`{}` names two session types", ty.name),
                        ));
                    }
                    if ty.weight == 0 {
                        return Err(ScenarioError::invalid(
                            raw(&format!("sessions[{t}].weight")),
                            "must be >= 1",
                        ));
                    }
                    total += u64::from(ty.weight);
                }
                if total > u64::from(MAX_MIX_PERIOD) {
                    return Err(ScenarioError::invalid(
                        raw("sessions"),
                        format!("the weights sum to {total}; at most {MAX_MIX_PERIOD}"),
                    ));
                }
            }
        }
        let phases: usize = views.iter().map(|w| w.phase_count()).sum();
        if phases > MAX_PHASES {
            return Err(ScenarioError::invalid(
                "workloads",
                format!("{phases} phases over all workloads; at most {MAX_PHASES}"),
            ));
        }
        let steps = views
            .iter()
            .flat_map(|w| &w.types)
            .map(|t| t.request_steps())
            .sum();
        self.check_step_totals(phases, steps)?;
        if self.effective_phases().iter().all(|p| p.warmup) {
            return Err(ScenarioError::invalid(
                "phases",
                "every phase is a warm-up (warmup: true): nothing would be measured",
            ));
        }
        // Each workload is checked alone too (naming its field); several add up.
        check_total_arrivals("phases", views.iter().flat_map(|w| w.phases))
    }

    /// The run's request steps over all workloads and session types, and phases × request
    /// steps, against [`MAX_REQUEST_STEPS`] and [`MAX_PHASE_STEPS`]: what the agents'
    /// recorders and the controller hold per step.
    fn check_step_totals(&self, phases: usize, steps: usize) -> Result<(), ScenarioError> {
        let field = if !self.workloads.is_empty() {
            "workloads"
        } else if !self.sessions.is_empty() {
            "sessions"
        } else {
            "session"
        };
        if steps > MAX_REQUEST_STEPS {
            return Err(ScenarioError::invalid(
                field,
                format!(
                    "{steps} request steps over all session types and workloads; at most {MAX_REQUEST_STEPS} (each has its own statistics on every agent and a row in the report)"
                ),
            ));
        }
        if phases.saturating_mul(steps) > MAX_PHASE_STEPS {
            return Err(ScenarioError::invalid(
                field,
                format!(
                    "{phases} phases × {steps} request steps = {} per-step statistics; at most {MAX_PHASE_STEPS}: use fewer phases or steps",
                    phases * steps
                ),
            ));
        }
        Ok(())
    }

    /// A workload's arrival phases (`path` is its field prefix: empty at the top level).
    pub(super) fn validate_phases(
        &self,
        path: &str,
        phases: &[Phase],
    ) -> Result<(), ScenarioError> {
        let field = |f: &str| format!("{path}{f}");
        if phases.is_empty() {
            return Err(ScenarioError::invalid(
                field("phases"),
                "must contain at least one phase",
            ));
        }
        if phases.len() > MAX_PHASES {
            return Err(ScenarioError::invalid(
                field("phases"),
                format!("{} phases; at most {MAX_PHASES}", phases.len()),
            ));
        }
        for (i, p) in phases.iter().enumerate() {
            if p.duration.0.is_zero() {
                return Err(ScenarioError::invalid(
                    field(&format!("phases[{i}].duration")),
                    "must be > 0",
                ));
            }
            check_rate(&field(&format!("phases[{i}].arrival_rate")), p.arrival_rate)?;
            if let Some(r) = p.ramp_to {
                check_rate(&field(&format!("phases[{i}].ramp_to")), r)?;
            }
        }
        if phases.iter().all(|p| p.expected_arrivals() <= 0.0) {
            return Err(ScenarioError::invalid(
                field("phases"),
                "every phase has a rate of 0: nothing would be sent",
            ));
        }
        check_total_arrivals(&field("phases"), phases)
    }
}

/// The expected arrivals of `phases` stay within [`MAX_TOTAL_ARRIVALS`]; `field` names them.
pub(super) fn check_total_arrivals<'a>(
    field: &str,
    phases: impl IntoIterator<Item = &'a Phase>,
) -> Result<(), ScenarioError> {
    let total: f64 = phases.into_iter().map(Phase::expected_arrivals).sum();
    if total > MAX_TOTAL_ARRIVALS {
        return Err(ScenarioError::invalid(
            field,
            format!(
                "{total:.3e} arrivals in total; one run may plan at most {MAX_TOTAL_ARRIVALS:.0e} (MAX_TOTAL_ARRIVALS)"
            ),
        ));
    }
    Ok(())
}

pub(super) fn check_rate(path: &str, rate: f64) -> Result<(), ScenarioError> {
    if !rate.is_finite() || rate < 0.0 {
        return Err(ScenarioError::invalid(path, "must be >= 0"));
    }
    if rate > MAX_ARRIVAL_RATE {
        return Err(ScenarioError::invalid(
            path,
            format!("must be <= {MAX_ARRIVAL_RATE}"),
        ));
    }
    Ok(())
}
