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
        steps.iter_mut().enumerate().filter_map(move |(i, st)| {
            let reads = st
                .json_pointers()
                .into_iter()
                .map(|(p, f)| (p.to_string(), f))
                .collect();
            match &mut st.kind {
                StepKind::Grpc(g) => Some(CallMut {
                    step: format!("{path}[{i}]"),
                    call: g,
                    reads,
                }),
                _ => None,
            }
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
mod tests {
    use super::*;

    #[test]
    fn status_codes_and_names() {
        assert_eq!(status_code(b"14"), Some(14));
        assert_eq!(status_name(14), Some("UNAVAILABLE"));
        assert_eq!(status_code(b"99"), Some(2), "past 16 reads as UNKNOWN");
        assert_eq!(status_code(b"x"), None);
        assert_eq!(status_code(b""), None);
        assert_eq!(status_name(17), None);
    }
    use proptest::prelude::*;

    fn call(method: &str) -> GrpcCall {
        GrpcCall {
            method: method.into(),
            ..Default::default()
        }
    }

    #[test]
    fn methods_and_metadata_are_checked_by_name() {
        assert_eq!(call("pkg.v1.Svc/Do").parts(), Some(("pkg.v1.Svc", "Do")));
        assert_eq!(call("Svc/Do").path(), "/Svc/Do");
        for bad in [
            "Svc",
            "/Do",
            "Svc/",
            "a..b/Do",
            "pkg.Svc/Do/x",
            "1pkg.Svc/Do",
            "p.S/a.b",
        ] {
            let e = call(bad).check().unwrap_err();
            assert_eq!(e.0, "method", "{bad}");
        }
        let mut c = call("p.S/M");
        c.message = serde_json::json!([1, 2]).into();
        assert_eq!(c.check().unwrap_err().0, "message");
        for (name, value, why) in [
            ("X-Up", "1", "lower-case"),
            ("grpc-timeout", "1S", "set by gRPC"),
            ("te", "trailers", "set by gRPC"),
            ("x-bytes-bin", "!!", "base64"),
            ("x-text", "a\nb", "printable"),
        ] {
            let mut c = call("p.S/M");
            c.metadata
                .insert(name.into(), Template::parse(value).unwrap());
            let (f, e) = c.check().unwrap_err();
            assert_eq!(f, format!("metadata.{name}"));
            assert!(e.contains(why), "{name}: {e}");
        }
        let mut ok = call("p.S/M");
        ok.metadata
            .insert("x-bytes-bin".into(), Template::literal("3q2+7w=="));
        ok.metadata
            .insert("authorization".into(), Template::literal("Bearer abc"));
        // A templated value is checked when rendered.
        ok.metadata
            .insert("x-token".into(), Template::parse("${token}").unwrap());
        ok.check().unwrap();
        assert_eq!(
            ok.templates().map(|(f, _)| f).collect::<Vec<_>>(),
            [
                "metadata.authorization",
                "metadata.x-bytes-bin",
                "metadata.x-token"
            ]
        );
    }

    #[test]
    fn frames_are_one_uncompressed_message() {
        let f = frame(b"\x08\x07").unwrap();
        assert_eq!(f, [0, 0, 0, 0, 2, 8, 7]);
        let mut c = call("p.S/M");
        c.frame = Some(crate::protocol::encode_base64(&f));
        assert_eq!(c.frame_bytes().unwrap().unwrap(), f);
        for bad in [
            &[0u8, 0, 0, 0, 3, 1][..],
            &[1, 0, 0, 0, 0],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            &[],
        ] {
            c.frame = Some(crate::protocol::encode_base64(bad));
            assert_eq!(c.check().unwrap_err().0, "frame", "{bad:?}");
        }
        assert!(frame(&vec![0; MAX_MESSAGE + 1]).is_err());
    }

    #[test]
    fn statuses_name_their_kind_once() {
        assert_eq!(status_kind(b"0"), Ok(None));
        assert_eq!(status_kind(b"3"), Ok(Some("grpc_invalid_argument")));
        assert_eq!(status_kind(b"14"), Ok(Some("grpc_unavailable")));
        assert_eq!(status_kind(b"16"), Ok(Some("grpc_unauthenticated")));
        assert_eq!(status_kind(b"99"), Ok(Some("grpc_unknown")));
        assert_eq!(status_kind(b"99999999999"), Err(()));
        for bad in [&b""[..], b"-1", b"OK", b" 0"] {
            assert_eq!(status_kind(bad), Err(()), "{bad:?}");
        }
    }

    #[test]
    fn a_resolved_call_carries_exactly_the_paths_its_step_reads() {
        let mut c = call("p.S/M");
        let reads = BTreeMap::from([("/a", "extract.a")]);
        // Before the CLI resolves the call, it has no paths, and that is fine.
        assert_eq!(c.check_reply(&reads), Ok(()));
        c.frame = Some(crate::protocol::encode_base64(&frame(b"").unwrap()));
        let (field, why) = c.check_reply(&reads).unwrap_err();
        assert_eq!(field, "reply");
        assert!(why.contains("`/a` is not compiled"), "{why}");
        let path: ReplyPath =
            serde_json::from_str(r#"{"hops":[{"field":1}],"kind":"string"}"#).unwrap();
        c.reply.insert("/a".into(), path.clone());
        assert_eq!(c.check_reply(&reads), Ok(()));
        c.reply.insert("/b".into(), path);
        assert_eq!(c.check_reply(&reads).unwrap_err().0, "reply./b");
        c.reply.remove("/b");
        c.reply.get_mut("/a").unwrap().hops.clear();
        assert_eq!(
            c.check(),
            Err(("reply./a".to_string(), "the path has no field".to_string()))
        );
    }

    #[test]
    fn hostile_lengths_are_refused_at_the_prefix() {
        let mut s = FrameScanner::new(16);
        // A length of 4 GiB is refused as soon as its prefix is whole, never waited for.
        assert_eq!(
            s.feed(&[0, 0xff, 0xff, 0xff])
                .and_then(|()| s.feed(&[0xff])),
            Err(FrameError::TooLong(u32::MAX))
        );
        let mut s = FrameScanner::new(16);
        assert_eq!(s.feed(&[0, 0, 0, 0, 17]), Err(FrameError::TooLong(17)));
        let mut s = FrameScanner::new(16);
        assert_eq!(s.feed(&[2, 0, 0, 0, 1]), Err(FrameError::Flag(2)));
        let mut s = FrameScanner::new(16);
        s.feed(&[0, 0, 0, 0, 4, 1, 2]).unwrap();
        assert_eq!(s.finish(), Err(FrameError::Truncated));
        s.feed(&[3, 4, 0, 0]).unwrap();
        assert_eq!(s.finish(), Err(FrameError::Truncated));
        s.feed(&[0, 0, 0]).unwrap();
        assert_eq!(s.finish(), Ok(2));
    }

    #[test]
    fn scenarios_tie_grpc_steps_to_a_grpc_target_and_a_schema() {
        let doc = |target: &str, grpc: &str, step: &str| {
            format!(
                "name: g\ntarget: {target}\n{grpc}phases: [{{ duration: 1s, arrival_rate: 1 }}]\nsession:\n  - {step}\n"
            )
        };
        let call = "grpc: { method: p.S/M, message: { id: 1 } }";
        let s =
            Scenario::from_yaml(&doc("grpc://h:1", "grpc: { reflection: true }\n", call)).unwrap();
        assert_eq!(
            (match &s.session[0].kind {
                crate::scenario::StepKind::Grpc(x) => x,
                k => panic!("not a grpc step: {k:?}"),
            })
            .message
            .json()["id"],
            1
        );
        assert_eq!(s.requests_per_session(), 1);
        Scenario::from_yaml(&doc(
            "grpcs://h",
            "grpc: { proto_files: [a.proto] }\ntls: { insecure_skip_verify: true }\n",
            call,
        ))
        .unwrap();
        let s = Scenario::from_yaml(&doc(
            "grpc://h:1",
            "grpc: { proto_files: [protos/a.proto], config_map: protos }\n",
            call,
        ))
        .unwrap();
        assert_eq!(s.grpc.unwrap().config_map.as_deref(), Some("protos"));
        for (target, grpc, step, path, why) in [
            (
                "http://h:1",
                "grpc: { reflection: true }\n",
                call,
                "session[0].grpc",
                "grpc:// or grpcs://",
            ),
            ("grpc://h:1", "", call, "grpc", "proto_files"),
            ("grpc://h:1", "grpc: {}\n", call, "grpc", "reflection: true"),
            (
                "grpc://h:1",
                "grpc: { reflection: true, proto_files: [a.proto] }\n",
                call,
                "grpc.reflection",
                "not both",
            ),
            (
                "grpc://h:1",
                "grpc: { reflection: true, config_map: protos }\n",
                call,
                "grpc.config_map",
                "holds proto_files",
            ),
            (
                "grpc://h:1",
                "grpc: { proto_files: [a.proto], config_map: ' ' }\n",
                call,
                "grpc.config_map",
                "name is empty",
            ),
            (
                "grpc://h:1",
                "grpc: { reflection: true }\n",
                "grpc: { method: nope }",
                "session[0].grpc.method",
                "package.Service/Method",
            ),
            (
                "grpc://h:1",
                "grpc: { reflection: true }\nhttp_version: \"2\"\n",
                call,
                "http_version",
                "http://",
            ),
            (
                "http://h:1",
                "grpc: { reflection: true }\n",
                "http: { path: / }",
                "grpc",
                "only applies",
            ),
            (
                "grpc://h:1",
                "grpc: { reflection: true }\n",
                "grpc: { method: p.S/M, message: { inner: { id: '${token}' } } }",
                "session[0].grpc.message.inner.id",
                "${token} is not defined before this step",
            ),
            (
                "grpc://h:1",
                "grpc: { reflection: true }\n",
                "grpc: { method: p.S/M, metadata: { x-user: '${users.id}' } }",
                "session[0].grpc.metadata.x-user",
                "`users` is not a data source",
            ),
            (
                "grpc://h:1",
                "grpc: { reflection: true }\n",
                "grpc: { method: p.S/M, message: { tags: [a, '${uuid('] } }",
                "session[0].grpc.message.tags[1]",
                "not closed",
            ),
        ] {
            let e = Scenario::from_yaml(&doc(target, grpc, step)).unwrap_err();
            assert_eq!(e.path(), path, "{e}");
            assert!(e.to_string().contains(why), "{e}");
        }
    }

    #[test]
    fn environment_references_in_calls_are_resolved_for_agents() {
        let mut s = Scenario::from_yaml(
            "name: g\ntarget: grpc://h:1\ngrpc: { reflection: true }\n\
             phases: [{ duration: 1s, arrival_rate: 1 }]\n\
             session:\n  - grpc: { method: p.S/M, message: { key: '${env:KEY}' }, metadata: { x-key: '${env:KEY}' } }\n",
        )
        .unwrap();
        assert_eq!(
            s.env_names().into_iter().collect::<Vec<_>>(),
            ["KEY"],
            "both references are seen"
        );
        assert!(s.resolve_env(&|_| Some("s3cret".into())).unwrap());
        let submitted = serde_json::to_string(&s).unwrap();
        assert!(!submitted.contains("env:"), "{submitted}");
        let agent = Scenario::from_yaml(&submitted).unwrap();
        assert!(!agent.has_env_refs());
        let g = match &agent.session[0].kind {
            crate::scenario::StepKind::Grpc(x) => x,
            k => panic!("not a grpc step: {k:?}"),
        };
        assert_eq!(g.message.literal_json()["key"], "s3cret");
        assert_eq!(g.metadata["x-key"].as_static(), Some("s3cret"));
    }

    proptest! {
        /// However the body is cut into chunks, the count of whole messages is the same, and
        /// no input panics.
        #[test]
        fn chunking_never_changes_the_count(
            lens in proptest::collection::vec(0usize..40, 0..6),
            cuts in proptest::collection::vec(0usize..300, 0..8),
        ) {
            let body: Vec<u8> = lens.iter().flat_map(|&n| frame(&vec![7; n]).unwrap()).collect();
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
            points.sort_unstable();
            let mut s = FrameScanner::new(64);
            let mut at = 0;
            for p in points.into_iter().chain([body.len()]) {
                s.feed(&body[at..p]).unwrap();
                at = p;
            }
            prop_assert_eq!(s.finish(), Ok(lens.len() as u32));
        }

        /// However the body is cut, the kept bytes are the last message's, whole.
        #[test]
        fn chunking_keeps_the_last_message(
            lens in proptest::collection::vec(0usize..40, 1..6),
            cuts in proptest::collection::vec(0usize..300, 0..8),
        ) {
            let messages: Vec<Vec<u8>> = lens
                .iter()
                .enumerate()
                .map(|(i, &n)| (0..n).map(|b| (b + i) as u8).collect())
                .collect();
            let body: Vec<u8> = messages.iter().flat_map(|m| frame(m).unwrap()).collect();
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
            points.sort_unstable();
            let mut s = FrameScanner::new(64);
            let mut kept = vec![0xee; 3];
            let mut at = 0;
            for p in points.into_iter().chain([body.len()]) {
                s.feed_keeping(&body[at..p], &mut kept).unwrap();
                at = p;
            }
            prop_assert_eq!(s.finish(), Ok(lens.len() as u32));
            prop_assert_eq!(&kept, messages.last().unwrap());
        }

        #[test]
        fn garbage_is_an_error_or_a_count(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut s = FrameScanner::new(32);
            if s.feed(&body).is_ok() {
                let _ = s.finish();
            }
        }
    }
}
