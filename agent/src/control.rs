//! The control loop: one stream to the controller at a time, reconnecting with backoff;
//! assign, start, lease renewals, aborts and acknowledgements; the replay buffer; the dead-man
//! watchdog. It runs on its own thread and runtime (see [`crate::run`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use stampede_proto::v1::{self, agent_message::Msg as Out, controller_message::Msg as In};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataValue;

use crate::assign::prepare;
use crate::runner::{self, ShardRun};
use crate::{ephemeral_ports, net, unix_ns, AgentConfig, AgentError, MAX_LEASE, RUN_MAX_BACKOFF};

/// A run this agent holds: its stop switch and lease.
struct ActiveRun {
    run_id: String,
    stop: CancellationToken,
    /// Why the run was stopped early (the first reason wins); reported in `Done`.
    reason: Arc<Mutex<Option<String>>>,
    lease_deadline: Arc<Mutex<Instant>>,
    lease: Duration,
    /// How long beyond its lease the load goes on when its stream closes.
    restart_grace: Duration,
    /// Its stream closed and its lease was extended by the restart grace; the next renewal
    /// (from the controller, back) brings the deadline back to the lease alone.
    riding_out: bool,
    /// Where refreshed setup values go, and the newest generation applied (a replayed or
    /// reordered older one is ignored).
    context: Option<Arc<crate::dynamic::Context>>,
    setup_generation: u64,
    /// What a setup refresh needs (every agent of a refreshing run has it), and whether this
    /// agent runs it: from the start when it ran the setup, or since a `TakeOverSetup`.
    refresh: Option<Arc<crate::setup::Refresh>>,
    refreshing: bool,
    /// `endpoints: service`: where the controller's new sets of endpoints go.
    service: Option<Arc<crate::service::ServiceSet>>,
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
/// Longest the agent waits, after a shutdown signal and its run's graceful stop, to hand its
/// last data to the controller.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// A shard prepared on Assign, waiting for Start.
struct PendingRun {
    spec: Arc<ShardRun>,
    /// The run's restart grace: the controller's, at most this agent's.
    restart_grace: Duration,
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
    /// The newest setup values this agent refreshed for the current run, sent again on every
    /// reconnect: a controller that restarted may have lost them with its last checkpoint
    /// interval, and the other agents would keep the older values until the next refresh.
    setup_sent: Option<v1::AgentMessage>,
    /// The runtime the load runs on (the control loop has its own).
    load: tokio::runtime::Handle,
    run_tx: mpsc::UnboundedSender<v1::AgentMessage>,
    run_rx: mpsc::UnboundedReceiver<v1::AgentMessage>,
    lease: Duration,
    /// This agent's data rows for the run about to be assigned (sent before its Assign).
    data: stampede_proto::data::Received,
    /// The graceful stop of the run started last, in milliseconds: a shutdown waits for it
    /// before the drain's own timeout.
    graceful_stop_ms: Arc<std::sync::atomic::AtomicU64>,
    /// Where the controller serves besides the address dialled (its `Registered`): never a
    /// target.
    controller_own: Vec<std::net::SocketAddr>,
}

/// Most of the controller's own addresses an agent takes from its `Registered`.
const MAX_CONTROLLER_ADDRESSES: usize = 256;

/// The control loop: connects, reconnects with backoff, and drains on `quit`.
pub(crate) async fn control(
    cfg: AgentConfig,
    quit: CancellationToken,
    load: tokio::runtime::Handle,
) -> Result<(), AgentError> {
    let (run_tx, run_rx) = mpsc::unbounded_channel();
    let mut state = AgentState {
        pending: None,
        active: None,
        retained: std::collections::VecDeque::new(),
        setup_sent: None,
        load,
        run_tx,
        run_rx,
        lease: Duration::from_secs(1),
        data: Default::default(),
        graceful_stop_ms: Default::default(),
        controller_own: Vec::new(),
    };
    let (grace, quitting) = (state.graceful_stop_ms.clone(), quit.clone());
    let drained = async move {
        quitting.cancelled().await;
        let grace = Duration::from_millis(grace.load(std::sync::atomic::Ordering::Relaxed));
        tokio::time::sleep(grace + DRAIN_TIMEOUT).await;
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
        if let Some(a) = state.active.as_mut() {
            ride_out(a);
        }
        if started.elapsed() > Duration::from_secs(10) {
            backoff = Duration::from_millis(100);
        }
        let jitter = rand::rng().random_range(0.8..1.2);
        tokio::select! {
            _ = tokio::time::sleep(backoff.mul_f64(jitter)) => {}
            _ = &mut drained => return Ok(()),
        }
        backoff = next_backoff(backoff, cfg.max_backoff, state.active.is_some());
    }
}

/// The pause after `backoff`: doubled, up to `max`, and up to [`RUN_MAX_BACKOFF`] while a run's
/// load goes on (its restart grace is running down).
fn next_backoff(backoff: Duration, max: Duration, running: bool) -> Duration {
    let cap = if running {
        max.min(RUN_MAX_BACKOFF)
    } else {
        max
    };
    (backoff * 2).min(cap)
}

/// The run's stream closed: its lease is extended, once per outage, by the restart grace, so
/// a controller that restarts on its data directory finds the load still running. A renewal
/// ends the outage.
fn ride_out(a: &mut ActiveRun) {
    let grace = a.restart_grace;
    if a.riding_out || grace.is_zero() {
        return;
    }
    a.riding_out = true;
    let mut d = a.lease_deadline.lock().unwrap_or_else(|p| p.into_inner());
    *d += grace;
    tracing::warn!(run = %a.run_id, grace_ms = grace.as_millis() as u64, "controller stream closed: the load goes on for its lease and restart grace while reconnecting");
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
    // Replay what the controller has not acknowledged; it ignores intervals it already has,
    // and setup values of a generation it already holds.
    for m in state.retained.iter().chain(&state.setup_sent) {
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
                // Refreshed setup values: only the newest is kept for replay (it supersedes
                // the others), and never acknowledged; the run's end drops it.
                if matches!(out.msg, Some(Out::SetupValues(_))) {
                    state.setup_sent = Some(out.clone());
                    if tx.send(out).await.is_err() {
                        return Err(AgentError::Closed);
                    }
                    continue;
                }
                let done = if let Some(Out::Done(d)) = &mut out.msg {
                    // The run is over: end its lease watchdog too (it would otherwise report
                    // a lapsed lease once renewals stop), and say why it stopped early.
                    state.setup_sent = None;
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
            state.controller_own = r
                .own_addresses
                .iter()
                .take(MAX_CONTROLLER_ADDRESSES)
                .filter_map(|a| a.parse().ok())
                .collect();
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
                match prepare(&guarded(cfg, &state.controller_own), &a, data).await {
                    Ok(spec) => {
                        let planned = spec.planned();
                        if planned != a.planned_sessions {
                            Out::Failed(v1::AgentFailed {
                                run_id,
                                reason: format!("plan mismatch: controller planned {} sessions for this shard, agent computed {planned}", a.planned_sessions),
                            })
                        } else {
                            let setup_values = spec.setup_values.clone();
                            state.pending = Some(PendingRun {
                                spec: Arc::new(spec),
                                restart_grace: cfg
                                    .restart_grace
                                    .min(Duration::from_millis(a.restart_grace_ms)),
                            });
                            state.retained.clear();
                            Out::Ready(v1::Ready {
                                run_id,
                                planned_sessions: planned,
                                setup_values,
                            })
                        }
                    }
                    Err(e) => Out::Failed(v1::AgentFailed {
                        run_id,
                        reason: e.to_string(),
                    }),
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
            if let Some(ctx) = &pending.spec.context {
                if !s.setup_values.is_empty() && !ctx.set_setup(s.setup_values) {
                    tracing::warn!(run = %s.run_id, "the Start's setup values do not fit the scenario; ignored");
                }
            }
            let grace = u64::try_from(pending.spec.graceful_stop.as_millis()).unwrap_or(u64::MAX);
            state
                .graceful_stop_ms
                .store(grace, std::sync::atomic::Ordering::Relaxed);
            let stop = CancellationToken::new();
            let reason = Arc::new(Mutex::new(None));
            let lease_deadline = Arc::new(Mutex::new(t0.max(Instant::now()) + state.lease));
            state.setup_sent = None;
            state.active = Some(ActiveRun {
                run_id: s.run_id.clone(),
                stop: stop.clone(),
                reason: reason.clone(),
                lease_deadline: lease_deadline.clone(),
                lease: state.lease,
                restart_grace: pending.restart_grace,
                riding_out: false,
                context: pending.spec.context.clone(),
                setup_generation: 0,
                refresh: pending.spec.refresh.clone(),
                refreshing: false,
                service: pending.spec.service.clone(),
            });
            tokio::spawn(watchdog(
                lease_deadline,
                stop.clone(),
                reason,
                state.lease,
                s.run_id.clone(),
            ));
            if pending.spec.runs_setup {
                let from = crate::setup::RefreshFrom {
                    generation: 0,
                    at_once: false,
                };
                start_refresh(state, from);
            }
            let (spec, out) = (pending.spec, state.run_tx.clone());
            state
                .load
                .spawn(async move { runner::execute(spec, t0, out, stop).await });
        }
        In::Lease(l) => {
            if let Some(a) = &mut state.active {
                let lease = if l.lease_ms > 0 {
                    Duration::from_millis(l.lease_ms).min(MAX_LEASE)
                } else {
                    a.lease
                };
                let mut d = a.lease_deadline.lock().unwrap_or_else(|p| p.into_inner());
                if std::mem::take(&mut a.riding_out) {
                    // The controller is back: the dead-man switch is the lease alone again.
                    *d = Instant::now() + lease;
                } else {
                    *d = (*d).max(Instant::now() + lease);
                }
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
        In::SetupValues(v) => {
            let Some(a) = state.active.as_mut().filter(|a| a.run_id == v.run_id) else {
                return;
            };
            if v.generation > a.setup_generation {
                if let Some(ctx) = &a.context {
                    if ctx.set_setup(v.values) {
                        a.setup_generation = v.generation;
                    } else {
                        tracing::warn!(run = %v.run_id, "refreshed setup values do not fit the scenario; ignored");
                    }
                }
            }
        }
        In::ServiceEndpoints(e) => {
            let service = match (&state.active, &state.pending) {
                (Some(a), _) if a.run_id == e.run_id => a.service.clone(),
                (_, Some(p)) if p.spec.run_id == e.run_id => p.spec.service.clone(),
                _ => None,
            };
            let Some(service) = service else { return };
            match stampede_proto::service::from_wire("service_endpoints.endpoints", &e.endpoints) {
                Ok(set) => {
                    let addrs: Vec<_> = set.iter().map(|s| s.address).collect();
                    let n = service.replace(&addrs);
                    tracing::info!(run = %e.run_id, endpoints = ?addrs, current = n, "the Service's endpoints changed");
                }
                Err(why) => {
                    tracing::warn!(run = %e.run_id, %why, "a set of Service endpoints refused; keeping the last one");
                }
            }
        }
        In::TakeOverSetup(t) => {
            if state.active.as_ref().is_some_and(|a| a.run_id == t.run_id) {
                tracing::warn!(run = %t.run_id, "the agent that ran the setup was lost; this agent refreshes it now");
                let from = crate::setup::RefreshFrom {
                    generation: t.generation,
                    at_once: true,
                };
                start_refresh(state, from);
            }
        }
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

/// Starts the active run's setup refresh, once (a repeated
/// `TakeOverSetup` changes nothing); it ends with the run.
fn start_refresh(state: &mut AgentState, from: crate::setup::RefreshFrom) {
    let Some(a) = state.active.as_mut().filter(|a| !a.refreshing) else {
        return;
    };
    let (Some(r), Some(ctx)) = (&a.refresh, &a.context) else {
        return;
    };
    a.refreshing = true;
    // Values it refreshes follow the generation it starts from.
    a.setup_generation = a.setup_generation.max(from.generation);
    tokio::spawn(crate::setup::refresh(
        r.clone(),
        ctx.clone(),
        a.run_id.clone(),
        state.run_tx.clone(),
        a.stop.clone(),
        from,
    ));
}

/// `cfg` with the controller's `own` addresses refused as targets, on every address that
/// reaches each of them from here.
fn guarded<'a>(
    cfg: &'a AgentConfig,
    own: &[std::net::SocketAddr],
) -> std::borrow::Cow<'a, AgentConfig> {
    if own.is_empty() {
        return std::borrow::Cow::Borrowed(cfg);
    }
    let mut c = cfg.clone();
    for a in own {
        c.target_policy
            .deny_local_server(*a, "the controller's own address");
    }
    std::borrow::Cow::Owned(c)
}

/// Whether `ack` (a whole run) covers the retained message `m`.
fn acknowledged(m: &v1::AgentMessage, ack: &v1::Ack) -> bool {
    match &m.msg {
        Some(Out::Progress(p)) => p.run_id == ack.run_id,
        Some(Out::Done(d)) => d.run_id == ack.run_id,
        _ => false,
    }
}

/// The dead-man switch: stops the run when its lease (and, after its stream closed, its
/// restart grace) lapses.
async fn watchdog(
    deadline: Arc<Mutex<Instant>>,
    stop: CancellationToken,
    reason: Arc<Mutex<Option<String>>>,
    lease: Duration,
    run_id: String,
) {
    loop {
        // A deadline can move closer (a renewal ends a restart grace): it is looked at again
        // every quarter lease at least.
        let d = *deadline.lock().unwrap_or_else(|p| p.into_inner());
        let wake = d.min(Instant::now() + lease / 4);
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = stop.cancelled() => return,
        }
        let current = *deadline.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if now >= current {
            let why = lapse_reason(lease, now.saturating_duration_since(wake));
            tracing::warn!(run = %run_id, "{why}; stopping load");
            stop_run(&stop, &reason, why);
            return;
        }
    }
}

/// Why a lease lapsed. The watchdog looks at least every quarter lease, so a wake-up more
/// than half a lease late means this agent itself was stalled (stopped, or starved of CPU)
/// while renewals may well have been on their way: the report must not blame the controller.
fn lapse_reason(lease: Duration, woke_late_by: Duration) -> String {
    if woke_late_by > lease / 2 {
        format!(
            "its lease lapsed while this agent was stalled for {} ms (stopped or starved of CPU)",
            woke_late_by.as_millis()
        )
    } else {
        format!(
            "its lease lapsed (no renewal from the controller for {} ms)",
            lease.as_millis()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lapse_while_the_agent_was_stalled_does_not_blame_the_controller() {
        let lease = Duration::from_millis(1000);
        let late = lapse_reason(lease, Duration::from_millis(4000));
        assert!(late.contains("stalled for 4000 ms"), "{late}");
        assert!(!late.contains("controller"), "{late}");
        let gone = lapse_reason(lease, Duration::from_millis(3));
        assert!(
            gone.contains("no renewal from the controller for 1000 ms"),
            "{gone}"
        );
    }

    /// What the controller lists as its own is refused, on every address that reaches it.
    #[test]
    fn the_controllers_own_addresses_are_refused_as_targets() {
        let cfg = AgentConfig::new("http://stampede-controller:7070", "a");
        let pod: std::net::SocketAddr = "198.18.0.9:7070".parse().unwrap();
        let any: std::net::SocketAddr = "0.0.0.0:9090".parse().unwrap();
        assert!(cfg.target_policy.check(pod).is_ok());
        let g = guarded(&cfg, &[pod, any]);
        for a in ["198.18.0.9:7070", "127.0.0.2:9090", "[::1]:9090"] {
            let e = g.target_policy.check(a.parse().unwrap()).unwrap_err();
            assert!(
                e.to_string().contains("controller's own address"),
                "{a}: {e}"
            );
        }
        assert!(g
            .target_policy
            .check("198.18.0.9:8080".parse().unwrap())
            .is_ok());
        assert!(matches!(guarded(&cfg, &[]), std::borrow::Cow::Borrowed(_)));
    }

    /// A run held by the agent, its lease running from now, watched by the dead-man switch.
    fn active(lease: Duration, restart_grace: Duration) -> ActiveRun {
        let stop = CancellationToken::new();
        let reason = Arc::new(Mutex::new(None));
        let lease_deadline = Arc::new(Mutex::new(Instant::now() + lease));
        tokio::spawn(watchdog(
            lease_deadline.clone(),
            stop.clone(),
            reason.clone(),
            lease,
            "run-1".into(),
        ));
        ActiveRun {
            run_id: "run-1".into(),
            stop,
            reason,
            lease_deadline,
            lease,
            restart_grace,
            riding_out: false,
            context: None,
            setup_generation: 0,
            refresh: None,
            refreshing: false,
            service: None,
        }
    }

    async fn advance(d: Duration) {
        tokio::time::sleep(d).await;
        tokio::task::yield_now().await;
    }

    /// With no renewal and an open stream, the load stops when the lease lapses, not later.
    #[tokio::test(start_paused = true)]
    async fn a_lapsed_lease_stops_the_load() {
        let a = active(Duration::from_secs(1), Duration::from_secs(15));
        advance(Duration::from_millis(999)).await;
        assert!(!a.stop.is_cancelled());
        advance(Duration::from_millis(2)).await;
        assert!(a.stop.is_cancelled());
        let why = a.reason.lock().unwrap().clone().unwrap();
        assert!(why.contains("lease lapsed"), "{why}");
    }

    /// A closed stream extends the lease by the restart grace once per outage: the load goes
    /// on until lease + grace after the last renewal, and stops then if nothing came back.
    #[tokio::test(start_paused = true)]
    async fn a_closed_stream_rides_out_the_grace_and_then_stops() {
        let mut a = active(Duration::from_secs(1), Duration::from_secs(15));
        advance(Duration::from_millis(500)).await;
        ride_out(&mut a);
        ride_out(&mut a); // a second failed attempt adds nothing
        advance(Duration::from_millis(15_499)).await;
        assert!(!a.stop.is_cancelled(), "stopped within lease + grace");
        advance(Duration::from_millis(2)).await;
        assert!(a.stop.is_cancelled(), "still loading past lease + grace");
    }

    /// A renewal after an outage brings the dead-man switch back to the lease alone.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_after_an_outage_restores_the_lease() {
        let lease = Duration::from_secs(1);
        let mut a = active(lease, Duration::from_secs(15));
        ride_out(&mut a);
        advance(Duration::from_secs(3)).await;
        assert!(!a.stop.is_cancelled());
        // What `handle` does with a Lease message.
        assert!(std::mem::take(&mut a.riding_out));
        *a.lease_deadline.lock().unwrap() = Instant::now() + lease;
        advance(Duration::from_millis(1001)).await;
        assert!(a.stop.is_cancelled(), "the grace outlived the outage");
    }

    /// A run with no restart grace (a controller that does not re-adopt runs) stops at its
    /// lease though its stream closed.
    #[tokio::test(start_paused = true)]
    async fn no_restart_grace_stops_at_the_lease() {
        let mut a = active(Duration::from_secs(1), Duration::ZERO);
        ride_out(&mut a);
        advance(Duration::from_millis(1001)).await;
        assert!(a.stop.is_cancelled());
    }

    /// Backoff doubles up to its bound, and to a second while a run's load goes on.
    #[test]
    fn backoff_doubles_up_to_its_bound() {
        let max = Duration::from_secs(5);
        let mut b = Duration::from_millis(100);
        let mut idle = Vec::new();
        for _ in 0..8 {
            b = next_backoff(b, max, false);
            idle.push(b.as_millis());
        }
        assert_eq!(idle, [200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        let mut b = Duration::from_millis(100);
        let mut running = Vec::new();
        for _ in 0..5 {
            b = next_backoff(b, max, true);
            running.push(b.as_millis());
        }
        assert_eq!(running, [200, 400, 800, 1000, 1000]);
        assert_eq!(
            next_backoff(Duration::from_millis(100), Duration::from_millis(300), true),
            Duration::from_millis(200)
        );
    }
}
