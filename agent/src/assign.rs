//! Turning an `Assign` into a [`RunSpec`]: the scenario parsed and checked, the agent's data
//! rows taken, the target resolved and checked against the target policy, the steps compiled.

use super::*;

/// Parses and checks an assignment, resolves the target, and compiles the steps.
pub(crate) async fn prepare(
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
    // gRPC is HTTP/2 underneath: h2c with prior knowledge, or h2 by ALPN over TLS.
    let grpc = matches!(transport, Transport::Grpc | Transport::Grpcs);
    let http2 = grpc || scenario.http_version == Some(stampede_core::scenario::HttpVersion::Http2);
    let https = transport.is_tls();
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
        } else if let Some(g) = &s.grpc {
            StepPlan::Grpc {
                ordinal,
                request: crate::grpc::GrpcRequest::new(
                    g,
                    https,
                    &host_header,
                    scenario.request_timeout.0,
                )
                .map_err(|e| format!("session[{i}].grpc.{e}"))?,
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
