//! One run's life: wait for agents, assign shards, wait for ready, synchronized start, merge
//! progress live, apply the agent-loss policy, then build, persist and publish the report.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use stampede_core::plan::Plan;
use stampede_core::report::{ReportMeta, RunAccumulator, RunOutcome, ThresholdAbort};
use stampede_core::scenario::{AgentLossPolicy, Scenario};
use stampede_proto::convert::progress_from_wire;
use stampede_proto::v1::{self, controller_message::Msg as Out};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::renew::Renewals;
use crate::{lock, unix_ms, unix_ns, Inner};

/// The latest a run's deadline can be: far beyond any run, and safe to add to an `Instant`.
const FAR_FUTURE: Duration = Duration::from_secs(10 * 366 * 86_400);

/// The source address an agent connects from, for the port budget: agents with the same one
/// share one ephemeral port range. An agent with several `--source-ips` brings its own
/// addresses and is counted on its own; otherwise its pod IP, or the address the controller
/// sees it connect from.
fn source_host(info: &v1::AgentInfo) -> String {
    if info.source_addresses > 1 {
        return String::new();
    }
    if !info.pod_ip.is_empty() {
        return info.pod_ip.clone();
    }
    info.peer
        .parse::<std::net::SocketAddr>()
        .map(|a| a.ip().to_string())
        .unwrap_or_default()
}

/// Drops finished runs whose report is stored from memory, beyond the newest
/// `finished_in_memory` (watch and report requests then read the store). Holders of a handle
/// (a watching CLI, a LoadTest follower) keep theirs.
fn evict_finished(inner: &Inner) {
    let mut runs = lock(&inner.runs);
    let mut finished: Vec<(u64, String)> = runs
        .values()
        .filter(|h| {
            is_terminal(&h.state().0) && h.persisted.load(std::sync::atomic::Ordering::Acquire)
        })
        .map(|h| (h.submitted_at_unix_ms, h.run_id.clone()))
        .collect();
    let keep = inner.cfg.finished_in_memory;
    if finished.len() <= keep {
        return;
    }
    finished.sort();
    for (_, id) in &finished[..finished.len() - keep] {
        runs.remove(id);
    }
}

/// The states a run ends in: its report, if any, is then available.
pub const TERMINAL_STATES: &[&str] = &["done", "failed", "aborted", "incomplete"];

/// Whether a run in `state` has ended.
pub fn is_terminal(state: &str) -> bool {
    TERMINAL_STATES.contains(&state)
}

/// Messages from agent sessions to a run driver.
#[derive(Debug)]
pub enum RunInput {
    Ready {
        agent_id: String,
        planned: u64,
    },
    Progress {
        agent_id: String,
        progress: v1::Progress,
    },
    Done {
        agent_id: String,
        done: v1::Done,
    },
    Failed {
        agent_id: String,
        reason: String,
    },
    Disconnected {
        agent_id: String,
    },
}

/// A run as the services see it.
pub struct RunHandle {
    pub run_id: String,
    pub scenario_name: String,
    pub agents_wanted: u32,
    pub submitted_at_unix_ms: u64,
    state: Mutex<(String, String)>,
    pub events: broadcast::Sender<v1::RunEvent>,
    report_json: OnceLock<String>,
    /// The report is in the store: the handle may then be evicted from memory.
    persisted: std::sync::atomic::AtomicBool,
    pub abort: CancellationToken,
    abort_reason: Mutex<Option<String>>,
    inbox: mpsc::UnboundedSender<RunInput>,
}

impl RunHandle {
    pub fn send(&self, input: RunInput) {
        let _ = self.inbox.send(input);
    }

    pub fn state(&self) -> (String, String) {
        lock(&self.state).clone()
    }

    pub fn report_json(&self) -> Option<&String> {
        self.report_json.get()
    }

    /// Waits until the run is done, failed or aborted (its report, if any, is then available).
    pub async fn finished(&self) {
        let mut rx = self.events.subscribe();
        loop {
            if is_terminal(&self.state().0) {
                return;
            }
            if let Err(broadcast::error::RecvError::Closed) = rx.recv().await {
                return;
            }
        }
    }

    pub fn request_abort(&self, reason: String) {
        lock(&self.abort_reason).get_or_insert(reason);
        self.abort.cancel();
    }

    fn set_state(&self, state: &str, message: impl Into<String>) {
        let message = message.into();
        *lock(&self.state) = (state.to_string(), message.clone());
        tracing::info!(run = %self.run_id, state, message = %message, "run state");
        let _ = self.events.send(v1::RunEvent {
            event: Some(v1::run_event::Event::State(v1::RunState {
                run_id: self.run_id.clone(),
                state: state.to_string(),
                message,
            })),
        });
    }

    pub fn summary(&self) -> v1::RunSummary {
        let (state, message) = self.state();
        v1::RunSummary {
            run_id: self.run_id.clone(),
            scenario: self.scenario_name.clone(),
            state,
            submitted_at_unix_ms: self.submitted_at_unix_ms,
            message,
            agents: self.agents_wanted,
        }
    }
}

/// Creates the run and starts its driver.
pub(crate) fn start(
    inner: Arc<Inner>,
    scenario: Scenario,
    agents: u32,
    agent_wait: Duration,
) -> Arc<RunHandle> {
    let run_id = format!("run-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let (inbox, rx) = mpsc::unbounded_channel();
    let (events, _) = broadcast::channel(1024);
    let handle = Arc::new(RunHandle {
        run_id: run_id.clone(),
        scenario_name: scenario.name.clone(),
        agents_wanted: agents,
        submitted_at_unix_ms: unix_ms(),
        state: Mutex::new(("pending".into(), String::new())),
        events,
        report_json: OnceLock::new(),
        persisted: std::sync::atomic::AtomicBool::new(false),
        abort: CancellationToken::new(),
        abort_reason: Mutex::new(None),
        inbox,
    });
    if let Err(e) = inner
        .store
        .mark_in_flight(&run_id, &scenario.name, handle.submitted_at_unix_ms)
    {
        tracing::warn!(run = %run_id, error = %e, "cannot mark the run in flight: a controller restart would forget it");
    }
    lock(&inner.runs).insert(run_id, handle.clone());
    let driver = Driver {
        inner,
        h: handle.clone(),
        scenario,
        n: agents,
        rx,
        agent_wait,
        threshold_abort: None,
    };
    spawn_supervised(driver.inner.clone(), handle.clone(), driver.drive());
    handle
}

/// Runs a run's driver, and if it panics (a bug: valid input must never do it) ends the run
/// as `failed` instead of leaving it `running` forever: its agents are told to stop and freed
/// for the next run, a failed report is stored and sent to watchers, so `stampede run` ends.
fn spawn_supervised(
    inner: Arc<Inner>,
    h: Arc<RunHandle>,
    driver: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let task = tokio::spawn(driver);
    tokio::spawn(async move {
        let Err(e) = task.await else { return };
        let why = if e.is_panic() {
            let p = e.into_panic();
            let text = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            format!(
                "internal error: the run's driver panicked ({text}); the data of this run is lost"
            )
        } else {
            "internal error: the run's driver was cancelled".to_string()
        };
        tracing::error!(run = %h.run_id, "{why}");
        end_orphaned_run(&inner, &h, &why);
    });
}

/// Frees the agents held by `run_id` for other runs, first telling them to stop it when
/// `abort` gives a reason.
fn release_agents(inner: &Inner, run_id: &str, abort: Option<&str>) {
    {
        let mut agents = lock(&inner.agents);
        for a in agents
            .values_mut()
            .filter(|a| a.run.as_deref() == Some(run_id))
        {
            if let Some(reason) = abort {
                let _ = a.tx.try_send(Ok(v1::ControllerMessage {
                    msg: Some(Out::Abort(v1::Abort {
                        run_id: run_id.to_string(),
                        reason: reason.to_string(),
                    })),
                }));
            }
            a.free();
        }
    }
    inner.agents_changed.notify_waiters();
}

/// Ends a run whose driver is gone: stops and frees its agents, stores a failed report.
fn end_orphaned_run(inner: &Inner, h: &RunHandle, why: &str) {
    release_agents(inner, &h.run_id, Some(why));
    if is_terminal(&h.state().0) {
        return;
    }
    let report = stampede_core::report::Report::lost(
        &h.run_id,
        &h.scenario_name,
        h.submitted_at_unix_ms,
        why,
    );
    let json = match inner.store.save(&report) {
        Ok(json) => {
            h.persisted
                .store(true, std::sync::atomic::Ordering::Release);
            json
        }
        Err(_) => serde_json::to_string_pretty(&report).unwrap_or_default(),
    };
    inner.store.clear_in_flight(&h.run_id);
    let _ = h.report_json.set(json.clone());
    h.set_state("failed", why);
    let _ = h.events.send(v1::RunEvent {
        event: Some(v1::run_event::Event::ReportJson(json)),
    });
}

struct Driver {
    inner: Arc<Inner>,
    h: Arc<RunHandle>,
    scenario: Scenario,
    n: u32,
    rx: mpsc::UnboundedReceiver<RunInput>,
    agent_wait: Duration,
    /// The live threshold breach that stopped the run (`abort_on_fail`).
    threshold_abort: Option<ThresholdAbort>,
}

/// An agent taking part in the run.
struct Member {
    agent_id: String,
    conn_id: u64,
    tx: mpsc::Sender<Result<v1::ControllerMessage, tonic::Status>>,
    offset_ns: i64,
    rtt_ns: i64,
    ready: bool,
    done: bool,
    lost: bool,
    /// Why it was lost (for the report's message).
    lost_why: String,
    received: Received,
}

/// The intervals received from one agent, for de-duplicating replays. Intervals arrive in
/// order, so this is "everything below `next`" plus the few that came early: a long run
/// costs a word per agent, not a set entry per interval.
#[derive(Debug, Default)]
struct Received {
    next: u64,
    ahead: BTreeSet<u64>,
}

impl Received {
    /// Records `interval`; false if it was already there.
    fn insert(&mut self, interval: u64) -> bool {
        // The common case, the next interval in order: no set node allocated and freed.
        if interval == self.next && self.ahead.is_empty() && interval < u64::MAX - 1 {
            self.next += 1;
            return true;
        }
        if interval < self.next || !self.ahead.insert(interval) {
            return false;
        }
        while self.ahead.remove(&self.next) {
            self.next = self.next.saturating_add(1);
            if self.next == u64::MAX {
                break;
            }
        }
        true
    }
}

enum Failure {
    Failed(String),
    Aborted(String),
}

impl Driver {
    async fn drive(mut self) {
        let members = match self.prepare().await {
            Ok(m) => m,
            Err(f) => {
                let (outcome, message) = match f {
                    Failure::Failed(m) => (RunOutcome::Failed, m),
                    Failure::Aborted(m) => (RunOutcome::Aborted, m),
                };
                self.release();
                // Nothing ran: persist a report with the outcome so it can be fetched later.
                match Plan::new(
                    &self.scenario,
                    self.n.max(1),
                    &[],
                    self.scenario.seed.unwrap_or(0),
                ) {
                    Ok(plan) => {
                        let acc = RunAccumulator::new(
                            &self.scenario,
                            plan,
                            Vec::new(),
                            self.inner.cfg.interval.as_secs_f64(),
                        );
                        self.finish(acc, outcome, Some(message), unix_ms(), 0.0);
                    }
                    Err(e) => self.h.set_state("failed", format!("{message}; plan: {e}")),
                }
                return;
            }
        };
        self.run(members).await;
    }

    /// Waits for agents, assigns shards and collects Ready.
    async fn prepare(&mut self) -> Result<(Vec<Member>, Plan), Failure> {
        let n = self.n as usize;
        let deadline = Instant::now() + self.agent_wait;
        let picked: Vec<(u64, String)> = loop {
            let notified = self.inner.agents_changed.notified();
            {
                let mut agents = lock(&self.inner.agents);
                let mut idle: Vec<(String, u64)> = agents
                    .values()
                    .filter(|a| a.run.is_none())
                    .map(|a| (a.info.agent_id.clone(), a.conn_id))
                    .collect();
                if idle.len() >= n {
                    idle.sort();
                    idle.truncate(n);
                    for (_, conn) in &idle {
                        if let Some(a) = agents.get_mut(conn) {
                            a.run = Some(self.h.run_id.clone());
                            a.info.state = "busy".into();
                            a.info.run_id = self.h.run_id.clone();
                        }
                    }
                    break idle.into_iter().map(|(id, c)| (c, id)).collect();
                }
                let connected = agents.len();
                drop(agents);
                self.h.set_state(
                    "pending",
                    format!("waiting for {n} idle agents ({connected} connected)"),
                );
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(deadline) => {
                    let connected = lock(&self.inner.agents).values().filter(|a| a.run.is_none()).count();
                    return Err(Failure::Failed(format!(
                        "the run needs {n} agents but only {connected} idle agents were connected after {:.0} s",
                        self.agent_wait.as_secs_f64()
                    )));
                }
                _ = self.h.abort.cancelled() => return Err(Failure::Aborted(self.abort_reason())),
                _ = self.inner.shutdown.cancelled() => return Err(Failure::Aborted("controller shut down".into())),
            }
        };
        self.h
            .set_state("assigning", format!("assigning {n} shards"));
        let seed = self.scenario.seed.unwrap_or_else(rand::random);
        let plan = Plan::new(&self.scenario, self.n, &[], seed)
            .map_err(|e| Failure::Failed(format!("plan: {e}")))?;
        self.check_ports(&picked, seed)?;
        // With the run's seed: the rows must last (on_exhausted: fail) before any load.
        self.scenario
            .check_data_supply(seed)
            .map_err(|e| Failure::Failed(e.to_string()))?;
        let shares =
            crate::data::Shares::new(&self.scenario, self.n, seed).map_err(Failure::Failed)?;
        // Agents get the scenario without the data rows, and their own rows apart.
        let scenario_text = serde_json::to_string(&self.scenario.agent_form())
            .map_err(|e| Failure::Failed(format!("scenario: {e}")))?;
        // The form agents receive can be longer than the text submitted (JSON escapes).
        if scenario_text.len() > stampede_core::scenario::MAX_SCENARIO_BYTES {
            return Err(Failure::Failed(format!(
                "the scenario is {} bytes as sent to agents; at most {} MiB",
                scenario_text.len(),
                stampede_core::scenario::MAX_SCENARIO_BYTES >> 20
            )));
        }
        let mut members = Vec::with_capacity(n);
        {
            let agents = lock(&self.inner.agents);
            for (conn_id, agent_id) in &picked {
                let Some(a) = agents.get(conn_id) else {
                    return Err(Failure::Failed(format!(
                        "agent {agent_id} disconnected during assignment"
                    )));
                };
                members.push(Member {
                    agent_id: agent_id.clone(),
                    conn_id: *conn_id,
                    tx: a.tx.clone(),
                    offset_ns: a.clock.offset_ns,
                    rtt_ns: a.clock.rtt_ns.unwrap_or(0),
                    ready: false,
                    done: false,
                    lost: false,
                    lost_why: String::new(),
                    received: Received::default(),
                });
            }
        }
        for (i, m) in members.iter().enumerate() {
            let data = shares.send(&self.h.run_id, i as u32, &m.tx).await;
            let assign = v1::Assign {
                run_id: self.h.run_id.clone(),
                scenario: scenario_text.clone(),
                shard_index: i as u32,
                shard_count: self.n,
                weights: Vec::new(),
                seed,
                interval_ms: self.inner.cfg.interval.as_millis() as u64,
                planned_sessions: plan.agent_sessions(i),
                data,
            };
            let _ =
                m.tx.send(Ok(v1::ControllerMessage {
                    msg: Some(Out::Assign(assign)),
                }))
                .await;
        }
        let deadline = Instant::now() + self.inner.cfg.ready_timeout;
        while members.iter().any(|m| !m.ready) {
            let input = tokio::select! {
                i = self.rx.recv() => i,
                _ = tokio::time::sleep_until(deadline) => {
                    let slow: Vec<&str> = members.iter().filter(|m| !m.ready).map(|m| m.agent_id.as_str()).collect();
                    return Err(Failure::Failed(format!("agents did not acknowledge their shard in time: {}", slow.join(", "))));
                }
                _ = self.h.abort.cancelled() => return Err(Failure::Aborted(self.abort_reason())),
                _ = self.inner.shutdown.cancelled() => return Err(Failure::Aborted("controller shut down".into())),
            };
            match input {
                Some(RunInput::Ready { agent_id, .. }) => {
                    if let Some(m) = members.iter_mut().find(|m| m.agent_id == agent_id) {
                        m.ready = true;
                    }
                }
                Some(RunInput::Failed { agent_id, reason }) => {
                    self.abort_members(&members, "another agent failed").await;
                    return Err(Failure::Failed(format!(
                        "agent {agent_id} refused its shard: {reason}"
                    )));
                }
                Some(RunInput::Disconnected { agent_id }) => {
                    self.abort_members(&members, "another agent was lost").await;
                    return Err(Failure::Failed(format!(
                        "agent {agent_id} was lost before the start"
                    )));
                }
                Some(_) | None => {}
            }
        }
        self.h.set_state(
            "ready",
            format!("{} agents acknowledged their shards", members.len()),
        );
        // Refresh clock estimates (pings went on while we waited).
        {
            let agents = lock(&self.inner.agents);
            for m in &mut members {
                if let Some(a) = agents.get(&m.conn_id) {
                    m.offset_ns = a.clock.offset_ns;
                    m.rtt_ns = a.clock.rtt_ns.unwrap_or(0);
                }
            }
        }
        Ok((members, plan))
    }

    /// The port budget (design.md §3.7): refuses, before anything is assigned, a run whose
    /// peak connections per agent do not fit the agents' ephemeral ports × source addresses.
    fn check_ports(&self, picked: &[(u64, String)], seed: u64) -> Result<(), Failure> {
        use stampede_core::ports::{self, AgentPorts};
        let (budgets, capacities): (Vec<AgentPorts>, Vec<u32>) = {
            let agents = lock(&self.inner.agents);
            picked
                .iter()
                .map(|(conn, id)| {
                    let info = agents.get(conn).map(|a| &a.info);
                    let range = info.and_then(|i| i.ephemeral_ports);
                    let ports = range
                        .filter(|r| r.high >= r.low && r.low > 0)
                        .map_or(0, |r| r.high - r.low + 1);
                    (
                        AgentPorts {
                            id: id.clone(),
                            ephemeral_ports: ports,
                            source_addresses: info.map_or(1, |i| i.source_addresses.max(1)),
                            host: info.map_or_else(String::new, source_host),
                        },
                        info.map_or(u32::MAX, |i| {
                            if i.capacity == 0 {
                                u32::MAX
                            } else {
                                i.capacity
                            }
                        }),
                    )
                })
                .unzip()
        };
        let demands = ports::demand(&self.scenario, self.n, seed, &capacities)
            .map_err(|e| Failure::Failed(format!("plan: {e}")))?;
        ports::check(&demands, &budgets).map_err(|e| Failure::Failed(e.to_string()))
    }

    fn abort_reason(&self) -> String {
        lock(&self.h.abort_reason)
            .clone()
            .unwrap_or_else(|| "aborted".into())
    }

    async fn abort_members(&self, members: &[Member], reason: &str) {
        for m in members.iter().filter(|m| !m.lost && !m.done) {
            let abort = v1::Abort {
                run_id: self.h.run_id.clone(),
                reason: reason.to_string(),
            };
            let _ =
                m.tx.send(Ok(v1::ControllerMessage {
                    msg: Some(Out::Abort(abort)),
                }))
                .await;
        }
    }

    /// Upper bound of one session's length: every request timing out, every think at max.
    fn session_bound(&self) -> Duration {
        stampede_core::ports::worst_case_session(&self.scenario)
    }

    async fn run(mut self, (mut members, plan): (Vec<Member>, Plan)) {
        let ids = members.iter().map(|m| m.agent_id.clone()).collect();
        let mut acc = RunAccumulator::new(
            &self.scenario,
            plan,
            ids,
            self.inner.cfg.interval.as_secs_f64(),
        );
        let max_rtt = members.iter().map(|m| m.rtt_ns).max().unwrap_or(0);
        let delay = self
            .inner
            .cfg
            .start_delay
            .max(Duration::from_nanos((max_rtt.max(0) as u64) * 4));
        let t0_unix_ns = unix_ns() + delay.as_nanos() as i64;
        let t0 = Instant::now() + delay;
        let started_at = (t0_unix_ns / 1_000_000).max(0) as u64;
        for (i, m) in members.iter().enumerate() {
            acc.set_clock_offset(i, m.offset_ns / 1000);
            let start = v1::Start {
                run_id: self.h.run_id.clone(),
                t0_unix_ns,
                clock_offset_ns: m.offset_ns,
            };
            let _ =
                m.tx.send(Ok(v1::ControllerMessage {
                    msg: Some(Out::Start(start)),
                }))
                .await;
        }
        let skew_us = members
            .iter()
            .map(|m| m.offset_ns.abs() / 1000)
            .max()
            .unwrap_or(0);
        self.h.set_state(
            "running",
            format!(
                "{} agents, T0 in {} ms, max clock offset {skew_us} µs",
                members.len(),
                delay.as_millis()
            ),
        );

        // Renewals go out from their own task: a slow merge here cannot delay them.
        let renewals = Renewals::start(
            members.iter().map(|m| m.tx.clone()).collect(),
            self.inner.cfg.lease,
        );
        let index: HashMap<String, usize> = members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.agent_id.clone(), i))
            .collect();
        let n_phases = acc.phase_count();
        let max_interval = acc.max_interval();
        let mut snap =
            tokio::time::interval_at(t0 + self.inner.cfg.interval, self.inner.cfg.interval);
        let planned = self.scenario.duration();
        // Saturating: a valid scenario's worst-case session can exceed what `Instant` holds.
        let deadline = planned
            .saturating_add(self.session_bound())
            .saturating_add(Duration::from_secs(15))
            .min(FAR_FUTURE);
        let mut deadline = t0 + deadline;
        let mut failure: Option<Failure> = None;
        let n_steps = self.scenario.step_names().len();
        let policy = self.scenario.on_agent_loss;
        let live_thresholds = if self.scenario.abort_on_fail {
            self.scenario.parsed_thresholds().unwrap_or_default()
        } else {
            Vec::new()
        };

        while members.iter().any(|m| !m.done && !m.lost) {
            if failure.is_some() {
                renewals.stop();
            }
            tokio::select! {
                _ = snap.tick() => {
                    let elapsed = Instant::now().saturating_duration_since(t0).as_secs_f64();
                    if let Ok(s) = acc.snapshot(elapsed) {
                        let mut w = v1::LiveSnapshot::from(&s);
                        w.planned_duration_s = planned.as_secs_f64();
                        let _ = self.h.events.send(v1::RunEvent { event: Some(v1::run_event::Event::Snapshot(w)) });
                    }
                    if failure.is_none() && !live_thresholds.is_empty() {
                        if let Some(msg) = self.check_live(&acc, &live_thresholds, elapsed) {
                            self.abort_members(&members, &msg).await;
                            failure = Some(Failure::Aborted(msg));
                            deadline = deadline.min(Instant::now() + Duration::from_secs(5));
                        }
                    }
                }
                input = self.rx.recv() => {
                    let Some(input) = input else { break };
                    match input {
                        RunInput::Progress { agent_id, progress } => {
                            let Some(&i) = index.get(&agent_id) else { continue };
                            if members[i].received.insert(progress.interval) {
                                self.merge(&mut acc, i, &agent_id, &progress, n_steps, n_phases, max_interval);
                            }
                            renewals.ack(i, members[i].received.next);
                        }
                        RunInput::Done { agent_id, done } => {
                            if done.stopped_early && failure.is_none() {
                                // Its data is complete, but it did not deliver its share: the
                                // loss policy decides, and the run cannot be `succeeded`.
                                let why: String = if done.reason.is_empty() { "stopped early".into() } else { done.reason.chars().take(200).collect() };
                                self.agent_lost(&mut members, &mut acc, &agent_id, &format!("stopped early: {why}"), policy, &mut failure, &mut deadline).await;
                            }
                            if let Some(&i) = index.get(&agent_id) {
                                let m = &mut members[i];
                                m.done = true;
                                renewals.retire(i);
                                tracing::info!(run = %self.h.run_id, agent = %agent_id, last = done.last_interval, early = done.stopped_early, "agent done");
                            }
                            if members.iter().all(|m| m.done || m.lost) {
                                break;
                            }
                            if failure.is_none() && members.iter().filter(|m| m.done).count() == 1 {
                                self.h.set_state("finishing", "waiting for the remaining agents");
                            }
                        }
                        RunInput::Failed { agent_id, reason } => {
                            if let Some(&i) = index.get(&agent_id) { renewals.retire(i) }
                            self.agent_lost(&mut members, &mut acc, &agent_id, &format!("agent failed: {reason}"), policy, &mut failure, &mut deadline).await;
                        }
                        RunInput::Disconnected { agent_id } => {
                            if let Some(&i) = index.get(&agent_id) { renewals.retire(i) }
                            self.agent_lost(&mut members, &mut acc, &agent_id, "connection closed", policy, &mut failure, &mut deadline).await;
                        }
                        RunInput::Ready { .. } => {}
                    }
                }
                _ = self.h.abort.cancelled(), if failure.is_none() => {
                    let reason = self.abort_reason();
                    self.abort_members(&members, &reason).await;
                    failure = Some(Failure::Aborted(reason));
                    deadline = deadline.min(Instant::now() + Duration::from_secs(5));
                }
                _ = self.inner.shutdown.cancelled(), if !matches!(failure, Some(Failure::Aborted(_))) => {
                    failure = Some(Failure::Aborted("controller shut down".into()));
                    break;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    renewals.stop();
                    for (i, m) in members.iter_mut().enumerate().filter(|(_, m)| !m.done && !m.lost) {
                        tracing::warn!(agent = %m.agent_id, "agent did not finish in time; counting it lost");
                        m.lost = true;
                        m.lost_why = "did not finish in time".into();
                        acc.mark_lost(i);
                    }
                    if failure.is_none() && matches!(policy, AgentLossPolicy::Fail) {
                        failure = Some(Failure::Failed("agents did not finish in time".into()));
                    }
                    break;
                }
            }
        }
        drop(renewals);
        let duration_s = Instant::now().saturating_duration_since(t0).as_secs_f64();
        // Without a failure, lost agents (tolerated) or agents that stopped early still mean
        // the run delivered less than planned.
        let short: Vec<String> = members
            .iter()
            .filter(|m| m.lost)
            .map(|m| format!("agent {} was lost ({})", m.agent_id, m.lost_why))
            .collect();
        let (outcome, message) = match failure {
            None if !short.is_empty() => (RunOutcome::Incomplete, Some(short.join("; "))),
            None => (RunOutcome::Succeeded, None),
            Some(Failure::Failed(m)) => (RunOutcome::Failed, Some(m)),
            Some(Failure::Aborted(m)) => (RunOutcome::Aborted, Some(m)),
        };
        self.release();
        self.finish(acc, outcome, message, started_at, duration_s);
    }

    /// Validates, decodes (once) and merges one agent's Progress. A Progress that does not
    /// fit the run is refused whole and logged; nothing of it is counted.
    #[allow(clippy::too_many_arguments)]
    fn merge(
        &self,
        acc: &mut RunAccumulator,
        i: usize,
        agent_id: &str,
        progress: &v1::Progress,
        n_steps: usize,
        n_phases: usize,
        max_interval: u64,
    ) {
        let checked = progress_from_wire(progress, n_phases, n_steps, max_interval)
            .map_err(|e| e.to_string())
            .and_then(|samples| {
                samples
                    .iter()
                    .try_for_each(|(phase, s)| acc.check(i, progress.interval, *phase, s))
                    .map_err(|e| e.to_string())
                    .map(|()| samples)
            });
        let samples = match checked {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(run = %self.h.run_id, agent = %agent_id, error = %e, "rejected progress");
                return;
            }
        };
        self.inner.metrics.progress(
            &self.h.run_id,
            agent_id,
            progress.interval,
            progress.open_connections,
            &samples,
        );
        for (phase, s) in &samples {
            if let Err(e) = acc.add(i, progress.interval, *phase, s) {
                tracing::error!(run = %self.h.run_id, agent = %agent_id, error = %e, "rejected progress data");
            }
        }
        let _ = acc.reported_through(i, progress.interval);
    }

    /// `abort_on_fail`: evaluates the thresholds on the merged data so far; on a breach,
    /// records it and returns the abort message.
    fn check_live(
        &mut self,
        acc: &RunAccumulator,
        thresholds: &[stampede_core::threshold::Threshold],
        elapsed_s: f64,
    ) -> Option<String> {
        let live = acc
            .live_report(&self.scenario, elapsed_s)
            .map_err(|e| tracing::error!(error = %e, "live report failed"))
            .ok()?;
        let breach = stampede_core::threshold::live_breach(thresholds, &live, elapsed_s)?;
        let msg = format!(
            "threshold `{}` breached at {elapsed_s:.1}s (measured {}); aborted by abort_on_fail",
            breach.expr, breach.measured_text
        );
        tracing::warn!(run = %self.h.run_id, %msg, "live threshold breach");
        self.h.set_state("finishing", msg.clone());
        self.threshold_abort = Some(ThresholdAbort {
            expr: breach.expr,
            at_s: elapsed_s,
            measured: breach.measured,
            measured_text: breach.measured_text,
        });
        Some(msg)
    }

    /// Builds the report, persists it, and only then declares the run finished.
    fn finish(
        &self,
        acc: RunAccumulator,
        outcome: RunOutcome,
        message: Option<String>,
        started_at_unix_ms: u64,
        duration_s: f64,
    ) {
        let meta = ReportMeta {
            run_id: self.h.run_id.clone(),
            outcome,
            message: message.clone(),
            started_at_unix_ms,
            duration_s,
        };
        let report = match acc.finish(&self.scenario, meta) {
            Ok(mut r) => {
                r.threshold_abort = self.threshold_abort.clone();
                r
            }
            Err(e) => {
                self.h
                    .set_state("failed", format!("building the report failed: {e}"));
                return;
            }
        };
        // The report's verdict, not the driver's: a run that delivered nothing is failed.
        let state = match report.outcome {
            RunOutcome::Succeeded => "done",
            RunOutcome::Failed => "failed",
            RunOutcome::Aborted => "aborted",
            RunOutcome::Incomplete => "incomplete",
        };
        let message = report.message.clone().or(message);
        let (json, state, message) = match self.inner.store.save(&report) {
            Ok(json) => {
                self.h
                    .persisted
                    .store(true, std::sync::atomic::Ordering::Release);
                let cfg = &self.inner.cfg;
                let removed = self
                    .inner
                    .store
                    .prune(cfg.reports_keep, cfg.reports_max_age);
                if removed > 0 {
                    tracing::info!(removed, "old reports removed (retention)");
                }
                (json, state, message.unwrap_or_default())
            }
            Err(e) => {
                // Still hand the report to watchers; say loudly that it is not stored.
                let json = serde_json::to_string_pretty(&report).unwrap_or_default();
                (
                    json,
                    "failed",
                    format!("the report could not be persisted: {e}"),
                )
            }
        };
        if self.h.persisted.load(std::sync::atomic::Ordering::Acquire) {
            self.inner.store.clear_in_flight(&self.h.run_id);
        }
        let _ = self.h.report_json.set(json.clone());
        self.h.set_state(state, message);
        let _ = self.h.events.send(v1::RunEvent {
            event: Some(v1::run_event::Event::ReportJson(json)),
        });
        evict_finished(&self.inner);
    }

    #[allow(clippy::too_many_arguments)]
    async fn agent_lost(
        &self,
        members: &mut [Member],
        acc: &mut RunAccumulator,
        agent_id: &str,
        why: &str,
        policy: AgentLossPolicy,
        failure: &mut Option<Failure>,
        deadline: &mut Instant,
    ) {
        let Some(i) = members.iter().position(|m| m.agent_id == agent_id) else {
            return;
        };
        if members[i].done || members[i].lost {
            return;
        }
        members[i].lost = true;
        members[i].lost_why = why.to_string();
        acc.mark_lost(i);
        let share = acc.lost_share() * 100.0;
        tracing::warn!(run = %self.h.run_id, agent = %agent_id, why, share, "agent lost");
        if failure.is_some() {
            return;
        }
        match policy {
            AgentLossPolicy::Fail => {
                let msg =
                    format!("agent {agent_id} was lost mid-run ({why}); on_agent_loss is fail");
                self.abort_members(members, &msg).await;
                *failure = Some(Failure::Failed(msg));
                *deadline = (*deadline).min(Instant::now() + Duration::from_secs(5));
            }
            AgentLossPolicy::Tolerate(pct) if share > pct => {
                let msg = format!("agent {agent_id} was lost mid-run ({why}); {share:.1}% of the load is lost, more than the tolerated {pct}%");
                self.abort_members(members, &msg).await;
                *failure = Some(Failure::Failed(msg));
                *deadline = (*deadline).min(Instant::now() + Duration::from_secs(5));
            }
            AgentLossPolicy::Tolerate(pct) => {
                self.h.set_state("running", format!("agent {agent_id} lost ({why}); {share:.1}% of the load lost, within the tolerated {pct}%"));
            }
        }
    }

    /// Frees the agents for other runs.
    fn release(&self) {
        release_agents(&self.inner, &self.h.run_id, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_driver_fails_the_run_and_frees_its_agents() {
        let dir = tempfile::tempdir().unwrap();
        let c = crate::Controller::new(crate::ControllerConfig::new(dir.path())).unwrap();
        let inner = c.inner.clone();
        let scenario = Scenario::from_yaml(
            "name: p\ntarget: http://127.0.0.1:1\nphases:\n  - { duration: 1s, arrival_rate: 1 }\nsession:\n  - http: { path: / }\n",
        )
        .unwrap();
        // A real run handle, whose driver is replaced by one that panics once it holds an agent.
        let h = start(inner.clone(), scenario, 1, Duration::from_millis(1));
        h.finished().await; // the real driver fails at once: no agents
        let h2 = Arc::new(RunHandle {
            run_id: "run-panics".into(),
            scenario_name: "p".into(),
            agents_wanted: 1,
            submitted_at_unix_ms: unix_ms(),
            state: Mutex::new(("running".into(), String::new())),
            events: broadcast::channel(16).0,
            report_json: OnceLock::new(),
            persisted: std::sync::atomic::AtomicBool::new(false),
            abort: CancellationToken::new(),
            abort_reason: Mutex::new(None),
            inbox: mpsc::unbounded_channel().0,
        });
        lock(&inner.runs).insert(h2.run_id.clone(), h2.clone());
        let (tx, mut agent_rx) = mpsc::channel(4);
        lock(&inner.agents).insert(
            7,
            crate::agents::AgentEntry {
                conn_id: 7,
                info: v1::AgentInfo {
                    agent_id: "a".into(),
                    state: "busy".into(),
                    run_id: "run-panics".into(),
                    ..Default::default()
                },
                tx,
                clock: Default::default(),
                run: Some("run-panics".into()),
                kick: CancellationToken::new(),
            },
        );
        let mut events = h2.events.subscribe();
        spawn_supervised(inner.clone(), h2.clone(), async { panic!("boom") });
        tokio::time::timeout(Duration::from_secs(5), h2.finished())
            .await
            .unwrap();
        let (state, message) = h2.state();
        assert_eq!(state, "failed");
        assert!(message.contains("panicked (boom)"), "{message}");
        // The agent is told to stop and is free for the next run.
        let msg = agent_rx.recv().await.unwrap().unwrap();
        assert!(matches!(msg.msg, Some(Out::Abort(_))));
        let a = &lock(&inner.agents)[&7];
        assert!(a.run.is_none());
        assert_eq!(a.info.state, "idle");
        // Watchers get a report, and it is stored.
        let mut got_report = false;
        while let Ok(ev) = events.try_recv() {
            got_report |= matches!(ev.event, Some(v1::run_event::Event::ReportJson(_)));
        }
        assert!(got_report);
        assert!(inner.store.load("run-panics").unwrap().is_some());
    }

    /// In order, out of order and replayed intervals: each counts once, and `next` is the
    /// first interval not yet received.
    #[test]
    fn received_counts_each_interval_once() {
        let mut r = Received::default();
        assert!(r.insert(0) && r.insert(1));
        assert!(!r.insert(1) && !r.insert(0), "a replay is a duplicate");
        assert!(r.insert(3) && r.insert(5));
        assert_eq!(r.next, 2);
        assert!(!r.insert(3));
        assert!(r.insert(2));
        assert_eq!(r.next, 4);
        assert!(r.insert(4));
        assert_eq!((r.next, r.ahead.len()), (6, 0));
        assert!(r.insert(6));
        assert_eq!(r.next, 7);
    }
}
