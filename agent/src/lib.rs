//! Stampede agent: dials the controller and holds one stream, runs its shard of the arrival
//! schedule over real sockets, records both latencies, and streams interval histograms.
//!
//! The dead-man switch (design.md §3.5): a run holds a lease the controller renews. If the
//! lease lapses — controller gone, stream broken — load stops within the lease period. The
//! data already collected is kept and replayed when the controller comes back; the
//! controller drops intervals it already has, and acknowledges what it received so the replay
//! buffer only holds what is unacknowledged (and is bounded).
//!
//! The control loop (stream, lease, watchdog) runs on its own thread and runtime, apart from
//! the load: a process whose load saturates its cores still reads its renewals on time, so it
//! never mistakes itself for an orphan.

pub mod dynamic;
pub mod h2;
pub mod http1;
pub mod net;
pub mod runner;
pub mod setup;
pub mod stream;
pub mod tls;
pub mod udp;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::Rng;
use stampede_core::scenario::{LoadModel, Scenario};
use stampede_core::schedule::Schedule;
use stampede_core::shard::{split_evenly, Shard};
use stampede_proto::v1::{self, agent_message::Msg as Out, controller_message::Msg as In};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataValue;

use crate::http1::PreparedRequest;
use crate::runner::{Endpoint, RunSpec, StepPlan};
use crate::stream::FramedRequest;
use crate::udp::DatagramRequest;
use stampede_core::protocol::Transport;

/// How the agent connects and describes itself. `Debug` leaves the token and key out.
#[derive(Clone)]
pub struct AgentConfig {
    /// Controller URL, e.g. `http://127.0.0.1:7070`, or `https://…` for TLS.
    pub controller: String,
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
    pub pod_name: String,
    pub node_name: String,
    pub pod_ip: String,
    /// Longest pause between reconnection attempts.
    pub max_backoff: Duration,
    /// Local addresses to open load connections from, round-robin (`--source-ips`); empty:
    /// the kernel's choice. Process-wide: set when [`run`] starts.
    pub source_ips: Vec<std::net::IpAddr>,
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
            source_ips: Vec::new(),
        }
    }
}

/// Errors of one connection to the controller (the agent retries them all).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("invalid controller URL: {0}")]
    Url(String),
    #[error("connecting to the controller: {0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("controller refused the stream: {0}")]
    Status(#[from] tonic::Status),
    #[error("controller closed the stream")]
    Closed,
    #[error("invalid token: it must be printable ASCII")]
    Token,
    #[error("--source-ips: {0}")]
    SourceAddress(std::io::Error),
    #[error("starting the control thread: {0}")]
    Runtime(std::io::Error),
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

/// A run this agent holds: its stop switch and lease.
struct ActiveRun {
    run_id: String,
    stop: CancellationToken,
    /// Why the run was stopped early (the first reason wins); reported in `Done`.
    reason: Arc<Mutex<Option<String>>>,
    lease_deadline: Arc<Mutex<Instant>>,
    lease: Duration,
}

/// Stops a run, remembering why (the first reason given wins).
fn stop_run(stop: &CancellationToken, reason: &Mutex<Option<String>>, why: String) {
    reason
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert(why);
    stop.cancel();
}

/// Most unacknowledged run messages kept for replay; the oldest go first beyond it (a
/// controller that acknowledges nothing for this long is not coming back for them).
const MAX_RETAINED: usize = 4096;
/// Longest the agent waits, after a shutdown signal, to hand its last data to the controller.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest lease the agent accepts: "load stops within a second" must not silently become
/// an hour because a controller asked for it.
pub const MAX_LEASE: Duration = Duration::from_secs(60);

/// A shard prepared on Assign, waiting for Start.
struct PendingRun {
    spec: Arc<RunSpec>,
}

impl Drop for AgentState {
    /// However the control loop ends, the load it started ends with it.
    fn drop(&mut self) {
        if let Some(a) = &self.active {
            a.stop.cancel();
        }
    }
}

/// State that outlives one connection.
struct AgentState {
    pending: Option<PendingRun>,
    active: Option<ActiveRun>,
    /// The current run's messages the controller has not acknowledged, for replay after a
    /// reconnect (at most [`MAX_RETAINED`]).
    retained: std::collections::VecDeque<v1::AgentMessage>,
    /// The runtime the load runs on (the control loop has its own).
    load: tokio::runtime::Handle,
    run_tx: mpsc::UnboundedSender<v1::AgentMessage>,
    run_rx: mpsc::UnboundedReceiver<v1::AgentMessage>,
    lease: Duration,
    /// This agent's data rows for the run about to be assigned (sent before its Assign).
    data: stampede_proto::data::Received,
}

/// Runs the agent until `shutdown` resolves, reconnecting with backoff. The load runs on the
/// caller's runtime; the control loop on a thread of its own. On `shutdown` an active run is
/// stopped and its last data and `Done` are handed to the controller (within
/// [`DRAIN_TIMEOUT`]) before this returns.
pub async fn run(
    cfg: AgentConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), AgentError> {
    if !cfg.source_ips.is_empty() {
        net::set_source_addresses(&cfg.source_ips).map_err(AgentError::SourceAddress)?;
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
                    .deny_endpoint(a, "the controller's own address");
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
                            r = control(cfg, q, load) => r,
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

/// The control loop: connects, reconnects with backoff, and drains on `quit`.
async fn control(
    cfg: AgentConfig,
    quit: CancellationToken,
    load: tokio::runtime::Handle,
) -> Result<(), AgentError> {
    let (run_tx, run_rx) = mpsc::unbounded_channel();
    let mut state = AgentState {
        pending: None,
        active: None,
        retained: std::collections::VecDeque::new(),
        load,
        run_tx,
        run_rx,
        lease: Duration::from_secs(1),
        data: Default::default(),
    };
    let drained = async {
        quit.cancelled().await;
        tokio::time::sleep(DRAIN_TIMEOUT).await;
    };
    tokio::pin!(drained);
    let mut backoff = Duration::from_millis(100);
    loop {
        let started = Instant::now();
        let result = tokio::select! {
            r = connection(&cfg, &mut state, &quit) => r,
            _ = &mut drained => {
                tracing::warn!("shutting down before the last data reached the controller");
                return Ok(());
            }
        };
        if quit.is_cancelled() && state.active.is_none() {
            return Ok(());
        }
        match result {
            Err(AgentError::Status(s))
                if matches!(
                    s.code(),
                    tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
                ) =>
            {
                // A wrong credential does not get better by retrying.
                return Err(AgentError::Status(s));
            }
            Ok(()) => tracing::info!("controller closed the stream; reconnecting"),
            Err(e) => tracing::warn!(error = %e, "controller connection failed; retrying"),
        }
        if started.elapsed() > Duration::from_secs(10) {
            backoff = Duration::from_millis(100);
        }
        let jitter = rand::rng().random_range(0.8..1.2);
        tokio::select! {
            _ = tokio::time::sleep(backoff.mul_f64(jitter)) => {}
            _ = &mut drained => return Ok(()),
        }
        backoff = (backoff * 2).min(cfg.max_backoff);
    }
}

fn msg(m: Out) -> v1::AgentMessage {
    v1::AgentMessage { msg: Some(m) }
}

async fn connection(
    cfg: &AgentConfig,
    state: &mut AgentState,
    quit: &CancellationToken,
) -> Result<(), AgentError> {
    if quit.is_cancelled() && state.active.is_none() {
        return Ok(());
    }
    let mut endpoint = tonic::transport::Endpoint::from_shared(cfg.controller.clone())
        .map_err(|e| AgentError::Url(e.to_string()))?;
    if cfg.controller.starts_with("https://") {
        let cas: Vec<&[u8]> = cfg.ca_pem.iter().map(Vec::as_slice).collect();
        let tls = stampede_proto::tls::client_tls(
            &cas,
            cfg.identity
                .as_ref()
                .map(|(c, k)| (c.as_slice(), k.as_slice())),
            cfg.server_name.as_deref(),
        );
        endpoint = endpoint.tls_config(tls)?;
    }
    let endpoint = endpoint
        .connect_timeout(Duration::from_secs(3))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(5));
    let channel = endpoint.connect().await?;
    let (tx, rx) = mpsc::channel::<v1::AgentMessage>(1024);
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    if let Some(token) = &cfg.token {
        let value =
            MetadataValue::try_from(format!("Bearer {token}")).map_err(|_| AgentError::Token)?;
        request.metadata_mut().insert("authorization", value);
    }
    let register = v1::Register {
        agent_id: cfg.id.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        capacity: cfg.capacity,
        hist_spec: Some(stampede_core::hist::SPEC.into()),
        pod_name: cfg.pod_name.clone(),
        node_name: cfg.node_name.clone(),
        pod_ip: cfg.pod_ip.clone(),
        ephemeral_ports: Some(ephemeral_ports()),
        source_addresses: net::source_addresses().len().max(1) as u32,
        active_run: state
            .active
            .as_ref()
            .map(|a| a.run_id.clone())
            .unwrap_or_default(),
    };
    let _ = tx.send(msg(Out::Register(register))).await;
    // An Assign carries the whole scenario (files inlined), up to the scenario's bound.
    let mut inbound = v1::agent_service_client::AgentServiceClient::new(channel)
        .max_decoding_message_size(
            stampede_core::scenario::MAX_SCENARIO_BYTES + stampede_core::scenario::MESSAGE_OVERHEAD,
        )
        .attach(request)
        .await?
        .into_inner();
    tracing::info!(controller = %cfg.controller, id = %cfg.id, "attached to controller");
    // Replay what the controller has not acknowledged; it ignores intervals it already has.
    for m in &state.retained {
        if tx.send(m.clone()).await.is_err() {
            return Err(AgentError::Closed);
        }
    }
    let mut draining = false;
    loop {
        tokio::select! {
            m = inbound.next() => {
                let m = match m {
                    Some(Ok(m)) => m,
                    Some(Err(status)) => return Err(status.into()),
                    None => return Err(AgentError::Closed),
                };
                let run_acked = matches!(&m.msg, Some(In::Ack(_)));
                handle(cfg, state, &tx, m).await;
                // Drained: the controller has the run's Done (only its ack proves the frames
                // left this process; returning earlier would drop them with the runtime).
                if draining && run_acked && state.active.is_none() {
                    return Ok(());
                }
            }
            Some(mut out) = state.run_rx.recv() => {
                let done = if let Some(Out::Done(d)) = &mut out.msg {
                    // The run is over: end its lease watchdog too (it would otherwise report
                    // a lapsed lease once renewals stop), and say why it stopped early.
                    if let Some(a) = state.active.take() {
                        if d.stopped_early && d.reason.is_empty() {
                            d.reason = a.reason.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_default();
                        }
                        a.stop.cancel();
                    }
                    true
                } else {
                    false
                };
                if state.retained.len() >= MAX_RETAINED {
                    state.retained.pop_front();
                    tracing::warn!("replay buffer full: the oldest unacknowledged interval was dropped");
                }
                state.retained.push_back(out.clone());
                if tx.send(out).await.is_err() {
                    return Err(AgentError::Closed);
                }
                if done && quit.is_cancelled() {
                    draining = true; // now wait for the controller's acknowledgement
                }
            }
            _ = quit.cancelled(), if !draining => {
                draining = true;
                match &state.active {
                    Some(a) => {
                        tracing::info!(run = %a.run_id, "shutting down: stopping the run and sending what it collected");
                        stop_run(&a.stop, &a.reason, "the agent was shut down (SIGTERM)".into());
                    }
                    None => return Ok(()),
                }
            }
        }
    }
}

async fn handle(
    cfg: &AgentConfig,
    state: &mut AgentState,
    tx: &mpsc::Sender<v1::AgentMessage>,
    m: v1::ControllerMessage,
) {
    let Some(m) = m.msg else { return };
    match m {
        In::Registered(r) => {
            if r.lease_ms > 0 {
                state.lease = Duration::from_millis(r.lease_ms).min(MAX_LEASE);
            }
            if let Err(e) =
                stampede_proto::convert::check_spec("registered.hist_spec", r.hist_spec.as_ref())
            {
                tracing::error!(error = %e, "controller uses another histogram spec");
            }
        }
        In::DataRows(d) => state.data.add(d),
        In::Assign(a) => {
            let run_id = a.run_id.clone();
            let data = std::mem::take(&mut state.data);
            let reply = if state.active.is_some() {
                Out::Failed(v1::AgentFailed {
                    run_id,
                    reason: "agent is busy with another run".into(),
                })
            } else {
                match prepare(cfg, &a, data).await {
                    Ok(spec) => {
                        let planned: u64 = spec.planned.iter().sum();
                        if planned != a.planned_sessions {
                            Out::Failed(v1::AgentFailed {
                                run_id,
                                reason: format!("plan mismatch: controller planned {} sessions for this shard, agent computed {planned}", a.planned_sessions),
                            })
                        } else {
                            state.pending = Some(PendingRun {
                                spec: Arc::new(spec),
                            });
                            state.retained.clear();
                            Out::Ready(v1::Ready {
                                run_id,
                                planned_sessions: planned,
                            })
                        }
                    }
                    Err(reason) => Out::Failed(v1::AgentFailed { run_id, reason }),
                }
            };
            let _ = tx.send(msg(reply)).await;
        }
        In::Start(s) => {
            let Some(pending) = state.pending.take().filter(|p| p.spec.run_id == s.run_id) else {
                let _ = tx
                    .send(msg(Out::Failed(v1::AgentFailed {
                        run_id: s.run_id,
                        reason: "start for a run that was not assigned".into(),
                    })))
                    .await;
                return;
            };
            // T0 on our clock = T0 on the controller's + (agent − controller) offset.
            let t0_local = s.t0_unix_ns.saturating_add(s.clock_offset_ns);
            let delta = t0_local.saturating_sub(unix_ns());
            let t0 = if delta >= 0 {
                Instant::now() + Duration::from_nanos(delta as u64)
            } else {
                Instant::now()
            };
            let stop = CancellationToken::new();
            let reason = Arc::new(Mutex::new(None));
            let lease_deadline = Arc::new(Mutex::new(t0.max(Instant::now()) + state.lease));
            state.active = Some(ActiveRun {
                run_id: s.run_id.clone(),
                stop: stop.clone(),
                reason: reason.clone(),
                lease_deadline: lease_deadline.clone(),
                lease: state.lease,
            });
            tokio::spawn(watchdog(
                lease_deadline,
                stop.clone(),
                reason,
                state.lease,
                s.run_id.clone(),
            ));
            state.load.spawn(runner::execute(
                pending.spec,
                t0,
                state.run_tx.clone(),
                stop,
            ));
        }
        In::Lease(l) => {
            if let Some(a) = &state.active {
                let lease = if l.lease_ms > 0 {
                    Duration::from_millis(l.lease_ms).min(MAX_LEASE)
                } else {
                    a.lease
                };
                let mut d = a.lease_deadline.lock().unwrap_or_else(|p| p.into_inner());
                *d = (*d).max(Instant::now() + lease);
                drop(d);
                if l.acked_below > 0 {
                    let run = a.run_id.clone();
                    state.retained.retain(|m| {
                        !matches!(&m.msg, Some(Out::Progress(p)) if p.run_id == run && p.interval < l.acked_below)
                    });
                }
            }
        }
        In::Abort(a) => {
            if let Some(active) = state.active.as_ref().filter(|x| x.run_id == a.run_id) {
                tracing::warn!(run = %a.run_id, reason = %a.reason, "run aborted by the controller");
                stop_run(
                    &active.stop,
                    &active.reason,
                    format!("aborted by the controller: {}", a.reason),
                );
            }
            if state
                .pending
                .as_ref()
                .is_some_and(|p| p.spec.run_id == a.run_id)
            {
                state.pending = None;
            }
        }
        In::Ack(ack) => state.retained.retain(|m| !acknowledged(m, &ack)),
        In::ClockPing(p) => {
            let t2 = unix_ns();
            let pong = v1::ClockPong {
                seq: p.seq,
                t1_unix_ns: p.t1_unix_ns,
                t2_unix_ns: t2,
                t3_unix_ns: unix_ns(),
            };
            let _ = tx.send(msg(Out::ClockPong(pong))).await;
        }
    }
}

/// Whether `ack` (a whole run) covers the retained message `m`.
fn acknowledged(m: &v1::AgentMessage, ack: &v1::Ack) -> bool {
    match &m.msg {
        Some(Out::Progress(p)) => p.run_id == ack.run_id,
        Some(Out::Done(d)) => d.run_id == ack.run_id,
        _ => false,
    }
}

/// The dead-man switch: stops the run when its lease lapses.
async fn watchdog(
    deadline: Arc<Mutex<Instant>>,
    stop: CancellationToken,
    reason: Arc<Mutex<Option<String>>>,
    lease: Duration,
    run_id: String,
) {
    loop {
        let d = *deadline.lock().unwrap_or_else(|p| p.into_inner());
        tokio::select! {
            _ = tokio::time::sleep_until(d) => {}
            _ = stop.cancelled() => return,
        }
        let current = *deadline.lock().unwrap_or_else(|p| p.into_inner());
        if Instant::now() >= current {
            tracing::warn!(run = %run_id, "lease lapsed: the controller is gone; stopping load");
            stop_run(
                &stop,
                &reason,
                format!(
                    "its lease lapsed (no renewal from the controller for {} ms)",
                    lease.as_millis()
                ),
            );
            return;
        }
    }
}

/// Parses and checks an assignment, resolves the target, and compiles the steps.
async fn prepare(
    cfg: &AgentConfig,
    a: &v1::Assign,
    mut data: stampede_proto::data::Received,
) -> Result<RunSpec, String> {
    let scenario = Scenario::from_yaml(&a.scenario).map_err(|e| format!("scenario: {e}"))?;
    let shares = data
        .take(&a.run_id, &scenario, &a.data)
        .map_err(|e| e.to_string())?;
    let shard = Shard {
        index: a.shard_index,
        count: a.shard_count,
        weights: a.weights.clone(),
    };
    if shard.count > stampede_core::scenario::MAX_AGENTS {
        return Err(format!(
            "shard: {} shards; at most {}",
            shard.count,
            stampede_core::scenario::MAX_AGENTS
        ));
    }
    let filter = shard.filter().map_err(|e| format!("shard: {e}"))?;
    let planned = stampede_core::plan::Plan::shard_sessions(&scenario, &shard, a.seed)
        .map_err(|e| format!("shard: {e}"))?;
    if scenario.has_env_refs() {
        return Err(
            "scenario: ${env:...} references must be resolved before submission (the CLI does it)"
                .into(),
        );
    }
    // The data supply with the run's seed (the CLI and the controller check it too when the
    // schedule does not depend on the seed): refused before any load.
    scenario
        .check_data_supply(a.seed)
        .map_err(|e| e.to_string())?;
    let target = scenario
        .target
        .clone()
        .ok_or_else(|| "target: is required".to_string())?;
    let transport = target.transport();
    if transport == Transport::Unix && !cfg.target_policy.allow_unix {
        return Err(
            "target: unix:// targets only run on agents on the same machine as the CLI (run --local)"
                .into(),
        );
    }
    let mut endpoint = resolve(&target).await?;
    let host_header = target.authority();
    // The address the run will really use, after resolution: a name that resolves to a
    // refused address is refused too.
    if let Endpoint::Http(addr, _) | Endpoint::Tcp(addr) | Endpoint::Udp(addr) = &endpoint {
        cfg.target_policy.check(*addr)?;
    }
    let http2 = scenario.http_version == Some(stampede_core::scenario::HttpVersion::Http2);
    let https = transport == Transport::Https;
    if let Endpoint::Http(addr, _) = endpoint {
        let tls = if https {
            Some(Arc::new(tls::TlsClient::new(
                scenario.tls.as_ref(),
                target.host(),
                http2,
            )?))
        } else {
            None
        };
        endpoint = if http2 {
            Endpoint::H2(addr, tls)
        } else {
            Endpoint::Http(addr, tls)
        };
    }
    let (mut context, slots) =
        dynamic::Context::new(&scenario, shares, a.seed, a.shard_index, &a.run_id);
    // Setup steps run here, before Ready: outside any measurement.
    let setup_target = setup::Target {
        endpoint: &endpoint,
        authority: &host_header,
        prefix: target.prefix(),
        https,
    };
    setup::run(
        &scenario,
        &mut context,
        &setup_target,
        scenario.request_timeout.0,
    )
    .await?;
    let mut any_dynamic = false;
    let prefix = target.prefix();
    let mut ordinal = 0;
    let mut steps = Vec::with_capacity(scenario.session.len());
    for (i, s) in scenario.session.iter().enumerate() {
        let (repeat, new_connection) = (s.repeat(), s.new_connection);
        let plan = if let Some(h) = s.http.as_ref().filter(|h| {
            !h.is_static() || !s.extract.is_empty() || s.check.is_some() || scenario.cookies
        }) {
            any_dynamic = true;
            StepPlan::HttpDynamic {
                ordinal,
                step: Arc::new(
                    dynamic::DynamicHttp::new(
                        h,
                        &s.extract,
                        s.check.as_ref(),
                        &scenario,
                        &slots,
                        &host_header,
                        prefix,
                        https,
                    )
                    .map_err(|e| format!("session[{i}].{e}"))?,
                ),
                repeat,
                new_connection,
            }
        } else if let Some(h) = &s.http {
            StepPlan::Http {
                ordinal,
                request: PreparedRequest::new(h, &host_header, prefix),
                h2: if http2 {
                    Some(
                        crate::h2::H2Request::new(h, https, &host_header, prefix)
                            .map_err(|e| format!("session[{i}].http.{e}"))?,
                    )
                } else {
                    None
                },
                expect: h.expect_status.clone(),
                repeat,
                new_connection,
            }
        } else if let Some(t) = &s.tcp {
            let send = dynamic_send(&t.send, &scenario, &slots, &mut any_dynamic)
                .map_err(|e| format!("session[{i}].tcp.{e}"))?;
            StepPlan::Tcp {
                ordinal,
                request: FramedRequest::new(t).map_err(|e| format!("session[{i}].tcp.{e}"))?,
                send,
                repeat,
                new_connection,
            }
        } else if let Some(u) = &s.udp {
            let send = dynamic_send(&u.send, &scenario, &slots, &mut any_dynamic)
                .map_err(|e| format!("session[{i}].udp.{e}"))?;
            StepPlan::Udp {
                ordinal,
                request: DatagramRequest::new(u).map_err(|e| format!("session[{i}].udp.{e}"))?,
                send,
                repeat,
                new_connection,
            }
        } else {
            steps.push(StepPlan::Think(s.think_time.unwrap_or(
                stampede_core::scenario::ThinkTime::Fixed(Default::default()),
            )));
            continue;
        };
        ordinal += 1;
        steps.push(plan);
    }
    let interval = Duration::from_millis(a.interval_ms.clamp(100, 60_000));
    let mode = match &scenario.load {
        None => runner::Mode::Arrivals,
        Some(load) => {
            // This shard's connections: the same even split the controller reports.
            let share = split_evenly(u64::from(load.connections), a.shard_count)
                .get(a.shard_index as usize)
                .copied()
                .unwrap_or(0);
            if share > u64::from(cfg.capacity.max(1)) {
                return Err(format!(
                    "load.connections: this agent's share is {share} connections, more than its capacity of {}",
                    cfg.capacity
                ));
            }
            let connections = share as usize;
            let first = split_evenly(u64::from(load.connections), a.shard_count)
                .iter()
                .take(a.shard_index as usize)
                .sum();
            match load.model {
                LoadModel::Closed => runner::Mode::Closed {
                    connections,
                    duration: load.duration.0,
                    first,
                    total: u64::from(load.connections),
                },
                LoadModel::Constant => runner::Mode::Constant { connections, first },
            }
        }
    };
    let phases = scenario.effective_phases();
    let dynamic = (any_dynamic || !context_is_empty(&scenario)).then(|| Arc::new(context));
    Ok(RunSpec {
        run_id: a.run_id.clone(),
        schedule: Schedule::new(&phases, scenario.arrival, a.seed),
        mode,
        phases: phases.len(),
        planned,
        request_timeout: scenario.request_timeout.0,
        scenario,
        filter,
        interval,
        target: endpoint,
        steps,
        capacity: cfg.capacity.max(1) as usize,
        dynamic,
        seed: a.seed,
    })
}

/// A tcp or udp payload rendered per session, when `send` is a template.
fn dynamic_send(
    send: &stampede_core::protocol::Payload,
    scenario: &Scenario,
    slots: &std::collections::BTreeMap<String, usize>,
    any_dynamic: &mut bool,
) -> Result<Option<Arc<dynamic::DynamicSend>>, String> {
    let Some(t) = send.template() else {
        return Ok(None);
    };
    *any_dynamic = true;
    Ok(Some(Arc::new(dynamic::DynamicSend::new(
        t, scenario, slots,
    )?)))
}

/// Data sources bind rows (and `stop` skips sessions) even when no step reads them.
fn context_is_empty(scenario: &Scenario) -> bool {
    scenario.data.is_empty()
}

/// Resolves the target once per run.
async fn resolve(target: &stampede_core::target::Target) -> Result<Endpoint, String> {
    if let Some(path) = target.unix_path() {
        return Ok(Endpoint::Unix(path.into()));
    }
    let authority = target.socket_authority().unwrap_or_default();
    let addr = tokio::net::lookup_host(&authority)
        .await
        .map_err(|e| format!("target: cannot resolve `{authority}`: {e}"))?
        .next()
        .ok_or_else(|| format!("target: `{authority}` resolved to no address"))?;
    Ok(match target.transport() {
        Transport::Tcp => Endpoint::Tcp(addr),
        Transport::Udp => Endpoint::Udp(addr),
        _ => Endpoint::Http(addr, None),
    })
}
