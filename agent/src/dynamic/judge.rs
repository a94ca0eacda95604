//! A step's extraction and checks, compiled once: one judge for an HTTP response, a
//! tcp, udp or WebSocket payload and a gRPC reply message.

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

    /// The verdict on a reply that has nothing but its payload to judge: the first failed
    /// check, else the first value missing (the values go into their slots).
    pub(super) fn verdict(&self, seen: &Seen<'_>, values: &mut [Option<String>]) -> Option<&str> {
        if let Some(kind) = self.check(seen) {
            return Some(kind);
        }
        self.extract(seen, values)
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

/// A gRPC step's extraction and checks, and where each of their JSON Pointers is in the
/// reply's protobuf (the CLI's compiled paths): the call keeps its last reply message in the
/// session's reply buffer, then this judges it. The agent still holds no descriptor.
#[derive(Debug)]
pub struct ReplyJudge {
    judge: Judge,
    paths: stampede_core::grpc::ReplyPaths,
}

impl ReplyJudge {
    /// The judge of `call`'s step, or `None` when the step neither extracts nor checks.
    pub fn new(
        call: &stampede_core::grpc::GrpcCall,
        extract: &BTreeMap<String, Extract>,
        check: Option<&Check>,
        slots: &BTreeMap<String, usize>,
    ) -> Option<Self> {
        let judge = Judge::new(extract, check, slots);
        (!judge.is_empty()).then(|| Self {
            judge,
            paths: call.reply.clone(),
        })
    }

    /// The buffer a call keeps its last reply message in: cleared here, filled by the call.
    pub fn buffer(vars: &mut super::SessionVars) -> &mut Vec<u8> {
        let body = &mut super::capture(&mut vars.capture).body;
        body.clear();
        body
    }

    /// A call's error kind: its reply's (`error`), else, when the step reads its reply, the
    /// first failed check or missing value of the message the call kept (the values go into
    /// the session's slots). A reading step without the session's values (which cannot
    /// happen: such a step makes the run dynamic) is `protocol`.
    pub fn verdict<'s>(
        judge: Option<&'s Self>,
        error: Option<&'static str>,
        vars: Option<&mut super::SessionVars>,
    ) -> Option<&'s str> {
        match (error, judge, vars) {
            (Some(kind), _, _) => Some(kind),
            (None, None, _) => None,
            (None, Some(_), None) => Some(stampede_core::stats::error_kind::PROTOCOL),
            (None, Some(j), Some(vars)) => {
                let seen = Seen {
                    status: 200,
                    headers: &[],
                    body: super::captured(&vars.capture),
                    protobuf: Some(&j.paths),
                };
                j.judge.verdict(&seen, &mut vars.values)
            }
        }
    }
}
