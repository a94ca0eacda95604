//! One target of a run, made ready once however many workloads name it: its address (or a
//! name's addresses, followed), the target policy's verdict on each, its TLS client, its set
//! of endpoints, and what compiling its steps needs (Host header, prefix, HTTP version).

use std::net::SocketAddr;
use std::sync::Arc;

use stampede_core::protocol::Transport;
use stampede_core::scenario::Scenario;
use stampede_core::target_policy::TargetPolicyError;

use super::AssignError;
use crate::runner::{Endpoint, EndpointSet};
use crate::{tls, AgentConfig};

/// Where a target's several addresses come from, once the assignment is read.
#[derive(Clone, Copy)]
pub(super) enum Listed<'a> {
    /// Its own address, or its name's addresses (a workload's target, or no `endpoints:`).
    None,
    /// `endpoints: [...]` as written, each checked here.
    Addresses(&'a [String]),
    /// `endpoints: service`: the ready pods the controller sent; the name is never looked up.
    Service(&'a [SocketAddr]),
}

impl<'a> Listed<'a> {
    /// The scenario's `endpoints:` with the Service's pods the assignment carried, if any.
    pub(super) fn of(
        endpoints: &'a stampede_core::endpoints::Endpoints,
        service: Option<&'a [SocketAddr]>,
    ) -> Self {
        match service {
            Some(addrs) => Self::Service(addrs),
            None if endpoints.list().is_empty() => Self::None,
            None => Self::Addresses(endpoints.list()),
        }
    }
}

/// A target resolved and checked, shared by the workloads that name it.
#[derive(Clone)]
pub(super) struct Built {
    pub url: stampede_core::target::Target,
    pub endpoint: Endpoint,
    /// Its `endpoints:` (the scenario's target only), a name's addresses, or, in a run of
    /// several targets, its one address, so that the report counts each target's addresses.
    pub endpoints: Arc<EndpointSet>,
    pub follow: Option<Arc<crate::resolve::Follow>>,
    /// `endpoints: service`: where the controller's later sets of pods go.
    pub service: Option<Arc<crate::service::ServiceSet>>,
    pub host_header: String,
    pub https: bool,
    pub http2: bool,
}

/// Resolves `url` and checks its addresses against the agent's target policy; errors name
/// `field` (`target`, `workloads[1].target`). `listed` are the `endpoints:` that apply to it;
/// `measured` keeps per-address figures even for one address.
pub(super) async fn build(
    cfg: &AgentConfig,
    scenario: &Scenario,
    url: &stampede_core::target::Target,
    field: &str,
    listed: Listed<'_>,
    measured: bool,
) -> Result<Built, AssignError> {
    // The policy's own message starts with "target ..."; a workload's target adds its field.
    let named = |error: TargetPolicyError| {
        if field == "target" {
            AssignError::Policy(error)
        } else {
            AssignError::WorkloadPolicy {
                field: field.to_string(),
                error,
            }
        }
    };
    let transport = url.transport();
    if transport == Transport::Unix && !cfg.target_policy.allow_unix {
        return Err(AssignError::UnixTarget {
            field: field.to_string(),
        });
    }
    let resolver = cfg
        .resolver
        .clone()
        .unwrap_or_else(crate::resolve::DnsResolver::system);
    let (mut endpoint, resolved) = match listed {
        Listed::Service(addrs) => (base_endpoint(transport, addrs[0]), None),
        _ => resolve(url, &resolver, field).await?,
    };
    let host_header = url.authority();
    // The addresses the run will really use, after resolution: a name that resolves to a
    // refused address is refused too. A Service's pods are checked as they are taken.
    if let Some(r) = &resolved {
        for addr in &r.addrs {
            cfg.target_policy.check(*addr).map_err(named)?;
        }
    } else if let Listed::Service(_) = listed {
    } else if let Endpoint::Http(addr, _) | Endpoint::Tcp(addr) | Endpoint::Udp(addr) = &endpoint {
        cfg.target_policy.check(*addr).map_err(named)?;
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
                url.host(),
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
    let written = match listed {
        Listed::Addresses(l) => l,
        Listed::None | Listed::Service(_) => &[],
    };
    let addrs = stampede_core::endpoints::parse(written)
        .map_err(|(field, why)| AssignError::Endpoints { field, why })?;
    let mut endpoints = Vec::with_capacity(addrs.len());
    for (index, addr) in addrs.into_iter().enumerate() {
        cfg.target_policy
            .check(addr)
            .map_err(|error| AssignError::EndpointPolicy { index, error })?;
        endpoints.push((addr, at_address(&endpoint, addr)?));
    }
    // Without the list, a target name's addresses (all of them, followed during the run).
    let mut follow = None;
    let mut service = None;
    let endpoints = if let Listed::Service(addrs) = listed {
        let s = crate::service::ServiceSet {
            set: Arc::new(EndpointSet::fixed(Vec::new())),
            template: endpoint.clone(),
            policy: cfg.target_policy.clone(),
        };
        // Every pod is a row of the report, even when the Service has one.
        s.set.measure();
        if s.replace(addrs) == 0 {
            let addresses = addrs
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(AssignError::ServiceRefused { addresses });
        }
        let set = s.set.clone();
        service = Some(Arc::new(s));
        set
    } else if !endpoints.is_empty() {
        Arc::new(EndpointSet::fixed(endpoints))
    } else if let (Some(r), Some(host)) = (resolved, crate::resolve::host_name(url.host())) {
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
    } else if let (true, Some(addr)) = (measured, address(&endpoint)) {
        Arc::new(EndpointSet::fixed(vec![(addr, endpoint.clone())]))
    } else {
        Arc::default()
    };
    if measured {
        endpoints.measure();
    }
    Ok(Built {
        url: url.clone(),
        endpoint,
        endpoints,
        follow,
        service,
        host_header,
        https,
        http2,
    })
}

/// The one socket address of an endpoint (none for a Unix socket).
fn address(e: &Endpoint) -> Option<std::net::SocketAddr> {
    match e {
        Endpoint::Http(a, _)
        | Endpoint::H2(a, _)
        | Endpoint::Ws(a, _)
        | Endpoint::Tcp(a)
        | Endpoint::Udp(a) => Some(*a),
        Endpoint::Unix(_) => None,
    }
}

/// The endpoint `target` (resolved, with its TLS client) at another address.
fn at_address(target: &Endpoint, addr: std::net::SocketAddr) -> Result<Endpoint, AssignError> {
    Ok(match target {
        Endpoint::Http(_, tls) => Endpoint::Http(addr, tls.clone()),
        Endpoint::H2(_, tls) => Endpoint::H2(addr, tls.clone()),
        Endpoint::Tcp(_) => Endpoint::Tcp(addr),
        Endpoint::Udp(_) => Endpoint::Udp(addr),
        Endpoint::Ws(_, tls) => Endpoint::Ws(addr, tls.clone()),
        Endpoint::Unix(_) => return Err(AssignError::UnixEndpoints),
    })
}

/// Resolves the target: its first address, and every address of a host name (`None` for an
/// IP address or a socket path); errors name `field`.
async fn resolve(
    target: &stampede_core::target::Target,
    resolver: &crate::resolve::DnsResolver,
    field: &str,
) -> Result<(Endpoint, Option<crate::resolve::Resolved>), AssignError> {
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
            let r = resolver
                .lookup(host, port)
                .await
                .map_err(|error| AssignError::Resolve {
                    field: field.to_string(),
                    error,
                })?;
            (r.addrs[0], Some(r))
        }
        None => (
            authority.parse().map_err(|_| AssignError::NotAnAddress {
                field: field.to_string(),
                authority: authority.to_string(),
            })?,
            None,
        ),
    };
    Ok((base_endpoint(target.transport(), addr), resolved))
}

/// The endpoint at `addr` before TLS and the HTTP version are known.
fn base_endpoint(transport: Transport, addr: SocketAddr) -> Endpoint {
    match transport {
        Transport::Tcp => Endpoint::Tcp(addr),
        Transport::Udp => Endpoint::Udp(addr),
        _ => Endpoint::Http(addr, None),
    }
}
