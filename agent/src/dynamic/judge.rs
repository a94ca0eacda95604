//! A step's extraction and checks, compiled once: one judge for an HTTP response and for a
//! tcp or udp reply's payload.

use std::collections::BTreeMap;

use stampede_core::extract::{Check, Extract, Response as Seen};

/// A step's extraction and checks, compiled once: what a captured response or reply is
/// judged by. HTTP adds its status and cookies around it; a tcp or udp reply is its payload.
#[derive(Debug, Default)]
pub(super) struct Judge {
    /// (the variable's slot, the extractor, its error kind `extract.NAME`).
    pub(super) extract: Vec<(usize, Extract, String)>,
    pub(super) check: Option<Check>,
}

impl Judge {
    pub(super) fn new(
        extract: &BTreeMap<String, Extract>,
        check: Option<&Check>,
        slots: &BTreeMap<String, usize>,
    ) -> Self {
        Self {
            extract: extract
                .iter()
                .map(|(name, e)| (slots[name], e.clone(), format!("extract.{name}")))
                .collect(),
            check: check.cloned(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.extract.is_empty() && self.check.is_none()
    }

    pub(super) fn needs_body(&self) -> bool {
        self.extract.iter().any(|(_, e, _)| e.needs_body())
            || self.check.as_ref().is_some_and(Check::needs_body)
    }

    /// The error kind of the first failed check.
    pub(super) fn check(&self, seen: &Seen<'_>) -> Option<&'static str> {
        Some(match self.check.as_ref()?.apply(seen)? {
            "status" => "check.status",
            "body_contains" => "check.body_contains",
            _ => "check.json",
        })
    }

    /// Takes every value into its slot; the error kind of the first one missing.
    pub(super) fn extract(&self, seen: &Seen<'_>, values: &mut [Option<String>]) -> Option<&str> {
        for (slot, e, kind) in &self.extract {
            match e.apply(seen) {
                Some(v) => values[*slot] = Some(v),
                None => return Some(kind),
            }
        }
        None
    }
}
