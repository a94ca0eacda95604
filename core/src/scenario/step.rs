//! One step of a session and its kinds: a request of the target's protocol, or a pause.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::HttpRequest;
use crate::duration::HumanDuration;
use crate::extract::{Check, Extract};
use crate::protocol::{self, TcpRequest, UdpRequest};

/// One step of a session: what it does (`kind`) and how (repeats, connection, extraction,
/// checks). Read from a map with exactly one of `http`, `tcp`, `udp`, `grpc` and
/// `think_time`, so a step that names none or two is refused where it is parsed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawStep", into = "RawStep")]
pub struct Step {
    /// Name used in per-step breakdowns; defaults to `step-N`.
    pub name: Option<String>,
    /// The request the step sends, or the pause it makes.
    pub kind: StepKind,
    /// Run this step N times in a row.
    pub repeat: Option<u32>,
    /// Open a new connection for each request of this step instead of reusing the session's.
    pub new_connection: bool,
    /// Where this step's requests go when not to the workload's target: a login service
    /// beside the API a session then calls. An `http` step's only; the session keeps one
    /// connection to it, beside its own, and its cookies apart by host.
    pub target: Option<crate::target::Target>,
    /// Values taken from the response, read as `${NAME}` by later steps of the session. A
    /// value that is missing fails the request with the error kind `extract.NAME`.
    pub extract: BTreeMap<String, Extract>,
    /// Assertions on the response; a failed one fails the request with the error kind
    /// `check.status`, `check.body_contains` or `check.json`.
    pub check: Option<Check>,
}

/// What a step does: one request of the target's protocol, or a pause. The variant is the
/// step's key in the scenario (`http:`, `tcp:`, `udp:`, `grpc:`, `think_time:`).
#[derive(Debug, Clone, PartialEq)]
pub enum StepKind {
    /// An HTTP request: `http://` and `https://` targets.
    Http(HttpRequest),
    /// A framed request/response over TCP (or a Unix socket): `tcp://` and `unix://` targets.
    Tcp(TcpRequest),
    /// A datagram and its reply: `udp://` targets.
    Udp(UdpRequest),
    /// A unary gRPC call: `grpc://` and `grpcs://` targets.
    Grpc(crate::grpc::GrpcCall),
    /// One WebSocket action: `ws://` and `wss://` targets.
    Ws(crate::ws::WsAction),
    /// A pause before the next step.
    Think(ThinkTime),
}

impl StepKind {
    /// The step's key in the scenario, which is also the field prefix in error paths.
    pub fn key(&self) -> &'static str {
        match self {
            StepKind::Http(_) => "http",
            StepKind::Tcp(_) => "tcp",
            StepKind::Udp(_) => "udp",
            StepKind::Grpc(_) => "grpc",
            StepKind::Ws(_) => "ws",
            StepKind::Think(_) => "think_time",
        }
    }

    /// Whether the step sends a request (every kind but a pause).
    pub fn is_request(&self) -> bool {
        !matches!(self, StepKind::Think(_))
    }
}

// The file form of a `Step`: the five kinds as optional keys, checked into one by `TryFrom`.
// Its schema is the step's, so its doc comment is the step's description for users.
/// One step of a session.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Step")]
struct RawStep {
    /// Name used in per-step breakdowns; defaults to `step-N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// An HTTP request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    http: Option<HttpRequest>,
    /// A framed request/response over TCP (or a Unix socket): `tcp://` and `unix://` targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tcp: Option<TcpRequest>,
    /// A datagram and its reply: `udp://` targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    udp: Option<UdpRequest>,
    /// A unary gRPC call: `grpc://` and `grpcs://` targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    grpc: Option<crate::grpc::GrpcCall>,
    /// One WebSocket action (`connect`, `send` with or without `receive`, `receive`, `ping`,
    /// `close`): `ws://` and `wss://` targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ws: Option<crate::ws::WsAction>,
    /// A pause before the next step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    think_time: Option<ThinkTime>,
    /// Run this step N times in a row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    repeat: Option<u32>,
    /// Open a new connection for each request of this step instead of reusing the session's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    new_connection: bool,
    /// Where this step's requests go when not to the workload's target (an `http://` or
    /// `https://` URL, for an `http` step): a login service beside the API a session then
    /// calls. The session keeps one connection to it beside its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target: Option<crate::target::Target>,
    /// Values taken from the response, read as `${NAME}` by later steps of the session. A
    /// value that is missing fails the request with the error kind `extract.NAME`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    extract: BTreeMap<String, Extract>,
    /// Assertions on the response; a failed one fails the request with the error kind
    /// `check.status`, `check.body_contains` or `check.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    check: Option<Check>,
}

/// A step map without exactly one kind key; the parser reports it at the step's path.
#[derive(Debug, thiserror::Error)]
pub enum StepKindError {
    /// None of the kind keys is present.
    #[error("a step needs exactly one of: http, tcp, udp, grpc, ws, think_time (it has none)")]
    Missing,
    /// More than one kind key is present; they are listed as http, tcp, udp, grpc, ws, think_time.
    #[error("a step needs exactly one of: http, tcp, udp, grpc, ws, think_time (it has {})", .0.join(" and "))]
    Several(Vec<&'static str>),
}

impl TryFrom<RawStep> for Step {
    type Error = StepKindError;

    fn try_from(raw: RawStep) -> Result<Self, StepKindError> {
        let kinds: Vec<StepKind> = [
            raw.http.map(StepKind::Http),
            raw.tcp.map(StepKind::Tcp),
            raw.udp.map(StepKind::Udp),
            raw.grpc.map(StepKind::Grpc),
            raw.ws.map(StepKind::Ws),
            raw.think_time.map(StepKind::Think),
        ]
        .into_iter()
        .flatten()
        .collect();
        let kind = match <[StepKind; 1]>::try_from(kinds) {
            Ok([kind]) => kind,
            Err(kinds) if kinds.is_empty() => return Err(StepKindError::Missing),
            Err(kinds) => {
                return Err(StepKindError::Several(
                    kinds.iter().map(StepKind::key).collect(),
                ))
            }
        };
        Ok(Step {
            name: raw.name,
            kind,
            repeat: raw.repeat,
            new_connection: raw.new_connection,
            target: raw.target,
            extract: raw.extract,
            check: raw.check,
        })
    }
}

impl From<Step> for RawStep {
    fn from(step: Step) -> Self {
        let mut raw = RawStep {
            name: step.name,
            repeat: step.repeat,
            new_connection: step.new_connection,
            target: step.target,
            extract: step.extract,
            check: step.check,
            ..RawStep::default()
        };
        match step.kind {
            StepKind::Http(h) => raw.http = Some(h),
            StepKind::Tcp(t) => raw.tcp = Some(t),
            StepKind::Udp(u) => raw.udp = Some(u),
            StepKind::Grpc(g) => raw.grpc = Some(g),
            StepKind::Ws(w) => raw.ws = Some(w),
            StepKind::Think(t) => raw.think_time = Some(t),
        }
        raw
    }
}

impl JsonSchema for Step {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Step".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        RawStep::json_schema(g)
    }
}

impl Step {
    /// A step of `kind` with every other field at its default, for code that builds
    /// scenarios (the CLI's one-liner, tests).
    pub fn new(kind: StepKind) -> Self {
        Step {
            name: None,
            kind,
            repeat: None,
            new_connection: false,
            target: None,
            extract: BTreeMap::new(),
            check: None,
        }
    }

    /// The JSON Pointers the step's `extract` and `check` read, each with the first field
    /// that reads it (`extract.token`, `check.json`); a gRPC step's are compiled against its
    /// reply type by the CLI.
    pub fn json_pointers(&self) -> BTreeMap<&str, String> {
        let mut out = BTreeMap::new();
        for (name, e) in &self.extract {
            if let crate::extract::Extractor::Json(p) = &e.from {
                out.entry(p.as_str())
                    .or_insert_with(|| format!("extract.{name}"));
            }
        }
        for p in self.check.iter().flat_map(|c| c.json.keys()) {
            out.entry(p.as_str())
                .or_insert_with(|| "check.json".to_string());
        }
        out
    }

    /// How many times the step runs per session (`repeat:`, default 1).
    pub fn repeat(&self) -> u32 {
        self.repeat.unwrap_or(1)
    }
    /// Number of requests this step sends.
    pub fn requests(&self) -> u64 {
        if self.kind.is_request() {
            u64::from(self.repeat())
        } else {
            0
        }
    }
    /// The step's `name`, or `step-N` for the step at `index` (from 0) in its session.
    pub fn display_name(&self, index: usize) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("step-{}", index + 1))
    }

    /// Every template of the step's request, with its field relative to the step
    /// (`http.path`, `http.headers.NAME`, `http.body`, `tcp.send`, `udp.send`,
    /// `grpc.message.FIELD`, `grpc.metadata.NAME`, `ws.connect.path`, `ws.send.text`).
    pub fn templates(&self) -> Box<dyn Iterator<Item = (String, &crate::template::Template)> + '_> {
        match &self.kind {
            StepKind::Http(h) => Box::new(h.templates().map(|(f, t)| (format!("http.{f}"), t))),
            StepKind::Tcp(TcpRequest { send, .. }) | StepKind::Udp(UdpRequest { send, .. }) => {
                let key = self.kind.key();
                Box::new(
                    match send {
                        protocol::Payload::Text(t) => Some((format!("{key}.send"), t)),
                        _ => None,
                    }
                    .into_iter(),
                )
            }
            StepKind::Grpc(g) => Box::new(g.templates().map(|(f, t)| (format!("grpc.{f}"), t))),
            StepKind::Ws(w) => Box::new(
                w.templates()
                    .into_iter()
                    .map(|(f, t)| (format!("ws.{f}"), t)),
            ),
            StepKind::Think(_) => Box::new(std::iter::empty()),
        }
    }

    /// Mutable access to every template (the CLI's `${env:...}` resolution).
    pub fn templates_mut(
        &mut self,
    ) -> Box<dyn Iterator<Item = (String, &mut crate::template::Template)> + '_> {
        let key = self.kind.key();
        match &mut self.kind {
            StepKind::Http(h) => Box::new(h.templates_mut().map(|(f, t)| (format!("http.{f}"), t))),
            StepKind::Tcp(TcpRequest { send, .. }) | StepKind::Udp(UdpRequest { send, .. }) => {
                Box::new(
                    match send {
                        protocol::Payload::Text(t) => Some((format!("{key}.send"), t)),
                        _ => None,
                    }
                    .into_iter(),
                )
            }
            StepKind::Grpc(g) => Box::new(g.templates_mut().map(|(f, t)| (format!("grpc.{f}"), t))),
            StepKind::Ws(w) => Box::new(
                w.templates_mut()
                    .into_iter()
                    .map(|(f, t)| (format!("ws.{f}"), t)),
            ),
            StepKind::Think(_) => Box::new(std::iter::empty()),
        }
    }
}

/// `think_time: 500ms` or `{ min: 1s, max: 3s }`, by hand rather than `untagged` so that a
/// mistake (`think_time: 500`) gets the duration's own error, not "did not match any variant".
impl<'de> Deserialize<'de> for ThinkTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Range {
            min: HumanDuration,
            max: HumanDuration,
        }
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ThinkTime;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a duration like 500ms, or { min: 1s, max: 3s }")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ThinkTime, E> {
                crate::duration::parse_duration(v)
                    .map(|d| ThinkTime::Fixed(HumanDuration(d)))
                    .map_err(|e| {
                        E::custom(format!("{e} (a think time is a duration like 500ms, or {{ min: 1s, max: 3s }})"))
                    })
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ThinkTime, E> {
                crate::duration::DurationVisitor
                    .visit_u64(v)
                    .map(ThinkTime::Fixed)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ThinkTime, E> {
                crate::duration::DurationVisitor
                    .visit_i64(v)
                    .map(ThinkTime::Fixed)
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<ThinkTime, E> {
                crate::duration::DurationVisitor
                    .visit_f64(v)
                    .map(ThinkTime::Fixed)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<ThinkTime, A::Error> {
                let r = Range::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
                Ok(ThinkTime::Range {
                    min: r.min,
                    max: r.max,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A pause: fixed, or uniformly random within a range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ThinkTime {
    /// The same pause every time (`think_time: 200ms`).
    Fixed(HumanDuration),
    /// A pause drawn uniformly each time (`think_time: { min: 100ms, max: 1s }`), from the
    /// run's seeded generator.
    Range {
        /// The shortest pause.
        min: HumanDuration,
        /// The longest pause.
        max: HumanDuration,
    },
}
