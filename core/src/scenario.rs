//! The scenario file: the user's contract. Parsing names the offending field; validation
//! names the field and the reason. Nothing here panics on user input.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::data::DataSource;
use crate::duration::HumanDuration;
use crate::extract::{Check, Extract};
pub use crate::http::{status_error, status_expected, HttpRequest};
use crate::protocol::{self, TcpRequest, Transport, UdpRequest};
use crate::target::Target;
use crate::template::Var;

/// Largest arrival rate accepted for one phase, in new sessions per second.
pub const MAX_ARRIVAL_RATE: f64 = 10_000_000.0;
/// Most agents one run may ask for.
pub const MAX_AGENTS: u32 = 4096;
/// Most connections a closed or constant-rate load may ask for (all agents together).
pub const MAX_CONNECTIONS: u32 = 1_000_000;
/// Most arrival phases in one scenario (a capacity search of 100 steps is far below it; the
/// plan keeps one count per agent and phase).
pub const MAX_PHASES: usize = 1_000;
/// Most steps in one session (every request step has its own histograms in the report).
pub const MAX_STEPS: usize = 100;
/// Most thresholds in one scenario.
pub const MAX_THRESHOLDS: usize = 100;
/// Most arrivals one run may plan in total: 1e7/s for over three years. Far above any real
/// run, and it keeps every arrival index exact in the schedule's `f64` arithmetic.
pub const MAX_TOTAL_ARRIVALS: f64 = 1e15;

/// Largest scenario text (files it names inlined): it travels whole in SubmitRun and in every
/// agent's Assign, and both ends accept exactly this much (plus [`MESSAGE_OVERHEAD`]), so a
/// scenario the CLI accepts is never refused later as "message too large".
pub const MAX_SCENARIO_BYTES: usize = 32 << 20;
/// Room for the other fields of a message that carries a scenario.
pub const MESSAGE_OVERHEAD: usize = 1 << 20;

/// A load test: arrival phases, and what each arriving virtual client does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// A short name for the run.
    pub name: String,
    /// What to load. The scheme picks the transport and so the step kind:
    /// `http://host:port/prefix` (http steps; request paths are appended to the prefix),
    /// `tcp://host:port` and `unix:///path` (tcp steps), `udp://host:port` (udp steps),
    /// `grpc://host:port` and `grpcs://host:port` (grpc steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    /// Where the schema of the grpc steps comes from: `{ proto_files: [a.proto] }` or
    /// `{ reflection: true }`; resolved once by the CLI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<crate::grpc::GrpcOptions>,
    /// HTTP version of `http://` and `https://` targets: `"1.1"` (default) or `"2"` (over
    /// `http://`, h2c with prior knowledge; over `https://`, h2 negotiated by ALPN).
    /// Quote it: `http_version: "2"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_version: Option<HttpVersion>,
    /// TLS options of an `https://` target (certificates are verified unless told otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsOptions>,
    /// How many agents share the load (with `--local`, how many to start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<u32>,
    /// The arrival process within each phase.
    #[serde(default)]
    pub arrival: ArrivalProcess,
    /// Seed of the arrival process; the schedule is deterministic given the seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Arrival phases (open model), run one after the other. Give either `phases` or `load`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<Phase>,
    /// A closed (wrk `-c`) or constant-rate (wrk2 `-R`) load instead of arrival phases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<Load>,
    /// Data sources, read as `${NAME.column}`: a row per session, bound by the global
    /// arrival index so a file splits exactly across agents (see `data`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub data: BTreeMap<String, DataSource>,
    /// Keep a cookie jar per session: `Set-Cookie` of a response is sent back as `Cookie` on
    /// the session's later HTTP steps (name=value only; one target, so no domain or path
    /// matching; attributes and expiry are ignored).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cookies: bool,
    /// HTTP steps run once on each agent before the load (getting an OAuth token, say),
    /// outside any measurement: nothing of them is recorded. Every session reads the values
    /// they extract as `${setup.NAME}`; a setup step that fails refuses the run before any
    /// load. They may read the environment, built-ins and earlier setup values, not data.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<Step>,
    /// The steps each arriving session runs, in order, over one connection. Give either
    /// `session`, `sessions` (a weighted mix) or `workloads`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub session: Vec<Step>,
    /// A weighted mix of sessions instead of one `session`: `[{ name, weight, steps }]`, run
    /// exactly in proportion to the weights (see `workloads`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<crate::workload::SessionType>,
    /// Several traffic shapes in one run, instead of the top-level `phases`/`load` and
    /// `session`/`sessions`: `[{ name, start, phases | load, session | sessions }]`, all from
    /// one T0, each sharded exactly, reported apart and as a whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<crate::workload::Workload>,
    /// What happens when an agent is lost mid-run.
    #[serde(default)]
    pub on_agent_loss: AgentLossPolicy,
    /// How long one request may take before it counts as a `timeout` error.
    #[serde(default = "default_request_timeout")]
    pub request_timeout: HumanDuration,
    /// Pass/fail criteria on the merged result, e.g. `p99 < 50ms`, `error_rate < 0.1%`,
    /// `throughput >= 99% planned`, `phase(ramp).p99.9 <= 200ms`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<String>,
    /// Also evaluate the thresholds live, on the merged data as intervals arrive, and abort
    /// the run at the first breach (the data so far is kept and reported; `run` exits 1).
    /// A threshold is judged live only after the first 2 s and once its scope has at least
    /// 100 finished requests, so a few early samples cannot abort a run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abort_on_fail: bool,
    /// The default error verdict: without a run-wide `error_rate` threshold, a run whose
    /// error rate reaches this is flagged (exit 1), so CI can gate on failures without writing
    /// thresholds. A percentage like `1%` (the default) or `0%`, or `none` to turn it off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_error_rate: Option<String>,
}

fn default_request_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(10))
}

/// HTTP version of an `http://` target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HttpVersion {
    /// HTTP/1.1 with keep-alive.
    #[default]
    #[serde(rename = "1.1")]
    Http11,
    /// HTTP/2 over cleartext TCP with prior knowledge (h2c).
    #[serde(rename = "2")]
    Http2,
}

/// TLS options of an `https://` target.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsOptions {
    /// Accept any certificate, for self-signed test targets. Never for a real service: the
    /// run is then open to interception, and the report and the CLI say so loudly.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_verify: bool,
    /// PEM file of the certificate authorities to trust instead of the system's (relative to
    /// the scenario file). The CLI reads it into `ca_pem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// The trusted certificate authorities, PEM (what `ca_file` becomes once read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_pem: Option<String>,
    /// The name to send in SNI and to verify the certificate against, when it is not the
    /// target URL's host (for example a target addressed by IP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

/// Largest CA bundle accepted in `tls.ca_file`.
pub const MAX_CA_PEM: usize = 1 << 20;

impl TlsOptions {
    /// The certificates of `ca_pem` (DER); the error says what is wrong with the PEM.
    pub fn ca_certificates(
        &self,
    ) -> Result<Vec<rustls_pki_types::CertificateDer<'static>>, String> {
        use rustls_pki_types::pem::PemObject;
        let Some(pem) = &self.ca_pem else {
            return Ok(Vec::new());
        };
        let certs = rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("not a valid PEM certificate bundle: {e}"))?;
        if certs.is_empty() {
            return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
        }
        Ok(certs)
    }

    fn validate(&self) -> Result<(), ScenarioError> {
        if self.ca_file.is_some() && self.ca_pem.is_some() {
            return Err(ScenarioError::invalid(
                "tls.ca_file",
                "give either ca_file or ca_pem, not both",
            ));
        }
        if self.insecure_skip_verify && (self.ca_file.is_some() || self.ca_pem.is_some()) {
            return Err(ScenarioError::invalid(
                "tls.insecure_skip_verify",
                "skips verification, so a CA (ca_file, ca_pem) would never be used; give one or the other",
            ));
        }
        self.ca_certificates()
            .map_err(|why| ScenarioError::invalid("tls.ca_pem", why))?;
        if let Some(name) = &self.server_name {
            rustls_pki_types::ServerName::try_from(name.as_str()).map_err(|_| {
                ScenarioError::invalid(
                    "tls.server_name",
                    format!("`{name}` is neither a DNS name nor an IP address"),
                )
            })?;
        }
        Ok(())
    }
}

/// The arrival process within a phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalProcess {
    /// Evenly spaced arrivals following the (possibly ramping) rate.
    #[default]
    Uniform,
    /// A (non-homogeneous) Poisson process with the phase's rate.
    Poisson,
}

/// One arrival phase: a duration and a rate, optionally ramping linearly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub duration: HumanDuration,
    /// New sessions per second, for the whole test (all agents together), at the phase start.
    pub arrival_rate: f64,
    /// If set, the rate ramps linearly to this value by the end of the phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_to: Option<f64>,
}

impl Phase {
    /// Rate at the end of the phase.
    pub fn end_rate(&self) -> f64 {
        self.ramp_to.unwrap_or(self.arrival_rate)
    }
    /// Expected number of arrivals: the integral of the rate over the phase.
    pub fn expected_arrivals(&self) -> f64 {
        (self.arrival_rate + self.end_rate()) / 2.0 * self.duration.as_secs_f64()
    }
    /// The phase's display name: its `name`, or `phase-N` (1-based).
    pub fn display_name(&self, index: usize) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("phase-{}", index + 1))
    }
}

/// Which load model a [`Load`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LoadModel {
    /// `connections` connections, each running the session's steps back to back in a loop
    /// for `duration` (wrk `-c`). There is no schedule: the planned count is what was started.
    Closed,
    /// `rate` sessions per second in total, on a uniform schedule, over a pool of
    /// `connections` connections (wrk2 `-R`). Each slot runs the whole session over a pooled
    /// connection; a one-request session is one request per slot. When every connection is
    /// busy a due slot waits, and the wait counts in its response time.
    Constant,
}

/// A closed or constant-rate load: `{ model: closed, connections: N, duration: D }` or
/// `{ model: constant, rate: R, connections: N, duration: D }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Load {
    pub model: LoadModel,
    /// Connections, all agents together (split across agents, counts differing by at most 1).
    pub connections: u32,
    pub duration: HumanDuration,
    /// Constant model only: sessions (slots) per second, all agents together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// HTTP/2 and gRPC targets: sessions in flight at once on each connection, each on its
    /// own streams (default 1), as real gRPC clients load a server: `connections: 10,
    /// streams_per_connection: 8` keeps 80 sessions going over 10 connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams_per_connection: Option<u32>,
}

/// Most streams per connection a load may ask for.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 1_000;

impl Load {
    /// Sessions in flight at once on each connection (1 unless `streams_per_connection`).
    pub fn streams(&self) -> u32 {
        self.streams_per_connection.unwrap_or(1).max(1)
    }
}

impl Load {
    /// The single synthetic phase the schedule, the plan and the report use for this load:
    /// named after the model; rate 0 (no schedule) for closed, `rate` for constant.
    pub fn as_phase(&self) -> Phase {
        let (name, rate) = match self.model {
            LoadModel::Closed => ("closed", 0.0),
            LoadModel::Constant => ("constant", self.rate.unwrap_or(0.0)),
        };
        Phase {
            name: Some(name.to_string()),
            duration: self.duration,
            arrival_rate: rate,
            ramp_to: None,
        }
    }
}

/// What to do when an agent is lost mid-run: `fail`, or `{ tolerate: PCT }`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "LossPolicyRepr", into = "LossPolicyRepr")]
pub enum AgentLossPolicy {
    /// Abort the whole run.
    #[default]
    Fail,
    /// Go on while at most this percentage of the planned load is lost with lost agents.
    Tolerate(f64),
}

/// The file form of [`AgentLossPolicy`]: the word `fail`, or a map `{ tolerate: PCT }`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
enum LossPolicyRepr {
    /// `fail`: abort the run when an agent is lost.
    Word(LossWord),
    /// `{ tolerate: PCT }`: go on while at most PCT % of the load is lost.
    Tolerate {
        #[serde(rename = "tolerate")]
        pct: f64,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum LossWord {
    Fail,
}

impl From<LossPolicyRepr> for AgentLossPolicy {
    fn from(r: LossPolicyRepr) -> Self {
        match r {
            LossPolicyRepr::Word(LossWord::Fail) => Self::Fail,
            LossPolicyRepr::Tolerate { pct } => Self::Tolerate(pct),
        }
    }
}

impl From<AgentLossPolicy> for LossPolicyRepr {
    fn from(p: AgentLossPolicy) -> Self {
        match p {
            AgentLossPolicy::Fail => Self::Word(LossWord::Fail),
            AgentLossPolicy::Tolerate(pct) => Self::Tolerate { pct },
        }
    }
}

impl JsonSchema for AgentLossPolicy {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AgentLossPolicy".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        LossPolicyRepr::json_schema(g)
    }
}

/// One step of a session.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Name used in per-step breakdowns; defaults to `step-N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An HTTP request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpRequest>,
    /// A framed request/response over TCP (or a Unix socket): `tcp://` and `unix://` targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpRequest>,
    /// A datagram and its reply: `udp://` targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpRequest>,
    /// A unary gRPC call: `grpc://` and `grpcs://` targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<crate::grpc::GrpcCall>,
    /// A pause before the next step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_time: Option<ThinkTime>,
    /// Run this step N times in a row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
    /// Open a new connection for each request of this step instead of reusing the session's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub new_connection: bool,
    /// Values taken from the response, read as `${NAME}` by later steps of the session. A
    /// value that is missing fails the request with the error kind `extract.NAME`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extract: BTreeMap<String, Extract>,
    /// Assertions on the response; a failed one fails the request with the error kind
    /// `check.status`, `check.body_contains` or `check.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<Check>,
}

impl Step {
    pub fn repeat(&self) -> u32 {
        self.repeat.unwrap_or(1)
    }
    /// Number of requests this step sends.
    pub fn requests(&self) -> u64 {
        if self.http.is_some() || self.tcp.is_some() || self.udp.is_some() || self.grpc.is_some() {
            u64::from(self.repeat())
        } else {
            0
        }
    }
    pub fn display_name(&self, index: usize) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("step-{}", index + 1))
    }

    /// Every template of the step's request, with its field relative to the step
    /// (`http.path`, `http.headers.NAME`, `http.body`, `tcp.send`, `udp.send`).
    pub fn templates(&self) -> impl Iterator<Item = (String, &crate::template::Template)> {
        let sends = [
            ("tcp", self.tcp.as_ref().map(|t| &t.send)),
            ("udp", self.udp.as_ref().map(|u| &u.send)),
        ]
        .into_iter()
        .filter_map(|(kind, p)| match p {
            Some(protocol::Payload::Text(t)) => Some((format!("{kind}.send"), t)),
            _ => None,
        });
        self.http
            .iter()
            .flat_map(|h| h.templates().map(|(f, t)| (format!("http.{f}"), t)))
            .chain(sends)
    }

    /// Mutable access to every template (the CLI's `${env:...}` resolution).
    pub fn templates_mut(
        &mut self,
    ) -> impl Iterator<Item = (String, &mut crate::template::Template)> {
        let tcp = self.tcp.as_mut().map(|t| &mut t.send);
        let udp = self.udp.as_mut().map(|u| &mut u.send);
        let sends = [("tcp", tcp), ("udp", udp)]
            .into_iter()
            .filter_map(|(kind, p)| match p {
                Some(protocol::Payload::Text(t)) => Some((format!("{kind}.send"), t)),
                _ => None,
            });
        self.http
            .iter_mut()
            .flat_map(|h| h.templates_mut().map(|(f, t)| (format!("http.{f}"), t)))
            .chain(sends)
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
                crate::duration::DurationVisitor
                    .visit_str(v)
                    .map(ThinkTime::Fixed)
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
    Fixed(HumanDuration),
    Range {
        min: HumanDuration,
        max: HumanDuration,
    },
}

/// A scenario that does not parse or does not validate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScenarioError {
    /// The text is not YAML/JSON of the scenario's shape.
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    /// A field has a value the scenario cannot run with.
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
}

impl ScenarioError {
    fn invalid(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            path: path.into(),
            reason: reason.into(),
        }
    }
    /// The dotted field path the error is about.
    pub fn path(&self) -> &str {
        match self {
            Self::Parse { path, .. } | Self::Invalid { path, .. } => path,
        }
    }
}

impl Scenario {
    /// Parses a scenario whose load is chosen elsewhere (the capacity search): without
    /// `phases` or `load` (with workloads, a workload without them) it gets one placeholder
    /// phase, which the caller replaces.
    pub fn from_yaml_loadless(text: &str) -> Result<Self, ScenarioError> {
        let mut s = Self::parse_unchecked(text)?;
        let placeholder = || {
            vec![Phase {
                name: None,
                duration: HumanDuration(std::time::Duration::from_secs(1)),
                arrival_rate: 1.0,
                ramp_to: None,
            }]
        };
        if s.workloads.is_empty() && s.phases.is_empty() && s.load.is_none() {
            s.phases = placeholder();
        }
        for w in &mut s.workloads {
            if w.phases.is_empty() && w.load.is_none() {
                w.phases = placeholder();
            }
        }
        s.validate()?;
        Ok(s)
    }

    /// Parses YAML (or JSON, which is YAML) and validates it.
    pub fn from_yaml(text: &str) -> Result<Self, ScenarioError> {
        let s = Self::parse_unchecked(text)?;
        s.validate()?;
        Ok(s)
    }

    /// Parses without the checks of [`Scenario::validate`] (the types' own still apply).
    fn parse_unchecked(text: &str) -> Result<Self, ScenarioError> {
        if text.len() > MAX_SCENARIO_BYTES {
            return Err(ScenarioError::Parse {
                path: "scenario".into(),
                message: format!(
                    "{} bytes; a scenario (with its files) may have at most {} MiB",
                    text.len(),
                    MAX_SCENARIO_BYTES >> 20
                ),
            });
        }
        crate::yaml_guard::check_aliases(text).map_err(|message| ScenarioError::Parse {
            path: "scenario".into(),
            message,
        })?;
        let de = serde_norway::Deserializer::from_str(text);
        let scenario: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." || path.is_empty() {
                "scenario".to_string()
            } else {
                path
            };
            let message = strip_location_prefix(&e.into_inner().to_string());
            ScenarioError::Parse { path, message }
        })?;
        Ok(scenario)
    }

    /// Checks every value the types cannot express. Returns the first problem found.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.name.trim().is_empty() {
            return Err(ScenarioError::invalid("name", "must not be empty"));
        }
        if let Some(agents) = self.agents {
            if agents == 0 || agents > MAX_AGENTS {
                return Err(ScenarioError::invalid(
                    "agents",
                    format!("must be between 1 and {MAX_AGENTS}"),
                ));
            }
        }
        if let AgentLossPolicy::Tolerate(pct) = self.on_agent_loss {
            if !(0.0..=100.0).contains(&pct) {
                return Err(ScenarioError::invalid(
                    "on_agent_loss.tolerate",
                    "must be a percentage between 0 and 100",
                ));
            }
        }
        if self.request_timeout.0.is_zero() {
            return Err(ScenarioError::invalid("request_timeout", "must be > 0"));
        }
        if self.thresholds.len() > MAX_THRESHOLDS {
            return Err(ScenarioError::invalid(
                "thresholds",
                format!(
                    "{} thresholds; at most {MAX_THRESHOLDS}",
                    self.thresholds.len()
                ),
            ));
        }
        if self.http_version.is_some() && self.transport()?.step_kind() != "http" {
            return Err(ScenarioError::invalid(
                "http_version",
                "only applies to http:// and https:// targets",
            ));
        }
        if let Some(tls) = &self.tls {
            if !self.transport()?.is_tls() {
                return Err(ScenarioError::invalid(
                    "tls",
                    "only applies to https:// and grpcs:// targets",
                ));
            }
            tls.validate()?;
        }
        self.validate_workloads()?;
        self.validate_data()?;
        if self.cookies && self.transport()?.step_kind() != "http" {
            return Err(ScenarioError::invalid(
                "cookies",
                "only applies to http:// and https:// targets",
            ));
        }
        self.validate_setup()?;
        for w in self.workload_views() {
            for t in &w.types {
                self.validate_steps(&t.path, t.steps)?;
            }
        }
        crate::grpc::check_scenario(self)?;
        if let Some(v) = &self.max_error_rate {
            let v = v.trim();
            if v != "none" && v != "off" && crate::threshold::parse_fraction(v).is_none() {
                return Err(ScenarioError::invalid(
                    "max_error_rate",
                    format!("`{v}` is not a percentage like 1% or 0%, or `none`"),
                ));
            }
        }
        // The supply of rows is known now when the schedule does not depend on a seed the
        // controller has yet to draw; otherwise the agents check it with the run's seed.
        if self.seed.is_some() || self.arrival == ArrivalProcess::Uniform {
            self.check_data_supply(self.seed.unwrap_or(0))?;
        }
        self.parsed_thresholds().map(|_| ())
    }

    /// True when the scenario turns off TLS certificate verification.
    pub fn insecure_tls(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.insecure_skip_verify)
    }

    /// The default error verdict's limit ([`crate::threshold::DEFAULT_MAX_ERROR_RATE`] unless
    /// `max_error_rate` says otherwise); `None` when turned off. Checked by `validate`.
    pub fn max_error_rate(&self) -> Option<f64> {
        match self.max_error_rate.as_deref().map(str::trim) {
            None => Some(crate::threshold::DEFAULT_MAX_ERROR_RATE),
            Some("none" | "off") => None,
            Some(v) => crate::threshold::parse_fraction(v),
        }
    }

    /// The thresholds, parsed; the error names the entry.
    pub fn parsed_thresholds(&self) -> Result<Vec<crate::threshold::Threshold>, ScenarioError> {
        self.thresholds
            .iter()
            .enumerate()
            .map(|(i, t)| {
                crate::threshold::Threshold::parse(t)
                    .map_err(|why| ScenarioError::invalid(format!("thresholds[{i}]"), why))
            })
            .collect()
    }

    /// A workload's `load` (`path` is its field prefix: empty at the top level).
    fn validate_load(
        &self,
        path: &str,
        phases: &[Phase],
        load: &Load,
    ) -> Result<(), ScenarioError> {
        let field = |f: &str| format!("{path}{f}");
        if !phases.is_empty() {
            return Err(ScenarioError::invalid(
                field("load"),
                "give either phases or load, not both",
            ));
        }
        if self.arrival == ArrivalProcess::Poisson {
            return Err(ScenarioError::invalid(
                "arrival",
                "poisson only applies to phases; a load runs on a uniform schedule",
            ));
        }
        if load.connections == 0 {
            return Err(ScenarioError::invalid(
                field("load.connections"),
                "must be >= 1",
            ));
        }
        if load.connections > MAX_CONNECTIONS {
            return Err(ScenarioError::invalid(
                field("load.connections"),
                format!("must be <= {MAX_CONNECTIONS}"),
            ));
        }
        if load.duration.0.is_zero() {
            return Err(ScenarioError::invalid(
                field("load.duration"),
                "must be > 0",
            ));
        }
        if let Some(s) = load.streams_per_connection {
            let h2 = self.http_version == Some(HttpVersion::Http2)
                || matches!(self.transport()?, Transport::Grpc | Transport::Grpcs);
            if !h2 {
                return Err(ScenarioError::invalid(
                    field("load.streams_per_connection"),
                    "only HTTP/2 carries several streams on a connection: it needs http_version: \"2\" or a grpc:// or grpcs:// target",
                ));
            }
            if !(1..=MAX_STREAMS_PER_CONNECTION).contains(&s) {
                return Err(ScenarioError::invalid(
                    field("load.streams_per_connection"),
                    format!("must be between 1 and {MAX_STREAMS_PER_CONNECTION}"),
                ));
            }
        }
        match (load.model, load.rate) {
            (LoadModel::Closed, Some(_)) => Err(ScenarioError::invalid(
                field("load.rate"),
                "only applies to model constant (a closed load has no rate)",
            )),
            (LoadModel::Closed, None) => Ok(()),
            (LoadModel::Constant, None) => Err(ScenarioError::invalid(
                field("load.rate"),
                "is required for model constant",
            )),
            (LoadModel::Constant, Some(r)) => {
                check_rate(&field("load.rate"), r)?;
                if r <= 0.0 {
                    return Err(ScenarioError::invalid(field("load.rate"), "must be > 0"));
                }
                Ok(())
            }
        }
    }

    /// The run's workloads (one for a scenario without `workloads:`), with their places in
    /// the run's global phase, session type and step indexes.
    pub fn workload_views(&self) -> Vec<crate::workload::View<'_>> {
        crate::workload::View::all(self)
    }

    /// Whether phase and step names carry their workload's name (`workloads:` is given).
    pub fn named_workloads(&self) -> bool {
        !self.workloads.is_empty()
    }

    /// The phases the schedule, plan and report use, every workload's in turn: the arrival
    /// phases, or the one synthetic phase of a `load`.
    pub fn effective_phases(&self) -> Vec<Phase> {
        let named = self.named_workloads();
        self.workload_views()
            .iter()
            .flat_map(|w| w.effective_phases(named))
            .collect()
    }

    /// When each global phase starts, in seconds after T0: its workload's start plus the
    /// phases before it in that workload.
    pub fn phase_starts(&self) -> Vec<f64> {
        let mut out = Vec::new();
        for w in self.workload_views() {
            let mut t = w.start.as_secs_f64();
            for p in w.effective_phases(false) {
                out.push(t);
                t += p.duration.as_secs_f64();
            }
        }
        out
    }

    /// Per global phase, whether it belongs to a closed load (no schedule: planned is what
    /// was started).
    pub fn closed_phases(&self) -> Vec<bool> {
        self.workload_views()
            .iter()
            .flat_map(|w| std::iter::repeat_n(w.is_closed(), w.phase_count()))
            .collect()
    }

    /// True when the whole run is one closed load.
    pub fn is_closed(&self) -> bool {
        self.closed_phases().iter().all(|c| *c)
    }

    /// The workloads' loads and sessions, their names, the mixes' weights, and the run's
    /// bounds on phases and arrivals over all workloads together.
    fn validate_workloads(&self) -> Result<(), ScenarioError> {
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
                Some(load) => self.validate_load(&w.path, w.phases, load)?,
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
        // Each workload is checked alone too (naming its field); several add up.
        check_total_arrivals("phases", views.iter().flat_map(|w| w.phases))
    }

    /// A workload's arrival phases (`path` is its field prefix: empty at the top level).
    fn validate_phases(&self, path: &str, phases: &[Phase]) -> Result<(), ScenarioError> {
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

    /// One session type's steps (`path`: `session`, `sessions[1].steps`, ...).
    fn validate_steps(&self, path: &str, steps: &[Step]) -> Result<(), ScenarioError> {
        if steps.is_empty() {
            return Err(ScenarioError::invalid(
                path,
                "must contain at least one step",
            ));
        }
        if steps.len() > MAX_STEPS {
            return Err(ScenarioError::invalid(
                path,
                format!("{} steps; at most {MAX_STEPS}", steps.len()),
            ));
        }
        // Variables extracted by the steps before the one being checked.
        let mut defined = std::collections::BTreeSet::new();
        for (i, step) in steps.iter().enumerate() {
            let kinds = usize::from(step.http.is_some())
                + usize::from(step.tcp.is_some())
                + usize::from(step.udp.is_some())
                + usize::from(step.grpc.is_some())
                + usize::from(step.think_time.is_some());
            if kinds != 1 {
                return Err(ScenarioError::invalid(
                    format!("{path}[{i}]"),
                    "a step needs exactly one of: http, tcp, udp, grpc, think_time",
                ));
            }
            let kind = if step.http.is_some() {
                Some("http")
            } else if step.tcp.is_some() {
                Some("tcp")
            } else if step.udp.is_some() {
                Some("udp")
            } else if step.grpc.is_some() {
                Some("grpc")
            } else {
                None
            };
            if let Some(kind) = kind {
                self.check_step_transport(&format!("{path}[{i}]"), kind)?;
            }
            if let Some(t) = &step.tcp {
                protocol::check_tcp(t).map_err(|(field, why)| {
                    ScenarioError::invalid(format!("{path}[{i}].tcp.{field}"), why)
                })?;
            }
            if let Some(u) = &step.udp {
                protocol::check_udp(u).map_err(|(field, why)| {
                    ScenarioError::invalid(format!("{path}[{i}].udp.{field}"), why)
                })?;
            }
            if let Some(g) = &step.grpc {
                g.check().map_err(|(field, why)| {
                    ScenarioError::invalid(format!("{path}[{i}].grpc.{field}"), why)
                })?;
            }
            if step.repeat == Some(0) {
                return Err(ScenarioError::invalid(
                    format!("{path}[{i}].repeat"),
                    "must be >= 1",
                ));
            }
            if let Some(ThinkTime::Range { min, max }) = step.think_time {
                if min > max {
                    return Err(ScenarioError::invalid(
                        format!("{path}[{i}].think_time"),
                        "min must be <= max",
                    ));
                }
            }
            if let Some(http) = &step.http {
                http.check().map_err(|(field, why)| {
                    ScenarioError::invalid(format!("{path}[{i}].http.{field}"), why)
                })?;
            }
            for (field, t) in step.templates() {
                self.check_refs(t, &defined, false)
                    .map_err(|why| ScenarioError::invalid(format!("{path}[{i}].{field}"), why))?;
            }
            if (!step.extract.is_empty() || step.check.is_some()) && step.http.is_none() {
                return Err(ScenarioError::invalid(
                    format!("{path}[{i}]"),
                    "extract and check apply to http steps",
                ));
            }
            check_extraction(step, &format!("{path}[{i}]"))?;
            defined.extend(step.extract.keys().map(String::as_str));
        }
        if steps.iter().all(|s| s.requests() == 0) {
            return Err(ScenarioError::invalid(
                path,
                "must contain at least one request step",
            ));
        }
        Ok(())
    }

    /// The setup steps: http steps against an http target, their references, extraction and
    /// checks.
    fn validate_setup(&self) -> Result<(), ScenarioError> {
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
            let Some(http) = &step.http else {
                return Err(ScenarioError::invalid(
                    field(""),
                    "a setup step is an http step",
                ));
            };
            if step.tcp.is_some()
                || step.udp.is_some()
                || step.grpc.is_some()
                || step.think_time.is_some()
            {
                return Err(ScenarioError::invalid(
                    field(""),
                    "a setup step is an http step, and only that",
                ));
            }
            if step.repeat == Some(0) {
                return Err(ScenarioError::invalid(field(".repeat"), "must be >= 1"));
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
        Ok(())
    }

    /// The target's transport; the error names `target`.
    pub fn transport(&self) -> Result<Transport, ScenarioError> {
        self.target
            .as_ref()
            .map(Target::transport)
            .ok_or_else(|| ScenarioError::invalid("target", "is required"))
    }

    /// Every reference of `t` resolves: a data source and column, a value extracted by an
    /// earlier step (`defined`), by a setup step, a built-in, a generator, or the environment.
    /// In a setup step (`in_setup`), `defined` holds the earlier setup steps' values, read as
    /// `${setup.NAME}`, and no data is read.
    fn check_refs(
        &self,
        t: &crate::template::Template,
        defined: &std::collections::BTreeSet<&str>,
        in_setup: bool,
    ) -> Result<(), String> {
        for r in t.refs() {
            match &r.var {
                Var::Extracted(name) if in_setup => {
                    return Err(format!(
                        "{r}: a setup step reads the values of earlier setup steps as ${{setup.{name}}}"
                    ));
                }
                Var::Extracted(name) if !defined.contains(name.as_str()) => {
                    return Err(format!("{r} is not defined before this step"));
                }
                Var::Setup(name) if in_setup && !defined.contains(name.as_str()) => {
                    return Err(format!("{r} is not defined before this step"));
                }
                Var::Setup(name)
                    if !in_setup && !self.setup.iter().any(|s| s.extract.contains_key(name)) =>
                {
                    return Err(format!("{r} is not extracted by any setup step"));
                }
                Var::Data { .. } if in_setup => {
                    return Err(format!(
                        "{r}: setup steps run once per agent, not per session, so they read no data"
                    ));
                }
                Var::Data { source, column } => {
                    let Some(d) = self.data.get(source) else {
                        return Err(format!("{r}: `{source}` is not a data source"));
                    };
                    if !d.is_unread() && d.column(column).is_none() {
                        return Err(format!(
                            "{r}: data.{source} has no column `{column}` (it has {})",
                            d.columns.join(", ")
                        ));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn validate_data(&self) -> Result<(), ScenarioError> {
        if !self.data.is_empty() && (!self.workloads.is_empty() || !self.sessions.is_empty()) {
            return Err(ScenarioError::invalid(
                "data",
                "data sources bind rows to one arrival index space: they are read by a top-level session, not yet with workloads or a sessions mix",
            ));
        }
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

    /// With `on_exhausted: fail`, refuses a run whose schedule (seeded with `seed`) uses more
    /// keys (sessions, requests, connections) than a data source has rows, saying when they
    /// would run out. The counts are arithmetic, never a walk.
    pub fn check_data_supply(&self, seed: u64) -> Result<(), ScenarioError> {
        if self.data.is_empty() {
            return Ok(());
        }
        crate::data::share::check_supply(self, seed)
            .map_err(|(path, why)| ScenarioError::invalid(path, why))
    }

    /// Requests per session that read data source `name` (each reading step times its
    /// repeat): the keys a session uses with `per: request`.
    pub fn requests_reading(&self, name: &str) -> u64 {
        self.session
            .iter()
            .filter(|s| {
                s.templates().any(|(_, t)| {
                    t.refs()
                        .any(|r| matches!(&r.var, Var::Data { source, .. } if source == name))
                })
            })
            .map(Step::requests)
            .sum()
    }

    /// The form agents receive: the data sources' rows left out (`rows_in_all` says how many
    /// there are; each agent is sent its share apart, [`crate::data::share`]).
    pub fn agent_form(&self) -> Self {
        let mut s = self.clone();
        for d in s.data.values_mut() {
            if d.rows_in_all.is_none() {
                d.rows_in_all = Some(u32::try_from(d.rows.len()).unwrap_or(u32::MAX));
                d.rows = Vec::new();
            }
        }
        s
    }

    /// Resolves every `${env:NAME}` through `lookup` (the CLI's environment, at submit
    /// time), so the submitted scenario carries values, never asks agents for theirs. The
    /// error names the field and the variable. Returns whether anything changed.
    pub fn resolve_env(
        &mut self,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<bool, ScenarioError> {
        let mut changed = false;
        let mut lists = vec![("setup".to_string(), &mut self.setup)];
        lists.extend(session_lists_mut(
            &mut self.session,
            &mut self.sessions,
            &mut self.workloads,
        ));
        for (part, steps) in lists {
            for (i, step) in steps.iter_mut().enumerate() {
                for (field, t) in step.templates_mut() {
                    changed |= t.resolve_env(lookup).map_err(|why| {
                        ScenarioError::invalid(format!("{part}[{i}].{field}"), why)
                    })?;
                }
            }
        }
        if changed {
            self.validate()?;
        }
        Ok(changed)
    }

    /// The environment variables the templates read (`${env:NAME}`), by name: what a run
    /// needs set in the CLI's environment.
    pub fn env_names(&self) -> std::collections::BTreeSet<&str> {
        self.setup
            .iter()
            .chain(self.step_lists().into_iter().flat_map(|(_, s)| s.iter()))
            .flat_map(|s| s.templates().map(|(_, t)| t))
            .flat_map(|t| t.refs())
            .filter_map(|r| match &r.var {
                Var::Env(n) => Some(n.as_str()),
                _ => None,
            })
            .collect()
    }

    /// True when a template still reads the environment (the CLI resolves them; a scenario
    /// submitted otherwise cannot run).
    pub fn has_env_refs(&self) -> bool {
        !self.env_names().is_empty()
    }

    /// A step of `kind` needs a target whose scheme runs that kind.
    fn check_step_transport(&self, step: &str, kind: &str) -> Result<(), ScenarioError> {
        let Some(t) = self.target.as_ref() else {
            return Err(ScenarioError::invalid(
                "target",
                format!("{step} is a {kind} step, so a target URL is required"),
            ));
        };
        let transport = self.transport()?;
        if transport.step_kind() != kind {
            let want = match kind {
                "http" => "http:// or https://",
                "tcp" => "tcp:// or unix://",
                "grpc" => "grpc:// or grpcs://",
                _ => "udp://",
            };
            return Err(ScenarioError::invalid(
                format!("{step}.{kind}"),
                format!(
                    "a {kind} step needs a {want} target, but the target is `{t}` (its steps are {})",
                    transport.step_kind()
                ),
            ));
        }
        Ok(())
    }

    /// Reads every `file:` payload and `body_file` through `read` (relative to `base`, the
    /// scenario file's folder) and puts the bytes in the scenario, so the submitted scenario
    /// needs no file. Returns whether anything was read. The error names the field.
    pub fn inline_files(
        &mut self,
        base: &std::path::Path,
        read: &mut dyn FnMut(&std::path::Path) -> std::io::Result<Vec<u8>>,
    ) -> Result<bool, ScenarioError> {
        let mut changed = false;
        // A setup step's body_file is read like a session step's.
        for (i, step) in self.setup.iter_mut().enumerate() {
            if let Some(h) = &mut step.http {
                changed |= inline_body_file(h, &format!("setup[{i}].http.body_file"), base, read)?;
            }
        }
        for (path, i, step) in self.step_lists_mut().into_iter().flat_map(|(path, steps)| {
            steps
                .iter_mut()
                .enumerate()
                .map(move |(i, s)| (path.clone(), i, s))
        }) {
            if let Some(h) = &mut step.http {
                changed |= inline_body_file(h, &format!("{path}[{i}].http.body_file"), base, read)?;
            }
            if let Some(t) = &mut step.tcp {
                let field =
                    |f: &str, why| ScenarioError::invalid(format!("{path}[{i}].tcp.{f}"), why);
                changed |= protocol::inline_payload(&mut t.send, base, protocol::MAX_FRAME, read)
                    .map_err(|w| field("send", w))?;
                changed |= protocol::inline_expect(&mut t.expect, base, protocol::MAX_FRAME, read)
                    .map_err(|w| field("expect", w))?;
            }
            if let Some(u) = &mut step.udp {
                let field =
                    |f: &str, why| ScenarioError::invalid(format!("{path}[{i}].udp.{f}"), why);
                changed |=
                    protocol::inline_payload(&mut u.send, base, protocol::MAX_DATAGRAM, read)
                        .map_err(|w| field("send", w))?;
                changed |=
                    protocol::inline_expect(&mut u.expect, base, protocol::MAX_DATAGRAM, read)
                        .map_err(|w| field("expect", w))?;
            }
        }
        for (name, d) in &mut self.data {
            if let Some(f) = d.file.clone() {
                let field = format!("data.{name}.file");
                let bytes = protocol::read_file(&f, base, crate::data::MAX_DATA_BYTES, read)
                    .map_err(|why| ScenarioError::invalid(&field, why))?;
                let jsonl = f.ends_with(".jsonl") || f.ends_with(".ndjson");
                d.load(&bytes, jsonl)
                    .map_err(|e| ScenarioError::invalid(&field, format!("`{f}`: {e}")))?;
                changed = true;
            }
        }
        if let Some(tls) = &mut self.tls {
            if let Some(f) = tls.ca_file.take() {
                let bytes = protocol::read_file(&f, base, MAX_CA_PEM, read)
                    .map_err(|why| ScenarioError::invalid("tls.ca_file", why))?;
                let text = String::from_utf8(bytes).map_err(|_| {
                    ScenarioError::invalid("tls.ca_file", format!("`{f}` is not PEM text"))
                })?;
                tls.ca_pem = Some(text);
                changed = true;
            }
        }
        if changed {
            self.validate()?;
        }
        Ok(changed)
    }

    /// True when a `file:` payload or `body_file` is still to be read by the CLI.
    pub fn has_files(&self) -> bool {
        use protocol::Payload::File;
        self.tls.as_ref().is_some_and(|t| t.ca_file.is_some())
            || self.data.values().any(|d| d.file.is_some())
            || self
                .setup
                .iter()
                .any(|s| s.http.as_ref().is_some_and(|h| h.body_file.is_some()))
            || self
                .step_lists()
                .iter()
                .flat_map(|(_, s)| s.iter())
                .any(|s| {
                    s.http.as_ref().is_some_and(|h| h.body_file.is_some())
                        || s.tcp.as_ref().is_some_and(|t| {
                            matches!(t.send, File(_))
                                || t.expect
                                    .as_ref()
                                    .is_some_and(|e| matches!(e.payload(), File(_)))
                        })
                        || s.udp.as_ref().is_some_and(|u| {
                            matches!(u.send, File(_))
                                || u.expect
                                    .as_ref()
                                    .is_some_and(|e| matches!(e.payload(), File(_)))
                        })
                })
    }

    /// Requests one session of the first workload's first type sends (each request step
    /// times its repeat): with one session, what every session sends.
    pub fn requests_per_session(&self) -> u64 {
        self.workload_views()
            .first()
            .and_then(|w| w.types.first())
            .map_or(0, |t| t.requests())
    }

    /// Total test duration: until the last workload ends (its start plus its phases, or its
    /// load's duration).
    pub fn duration(&self) -> std::time::Duration {
        self.workload_views()
            .iter()
            .map(|w| w.start.saturating_add(w.duration()))
            .max()
            .unwrap_or_default()
    }

    /// Display names of the steps that send requests, in the run's global step order (the
    /// per-step breakdown).
    pub fn step_names(&self) -> Vec<String> {
        let named = self.named_workloads();
        self.workload_views()
            .iter()
            .flat_map(|w| w.step_names(named))
            .collect()
    }

    /// Every list of session steps with its field path: `session`, `sessions[i].steps`, and
    /// the same inside each workload.
    pub fn step_lists(&self) -> Vec<(String, &[Step])> {
        self.workload_views()
            .into_iter()
            .flat_map(|w| w.types.into_iter().map(|t| (t.path, t.steps)))
            .collect()
    }

    /// [`Scenario::step_lists`], for writing (the CLI fills gRPC frames and reads files).
    pub(crate) fn step_lists_mut(&mut self) -> Vec<(String, &mut Vec<Step>)> {
        session_lists_mut(&mut self.session, &mut self.sessions, &mut self.workloads)
    }
}

/// The session step lists of a scenario's parts, with their field paths (what
/// [`Scenario::step_lists`] reads, for writing).
fn session_lists_mut<'a>(
    session: &'a mut Vec<Step>,
    sessions: &'a mut [crate::workload::SessionType],
    workloads: &'a mut [crate::workload::Workload],
) -> Vec<(String, &'a mut Vec<Step>)> {
    let mut out = vec![("session".to_string(), session)];
    for (t, st) in sessions.iter_mut().enumerate() {
        out.push((format!("sessions[{t}].steps"), &mut st.steps));
    }
    for (i, w) in workloads.iter_mut().enumerate() {
        out.push((format!("workloads[{i}].session"), &mut w.session));
        for (t, st) in w.sessions.iter_mut().enumerate() {
            out.push((format!("workloads[{i}].sessions[{t}].steps"), &mut st.steps));
        }
    }
    out
}

/// The expected arrivals of `phases` stay within [`MAX_TOTAL_ARRIVALS`]; `field` names them.
fn check_total_arrivals<'a>(
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

/// A step's extractions (variable names and extractors) and checks; `at` is the step's field
/// (`session[2]`, `setup[0]`). Session and setup steps are checked alike.
fn check_extraction(step: &Step, at: &str) -> Result<(), ScenarioError> {
    for (name, e) in &step.extract {
        if !crate::template::is_name(name) {
            return Err(ScenarioError::invalid(
                format!("{at}.extract"),
                format!("`{name}` is not a variable name"),
            ));
        }
        e.check()
            .map_err(|why| ScenarioError::invalid(format!("{at}.extract.{name}"), why))?;
    }
    if let Some(c) = &step.check {
        c.validate()
            .map_err(|(f, why)| ScenarioError::invalid(format!("{at}.check.{f}"), why))?;
    }
    Ok(())
}

/// Reads an http step's `body_file` (relative to `base`) into its body template, for
/// [`Scenario::inline_files`]; `field` names it in errors. Returns whether it read a file.
fn inline_body_file(
    h: &mut HttpRequest,
    field: &str,
    base: &std::path::Path,
    read: &mut dyn FnMut(&std::path::Path) -> std::io::Result<Vec<u8>>,
) -> Result<bool, ScenarioError> {
    let Some(f) = h.body_file.take() else {
        return Ok(false);
    };
    let bytes = protocol::read_file(&f, base, protocol::MAX_FRAME, read)
        .map_err(|why| ScenarioError::invalid(field, why))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| ScenarioError::invalid(field, format!("`{f}` is not UTF-8 text")))?;
    h.body = Some(
        crate::template::Template::parse(&text)
            .map_err(|why| ScenarioError::invalid(field, why))?,
    );
    Ok(true)
}

/// A workload's or a session type's name: not empty, and free of `/` (which joins names in
/// the report) and of parentheses (which close a threshold's scope).
fn check_name(field: &str, name: &str) -> Result<(), ScenarioError> {
    if name.trim().is_empty() {
        return Err(ScenarioError::invalid(field, "must not be empty"));
    }
    if name.contains(['/', '(', ')']) || name.len() > 64 {
        return Err(ScenarioError::invalid(
            field,
            format!("`{name}`: at most 64 characters, without `/`, `(` or `)`"),
        ));
    }
    Ok(())
}

/// The YAML library prefixes its messages with its own idea of the path (`session[0]: ...`);
/// we report the path ourselves, so drop it.
fn strip_location_prefix(message: &str) -> String {
    match message.split_once(": ") {
        Some((head, tail)) if !head.is_empty() && !head.contains(char::is_whitespace) => {
            tail.to_string()
        }
        _ => message.to_string(),
    }
}

fn check_rate(path: &str, rate: f64) -> Result<(), ScenarioError> {
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

/// The JSON Schema of the scenario file, generated from the types.
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(Scenario);
    serde_json::to_value(schema).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEMO: &str = r#"
name: ramp-demo
target: http://127.0.0.1:8080
agents: 3
arrival: uniform
phases:
  - duration: 10s
    arrival_rate: 20
  - duration: 10s
    arrival_rate: 20
    ramp_to: 100
session:
  - http: { method: GET, path: /data }
"#;

    #[test]
    fn durations_without_units_and_think_times_say_what_to_write() {
        let e = err(&DEMO.replace(
            "duration: 10s\n    arrival_rate: 20\n  -",
            "duration: 10\n    arrival_rate: 20\n  -",
        ));
        assert!(e.to_string().contains("`10` has no unit"), "{e}");
        let think = format!("{DEMO}  - think_time: 500\n");
        let e = err(&think);
        assert!(e.to_string().contains("`500` has no unit"), "{e}");
        assert!(e.path().contains("think_time"), "{}", e.path());
        let e = err(&format!("{DEMO}  - think_time: 2 minutes\n"));
        assert!(e.to_string().contains("write `2m`"), "{e}");
        let ok = Scenario::from_yaml(&format!("{DEMO}  - think_time: {{ min: 1s, max: 2s }}\n"))
            .unwrap();
        assert!(matches!(
            ok.session[1].think_time,
            Some(ThinkTime::Range { .. })
        ));
        let e = err(&format!("{DEMO}  - think_time: {{ min: 1s, most: 2s }}\n"));
        assert!(e.to_string().contains("most"), "{e}");
    }

    #[test]
    fn header_values_cannot_inject_lines() {
        let e = err(&DEMO.replace(
            "http: { method: GET, path: /data }",
            "http: { method: GET, path: /data, headers: { x-a: \"1\\r\\nx-b: 2\" } }",
        ));
        assert_eq!(e.path(), "session[0].http.headers.x-a");
        assert!(e.to_string().contains("line break"), "{e}");
    }

    #[test]
    fn accepts_the_contract_subset() {
        let s = Scenario::from_yaml(DEMO).unwrap();
        assert_eq!(s.name, "ramp-demo");
        assert_eq!(s.agents, Some(3));
        assert_eq!(s.phases.len(), 2);
        assert_eq!(s.phases[1].end_rate(), 100.0);
        assert_eq!(s.requests_per_session(), 1);
        assert_eq!(s.phases[1].expected_arrivals(), 600.0);
        assert_eq!(s.on_agent_loss, AgentLossPolicy::Fail);
    }

    fn err(text: &str) -> ScenarioError {
        Scenario::from_yaml(text).expect_err("should be rejected")
    }

    #[test]
    fn negative_ramp_names_the_field() {
        let e = err(&DEMO.replace("ramp_to: 100", "ramp_to: -5"));
        assert_eq!(e.to_string(), "phases[1].ramp_to: must be >= 0");
    }

    #[test]
    fn wrong_type_names_the_field() {
        let e = err(&DEMO.replace(
            "arrival_rate: 20\n  - duration",
            "arrival_rate: lots\n  - duration",
        ));
        assert_eq!(e.path(), "phases[0].arrival_rate", "{e}");
    }

    #[test]
    fn unknown_protocol_is_rejected() {
        let e = err(&DEMO.replace("http: { method: GET, path: /data }", "ftp: { path: /x }"));
        assert_eq!(e.path(), "session[0].ftp", "{e}");
        assert!(
            e.to_string()
                .starts_with("session[0].ftp: unknown field `ftp`"),
            "{e}"
        );
        assert!(e.to_string().contains("ftp"), "{e}");
    }

    #[test]
    fn empty_phases_are_rejected() {
        let text = "name: x\ntarget: http://h:1\nphases: []\nsession:\n  - http: {path: /}\n";
        assert_eq!(
            err(text).to_string(),
            "phases: must contain at least one phase"
        );
    }

    #[test]
    fn loss_policy_parses() {
        let s = Scenario::from_yaml(&format!("{DEMO}on_agent_loss: {{ tolerate: 50 }}\n")).unwrap();
        assert_eq!(s.on_agent_loss, AgentLossPolicy::Tolerate(50.0));
        let e = err(&format!("{DEMO}on_agent_loss: {{ tolerate: 150 }}\n"));
        assert_eq!(e.path(), "on_agent_loss.tolerate");
    }

    #[test]
    fn garbage_never_panics() {
        for text in [
            "",
            "[",
            "{{{",
            "name: [1,2",
            "phases: 3",
            "- - -",
            "name: x\nphases:\n - 1",
            "\u{0}\u{1}",
        ] {
            let _ = Scenario::from_yaml(text);
        }
    }

    const CLOSED: &str = r#"
name: closed
target: http://127.0.0.1:8080
load: { model: closed, connections: 10, duration: 5s }
session:
  - http: { path: / }
"#;

    #[test]
    fn load_models_parse() {
        let s = Scenario::from_yaml(CLOSED).unwrap();
        assert!(s.is_closed());
        assert_eq!(s.duration(), std::time::Duration::from_secs(5));
        let p = s.effective_phases();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].display_name(0), "closed");
        assert_eq!(p[0].expected_arrivals(), 0.0);
        let c =
            Scenario::from_yaml(&CLOSED.replace("model: closed,", "model: constant, rate: 2000,"))
                .unwrap();
        assert!(!c.is_closed());
        assert_eq!(c.effective_phases()[0].display_name(0), "constant");
        assert_eq!(c.effective_phases()[0].expected_arrivals(), 10_000.0);
        // Serialising and parsing again gives the same scenario (the controller ships JSON).
        let again = Scenario::from_yaml(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn load_validation_names_the_field() {
        let cases = [
            (
                "connections: 10",
                "connections: 0",
                "load.connections: must be >= 1",
            ),
            ("duration: 5s", "duration: 0s", "load.duration: must be > 0"),
            (
                "connections: 10",
                "connections: 10, streams_per_connection: 4",
                "load.streams_per_connection: only HTTP/2 carries several streams on a connection: it needs http_version: \"2\" or a grpc:// or grpcs:// target",
            ),
            (
                "model: closed,",
                "model: closed, rate: 5,",
                "load.rate: only applies to model constant (a closed load has no rate)",
            ),
            (
                "model: closed,",
                "model: constant,",
                "load.rate: is required for model constant",
            ),
            (
                "model: closed,",
                "model: constant, rate: 0,",
                "load.rate: must be > 0",
            ),
            (
                "model: closed,",
                "model: constant, rate: -1,",
                "load.rate: must be >= 0",
            ),
        ];
        for (from, to, want) in cases {
            assert_eq!(err(&CLOSED.replace(from, to)).to_string(), want, "{to}");
        }
        let both = format!("{CLOSED}phases:\n  - {{ duration: 1s, arrival_rate: 1 }}\n");
        assert_eq!(
            err(&both).to_string(),
            "load: give either phases or load, not both"
        );
        let neither = CLOSED.replace(
            "load: { model: closed, connections: 10, duration: 5s }\n",
            "",
        );
        assert_eq!(
            err(&neither).to_string(),
            "phases: must contain at least one phase"
        );
        assert_eq!(
            err(&CLOSED.replace("model: closed", "model: open")).path(),
            "load.model"
        );
        assert_eq!(
            err(&format!("{CLOSED}arrival: poisson\n")).path(),
            "arrival"
        );
    }

    #[test]
    fn http_step_needs_target() {
        let e = err(&DEMO.replace("target: http://127.0.0.1:8080\n", ""));
        assert_eq!(e.path(), "target");
    }

    const TCP: &str = r#"
name: tcp
target: tcp://127.0.0.1:7000
phases:
  - { duration: 1s, arrival_rate: 1 }
session:
  - tcp:
      send: { text: hi }
      framing: { delimiter: { hex: 0d0a } }
      expect: { prefix: { base64: aGk= } }
"#;

    #[test]
    fn protocol_steps_parse() {
        use crate::protocol::{Expect, Framing, Payload};
        let s = Scenario::from_yaml(TCP).unwrap();
        let t = s.session[0].tcp.as_ref().unwrap();
        assert_eq!(t.framing, Framing::Delimiter(Payload::Hex("0d0a".into())));
        assert_eq!(
            t.expect,
            Some(Expect::Prefix(Payload::Base64("aGk=".into())))
        );
        assert_eq!(s.requests_per_session(), 1);
        let again = Scenario::from_yaml(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(again, s);
        let default = TCP.replace("      framing: { delimiter: { hex: 0d0a } }\n", "");
        let d = Scenario::from_yaml(&default).unwrap();
        assert_eq!(
            d.session[0].tcp.as_ref().unwrap().framing,
            Framing::LengthPrefixed
        );
        let fixed = TCP.replace("{ delimiter: { hex: 0d0a } }", "{ fixed: 2 }");
        Scenario::from_yaml(&fixed).unwrap();
        let udp = "name: u\ntarget: udp://127.0.0.1:53\nphases: [{ duration: 1s, arrival_rate: 1 }]\nsession:\n  - udp: { send: { hex: 'ab cd' }, timeout: 250ms }\n";
        let u = Scenario::from_yaml(udp).unwrap();
        assert_eq!(
            u.session[0]
                .udp
                .as_ref()
                .unwrap()
                .timeout
                .unwrap()
                .0
                .as_millis(),
            250
        );
        Scenario::from_yaml(&TCP.replace("tcp://127.0.0.1:7000", "unix:///tmp/e.sock")).unwrap();
    }

    #[test]
    fn protocol_errors_name_the_field() {
        let cases = [
            ("{ text: hi }", "{ hex: abc }", "session[0].tcp.send"),
            ("{ text: hi }", "{ base64: '!!' }", "session[0].tcp.send"),
            ("{ text: hi }", "{ file: '' }", "session[0].tcp.send"),
            (
                "{ text: hi }",
                "{ text: hi, hex: 00 }",
                "session[0].tcp.send",
            ),
            (
                "{ delimiter: { hex: 0d0a } }",
                "{ fixed: 0 }",
                "session[0].tcp.framing.fixed",
            ),
            (
                "{ delimiter: { hex: 0d0a } }",
                "{ fixed: 99999999 }",
                "session[0].tcp.framing.fixed",
            ),
            (
                "{ delimiter: { hex: 0d0a } }",
                "{ delimiter: { text: '' } }",
                "session[0].tcp.framing.delimiter",
            ),
            (
                "{ delimiter: { hex: 0d0a } }",
                "{ delimiter: { hex: zz } }",
                "session[0].tcp.framing.delimiter",
            ),
            (
                "{ delimiter: { hex: 0d0a } }",
                "chunked",
                "session[0].tcp.framing",
            ),
            (
                "{ prefix: { base64: aGk= } }",
                "{ prefix: { base64: 'a' } }",
                "session[0].tcp.expect",
            ),
            (
                "{ prefix: { base64: aGk= } }",
                "{ contains: { text: a } }",
                "session[0].tcp.expect.contains",
            ),
            (
                "tcp://127.0.0.1:7000",
                "udp://127.0.0.1:7000",
                "session[0].tcp",
            ),
            (
                "tcp://127.0.0.1:7000",
                "http://127.0.0.1:7000",
                "session[0].tcp",
            ),
            ("tcp://127.0.0.1:7000", "tcp://127.0.0.1", "target"),
            ("tcp://127.0.0.1:7000", "gopher://h:1", "target"),
        ];
        for (from, to, path) in cases {
            let e = err(&TCP.replace(from, to));
            assert_eq!(e.path(), path, "{to}: {e}");
        }
        let e = err(&TCP
            .replace("{ delimiter: { hex: 0d0a } }", "{ fixed: 3 }")
            .replace("prefix", "exact"));
        assert_eq!(
            e.to_string(),
            "session[0].tcp.expect: is 2 bytes but the framing fixes replies at 3"
        );
        let e = err(&DEMO.replace("target: http://127.0.0.1:8080", "target: udp://127.0.0.1:9"));
        assert_eq!(e.path(), "session[0].http", "{e}");
        assert!(
            e.to_string().contains("needs a http:// or https:// target"),
            "{e}"
        );
        let udp = "name: u\ntarget: udp://127.0.0.1:53\nphases: [{ duration: 1s, arrival_rate: 1 }]\nsession:\n  - udp: { send: { text: x }, timeout: 0s }\n";
        assert_eq!(err(udp).path(), "session[0].udp.timeout");
        let both = DEMO.replace("path: /data }", "path: /data, body: x, body_file: b.json }");
        assert_eq!(err(&both).path(), "session[0].http.body_file");
    }

    #[test]
    fn files_are_inlined_with_the_field_named() {
        use crate::protocol::Payload;
        let text = TCP.replace("{ text: hi }", "{ file: req.bin }");
        let mut s = Scenario::from_yaml(&text).unwrap();
        assert!(s.has_files());
        let base = std::path::Path::new("/base");
        let mut seen = Vec::new();
        let changed = s
            .inline_files(base, &mut |p| {
                seen.push(p.to_path_buf());
                Ok(vec![0xde, 0xad])
            })
            .unwrap();
        assert!(changed && !s.has_files());
        assert_eq!(seen, [std::path::PathBuf::from("/base/req.bin")]);
        assert_eq!(
            s.session[0].tcp.as_ref().unwrap().send,
            Payload::Base64("3q0=".into())
        );
        let mut s = Scenario::from_yaml(&text).unwrap();
        let e = s
            .inline_files(base, &mut |_| Err(std::io::ErrorKind::NotFound.into()))
            .unwrap_err();
        assert_eq!(e.path(), "session[0].tcp.send");
        let mut s = Scenario::from_yaml(&text).unwrap();
        let e = s
            .inline_files(base, &mut |_| Ok(vec![0; crate::protocol::MAX_FRAME + 1]))
            .unwrap_err();
        assert!(e.to_string().contains("more than the limit"), "{e}");
        let body = DEMO.replace("path: /data }", "path: /data, body_file: b.json }");
        let mut s = Scenario::from_yaml(&body).unwrap();
        let e = s
            .inline_files(base, &mut |_| Ok(vec![0xff, 0xfe]))
            .unwrap_err();
        assert_eq!(e.path(), "session[0].http.body_file");
        let mut s = Scenario::from_yaml(&body).unwrap();
        s.inline_files(base, &mut |_| Ok(b"{}".to_vec())).unwrap();
        let h = s.session[0].http.as_ref().unwrap();
        assert_eq!(
            (
                h.body.as_ref().and_then(|b| b.as_static()),
                h.body_file.as_deref()
            ),
            (Some("{}"), None)
        );
    }

    #[test]
    fn tls_options_are_checked_and_the_ca_file_is_inlined() {
        let https = DEMO.replace("http://127.0.0.1:8080", "https://localhost:8443");
        let ok = Scenario::from_yaml(&format!(
            "{https}http_version: \"2\"\ntls: {{ server_name: api.test }}\n"
        ))
        .unwrap();
        assert_eq!(ok.tls.unwrap().server_name.as_deref(), Some("api.test"));
        let e = err(&format!("{DEMO}tls: {{ insecure_skip_verify: true }}\n"));
        assert_eq!(
            e.to_string(),
            "tls: only applies to https:// and grpcs:// targets"
        );
        let e = err(&format!("{https}tls: {{ server_name: \"not a name\" }}\n"));
        assert_eq!(e.path(), "tls.server_name");
        let e = err(&format!("{https}tls: {{ ca_pem: \"hello\" }}\n"));
        assert_eq!(e.path(), "tls.ca_pem");
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
        let e = err(&format!(
            "{https}tls: {{ insecure_skip_verify: true, ca_file: ca.pem }}\n"
        ));
        assert_eq!(e.path(), "tls.insecure_skip_verify");
        let e = err(&format!("{https}tls: {{ verify: false }}\n"));
        assert!(e.to_string().contains("verify"), "{e}");

        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let pem = cert.cert.pem();
        let mut s =
            Scenario::from_yaml(&format!("{https}tls: {{ ca_file: certs/ca.pem }}\n")).unwrap();
        assert!(s.has_files());
        let mut seen = Vec::new();
        s.inline_files(std::path::Path::new("/base"), &mut |p| {
            seen.push(p.to_path_buf());
            Ok(pem.clone().into_bytes())
        })
        .unwrap();
        assert_eq!(seen, [std::path::PathBuf::from("/base/certs/ca.pem")]);
        let tls = s.tls.as_ref().unwrap();
        assert_eq!(
            (tls.ca_file.as_deref(), tls.ca_pem.as_deref()),
            (None, Some(pem.as_str()))
        );
        assert_eq!(tls.ca_certificates().unwrap().len(), 1);
        let mut s = Scenario::from_yaml(&format!("{https}tls: {{ ca_file: ca.pem }}\n")).unwrap();
        let e = s
            .inline_files(std::path::Path::new("/"), &mut |_| Ok(b"junk".to_vec()))
            .unwrap_err();
        assert_eq!(e.path(), "tls.ca_pem");
    }

    const SESSIONS: &str = r#"
name: s
target: http://127.0.0.1:8080/api/v1/
data:
  users: { columns: [id, name], rows: [["1", "a"], ["2", "b"]], on_exhausted: wrap }
phases: [ { duration: 1s, arrival_rate: 5 } ]
session:
  - name: login
    http: { method: post, path: '/login?u=${users.name|url}', body: '{"id":${users.id}}' }
    extract: { token: { json: /token } }
    check: { status: [200], json: { /status: ok } }
  - http: { path: /me, headers: { authorization: 'Bearer ${token}' } }
"#;

    #[test]
    fn sessions_parse_once_and_name_the_field() {
        let s = Scenario::from_yaml(SESSIONS).unwrap();
        let h = s.session[0].http.as_ref().unwrap();
        assert_eq!(h.method, "POST");
        assert!(!h.is_static());
        assert_eq!(s.target.as_ref().unwrap().prefix(), "/api/v1");
        let again = Scenario::from_yaml(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(again, s);
        let cases = [
            (
                "extract: { token: { json: /token } }",
                "extract: { tok: { json: /token } }",
                "session[1].http.headers.authorization: ${token} is not defined before this step",
            ),
            (
                "${users.name|url}",
                "${user.name}",
                "session[0].http.path: ${user.name}: `user` is not a data source",
            ),
            (
                "${users.id}",
                "${users.email}",
                "session[0].http.body: ${users.email}: data.users has no column `email` (it has id, name)",
            ),
            (
                "${users.name|url}'",
                "${users.name|url'",
                "session[0].http.path: `${users.name|url` is not closed by } at line 9 column 11",
            ),
            (
                "json: /token",
                "json: token",
                "session[0].extract.token: `token` is not a JSON Pointer (it starts with /)",
            ),
            (
                "on_exhausted: wrap",
                "on_exhausted: fail",
                "data.users: 2 rows, 5 arrivals: rows run out at t=0.5 s in phase phase-1; add rows, or use on_exhausted: wrap or stop",
            ),
        ];
        for (from, to, want) in cases {
            assert_eq!(err(&SESSIONS.replace(from, to)).to_string(), want, "{to}");
        }
        let e = err(&SESSIONS.replace("method: post", "method: 'g t'"));
        assert_eq!(e.path(), "session[0].http.method");
    }

    #[test]
    fn setup_steps_are_checked_and_their_values_read_as_setup() {
        let text = r#"
name: t
target: http://127.0.0.1:1
data:
  users: { on_exhausted: wrap, columns: [id], rows: [["1"]] }
phases: [ { duration: 1s, arrival_rate: 2 } ]
setup:
  - name: token
    http: { method: post, path: /oauth/token, body: 'key=${env:KEY}&t=${now}' }
    extract: { token: { json: /access_token } }
    check: { status: [200] }
  - http: { path: '/who?t=${setup.token|url}' }
    extract: { who: { header: x-who } }
session:
  - http: { path: '/u/${users.id}', headers: { authorization: 'Bearer ${setup.token}', x-who: '${setup.who}' } }
"#;
        let s = Scenario::from_yaml(text).unwrap();
        assert_eq!(s.setup.len(), 2);
        assert_eq!(
            s.requests_per_session(),
            1,
            "setup steps are not the session's"
        );
        assert_eq!(s.env_names().into_iter().collect::<Vec<_>>(), ["KEY"]);
        let again = Scenario::from_yaml(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(again, s);
        for (from, to, want) in [
            (
                "x-who: '${setup.who}'",
                "x-who: '${setup.nope}'",
                "session[0].http.headers.x-who: ${setup.nope} is not extracted by any setup step",
            ),
            (
                "'/who?t=${setup.token|url}'",
                "'/who?t=${token}'",
                "setup[1].http.path: ${token}: a setup step reads the values of earlier setup steps as ${setup.token}",
            ),
            (
                "'/who?t=${setup.token|url}'",
                "'/who?t=${setup.who}'",
                "setup[1].http.path: ${setup.who} is not defined before this step",
            ),
            (
                "'/who?t=${setup.token|url}'",
                "'/who?u=${users.id}'",
                "setup[1].http.path: ${users.id}: setup steps run once per agent, not per session, so they read no data",
            ),
            (
                "  - http: { path: '/who?t=${setup.token|url}' }\n",
                "  - think_time: 1s\n",
                "setup[1]: a setup step is an http step",
            ),
            (
                "json: /access_token",
                "json: access_token",
                "setup[0].extract.token: `access_token` is not a JSON Pointer (it starts with /)",
            ),
            (
                "users: { on_exhausted",
                "setup: { on_exhausted",
                "data: `setup` cannot name a data source",
            ),
        ] {
            assert_eq!(err(&text.replace(from, to)).to_string(), want, "{to}");
        }
        let tcp = "name: t\ntarget: tcp://127.0.0.1:1\nphases: [ { duration: 1s, arrival_rate: 1 } ]\nsetup: [ { http: { path: / } } ]\nsession: [ { tcp: { send: { text: x } } } ]\n";
        assert_eq!(
            err(tcp).to_string(),
            "setup: setup steps are http steps: they need an http:// or https:// target"
        );
    }

    #[test]
    fn tcp_and_udp_sends_are_templates_checked_like_http() {
        use crate::protocol::Payload;
        let tcp = r#"
name: t
target: tcp://127.0.0.1:7000
data:
  users: { per: request, columns: [name], rows: [["a"], ["b"], ["c"], ["d"]] }
phases: [ { duration: 1s, arrival_rate: 2 } ]
session:
  - tcp: { send: { text: 'login ${users.name|json} ${env:PW}' }, expect: { prefix: { text: ok } } }
    repeat: 2
"#;
        let mut s = Scenario::from_yaml(tcp).unwrap();
        let t = s.session[0].tcp.as_ref().unwrap();
        assert!(t.send.template().is_some());
        assert_eq!(s.requests_reading("users"), 2);
        assert!(s.has_env_refs());
        assert_eq!(s.env_names().into_iter().collect::<Vec<_>>(), ["PW"]);
        s.resolve_env(&|_| Some("p\"w".into())).unwrap();
        assert!(s.env_names().is_empty());
        assert_eq!(
            s.session[0].tcp.as_ref().unwrap().send,
            Payload::Text(
                crate::template::Template::parse("login ${users.name|json} p\"w").unwrap()
            )
        );
        let again = Scenario::from_yaml(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(again, s);
        for (from, to, want) in [
            (
                "${users.name|json}",
                "${token}",
                "session[0].tcp.send: ${token} is not defined before this step",
            ),
            (
                "prefix: { text: ok }",
                "prefix: { text: 'ok ${users.name}' }",
                "session[0].tcp.expect: `ok ${users.name}` has ${...} references: only a send payload is a template",
            ),
            (
                "rows: [[\"a\"], [\"b\"], [\"c\"], [\"d\"]]",
                "rows: [[\"a\"]]",
                "data.users: 1 rows, 4 requests read it (2 per session): rows run out at t=0.2 s in phase phase-1; add rows, or use on_exhausted: wrap or stop",
            ),
        ] {
            assert_eq!(err(&tcp.replace(from, to)).to_string(), want, "{to}");
        }
        let udp = tcp
            .replace("tcp://", "udp://")
            .replace("- tcp: { send: { text: 'login ${users.name|json} ${env:PW}' }, expect: { prefix: { text: ok } } }", "- udp: { send: { text: '${users.name}' } }");
        let s = Scenario::from_yaml(&udp).unwrap();
        assert!(s.session[0].udp.as_ref().unwrap().send.template().is_some());
        let e = err(&udp.replace("${users.name}", "${users.nope}"));
        assert_eq!(e.path(), "session[0].udp.send");
    }

    #[test]
    fn env_and_data_files_are_resolved_by_the_cli() {
        let text = SESSIONS
            .replace(
                "users: { columns: [id, name], rows: [[\"1\", \"a\"], [\"2\", \"b\"]], on_exhausted: wrap }",
                "users: { file: users.csv, on_exhausted: wrap }",
            )
            .replace("path: /me,", "path: /me, body: '${env:KEY}',");
        let mut s = Scenario::from_yaml(&text).unwrap();
        assert!(s.has_files() && s.has_env_refs());
        s.inline_files(std::path::Path::new("/b"), &mut |_| {
            Ok(b"id,name\n1,x\n".to_vec())
        })
        .unwrap();
        assert_eq!(s.data["users"].rows, [vec!["1", "x"]]);
        let e = s.resolve_env(&|_| None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "session[1].http.body: ${env:KEY} is not set in the environment"
        );
        assert!(s.resolve_env(&|_| Some("v".into())).unwrap());
        assert!(!s.has_env_refs() && !s.has_files());
    }

    #[test]
    fn http_version_parses_and_only_applies_to_http() {
        let s = Scenario::from_yaml(&format!("{DEMO}http_version: \"2\"\n")).unwrap();
        assert_eq!(s.http_version, Some(HttpVersion::Http2));
        let again = Scenario::from_yaml(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(again, s);
        assert_eq!(
            err(&format!("{DEMO}http_version: \"3\"\n")).path(),
            "http_version"
        );
        let tcp = format!("{TCP}http_version: \"2\"\n");
        assert_eq!(
            err(&tcp).to_string(),
            "http_version: only applies to http:// and https:// targets"
        );
    }
}
