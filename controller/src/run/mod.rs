//! One run's life: wait for agents, assign shards, wait for ready, synchronized start, merge
//! progress live, apply the agent-loss policy, then build, persist and publish the report.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use stampede_core::plan::Plan;
use stampede_core::report::{RunAccumulator, RunOutcome, ThresholdAbort};
use stampede_core::scenario::{ReadyScenario, Scenario};
use stampede_proto::v1::{self, controller_message::Msg as Out};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

mod adopt;
mod assign;
mod checkpoint;
#[cfg(test)]
mod driver_tests;
mod finish;
mod loss;
mod member;
mod progress;
mod received;
mod running;
mod service;
mod setup;
mod state;
mod target_watch;

pub(crate) use adopt::adopt_all;
pub(crate) use state::{RunState, Status};

use crate::{lock, unix_ms, Inner};

/// The latest a run's deadline can be: far beyond any run, and safe to add to an `Instant`.
const FAR_FUTURE: Duration = Duration::from_secs(10 * 366 * 86_400);

/// Drops finished runs whose report is stored from memory, beyond the newest
/// `finished_in_memory` (watch and report requests then read the store). Holders of a handle
/// (a watching CLI, a LoadTest follower) keep theirs.
fn evict_finished(inner: &Inner) {
    let mut runs = lock(&inner.runs);
    let mut finished: Vec<(u64, String)> = runs
        .values()
        .filter(|h| {
            h.state().state.is_terminal() && h.persisted.load(std::sync::atomic::Ordering::Acquire)
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

/// Messages from agent sessions to a run driver.
#[derive(Debug)]
pub enum RunInput {
    Ready {
        agent_id: String,
        planned: u64,
        /// From the agent that ran the setup steps: the values they extracted.
        setup_values: Vec<String>,
    },
    /// Refreshed setup values from the agent that runs the setup steps.
    SetupValues {
        agent_id: String,
        values: v1::SetupValues,
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
    /// The agent's stream `conn_id` ended. Mid-run this starts its grace, not its loss.
    Disconnected {
        agent_id: String,
        conn_id: u64,
    },
    /// The agent registered again, on stream `conn_id`, still running this run: it resumes.
    Reconnected {
        agent_id: String,
        conn_id: u64,
        tx: mpsc::Sender<Result<v1::ControllerMessage, tonic::Status>>,
        heard: Arc<crate::renew::Heard>,
    },
}

/// A run as the services see it.
pub struct RunHandle {
    /// `run-` and 12 hex digits, unique per controller.
    pub run_id: String,
    /// The scenario's `name`, for listings.
    pub scenario_name: String,
    /// Agents the run waits for before it starts.
    pub agents_wanted: u32,
    /// When the run was submitted, in ms since the Unix epoch.
    pub submitted_at_unix_ms: u64,
    state: Mutex<Status>,
    /// Live events for watchers; a watcher more than the channel's 1024 events behind misses
    /// some.
    pub events: broadcast::Sender<v1::RunEvent>,
    report_json: OnceLock<String>,
    /// The report is in the store: the handle may then be evicted from memory.
    persisted: std::sync::atomic::AtomicBool,
    /// Cancelled to abort the run; `request_abort` also records why.
    pub abort: CancellationToken,
    abort_reason: Mutex<Option<String>>,
    inbox: mpsc::UnboundedSender<RunInput>,
}

impl RunHandle {
    /// Queues an input for the run's driver; once the driver has ended it is dropped.
    pub fn send(&self, input: RunInput) {
        let _ = self.inbox.send(input);
    }

    /// The run's state and the line that explains it.
    pub fn state(&self) -> Status {
        lock(&self.state).clone()
    }

    /// The final report as JSON, once the run has finished and stored it.
    pub fn report_json(&self) -> Option<&String> {
        self.report_json.get()
    }

    /// Waits until the run is done, failed or aborted (its report, if any, is then available).
    pub async fn finished(&self) {
        let mut rx = self.events.subscribe();
        loop {
            if self.state().state.is_terminal() {
                return;
            }
            if let Err(broadcast::error::RecvError::Closed) = rx.recv().await {
                return;
            }
        }
    }

    /// Aborts the run; the first reason given is the one reported.
    pub fn request_abort(&self, reason: String) {
        lock(&self.abort_reason).get_or_insert(reason);
        self.abort.cancel();
    }

    /// Moves the run to `state` and tells its watchers, when [`RunState::may_become`] allows
    /// it; a move it forbids (a late message for an ended run) is logged and ignored, so the
    /// first end a run reaches is the one it keeps. Returns whether the run moved.
    fn set_state(&self, state: RunState, message: impl Into<String>) -> bool {
        let message = message.into();
        {
            let mut now = lock(&self.state);
            if !now.state.may_become(state) {
                tracing::warn!(run = %self.run_id, from = %now.state, to = %state, message = %message, "run state change refused");
                return false;
            }
            *now = Status {
                state,
                message: message.clone(),
            };
        }
        tracing::info!(run = %self.run_id, state = %state, message = %message, "run state");
        let _ = self.events.send(v1::RunEvent {
            event: Some(v1::run_event::Event::State(v1::RunState {
                run_id: self.run_id.clone(),
                state: state.as_str().to_string(),
                message,
            })),
        });
        true
    }

    /// The run as `stampede status` lists it.
    pub fn summary(&self) -> v1::RunSummary {
        let Status { state, message } = self.state();
        v1::RunSummary {
            run_id: self.run_id.clone(),
            scenario: self.scenario_name.clone(),
            state: state.as_str().to_string(),
            submitted_at_unix_ms: self.submitted_at_unix_ms,
            message,
            agents: self.agents_wanted,
        }
    }
}

/// Creates the run and starts its driver. The scenario is a [`ReadyScenario`], so a run never
/// starts with a file, a data source or a gRPC call nobody past the submitter can read.
pub(crate) fn start(
    inner: Arc<Inner>,
    scenario: ReadyScenario,
    agents: u32,
    agent_wait: Duration,
) -> Arc<RunHandle> {
    let scenario = scenario.into_inner();
    let run_id = format!("run-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let (inbox, rx) = mpsc::unbounded_channel();
    let (events, _) = broadcast::channel(1024);
    let handle = Arc::new(RunHandle {
        run_id: run_id.clone(),
        scenario_name: scenario.name.clone(),
        agents_wanted: agents,
        submitted_at_unix_ms: unix_ms(),
        state: Mutex::new(Status {
            state: RunState::Pending,
            message: String::new(),
        }),
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
    let debug_left = scenario.debug.into();
    let driver = Driver {
        inner,
        h: handle.clone(),
        scenario,
        n: agents,
        rx,
        agent_wait,
        threshold_abort: None,
        setup: v1::SetupValues::default(),
        setup_agent: 0,
        target_resources: None,
        service: None,
        pods: std::collections::BTreeMap::new(),
        debug_left,
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
    if h.state().state.is_terminal() {
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
    checkpoint::discard(&inner.cfg.data_dir, &h.run_id);
    let _ = h.report_json.set(json.clone());
    h.set_state(RunState::Failed, why);
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
    /// The newest setup values (`setup:`), from the agent that runs the setup steps: sent to
    /// every agent in its Start, and again, refreshed, while the run goes on.
    setup: v1::SetupValues,
    /// The member that refreshes the setup values: the first (it ran the setup), or the one
    /// that took over when it was lost.
    setup_agent: usize,
    /// The target's resources scraped during the run (`observe:`).
    target_resources: Option<stampede_core::observe::TargetResources>,
    /// `endpoints: service`: the Service's ready pods, followed while the run holds it.
    service: Option<crate::k8s::endpoints::ServiceWatch>,
    /// Every Service endpoint the run was given, with its pod: the report names them.
    pods: std::collections::BTreeMap<std::net::SocketAddr, String>,
    /// Debug exchanges still to pass on to watchers (`stampede run --debug N`): the first N
    /// of the run, whichever agents they come from.
    debug_left: std::sync::atomic::AtomicU32,
}

/// How a run that will not succeed ends, with the reason; kept in the checkpoint, so a
/// re-adopted run ends the same way.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome", content = "message")]
pub(crate) enum Failure {
    Failed(String),
    Aborted(String),
}

impl Failure {
    fn message(&self) -> &str {
        match self {
            Failure::Failed(m) | Failure::Aborted(m) => m,
        }
    }
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
                    Err(e) => {
                        self.h
                            .set_state(RunState::Failed, format!("{message}; plan: {e}"));
                    }
                }
                return;
            }
        };
        self.run(members).await;
    }

    fn abort_reason(&self) -> String {
        lock(&self.h.abort_reason)
            .clone()
            .unwrap_or_else(|| "aborted".into())
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
        let ready = ReadyScenario::new(scenario).unwrap();
        let h = start(inner.clone(), ready, 1, Duration::from_millis(1));
        h.finished().await; // the real driver fails at once: no agents
        let h2 = Arc::new(RunHandle {
            run_id: "run-panics".into(),
            scenario_name: "p".into(),
            agents_wanted: 1,
            submitted_at_unix_ms: unix_ms(),
            state: Mutex::new(Status {
                state: RunState::Running,
                message: String::new(),
            }),
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
                heard: crate::renew::Heard::new(),
            },
        );
        let mut events = h2.events.subscribe();
        spawn_supervised(inner.clone(), h2.clone(), async { panic!("boom") });
        tokio::time::timeout(Duration::from_secs(5), h2.finished())
            .await
            .unwrap();
        let Status { state, message } = h2.state();
        assert_eq!(state, RunState::Failed);
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
}
