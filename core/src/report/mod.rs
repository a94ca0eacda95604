//! Merging agents' interval data into one exact report, live and final.
//!
//! [`RunAccumulator`] (in `accumulator`) takes every agent's per-interval, per-phase
//! [`SparseStats`] and adds them up per phase and per timeline interval (per agent only
//! counters and the start lag). Addition commutes, so the order in which agents report cannot
//! change the result. This module is [`Report`], the JSON contract (`docs/concepts.md`, "The
//! JSON report"), and the figures it is made of; `workloads` reports each workload apart.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

mod accumulator;
mod stages;
mod targets;
mod windows;
mod workloads;
pub use accumulator::{
    DestinationReport, DestinationSample, MergeError, ReportMeta, ResourceSample, RunAccumulator,
    CPU_LIMIT_SHARE, INSECURE_TLS_WARNING, MAX_DESTINATIONS, MAX_OPEN_INTERVALS, PORTS_LIMIT_SHARE,
};
pub use stages::{StageConnects, StageReport};
pub use targets::TargetReport;
pub use workloads::{SessionTypeReport, WorkloadReport};

use crate::hist::{self, HistSpec, SparseHist};
use crate::stats::SparseStats;

/// Percentiles and moments of one latency histogram, in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Values recorded: for a request latency the successful requests (a failed one is not timed),
    /// for the start lag the sessions started.
    pub count: u64,
    /// The lowest value recorded, to the histogram's precision.
    pub min_us: u64,
    /// Mean of the recorded values, from the histogram's buckets (3 significant digits).
    pub mean_us: f64,
    /// Standard deviation of the recorded values, from the same buckets.
    pub stdev_us: f64,
    /// The median. Each percentile is its bucket's highest equivalent value, so never below the
    /// true one.
    pub p50_us: u64,
    /// 75th percentile.
    pub p75_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 95th percentile.
    pub p95_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// 99.99th percentile.
    pub p9999_us: u64,
    /// The highest value recorded, as its bucket's highest equivalent value.
    pub max_us: u64,
}

impl Percentiles {
    /// The figures of a dense histogram, each percentile its bucket's highest equivalent value (as
    /// HdrHistogram's tools report), so that a percentile is never below the true value.
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        // Report the highest value equivalent of each bucket, as HdrHistogram tools do, so a
        // percentile is never below the true value.
        let q = |p: f64| h.highest_equivalent(h.value_at_quantile(p));
        Self {
            count: h.len(),
            min_us: h.min(),
            mean_us: h.mean(),
            stdev_us: h.stdev(),
            p50_us: q(0.50),
            p75_us: q(0.75),
            p90_us: q(0.90),
            p95_us: q(0.95),
            p99_us: q(0.99),
            p999_us: q(0.999),
            p9999_us: q(0.9999),
            max_us: h.highest_equivalent(h.max()),
        }
    }

    /// The same figures from a sparse histogram, bit for bit (property-tested).
    pub fn of_sparse(h: &SparseHist) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let [p50_us, p75_us, p90_us, p95_us, p99_us, p999_us, p9999_us] =
            h.values_at_quantiles([0.50, 0.75, 0.90, 0.95, 0.99, 0.999, 0.9999]);
        let mean_us = h.mean();
        Self {
            count: h.len(),
            min_us: h.min(),
            mean_us,
            stdev_us: h.stdev_about(mean_us),
            p50_us,
            p75_us,
            p90_us,
            p95_us,
            p99_us,
            p999_us,
            p9999_us,
            max_us: h.max(),
        }
    }
}

/// The two latencies (`docs/design.md`): from the intended send and from the actual send.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// From the intended send time: the headline, free of coordinated omission.
    pub response_time: Percentiles,
    /// From the actual send time.
    pub service_time: Percentiles,
}

impl Latency {
    fn of(s: &SparseStats) -> Self {
        Self {
            response_time: Percentiles::of_sparse(&s.response),
            service_time: Percentiles::of_sparse(&s.service),
        }
    }
}

/// Session totals of the headline phases (warm-up left out). A session is one arrival running its
/// steps: started = completed + failed + interrupted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionTotals {
    /// Sessions the plan scheduled; for a closed load, which has no schedule, the sessions it
    /// dispatched.
    pub planned: u64,
    /// Sessions that began, late ones included.
    pub started: u64,
    /// Sessions whose every request succeeded.
    pub completed: u64,
    /// Sessions that ended with a failed request.
    pub failed: u64,
    /// Started and still running when the run stopped: started = completed + failed +
    /// interrupted.
    #[serde(default)]
    pub interrupted: u64,
    /// Planned sessions never started: the run stopped first, or no session slot or connection was
    /// free for them in time.
    pub dropped: u64,
    /// Sessions that started more than [`UNDELIVERED_LAG_US`] after their intended time: a
    /// pool too small for its rate, or a generator out of CPU, served its backlog late, so
    /// the target saw that load later (and at a lower rate) than planned. They count
    /// against `max_dropped` as the dropped ones do.
    #[serde(default)]
    pub started_late: u64,
}

/// How far behind its intended time a session may start and still count as delivered to
/// plan: a second, long past the 10 ms at which a start counts late, so a busy machine's
/// scheduling noise never makes a run incomplete, while a backlog does.
pub const UNDELIVERED_LAG_US: u64 = 1_000_000;

/// Request totals. `planned` counts planned requests (planned sessions × requests per session).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Planned requests, warm-up phases left out.
    pub planned: u64,
    /// Requests begun (one whose connect failed included).
    pub started: u64,
    /// Requests answered successfully.
    pub completed: u64,
    /// Requests that failed, each counted under its kind in `errors`.
    pub failed: u64,
    /// Sent and still unanswered when the run stopped and its graceful stop was over (never
    /// completed nor failed): started = completed + failed + interrupted.
    #[serde(default)]
    pub interrupted: u64,
    /// Errors by kind; empty when there were none.
    pub errors: BTreeMap<String, u64>,
    /// Sum of `errors`: the failed requests.
    pub error_count: u64,
    /// Failed requests over finished requests.
    pub error_rate: f64,
    /// Successful requests per second over the run's duration.
    pub throughput_rps: f64,
    /// Completed requests over planned requests.
    pub achieved_ratio: f64,
    /// The same books for sessions.
    pub sessions: SessionTotals,
    /// Bytes written for the requests, all steps together (for HTTP, head and body).
    pub bytes_sent: u64,
    /// Bytes read for the responses, as they came on the wire (for HTTP, head and body).
    pub bytes_received: u64,
    /// The compressed bodies that were decoded (for checks or extraction), sized both ways;
    /// absent when none was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compressed: Option<CompressedSizes>,
    /// HTTP responses by status code, all of them (2xx and 3xx included).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub status_codes: BTreeMap<u16, u64>,
    /// gRPC calls by `grpc-status` name (`OK`, `UNAVAILABLE`, …): a failed call's HTTP status
    /// is 200, so gRPC calls are counted here and not among `status_codes`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grpc_statuses: BTreeMap<String, u64>,
    /// Mean bytes received per finished request (headers included for HTTP).
    #[serde(default)]
    pub mean_response_bytes: f64,
    /// Mean bytes sent per started request.
    #[serde(default)]
    pub mean_request_bytes: f64,
}

/// How well the generator kept to its schedule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Generator {
    /// Session start lag behind the intended time.
    pub lag: Percentiles,
    /// Sessions that started more than 10 ms (`LATE_THRESHOLD_US`) behind their intended time.
    pub late_arrivals: u64,
    /// Planned sessions never started: by the run's stop, or for want of a free slot or connection
    /// (only the latter puts the generator behind schedule).
    pub dropped_arrivals: u64,
    /// Latencies outside the histogram's range (1 µs to 1 h), recorded at its nearest bound.
    pub out_of_range: u64,
    /// True when the generator fell behind: the report must not be read as if it had not.
    pub behind_schedule: bool,
    /// Sentences for the reader, sorted (the insecure-TLS warning first): late or dropped sessions,
    /// values out of range, lost agents, agents at their CPU or port limit.
    pub warnings: Vec<String>,
    /// Agents whose CPU reached 90 % of the cores they may use in some interval, or whose
    /// ports toward a destination reached 90 % of those usable or ran out: the run may have
    /// measured the generator rather than the target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limiting_agents: Vec<String>,
}

/// One phase of the run (workload after workload), as planned against what it achieved.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    /// Its position among the run's phases, from 0.
    pub index: u32,
    /// The phase's `name`, or `phase-N` (N from 1) when it has none.
    pub name: String,
    /// Planned start, seconds after T0.
    pub start_s: f64,
    /// Planned length, seconds.
    pub duration_s: f64,
    /// Planned requests in this phase.
    pub planned: u64,
    /// Requests begun (one whose connect failed included).
    pub started: u64,
    /// Requests answered successfully.
    pub completed: u64,
    /// Failed requests, by kind in `errors`.
    pub failed: u64,
    /// Sent and still unanswered when the run stopped and its graceful stop was over (never
    /// completed nor failed): started = completed + failed + interrupted.
    #[serde(default)]
    pub interrupted: u64,
    /// Failed requests by error kind.
    pub errors: BTreeMap<String, u64>,
    /// Sessions planned in this phase (a closed load: those it dispatched).
    pub sessions_planned: u64,
    /// Completed requests per second of the phase's length (in a live report, of its part elapsed
    /// so far).
    pub throughput_rps: f64,
    /// The latencies of this phase's successful requests.
    pub latency: Latency,
    /// A warm-up phase: reported here, left out of the headline figures and of thresholds
    /// without a `phase()` scope.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
}

/// One request step, all phases and agents together (warm-up phases left out).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    /// The step's `name`, or `step-N` (N from 1, within its session); prefixed by its session type
    /// (`TYPE/`) in a mix and by its workload (`WORKLOAD/`) when the scenario has several.
    pub name: String,
    /// Requests of this step answered successfully.
    pub completed: u64,
    /// Failed requests of this step, by kind in `errors`.
    pub failed: u64,
    /// Sent and still unanswered when the run stopped and its graceful stop was over (never
    /// completed nor failed): started = completed + failed + interrupted.
    #[serde(default)]
    pub interrupted: u64,
    /// Failed requests by error kind.
    pub errors: BTreeMap<String, u64>,
    /// The latencies of this step's successful requests.
    pub latency: Latency,
    /// Successful requests of this step per second over the run's duration (warm-up left
    /// out): a WebSocket step's messages per second, a streamed step's replies per second.
    /// Zero in a capacity search's merged rows, whose steps ran at several rates.
    #[serde(default)]
    pub throughput_rps: f64,
    /// A streamed step's arrivals (`stream: sse | chunks`): absent for any other step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamLatency>,
}

/// Compressed bodies sized both ways: what crossed the wire, and what it decoded to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressedSizes {
    /// Body bytes as received (compressed).
    pub wire_bytes: u64,
    /// The same bodies decoded.
    pub decoded_bytes: u64,
}

/// How a streamed reply arrived: its first event, then the rest, each timed as it came.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamLatency {
    /// Events (or reads of body bytes) received, all replies together.
    pub events: u64,
    /// Those events per second over the run's duration (warm-up left out).
    #[serde(default)]
    pub events_per_s: f64,
    /// From the intended send to the first event (or body byte): coordinated-omission free,
    /// like the response time.
    pub ttfb: Percentiles,
    /// Between one event and the next of the same reply.
    pub gap: Percentiles,
}

impl StreamLatency {
    /// The stream figures of a step over `duration_s` seconds, `None` when it streamed
    /// nothing.
    pub fn of(s: &crate::stats::SparseStepStats, duration_s: f64) -> Option<Self> {
        if s.ttfb.is_empty() && s.gap.is_empty() {
            return None;
        }
        let events = s.ttfb.len().saturating_add(s.gap.len());
        Some(Self {
            events,
            events_per_s: events as f64 / duration_s.max(1e-9),
            ttfb: Percentiles::of_sparse(&s.ttfb),
            gap: Percentiles::of_sparse(&s.gap),
        })
    }
}

/// One agent's share of the run, in shard order; warm-up phases included.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentReport {
    /// The agent's id as it registered (`--id`: by default its pod name, or host name and pid);
    /// unique among the controller's agents.
    pub id: String,
    /// Its shard index, from 0: which arrivals it owned.
    pub shard: u32,
    /// Planned requests of this agent's shard.
    pub planned: u64,
    /// Requests it began (one whose connect failed included).
    pub started: u64,
    /// Requests it got successful answers to.
    pub completed: u64,
    /// Its failed requests.
    pub failed: u64,
    /// Sent and still unanswered when the run stopped and its graceful stop was over (never
    /// completed nor failed): started = completed + failed + interrupted.
    #[serde(default)]
    pub interrupted: u64,
    /// The agent was lost before it finished.
    pub lost: bool,
    /// Share of the whole run's planned requests this agent did not deliver because it was lost.
    pub lost_share: f64,
    /// Estimated clock offset of the agent against the controller (agent − controller).
    pub clock_offset_us: i64,
    /// 99th percentile of its sessions' start lag behind their intended time.
    pub lag_p99_us: u64,
    /// Its largest session start lag.
    pub lag_max_us: u64,
    /// Its sessions that started more than 10 ms late.
    pub late_arrivals: u64,
    /// Most connections this agent held open at once (its highest per-interval peak).
    #[serde(default)]
    pub peak_open: u64,
    /// Its CPU (time over wall time, as a share of the cores it may use) in its busiest
    /// interval, percent; past 90 % the generator may be the run's limit.
    #[serde(default)]
    pub cpu_max_pct: f64,
    /// Its CPU over the intervals it reported, mean, percent.
    #[serde(default)]
    pub cpu_mean_pct: f64,
    /// The cores it may use (its CPU quota, or its machine's cores).
    #[serde(default)]
    pub cores: f64,
    /// Its largest resident memory at an interval's end, bytes.
    #[serde(default)]
    pub rss_max_bytes: u64,
    /// Most file descriptors (sockets included) it held at an interval's end.
    #[serde(default)]
    pub open_files_max: u64,
    /// Local ports it may use toward one destination (its ephemeral range times its source
    /// addresses); 0 when unknown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub usable_ports: u64,
    /// The destinations it dialed, most ports first: ports held at their peak (open and in
    /// TIME_WAIT) and connects that found no free port. Past 90 % of `usable_ports`, or at
    /// the first connect without a port, the generator may be the limit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destinations: Vec<DestinationReport>,
    /// A lost agent that never delivered its last data: where its books end and what it may
    /// have sent after, so the gap between the report and what a target served is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreported: Option<Unreported>,
}

/// What a lost agent may have sent that never reached the report: its load could go on after
/// its last interval on the books, until its lease (and restart grace) stopped it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Unreported {
    /// Seconds after T0 where its books end: the end of the last interval it delivered.
    pub books_end_s: f64,
    /// Seconds of load that may have followed, until its lease stopped it.
    pub window_s: f64,
    /// At most this many more requests started in that window, from its planned rate; none
    /// for a closed load, which plans no rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_max: Option<u64>,
}

impl std::fmt::Display for Unreported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "its books end at {:.1} s", self.books_end_s)?;
        match self.requests_max {
            Some(n) => write!(
                f,
                "; it may have sent up to {n} more requests in the {:.1} s before its lease stopped it",
                self.window_s
            ),
            None => write!(
                f,
                "; it may have sent more requests in the {:.1} s before its lease stopped it",
                self.window_s
            ),
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Connections the run's agents opened and held (every transport: TCP, TLS, HTTP/1.1, h2,
/// Unix, and UDP sockets).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionsReport {
    /// Connections opened, all agents together.
    pub opened: u64,
    /// The most connections held open at once: the maximum over timeline intervals of the sum
    /// over agents of each agent's peak in that interval. Agents that peak at different
    /// instants of one interval make it an upper bound of the true simultaneous peak; for a
    /// steady load (closed model) it is exact.
    pub peak_open: u64,
}

/// One timeline interval, all agents merged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelineRow {
    /// The interval's index from T0, in the controller's progress interval (`t_s` is its start).
    pub interval: u64,
    /// Start of the interval, seconds after T0.
    pub t_s: f64,
    /// Sessions whose intended start fell in this interval.
    pub sessions_planned: u64,
    /// Requests answered successfully in this interval.
    pub completed: u64,
    /// Requests that failed in this interval.
    pub failed: u64,
    /// This interval's failed requests by error kind.
    pub errors: BTreeMap<String, u64>,
    /// Completed requests per second of the interval.
    pub rps: f64,
    /// Median response time of the requests that completed in this interval.
    pub response_p50_us: u64,
    /// 90th percentile of the same response times.
    pub response_p90_us: u64,
    /// 99th percentile of the same response times.
    pub response_p99_us: u64,
    /// The largest of the same response times.
    pub response_max_us: u64,
    /// 99th percentile of their service times.
    pub service_p99_us: u64,
    /// Sum over agents of each agent's most connections held open at once in this interval.
    #[serde(default)]
    pub peak_open: u64,
    /// Connections opened in this interval, all agents together.
    #[serde(default)]
    pub connections_opened: u64,
    /// The interval's response-time histogram, compressed V2, base64 (for `.hlog` output).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub response_hist: String,
    /// The interval's service-time histogram, in the same form as `response_hist`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_hist: String,
    /// Each agent's CPU in this interval (shard order), percent of the cores it may use;
    /// `null` for an agent that sent no figure for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_cpu_pct: Vec<Option<f64>>,
    /// Each endpoint that got load in this interval, in the order of the run's `endpoints`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<crate::endpoints::EndpointReport>,
}

/// The closed or constant-rate load of a run, and what it achieved.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadSummary {
    /// `closed` or `constant`.
    pub model: String,
    /// Connections, all agents together.
    pub connections: u32,
    /// Constant model: the requested rate R in sessions (slots) per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Constant model: R × requests per session, in requests per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_rps: Option<f64>,
    /// Completed requests over the load's duration (comparable with `target_rps`).
    pub achieved_rps: f64,
    /// A connection ramp: each stage with the connect times of the connects begun in it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageReport>,
}

/// Final state of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// The run delivered its planned load (within `max_dropped`) and some request succeeded.
    /// Thresholds are judged apart (`thresholds`): a run whose thresholds failed still succeeded.
    #[default]
    Succeeded,
    /// The run could not be carried out (its assignment or plan was refused, an agent failed, or
    /// was lost under `on_agent_loss: fail`), it sent nothing or no request succeeded, or its
    /// report could not be stored.
    Failed,
    /// The run was stopped before its end: by a user (`stampede abort`, Ctrl-C), by a live
    /// threshold breach (`abort_on_fail`, see `threshold_abort`), or by the controller shutting
    /// down without a restart grace.
    Aborted,
    /// The run ended without a failure, but not all of its planned load was delivered: an
    /// agent stopped early (its lease lapsed) or was lost within the `tolerate` policy. Never
    /// `succeeded`: its numbers describe less than what was asked for.
    Incomplete,
}

/// The merged report of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Unique per controller (`run-` and 12 hex digits); also the stored report's file name.
    pub run_id: String,
    /// The scenario's `name`.
    pub scenario: String,
    /// The scenario's target, without any user and password (so `compare` can tell two
    /// targets apart); empty in reports written before it was added.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target: String,
    /// How the run ended; `message` says why when it is not `succeeded`.
    pub outcome: RunOutcome,
    /// Why the run failed or was aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// T0, when every agent started its load: Unix time, milliseconds.
    pub started_at_unix_ms: u64,
    /// Seconds from T0 to the end of the run.
    pub duration_s: f64,
    /// The scenario's planned length (its phases, or its load's duration), seconds.
    pub planned_duration_s: f64,
    /// The arrival process, `uniform` or `poisson`.
    pub arrival: String,
    /// The tick arrival times were rounded down to (`arrival_resolution`), in microseconds:
    /// the arrivals of one tick were sent together. 0: each at its exact time. Absent when
    /// the whole run is closed, which has no arrival times, and in reports written before
    /// the setting existed (whose arrivals were exact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival_resolution_us: Option<u64>,
    /// The seed the schedule followed: the scenario's `seed`, or one the controller drew. Run again
    /// with it to repeat the same arrivals.
    pub seed: u64,
    /// Set for a closed or constant-rate load (absent for arrival phases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadSummary>,
    /// The spec of every histogram in the report, `timeline[].response_hist` included.
    pub hist_spec: HistSpec,
    /// Requests and sessions of the headline phases (warm-up left out).
    pub totals: Totals,
    /// The headline latencies: every successful request outside warm-up phases.
    pub latency: Latency,
    /// How well the generator kept its schedule, over the whole run (warm-up included).
    pub generator: Generator,
    /// Connections opened and the most held open at once.
    #[serde(default)]
    pub connections: ConnectionsReport,
    /// Every phase in run order, warm-up ones included.
    pub phases: Vec<PhaseReport>,
    /// Each workload apart: its phases together, and its session types planned against
    /// achieved (one entry, `default`, for a scenario without `workloads:`).
    #[serde(default)]
    pub workloads: Vec<WorkloadReport>,
    /// Each target apart when the workloads load several (warm-up phases left out); empty
    /// for a run of one target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetReport>,
    /// Every request step, in the scenario's order.
    pub steps: Vec<StepReport>,
    /// Every agent of the run, in shard order.
    pub agents: Vec<AgentReport>,
    /// Share of planned requests not delivered because agents were lost.
    pub lost_share: f64,
    /// Threshold verdicts, in the scenario's order.
    #[serde(default)]
    pub thresholds: Vec<crate::threshold::ThresholdResult>,
    /// Set when `abort_on_fail` stopped the run: the threshold that breached, and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_abort: Option<ThresholdAbort>,
    /// One row per interval, in order; empty in a live report.
    pub timeline: Vec<TimelineRow>,
    /// Each endpoint apart: the scenario's `endpoints:` in its order, then the other addresses
    /// loaded (a target name's several addresses). Absent for a target with one address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<crate::endpoints::EndpointReport>,
    /// The target's own resources, from the scenario's `observe:` sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_resources: Option<crate::observe::TargetResources>,
    /// The first failed requests of each step and error kind (see [`crate::samples`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_samples: Vec<crate::samples::FailureSample>,
}

/// The live breach that aborted a run (`abort_on_fail`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThresholdAbort {
    /// The threshold expression, as written in the scenario.
    pub expr: String,
    /// Seconds after T0 when the breach was seen.
    pub at_s: f64,
    /// The measured value at that moment, in the metric's unit.
    pub measured: f64,
    /// Human form of the measured value.
    pub measured_text: String,
}

impl Report {
    /// The report of a run whose data was lost before it could be merged (its driver died,
    /// or the controller restarted): `failed`, with why, and nothing measured.
    pub fn lost(run_id: &str, scenario: &str, started_at_unix_ms: u64, why: &str) -> Self {
        Self {
            run_id: run_id.to_string(),
            scenario: scenario.to_string(),
            outcome: RunOutcome::Failed,
            message: Some(why.to_string()),
            started_at_unix_ms,
            hist_spec: hist::SPEC,
            ..Self::default()
        }
    }

    /// A run that sent nothing, or in which no request succeeded, is not a success whatever
    /// its thresholds say: its numbers describe a target that never answered (or a
    /// generator that never ran), and a CI gate must not pass it.
    pub fn judge_delivery(&mut self) {
        if self.outcome != RunOutcome::Succeeded {
            return;
        }
        let t = &self.totals;
        let why = if t.started == 0 && t.completed == 0 && t.failed == 0 {
            "no request was sent".to_string()
        } else if t.completed == 0 {
            let kinds: Vec<String> = t.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
            format!(
                "no request succeeded: all {} failed ({})",
                t.failed,
                kinds.join(", ")
            )
        } else {
            return;
        };
        self.outcome = RunOutcome::Failed;
        self.message = Some(why);
    }

    /// A run that completed without failing but left more than `max_dropped` (a share) of
    /// its planned sessions unstarted, or started them more than [`UNDELIVERED_LAG_US`] late,
    /// is `incomplete`: a capacity cap, a pool too small for its rate or a generator out of
    /// slots delivered less than was asked (or delivered it later, at a lower rate), and a CI
    /// gate must not read its figures as the planned load's.
    pub fn judge_shortfall(&mut self, max_dropped: f64) {
        if self.outcome != RunOutcome::Succeeded {
            return;
        }
        let s = &self.totals.sessions;
        if s.planned == 0 {
            return;
        }
        let never = s.planned.saturating_sub(s.started);
        let missed = never.saturating_add(s.started_late);
        let share = missed as f64 / s.planned as f64;
        if share <= max_dropped {
            return;
        }
        let mut why = Vec::new();
        if never > 0 {
            why.push(format!(
                "{never} never started ({} dropped for want of a free slot or connection)",
                s.dropped
            ));
        }
        if s.started_late > 0 {
            why.push(format!(
                "{} started more than {} s late",
                s.started_late,
                UNDELIVERED_LAG_US / 1_000_000
            ));
        }
        self.outcome = RunOutcome::Incomplete;
        self.message = Some(format!(
            "{missed} of {} planned sessions ({:.1}%) were not delivered as planned ({}), more \
             than max_dropped {}%: the target saw less load than planned",
            s.planned,
            share * 100.0,
            why.join(", "),
            max_dropped * 100.0
        ));
    }

    /// True when every threshold passed (also when there are none).
    pub fn thresholds_passed(&self) -> bool {
        self.thresholds.iter().all(|t| t.passed)
    }

    /// How the run was loaded, in the one wording the text and HTML reports show and
    /// `compare` matches on: the model, its rate and connections, and how arrival times
    /// were rounded (`uniform arrivals in 1ms ticks`, `constant model at 5000/s over 50
    /// connections, exact arrival times`, `closed model, 50 connections`). The rounding is
    /// part of it so that two runs that differ only there are not taken as like for like.
    pub fn load_description(&self) -> String {
        let model = match &self.load {
            Some(l) => match l.rate {
                Some(rate) => format!(
                    "{} model at {rate}/s over {} connections",
                    l.model, l.connections
                ),
                None => format!("{} model, {} connections", l.model, l.connections),
            },
            None => format!("{} arrivals", self.arrival),
        };
        let tick = |us| crate::duration::HumanDuration(std::time::Duration::from_micros(us));
        match (self.arrival_resolution_us, &self.load) {
            // The closed model has no arrival times to round (and reports from before the
            // setting do not say).
            (None, _) => model,
            (Some(0), _) => format!("{model}, exact arrival times"),
            (Some(us), None) => format!("{model} in {} ticks", tick(us)),
            (Some(us), Some(_)) => format!("{model}, arrivals in {} ticks", tick(us)),
        }
    }
}

/// A small live view, sent while the run goes on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveSnapshot {
    /// Seconds since T0.
    pub elapsed_s: f64,
    /// Requests planned so far: the sessions whose intended start has passed, times the requests of
    /// one session.
    pub planned_so_far: u64,
    /// Requests answered successfully so far, warm-up included.
    pub completed: u64,
    /// Requests failed so far.
    pub failed: u64,
    /// The last closed interval's completed requests per second; before the first closes, the mean
    /// so far.
    pub rps: f64,
    /// Median response time so far, warm-up included.
    pub p50_us: u64,
    /// 99th percentile of the response time so far.
    pub p99_us: u64,
    /// Agents of the run not lost.
    pub active_agents: u32,
    /// Failed requests so far, by error kind.
    pub errors: BTreeMap<String, u64>,
    /// The agent with the highest CPU in the newest figures: near its cores' limit, the
    /// generator rather than the target may be what holds the rate back.
    pub busiest_agent: Option<AgentCpu>,
    /// The cores the target used between its last two readings (`observe:` sources, or else
    /// the pods of its Service), set by the controller, which watches the target.
    pub target_cpu_cores: Option<f64>,
}

/// One agent's CPU, in percent of the cores it may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentCpu {
    /// The agent's id.
    pub agent: String,
    /// Its CPU, percent of its cores.
    pub cpu_pct: f64,
}

#[cfg(test)]
mod tests {
    use super::{LoadSummary, Report, RunOutcome, SessionTotals};

    /// 100 of 160 sessions never started (an agent capped at 20 slots): `incomplete`, with
    /// how many; within `max_dropped`, or already failed, the outcome stays.
    #[test]
    fn undelivered_sessions_make_a_run_incomplete() {
        let run = |planned, started, outcome| Report {
            outcome,
            totals: super::Totals {
                sessions: SessionTotals {
                    planned,
                    started,
                    dropped: planned - started,
                    ..Default::default()
                },
                ..Default::default()
            },
            ..Default::default()
        };
        let mut capped = run(160, 60, RunOutcome::Succeeded);
        capped.judge_shortfall(crate::scenario::DEFAULT_MAX_DROPPED);
        assert_eq!(capped.outcome, RunOutcome::Incomplete);
        let why = capped.message.unwrap();
        assert!(
            why.starts_with(
                "100 of 160 planned sessions (62.5%) were not delivered as planned (100 never started"
            ),
            "{why}"
        );
        // 1 of 2000 is 0.05 %: within the default 0.1 %.
        let mut one = run(2000, 1999, RunOutcome::Succeeded);
        one.judge_shortfall(crate::scenario::DEFAULT_MAX_DROPPED);
        assert_eq!(one.outcome, RunOutcome::Succeeded);
        // 3 of 2000 is over it, but within a scenario's 1 %.
        let mut three = run(2000, 1997, RunOutcome::Succeeded);
        three.judge_shortfall(0.01);
        assert_eq!(three.outcome, RunOutcome::Succeeded);
        three.judge_shortfall(crate::scenario::DEFAULT_MAX_DROPPED);
        assert_eq!(three.outcome, RunOutcome::Incomplete);
        // A pool too small for its rate starts every session, but a backlog of them late.
        let mut late = run(2000, 2000, RunOutcome::Succeeded);
        late.totals.sessions.started_late = 1000;
        late.judge_shortfall(crate::scenario::DEFAULT_MAX_DROPPED);
        assert_eq!(late.outcome, RunOutcome::Incomplete);
        let why = late.message.unwrap();
        assert!(
            why.starts_with(
                "1000 of 2000 planned sessions (50.0%) were not delivered as planned (1000 started \
                 more than 1 s late)"
            ),
            "{why}"
        );
        // An aborted run keeps its outcome and its reason.
        let mut aborted = run(160, 60, RunOutcome::Aborted);
        aborted.judge_shortfall(0.0);
        assert_eq!(
            (aborted.outcome, aborted.message),
            (RunOutcome::Aborted, None)
        );
    }

    /// The description says how arrival times were rounded, and says nothing of it for the
    /// closed model, which has none.
    #[test]
    fn the_load_description_states_the_arrival_resolution() {
        let text = |load: Option<LoadSummary>, tick: Option<u64>| {
            Report {
                arrival: "uniform".into(),
                arrival_resolution_us: tick,
                load,
                ..Default::default()
            }
            .load_description()
        };
        assert_eq!(text(None, Some(1000)), "uniform arrivals in 1ms ticks");
        assert_eq!(text(None, Some(0)), "uniform arrivals, exact arrival times");
        // A report from before the setting says nothing of it.
        assert_eq!(text(None, None), "uniform arrivals");
        let constant = LoadSummary {
            model: "constant".into(),
            connections: 50,
            rate: Some(5000.0),
            ..Default::default()
        };
        assert_eq!(
            text(Some(constant), Some(250)),
            "constant model at 5000/s over 50 connections, arrivals in 0.25ms ticks"
        );
        let closed = LoadSummary {
            model: "closed".into(),
            connections: 50,
            ..Default::default()
        };
        assert_eq!(text(Some(closed), None), "closed model, 50 connections");
    }
}
