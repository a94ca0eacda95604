//! What every agent receives before its load starts: the setup steps and the values they
//! extract, and the data sources with their rows. These checks sit apart because they bound
//! what crosses the agent stream (setup values in a `Ready` and a `Start`, rows in an
//! `Assign`) with the same limits and messages the agent and the controller use at run time.

use super::validate::check_extraction;
use super::{Scenario, ScenarioError, StepKind, MAX_STEPS, MIN_SETUP_REFRESH};

impl Scenario {
    /// The setup steps: http steps against an http target, their references, extraction and
    /// checks.
    pub(super) fn validate_setup(&self) -> Result<(), ScenarioError> {
        if let Some(every) = self.setup_refresh {
            if self.setup.is_empty() {
                return Err(ScenarioError::invalid(
                    "setup_refresh",
                    "refreshes the setup steps' values: give setup steps",
                ));
            }
            if every.0 < MIN_SETUP_REFRESH {
                return Err(ScenarioError::invalid(
                    "setup_refresh",
                    "must be at least 1s",
                ));
            }
        }
        if self.setup.is_empty() {
            return Ok(());
        }
        if self.setup.len() > MAX_STEPS {
            return Err(ScenarioError::invalid(
                "setup",
                format!("{} steps; at most {MAX_STEPS}", self.setup.len()),
            ));
        }
        if self.transport()?.step_kind() != "http" {
            return Err(ScenarioError::invalid(
                "setup",
                "setup steps are http steps: they need an http:// or https:// target",
            ));
        }
        let mut defined = std::collections::BTreeSet::new();
        for (i, step) in self.setup.iter().enumerate() {
            let field = |f: &str| format!("setup[{i}]{f}");
            let StepKind::Http(http) = &step.kind else {
                return Err(ScenarioError::invalid(
                    field(""),
                    "a setup step is an http step",
                ));
            };
            if step.repeat == Some(0) {
                return Err(ScenarioError::invalid(field(".repeat"), "must be >= 1"));
            }
            if step.target.is_some() {
                return Err(ScenarioError::invalid(
                    field(".target"),
                    "setup steps run against the scenario's target: drop the step's own target",
                ));
            }
            http.check()
                .map_err(|(f, why)| ScenarioError::invalid(field(&format!(".http.{f}")), why))?;
            for (f, t) in step.templates() {
                self.check_refs(t, &defined, true)
                    .map_err(|why| ScenarioError::invalid(field(&format!(".{f}")), why))?;
            }
            check_extraction(step, &field(""))?;
            defined.extend(step.extract.keys().map(String::as_str));
        }
        let values = self.setup_names().len();
        if values > super::MAX_SETUP_VALUES {
            return Err(ScenarioError::invalid(
                "setup",
                format!(
                    "{values} values extracted; at most {} (MAX_SETUP_VALUES): every agent \
                     receives them all, up to {} KiB each",
                    super::MAX_SETUP_VALUES,
                    crate::extract::MAX_VALUE >> 10
                ),
            ));
        }
        Ok(())
    }

    /// The data sources: their names and rows, what one agent may hold of them all, and a
    /// supply a closed load cannot count in advance.
    pub(super) fn validate_data(&self) -> Result<(), ScenarioError> {
        if !self.data.is_empty() && (!self.workloads.is_empty() || !self.sessions.is_empty()) {
            return Err(ScenarioError::invalid(
                "data",
                "data sources bind rows to one arrival index space: they are read by a top-level session, not yet with workloads or a sessions mix",
            ));
        }
        // What one agent may receive of every source: all of it, when it runs alone.
        let mut held = 0usize;
        for (name, d) in &self.data {
            if !crate::template::is_name(name) || crate::template::RESERVED.contains(&name.as_str())
            {
                return Err(ScenarioError::invalid(
                    "data",
                    format!("`{name}` cannot name a data source"),
                ));
            }
            d.check()
                .map_err(|why| ScenarioError::invalid(format!("data.{name}"), why))?;
            held = held.saturating_add(d.rows.share_bytes());
            if held > super::MAX_AGENT_DATA_BYTES {
                return Err(ScenarioError::invalid(
                    format!("data.{name}"),
                    format!(
                        "{:.1} MiB of rows with the sources before it: {}",
                        held as f64 / f64::from(1u32 << 20),
                        super::data_rows_too_large()
                    ),
                ));
            }
            if self.is_closed()
                && d.on_exhausted == crate::data::OnExhausted::Fail
                && d.per != crate::data::DataScope::Connection
                && d.order != crate::data::DataOrder::Random
            {
                return Err(ScenarioError::invalid(
                    format!("data.{name}.on_exhausted"),
                    "a closed load's sessions are not counted in advance, so the supply cannot be checked: use wrap or stop (or per: connection)",
                ));
            }
        }
        Ok(())
    }
}
