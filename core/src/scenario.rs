//! The scenario file: the user's contract. Parsing names the offending field; validation
//! names the field and the reason. Nothing here panics on user input.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::data::DataSource;
use crate::duration::HumanDuration;
pub use crate::http::{status_error, status_expected, HttpRequest};
use crate::protocol::Transport;
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
/// Most targets in one run (the scenario's, workloads' and steps' own, each counted once):
/// every agent resolves and checks each, and a session keeps a connection to each it calls.
pub const MAX_TARGETS: usize = 64;
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
    /// How much of the planned load a run may leave undelivered and still succeed: a run that
    /// completed without failing but did not start more of its planned sessions than this
    /// (dropped for lack of a free slot or connection, an agent's capacity cap), or started
    /// them more than a second late (a pool too small for its rate serving its backlog), ends
    /// `incomplete` (exit 2), since its figures describe less load than was asked for. A
    /// percentage like `1%`; `0.1%` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_dropped: Option<String>,
    /// The values the CLI put in place of `${env:...}` references: agents write `***` for
    /// them wherever a failure sample or a debug print would show them. Filled by
    /// [`Scenario::resolve_env`], not written by hand.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(skip)]
    pub masked: Vec<String>,
    /// Requests (and their answers) each agent reports as they happen, for
    /// `stampede run --debug N`: the CLI sets it, at most [`MAX_DEBUG`]. Not written by hand.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(skip)]
    pub debug: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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

/// A scenario that does not parse or does not validate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScenarioError {
    /// The text is not YAML/JSON of the scenario's shape.
    #[error("{path}: {message}")]
    Parse {
        /// The field path where parsing stopped (`phases[0].rate`), or `scenario` for the text as a
        /// whole.
        path: String,
        /// What the parser found, without its own location prefix.
        message: String,
    },
    /// A field has a value the scenario cannot run with.
    #[error("{path}: {reason}")]
    Invalid {
        /// The field, as a path (`phases[0].rate`).
        path: String,
        /// Why its value cannot be run.
        reason: String,
    },
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

    /// The stages of the run's connection ramp, whose connects are timed per stage: the
    /// load's, else the first workload's that ramps (agents time the first ramp they run).
    pub fn ramp_stages(&self) -> &[crate::ramp::Stage] {
        self.load
            .iter()
            .chain(self.workloads.iter().filter_map(|w| w.load.as_ref()))
            .map(|l| &l.stages[..])
            .find(|s| !s.is_empty())
            .unwrap_or(&[])
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

pub use connection::{HttpVersion, TlsOptions, MAX_CA_PEM};
pub use load::{ArrivalProcess, Load, LoadModel, Phase, MAX_STREAMS_PER_CONNECTION};
pub use loss::AgentLossPolicy;
pub use percent::Percent;
pub use step::{Step, StepKind, StepKindError, ThinkTime};

/// The JSON Schema of the scenario file, generated from the types (`stampede schema`, and
/// `schema/scenario.schema.json`).
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(Scenario);
    serde_json::to_value(schema).unwrap_or(serde_json::Value::Null)
}

mod ca;
mod client_cert;
mod connection;
mod files;
mod limits;
mod load;
mod loss;
mod percent;
mod ready;
mod refs;
mod scopes;
mod step;
mod validate;
mod validate_bounds;
mod validate_data;

pub use ca::CaBundleError;
pub use client_cert::{ClientCertError, ClientIdentity, SecretPem};
pub use limits::{
    check_agent_wait, data_rows_too_large, setup_values_too_large, MAX_AGENT_DATA_BYTES,
    MAX_AGENT_MESSAGE_BYTES, MAX_AGENT_WAIT, MAX_DEBUG, MAX_SETUP_VALUES, MAX_SETUP_VALUES_BYTES,
};
pub use ready::{NotReady, ReadyScenario};
pub use refs::RefError;
pub use scopes::ScopeNames;

#[cfg(test)]
mod tests;
