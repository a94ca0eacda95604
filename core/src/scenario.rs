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
/// Shortest `setup_refresh`: a refresh is a login, not load.
pub const MIN_SETUP_REFRESH: std::time::Duration = std::time::Duration::from_secs(1);
/// Most steps in one session (every request step has its own histograms in the report).
pub const MAX_STEPS: usize = 100;
/// Most request steps in a run, all workloads and session types together: each has its own
/// statistics on every agent and in the controller, and a row in the report (64 workloads ×
/// 64 session types × 100 steps would be 409,600).
pub const MAX_REQUEST_STEPS: usize = 4_096;
/// Most per-step statistics the controller holds for a run: phases × request steps (every
/// phase keeps an entry per request step of the run).
pub const MAX_PHASE_STEPS: usize = 100_000;
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
    /// `grpc://host:port` and `grpcs://host:port` (grpc steps), `ws://host:port/prefix` and
    /// `wss://...` (ws steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    /// The target's addresses, when it has several (the pods behind a Service, say):
    /// `["10.0.0.7:8080", "10.0.0.8:8080"]`. Connections (closed and constant loads) and
    /// sessions (arrival phases) are split over them exactly, by their global index; the
    /// `target` URL still gives the scheme, the Host header and TLS name, and the path prefix.
    /// The report then has a row per endpoint.
    /// `endpoints: service` takes the ready pods of the Kubernetes Service the target names
    /// (`http://NAME.NAMESPACE.svc:PORT`, or `http://NAME:PORT` in the run's namespace) from its
    /// EndpointSlices, and follows them while the run goes on; the report names each pod.
    #[serde(default, skip_serializing_if = "crate::endpoints::Endpoints::is_empty")]
    pub endpoints: crate::endpoints::Endpoints,
    /// Where to read the target's own resources during the run, beside the latency:
    /// `[{ prometheus: "http://10.0.0.7:9102/metrics" }]` scrapes the standard process metrics
    /// (`process_cpu_seconds_total`, `process_resident_memory_bytes`) every interval; the
    /// report then has `target_resources` (CPU cores used, memory) and req/s per target core.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observe: Vec<crate::observe::ObserveSource>,
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
    /// The resolution of arrival times in the open and constant-rate models (default `1ms`):
    /// each arrival is sent at the start of its tick, so the arrivals of one tick leave on one
    /// wake-up of the agent. `0s` times every arrival on its own, which costs a wake-up per
    /// arrival (about 20 µs of CPU on a virtual machine, half of a request's whole cost at
    /// 5,000/s). Response times are measured from the tick's start, when the request was
    /// meant to go; at most 100ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival_resolution: Option<HumanDuration>,
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
    /// Keep failure samples: the first few failed requests of each step and error kind (the
    /// data row, the request line, the status and the start of the answer) go into the
    /// report. The request line and the answer are shown as they were, so a token in a query
    /// or a user's data in an answer would be too; `false` keeps none. Headers are never
    /// sampled.
    #[serde(default = "yes", skip_serializing_if = "Clone::clone")]
    pub samples: bool,
    /// HTTP steps run once per run before the load (getting an OAuth token, say), by one
    /// agent, outside any measurement: nothing of them is recorded. Every session on every
    /// agent reads the values they extract as `${setup.NAME}`; a setup step that fails
    /// refuses the run before any load. They may read the environment, built-ins and earlier
    /// setup values, not data.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<Step>,
    /// Runs the setup steps again this often while the load runs (a token that expires, say):
    /// sessions that start after a refresh read its values. A refresh is never measured and
    /// never fails the run; one that fails keeps the values before it. At least 1s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_refresh: Option<HumanDuration>,
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
    /// How long requests in flight when the run stops early (an abort, Ctrl-C or SIGTERM, a
    /// lost agent under `fail`, a lapsed lease) may take to finish and be recorded; what is
    /// still unanswered then is counted `interrupted`. Default: the request timeout, at most
    /// 5s; `0s` stops at once; at most 60s. New requests never start after the stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graceful_stop: Option<HumanDuration>,
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
    /// How much of the planned load a run may leave unstarted and still succeed: a run that
    /// completed without failing but did not start more of its planned sessions than this
    /// (dropped for lack of a free slot or connection, an agent's capacity cap, a pool too
    /// small for its rate) ends `incomplete` (exit 2), since its figures describe less load
    /// than was asked for. A percentage like `1%`; `0.1%` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_dropped: Option<String>,
    /// The values the CLI put in place of `${env:...}` references: agents write `***` for
    /// them wherever a failure sample or a debug print would show them. Filled by
    /// [`Scenario::resolve_env`], not written by hand.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(skip)]
    pub masked: Vec<String>,
}

/// The share of planned sessions a run may leave unstarted when the scenario does not say
/// (`max_dropped`): a few sessions of a long run are noise, a cap is not.
pub const DEFAULT_MAX_DROPPED: f64 = 0.001;

/// The arrival resolution when the scenario gives none: the step of wrk2's and oha's timers,
/// and enough to send several arrivals per wake-up from 2,000 per second up.
pub const DEFAULT_ARRIVAL_RESOLUTION: std::time::Duration = std::time::Duration::from_millis(1);

/// The coarsest arrival resolution a scenario may ask for.
pub const MAX_ARRIVAL_RESOLUTION: std::time::Duration = std::time::Duration::from_millis(100);

/// The graceful stop when the scenario gives none: the request timeout, at most this.
pub const DEFAULT_GRACEFUL_STOP_CAP: std::time::Duration = std::time::Duration::from_secs(5);

/// The longest graceful stop a scenario may ask for: the controller waits this long (and a
/// margin) for the agents' last data after it stops a run.
pub const MAX_GRACEFUL_STOP: std::time::Duration = std::time::Duration::from_secs(60);

fn yes() -> bool {
    true
}

fn default_request_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(10))
}

/// HTTP version of an `http://` or `https://` target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HttpVersion {
    /// HTTP/1.1 with keep-alive.
    #[default]
    #[serde(rename = "1.1")]
    Http11,
    /// HTTP/2: over `http://` cleartext with prior knowledge (h2c), over `https://`
    /// negotiated by ALPN (h2).
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
    /// PEM file of the certificate chain to present when the target asks for one (mutual
    /// TLS), leaf first, relative to the scenario file. Needs `client_key_file`. The CLI
    /// reads it into `client_cert_pem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert_file: Option<String>,
    /// PEM file of the private key of `client_cert_file` (PKCS#8, PKCS#1 or SEC1). The CLI
    /// reads it into `client_key_pem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key_file: Option<String>,
    /// The client certificate chain, PEM (what `client_cert_file` becomes once read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert_pem: Option<String>,
    /// The client private key, PEM (what `client_key_file` becomes once read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key_pem: Option<SecretPem>,
}

/// Largest CA bundle accepted in `tls.ca_file`.
pub const MAX_CA_PEM: usize = 1 << 20;

impl TlsOptions {
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
        self.check_client_identity()?;
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
    /// A warm-up: the phase runs and is reported in its own row, but is left out of the
    /// headline figures, the default error verdict, thresholds without a `phase()` scope and
    /// `compare` (caches, JITs and connection pools warming up are not the service's
    /// steady state).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
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
/// `{ model: constant, rate: R, connections: N, duration: D }`, or a closed ramp of
/// connections: `{ model: closed, stages: [{ connections: N, duration: D }, ...] }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Load {
    pub model: LoadModel,
    /// Connections, all agents together (split across agents, counts differing by at most 1).
    /// With `stages`, the most the ramp holds (filled in from them).
    #[serde(default)]
    pub connections: u32,
    /// With `stages`, their total (filled in from them).
    #[serde(default)]
    pub duration: HumanDuration,
    /// Closed model: a ramp of connections instead of `connections` and `duration`, each
    /// stage moving the open connections linearly from the level before it (0 at T0) to its
    /// own over its duration; connects are paced to the slope and dealt round-robin over the
    /// agents (see `ramp`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<crate::ramp::Stage>,
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
            warmup: false,
        }
    }
}

/// What to do when an agent is lost mid-run: `fail`, or `{ tolerate: PCT }`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(into = "LossPolicyRepr")]
pub enum AgentLossPolicy {
    /// Abort the whole run.
    #[default]
    Fail,
    /// Go on while at most this percentage of the planned load is lost with lost agents.
    Tolerate(f64),
}

/// The file form of [`AgentLossPolicy`]: the word `fail`, or a map `{ tolerate: PCT }`. It
/// gives the JSON Schema and the serialised form; reading is by hand (below), so that a
/// mistake names the accepted forms rather than "did not match any variant".
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
enum LossPolicyRepr {
    /// `fail`: abort the run when an agent is lost.
    Word(LossWord),
    /// `{ tolerate: PCT }`: go on while at most PCT % of the load is lost (`50%` or `50`).
    Tolerate {
        #[serde(rename = "tolerate")]
        pct: Percent,
    },
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum LossWord {
    Fail,
}

impl From<AgentLossPolicy> for LossPolicyRepr {
    fn from(p: AgentLossPolicy) -> Self {
        match p {
            AgentLossPolicy::Fail => Self::Word(LossWord::Fail),
            AgentLossPolicy::Tolerate(pct) => Self::Tolerate { pct: Percent(pct) },
        }
    }
}

impl<'de> Deserialize<'de> for AgentLossPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const FORMS: &str = "`fail`, or `{ tolerate: PCT }` with PCT a percentage like 50%";
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Tolerate {
            tolerate: Percent,
        }
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = AgentLossPolicy;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(FORMS)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<AgentLossPolicy, E> {
                match v.trim() {
                    "fail" => Ok(AgentLossPolicy::Fail),
                    _ => Err(E::custom(format!("`{v}` is not a policy: {FORMS}"))),
                }
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                m: A,
            ) -> Result<AgentLossPolicy, A::Error> {
                let t = Tolerate::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
                Ok(AgentLossPolicy::Tolerate(t.tolerate.0))
            }
        }
        d.deserialize_any(V)
    }
}

/// A percentage as a scenario writes it: `50%`, or the bare number `50` (both mean one half).
/// Written back as the number.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Percent(pub f64);

impl<'de> Deserialize<'de> for Percent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Percent;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a percentage like 50% (or the number 50)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Percent, E> {
                let t = v.trim();
                t.strip_suffix('%')
                    .unwrap_or(t)
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|p| p.is_finite())
                    .map(Percent)
                    .ok_or_else(|| {
                        E::custom(format!(
                            "`{v}` is not a percentage like 50% (or the number 50)"
                        ))
                    })
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Percent, E> {
                Ok(Percent(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Percent, E> {
                Ok(Percent(v as f64))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Percent, E> {
                Ok(Percent(v as f64))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for Percent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Percent".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A percentage: `50%`, or the number 50.",
            "anyOf": [
                { "type": "number" },
                { "type": "string", "pattern": "^\\s*[0-9]+(\\.[0-9]+)?\\s*%\\s*$" }
            ]
        })
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
            extract: BTreeMap::new(),
            check: None,
        }
    }

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
    fn invalid(path: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        Self::Invalid {
            path: path.into(),
            reason: reason.to_string(),
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
                warmup: false,
            }]
        };
        let mut placed = false;
        if s.workloads.is_empty() && s.phases.is_empty() && s.load.is_none() {
            s.phases = placeholder();
            placed = true;
        }
        for w in &mut s.workloads {
            if w.phases.is_empty() && w.load.is_none() {
                w.phases = placeholder();
                placed = true;
            }
        }
        s.validate_with(!placed)?;
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
        // JSON (what the CLI and the controller send) is read by the JSON parser, which
        // streams and has no aliases; the YAML guard's event parser and the YAML parser both
        // hold the events of a large flow list (hundreds of bytes a data row). Text that does
        // not read as JSON, or nests too deep, is read as YAML, whose errors are the ones
        // reported.
        if text.trim_start().starts_with('{')
            && crate::yaml_guard::json_depth(text) <= crate::yaml_guard::MAX_DEPTH
        {
            let mut de = serde_json::Deserializer::from_str(text);
            let json = <Scenario as Deserialize>::deserialize(&mut de);
            if let (Ok(mut scenario), Ok(())) = (json, de.end()) {
                scenario.fill_ramps();
                return Ok(scenario);
            }
        }
        crate::yaml_guard::check(text).map_err(|e| ScenarioError::Parse {
            path: "scenario".into(),
            message: e.to_string(),
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
        let mut scenario = scenario;
        scenario.fill_ramps();
        Ok(scenario)
    }

    /// A load given as `stages` gets its `connections` (the peak) and `duration` (the
    /// total) from them, so everything that reads a load's size reads the ramp's; a load
    /// that also gives them is checked by `validate`.
    fn fill_ramps(&mut self) {
        let loads = self
            .load
            .iter_mut()
            .chain(self.workloads.iter_mut().filter_map(|w| w.load.as_mut()));
        for l in loads.filter(|l| !l.stages.is_empty()) {
            if l.connections == 0 && l.duration.0.is_zero() {
                l.connections = crate::ramp::peak(&l.stages);
                l.duration = HumanDuration(crate::ramp::total(&l.stages));
            }
        }
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

    /// The share of planned sessions the run may leave unstarted (`max_dropped`, or
    /// [`DEFAULT_MAX_DROPPED`]). Checked by `validate`.
    pub fn max_dropped(&self) -> f64 {
        self.max_dropped
            .as_deref()
            .and_then(|v| crate::threshold::parse_fraction(v.trim()))
            .unwrap_or(DEFAULT_MAX_DROPPED)
    }

    /// How long requests in flight at an early stop may take to finish (`graceful_stop`, or
    /// the request timeout capped at [`DEFAULT_GRACEFUL_STOP_CAP`]).
    pub fn graceful_stop(&self) -> std::time::Duration {
        match self.graceful_stop {
            Some(d) => d.0,
            None => self.request_timeout.0.min(DEFAULT_GRACEFUL_STOP_CAP),
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

    /// The names of the values the setup steps extract, in the order they are first
    /// extracted: the order in which one agent reports them and every agent receives them.
    pub fn setup_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for name in self.setup.iter().flat_map(|s| s.extract.keys()) {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        names
    }

    /// The target's transport; the error names `target`.
    pub fn transport(&self) -> Result<Transport, ScenarioError> {
        self.target
            .as_ref()
            .map(Target::transport)
            .ok_or_else(|| ScenarioError::invalid("target", "is required"))
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
                d.rows = crate::data::Rows::default();
            }
        }
        s
    }

    /// Requests one session of the first workload's first type sends (each request step
    /// times its repeat): with one session, what every session sends.
    pub fn requests_per_session(&self) -> u64 {
        self.workload_views()
            .first()
            .and_then(|w| w.types.first())
            .map_or(0, |t| t.requests())
    }

    /// The tick arrival times are rounded down to ([`Scenario::arrival_resolution`] or the
    /// default); zero times each arrival exactly.
    pub fn arrival_resolution(&self) -> std::time::Duration {
        self.arrival_resolution
            .map_or(DEFAULT_ARRIVAL_RESOLUTION, |d| d.0)
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

/// The JSON Schema of the scenario file, generated from the types.
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(Scenario);
    serde_json::to_value(schema).unwrap_or(serde_json::Value::Null)
}

mod ca;
mod client_cert;
mod files;
mod limits;
mod ready;
mod refs;
mod scopes;
mod validate;

pub use ca::CaBundleError;
pub use client_cert::{ClientCertError, ClientIdentity, SecretPem};
pub use limits::{check_agent_wait, MAX_AGENT_MESSAGE_BYTES, MAX_AGENT_WAIT};
pub use ready::{NotReady, ReadyScenario};
pub use refs::RefError;
pub use scopes::ScopeNames;

#[cfg(test)]
mod tests;
