//! Surviving a controller restart: a running run writes its checkpoint as it merges, and a
//! controller that starts on the same data directory re-adopts the runs it finds there,
//! waits for their agents to come back (within the restart grace), takes their replay once,
//! and finishes them as if nothing had happened.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use stampede_core::plan::Plan;
use stampede_core::report::RunAccumulator;
use stampede_core::scenario::Scenario;
use stampede_proto::v1;
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::checkpoint::{self, MemberEntry, MemberRecord, RunRecord, SetupRecord, TargetSeen};
use super::member::{Books, Member, MemberState};
use super::target_watch::TargetWatch;
use super::{assign, loss, spawn_supervised, Driver, Failure, RunHandle, RunState, Status};
use crate::renew::Renewals;
use crate::{lock, unix_ns, Inner};

/// What a re-adopted run takes over from its checkpoint besides its members and merged data;
/// a run that starts afresh has none of it.
#[derive(Default)]
pub(super) struct Resumed {
    /// How the run was ending when the previous controller stopped.
    pub(super) failure: Option<Failure>,
    /// What the previous controller saw of the target.
    pub(super) observed: TargetSeen,
}

impl Driver {
    /// Starts the checkpoint of a run whose agents were just sent their Start. Without one
    /// (no restart grace, or the data directory refuses it) the run still runs; a restart then
    /// ends it `failed`.
    pub(super) fn start_checkpoint(
        &self,
        members: &[Member],
        seed: u64,
        t0_unix_ns: i64,
        started_at_unix_ms: u64,
    ) -> Option<checkpoint::Writer> {
        if self.inner.cfg.restart_grace.is_zero() {
            return None;
        }
        let scenario = match serde_json::to_string(&self.scenario.agent_form()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(run = %self.h.run_id, error = %e, "no checkpoint: the scenario does not serialize");
                return None;
            }
        };
        let header = checkpoint::Header {
            version: checkpoint::VERSION,
            run_id: self.h.run_id.clone(),
            scenario_name: self.h.scenario_name.clone(),
            submitted_at_unix_ms: self.h.submitted_at_unix_ms,
            scenario,
            agents: self.n,
            seed,
            t0_unix_ns,
            started_at_unix_ms,
            members: entries(members),
            log_len: 0,
            state: self.run_record(None),
        };
        checkpoint::Writer::create(&self.inner.cfg.data_dir, header)
            .map_err(|e| {
                tracing::warn!(run = %self.h.run_id, error = %display_chain(&e), "no checkpoint: a controller restart would fail this run");
            })
            .ok()
    }

    /// Makes the checkpoint durable, then acknowledges to each agent what it now holds. A
    /// checkpoint that cannot be written is given up (the run goes on, acknowledging as it
    /// merges; a restart would fail it).
    pub(super) fn flush_checkpoint(
        &self,
        checkpoint: &mut Option<checkpoint::Writer>,
        members: &[Member],
        renewals: &Renewals,
        failure: Option<&Failure>,
        watch: &TargetWatch,
    ) {
        // Taken even without a checkpoint: they would pile up otherwise.
        let observed = watch.take_fresh();
        let Some(c) = checkpoint else { return };
        c.observed(observed);
        if let Err(e) = c.flush(entries(members), self.run_record(failure)) {
            tracing::warn!(run = %self.h.run_id, error = %display_chain(&e), "checkpoint given up: a controller restart would fail this run");
            if let Some(c) = checkpoint.take() {
                c.remove();
            }
        }
        for (i, m) in members.iter().enumerate() {
            renewals.ack(i, m.received.next);
        }
    }

    /// The run's own state as the checkpoint keeps it.
    fn run_record(&self, failure: Option<&Failure>) -> RunRecord {
        RunRecord {
            ending: failure.cloned(),
            threshold_abort: self.threshold_abort.clone(),
            setup: (!self.scenario.setup.is_empty()).then(|| SetupRecord {
                values: self.setup.values.clone(),
                generation: self.setup.generation,
                agent: self.setup_agent,
            }),
            observe_len: 0,
        }
    }
}

/// An error with its sources, for a log line.
fn display_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The members as the checkpoint keeps them.
fn entries(members: &[Member]) -> Vec<MemberEntry> {
    members
        .iter()
        .map(|m| MemberEntry {
            agent_id: m.agent_id.clone(),
            state: match m.state() {
                MemberState::Done => MemberRecord::Done,
                MemberState::Lost { why, .. } => MemberRecord::Lost { why: why.clone() },
                _ => MemberRecord::Running,
            },
            offset_ns: m.offset_ns,
        })
        .collect()
}

/// Why a checkpoint could not be re-adopted.
#[derive(Debug, thiserror::Error)]
pub(super) enum AdoptError {
    /// The checkpoint could not be read back.
    #[error("reading the checkpoint")]
    Checkpoint(#[from] checkpoint::CheckpointError),
    /// Its scenario no longer parses (a controller of another version).
    #[error("its scenario")]
    Scenario(#[source] stampede_core::ScenarioError),
    /// Its plan cannot be rebuilt.
    #[error("its plan: {0}")]
    Plan(String),
    /// The run's id is already taken in this controller.
    #[error("run {0} is already known")]
    Duplicate(String),
    /// Its setup values do not fit its scenario.
    #[error("its setup values")]
    Setup(#[source] assign::SetupValuesError),
    /// A scrape of a source its scenario does not observe.
    #[error("a scrape of observe source {index}, the scenario has {sources}")]
    ObserveSource { index: usize, sources: usize },
}

/// Re-adopts every run checkpointed in the data directory; returns the ids adopted. A
/// checkpoint that cannot be adopted is removed (its run is then ended `failed` by the
/// in-flight marker, as any run this controller lost). Needs a Tokio runtime: without one,
/// nothing is adopted.
pub(crate) fn adopt_all(inner: &Arc<Inner>) -> Vec<String> {
    let ids = checkpoint::list(&inner.cfg.data_dir);
    if ids.is_empty() {
        return Vec::new();
    }
    if tokio::runtime::Handle::try_current().is_err() || inner.cfg.restart_grace.is_zero() {
        for id in &ids {
            checkpoint::discard(&inner.cfg.data_dir, id);
        }
        return Vec::new();
    }
    let mut adopted = Vec::new();
    for id in ids {
        match adopt(inner, &id) {
            Ok(()) => adopted.push(id),
            Err(e) => {
                tracing::error!(run = %id, error = %display_chain(&e), "cannot re-adopt the run");
                checkpoint::discard(&inner.cfg.data_dir, &id);
            }
        }
    }
    adopted
}

/// Re-creates run `run_id` from its checkpoint, in its Running state, and starts its driver.
fn adopt(inner: &Arc<Inner>, run_id: &str) -> Result<(), AdoptError> {
    let saved = checkpoint::load(&inner.cfg.data_dir, run_id)?;
    let header = saved.header;
    if lock(&inner.runs).contains_key(run_id) {
        return Err(AdoptError::Duplicate(run_id.to_string()));
    }
    let scenario = Scenario::from_yaml(&header.scenario).map_err(AdoptError::Scenario)?;
    let plan = Plan::new(&scenario, header.agents, &[], header.seed)
        .map_err(|e| AdoptError::Plan(e.to_string()))?;
    if header.members.len() != header.agents as usize {
        return Err(AdoptError::Plan(format!(
            "{} members for {} agents",
            header.members.len(),
            header.agents
        )));
    }
    let ids = header.members.iter().map(|m| m.agent_id.clone()).collect();
    let mut acc = RunAccumulator::new(&scenario, plan, ids, inner.cfg.interval.as_secs_f64());
    // Away from the start: each agent has the lease, the restart grace and the rejoin margin,
    // counted from now, to come back.
    let until = Instant::now() + loss::away_grace(&inner.cfg);
    let (dead_tx, _) = mpsc::channel(1);
    let mut members = Vec::with_capacity(header.members.len());
    let mut waiting = 0;
    for (i, e) in header.members.iter().enumerate() {
        let mut m = Member::assigned(
            e.agent_id.clone(),
            0,
            dead_tx.clone(),
            crate::renew::Heard::new(),
        );
        m.offset_ns = e.offset_ns;
        acc.set_clock_offset(i, e.offset_ns / 1000);
        m.move_to(MemberState::Ready);
        m.move_to(MemberState::Running);
        match &e.state {
            MemberRecord::Running => {
                m.move_to(MemberState::Away {
                    until,
                    window: loss::away_grace(&inner.cfg),
                });
                waiting += 1;
            }
            MemberRecord::Done => {
                m.move_to(MemberState::Done);
            }
            MemberRecord::Lost { why } => {
                m.move_to(MemberState::Lost {
                    why: why.clone(),
                    books: Books::Partial,
                });
                acc.mark_lost(i);
            }
        }
        members.push(m);
    }
    let RunRecord {
        ending,
        threshold_abort,
        setup,
        ..
    } = header.state.clone();
    if let Some((index, _)) = saved
        .observed
        .scrapes
        .iter()
        .find(|(i, _)| *i >= scenario.observe.len())
    {
        return Err(AdoptError::ObserveSource {
            index: *index,
            sources: scenario.observe.len(),
        });
    }
    let (inbox, rx) = mpsc::unbounded_channel();
    let (events, _) = broadcast::channel(1024);
    let mut message =
        format!("re-adopted after a controller restart; waiting for {waiting} agents to come back");
    // A run that was ending goes on ending, with its reason.
    let mut state = RunState::Running;
    if let Some(f) = &ending {
        state = RunState::Finishing;
        message = format!("{}; {message}", f.message());
    }
    let abort_reason = match &ending {
        Some(Failure::Aborted(m)) => Some(m.clone()),
        _ => None,
    };
    let handle = Arc::new(RunHandle {
        run_id: header.run_id.clone(),
        scenario_name: header.scenario_name.clone(),
        agents_wanted: header.agents,
        submitted_at_unix_ms: header.submitted_at_unix_ms,
        state: Mutex::new(Status {
            state,
            message: message.clone(),
        }),
        events,
        report_json: OnceLock::new(),
        persisted: std::sync::atomic::AtomicBool::new(false),
        abort: CancellationToken::new(),
        abort_reason: Mutex::new(abort_reason),
        inbox,
    });
    let debug_left = scenario.debug.into();
    let mut driver = Driver {
        inner: inner.clone(),
        h: handle.clone(),
        scenario,
        n: header.agents,
        rx,
        agent_wait: inner.cfg.agent_wait,
        threshold_abort,
        setup: v1::SetupValues::default(),
        setup_agent: 0,
        target_resources: None,
        service: None,
        pods: std::collections::BTreeMap::new(),
        debug_left,
    };
    if let Some(s) = setup {
        driver
            .check_setup_values(&s.values)
            .map_err(AdoptError::Setup)?;
        if s.agent >= members.len() {
            return Err(AdoptError::Plan(format!(
                "setup agent {} of {} members",
                s.agent,
                members.len()
            )));
        }
        driver.setup = v1::SetupValues {
            run_id: header.run_id.clone(),
            values: s.values,
            generation: s.generation,
        };
        driver.setup_agent = s.agent;
    }
    // What was merged before the restart, merged again in the same order: the same state.
    let merged = saved.progress.len();
    for (i, p) in &saved.progress {
        let delivery = members[*i].received.insert(p);
        if delivery.is_new() {
            let agent_id = members[*i].agent_id.clone();
            driver.merge(&mut acc, *i, &agent_id, p, delivery);
        }
    }
    let writer = checkpoint::Writer::resume(&inner.cfg.data_dir, header.clone())?;
    // T0 on this process's clock, from the wall clock both processes share.
    let since_t0 = unix_ns().saturating_sub(header.t0_unix_ns);
    let now = Instant::now();
    let t0 = if since_t0 >= 0 {
        now.checked_sub(Duration::from_nanos(since_t0 as u64))
            .unwrap_or(now)
    } else {
        now + Duration::from_nanos(since_t0.unsigned_abs())
    };
    tracing::warn!(run = %run_id, merged, waiting, "{message}");
    lock(&inner.runs).insert(header.run_id.clone(), handle.clone());
    spawn_supervised(
        inner.clone(),
        handle,
        driver.supervise(
            members,
            acc,
            (t0, header.started_at_unix_ms),
            Some(writer),
            Resumed {
                failure: ending,
                observed: saved.observed,
            },
        ),
    );
    Ok(())
}
