//! The compiled plan of a shard: each session type's steps ready for the hot path, the
//! resolved target, the load model, and the workloads of one shard run. Built once by
//! `assign` from a checked scenario; read, never changed, while the load runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use stampede_core::scenario::ThinkTime;
use stampede_core::schedule::Schedule;
use stampede_core::shard::ShardFilter;

use crate::http1::{Conn, Failure, PreparedRequest};
use crate::stream::{FramedRequest, StreamConn};
use crate::udp::{DatagramRequest, UdpConn};

/// A step compiled for the hot path.
#[derive(Debug, Clone)]
pub enum StepPlan {
    /// A static HTTP/1.1 (or HTTP/2) request, its bytes built once for the run.
    Http {
        /// Ordinal among request steps (the per-step breakdown index).
        ordinal: usize,
        /// The request's bytes for HTTP/1.1.
        request: PreparedRequest,
        /// The same request for HTTP/2 (set when the target speaks HTTP/2: h2c, or h2 over TLS).
        h2: Option<crate::h2::H2Request>,
        /// The statuses that count as success; `None`: any 2xx or 3xx.
        expect: Option<Vec<u16>>,
        /// How many times the step runs in a row within one session.
        repeat: u32,
        /// Each run of the step opens a fresh connection, dropping the session's current one.
        new_connection: bool,
        /// The step's own target (an index into [`RunSpec::away`]); `None`: the workload's.
        via: Option<u8>,
    },
    /// An HTTP request rendered per session (templates, cookies), or whose response is
    /// captured (extract, check): see [`crate::dynamic`].
    HttpDynamic {
        /// Ordinal among request steps (the per-step breakdown index).
        ordinal: usize,
        /// The compiled templates, extraction and checks.
        step: Arc<crate::dynamic::DynamicHttp>,
        /// How many times the step runs in a row within one session.
        repeat: u32,
        /// Each run of the step opens a fresh connection, dropping the session's current one.
        new_connection: bool,
        /// The step's own target (an index into [`RunSpec::away`]); `None`: the workload's.
        via: Option<u8>,
    },
    /// A framed request/response over the session's TCP or Unix stream.
    Tcp {
        /// Ordinal among request steps (the per-step breakdown index).
        ordinal: usize,
        /// The request framed once, and how its reply is framed and checked.
        request: FramedRequest,
        /// The payload rendered per session (a template) or the reply read (extract, check).
        send: Option<Arc<crate::dynamic::DynamicSend>>,
        /// How many times the step runs in a row within one session.
        repeat: u32,
        /// Each run of the step opens a fresh connection, dropping the session's current one.
        new_connection: bool,
    },
    /// A datagram and its reply over the session's UDP socket.
    Udp {
        /// Ordinal among request steps (the per-step breakdown index).
        ordinal: usize,
        /// The datagram, its timeout and its reply check.
        request: DatagramRequest,
        /// The payload rendered per session (a template) or the reply read (extract, check).
        send: Option<Arc<crate::dynamic::DynamicSend>>,
        /// How many times the step runs in a row within one session.
        repeat: u32,
        /// Each run of the step opens a fresh socket, dropping the session's current one.
        new_connection: bool,
    },
    /// A gRPC call (its frames encoded by the CLI) over the session's HTTP/2 connection.
    Grpc {
        /// Ordinal among request steps (the per-step breakdown index).
        ordinal: usize,
        /// The call's head and frames, encoded once.
        request: crate::grpc::GrpcRequest,
        /// The call's templated message or metadata, rendered per call.
        dynamic: Option<Arc<crate::grpc::DynamicCall>>,
        /// A streaming method's call, which renders its own templates.
        stream: Option<Arc<crate::grpc::StreamCall>>,
        /// How many times the step runs in a row within one session.
        repeat: u32,
        /// Each run of the step opens a fresh connection, dropping the session's current one.
        new_connection: bool,
    },
    /// One action over the session's WebSocket (`ws://`, `wss://`); always rendered per
    /// session, so the run has a dynamic context.
    Ws {
        /// Ordinal among request steps (the per-step breakdown index).
        ordinal: usize,
        /// The action (connect, send, receive, close) and its templates.
        step: Arc<crate::dynamic::DynamicWs>,
        /// How many times the step runs in a row within one session.
        repeat: u32,
        /// Always false: a `connect` is what opens a new connection.
        new_connection: bool,
    },
    /// A pause between steps; no request, so no ordinal.
    Think(ThinkTime),
}

impl StepPlan {
    /// The step's ordinal among the run's request steps; `None` for a think time.
    pub fn ordinal(&self) -> Option<usize> {
        match self {
            StepPlan::Http { ordinal, .. }
            | StepPlan::HttpDynamic { ordinal, .. }
            | StepPlan::Tcp { ordinal, .. }
            | StepPlan::Udp { ordinal, .. }
            | StepPlan::Grpc { ordinal, .. }
            | StepPlan::Ws { ordinal, .. } => Some(*ordinal),
            StepPlan::Think(_) => None,
        }
    }

    /// The step's own target, an index into [`RunSpec::away`]; `None`: the workload's.
    pub fn via(&self) -> Option<u8> {
        match self {
            StepPlan::Http { via, .. } | StepPlan::HttpDynamic { via, .. } => *via,
            _ => None,
        }
    }
}

/// A target that steps name besides their workload's (a login service inside an API's
/// sessions): where a session's second connection opens.
#[derive(Debug, Clone)]
pub struct Away {
    /// Where connections go when it has no endpoints to pick from.
    pub target: Endpoint,
    /// Its addresses, as its workload's are (shared with any workload that loads it).
    pub endpoints: Arc<super::endpoints::EndpointSet>,
}

/// Where the target is, resolved once per run; the scheme picks the driver.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// `http://`: HTTP/1.1 over TCP; `https://`: over TLS.
    Http(SocketAddr, Option<Arc<crate::tls::TlsClient>>),
    /// `http_version: "2"`: h2c with prior knowledge over `http://`, h2 by ALPN over `https://`.
    H2(SocketAddr, Option<Arc<crate::tls::TlsClient>>),
    /// `tcp://`: framed request/response over TCP.
    Tcp(SocketAddr),
    /// `unix:///path`: framed request/response over a Unix stream socket.
    Unix(std::path::PathBuf),
    /// `udp://`: datagrams.
    Udp(SocketAddr),
    /// `ws://`: a WebSocket upgraded from HTTP/1.1 over TCP; `wss://`: over TLS. Opened by a
    /// step's `connect`; anything else (setup steps) opens plain HTTP/1.1 to it.
    Ws(SocketAddr, Option<Arc<crate::tls::TlsClient>>),
}

/// A session's connection, whatever the transport.
#[derive(Debug)]
pub enum Link {
    /// HTTP/1.1 over TCP or TLS.
    Http1(Conn),
    /// HTTP/1.1 over a constant-rate pool's connection read at its ticks ([`crate::ticked`]).
    Ticked(Conn<crate::ticked::Ticked>),
    /// HTTP/2 (h2c or over TLS), for HTTP and gRPC steps.
    H2(crate::h2::H2Conn),
    /// A raw TCP or Unix stream.
    Stream(StreamConn),
    /// A connected UDP socket.
    Udp(UdpConn),
    /// A WebSocket: held inline (64 bytes, within the largest link's size), since a held
    /// WebSocket is what a connection is for most of its life.
    Ws(crate::ws::WsConn),
}

impl Link {
    /// Another handle on this connection for a concurrent session: HTTP/2 only (its
    /// sessions run on streams of their own); `None` for transports that carry one exchange
    /// at a time.
    pub(crate) fn share(&self) -> Option<Link> {
        match self {
            Link::H2(c) => Some(Link::H2(c.clone())),
            _ => None,
        }
    }

    /// Whether this connection, idle since its last answer, can no longer carry a request.
    /// HTTP/1.1: [`crate::net::idle_socket`] shows it closed, reset, or holding bytes nobody
    /// asked for (a `408`: the server is closing it). A raw stream: closed or reset only; its
    /// protocol may send unasked, and such bytes are left to its next exchange's framing and
    /// checks, as they always were. HTTP/2: its driver task, which reads it all the
    /// time, has ended. Never a datagram, which has no connection to lose.
    pub(crate) fn gone_while_idle(&self) -> bool {
        use crate::net::{idle_socket, IdleSocket};
        use std::os::fd::AsRawFd;
        let fd = match self {
            Link::Http1(c) => match c.io() {
                tokio_util::either::Either::Left(tcp) => tcp.as_raw_fd(),
                tokio_util::either::Either::Right(tls) => tls.get_ref().0.as_raw_fd(),
            },
            Link::Ticked(c) => c.io().as_raw_fd(),
            Link::H2(c) => return c.is_closed(),
            Link::Stream(c) => return idle_socket(c.as_raw_fd()) == IdleSocket::Closed,
            // A datagram has no connection to lose; a WebSocket may hold messages sent unasked
            // (a feed), which its next step reads.
            Link::Udp(_) | Link::Ws(_) => return false,
        };
        idle_socket(fd) != IdleSocket::Open
    }

    /// Only the HTTP/1.1 connect is inline, the others boxed: every connection of a large
    /// closed run connects at once (10,000 connect futures held together), and this
    /// future's size is then paid per connection.
    #[allow(clippy::manual_async_fn)] // the argument held once (net::connect_tcp)
    pub(crate) fn open(
        endpoint: &Endpoint,
        h2: crate::h2::H2Client,
    ) -> impl std::future::Future<Output = Result<Self, Failure>> + use<'_> {
        async move {
            Ok(match endpoint {
                Endpoint::Http(a, tls) | Endpoint::Ws(a, tls) => {
                    Link::Http1(Conn::connect(a, tls.as_deref()).await?)
                }
                Endpoint::H2(a, tls) => Link::H2(
                    Box::pin(crate::h2::H2Conn::connect_with(*a, tls.as_deref(), h2)).await?,
                ),
                Endpoint::Tcp(a) => Link::Stream(Box::pin(StreamConn::connect_tcp(*a)).await?),
                Endpoint::Unix(p) => Link::Stream(Box::pin(StreamConn::connect_unix(p)).await?),
                Endpoint::Udp(a) => Link::Udp(Box::pin(UdpConn::connect(*a)).await?),
            })
        }
    }
}

/// A link [`Link::open_sending`] opened, and how much of the first request left with it.
pub(crate) struct Opened {
    pub link: Link,
    /// Bytes of the first request already sent.
    pub ahead: usize,
    /// When the link was open (the connect's end, read before a first request that left with
    /// it): the first request's send time.
    pub at: tokio::time::Instant,
    /// When the connect began: `at` minus this is the connect's time, its handshake included.
    pub began: tokio::time::Instant,
}

impl Link {
    /// [`Link::open`], sending `first` (the first request's bytes as written) with the
    /// connect over plain HTTP/1.1 ([`crate::net::connect_tcp_sending`]), and then reading
    /// at `ticks` when given; any other link opens as usual and sends nothing.
    #[allow(clippy::manual_async_fn)] // the arguments held once (net::connect_tcp)
    pub(crate) fn open_sending<'a>(
        endpoint: &'a Endpoint,
        first: &'a [u8],
        ticks: Option<&'a Arc<crate::ticked::Ticks>>,
        h2: crate::h2::H2Client,
    ) -> impl std::future::Future<Output = Result<Opened, Failure>> + use<'a> {
        async move {
            let began = tokio::time::Instant::now();
            if let (Endpoint::Http(addr, None), false) = (endpoint, first.is_empty()) {
                let o = crate::net::connect_tcp_sending(addr, first).await?;
                let link = match ticks {
                    Some(t) => Link::Ticked(Conn::over(
                        crate::ticked::Ticked::new(o.stream, t.clone(), o.sent > 0)
                            .map_err(|e| crate::net::io_failure(&e, false))?,
                    )),
                    None => Link::Http1(Conn::over(tokio_util::either::Either::Left(o.stream))),
                };
                return Ok(Opened {
                    link,
                    ahead: o.sent,
                    at: o.at,
                    began,
                });
            }
            let link = Link::open(endpoint, h2).await?;
            Ok(Opened {
                link,
                ahead: 0,
                at: tokio::time::Instant::now(),
                began,
            })
        }
    }
}

/// How a shard generates load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Open model: each owned arrival of the schedule starts a new session.
    Arrivals,
    /// Closed model: this many connections, each looping the session back to back until
    /// `duration` after T0. This shard's connections are `first..first + connections` of
    /// `total`; connection `c`'s `k`-th session has index `c + k × total` (its data row).
    Closed {
        /// This shard's connections.
        connections: usize,
        /// How long after T0 the connections stop starting sessions.
        duration: Duration,
        /// The global index of this shard's first connection.
        first: u64,
        /// The run's connections, all shards together.
        total: u64,
        /// Sessions running at once on each connection (HTTP/2 streams; 1 otherwise).
        streams: u64,
    },
    /// Constant rate: each owned slot of the (one-phase, uniform) schedule runs the session
    /// on whichever free connection of a pool of this many has been idle the shortest time
    /// (`crate::pool`). A slot that finds every connection busy waits in a queue; its
    /// response time still counts from its slot. The pool's connections are
    /// `first..first + connections` of the run's (their data rows); each runs `streams` slots
    /// at once (HTTP/2 streams; 1 otherwise).
    Constant {
        /// This shard's connections in the pool.
        connections: usize,
        /// The global index of this shard's first connection.
        first: u64,
        /// Slots each connection runs at once (HTTP/2 streams; 1 otherwise).
        streams: u64,
    },
}

/// This agent's part of a run: one [`RunSpec`] per workload, started together from one T0,
/// recording into one recorder (global phase and step indexes).
#[derive(Debug, Clone)]
pub struct ShardRun {
    /// The controller's id of the run, on every Progress.
    pub run_id: String,
    /// How often the recorder's interval is swapped and sent.
    pub interval: Duration,
    /// Phases of the run, all workloads together.
    pub phases: usize,
    /// Request steps of the run, all workloads and session types together.
    pub steps: usize,
    /// One compiled workload per `workloads:` entry (one for a scenario without).
    pub workloads: Vec<Arc<RunSpec>>,
    /// The values of the setup steps, when this agent ran them: sent in its Ready.
    pub setup_values: Vec<String>,
    /// The run's dynamic context (shared by the workloads), where setup values that arrive in
    /// the Start or from a refresh are put.
    pub context: Option<Arc<crate::dynamic::Context>>,
    /// When the scenario refreshes its setup: what a refresh needs. Every agent holds it, so
    /// that any can take over when the one that runs the setup is lost.
    pub refresh: Option<Arc<crate::setup::Refresh>>,
    /// This agent ran the setup, so it refreshes from the start.
    pub runs_setup: bool,
    /// How long the requests in flight at a stop may take to finish and be recorded before
    /// their sessions are dropped and counted interrupted (the scenario's `graceful_stop`).
    pub graceful_stop: Duration,
    /// The first failed requests of each step and error kind are sampled (`samples:`).
    pub samples: bool,
    /// The values its failure samples write `***` (the scenario's `${env:...}` values).
    pub masked: Vec<String>,
    /// Requests this shard reports with their answers for a debug print (`--debug N`).
    pub debug: u32,
    /// The target names whose addresses the run follows, one per target given by name
    /// without `endpoints:` (none: every set of endpoints is fixed).
    pub follow: Vec<Arc<crate::resolve::Follow>>,
    /// `endpoints: service`: where the controller's new sets of the Service's endpoints go.
    pub service: Option<Arc<crate::service::ServiceSet>>,
}

impl RunSpec {
    /// The lean HTTP/2 client when every request step of `types` is a static HTTP request
    /// (nothing read from its answers but the status), else the `h2` crate's.
    pub fn h2_client_for(types: &[Vec<StepPlan>]) -> crate::h2::H2Client {
        let general = types
            .iter()
            .flatten()
            .any(|s| matches!(s, StepPlan::HttpDynamic { .. } | StepPlan::Grpc { .. }));
        if general {
            crate::h2::H2Client::General
        } else {
            crate::h2::H2Client::Lean
        }
    }

    /// The endpoint the connection or session with global index `connection` goes to
    /// (`None`: the target's one address).
    pub fn endpoint_index(&self, connection: u64) -> super::endpoints::Pick {
        self.endpoints.pick(connection)
    }

    /// Where to open the connection of endpoint `to`: `target` without one.
    pub fn endpoint<'a>(&'a self, to: &'a super::endpoints::Pick) -> &'a Endpoint {
        to.as_ref().map_or(&self.target, |s| &s.endpoint)
    }

    /// Where `step`'s connection to endpoint `to` opens: its own target's when it has one.
    pub fn endpoint_of<'a>(
        &'a self,
        step: &StepPlan,
        to: &'a super::endpoints::Pick,
    ) -> &'a Endpoint {
        match step.via().and_then(|k| self.away.get(usize::from(k))) {
            Some(a) => to.as_ref().map_or(&a.target, |s| &s.endpoint),
            None => self.endpoint(to),
        }
    }

    /// Whether a session of this workload may run a static HTTP/1.1 step (`StepPlan::Http`),
    /// whose exchange its connections then keep inline (`session::Http1Path`).
    pub fn has_static_http1(&self) -> bool {
        self.types
            .iter()
            .flatten()
            .any(|s| matches!(s, StepPlan::Http { .. }))
    }
}

impl ShardRun {
    /// The request steps each phase's statistics cover: up to the last step of the phase's
    /// workload (the recorder sizes a phase's stats by it, not by every step of the run).
    pub fn phase_steps(&self) -> Vec<usize> {
        let mut out = vec![0; self.phases];
        for w in &self.workloads {
            let end = w
                .types
                .iter()
                .flatten()
                .filter_map(StepPlan::ordinal)
                .map(|o| o + 1)
                .max()
                .unwrap_or(0)
                .min(self.steps);
            let base = w.phase_base as usize;
            for p in out.iter_mut().skip(base).take(w.phases) {
                *p = end;
            }
        }
        out
    }

    /// Planned sessions of this shard, all workloads together.
    pub fn planned(&self) -> u64 {
        self.workloads
            .iter()
            .flat_map(|w| &w.planned)
            .fold(0u64, |a, p| a.saturating_add(*p))
    }
}

/// Everything needed to run one workload of a shard.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The workload's arrival schedule, the same on every agent (seeded).
    pub schedule: Schedule,
    /// Which of the workload's arrivals this shard runs; `None` when it runs none (a
    /// constant load with fewer connections than agents gives its slots only to the agents
    /// holding its connections).
    pub filter: Option<ShardFilter>,
    /// Where connections go when the run has no `endpoints:` to pick from.
    pub target: Endpoint,
    /// The targets its steps name besides `target` (`StepPlan::via` indexes it); empty for a
    /// workload whose steps all go to its own.
    pub away: Arc<[Away]>,
    /// The scenario's `endpoints:`, or the target name's addresses as last resolved (empty
    /// for a target that is one address): the connection or session with global index `i`
    /// goes to the `i mod n`-th. Shared by the workloads loading the same target.
    pub endpoints: Arc<super::endpoints::EndpointSet>,
    /// The steps of each session type (one for a `session:`), request steps numbered in the
    /// run's global step order.
    pub types: Vec<Vec<StepPlan>>,
    /// Which type each session runs: the mix's table, read at this shard's (or, closed, this
    /// connection's) offset plus its own session count.
    pub mix: stampede_core::workload::Mix,
    /// Where this shard's arrivals start in the mix's table.
    pub mix_offset: u64,
    /// Global index of the first session type, when sessions are counted per type (a mix);
    /// `None` for a single session.
    pub count_types: Option<u32>,
    /// Longest wait for one request's answer before it counts as a timeout.
    pub request_timeout: Duration,
    /// Most sessions in flight at once; arrivals beyond it are dropped and counted.
    pub capacity: usize,
    /// How sessions start: from arrivals, closed connections or a constant pool.
    pub mode: Mode,
    /// A closed load's ramp of connections (`stages`), with this agent's shard and the shard
    /// count, which give each connection its ramp rank: connection `c` is open while the
    /// ramp is above rank `shard + shards × c`.
    pub ramp: Option<(Arc<[stampede_core::ramp::Stage]>, u32, u32)>,
    /// When this workload starts, after T0.
    pub start: Duration,
    /// Number of this workload's phases (its own, or 1 for a closed/constant load).
    pub phases: usize,
    /// Global index of its first phase (what the recorder and the report index by).
    pub phase_base: u32,
    /// This shard's planned sessions per phase (arithmetic, [`stampede_core::plan::Plan::shard_sessions`]):
    /// what a stop leaves undone is this minus what was handled, never a walk of the rest.
    pub planned: Vec<u64>,
    /// Data rows and variables of dynamic steps; `None` when every step is static, and then
    /// sessions carry no variables at all.
    pub dynamic: Option<Arc<crate::dynamic::Context>>,
    /// The run's seed: with the arrival index, it seeds a session's think times.
    pub seed: u64,
    /// The HTTP/2 client its connections take: the lean one when every request step is
    /// static ([`RunSpec::h2_client_for`]).
    pub h2: crate::h2::H2Client,
}
