//! The references of a step's templates, each checked against what exists where the step
//! runs: values extracted before it, setup values, data sources and their columns.

use std::collections::BTreeSet;

use super::Scenario;
use crate::template::{Ref, Template, Var};

/// A reference in a template that reads nothing at the place it is written. Each message
/// starts with the reference as written (`${user.id}`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    /// A setup step reading a session value: setup runs before any session.
    #[error("{at}: a setup step reads the values of earlier setup steps as ${{setup.{name}}}")]
    ExtractedInSetup {
        /// The reference, as written.
        at: Ref,
        /// The value's name, to read as `${setup.NAME}`.
        name: String,
    },
    /// A value no earlier step extracts.
    #[error("{at} is not defined before this step")]
    NotDefinedBefore {
        /// The reference, as written.
        at: Ref,
    },
    /// A `${setup.NAME}` that no setup step extracts.
    #[error("{at} is not extracted by any setup step")]
    NotInSetup {
        /// The reference, as written.
        at: Ref,
    },
    /// A data row read in a setup step, which belongs to no arrival.
    #[error("{at}: setup steps run once per run, not per session, so they read no data")]
    DataInSetup {
        /// The reference, as written.
        at: Ref,
    },
    /// A data source the scenario does not declare.
    #[error("{at}: `{data}` is not a data source")]
    NoSource {
        /// The reference, as written.
        at: Ref,
        /// The source it names.
        data: String,
    },
    /// A column the data source does not have.
    #[error("{at}: data.{data} has no column `{column}` (it has {})", .columns.join(", "))]
    NoColumn {
        /// The reference, as written.
        at: Ref,
        /// The source it names.
        data: String,
        /// The column it names.
        column: String,
        /// The columns the source has.
        columns: Vec<String>,
    },
}

impl Scenario {
    /// Every reference of `t` resolves: a data source and column, a value extracted by an
    /// earlier step (`defined`), by a setup step, a built-in, a generator, or the environment.
    /// In a setup step (`in_setup`), `defined` holds the earlier setup steps' values, read as
    /// `${setup.NAME}`, and no data is read.
    // The error is built once, when a scenario is refused: its size costs nothing.
    #[allow(clippy::result_large_err)]
    pub(super) fn check_refs(
        &self,
        t: &Template,
        defined: &BTreeSet<&str>,
        in_setup: bool,
    ) -> Result<(), RefError> {
        for r in t.refs() {
            match &r.var {
                Var::Extracted(name) if in_setup => {
                    return Err(RefError::ExtractedInSetup {
                        at: r.clone(),
                        name: name.clone(),
                    });
                }
                Var::Extracted(name) if !defined.contains(name.as_str()) => {
                    return Err(RefError::NotDefinedBefore { at: r.clone() });
                }
                Var::Setup(name) if in_setup && !defined.contains(name.as_str()) => {
                    return Err(RefError::NotDefinedBefore { at: r.clone() });
                }
                Var::Setup(name)
                    if !in_setup && !self.setup.iter().any(|s| s.extract.contains_key(name)) =>
                {
                    return Err(RefError::NotInSetup { at: r.clone() });
                }
                Var::Data { .. } if in_setup => {
                    return Err(RefError::DataInSetup { at: r.clone() });
                }
                Var::Data { source, column } => {
                    let Some(d) = self.data.get(source) else {
                        return Err(RefError::NoSource {
                            at: r.clone(),
                            data: source.clone(),
                        });
                    };
                    if !d.is_unread() && d.column(column).is_none() {
                        return Err(RefError::NoColumn {
                            at: r.clone(),
                            data: source.clone(),
                            column: column.clone(),
                            columns: d.columns.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}
