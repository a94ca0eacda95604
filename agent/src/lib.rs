//! Stampede agent: dials the controller and holds one stream, runs its shard of the arrival
//! schedule over real sockets, records both latencies, and streams interval histograms.
//!
//! The dead-man switch (`docs/design.md`): a run holds a lease the controller renews. If the
//! lease lapses, load stops within the lease period; when the stream closed (a controller
//! that restarts), the lease is extended once by the run's restart grace, so a controller
//! back on its data directory re-adopts the run. The data already collected is kept and
//! replayed when the controller comes back; the controller drops intervals it already has,
//! and acknowledges what it made durable so the replay buffer only holds what is
//! unacknowledged (and is bounded).
//!
//! The control loop (stream, lease, watchdog) runs on its own thread and runtime, apart from
//! the load: a process whose load saturates its cores still reads its renewals on time, so it
//! never mistakes itself for an orphan.
//!
//! # Layout
//!
//! The control side, on its own thread and runtime:
//! - `control`: the stream to the controller, with backoff, the lease watchdog, the bounded
//!   replay buffer, acknowledgements and shutdown.
//! - `assign`: an `Assign` turned into a `ShardRun` (`runner/plan`): the scenario checked, the
//!   agent's data rows taken, the target resolved and checked against the target policy.
//! - [`setup`]: the setup steps, run once before `Ready` and again every `setup_refresh`.
//! - [`resolve`]: a target name's every address, looked up again on its TTL during the run.
//! - [`service`]: `endpoints: service`, the Service's ready pods as the controller sends them.
//!
//! The load:
//! - [`runner`]: one `RunSpec` per workload started from one T0 into one recorder.
//!   `runner/plan` is the compiled plan; `runner/models` the closed and constant models'
//!   connection tasks; `runner/session` one session's steps over its connection, both
//!   latencies timed; `runner/deadline` a connection's one request timer; `runner/recorder`
//!   the double-buffered, striped interval recorder; `runner/connects` connect times per
//!   stage of a connection ramp.
//! - `arrivals`: the arrival loop, paced by a `timerfd` in tokio's reactor (the agent's one
//!   `unsafe`). `pool`: a constant-rate pool's slot queue. [`ticked`]: a pool's answers read at
//!   the arrival loop's ticks and timed by the kernel's receive time.
//! - Drivers: [`http1`] (allocation-free HTTP/1.1, `http1/head` the response head), [`h2`],
//!   [`grpc`], [`stream`] (raw TCP and Unix), [`udp`], [`ws`] (WebSocket), [`tls`]; [`net`]
//!   makes every connection and counts them. `http1/stream` times a streamed reply's events.
//! - [`dynamic`]: steps rendered per session (templates, data rows, extracted values, cookies)
//!   and judged (extraction and checks). Static steps never come here.

#![warn(unreachable_pub, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod arrivals;
mod assign;
mod control;
mod decode;
pub mod dynamic;
pub mod grpc;
pub mod h2;
pub mod http1;
pub mod net;
mod pool;
pub mod resolve;
pub mod runner;
pub mod selfwatch;
pub mod service;
pub mod setup;
pub mod stream;
pub mod ticked;
pub mod tls;
pub mod udp;
pub mod ws;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stampede_proto::v1;
use tokio_util::sync::CancellationToken;

/// How the agent connects and describes itself. `Debug` leaves the token and key out.
#[derive(Clone)]
pub struct AgentConfig {
    /// Controller URL, e.g. `http://127.0.0.1:7070`, or `https://…` for TLS.
    pub controller: String,
    /// How the controller and `stampede agents` name this agent; unique among its agents.
    pub id: String,
    /// The agent token, sent as `authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Certificate authorities (PEM) to trust for an `https://` controller, besides the
    /// system's.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate and key (PEM), for a controller that requires mutual TLS.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name the controller's certificate must carry, when not the URL's host.
    pub server_name: Option<String>,
    /// Which addresses this agent may load (checked after name resolution, before any load).
    /// The controller's own address is added when the agent starts.
    pub target_policy: stampede_core::target_policy::TargetPolicy,
    /// Sessions in flight at once before arrivals are dropped (and counted).
    pub capacity: u32,
    /// The agent's pod in a cluster (empty outside one), reported so the controller can match
    /// the agent to its pod.
    pub pod_name: String,
    /// The node the pod runs on (empty outside a cluster), shown in `stampede agents`.
    pub node_name: String,
    /// The pod's IP (empty outside a cluster), shown in `stampede agents`.
    pub pod_ip: String,
    /// Longest pause between reconnection attempts.
    pub max_backoff: Duration,
    /// How long, beyond its lease, the agent keeps running a run's load when its stream to the
    /// controller closes: a controller that restarts on its data directory re-adopts the run
    /// if the agent is back within it. The run's own grace (the controller's) applies, at most
    /// this one. A link that stays open but carries no renewal still stops the load at the
    /// lease.
    pub restart_grace: Duration,
    /// Local addresses to open load connections from, round-robin (`--source-ips`); empty:
    /// the kernel's choice. Process-wide: set when [`run`] starts.
    pub source_ips: Vec<std::net::IpAddr>,
    /// How target names are looked up; `None`: the system's configuration.
    pub resolver: Option<resolve::DnsResolver>,
    /// The cores this agent may use (`--cpu-limit`), when not what the process sees: its CPU
    /// share, and so whether it was the run's limit, is measured against them. Process-wide:
    /// set when [`run`] starts.
    pub cpu_limit: Option<f64>,
}

impl std::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("controller", &self.controller)
            .field("id", &self.id)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("ca_pem", &self.ca_pem.is_some())
            .field("identity", &self.identity.is_some())
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl AgentConfig {
    /// The defaults `stampede agent` starts from: no token or TLS material, a capacity of
    /// 10,000 sessions, the default restart grace.
    pub fn new(controller: impl Into<String>, id: impl Into<String>) -> Self {
        Self {
            controller: controller.into(),
            id: id.into(),
            token: None,
            ca_pem: None,
            identity: None,
            server_name: None,
            target_policy: stampede_core::target_policy::TargetPolicy::default(),
            capacity: 10_000,
            pod_name: String::new(),
            node_name: String::new(),
            pod_ip: String::new(),
            max_backoff: Duration::from_secs(5),
            restart_grace: DEFAULT_RESTART_GRACE,
            source_ips: Vec::new(),
            resolver: None,
            cpu_limit: None,
        }
    }
}

/// Errors of one connection to the controller (the agent retries them all).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The controller URL does not parse as a gRPC endpoint; the parser's reason.
    #[error("invalid controller URL: {0}")]
    Url(String),
    /// The controller could not be reached (refused, timed out, TLS).
    #[error("connecting to the controller: {0}")]
    Connect(tonic::transport::Error),
    /// The controller answered the stream with an error status (a wrong token, a shutdown).
    #[error("controller refused the stream: {0}")]
    Status(tonic::Status),
    /// The controller ended the stream without an error.
    #[error("controller closed the stream")]
    Closed,
    /// The token has bytes an HTTP header cannot carry.
    #[error("invalid token: it must be printable ASCII")]
    Token,
    /// A source address could not be bound to.
    #[error("--source-ips: {0}")]
    SourceAddress(std::io::Error),
    /// The control thread or its runtime could not be started.
    #[error("starting the control thread: {0}")]
    Runtime(std::io::Error),
    /// A CPU limit that is not a positive number of cores.
    #[error("--cpu-limit: must be a number of cores > 0, got {0}")]
    CpuLimit(f64),
}

// Each cause below is part of its variant's message, so it is not also a `source()`
// (`#[from]` would make it one, and a chain printer would say it twice).
impl From<tonic::transport::Error> for AgentError {
    fn from(e: tonic::transport::Error) -> Self {
        Self::Connect(e)
    }
}

impl From<tonic::Status> for AgentError {
    fn from(e: tonic::Status) -> Self {
        Self::Status(e)
    }
}

fn unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Reads the local ephemeral port range, if the kernel exposes it.
pub fn ephemeral_ports() -> v1::PortRange {
    let text =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut it = text
        .split_whitespace()
        .filter_map(|s| s.parse::<u32>().ok());
    match (it.next(), it.next()) {
        (Some(low), Some(high)) => v1::PortRange { low, high },
        _ => v1::PortRange { low: 0, high: 0 },
    }
}

/// The default [`AgentConfig::restart_grace`]: a controller pod rescheduled on its node, or a
/// process restarted by its supervisor, is back well within it.
pub const DEFAULT_RESTART_GRACE: Duration = Duration::from_secs(15);

/// Longest pause between reconnection attempts while a run's load goes on: the run's data
/// waits in the replay buffer meanwhile, and its restart grace is running down.
const RUN_MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The longest lease the agent accepts: "load stops within a second" must not silently become
/// an hour because a controller asked for it.
pub const MAX_LEASE: Duration = Duration::from_secs(60);

/// Runs the agent until `shutdown` resolves, reconnecting with backoff. The load runs on the
/// caller's runtime; the control loop on a thread of its own. On `shutdown` an active run is
/// stopped and its last data and `Done` are handed to the controller (within
/// five seconds) before this returns.
pub async fn run(
    cfg: AgentConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), AgentError> {
    if !cfg.source_ips.is_empty() {
        net::set_source_addresses(&cfg.source_ips).map_err(AgentError::SourceAddress)?;
    }
    if let Some(c) = cfg.cpu_limit {
        if !(c.is_finite() && c > 0.0) {
            return Err(AgentError::CpuLimit(c));
        }
        selfwatch::set_cpu_limit(c);
    }
    let mut cfg = cfg;
    // Never aim at the controller itself.
    if let Some(authority) = cfg
        .controller
        .split("://")
        .nth(1)
        .and_then(|r| r.split('/').next())
    {
        if let Ok(addrs) = tokio::net::lookup_host(authority).await {
            for a in addrs {
                cfg.target_policy
                    .deny_local_server(a, "the controller's own address");
            }
        }
    }
    let load = tokio::runtime::Handle::current();
    let quit = CancellationToken::new();
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel();
    let q = quit.clone();
    std::thread::Builder::new()
        .name("stampede-control".into())
        .spawn(move || {
            let mut done_tx = done_tx;
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(AgentError::Runtime)
                .and_then(|rt| {
                    rt.block_on(async {
                        tokio::select! {
                            r = control::control(cfg, q, load) => r,
                            // The caller dropped `run` (a task abort: the embedded
                            // equivalent of a killed process): stop at once, no drain.
                            _ = done_tx.closed() => Ok(()),
                        }
                    })
                });
            let _ = done_tx.send(result);
        })
        .map_err(AgentError::Runtime)?;
    tokio::pin!(shutdown);
    tokio::select! {
        r = &mut done_rx => return r.unwrap_or(Ok(())),
        _ = &mut shutdown => quit.cancel(),
    }
    done_rx.await.unwrap_or(Ok(()))
}
