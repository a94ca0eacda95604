//! Runs one shard: walks the whole-test schedule, starts the sessions this shard owns at their
//! intended times, records both latencies per request, and ships interval data. What one
//! session does is in `session`; what the sessions record, and how an interval is shipped, in
//! `recorder`; this module holds the compiled plan and the load models that start sessions.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use stampede_core::scenario::ThinkTime;
use stampede_core::schedule::Schedule;
use stampede_core::shard::ShardFilter;
use stampede_proto::v1;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::http1::{Conn, Failure, PreparedRequest};
use crate::pool::{Closer, RateSlot, Refused, SlotQueue};
use crate::stream::{FramedRequest, StreamConn};
use crate::udp::{DatagramRequest, UdpConn};

mod recorder;
mod session;

pub use recorder::Recorder;
use recorder::{empty_buffers, final_interval, interval_index, progress, InFlight};
#[cfg(test)]
use session::{last_on_connection, think};
use session::{session, At};

/// A step compiled for the hot path.
#[derive(Debug, Clone)]
pub enum StepPlan {
    Http {
        /// Ordinal among request steps (the per-step breakdown index).
        ordinal: usize,
        request: PreparedRequest,
        /// The same request for HTTP/2 (set when the target speaks h2c).
        h2: Option<crate::h2::H2Request>,
        expect: Option<Vec<u16>>,
        repeat: u32,
        new_connection: bool,
    },
    /// An HTTP request rendered per session (templates, cookies), or whose response is
    /// captured (extract, check): see [`crate::dynamic`].
    HttpDynamic {
        ordinal: usize,
        step: Arc<crate::dynamic::DynamicHttp>,
        repeat: u32,
        new_connection: bool,
    },
    /// A framed request/response over the session's TCP or Unix stream.
    Tcp {
        ordinal: usize,
        request: FramedRequest,
        /// The payload rendered per session (a template) or the reply read (extract, check).
        send: Option<Arc<crate::dynamic::DynamicSend>>,
        repeat: u32,
        new_connection: bool,
    },
    /// A datagram and its reply over the session's UDP socket.
    Udp {
        ordinal: usize,
        request: DatagramRequest,
        /// The payload rendered per session (a template) or the reply read (extract, check).
        send: Option<Arc<crate::dynamic::DynamicSend>>,
        repeat: u32,
        new_connection: bool,
    },
    /// A unary gRPC call (its frame encoded by the CLI) over the session's HTTP/2 connection.
    Grpc {
        ordinal: usize,
        request: crate::grpc::GrpcRequest,
        /// The call's templated message or metadata, rendered per call.
        dynamic: Option<Arc<crate::grpc::DynamicCall>>,
        repeat: u32,
        new_connection: bool,
    },
    Think(ThinkTime),
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
}

/// A session's connection, whatever the transport.
#[derive(Debug)]
pub enum Link {
    Http1(Conn),
    H2(crate::h2::H2Conn),
    Stream(StreamConn),
    Udp(UdpConn),
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

    /// The HTTP/1.1 connect is inline and the h2 one boxed: every connection of a large
    /// closed run connects at once, and this future's size is then paid per connection.
    pub(crate) async fn open(endpoint: &Endpoint) -> Result<Self, Failure> {
        Ok(match endpoint {
            Endpoint::Http(a, tls) => Link::Http1(Conn::connect(*a, tls.as_deref()).await?),
            Endpoint::H2(a, tls) => {
                Link::H2(Box::pin(crate::h2::H2Conn::connect(*a, tls.as_deref())).await?)
            }
            Endpoint::Tcp(a) => Link::Stream(StreamConn::connect_tcp(*a).await?),
            Endpoint::Unix(p) => Link::Stream(StreamConn::connect_unix(p).await?),
            Endpoint::Udp(a) => Link::Udp(UdpConn::connect(*a).await?),
        })
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
        connections: usize,
        duration: Duration,
        first: u64,
        total: u64,
        /// Sessions running at once on each connection (HTTP/2 streams; 1 otherwise).
        streams: u64,
    },
    /// Constant rate: each owned slot of the (one-phase, uniform) schedule runs the session
    /// on the first free connection of a pool of this many. A slot that finds every
    /// connection busy waits in a queue; its response time still counts from its slot. The
    /// pool's connections are `first..first + connections` of the run's (their data rows);
    /// each runs `streams` slots at once (HTTP/2 streams; 1 otherwise).
    Constant {
        connections: usize,
        first: u64,
        streams: u64,
    },
}

/// This agent's part of a run: one [`RunSpec`] per workload, started together from one T0,
/// recording into one recorder (global phase and step indexes).
#[derive(Debug, Clone)]
pub struct ShardRun {
    pub run_id: String,
    pub interval: Duration,
    /// Phases of the run, all workloads together.
    pub phases: usize,
    /// Request steps of the run, all workloads and session types together.
    pub steps: usize,
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
}

impl ShardRun {
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
    pub schedule: Schedule,
    /// Which of the workload's arrivals this shard runs; `None` when it runs none (a
    /// constant load with fewer connections than agents gives its slots only to the agents
    /// holding its connections).
    pub filter: Option<ShardFilter>,
    pub target: Endpoint,
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
    pub request_timeout: Duration,
    /// Most sessions in flight at once; arrivals beyond it are dropped and counted.
    pub capacity: usize,
    pub mode: Mode,
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
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    Completed,
    Stopped,
}

/// Runs the shard from `t0` until every workload's schedule is done and every session has
/// finished, or until `stop` fires. Progress and Done go to `out`.
pub async fn execute(
    run: Arc<ShardRun>,
    t0: Instant,
    out: mpsc::UnboundedSender<v1::AgentMessage>,
    stop: CancellationToken,
) -> RunEnd {
    let rec = Arc::new(Recorder::new(run.phases, run.steps));
    let tracker = TaskTracker::new();

    // The interval ticker.
    let ticker_stop = CancellationToken::new();
    let ticker = {
        let (rec, spec, out, ticker_stop) =
            (rec.clone(), run.clone(), out.clone(), ticker_stop.clone());
        tokio::spawn(async move {
            let mut spare = empty_buffers(spec.phases);
            let mut tick = tokio::time::interval_at(t0 + spec.interval, spec.interval);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let mut next = 0u64;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = ticker_stop.cancelled() => break,
                }
                let now_index = interval_index(t0, spec.interval);
                // Everything recorded so far belongs to intervals < now_index; send it as the
                // newest complete one.
                let interval = now_index.saturating_sub(1).max(next);
                rec.swap(&mut spare);
                let msg = progress(&spec.run_id, interval, &mut spare, rec.connections.open());
                if out.send(msg).is_err() {
                    break;
                }
                next = interval + 1;
            }
            (spare, next)
        })
    };

    let mut queues = Vec::new();
    let mut loops = Vec::new();
    let mut connections = Vec::new();
    for spec in &run.workloads {
        let (arrivals, queue) = start_workload(spec, &rec, &tracker, t0, &stop, &mut connections);
        loops.extend(arrivals);
        queues.extend(queue);
    }
    // A stop aborts the connection tasks of the closed and constant models. They live for
    // the whole run and do not wait on the stop themselves: that would lock the token's one
    // waiter list at every poll of every connection, on every core.
    let aborter = {
        let stop = stop.clone();
        tokio::spawn(async move {
            stop.cancelled().await;
            for task in connections {
                task.abort();
            }
        })
    };
    for arrivals in loops {
        if arrivals.await.is_err() {
            tracing::error!("an arrival loop panicked; stopping the run");
            stop.cancel();
        }
    }
    tracker.close();
    tracker.wait().await;
    aborter.abort();
    for slots in queues {
        // Stopped early: slots still queued were never started.
        for (_, phase, _, _) in slots.close_and_take() {
            rec.with(phase, |s| s.counters.dropped_arrivals += 1);
        }
    }
    ticker_stop.cancel();
    let (mut spare, next) = match ticker.await {
        Ok(v) => v,
        Err(_) => (empty_buffers(run.phases), 0),
    };
    // Final flush: whatever was recorded since the last tick, in the interval most of it
    // belongs to. A run that ends just after a boundary (the tick for the interval that just
    // ended has not run yet) flushes that interval, not the new one it barely entered.
    let last = final_interval(
        Instant::now().saturating_duration_since(t0),
        run.interval,
        next,
    );
    rec.swap(&mut spare);
    let _ = out.send(progress(&run.run_id, last, &mut spare, 0));
    let end = if stop.is_cancelled() {
        RunEnd::Stopped
    } else {
        RunEnd::Completed
    };
    let _ = out.send(v1::AgentMessage {
        msg: Some(v1::agent_message::Msg::Done(v1::Done {
            run_id: run.run_id.clone(),
            last_interval: last,
            stopped_early: end == RunEnd::Stopped,
            // Filled in by the control loop, which knows why the run was stopped.
            reason: String::new(),
        })),
    });
    end
}

/// Starts one workload's load from `t0` plus its start offset: its arrival loop (open and
/// constant models, on a thread of its own) and its connections (closed and constant), whose
/// tasks go to `tasks` for a stop to abort.
fn start_workload(
    spec: &Arc<RunSpec>,
    rec: &Arc<Recorder>,
    tracker: &TaskTracker,
    t0: Instant,
    stop: &CancellationToken,
    tasks: &mut Vec<tokio::task::AbortHandle>,
) -> (Option<tokio::task::JoinHandle<()>>, Option<Arc<SlotQueue>>) {
    let t0 = t0 + spec.start;
    // The arrival loop is a task paced by a timerfd (`arrivals`): tokio's timer has
    // millisecond granularity, the kernel's lands within microseconds of the intended time.
    let mut queue = None;
    let arrivals = match spec.mode {
        Mode::Arrivals => {
            let (rec, spec, stop, tracker) =
                (rec.clone(), spec.clone(), stop.clone(), tracker.clone());
            Some(tokio::spawn(async move {
                crate::arrivals::run(&spec, &rec, t0, &stop, |a, intended, kind| {
                    if rec.in_flight.load(Ordering::Relaxed) >= spec.capacity {
                        rec.with(a.phase, |s| s.counters.dropped_arrivals += 1);
                        return;
                    }
                    rec.in_flight.fetch_add(1, Ordering::Relaxed);
                    let (rec, spec, stop) = (rec.clone(), spec.clone(), stop.clone());
                    tokio::spawn(tracker.track_future(async move {
                        // Released however the session ends, a panic included: a lost
                        // slot would shrink the capacity for the rest of the run.
                        let _slot = InFlight(&rec);
                        let mut conn = None;
                        let at = At {
                            intended,
                            phase: a.phase,
                            index: a.index,
                            connection: a.index,
                            kind,
                        };
                        // One wait on the stop per session, not per request.
                        tokio::select! {
                            biased;
                            _ = stop.cancelled() => {}
                            _ = session(&spec, &rec, at, &stop, &mut conn) => {}
                        }
                        drop(conn);
                    }));
                })
                .await
            }))
        }
        Mode::Closed {
            connections,
            duration,
            first,
            total,
            streams,
        } => {
            for c in 0..connections {
                let (rec, spec, stop) = (rec.clone(), spec.clone(), stop.clone());
                let stripe = (first + c as u64, total.max(1));
                let task = if streams > 1 {
                    tracker.spawn(closed_streams(
                        spec,
                        rec,
                        (t0, t0 + duration),
                        stripe,
                        streams,
                        stop,
                    ))
                } else {
                    tracker.spawn(closed_connection(
                        spec,
                        rec,
                        t0,
                        t0 + duration,
                        stripe,
                        stop,
                    ))
                };
                tasks.push(task.abort_handle());
            }
            None
        }
        Mode::Constant {
            connections,
            first,
            streams,
        } => {
            let slots = SlotQueue::new(MAX_QUEUED_SLOTS);
            for c in 0..connections as u64 {
                let (rec, spec, stop, slots) =
                    (rec.clone(), spec.clone(), stop.clone(), slots.clone());
                let task = if streams > 1 {
                    tracker.spawn(pooled_streams(spec, rec, slots, first + c, streams, stop))
                } else {
                    tracker.spawn(pooled_connection(spec, rec, slots, first + c, stop))
                };
                tasks.push(task.abort_handle());
            }
            queue = Some(slots.clone());
            let (rec, spec, stop) = (rec.clone(), spec.clone(), stop.clone());
            Some(tokio::spawn(async move {
                // Closing the queue (however this task ends) lets the pool drain it and finish.
                let slots = Closer(slots);
                let mut warned = false;
                crate::arrivals::run(&spec, &rec, t0, &stop, |a, intended, kind| {
                    if !enqueue(&slots.0, (intended, a.phase, a.index, kind), &mut warned) {
                        rec.with(a.phase, |s| s.counters.dropped_arrivals += 1);
                    }
                })
                .await;
            }))
        }
    };
    (arrivals, queue)
}

/// One connection of a closed load: runs the session back to back, keeping the connection
/// between sessions, until `end` (a session running at `end` finishes). `stripe` is the
/// connection's global index and the stride between its sessions' indexes (the number of
/// connections); with a mix, the connection's `k`-th session runs the type at `k` plus the
/// connection's own offset in the table.
async fn closed_connection(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    t0: Instant,
    end: Instant,
    (index, stride): (u64, u64),
    stop: CancellationToken,
) {
    // A stop before `t0` aborts this task like any other time (`execute`).
    tokio::time::sleep_until(t0).await;
    // The loop inline, not through `closed_loop`: this future exists once per connection
    // for the whole run, and nesting would hold the arguments twice.
    let mut conn = None;
    let offset = spec.mix.offset(index, stride);
    let mut own = 0u64;
    while let Some(at) = next_closed(
        &spec,
        &rec,
        end,
        (index, stride),
        index,
        (offset, own),
        &stop,
    ) {
        if !session(&spec, &rec, at, &stop, &mut conn).await {
            break;
        }
        own += 1;
    }
    drop(conn);
}

/// The next session of a closed stripe (its `own`-th, with index `first + own × stride`),
/// counted as planned; `None` once `end` has passed or the run stopped.
fn next_closed(
    spec: &RunSpec,
    rec: &Recorder,
    end: Instant,
    (first, stride): (u64, u64),
    connection: u64,
    (offset, own): (u64, u64),
    stop: &CancellationToken,
) -> Option<At> {
    let now = Instant::now();
    if now >= end || stop.is_cancelled() {
        return None;
    }
    let phase = spec.phase_base;
    rec.with(phase, |s| s.counters.sessions_planned += 1);
    Some(At {
        intended: now,
        phase,
        index: first + own * stride,
        connection,
        kind: spec.mix.pick(offset.wrapping_add(own)),
    })
}

/// One connection of a closed load carrying `streams` sessions at once (HTTP/2): opened
/// once and counted once; stream `s` of connection `c` of `C` runs the sessions of the
/// virtual stripe `c·streams + s` of `C·streams` (its indexes and its place in the mix),
/// with connection `c`'s data rows. A stream whose connection fails opens one of its own.
async fn closed_streams(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    (t0, end): (Instant, Instant),
    (connection, total): (u64, u64),
    streams: u64,
    stop: CancellationToken,
) {
    // A stop before `t0` aborts this task like any other time (`execute`).
    tokio::time::sleep_until(t0).await;
    let link = open_shared(&spec, &rec).await;
    let loops = (0..streams).map(|s| {
        let conn = stream_handle(link.as_ref(), &rec);
        let stripe = (connection * streams + s, total * streams);
        closed_loop(&spec, &rec, end, stripe, connection, conn, &stop)
    });
    futures::future::join_all(loops).await;
    drop(link);
}

/// Opens the connection that several streams share, counted once; `None` when it cannot be
/// opened now (each stream then opens its own, and its session records why).
async fn open_shared<'a>(spec: &RunSpec, rec: &'a Recorder) -> Option<Tracked<'a>> {
    let link = tokio::time::timeout(spec.request_timeout, Box::pin(Link::open(&spec.target)))
        .await
        .ok()?
        .ok()?;
    Some(rec.connections.track(link))
}

/// A handle for one stream on the shared connection `link` (not counted again); `None`
/// when there is none, and the stream then opens a connection of its own.
fn stream_handle<'a>(link: Option<&Tracked<'a>>, rec: &'a Recorder) -> Option<Tracked<'a>> {
    link.and_then(|l| l.conn.share())
        .map(|l| rec.connections.shared(l))
}

/// The loop of [`closed_connection`]: sessions back to back on `conn` (opened on first use
/// when `None`) until `end`, the `k`-th with index `index + k × stride`.
async fn closed_loop<'a>(
    spec: &RunSpec,
    rec: &'a Recorder,
    end: Instant,
    (index, stride): (u64, u64),
    connection: u64,
    mut conn: Option<Tracked<'a>>,
    stop: &CancellationToken,
) {
    let offset = spec.mix.offset(index, stride);
    let mut own = 0u64;
    while let Some(at) = next_closed(
        spec,
        rec,
        end,
        (index, stride),
        connection,
        (offset, own),
        stop,
    ) {
        if !session(spec, rec, at, stop, &mut conn).await {
            break;
        }
        own += 1;
    }
    drop(conn);
}

/// Most constant-rate slots waiting for a free connection. Slots queue while every connection
/// is busy; against a target that stalls, they would pile up at the scheduled rate (1e6/s for
/// a minute is 2 GB). Past this bound (about 24 MiB of slots, seconds of backlog at any rate a
/// pool keeps up with) a slot is dropped and counted, and the report shows the generator fell
/// behind.
const MAX_QUEUED_SLOTS: usize = 1 << 20;

/// Queues `slot` for the pool; false when it was dropped (queue full, or the pool is gone).
/// Warns once per run when the queue first overflows.
fn enqueue(slots: &SlotQueue, slot: RateSlot, warned: &mut bool) -> bool {
    match slots.push(slot) {
        Ok(()) => true,
        Err(Refused::Full) => {
            if !*warned {
                *warned = true;
                tracing::warn!(
                    queued = slots.bound(),
                    "every connection is busy and the slot queue is full: dropping slots (counted as dropped arrivals)"
                );
            }
            false
        }
        Err(Refused::Closed) => false,
    }
}

/// One connection of a constant-rate pool (the run's connection `connection`): takes the next
/// due slot from the shared queue and runs the session for it, from the slot's intended time.
async fn pooled_connection(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    slots: Arc<SlotQueue>,
    connection: u64,
    stop: CancellationToken,
) {
    pooled_loop(&spec, &rec, &slots, connection, None, &stop).await;
}

/// One connection of a constant-rate pool carrying `streams` slots at once (HTTP/2): opened
/// once and counted once, each stream taking slots from the queue like a connection of its
/// own. A stream whose connection fails opens one of its own.
async fn pooled_streams(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    slots: Arc<SlotQueue>,
    connection: u64,
    streams: u64,
    stop: CancellationToken,
) {
    let link = open_shared(&spec, &rec).await;
    let loops = (0..streams).map(|_| {
        let conn = stream_handle(link.as_ref(), &rec);
        pooled_loop(&spec, &rec, &slots, connection, conn, &stop)
    });
    futures::future::join_all(loops).await;
    drop(link);
}

/// The loop of [`pooled_connection`]: the next due slot's session on `conn` (opened on first
/// use when `None`), until the queue closes or the run stops.
async fn pooled_loop<'a>(
    spec: &RunSpec,
    rec: &'a Recorder,
    slots: &SlotQueue,
    connection: u64,
    mut conn: Option<Tracked<'a>>,
    stop: &CancellationToken,
) {
    // A stop aborts this loop's task (`execute`); the queue closes when the arrivals end.
    while let Some((intended, phase, index, kind)) = slots.pop().await {
        let at = At {
            intended,
            phase,
            index,
            connection,
            kind,
        };
        session(spec, rec, at, stop, &mut conn).await;
    }
    drop(conn);
}

/// A session's connection, counted in the run's [`crate::net::ConnGauge`] while it lives.
type Tracked<'a> = crate::net::Tracked<'a, Link>;

#[cfg(test)]
mod tests {
    use super::{empty_buffers, enqueue, final_interval, progress, InFlight, Recorder, SlotQueue};
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    /// A stop ends a closed, a constant or an open load at once while every request hangs:
    /// the connection tasks of the first two, which do not wait on the stop themselves, are
    /// aborted, and open-model sessions wait on it once each, rather than being left to the
    /// request timeout. The target accepts four connections, reads a request on
    /// each and never answers (a blocking thread, which holds the paused clock still).
    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_hanging_connections_at_once() {
        use super::{execute, RunEnd};
        use stampede_proto::v1;
        use std::io::Read;
        use tokio::time::Instant;
        for load in [
            "load: { model: closed, connections: 4, duration: 30s }",
            "load: { model: constant, rate: 50, connections: 4, duration: 30s }",
            "phases: [{ duration: 30s, arrival_rate: 50 }]",
        ] {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let held = tokio::task::spawn_blocking(move || {
                (0..4)
                    .map(|_| {
                        let (mut s, _) = listener.accept().unwrap();
                        let mut request = [0u8; 16];
                        s.read_exact(&mut request).unwrap();
                        s
                    })
                    .collect::<Vec<_>>()
            });
            let scenario = format!(
                "name: hang\ntarget: http://{addr}\nrequest_timeout: 60s\n{load}\n\
                 session:\n  - http: {{ path: / }}\n"
            );
            let assign = v1::Assign {
                run_id: "r".into(),
                scenario,
                shard_index: 0,
                shard_count: 1,
                seed: 1,
                interval_ms: 1000,
                ..Default::default()
            };
            let cfg = crate::AgentConfig::new("http://127.0.0.1:1", "a");
            let run = crate::assign::prepare(&cfg, &assign, Default::default())
                .await
                .unwrap();
            let (out, mut messages) = tokio::sync::mpsc::unbounded_channel();
            let stop = tokio_util::sync::CancellationToken::new();
            let run = tokio::spawn(execute(Arc::new(run), Instant::now(), out, stop.clone()));
            let held = held.await.unwrap();
            let stopped = Instant::now();
            stop.cancel();
            assert_eq!(run.await.unwrap(), RunEnd::Stopped, "{load}");
            assert!(
                stopped.elapsed() < Duration::from_millis(100),
                "{load}: stopped after {:?}",
                stopped.elapsed()
            );
            // Four requests were in flight, and none of them ended.
            let (mut started, mut ended) = (0, 0);
            while let Ok(m) = messages.try_recv() {
                if let Some(v1::agent_message::Msg::Progress(p)) = m.msg {
                    for ph in &p.samples {
                        let c = ph.counters.as_ref().unwrap();
                        started += c.requests_started;
                        ended += c.requests_completed + c.requests_failed;
                    }
                }
            }
            // Open-model sessions go on arriving while the target holds the first four.
            assert!(
                started >= 4 && ended == 0,
                "{load}: {started} started, {ended} ended"
            );
            drop(held);
        }
    }

    /// A think time drawn from a range depends on the run seed and the arrival index only:
    /// a rerun pauses the same, whatever ran before.
    #[tokio::test(start_paused = true)]
    async fn think_times_are_drawn_from_the_seed_and_the_arrival() {
        use stampede_core::scenario::ThinkTime;
        use stampede_core::HumanDuration;
        let t = ThinkTime::Range {
            min: HumanDuration(Duration::from_secs(1)),
            max: HumanDuration(Duration::from_secs(3)),
        };
        let stop = tokio_util::sync::CancellationToken::new();
        let mut pauses = Vec::new();
        for (seed, index) in [(7, 3), (7, 3), (7, 4), (8, 3)] {
            let start = tokio::time::Instant::now();
            let mut rng = None;
            assert!(super::think(&t, &mut rng, (seed, index), &stop).await);
            let first = start.elapsed();
            // The session's second think time continues its stream.
            assert!(super::think(&t, &mut rng, (seed, index), &stop).await);
            pauses.push((first, start.elapsed() - first));
        }
        assert_eq!(pauses[0], pauses[1]);
        assert_ne!(pauses[0], pauses[2]);
        assert_ne!(pauses[0], pauses[3]);
        assert_ne!(pauses[0].0, pauses[0].1);
        for (a, b) in pauses {
            for d in [a, b] {
                assert!(
                    d >= Duration::from_secs(1) && d <= Duration::from_secs(3),
                    "{d:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_panicking_session_gives_its_in_flight_slot_back() {
        let rec = Arc::new(Recorder::new(1, 1));
        rec.in_flight.fetch_add(1, Ordering::Relaxed);
        let r = rec.clone();
        let task = tokio::spawn(async move {
            let _slot = InFlight(&r);
            panic!("a session bug");
        });
        assert!(task.await.unwrap_err().is_panic());
        assert_eq!(rec.in_flight.load(Ordering::Relaxed), 0);
    }

    fn vm_hwm_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            })
            .unwrap_or(0)
    }

    /// A run of 100 phases × 20 request steps: only the phases that record hold a `Stats`
    /// (each is 43 dense histograms, 7.7 MiB), and they are freed after their last flush,
    /// so the recorder holds at most three phases per buffer (the running one, the previous
    /// one finishing, one awaiting its freeing flush), not 100 × 2 × 7.7 MiB = 1.5 GiB.
    #[test]
    fn the_recorder_allocates_only_phases_that_record() {
        let (phases, steps) = (100, 20);
        // Reset the peak RSS so VmHWM measures this test (best effort; other tests are small).
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let before = vm_hwm_kib();
        let rec = Recorder::new(phases, steps);
        let mut spare = empty_buffers(phases);
        let mut most = 0;
        let mut sent = 0u64;
        for phase in 0..phases as u32 {
            for interval in 0..2u64 {
                for i in 0..400u64 {
                    rec.with(phase, |s| {
                        s.record_start(50 + i);
                        s.record_success((i % 20) as usize, 1_000 + i * 37, 900 + i * 31);
                    });
                }
                if phase > 0 && interval == 0 {
                    // A session of the previous phase still finishing.
                    rec.with(phase - 1, |s| s.record_success(0, 5_000, 4_000));
                }
                most = most.max(rec.allocated());
                rec.swap(&mut spare);
                let msg = progress("r", u64::from(phase) * 2 + interval, &mut spare, 0);
                if let Some(stampede_proto::v1::agent_message::Msg::Progress(p)) = msg.msg {
                    sent += p.samples.len() as u64;
                }
            }
        }
        rec.swap(&mut spare);
        let _ = progress("r", 999, &mut spare, 0);
        rec.swap(&mut spare);
        let _ = progress("r", 1000, &mut spare, 0);
        assert!(most <= 3, "{most} phases allocated at once");
        assert_eq!(rec.allocated(), 0);
        assert!(spare.iter().all(Option::is_none));
        assert_eq!(sent, 100 * 2 + 99);
        let peak_mib = vm_hwm_kib().saturating_sub(before.min(vm_hwm_kib())) / 1024;
        let hwm_mib = vm_hwm_kib() / 1024;
        eprintln!("recorder 100 phases x 20 steps: VmHWM {hwm_mib} MiB (+{peak_mib} MiB)");
        assert!(hwm_mib < 200, "VmHWM {hwm_mib} MiB");
    }

    /// A full slot queue refuses (the caller counts the slot dropped) and the warning fires
    /// once; a closed one refuses too.
    #[test]
    fn a_refused_slot_is_reported_dropped() {
        let slots = SlotQueue::new(4);
        let mut warned = false;
        let slot = (tokio::time::Instant::now(), 0, 0, 0);
        let taken = (0..10)
            .filter(|_| enqueue(&slots, slot, &mut warned))
            .count();
        assert_eq!(taken, 4);
        assert!(warned);
        slots.close();
        assert!(!enqueue(&slots, slot, &mut warned));
    }

    /// A request asks the server to close exactly when the request after it on the same
    /// session loop opens a new connection (think times in between do not count).
    #[test]
    fn the_last_request_on_a_connection_is_known() {
        use super::{last_on_connection, StepPlan};
        use stampede_core::scenario::ThinkTime;
        use stampede_core::HumanDuration;
        let req = stampede_core::scenario::HttpRequest::default();
        let http = |new_connection| StepPlan::Http {
            ordinal: 0,
            request: crate::http1::PreparedRequest::new(&req, "h", ""),
            h2: None,
            expect: None,
            repeat: 1,
            new_connection,
        };
        let think = || StepPlan::Think(ThinkTime::Fixed(HumanDuration(Duration::from_secs(1))));
        // One step with a connection per request: every request is the last.
        let steps = [http(true)];
        assert!(last_on_connection(&steps, 0, false));
        assert!(last_on_connection(&steps, 0, true));
        // Kept-alive steps never close.
        let steps = [http(false), think(), http(false)];
        assert!(!last_on_connection(&steps, 0, false));
        assert!(!last_on_connection(&steps, 2, false));
        // A login on a new connection, then a request reusing it: only the second closes,
        // since the next session's login opens its own (across the think time).
        let steps = [http(true), http(false), think()];
        assert!(!last_on_connection(&steps, 0, false));
        assert!(last_on_connection(&steps, 1, false));
        assert!(!last_on_connection(&steps, 1, true));
    }

    #[test]
    fn the_final_flush_goes_to_the_interval_most_of_it_belongs_to() {
        let s = Duration::from_secs(1);
        let ms = Duration::from_millis;
        // Ended 10 ms after the 3 s boundary, before the tick for [2 s, 3 s) ran.
        assert_eq!(final_interval(ms(3010), s, 2), 2);
        // The tick for [2 s, 3 s) ran: what is left belongs to [3 s, 4 s).
        assert_eq!(final_interval(ms(3010), s, 3), 3);
        // Well into an interval.
        assert_eq!(final_interval(ms(3600), s, 3), 3);
        assert_eq!(final_interval(ms(2300), s, 2), 2);
        // A short run that ends before the first tick.
        assert_eq!(final_interval(ms(300), s, 0), 0);
    }
}
#[cfg(test)]
mod future_size {
    /// The size of the future `F` that `_f` returns, without running it.
    fn size_of_future<F>(_f: &dyn Fn() -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// A closed connection's task is allocated once per connection for the whole run: 10,000
    /// connections are 10,000 of them, so what its future holds across awaits (the connect,
    /// a TLS or h2 handshake, a think-time generator) is boxed or kept out, and this keeps
    /// it that way.
    #[test]
    #[allow(unreachable_code)]
    fn a_connection_task_stays_small() {
        let task = size_of_future(&|| {
            super::closed_connection(
                unreachable!(),
                unreachable!(),
                unreachable!(),
                unreachable!(),
                unreachable!(),
                unreachable!(),
            )
        });
        let connect = size_of_future(&|| super::Link::open(unreachable!()));
        eprintln!("closed connection task {task} B, connect {connect} B");
        assert!(task <= 1280, "a closed connection's future is {task} bytes");
        assert!(connect <= 512, "connecting takes {connect} bytes");
    }
}
