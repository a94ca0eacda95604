//! Turning an `Assign` into a [`ShardRun`]: the scenario parsed and checked, the agent's data
//! rows taken, the target resolved and checked against the target policy, each workload's
//! session types compiled into a [`RunSpec`].

use super::*;
use crate::runner::EndpointSet;
use stampede_core::scenario::StepKind;

/// Parses and checks an assignment, resolves the target, and compiles the steps.
pub(crate) async fn prepare(
    cfg: &AgentConfig,
    a: &v1::Assign,
    mut data: stampede_proto::data::Received,
) -> Result<ShardRun, String> {
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
    shard.filter().map_err(|e| format!("shard: {e}"))?;
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
    let resolver = cfg
        .resolver
        .clone()
        .unwrap_or_else(crate::resolve::DnsResolver::system);
    // `endpoints: service`: the controller's addresses of the Service's ready pods; its name
    // (one virtual address) is looked up nowhere.
    let service_addrs = if scenario.endpoints.is_service() {
        let set =
            stampede_proto::service::from_wire("assign.service_endpoints", &a.service_endpoints)
                .map_err(|e| e.to_string())?;
        if set.is_empty() {
            return Err("endpoints: the target's Service has no ready endpoint".into());
        }
        Some(set.into_iter().map(|e| e.address).collect::<Vec<_>>())
    } else {
        None
    };
    let (mut endpoint, resolved) = match &service_addrs {
        Some(addrs) => (base_endpoint(transport, addrs[0]), None),
        None => resolve(&target, &resolver).await?,
    };
    let host_header = target.authority();
    // The addresses the run will really use, after resolution: a name that resolves to a
    // refused address is refused too.
    if let Some(r) = &resolved {
        for addr in &r.addrs {
            cfg.target_policy.check(*addr)?;
        }
    } else if service_addrs.is_some() {
        // Each of the Service's endpoints is checked as it is taken (below).
    } else if let Endpoint::Http(addr, _) | Endpoint::Tcp(addr) | Endpoint::Udp(addr) = &endpoint {
        cfg.target_policy.check(*addr)?;
    }
    // gRPC is HTTP/2 underneath: h2c with prior knowledge, or h2 by ALPN over TLS.
    let grpc = matches!(transport, Transport::Grpc | Transport::Grpcs);
    let http2 = grpc || scenario.http_version == Some(stampede_core::scenario::HttpVersion::Http2);
    let https = transport.is_tls();
    let websocket = matches!(transport, Transport::Ws | Transport::Wss);
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
        endpoint = if websocket {
            Endpoint::Ws(addr, tls)
        } else if http2 {
            Endpoint::H2(addr, tls)
        } else {
            Endpoint::Http(addr, tls)
        };
    }
    // `endpoints:`: the same transport (and TLS name) at each listed address, each checked
    // against the target policy like the target's own address.
    let addrs = stampede_core::endpoints::parse(scenario.endpoints.list())
        .map_err(|(path, why)| format!("{path}: {why}"))?;
    let mut endpoints = Vec::with_capacity(addrs.len());
    for (i, addr) in addrs.into_iter().enumerate() {
        cfg.target_policy
            .check(addr)
            .map_err(|e| format!("endpoints[{i}]: {e}"))?;
        endpoints.push((addr, at_address(&endpoint, addr)?));
    }
    // Without the list, a target name's addresses (all of them, followed during the run).
    let mut follow = None;
    let mut service = None;
    let endpoints = if let Some(addrs) = &service_addrs {
        let s = crate::service::ServiceSet {
            set: Arc::new(EndpointSet::fixed(Vec::new())),
            template: endpoint.clone(),
            policy: cfg.target_policy.clone(),
        };
        // Every pod is a row of the report, even when the Service has one.
        s.set.measure();
        if s.replace(addrs) == 0 {
            return Err(format!(
                "endpoints: the target policy refuses every ready endpoint of the Service ({})",
                addrs
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let set = s.set.clone();
        service = Some(Arc::new(s));
        set
    } else if !endpoints.is_empty() {
        Arc::new(EndpointSet::fixed(endpoints))
    } else if let (Some(r), Some(host)) = (resolved, crate::resolve::host_name(target.host())) {
        let f = crate::resolve::Follow {
            resolver,
            host: host.to_string(),
            port: r.addrs[0].port(),
            set: Arc::default(),
            template: endpoint.clone(),
            policy: cfg.target_policy.clone(),
            first_refresh: r.refresh,
        };
        f.set.replace(f.endpoints(&r.addrs), true);
        let set = f.set.clone();
        follow = Some(Arc::new(f));
        set
    } else {
        Arc::default()
    };
    let (context, slots) =
        dynamic::Context::new(&scenario, shares, a.seed, a.shard_index, &a.run_id);
    // Setup steps run here, on the one agent the controller asked to, before Ready: outside
    // any measurement. The others receive the values in their Start.
    let setup_target = setup::Target {
        endpoint: endpoint.clone(),
        authority: host_header.clone(),
        prefix: target.prefix().to_string(),
        https,
    };
    let setup_values = if a.run_setup {
        let values = setup::run(
            &scenario,
            &context,
            &setup_target,
            scenario.request_timeout.0,
        )
        .await?;
        context.set_setup(values.clone());
        values
    } else {
        Vec::new()
    };
    let mut any_dynamic = false;
    let compiler = Compiler {
        scenario: &scenario,
        slots: &slots,
        host_header: &host_header,
        prefix: target.prefix(),
        https,
        http2,
    };
    let views = scenario.workload_views();
    let mut types = Vec::with_capacity(views.len());
    for w in &views {
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
        return Err(format!(
            "load.connections: this agent's share is {pooled} connections, more than its capacity of {}",
            cfg.capacity
        ));
    }
    let dynamic = (any_dynamic || !context_is_empty(&scenario)).then(|| Arc::new(context));
    let n_phases: usize = views.iter().map(|w| w.phase_count()).sum();
    let mut workloads = Vec::with_capacity(views.len());
    for (w, types) in views.iter().zip(types) {
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
                .map_err(|e| format!("shard: {e}"))?,
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
            target: endpoint.clone(),
            endpoints: endpoints.clone(),
            types,
            mix,
            mix_offset,
            count_types: w.mixed.then_some(w.type_base as u32),
            capacity: cfg.capacity.max(1) as usize,
            dynamic: dynamic.clone(),
            seed: a.seed,
        }));
    }
    let refresh = match (scenario.setup_refresh, &dynamic) {
        (Some(every), Some(_)) => Some(Arc::new(setup::Refresh {
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
    host_header: &'a str,
    prefix: &'a str,
    https: bool,
    http2: bool,
}

impl Compiler<'_> {
    /// Compiles one session type's steps for the hot path, numbering its request steps from
    /// its place in the run's global step order. Errors name the step's field.
    fn steps(
        &self,
        t: &stampede_core::workload::TypeView<'_>,
        any_dynamic: &mut bool,
    ) -> Result<Vec<StepPlan>, String> {
        let Self {
            scenario,
            slots,
            host_header,
            prefix,
            https,
            http2,
        } = *self;
        let mut ordinal = t.step_base;
        let mut steps = Vec::with_capacity(t.steps.len());
        for (i, s) in t.steps.iter().enumerate() {
            let at = format!("{}[{i}]", t.path);
            let (repeat, new_connection) = (s.repeat(), s.new_connection);
            let plan = match &s.kind {
                StepKind::Http(h)
                    if !h.is_static()
                        || !s.extract.is_empty()
                        || s.check.is_some()
                        || scenario.cookies
                        || h.stream.is_some() =>
                {
                    if http2 && h.stream.is_some() {
                        return Err(format!(
                            "{at}.http.stream: streamed replies are read over HTTP/1.1 (http_version: \"1.1\")"
                        ));
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
                            .map_err(|e| format!("{at}.{e}"))?,
                        ),
                        repeat,
                        new_connection,
                    }
                }
                StepKind::Http(h) => StepPlan::Http {
                    ordinal,
                    request: PreparedRequest::new(h, host_header, prefix),
                    h2: if http2 {
                        Some(
                            crate::h2::H2Request::new(h, https, host_header, prefix)
                                .map_err(|e| format!("{at}.http.{e}"))?,
                        )
                    } else {
                        None
                    },
                    expect: h.expect_status.clone(),
                    repeat,
                    new_connection,
                },
                StepKind::Tcp(tcp) => {
                    let send = dynamic_send(s, &tcp.send, scenario, slots, any_dynamic)
                        .map_err(|e| format!("{at}.tcp.{e}"))?;
                    StepPlan::Tcp {
                        ordinal,
                        request: FramedRequest::new(tcp).map_err(|e| format!("{at}.tcp.{e}"))?,
                        send,
                        repeat,
                        new_connection,
                    }
                }
                StepKind::Grpc(g) => {
                    let dynamic = crate::grpc::DynamicCall::new(g, scenario, slots)
                        .map_err(|e| format!("{at}.grpc.{e}"))?
                        .map(Arc::new);
                    *any_dynamic |= dynamic.is_some();
                    StepPlan::Grpc {
                        ordinal,
                        request: crate::grpc::GrpcRequest::new(
                            g,
                            https,
                            host_header,
                            scenario.request_timeout.0,
                        )
                        .map_err(|e| format!("{at}.grpc.{e}"))?,
                        dynamic,
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
                            .map_err(|e| format!("{at}.{e}"))?,
                        ),
                        repeat,
                        new_connection: false,
                    }
                }
                StepKind::Udp(u) => {
                    let send = dynamic_send(s, &u.send, scenario, slots, any_dynamic)
                        .map_err(|e| format!("{at}.udp.{e}"))?;
                    StepPlan::Udp {
                        ordinal,
                        request: DatagramRequest::new(u).map_err(|e| format!("{at}.udp.{e}"))?,
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
) -> Result<Option<Arc<dynamic::DynamicSend>>, String> {
    let d = dynamic::DynamicSend::new(send, &step.extract, step.check.as_ref(), scenario, slots)?;
    *any_dynamic |= d.is_some();
    Ok(d.map(Arc::new))
}

/// Data sources bind rows (and `stop` skips sessions) even when no step reads them.
fn context_is_empty(scenario: &Scenario) -> bool {
    scenario.data.is_empty()
}

/// The endpoint `target` (resolved, with its TLS client) at another address.
fn at_address(target: &Endpoint, addr: std::net::SocketAddr) -> Result<Endpoint, String> {
    Ok(match target {
        Endpoint::Http(_, tls) => Endpoint::Http(addr, tls.clone()),
        Endpoint::H2(_, tls) => Endpoint::H2(addr, tls.clone()),
        Endpoint::Tcp(_) => Endpoint::Tcp(addr),
        Endpoint::Udp(_) => Endpoint::Udp(addr),
        Endpoint::Ws(_, tls) => Endpoint::Ws(addr, tls.clone()),
        Endpoint::Unix(_) => {
            return Err("endpoints: a unix:// target has one socket path, no addresses".into())
        }
    })
}

/// Resolves the target: its first address, and every address of a host name (`None` for an
/// IP address or a socket path).
async fn resolve(
    target: &stampede_core::target::Target,
    resolver: &crate::resolve::DnsResolver,
) -> Result<(Endpoint, Option<crate::resolve::Resolved>), String> {
    if let Some(path) = target.unix_path() {
        return Ok((Endpoint::Unix(path.into()), None));
    }
    let authority = target.socket_authority().unwrap_or_default();
    let (addr, resolved) = match crate::resolve::host_name(target.host()) {
        Some(host) => {
            let port = authority
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse().ok())
                .unwrap_or_default();
            let r = resolver.lookup(host, port).await.map_err(|e| {
                let why = std::error::Error::source(&e).map_or(String::new(), |s| format!(": {s}"));
                format!("target: {e}{why}")
            })?;
            (r.addrs[0], Some(r))
        }
        None => (
            authority
                .parse()
                .map_err(|_| format!("target: `{authority}` is not an address"))?,
            None,
        ),
    };
    Ok((base_endpoint(target.transport(), addr), resolved))
}

/// The endpoint of `transport` at `addr`, before TLS and the HTTP version are settled.
fn base_endpoint(transport: Transport, addr: std::net::SocketAddr) -> Endpoint {
    match transport {
        Transport::Tcp => Endpoint::Tcp(addr),
        Transport::Udp => Endpoint::Udp(addr),
        _ => Endpoint::Http(addr, None),
    }
}
