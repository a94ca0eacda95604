//! The agent side: one bidirectional stream per agent, the registry entry it owns, clock
//! estimation, and routing of run messages to run drivers.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use stampede_proto::v1::{self, agent_message::Msg as In, controller_message::Msg as Out};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use crate::renew::Heard;

use crate::run::RunInput;
use crate::{lock, unix_ms, unix_ns, Inner};

/// Longest agent id accepted.
const MAX_ID_LEN: usize = 128;
/// Longest text kept from an agent's self-description (version, pod, node, address): the
/// rest is cut, since it is shown in every listing and stored with each run.
const MAX_INFO_LEN: usize = 253;

/// An agent's self-described field, cut to [`MAX_INFO_LEN`] characters.
fn bounded(text: &str) -> String {
    text.chars().take(MAX_INFO_LEN).collect()
}

/// Clock pings after the first ten (see [`session`]).
const CLOCK_PING_EVERY: Duration = Duration::from_secs(30);

/// Best clock sample so far: the one with the smallest round trip.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ClockEstimate {
    pub rtt_ns: Option<i64>,
    /// agent − controller.
    pub offset_ns: i64,
}

impl ClockEstimate {
    /// NTP-style: offset = ((t2 − t1) + (t3 − t4)) / 2, delay = (t4 − t1) − (t3 − t2).
    /// `t2` and `t3` come from the agent, so the sums are taken in `i128` and clamped: no
    /// value an agent sends can overflow them.
    pub(crate) fn update(&mut self, t1: i64, t2: i64, t3: i64, t4: i64) {
        let [t1, t2, t3, t4] = [t1, t2, t3, t4].map(i128::from);
        let clamp = |v: i128| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        let rtt = clamp(((t4 - t1) - (t3 - t2)).max(0));
        let offset = clamp(((t2 - t1) + (t3 - t4)) / 2);
        if self.rtt_ns.is_none_or(|best| rtt <= best) {
            self.rtt_ns = Some(rtt);
            self.offset_ns = offset;
        }
    }
}

impl AgentEntry {
    /// Frees the agent for the next run.
    pub(crate) fn free(&mut self) {
        self.run = None;
        self.info.state = "idle".into();
        self.info.run_id.clear();
    }
}

/// A connected agent.
pub(crate) struct AgentEntry {
    pub conn_id: u64,
    pub info: v1::AgentInfo,
    pub tx: mpsc::Sender<Result<v1::ControllerMessage, Status>>,
    pub clock: ClockEstimate,
    pub run: Option<String>,
    /// Ends this agent's session (when replaced by a reconnect of the same id).
    pub kick: CancellationToken,
    /// When this stream last brought a Progress (renewals depend on it).
    pub heard: Arc<Heard>,
}

pub(crate) struct AgentSvc {
    pub inner: Arc<Inner>,
}

fn out(m: Out) -> Result<v1::ControllerMessage, Status> {
    Ok(v1::ControllerMessage { msg: Some(m) })
}

fn validate_register(r: &v1::Register) -> Result<(), Status> {
    if r.agent_id.is_empty()
        || r.agent_id.len() > MAX_ID_LEN
        || r.agent_id.chars().any(char::is_control)
    {
        return Err(Status::invalid_argument(format!(
            "register.agent_id: must be 1 to {MAX_ID_LEN} printable characters"
        )));
    }
    stampede_proto::convert::check_spec("register.hist_spec", r.hist_spec.as_ref())
        .map_err(|e| Status::invalid_argument(e.to_string()))
}

type OutStream = Pin<Box<dyn Stream<Item = Result<v1::ControllerMessage, Status>> + Send>>;

#[tonic::async_trait]
impl v1::agent_service_server::AgentService for AgentSvc {
    type AttachStream = OutStream;

    async fn attach(
        &self,
        req: Request<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<OutStream>, Status> {
        let peer = req.remote_addr().map(|a| a.to_string()).unwrap_or_default();
        let mut inbound = req.into_inner();
        let first = tokio::time::timeout(Duration::from_secs(10), inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no register message within 10 s"))??;
        let register = match first.and_then(|m| m.msg) {
            Some(In::Register(r)) => r,
            _ => {
                return Err(Status::invalid_argument(
                    "the first message must be register",
                ))
            }
        };
        validate_register(&register)?;
        let inner = self.inner.clone();
        let (tx, rx) = mpsc::channel(256);
        let conn_id = inner.next_conn.fetch_add(1, Ordering::Relaxed);
        let kick = CancellationToken::new();
        let heard = Heard::new();
        // An agent still running a run this controller does not know (it restarted, or the
        // run ended meanwhile) is an orphan's: it is told to stop, and stays out of new runs
        // ("stopping") until its Done says the load has stopped.
        let orphan = (!register.active_run.is_empty()
            && lock(&inner.runs)
                .get(&register.active_run)
                .is_none_or(|h| h.state().state.is_terminal()))
        .then(|| register.active_run.clone());
        let (run, state) = match (&orphan, register.active_run.is_empty()) {
            (Some(r), _) => (Some(r.clone()), "stopping"),
            (None, false) => (Some(register.active_run.clone()), "busy"),
            (None, true) => (None, "idle"),
        };
        {
            let mut agents = lock(&inner.agents);
            // A reconnect under the same id replaces the old session.
            let stale: Vec<u64> = agents
                .values()
                .filter(|a| a.info.agent_id == register.agent_id)
                .map(|a| a.conn_id)
                .collect();
            for id in stale {
                if let Some(old) = agents.remove(&id) {
                    old.kick.cancel();
                }
            }
            agents.insert(
                conn_id,
                AgentEntry {
                    conn_id,
                    info: v1::AgentInfo {
                        agent_id: register.agent_id.clone(),
                        version: bounded(&register.version),
                        peer,
                        pod_name: bounded(&register.pod_name),
                        node_name: bounded(&register.node_name),
                        pod_ip: bounded(&register.pod_ip),
                        state: state.into(),
                        run_id: run.clone().unwrap_or_default(),
                        connected_at_unix_ms: unix_ms(),
                        clock_offset_us: 0,
                        capacity: register.capacity,
                        ephemeral_ports: register.ephemeral_ports,
                        source_addresses: register.source_addresses.max(1),
                        pod_status: String::new(),
                    },
                    tx: tx.clone(),
                    clock: ClockEstimate::default(),
                    run,
                    kick: kick.clone(),
                    heard: heard.clone(),
                },
            );
        }
        tracing::info!(agent = %register.agent_id, conn_id, "agent registered");
        let _ = tx
            .send(out(Out::Registered(v1::Registered {
                hist_spec: Some(stampede_core::hist::SPEC.into()),
                lease_ms: inner.cfg.lease.as_millis() as u64,
                own_addresses: inner.own.wire(),
            })))
            .await;
        // Back within its run (a reconnect after a cut link): the run resumes it on this
        // stream; the agent replays what the controller has not acknowledged.
        if let (None, false) = (&orphan, register.active_run.is_empty()) {
            if let Some(h) = lock(&inner.runs).get(&register.active_run) {
                tracing::info!(agent = %register.agent_id, run = %register.active_run, "agent reconnected mid-run");
                h.send(RunInput::Reconnected {
                    agent_id: register.agent_id.clone(),
                    conn_id,
                    tx: tx.clone(),
                    heard: heard.clone(),
                });
            }
        }
        if let Some(run_id) = orphan {
            tracing::warn!(agent = %register.agent_id, run = %run_id, "agent is running a run this controller does not know: stopping it");
            let _ = tx
                .send(out(Out::Abort(v1::Abort {
                    run_id,
                    reason: "the controller does not know this run (it restarted)".into(),
                })))
                .await;
        }
        tokio::spawn(session(
            inner.clone(),
            conn_id,
            register.agent_id,
            inbound,
            tx,
            (kick, heard),
        ));
        inner.agents_changed.notify_waiters();
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Reads one agent's stream until it ends, the agent is replaced, or the controller stops.
async fn session(
    inner: Arc<Inner>,
    conn_id: u64,
    agent_id: String,
    mut inbound: Streaming<v1::AgentMessage>,
    tx: mpsc::Sender<Result<v1::ControllerMessage, Status>>,
    (kick, heard): (CancellationToken, Arc<Heard>),
) {
    let mut seq = 0u64;
    // Ten clock pings 100 ms apart once the stream has settled, then one every 30 s. The
    // estimate keeps the sample with the smallest round trip, so later pings only matter when
    // one beats the first ten; every 5 s they were a tenth of a 1,000-agent controller's
    // messages (a ping and its pong per agent) for no better estimate.
    let mut ping = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_millis(100),
        Duration::from_millis(100),
    );
    loop {
        tokio::select! {
            m = inbound.message() => match m {
                Ok(Some(m)) => {
                    if matches!(m.msg, Some(In::Progress(_))) {
                        heard.mark();
                    }
                    if let Some(ack) = route(&inner, conn_id, &agent_id, m) {
                        // Best effort: an ack that does not fit now is repeated by the replay.
                        let _ = tx.try_send(out(Out::Ack(ack)));
                    }
                }
                Ok(None) => break,
                Err(status) => {
                    tracing::warn!(agent = %agent_id, error = %status, "agent stream failed");
                    break;
                }
            },
            _ = ping.tick() => {
                seq += 1;
                if seq == 10 {
                    ping = tokio::time::interval_at(tokio::time::Instant::now() + CLOCK_PING_EVERY, CLOCK_PING_EVERY);
                }
                let p = v1::ClockPing { seq, t1_unix_ns: unix_ns() };
                if tx.send(out(Out::ClockPing(p))).await.is_err() {
                    break;
                }
            }
            _ = kick.cancelled() => break,
            _ = inner.shutdown.cancelled() => break,
        }
    }
    let run = {
        let mut agents = lock(&inner.agents);
        agents.remove(&conn_id).and_then(|a| a.run)
    };
    tracing::info!(agent = %agent_id, conn_id, "agent disconnected");
    if let Some(run_id) = run {
        if let Some(h) = lock(&inner.runs).get(&run_id) {
            h.send(RunInput::Disconnected {
                agent_id: agent_id.clone(),
                conn_id,
            });
        }
    }
    inner.agents_changed.notify_waiters();
}

/// Hands a message to its run; returns the acknowledgement of a Progress or Done, so the agent
/// can drop it from its replay buffer.
fn route(inner: &Inner, conn_id: u64, agent_id: &str, m: v1::AgentMessage) -> Option<v1::Ack> {
    let m = m.msg?;
    let (run_id, input) = match m {
        In::ClockPong(p) => {
            let t4 = unix_ns();
            if let Some(a) = lock(&inner.agents).get_mut(&conn_id) {
                a.clock.update(p.t1_unix_ns, p.t2_unix_ns, p.t3_unix_ns, t4);
                a.info.clock_offset_us = a.clock.offset_ns / 1000;
            }
            return None;
        }
        In::Register(_) => {
            tracing::warn!(agent = %agent_id, "ignoring a second register on one stream");
            return None;
        }
        In::Ready(r) => (
            r.run_id,
            RunInput::Ready {
                agent_id: agent_id.to_string(),
                planned: r.planned_sessions,
                setup_values: r.setup_values,
            },
        ),
        In::SetupValues(v) => (
            v.run_id.clone(),
            RunInput::SetupValues {
                agent_id: agent_id.to_string(),
                values: v,
            },
        ),
        In::Progress(p) => (
            p.run_id.clone(),
            RunInput::Progress {
                agent_id: agent_id.to_string(),
                progress: p,
            },
        ),
        In::Done(d) => (
            d.run_id.clone(),
            RunInput::Done {
                agent_id: agent_id.to_string(),
                done: d,
            },
        ),
        In::Failed(f) => (
            f.run_id,
            RunInput::Failed {
                agent_id: agent_id.to_string(),
                reason: f.reason,
            },
        ),
    };
    // Intervals of a live run are acknowledged in its lease renewals, its Done by the run once
    // it is durable (checkpointed or in the stored report). Whatever
    // belongs to a run this controller does not know (any more) is acknowledged whole, so the
    // agent stops replaying it.
    let whole_run = v1::Ack {
        run_id: run_id.clone(),
    };
    let is_done = matches!(input, RunInput::Done { .. });
    let is_data = is_done || matches!(input, RunInput::Progress { .. });
    let handle = lock(&inner.runs).get(&run_id).cloned();
    match handle {
        // An ended run has all it will ever keep: the rest is acknowledged, not replayed.
        Some(h) if h.state().state.is_terminal() => is_data.then_some(whole_run),
        Some(h) => {
            h.send(input);
            None
        }
        None => {
            tracing::debug!(agent = %agent_id, run = %run_id, "message for an unknown run dropped");
            if is_done {
                // An orphaned run has stopped: the agent is free again.
                if let Some(a) = lock(&inner.agents)
                    .get_mut(&conn_id)
                    .filter(|a| a.run.as_deref() == Some(run_id.as_str()))
                {
                    a.free();
                }
                inner.agents_changed.notify_waiters();
            }
            is_data.then_some(whole_run)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_estimate_keeps_the_tightest_sample() {
        let mut c = ClockEstimate::default();
        // agent 1 ms ahead, 2 ms RTT
        c.update(0, 2_000_000, 2_000_000, 2_000_000);
        assert_eq!((c.rtt_ns, c.offset_ns), (Some(2_000_000), 1_000_000));
        // a worse sample does not replace it
        c.update(0, 9_000_000, 9_000_000, 10_000_000);
        assert_eq!(c.offset_ns, 1_000_000);
    }

    #[test]
    fn clock_estimate_takes_any_agent_times_without_overflow() {
        let mut c = ClockEstimate::default();
        c.update(0, i64::MIN, i64::MAX, 1);
        c.update(i64::MAX, i64::MIN, i64::MIN, i64::MIN);
        assert!(c.rtt_ns.is_some_and(|r| r >= 0));
    }

    #[test]
    fn an_agents_self_description_is_cut() {
        assert_eq!(bounded(&"x".repeat(10_000)).len(), MAX_INFO_LEN);
        assert_eq!(bounded("agent-1"), "agent-1");
    }
}
