//! Turning an `Assign` into a [`ShardRun`]: the scenario parsed and checked, the agent's data
//! rows taken, the target resolved and checked against the target policy, each workload's
//! session types compiled into a [`RunSpec`].

use std::sync::Arc;
use std::time::Duration;

use stampede_core::scenario::{LoadModel, Scenario, StepKind};
use stampede_core::schedule::Schedule;
use stampede_core::shard::{split_evenly, Shard};
use stampede_proto::v1;

use crate::http1::PreparedRequest;
use crate::runner::{self, RunSpec, ShardRun, StepPlan};
use crate::stream::FramedRequest;
use crate::udp::DatagramRequest;
use crate::{dynamic, setup, AgentConfig};

mod error;
pub(crate) use error::{AssignError, StepError};
mod target;

/// Parses and checks an assignment, resolves the target, and compiles the steps.
pub(crate) async fn prepare(
    cfg: &AgentConfig,
    a: &v1::Assign,
    mut data: stampede_proto::data::Received,
) -> Result<ShardRun, AssignError> {
    let scenario = Scenario::from_yaml(&a.scenario).map_err(AssignError::Scenario)?;
    let shares = data.take(&a.run_id, &scenario, &a.data)?;
    let shard = Shard {
        index: a.shard_index,
        count: a.shard_count,
        weights: a.weights.clone(),
    };
    if shard.count > stampede_core::scenario::MAX_AGENTS {
        return Err(AssignError::TooManyShards {
            count: shard.count,
            max: stampede_core::scenario::MAX_AGENTS,
        });
    }
    shard.filter().map_err(AssignError::Shard)?;
    let planned = stampede_core::plan::Plan::shard_sessions(&scenario, &shard, a.seed)
        .map_err(AssignError::Shard)?;
    if scenario.has_env_refs() {
        return Err(AssignError::EnvRefs);
    }
    // The data supply with the run's seed (the CLI and the controller check it too when the
    // schedule does not depend on the seed): refused before any load.
    scenario
        .check_data_supply(a.seed)
        .map_err(AssignError::DataSupply)?;
    // Every target once, each workload pointing at its own: workloads naming the same URL
    // share its connections' setup and its endpoints.
    let views = scenario.workload_views();
    let several_targets = scenario.targets().len() > 1;
    let mut built: Vec<target::Built> = Vec::new();
    let mut of_workload = Vec::with_capacity(views.len());
    let mut away_of_workload: Vec<Vec<usize>> = Vec::with_capacity(views.len());
    // `endpoints: service`: the controller's addresses of the Service's ready pods, for the
    // scenario's own target; its name (one virtual address) is looked up nowhere.
    let service = if scenario.endpoints.is_service() {
        let set =
            stampede_proto::service::from_wire("assign.service_endpoints", &a.service_endpoints)?;
        if set.is_empty() {
            return Err(AssignError::ServiceEmpty);
        }
        Some(set.into_iter().map(|e| e.address).collect::<Vec<_>>())
    } else {
        None
    };
    for w in &views {
        let Some(url) = w.target else {
            return Err(AssignError::NoTarget {
                field: w.target_field.clone(),
            });
        };
        // The scenario's `endpoints:` belong to its own target, whoever names it.
        let top = scenario.target.as_ref() == Some(url);
        let i = match built.iter().position(|b| &b.url == url) {
            Some(i) => i,
            None => {
                let field = if top {
                    "target"
                } else {
                    w.target_field.as_str()
                };
                let listed = if top {
                    target::Listed::of(&scenario.endpoints, service.as_deref())
                } else {
                    target::Listed::None
                };
                built.push(
                    target::build(cfg, &scenario, url, field, listed, several_targets).await?,
                );
                built.len() - 1
            }
        };
        of_workload.push(i);
        // The targets its steps name besides its own, each built once for the run.
        let mut away = Vec::new();
        for t in &w.types {
            for (j, s) in t.steps.iter().enumerate() {
                let Some(url) = &s.target else { continue };
                let k = match built.iter().position(|b| &b.url == url) {
                    Some(k) => k,
                    None => {
                        let field = format!("{}[{j}].target", t.path);
                        built.push(
                            target::build(
                                cfg,
                                &scenario,
                                url,
                                &field,
                                target::Listed::None,
                                several_targets,
                            )
                            .await?,
                        );
                        built.len() - 1
                    }
                };
                if !away.contains(&k) {
                    away.push(k);
                }
            }
        }
        away_of_workload.push(away);
    }
    // Setup steps run against the scenario's own target.
    let setup_target = match &scenario.target {
        Some(url) => {
            let b = match built.iter().find(|b| &b.url == url) {
                Some(b) => b.clone(),
                None => {
                    let listed = target::Listed::of(&scenario.endpoints, service.as_deref());
                    target::build(cfg, &scenario, url, "target", listed, false).await?
                }
            };
            Some(setup::Target {
                endpoint: b.endpoint.clone(),
                authority: b.host_header.clone(),
                prefix: b.url.prefix().to_string(),
                https: b.https,
            })
        }
        None => None,
    };
    let follow: Vec<_> = built.iter().filter_map(|b| b.follow.clone()).collect();
    let service = built.iter().find_map(|b| b.service.clone());
    let (context, slots) =
        dynamic::Context::new(&scenario, shares, a.seed, a.shard_index, &a.run_id);
    // Setup steps run here, on the one agent the controller asked to, before Ready: outside
    // any measurement. The others receive the values in their Start.
    let setup_values = if a.run_setup && !scenario.setup.is_empty() {
        let setup_target = setup_target
            .as_ref()
            .ok_or(AssignError::SetupWithoutTarget)?;
        let values = setup::run(
            &scenario,
            &context,
            setup_target,
            scenario.request_timeout.0,
        )
        .await?;
        context.set_setup(values.clone());
        values
    } else {
        Vec::new()
    };
    let mut any_dynamic = false;
    let mut types = Vec::with_capacity(views.len());
    for ((w, &t), away) in views.iter().zip(&of_workload).zip(&away_of_workload) {
        let compiler = Compiler {
            scenario: &scenario,
            slots: &slots,
            home: &built[t],
            away: away.iter().map(|&k| &built[k]).collect(),
        };
        let mut compiled = Vec::with_capacity(w.types.len());
        for t in &w.types {
            compiled.push(compiler.steps(t, &mut any_dynamic)?);
        }
        types.push(compiled);
    }
    let interval = Duration::from_millis(a.interval_ms.clamp(100, 60_000));
    let several = scenario.named_workloads();
    // This shard's connections of each closed or constant load: the same even split the
    // controller reports, all loads together within the agent's capacity.
    let pooled: u64 = views
        .iter()
        .filter_map(|w| w.load)
        .map(|l| share_of(l.connections, a).0)
        .sum();
    if pooled > u64::from(cfg.capacity.max(1)) {
        return Err(AssignError::Capacity {
            share: pooled,
            capacity: cfg.capacity,
        });
    }
    let dynamic = (any_dynamic || !context_is_empty(&scenario)).then(|| Arc::new(context));
    let n_phases: usize = views.iter().map(|w| w.phase_count()).sum();
    let mut workloads = Vec::with_capacity(views.len());
    for (((w, types), &t), away) in views
        .iter()
        .zip(types)
        .zip(&of_workload)
        .zip(&away_of_workload)
    {
        let mode = match w.load {
            None => runner::Mode::Arrivals,
            Some(load) => {
                let (share, first) = share_of(load.connections, a);
                match load.model {
                    LoadModel::Closed => runner::Mode::Closed {
                        connections: share as usize,
                        duration: load.duration.0,
                        first,
                        total: u64::from(load.connections),
                        streams: u64::from(load.streams()),
                    },
                    LoadModel::Constant => runner::Mode::Constant {
                        connections: share as usize,
                        first,
                        streams: u64::from(load.streams()),
                    },
                }
            }
        };
        let mix = w.mix();
        let shards = w.shards(a.shard_count);
        let mix_offset = mix.offset(u64::from(a.shard_index), u64::from(shards));
        let filter = if a.shard_index < shards {
            Some(
                Shard {
                    index: a.shard_index,
                    count: shards,
                    weights: a
                        .weights
                        .get(..shards as usize)
                        .unwrap_or_default()
                        .to_vec(),
                }
                .filter()
                .map_err(AssignError::Shard)?,
            )
        } else {
            None
        };
        let phase_range = w.phase_base..w.phase_base + w.phase_count();
        workloads.push(Arc::new(RunSpec {
            schedule: Schedule::new(
                &w.effective_phases(false),
                scenario.arrival,
                w.seed(a.seed, several),
            )
            .with_resolution(scenario.arrival_resolution()),
            mode,
            ramp: w
                .load
                .filter(|l| !l.stages.is_empty())
                .map(|l| (l.stages.clone().into(), a.shard_index, a.shard_count)),
            start: w.start,
            phases: w.phase_count(),
            phase_base: w.phase_base as u32,
            planned: planned.get(phase_range).unwrap_or_default().to_vec(),
            request_timeout: scenario.request_timeout.0,
            filter,
            target: built[t].endpoint.clone(),
            endpoints: built[t].endpoints.clone(),
            away: away
                .iter()
                .map(|&k| runner::Away {
                    target: built[k].endpoint.clone(),
                    endpoints: built[k].endpoints.clone(),
                })
                .collect(),
            h2: RunSpec::h2_client_for(&types),
            types,
            mix,
            mix_offset,
            count_types: w.mixed.then_some(w.type_base as u32),
            capacity: cfg.capacity.max(1) as usize,
            dynamic: dynamic.clone(),
            seed: a.seed,
        }));
    }
    let refresh = match (scenario.setup_refresh, &dynamic, setup_target) {
        (Some(every), Some(_), Some(setup_target)) => Some(Arc::new(setup::Refresh {
            scenario: Arc::new(scenario.clone()),
            target: setup_target,
            every: every.0,
        })),
        _ => None,
    };
    Ok(ShardRun {
        run_id: a.run_id.clone(),
        interval,
        phases: n_phases,
        steps: scenario.step_names().len(),
        workloads,
        setup_values,
        context: dynamic,
        refresh,
        runs_setup: a.run_setup,
        graceful_stop: scenario.graceful_stop(),
        samples: scenario.samples,
        masked: scenario.masked.clone(),
        debug: scenario.debug,
        follow,
        service,
    })
}

/// This shard's part of `connections` (an even split, sizes differing by at most one) and
/// the global index of its first connection.
fn share_of(connections: u32, a: &v1::Assign) -> (u64, u64) {
    let split = split_evenly(u64::from(connections), a.shard_count);
    let share = split.get(a.shard_index as usize).copied().unwrap_or(0);
    let first = split.iter().take(a.shard_index as usize).sum();
    (share, first)
}

/// What compiling a session type's steps needs from the run.
struct Compiler<'a> {
    scenario: &'a Scenario,
    slots: &'a std::collections::BTreeMap<String, usize>,
    /// The workload's target (Host header, prefix, HTTP version).
    home: &'a target::Built,
    /// The targets its steps name besides it: a step's `via` is its place here.
    away: Vec<&'a target::Built>,
}

impl Compiler<'_> {
    /// Compiles one session type's steps for the hot path, numbering its request steps from
    /// its place in the run's global step order. Errors name the step's field.
    fn steps(
        &self,
        t: &stampede_core::workload::TypeView<'_>,
        any_dynamic: &mut bool,
    ) -> Result<Vec<StepPlan>, Box<StepError>> {
        let (scenario, slots) = (self.scenario, self.slots);
        let mut ordinal = t.step_base;
        let mut steps = Vec::with_capacity(t.steps.len());
        for (i, s) in t.steps.iter().enumerate() {
            let at = || format!("{}[{i}]", t.path);
            // A step with a target of its own is compiled for it (its Host, prefix, scheme).
            let via = s
                .target
                .as_ref()
                .and_then(|u| self.away.iter().position(|b| &b.url == u));
            let b = via.map_or(self.home, |k| self.away[k]);
            let via = match via.map(u8::try_from) {
                None => None,
                Some(Ok(k)) => Some(k),
                Some(Err(_)) => return Err(StepError::TooManyTargets { at: at() }.into()),
            };
            let (host_header, prefix, https, http2) =
                (b.host_header.as_str(), b.url.prefix(), b.https, b.http2);
            let (repeat, new_connection) = (s.repeat(), s.new_connection);
            let plan = match &s.kind {
                StepKind::Http(h)
                    if !h.is_static()
                        || !s.extract.is_empty()
                        || s.check.is_some()
                        || scenario.cookies
                        || scenario.debug > 0
                        || h.stream.is_some() =>
                {
                    if http2 && h.stream.is_some() {
                        return Err(StepError::StreamOverH2 { at: at() }.into());
                    }
                    *any_dynamic = true;
                    StepPlan::HttpDynamic {
                        ordinal,
                        step: Arc::new(
                            dynamic::DynamicHttp::new(
                                h,
                                &s.extract,
                                s.check.as_ref(),
                                scenario,
                                slots,
                                host_header,
                                prefix,
                                https,
                            )
                            .map_err(|error| StepError::Http { at: at(), error })?,
                        ),
                        repeat,
                        new_connection,
                        via,
                    }
                }
                StepKind::Http(h) => StepPlan::Http {
                    ordinal,
                    request: PreparedRequest::new(h, host_header, prefix),
                    h2: if http2 {
                        Some(
                            crate::h2::H2Request::new(h, https, host_header, prefix)
                                .map_err(|error| StepError::H2 { at: at(), error })?,
                        )
                    } else {
                        None
                    },
                    expect: h.expect_status.clone(),
                    repeat,
                    new_connection,
                    via,
                },
                StepKind::Tcp(tcp) => {
                    let send = dynamic_send(s, &tcp.send, scenario, slots, any_dynamic)
                        .map_err(|error| StepError::TcpSend { at: at(), error })?;
                    StepPlan::Tcp {
                        ordinal,
                        request: FramedRequest::new(tcp)
                            .map_err(|error| StepError::Tcp { at: at(), error })?,
                        send,
                        repeat,
                        new_connection,
                    }
                }
                StepKind::Grpc(g) => {
                    let stream = crate::grpc::StreamCall::new(g, s, scenario, slots)
                        .map_err(|error| StepError::Grpc { at: at(), error })?
                        .map(Arc::new);
                    // A streaming call renders its own templates.
                    let dynamic = match stream {
                        Some(_) => None,
                        None => crate::grpc::DynamicCall::new(g, s, scenario, slots)
                            .map_err(|error| StepError::Grpc { at: at(), error })?
                            .map(Arc::new),
                    };
                    *any_dynamic |=
                        dynamic.is_some() || stream.as_ref().is_some_and(|s| s.is_dynamic());
                    StepPlan::Grpc {
                        ordinal,
                        request: crate::grpc::GrpcRequest::new(
                            g,
                            https,
                            host_header,
                            scenario.request_timeout.0,
                        )
                        .map_err(|error| StepError::Grpc { at: at(), error })?,
                        dynamic,
                        stream,
                        repeat,
                        new_connection,
                    }
                }
                StepKind::Ws(w) => {
                    *any_dynamic = true;
                    StepPlan::Ws {
                        ordinal,
                        step: Arc::new(
                            dynamic::DynamicWs::new(
                                w,
                                &s.extract,
                                s.check.as_ref(),
                                scenario,
                                slots,
                                host_header,
                                prefix,
                            )
                            .map_err(|error| StepError::Ws { at: at(), error })?,
                        ),
                        repeat,
                        new_connection: false,
                    }
                }
                StepKind::Udp(u) => {
                    let send = dynamic_send(s, &u.send, scenario, slots, any_dynamic)
                        .map_err(|error| StepError::UdpSend { at: at(), error })?;
                    StepPlan::Udp {
                        ordinal,
                        request: DatagramRequest::new(u)
                            .map_err(|error| StepError::Udp { at: at(), error })?,
                        send,
                        repeat,
                        new_connection,
                    }
                }
                StepKind::Think(think) => {
                    steps.push(StepPlan::Think(*think));
                    continue;
                }
            };
            ordinal += 1;
            steps.push(plan);
        }
        Ok(steps)
    }
}

/// A tcp or udp step's dynamic part, when its `send` is a template or it reads its reply
/// (`extract`, `check`); `None` keeps the step on the static path.
fn dynamic_send(
    step: &stampede_core::scenario::Step,
    send: &stampede_core::protocol::Payload,
    scenario: &Scenario,
    slots: &std::collections::BTreeMap<String, usize>,
    any_dynamic: &mut bool,
) -> Result<Option<Arc<dynamic::DynamicSend>>, dynamic::SendCompileError> {
    let d = dynamic::DynamicSend::new(send, &step.extract, step.check.as_ref(), scenario, slots)?;
    *any_dynamic |= d.is_some();
    Ok(d.map(Arc::new))
}

/// Data sources bind rows (and `stop` skips sessions) even when no step reads them.
fn context_is_empty(scenario: &Scenario) -> bool {
    scenario.data.is_empty()
}
