//! Before the start: wait for idle agents, check the port budget, assign shards, collect Ready.

use stampede_core::plan::Plan;
use stampede_proto::v1::{self, controller_message::Msg as Out};
use tokio::time::Instant;

use super::member::{agent_text, is_member, Member, MemberState};
use super::{Driver, Failure, RunInput, RunState};
use crate::lock;

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

/// Setup values an agent sent that do not fit the scenario: the run fails (or a refresh is
/// dropped) rather than hand them to every agent.
#[derive(Debug, thiserror::Error)]
pub(super) enum SetupValuesError {
    /// Not one value per name the setup steps extract.
    #[error("{got} setup values, the setup steps extract {names}")]
    Count { got: usize, names: usize },
    /// A value past the extraction bound.
    #[error(
        "setup value {name}: {len} bytes, at most {}",
        stampede_core::extract::MAX_VALUE
    )]
    TooLong { name: String, len: usize },
}

impl Driver {
    /// Waits for agents, assigns shards and collects Ready.
    pub(super) async fn prepare(&mut self) -> Result<(Vec<Member>, Plan, u64), Failure> {
        let n = self.n as usize;
        // `endpoints: service`: the Service's pods, known before any agent is taken.
        if self.scenario.endpoints.is_service() {
            self.h
                .set_state(RunState::Pending, "reading the target Service's endpoints");
            self.follow_service()
                .await
                .map_err(|e| Failure::Failed(e.to_string()))?;
        }
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
                    RunState::Pending,
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
            .set_state(RunState::Assigning, format!("assigning {n} shards"));
        let seed = self.scenario.seed.unwrap_or_else(rand::random);
        let plan = Plan::new(&self.scenario, self.n, &[], seed)
            .map_err(|e| Failure::Failed(format!("plan: {e}")))?;
        self.check_ports(&picked, seed)?;
        // With the run's seed: the rows must last (on_exhausted: fail) before any load.
        self.scenario
            .check_data_supply(seed)
            .map_err(|e| Failure::Failed(e.to_string()))?;
        let shares = crate::data::Shares::new(&self.scenario, self.n, seed)
            .map_err(|e| Failure::Failed(e.to_string()))?;
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
                let mut m =
                    Member::assigned(agent_id.clone(), *conn_id, a.tx.clone(), a.heard.clone());
                m.offset_ns = a.clock.offset_ns;
                m.rtt_ns = a.clock.rtt_ns.unwrap_or(0);
                members.push(m);
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
                run_setup: i == 0 && !self.scenario.setup.is_empty(),
                restart_grace_ms: u64::try_from(self.inner.cfg.restart_grace.as_millis())
                    .unwrap_or(u64::MAX),
                service_endpoints: self
                    .service
                    .as_ref()
                    .map(|w| stampede_proto::service::to_wire(&w.current()))
                    .unwrap_or_default(),
            };
            let _ =
                m.tx.send(Ok(v1::ControllerMessage {
                    msg: Some(Out::Assign(assign)),
                }))
                .await;
        }
        let deadline = Instant::now() + self.inner.cfg.ready_timeout;
        while members.iter().any(|m| !m.is_ready()) {
            let input = tokio::select! {
                i = self.rx.recv() => i,
                _ = tokio::time::sleep_until(deadline) => {
                    let slow: Vec<&str> = members.iter().filter(|m| !m.is_ready()).map(|m| m.agent_id.as_str()).collect();
                    return Err(Failure::Failed(format!("agents did not acknowledge their shard in time: {}", slow.join(", "))));
                }
                _ = self.h.abort.cancelled() => return Err(Failure::Aborted(self.abort_reason())),
                _ = self.inner.shutdown.cancelled() => return Err(Failure::Aborted("controller shut down".into())),
            };
            match input {
                Some(RunInput::Ready {
                    agent_id,
                    setup_values,
                    ..
                }) => {
                    let Some(i) = members.iter().position(|m| m.agent_id == agent_id) else {
                        continue;
                    };
                    members[i].move_to(MemberState::Ready);
                    if i == 0 && !self.scenario.setup.is_empty() {
                        if let Err(why) = self.check_setup_values(&setup_values) {
                            self.abort_members(&members, "the setup failed").await;
                            return Err(Failure::Failed(format!(
                                "agent {agent_id} ran the setup: {why}"
                            )));
                        }
                        self.setup.values = setup_values;
                    }
                }
                // Only a member's word counts: any agent's stream may name this run.
                Some(RunInput::Failed { agent_id, reason }) if is_member(&members, &agent_id) => {
                    self.abort_members(&members, "another agent failed").await;
                    return Err(Failure::Failed(format!(
                        "agent {agent_id} refused its shard: {}",
                        agent_text(&reason)
                    )));
                }
                Some(RunInput::Disconnected { agent_id, .. }) if is_member(&members, &agent_id) => {
                    self.abort_members(&members, "another agent was lost").await;
                    return Err(Failure::Failed(format!(
                        "agent {agent_id} was lost before the start"
                    )));
                }
                Some(_) | None => {}
            }
        }
        self.h.set_state(
            RunState::Ready,
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
        Ok((members, plan, seed))
    }

    /// Setup values as an agent sent them fit the scenario: one per name the setup steps
    /// extract, each within the extraction bound.
    pub(super) fn check_setup_values(&self, values: &[String]) -> Result<(), SetupValuesError> {
        let names = self.scenario.setup_names();
        if values.len() != names.len() {
            return Err(SetupValuesError::Count {
                got: values.len(),
                names: names.len(),
            });
        }
        let limit = stampede_core::extract::MAX_VALUE;
        match names.iter().zip(values).find(|(_, v)| v.len() > limit) {
            Some((name, v)) => Err(SetupValuesError::TooLong {
                name: name.to_string(),
                len: v.len(),
            }),
            None => Ok(()),
        }
    }

    /// The port budget (`docs/design.md`): refuses, before anything is assigned, a run whose
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
}
