//! The run's loop from the synchronized start to the last Done: it takes each agent's input
//! (merged in `progress`, losses judged in `loss`, setup values passed on in `setup`), renews
//! leases, keeps the checkpoint and the live view, and applies live thresholds.

use std::collections::HashMap;
use std::time::Duration;

use stampede_core::plan::Plan;
use stampede_core::report::{RunAccumulator, RunOutcome, ThresholdAbort};
use stampede_core::scenario::AgentLossPolicy;
use stampede_proto::v1::{self, controller_message::Msg as Out};
use tokio::time::Instant;

use super::loss::away_grace;
use super::member::{agent_text, Books, Member, MemberState};
use super::{adopt, checkpoint, Driver, Failure, RunInput, RunState, FAR_FUTURE};
use crate::renew::Renewals;
use crate::unix_ns;

/// How long an agent whose stream closed while this controller runs has to come back before
/// it counts as lost. The restart grace is not waited for: it is the agents' allowance for a
/// controller restart, and this controller did not restart. An agent that is alive retries
/// within 100 ms, then at most every 1.2 s while a run goes on (its backoff, jittered), so a
/// link back within a second is taken up within about two; a killed agent is lost at this
/// bound instead of its lease, restart grace and rejoin margin (18 s by default), measured
/// in `a_closed_stream_is_lost_without_waiting_for_the_restart_grace`.
pub(super) const RECONNECT_WINDOW: Duration = Duration::from_secs(3);

/// What a stopped run's agents have, past their graceful stop, to send their last data.
const STOP_MARGIN: Duration = Duration::from_secs(5);

/// Most Dones acknowledged by one checkpoint flush: past this many waiting, a flush is made
/// though more are queued.
const MAX_UNACKED_DONES: usize = 64;

impl Driver {
    pub(super) async fn abort_members(&self, members: &[Member], reason: &str) {
        for m in members.iter().filter(|m| m.pending()) {
            let abort = v1::Abort {
                run_id: self.h.run_id.clone(),
                reason: reason.to_string(),
            };
            // Never waited for: a stream that is full (its link cut but not yet closed) must
            // not hold up the run; that agent stops when its lease lapses instead.
            if m.tx
                .try_send(Ok(v1::ControllerMessage {
                    msg: Some(Out::Abort(abort)),
                }))
                .is_err()
            {
                tracing::warn!(run = %self.h.run_id, agent = %m.agent_id, "could not send the abort; the agent stops when its lease lapses");
            }
        }
    }

    /// Upper bound of one session's length: every request timing out, every think at max.
    fn session_bound(&self) -> Duration {
        stampede_core::ports::worst_case_session(&self.scenario)
    }

    /// How long a stopped run waits for its agents' last data and `Done`: their graceful
    /// stop (requests in flight finish and are recorded) and five seconds to send it.
    pub(super) fn stop_wait(&self) -> Duration {
        self.scenario.graceful_stop() + STOP_MARGIN
    }

    pub(super) async fn run(self, (mut members, plan, seed): (Vec<Member>, Plan, u64)) {
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
        for (i, m) in members.iter_mut().enumerate() {
            m.move_to(MemberState::Running);
            acc.set_clock_offset(i, m.offset_ns / 1000);
            let start = v1::Start {
                run_id: self.h.run_id.clone(),
                t0_unix_ns,
                clock_offset_ns: m.offset_ns,
                setup_values: self.setup.values.clone(),
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
            RunState::Running,
            format!(
                "{} agents, T0 in {} ms, max clock offset {skew_us} µs",
                members.len(),
                delay.as_millis()
            ),
        );

        let checkpoint = self.start_checkpoint(&members, seed, t0_unix_ns, started_at);
        self.supervise(
            members,
            acc,
            (t0, started_at),
            checkpoint,
            adopt::Resumed::default(),
        )
        .await;
    }

    /// From the start (or a re-adoption) to the report: merges, renews, checkpoints, applies
    /// the agent-loss policy, and finishes the run.
    pub(super) async fn supervise(
        mut self,
        mut members: Vec<Member>,
        mut acc: RunAccumulator,
        (t0, started_at): (Instant, u64),
        mut checkpoint: Option<checkpoint::Writer>,
        resumed: adopt::Resumed,
    ) {
        let adopt::Resumed {
            mut failure,
            observed,
        } = resumed;
        let silence = crate::renew::silence_limit(self.inner.cfg.lease, self.inner.cfg.interval);
        // Silent this long, an agent got no renewals for a lease: its load has stopped.
        let silent_lost = silence + self.inner.cfg.lease;
        // A run re-adopted after a restart follows its Service again.
        if self.scenario.endpoints.is_service() && self.service.is_none() {
            match self.follow_service().await {
                Ok(()) => {
                    let set = self
                        .service
                        .as_ref()
                        .map(|w| w.current())
                        .unwrap_or_default();
                    self.forward_service_set(&members, set);
                }
                Err(why) => {
                    tracing::warn!(run = %self.h.run_id, %why, "the Service's endpoints are not followed any more")
                }
            }
        }
        let watch = self.watch_target((t0, started_at), observed).await;
        // Renewals go out from their own task: a slow merge here cannot delay them.
        let renewals = Renewals::start(
            members
                .iter()
                .map(|m| (m.tx.clone(), m.heard.clone()))
                .collect(),
            self.inner.cfg.lease,
            silence,
            t0,
        );
        for (i, m) in members.iter().enumerate() {
            // What a re-adopted run merged before the restart is durable: acknowledged.
            renewals.ack(i, m.received.next);
            if !matches!(m.state(), MemberState::Running) {
                renewals.retire(i);
            }
        }
        let index: HashMap<String, usize> = members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.agent_id.clone(), i))
            .collect();
        let mut snap =
            tokio::time::interval_at(t0 + self.inner.cfg.interval, self.inner.cfg.interval);
        let planned = self.scenario.duration();
        // Saturating: a valid scenario's worst-case session can exceed what `Instant` holds.
        let deadline = planned
            .saturating_add(self.session_bound())
            .saturating_add(stampede_core::plan::FINISH_MARGIN)
            .min(FAR_FUTURE);
        let mut deadline = t0 + deadline;
        let grace = away_grace(&self.inner.cfg);
        // A re-adopted run that was already ending: its agents get their time to come back
        // and to send their last data, then it ends as it was going to.
        let mut ending_saved = failure.is_some();
        if failure.is_some() {
            deadline = deadline.min(Instant::now() + grace + self.stop_wait());
        }
        let policy = self.scenario.on_agent_loss;
        let live_thresholds = if self.scenario.abort_on_fail {
            self.scenario.parsed_thresholds().unwrap_or_default()
        } else {
            Vec::new()
        };
        // Windowed thresholds are judged as soon as an interval closes, not at the next tick.
        let windowed = live_thresholds.iter().any(|t| t.window_s.is_some());
        let mut closed_seen = 0usize;

        // Per lost agent whose books stay partial: what may be missing from them.
        let mut gaps: Vec<String> = Vec::new();
        // The members are scanned (books due, what is outstanding, the next time one is
        // overdue) after anything that may have moved one: not after a Progress, which
        // changes no member's state. Scanning a thousand members per Progress made the
        // loop quadratic in the fleet. A book due meanwhile is closed when `away` fires.
        let (mut scan, mut away) = (true, None);
        // Members whose Done waits for the next flush to be acknowledged.
        let mut unacked: Vec<usize> = Vec::new();
        loop {
            if scan {
                if !members.iter().any(Member::outstanding) {
                    break;
                }
                self.close_due_books(&mut members, &mut acc, (t0, Instant::now()), &mut gaps);
                if !members.iter().any(Member::outstanding) {
                    break;
                }
                away = members
                    .iter()
                    .filter_map(|m| m.away_until().or(m.books_awaited()))
                    .min();
            }
            scan = true;
            if failure.is_some() {
                renewals.stop();
                if !ending_saved {
                    // How the run ends is durable at once: a controller restarted from here
                    // ends it the same way.
                    ending_saved = true;
                    self.flush_checkpoint(
                        &mut checkpoint,
                        &members,
                        &renewals,
                        failure.as_ref(),
                        &watch,
                    );
                }
            }
            tokio::select! {
                _ = tokio::time::sleep_until(away.unwrap_or(deadline)), if away.is_some() => {
                    let now = Instant::now();
                    let gone: Vec<(String, Duration)> = members
                        .iter()
                        .filter(|m| m.overdue(now))
                        .map(|m| (m.agent_id.clone(), m.away_window().unwrap_or_default()))
                        .collect();
                    for (agent_id, window) in gone {
                        let why = format!("connection lost and not back within {:.1} s", window.as_secs_f64());
                        // Its load may go on within its lease and restart grace: its books are awaited.
                        self.agent_lost(&mut members, &mut acc, &agent_id, (&why, true), &mut failure, &mut deadline).await;
                    }
                    // Awaited books that are due close at the top of the loop.
                }
                set = Self::next_service_set(&mut self.service) => {
                    self.forward_service_set(&members, set);
                }
                _ = snap.tick() => {
                    self.flush_checkpoint(&mut checkpoint, &members, &renewals, failure.as_ref(), &watch);
                    for j in unacked.drain(..) {
                        self.ack_done(&members[j]);
                    }
                    // Silence (a stopped process, a link that carries nothing) ends in a loss
                    // once renewals were withheld for a lease; a closed stream does not wait.
                    let silent: Vec<String> = members
                        .iter()
                        .filter(|m| matches!(m.state(), MemberState::Running) && m.heard.silent_for() > silent_lost)
                        .map(|m| m.agent_id.clone())
                        .collect();
                    for agent_id in silent {
                        let why = format!("silent for more than {:.1} s", silent_lost.as_secs_f64());
                        // A link that carries nothing back: what it sent since may yet come.
                        self.agent_lost(&mut members, &mut acc, &agent_id, (&why, true), &mut failure, &mut deadline).await;
                    }
                    let elapsed = Instant::now().saturating_duration_since(t0).as_secs_f64();
                    if let Ok(mut s) = acc.snapshot(elapsed) {
                        s.target_cpu_cores = watch.latest_cores();
                        let mut w = v1::LiveSnapshot::from(&s);
                        w.planned_duration_s = planned.as_secs_f64();
                        let _ = self.h.events.send(v1::RunEvent { event: Some(v1::run_event::Event::Snapshot(w)) });
                    }
                    if failure.is_none() && !live_thresholds.is_empty() {
                        if let Some(msg) = self.check_live(&acc, &live_thresholds, elapsed) {
                            self.stop_all(&members, Failure::Aborted(msg), &mut failure, &mut deadline).await;
                        }
                    }
                }
                input = self.rx.recv() => {
                    let Some(input) = input else { break };
                    match input {
                        RunInput::Progress { agent_id, progress } => {
                            scan = false;
                            let Some(&i) = index.get(&agent_id) else { continue };
                            let delivery = members[i].received.insert(&progress);
                            if delivery.is_new() {
                                self.merge(&mut acc, i, &agent_id, &progress, delivery);
                                if let Some(c) = &mut checkpoint {
                                    c.record(i, &progress);
                                }
                                if windowed && failure.is_none() && acc.closed_rows() > closed_seen {
                                    closed_seen = acc.closed_rows();
                                    let elapsed = Instant::now().saturating_duration_since(t0).as_secs_f64();
                                    if let Some(msg) = self.check_live(&acc, &live_thresholds, elapsed) {
                                        self.stop_all(&members, Failure::Aborted(msg), &mut failure, &mut deadline).await;
                                    }
                                }
                            }
                            // With a checkpoint, intervals are acknowledged once durable.
                            if checkpoint.is_none() {
                                renewals.ack(i, members[i].received.next);
                            }
                        }
                        RunInput::Done { agent_id, done } => {
                            if done.stopped_early && failure.is_none() {
                                // Its data is complete, but it did not deliver its share: the
                                // loss policy decides, and the run cannot be `succeeded`.
                                let why: String = if done.reason.is_empty() { "stopped early".into() } else { agent_text(&done.reason) };
                                self.agent_lost(&mut members, &mut acc, &agent_id, (&format!("stopped early: {why}"), false), &mut failure, &mut deadline).await;
                            }
                            if let Some(&i) = index.get(&agent_id) {
                                // Done, or a lost agent's books complete (it stays lost).
                                members[i].delivered();
                                renewals.retire(i);
                                tracing::info!(run = %self.h.run_id, agent = %agent_id, last = done.last_interval, early = done.stopped_early, "agent done");
                                if !members.iter().any(Member::outstanding) {
                                    break; // acknowledged once the report is stored
                                }
                                // Its Done is acknowledged once the checkpoint holds it: one
                                // flush (and its fsyncs) for the Dones that came together, as a
                                // fleet's do at the end (a flush each was most of a thousand-
                                // agent run's last second). The interval's flush takes the rest.
                                unacked.push(i);
                                if self.rx.is_empty() || unacked.len() >= MAX_UNACKED_DONES {
                                    self.flush_checkpoint(&mut checkpoint, &members, &renewals, failure.as_ref(), &watch);
                                    for j in unacked.drain(..) {
                                        self.ack_done(&members[j]);
                                    }
                                }
                            }
                            if !members.iter().any(Member::outstanding) {
                                break;
                            }
                            if failure.is_none() && members.iter().filter(|m| m.is_done()).count() == 1 {
                                self.h.set_state(RunState::Finishing, "waiting for the remaining agents");
                            }
                        }
                        RunInput::Failed { agent_id, reason } => {
                            if let Some(&i) = index.get(&agent_id) { renewals.retire(i) }
                            self.agent_lost(&mut members, &mut acc, &agent_id, (&format!("agent failed: {}", agent_text(&reason)), false), &mut failure, &mut deadline).await;
                        }
                        RunInput::Disconnected { agent_id, conn_id } => {
                            // A stream it already replaced closing late changes nothing.
                            let Some(&i) = index.get(&agent_id) else { continue };
                            let m = &mut members[i];
                            if m.conn_id != conn_id || !m.pending() {
                                continue;
                            }
                            renewals.retire(i);
                            m.move_to(MemberState::Away { until: Instant::now() + RECONNECT_WINDOW, window: RECONNECT_WINDOW });
                            tracing::warn!(run = %self.h.run_id, agent = %agent_id, "agent stream closed mid-run; waiting {:.1} s for it to reconnect", RECONNECT_WINDOW.as_secs_f64());
                            // Values it refreshes cannot reach the others while it is away,
                            // and tokens expire sooner than the grace ends: a member whose
                            // stream is up takes the refresh over now.
                            self.hand_over_setup(&members, i);
                        }
                        RunInput::Reconnected { agent_id, conn_id, tx, heard } => {
                            let Some(&i) = index.get(&agent_id) else { continue };
                            let m = &mut members[i];
                            m.conn_id = conn_id;
                            m.tx = tx.clone();
                            m.heard = heard.clone();
                            if matches!(m.state(), MemberState::Away { .. }) {
                                m.move_to(MemberState::Running);
                            }
                            if m.pending() && failure.is_none() {
                                // It may have missed a refresh of the setup values.
                                if self.setup.generation > 0 {
                                    let _ = tx.try_send(Ok(v1::ControllerMessage { msg: Some(Out::SetupValues(self.setup.clone())) }));
                                }
                                renewals.reattach(i, tx, heard);
                                tracing::info!(run = %self.h.run_id, agent = %agent_id, "agent resumed the run");
                            } else if !m.is_done() {
                                // Counted lost, or the run is ending: it must not go on loading.
                                let why = failure.as_ref().map_or("the run counted this agent lost", Failure::message).to_string();
                                let _ = tx.try_send(Ok(v1::ControllerMessage { msg: Some(Out::Abort(v1::Abort { run_id: self.h.run_id.clone(), reason: why })) }));
                            }
                        }
                        RunInput::Ready { .. } => {}
                        RunInput::SetupValues { agent_id, values } => {
                            if self.take_setup(&members, &agent_id, values) {
                                // Durable before any other agent has them.
                                self.flush_checkpoint(&mut checkpoint, &members, &renewals, failure.as_ref(), &watch);
                                self.pass_on_setup(&members);
                            }
                        }
                    }
                }
                _ = self.h.abort.cancelled(), if failure.is_none() => {
                    let reason = self.abort_reason();
                    self.abort_members(&members, &reason).await;
                    failure = Some(Failure::Aborted(reason));
                    deadline = deadline.min(Instant::now() + self.stop_wait());
                }
                _ = self.inner.shutdown.cancelled(), if !matches!(failure, Some(Failure::Aborted(_))) => {
                    if failure.is_none() && !self.inner.cfg.restart_grace.is_zero() {
                        self.flush_checkpoint(&mut checkpoint, &members, &renewals, None, &watch);
                        if checkpoint.is_some() {
                            // The next controller on this data directory re-adopts the run;
                            // its agents ride out the restart grace meanwhile.
                            tracing::warn!(run = %self.h.run_id, "controller shutting down: the run is checkpointed for the next controller on this data directory");
                            return;
                        }
                    }
                    failure = Some(Failure::Aborted("controller shut down".into()));
                    break;
                }
                _ = tokio::time::sleep_until(deadline), if members.iter().any(Member::pending) => {
                    renewals.stop();
                    for (i, m) in members.iter_mut().enumerate().filter(|(_, m)| m.pending()) {
                        tracing::warn!(agent = %m.agent_id, "agent did not finish in time; counting it lost");
                        m.move_to(MemberState::Lost { why: "did not finish in time".into(), books: Books::Partial });
                        acc.mark_lost(i);
                    }
                    if failure.is_none() && matches!(policy, AgentLossPolicy::Fail) {
                        failure = Some(Failure::Failed("agents did not finish in time".into()));
                    }
                    // Lost agents' books still awaited keep the run open until they are due.
                }
            }
        }
        drop(renewals);
        // However the loop ended, books still awaited close as they are.
        let every = Instant::now() + FAR_FUTURE;
        self.close_due_books(&mut members, &mut acc, (t0, every), &mut gaps);
        let duration_s = Instant::now().saturating_duration_since(t0).as_secs_f64();
        // Without a failure, lost agents (tolerated) or agents that stopped early still mean
        // the run delivered less than planned.
        let short: Vec<String> = members
            .iter()
            .filter_map(|m| Some(format!("agent {} was lost ({})", m.agent_id, m.lost_why()?)))
            .collect();
        let (outcome, mut message) = match failure {
            None if !short.is_empty() => (RunOutcome::Incomplete, Some(short.join("; "))),
            None => (RunOutcome::Succeeded, None),
            Some(Failure::Failed(m)) => (RunOutcome::Failed, Some(m)),
            Some(Failure::Aborted(m)) => (RunOutcome::Aborted, Some(m)),
        };
        if !gaps.is_empty() {
            // The gap between the books and what a target served is named, never silent.
            let head = message.map(|m| format!("{m}; ")).unwrap_or_default();
            message = Some(format!("{head}{}", gaps.join("; ")));
        }
        self.release();
        self.target_resources = watch.finish().await;
        self.finish(acc, outcome, message, started_at, duration_s);
        if let Some(c) = checkpoint {
            c.remove();
        }
        for m in members.iter().filter(|m| {
            m.is_done()
                || matches!(
                    m.state(),
                    MemberState::Lost {
                        books: Books::Complete,
                        ..
                    }
                )
        }) {
            self.ack_done(m);
        }
    }

    /// Closes the awaited books of lost agents that are due by `due` (not back in time):
    /// each is recorded in the report with where its books end and what it may have sent
    /// after, and named in `gaps`.
    fn close_due_books(
        &self,
        members: &mut [Member],
        acc: &mut RunAccumulator,
        (t0, due): (Instant, Instant),
        gaps: &mut Vec<String>,
    ) {
        let now = Instant::now();
        let cfg = &self.inner.cfg;
        let silence = crate::renew::silence_limit(cfg.lease, cfg.interval);
        // The last instant its load may run: renewals stop after `silence` without a word
        // from it, and its lease (with the restart grace, once its stream closed) runs out
        // after the last one; never past its schedule.
        let schedule_end = self
            .scenario
            .duration()
            .saturating_add(self.session_bound())
            .as_secs_f64();
        for (i, m) in members.iter_mut().enumerate() {
            if m.books_awaited().is_none_or(|until| until > due) {
                continue;
            }
            let last_heard = now.checked_sub(m.heard.silent_for()).unwrap_or(t0);
            let load_until = last_heard
                .saturating_duration_since(t0)
                .saturating_add(silence + cfg.lease + cfg.restart_grace)
                .as_secs_f64()
                .min(schedule_end);
            let delivered = m.received.next;
            let books_end = delivered as f64 * cfg.interval.as_secs_f64();
            if !m.close_books() {
                continue;
            }
            acc.mark_unreported(i, delivered, load_until - books_end);
            if let Some(u) = acc.unreported(i) {
                tracing::warn!(run = %self.h.run_id, agent = %m.agent_id, %u, "lost agent's books closed without its last data");
                gaps.push(format!("agent {}: {u}", m.agent_id));
            }
        }
    }

    /// Tells a member its Done is kept (it drops the run's data from its replay buffer).
    fn ack_done(&self, m: &Member) {
        let ack = v1::Ack {
            run_id: self.h.run_id.clone(),
        };
        let _ = m.tx.try_send(Ok(v1::ControllerMessage {
            msg: Some(Out::Ack(ack)),
        }));
    }

    /// Ends the run early with `why` (a lost agent the policy does not tolerate, a live
    /// threshold breached): every member is told to stop, and the run waits for their last
    /// data as long as any stopped run does (their graceful stop and a margin), so requests in
    /// flight at the stop are still recorded.
    pub(super) async fn stop_all(
        &self,
        members: &[Member],
        why: Failure,
        failure: &mut Option<Failure>,
        deadline: &mut Instant,
    ) {
        self.abort_members(members, why.message()).await;
        *failure = Some(why);
        *deadline = (*deadline).min(Instant::now() + self.stop_wait());
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
        self.h.set_state(RunState::Finishing, msg.clone());
        self.threshold_abort = Some(ThresholdAbort {
            expr: breach.expr,
            at_s: elapsed_s,
            measured: breach.measured,
            measured_text: breach.measured_text,
        });
        Some(msg)
    }
}
