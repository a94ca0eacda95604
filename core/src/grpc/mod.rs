//! gRPC steps (`grpc://` and `grpcs://` targets): the top-level schema source, a step's call,
//! the pre-framed request the CLI stores in it, the error kinds of gRPC statuses, and the
//! scanner of response frames that trusts no length.
//!
//! ```yaml
//! target: grpc://127.0.0.1:50051
//! grpc: { reflection: true }            # or { proto_files: [target.proto] }
//! session:
//!   - grpc:
//!       method: stampede.target.v1.Target/Echo
//!       message: { text: hello, id: 7 }
//!       metadata: { x-tenant: blue }
//! ```
//!
//! The CLI resolves the schema once (protox or the target's reflection service), checks the
//! message against the method's input type and encodes it once into [`GrpcCall::frame`]. The
//! controller and the agents never see a descriptor: an agent sends the frame as the body of
//! `POST /pkg.Service/Method` over HTTP/2 and reads the status from the trailers.
//!
//! String values of the message and metadata values may hold templates
//! (`text: 'hi ${users.name}'`, `id: '${users.id}'`; [`message`]). A message with references
//! is compiled by the CLI into [`GrpcCall::program`] instead of a frame ([`program`]): its
//! fixed fields pre-encoded, its templated scalar fields rendered and encoded by the agent
//! for each call, still without a descriptor. A call without references keeps its frame.

mod frame;
pub mod message;
pub mod program;
pub mod reply;
pub mod streaming;
mod wire;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use frame::{frame, FrameBytesError, FrameError, FrameScanner, MessageTooLong};
pub use message::GrpcMessage;
pub use program::MessageProgram;
pub use reply::{ReplyPath, ReplyPaths};
pub use streaming::{EncodedMessage, GrpcExpect, SendPlan, Streaming};

use crate::scenario::{Scenario, ScenarioError, StepKind};
use crate::template::Template;

/// Largest request message the CLI encodes, and largest response message an agent accepts
/// (gRPC's own default receive limit).
pub const MAX_MESSAGE: usize = 4 << 20;
/// The gRPC message prefix: a compression flag and a 4-byte big-endian length.
pub const PREFIX: usize = 5;

/// Where the schema of the scenario's gRPC calls is found: by the CLI, beside the scenario
/// file or from the target; for a LoadTest, by the controller, in a ConfigMap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcOptions {
    /// `.proto` files, relative to the scenario file, compiled by the CLI (no `protoc`
    /// needed). Imports are looked up beside each file and in `import_paths`. In a LoadTest,
    /// each is read from `config_map`, by its base name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proto_files: Vec<String>,
    /// More folders (relative to the scenario file) to look up imports in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub import_paths: Vec<String>,
    /// Ask the target's server reflection service (`grpc.reflection.v1`) for the schema when
    /// the run is submitted, instead of `proto_files`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reflection: bool,
    /// For a LoadTest: the ConfigMap (in the LoadTest's namespace) holding `proto_files` and
    /// what they import, one key per file named by its base name, as `kubectl create
    /// configmap NAME --from-file=DIR` makes it. The controller compiles them; the CLI reads
    /// `proto_files` from beside the scenario file and ignores this, so one scenario serves
    /// both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
}

/// One call: a step `grpc: { method, message, metadata }`, unary or streaming
/// ([`streaming`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcCall {
    /// The fully qualified method: `package.Service/Method`.
    pub method: String,
    /// The request message in protobuf's JSON mapping (field names as in the `.proto` file
    /// or in lowerCamelCase); checked against the method's input type by the CLI. Omitted: the
    /// empty message. A string value may hold templates (`${users.id}`); a templated number,
    /// bool or enum is given as a string and its rendered text read as the field's type.
    #[serde(default, skip_serializing_if = "GrpcMessage::is_null")]
    pub message: GrpcMessage,
    /// The messages a client- or bidirectional-streaming call sends, in order, instead of
    /// `message`; each like `message`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<GrpcMessage>,
    /// How a client- or bidirectional-streaming call sends its messages: how many times,
    /// how far apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send: Option<SendPlan>,
    /// What the answer must hold (the number of server messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<GrpcExpect>,
    /// Request metadata (HTTP/2 headers): lower-case names; a name ending in `-bin` carries
    /// base64 (binary metadata). Values may hold templates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, Template>,
    /// Written by the CLI, not by hand: the request as sent (the 5-byte gRPC prefix and the
    /// encoded message), in base64, when the message holds no reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame: Option<String>,
    /// Written by the CLI, not by hand: how agents encode a message that holds references,
    /// for each call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<MessageProgram>,
    /// Written by the CLI, not by hand: the method's streaming kind, from its schema; absent
    /// for a unary method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<Streaming>,
    /// Written by the CLI, not by hand: each of `messages` encoded, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub encoded: Vec<EncodedMessage>,
    /// Written by the CLI, not by hand: each JSON Pointer the step's `extract` and `check`
    /// read, compiled against the method's reply type into field numbers ([`reply`]), so an
    /// agent reads the reply without its descriptor.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reply: ReplyPaths,
}

impl GrpcOptions {
    /// Exactly one schema source; the error is `(field suffix, reason)`.
    fn check(&self) -> Result<(), (&'static str, String)> {
        match (self.proto_files.is_empty(), self.reflection) {
            (true, false) => Err((
                "",
                "give the schema: proto_files: [...] or reflection: true".into(),
            )),
            (false, true) => Err((
                "reflection",
                "give proto_files or reflection: true, not both".into(),
            )),
            _ if self.proto_files.iter().any(|f| f.trim().is_empty()) => {
                Err(("proto_files", "a file name is empty".into()))
            }
            (true, true) if self.config_map.is_some() => Err((
                "config_map",
                "holds proto_files: give proto_files, not reflection: true".into(),
            )),
            _ if self
                .config_map
                .as_ref()
                .is_some_and(|c| c.trim().is_empty()) =>
            {
                Err(("config_map", "the ConfigMap's name is empty".into()))
            }
            _ => Ok(()),
        }
    }
}

/// Metadata names gRPC or HTTP/2 set themselves.
const RESERVED: &[&str] = &[
    "content-type",
    "te",
    "host",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

impl GrpcCall {
    /// `(service, method)` of `package.Service/Method`.
    pub fn parts(&self) -> Option<(&str, &str)> {
        let (service, method) = self.method.split_once('/')?;
        let ident = |s: &str| {
            !s.is_empty()
                && s.split('.').all(|p| {
                    p.chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                        && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                })
        };
        (ident(service) && ident(method) && !method.contains('.')).then_some((service, method))
    }

    /// The HTTP/2 `:path` of the call.
    pub fn path(&self) -> String {
        format!("/{}", self.method)
    }

    /// The frame's bytes, checked: a whole uncompressed message of at most [`MAX_MESSAGE`].
    /// `None` until the CLI has encoded the message.
    pub fn frame_bytes(&self) -> Result<Option<Vec<u8>>, FrameBytesError> {
        self.frame.as_deref().map(frame_from_base64).transpose()
    }

    /// Checks what the types cannot say; the error is `(field suffix, reason)`.
    pub fn check(&self) -> Result<(), (String, String)> {
        let field = |f: &str, why: String| (f.to_string(), why);
        if self.parts().is_none() {
            return Err(field(
                "method",
                format!(
                    "`{}` is not package.Service/Method (e.g. helloworld.Greeter/SayHello)",
                    self.method
                ),
            ));
        }
        self.message.check().map_err(|(f, why)| {
            let f = if f.is_empty() {
                "message".to_string()
            } else {
                format!("message.{f}")
            };
            (f, why)
        })?;
        for (name, value) in &self.metadata {
            let f = format!("metadata.{name}");
            let valid_name = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.'));
            if !valid_name {
                return Err((
                    f,
                    "a metadata name is lower-case letters, digits, `-`, `_` or `.`".into(),
                ));
            }
            if name.starts_with("grpc-") || RESERVED.contains(&name.as_str()) {
                return Err((f, format!("`{name}` is set by gRPC itself")));
            }
            // A templated value is checked when it is rendered (a `template` error).
            let Some(value) = value.as_static() else {
                continue;
            };
            if name.ends_with("-bin") {
                crate::protocol::decode_base64(value).map_err(|e| (f.clone(), e.to_string()))?;
            } else if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                return Err((
                    f,
                    "a value is printable ASCII (use a -bin name for bytes)".into(),
                ));
            }
        }
        self.frame_bytes()
            .map_err(|e| field("frame", e.to_string()))?;
        if let Some(p) = &self.program {
            if self.frame.is_some() {
                return Err(field(
                    "program",
                    "a call has a frame or a program, not both".into(),
                ));
            }
            program::Encoder::new(p).map_err(|e| field("program", e.to_string()))?;
        }
        for (pointer, path) in &self.reply {
            path.check()
                .map_err(|e| field(&format!("reply.{pointer}"), e.to_string()))?;
        }
        streaming::check(self)
    }

    /// Checks that the compiled reply paths are exactly the JSON Pointers `reads` (those of
    /// the step's `extract` and `check`) once the call is encoded; the error is `(field
    /// suffix, reason)`. Before the CLI resolves the call it has none, and that is fine.
    pub fn check_reply<V>(&self, reads: &BTreeMap<&str, V>) -> Result<(), (String, String)> {
        if !self.is_resolved() {
            return Ok(());
        }
        if let Some(p) = reads.keys().find(|p| !self.reply.contains_key(**p)) {
            return Err((
                "reply".into(),
                format!(
                    "`{p}` is not compiled against the method's reply: gRPC steps are resolved by the CLI (stampede run)"
                ),
            ));
        }
        if let Some(p) = self.reply.keys().find(|p| !reads.contains_key(p.as_str())) {
            return Err((
                format!("reply.{p}"),
                "no extract or check of the step reads it".into(),
            ));
        }
        Ok(())
    }

    /// Whether the CLI has encoded the call (its frame, or its program; each listed
    /// message's).
    pub fn is_resolved(&self) -> bool {
        if self.messages.is_empty() {
            self.frame.is_some() || self.program.is_some()
        } else {
            self.encoded.len() == self.messages.len()
        }
    }

    /// Every template of the call, with its field relative to the call (`message.text`,
    /// `metadata.x-user`).
    pub fn templates(&self) -> impl Iterator<Item = (String, &Template)> {
        self.message
            .templates()
            .map(|(p, t)| (format!("message.{p}"), t))
            .chain(self.messages.iter().enumerate().flat_map(|(i, m)| {
                m.templates()
                    .map(move |(p, t)| (format!("messages[{i}].{p}"), t))
            }))
            .chain(
                self.metadata
                    .iter()
                    .map(|(k, t)| (format!("metadata.{k}"), t)),
            )
    }

    /// Mutable access to every template (the CLI's `${env:...}` resolution).
    pub fn templates_mut(&mut self) -> impl Iterator<Item = (String, &mut Template)> {
        self.message
            .templates_mut()
            .map(|(p, t)| (format!("message.{p}"), t))
            .chain(self.messages.iter_mut().enumerate().flat_map(|(i, m)| {
                m.templates_mut()
                    .map(move |(p, t)| (format!("messages[{i}].{p}"), t))
            }))
            .chain(
                self.metadata
                    .iter_mut()
                    .map(|(k, t)| (format!("metadata.{k}"), t)),
            )
    }
}

/// A stored frame's bytes, checked: a whole uncompressed message of at most [`MAX_MESSAGE`].
pub fn frame_from_base64(b64: &str) -> Result<Vec<u8>, FrameBytesError> {
    let bytes = crate::protocol::decode_base64(b64)?;
    let mut scan = FrameScanner::new(MAX_MESSAGE);
    scan.feed(&bytes)?;
    match scan.finish()? {
        1 if bytes[0] == 0 => Ok(bytes),
        messages => Err(FrameBytesError::NotOneMessage { messages }),
    }
}

/// Checks the scenario's `grpc:` options against its gRPC steps (called by
/// [`Scenario::validate`]).
pub(crate) fn check_scenario(s: &Scenario) -> Result<(), ScenarioError> {
    let steps = || {
        s.step_lists()
            .into_iter()
            .flat_map(|(_, steps)| steps.iter())
    };
    let calls = steps()
        .filter(|st| matches!(st.kind, StepKind::Grpc(_)))
        .count();
    match &s.grpc {
        Some(o) => {
            if calls == 0 {
                return Err(invalid("grpc", "only applies to scenarios with grpc steps"));
            }
            o.check().map_err(|(f, why)| {
                let path = if f.is_empty() {
                    "grpc".to_string()
                } else {
                    format!("grpc.{f}")
                };
                invalid(path, why)
            })
        }
        None => {
            // The submitted form carries the frames; a file needs a schema to make them.
            match first_unresolved(s) {
                Some(_) => Err(invalid(
                    "grpc",
                    "grpc steps need the schema: grpc: { proto_files: [...] } or grpc: { reflection: true }",
                )),
                None => Ok(()),
            }
        }
    }
}

fn invalid(path: impl Into<String>, reason: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid {
        path: path.into(),
        reason: reason.into(),
    }
}

/// The path of the first gRPC call that is not encoded (`session[0].grpc`): a submitted
/// scenario must carry every call's frame, since neither the controller nor the agents hold a
/// schema (only the CLI compiles `proto_files` or asks the target's reflection).
pub fn first_unresolved(s: &Scenario) -> Option<String> {
    s.step_lists().into_iter().find_map(|(path, steps)| {
        steps.iter().enumerate().find_map(|(i, st)| match &st.kind {
            StepKind::Grpc(g) if !g.is_resolved() => Some(format!("{path}[{i}].grpc")),
            _ => None,
        })
    })
}

/// A gRPC call of the scenario as the CLI's resolution sees it.
#[derive(Debug)]
pub struct CallMut<'a> {
    /// The step's field path (`session[2]`).
    pub step: String,
    /// The call, whose frames and reply paths the resolution fills.
    pub call: &'a mut GrpcCall,
    /// The JSON Pointers the step's `extract` and `check` read, each with the first field
    /// that reads it (`extract.token`, `check.json`).
    pub reads: BTreeMap<String, String>,
}

/// Every gRPC call of the scenario: the CLI's resolution fills their frames.
pub fn calls_mut(s: &mut Scenario) -> impl Iterator<Item = CallMut<'_>> {
    s.step_lists_mut().into_iter().flat_map(|(path, steps)| {
        steps
            .iter_mut()
            .enumerate()
            .filter(|(_, st)| matches!(st.kind, StepKind::Grpc(_)))
            .filter_map(move |(i, st)| {
                let reads = st
                    .json_pointers()
                    .into_iter()
                    .map(|(p, f)| (p.to_string(), f))
                    .collect();
                let StepKind::Grpc(call) = &mut st.kind else {
                    return None;
                };
                Some(CallMut {
                    step: format!("{path}[{i}]"),
                    call,
                    reads,
                })
            })
    })
}

/// The error kinds of the gRPC status codes 1 to 16 (`grpc_<code name>`), made once.
const KINDS: [&str; 17] = [
    "grpc_ok",
    "grpc_cancelled",
    "grpc_unknown",
    "grpc_invalid_argument",
    "grpc_deadline_exceeded",
    "grpc_not_found",
    "grpc_already_exists",
    "grpc_permission_denied",
    "grpc_resource_exhausted",
    "grpc_failed_precondition",
    "grpc_aborted",
    "grpc_out_of_range",
    "grpc_unimplemented",
    "grpc_internal",
    "grpc_unavailable",
    "grpc_data_loss",
    "grpc_unauthenticated",
];

/// The name of each `grpc-status` code, as gRPC writes it.
const NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// The code of a `grpc-status` value (a code past 16 is 2, `UNKNOWN`, as gRPC clients read
/// it); `None` when it is not a number.
pub fn status_code(value: &[u8]) -> Option<u8> {
    if value.is_empty() || value.len() > 10 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let code = value.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(u8::try_from(code).ok().filter(|c| *c <= 16).unwrap_or(2))
}

/// The name of a `grpc-status` code (`UNAVAILABLE`); `None` past 16.
pub fn status_name(code: u8) -> Option<&'static str> {
    NAMES.get(usize::from(code)).copied()
}

/// What a `grpc-status` value says: `Ok(None)` for OK, `Ok(Some(kind))` for a failure (a code
/// past 16 is `grpc_unknown`, as gRPC clients read it), `Err(())` when it is not a number (the
/// caller counts a `protocol` error).
#[allow(clippy::result_unit_err)]
pub fn status_kind(value: &[u8]) -> Result<Option<&'static str>, ()> {
    if value.is_empty() || value.len() > 10 || !value.iter().all(u8::is_ascii_digit) {
        return Err(());
    }
    let code = value.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Ok(match code {
        0 => None,
        1..=16 => Some(KINDS[code as usize]),
        _ => Some(KINDS[2]),
    })
}

#[cfg(test)]
mod tests;
