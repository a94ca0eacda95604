//! One session of a shard: its steps in order over one connection, each request timed from its
//! due time (the arrival, then the end of the step before) and from its actual send (after the
//! connect, when it opened one). The exchange of one request is in `exchange`; what the
//! session counts at its start and end, in `tally`.

mod exchange;
mod tally;

use std::time::Duration;

use stampede_core::scenario::ThinkTime;
use stampede_core::stats::error_kind;
use tokio::time::Instant;

use super::deadline::RequestTimer;
use super::samples::Failed;
use super::stop::Stop;
use super::{Link, Recorder, RunSpec, StepPlan, Tracked};
use crate::http1::Failure;
use crate::net::NO_ENDPOINT;
use exchange::{arrival, close_after_server, exchange};
pub(super) use exchange::{Boxed, Http1Path, Inline};
use tally::{Tally, NONE};

pub(super) fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A request's response time (from `due`) and service time (from `sent`) in µs at `done`. A
/// request sent when it was due (on a kept connection, at the end of the one before it) has
/// one latency: the clock is subtracted once, not twice.
#[inline]
fn latencies(done: Instant, due: Instant, sent: Instant) -> (u64, u64) {
    let response = us(done - due);
    let service = if sent == due {
        response
    } else {
        us(done - sent)
    };
    (response, service)
}

/// The length of a think time. A range takes the session's `draws`-th value of its think
/// stream (seeded from the run seed and the arrival index, so a rerun pauses the same): a
/// count, where a generator kept for the session would be 300 bytes more in every held
/// connection. The pause itself waits on the line's request timer ([`RequestTimer::pause`]).
pub(super) fn think_time(t: &ThinkTime, draws: &mut u32, (seed, index): (u64, u64)) -> Duration {
    match *t {
        ThinkTime::Fixed(d) => d.0,
        ThinkTime::Range { min, max } => {
            let span = max.0.saturating_sub(min.0);
            let f = stampede_core::template::think_fraction(seed, index, *draws);
            *draws = draws.wrapping_add(1);
            min.0 + span.mul_f64(f)
        }
    }
}

/// How long a kept connection may sit idle before it is checked for a server that closed it
/// ([`Link::gone_while_idle`]: over HTTP/1.1 and raw streams one `recv` that peeks) ahead of
/// its next request: sending on one the server has closed would fail that request.
/// Keep-alive timeouts as short as a second or five are common server defaults. A pool's
/// connections wait between their slots ([`crate::pool`] hands a slot to the connection idle
/// the shortest time, so those at the bottom of its stack wait long); a session's connection
/// waits through its think times. Connections in steady use come round far sooner and are
/// never checked; an HTTP/1.1 or raw-stream one that comes round slower costs a system call
/// per request, at fewer than 20 requests a second (an HTTP/2 one costs none).
const IDLE_PROBE: Duration = Duration::from_millis(50);

/// Forgets `conn` when it has sat idle for [`IDLE_PROBE`] or more (`idle()`, asked only of
/// an open connection) and the server has closed it meanwhile: the next request opens a new
/// one, as after a connection that failed.
pub(super) fn forget_if_gone(conn: &mut Option<Tracked<'_>>, idle: impl FnOnce() -> Duration) {
    if conn
        .as_ref()
        .is_some_and(|c| idle() >= IDLE_PROBE && c.conn.gone_while_idle())
    {
        *conn = None;
    }
}

/// Where and when a session runs.
#[derive(Debug, Clone, Copy)]
pub(super) struct At {
    /// When it should have started.
    pub(super) intended: Instant,
    /// Counted as planned when it starts: the closed model plans a session as it starts it
    /// (and counts both in one lock); the open models count theirs at the arrival.
    pub(super) plan: bool,
    pub(super) phase: u32,
    /// Its global arrival index (its data rows and generated values).
    pub(super) index: u64,
    /// The global index of the connection it runs on (`per: connection` rows): with arrival
    /// phases its own, `index`.
    pub(super) connection: u64,
    /// Its session type (index into [`RunSpec::types`]).
    pub(super) kind: u32,
    /// `intended` is the clock's latest reading and nothing has been awaited since (a closed
    /// connection's next session, due when the one before it ended): its first request takes
    /// it as its send time instead of reading the clock again.
    pub(super) fresh: bool,
}

/// How a session ended, for the loop that runs the next one on its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// It ran (to its end, to a failure, or to the stop), and this is the last time it read
    /// from the clock: when the next session of a closed connection is due.
    Ran(Instant),
    /// It was not started: its data rows ran out (`on_exhausted: stop`).
    Exhausted,
}

/// What a connection task lends each of its sessions in turn: the connection (opened on
/// first use and kept, so that a closed or pooled connection survives from one session to
/// the next), its request timer, and the ticks it is read at when it is a constant-rate
/// pool's that reads at ticks ([`crate::ticked`]).
pub(super) struct Line<'a, 't> {
    pub(super) conn: Option<Tracked<'a>>,
    pub(super) timer: RequestTimer<'t>,
    pub(super) ticks: Option<std::sync::Arc<crate::ticked::Ticks>>,
    /// The connections to steps' own targets while another is `conn` (`None` until a step
    /// names one: a pointer's worth in every other line).
    pub(super) parked: Option<Box<Parked<'a>>>,
}

/// The connections a line keeps to the targets its steps name, one each: `conn` is the one to
/// `active`, the others wait here with the time they were parked.
#[derive(Default)]
pub(super) struct Parked<'a> {
    /// Whose connection `conn` is: `None` for the workload's target, else a step's
    /// [`StepPlan::via`].
    active: Option<u8>,
    slots: Vec<(Option<u8>, Tracked<'a>, Instant)>,
}

/// Makes `conn` the connection to `to` (`None`: the workload's target), parking the one in
/// use. A connection parked long enough to have been closed by its server is checked as an
/// idle one is ([`forget_if_gone`]).
fn switch<'a>(
    conn: &mut Option<Tracked<'a>>,
    parked: &mut Option<Box<Parked<'a>>>,
    to: Option<u8>,
) {
    if parked.as_ref().and_then(|p| p.active) == to {
        return;
    }
    let p = parked.get_or_insert_with(Box::default);
    if let Some(c) = conn.take() {
        p.slots.push((p.active, c, Instant::now()));
    }
    p.active = to;
    if let Some(i) = p.slots.iter().position(|(t, _, _)| *t == to) {
        let (_, c, since) = p.slots.swap_remove(i);
        *conn = Some(c);
        forget_if_gone(conn, || since.elapsed());
    }
}

impl<'a, 't> Line<'a, 't> {
    /// A line over `conn` (`None`: opened by the first request), its timer in `sleep`.
    pub(super) fn new(
        conn: Option<Tracked<'a>>,
        sleep: std::pin::Pin<&'t mut tokio::time::Sleep>,
    ) -> Self {
        Self {
            conn,
            timer: RequestTimer::new(sleep),
            ticks: None,
            parked: None,
        }
    }
}

/// One virtual client: runs the steps over `line`'s connection, its static HTTP/1.1
/// exchanges by `P` ([`Http1Path`]). An async block, not an `async fn`, whose future would
/// hold its arguments twice: it is part of every connection task's future.
#[allow(clippy::manual_async_fn)] // the arguments held once: see above
pub(super) fn session<'a, 's, 'l, 't, P: Http1Path>(
    spec: &'s RunSpec,
    rec: &'a Recorder,
    at: At,
    stop: &'s Stop,
    line: &'l mut Line<'a, 't>,
) -> impl std::future::Future<Output = Ended> + use<'a, 's, 'l, 't, P> {
    // The tally holds the recorder, the phase and the intended start: the future keeps them
    // once, there, and the line and `at` are read in place, never copied into locals, since
    // every value held across an await is part of every connection task.
    let mut tally = Tally {
        rec,
        phase: at.phase,
        plan: at.plan,
        intended: at.intended,
        opened: false,
        kind: spec.count_types.map_or(NONE, |base| base + at.kind),
        ended: false,
        in_request: NONE,
    };
    let At {
        index,
        connection,
        kind,
        fresh,
        ..
    } = at;
    async move {
        // A session begins on its workload's target, whatever the last one ended on.
        if line.parked.is_some() {
            switch(&mut line.conn, &mut line.parked, None);
        }
        let mut endpoint = spec.endpoint_index(connection);
        // The endpoint set moved this connection elsewhere (a name re-resolved): the session
        // opens a connection to its new endpoint, and the old one closes with nothing in flight.
        {
            let to = endpoint.as_ref().map_or(NO_ENDPOINT, |s| s.id);
            if line.conn.as_ref().is_some_and(|c| c.endpoint != to) {
                line.conn = None;
            }
        }
        let Some(steps) = spec.types.get(kind as usize) else {
            // Not a type of this run (cannot happen).
            tally.drop_unstarted();
            return Ended::Ran(tally.intended);
        };
        let mut vars = match &spec.dynamic {
            None => None,
            Some(ctx) => match ctx.session(index, connection) {
                Some(v) => Some(Box::new(v)),
                None => {
                    tally.drop_unstarted();
                    return Ended::Exhausted;
                }
            },
        };
        // The think times drawn so far.
        let mut draws = 0u32;
        // The time the next request should have been sent: the arrival for the first request,
        // then the end of the previous step. It is also the last time read from the clock.
        let mut due = tally.intended;
        // The clock's latest reading while nothing has been awaited since it was taken: the
        // next request's send time, without reading the clock again.
        let mut clock = fresh.then_some(tally.intended);
        for (i, step) in steps.iter().enumerate() {
            // By value: what the loop holds across its awaits is part of every connection task.
            match *step {
                StepPlan::Think(ref t) => {
                    if !tally.opened {
                        let now = Instant::now();
                        tally.rec.with(tally.phase, |s| tally.open(s, now));
                    }
                    let paused = think_time(t, &mut draws, (spec.seed, index));
                    if !line.timer.pause(Instant::now() + paused, stop).await {
                        return Ended::Ran(due);
                    }
                    due = Instant::now();
                    clock = Some(due);
                    // The connection sat idle for the pause at least: checked as a pool's is
                    // (the pause stands in for the time since its last request, which the
                    // session would otherwise hold across the wait).
                    forget_if_gone(&mut line.conn, || paused);
                }
                StepPlan::Http {
                    ordinal,
                    repeat,
                    new_connection,
                    ..
                }
                | StepPlan::HttpDynamic {
                    ordinal,
                    repeat,
                    new_connection,
                    ..
                }
                | StepPlan::Tcp {
                    ordinal,
                    repeat,
                    new_connection,
                    ..
                }
                | StepPlan::Udp {
                    ordinal,
                    repeat,
                    new_connection,
                    ..
                }
                | StepPlan::Grpc {
                    ordinal,
                    repeat,
                    new_connection,
                    ..
                }
                | StepPlan::Ws {
                    ordinal,
                    repeat,
                    new_connection,
                    ..
                } => {
                    // A step with a target of its own runs on its connection there, with an
                    // endpoint of that target's (picked again only when the target changes:
                    // nothing more is held across the request's awaits).
                    let via = step.via();
                    if via.is_some() || line.parked.is_some() {
                        if line.parked.as_ref().and_then(|p| p.active) != via {
                            endpoint = match via.and_then(|k| spec.away.get(usize::from(k))) {
                                None => spec.endpoint_index(connection),
                                Some(a) => a.endpoints.pick(connection),
                            };
                        }
                        switch(&mut line.conn, &mut line.parked, via);
                        let to = endpoint.as_ref().map_or(NO_ENDPOINT, |s| s.id);
                        if line.conn.as_ref().is_some_and(|c| c.endpoint != to) {
                            line.conn = None;
                        }
                    }
                    for r in 0..repeat {
                        if new_connection {
                            line.conn = None;
                        }
                        // After a stop no request starts: the session ends here, interrupted
                        // if it had started (its tally's drop counts it), dropped if not. An
                        // atomic read, no wait: the caller drops the session when the graceful
                        // stop is over.
                        if stop.is_stopped() {
                            if !tally.opened {
                                tally.drop_unstarted();
                            }
                            return Ended::Ran(due);
                        }
                        let last = last_on_connection(steps, i, r + 1 < repeat);
                        // The session's start lag is counted from its first request's start. A
                        // request on an open connection reads the clock once, at its end: it is
                        // sent at the end of the one before it, or of the session before it on
                        // a closed connection (a connect adds a reading, at its end).
                        let started = clock.take().unwrap_or_else(Instant::now);
                        tally.rec.with(tally.phase, |s| {
                            tally.open(s, started);
                            s.counters_mut().requests_started += 1;
                        });
                        // Step ordinals are below the run's step count, far below u32::MAX.
                        tally.in_request = u32::try_from(ordinal).unwrap_or(NONE);
                        let deadline = started + spec.request_timeout;
                        // One timer for the connect and the request together. No wait on the
                        // stop here: the caller drops the session when the run stops.
                        let mut sent = started;
                        let request = exchange::<P>(
                            (spec, &endpoint),
                            tally.rec,
                            &mut line.conn,
                            step,
                            &mut vars,
                            (last, deadline),
                            (&mut sent, line.ticks.as_ref()),
                        );
                        let answered = line.timer.within(deadline, std::pin::pin!(request)).await;
                        // The answer's own scope ends before any await: only what follows it is
                        // held across the wait for a server's close.
                        let (done, keep_alive, ends) = {
                            let result = answered.unwrap_or_else(|| {
                                // A connection left mid-request cannot carry another one.
                                let connected = line.conn.take().is_some();
                                Err(Failure(if connected {
                                    error_kind::TIMEOUT
                                } else {
                                    error_kind::CONNECT_TIMEOUT
                                }))
                            });
                            let done = arrival(&mut line.conn, sent).unwrap_or_else(Instant::now);
                            // Answered (or failed): recorded below, before any other await.
                            tally.in_request = NONE;
                            match result {
                                Ok(answer) => {
                                    let fails = answer.error.is_some();
                                    let ends = fails || (i + 1 >= steps.len() && r + 1 == repeat);
                                    tally.rec.with(tally.phase, |s| {
                                        s.counters_mut().bytes_sent += answer.sent;
                                        s.counters_mut().bytes_received += answer.received;
                                        if let Some(v) = vars.as_deref_mut() {
                                            let (wire, decoded) = v.take_decoded();
                                            s.counters_mut().bytes_compressed += wire;
                                            s.counters_mut().bytes_decoded += decoded;
                                        }
                                        if let Some(code) = answer.grpc {
                                            s.counters_mut().count_grpc(code);
                                        } else if answer.status != 0 {
                                            s.counters_mut().count_status(answer.status);
                                        }
                                        match answer.error {
                                            None => {
                                                let (response, service) =
                                                    latencies(done, due, sent);
                                                tally
                                                    .rec
                                                    .endpoints
                                                    .record(&endpoint, Some(response));
                                                s.record_success(ordinal, response, service);
                                                if let Some(a) = &answer.arrivals {
                                                    // From the intended send, as the response time.
                                                    let first = a.first.map(|t| {
                                                        us(t.saturating_duration_since(due))
                                                    });
                                                    s.record_stream(ordinal, first, &a.gaps_us);
                                                }
                                            }
                                            Some(kind) => {
                                                tally.rec.endpoints.record(&endpoint, None);
                                                s.record_failure(ordinal, kind)
                                            }
                                        }
                                        if ends {
                                            tally.close(s, !fails, done);
                                        }
                                    });
                                    let failed = Failed {
                                        // Empty for a success; `grpc_ok` for a call's.
                                        kind: answer.error.unwrap_or(if answer.grpc.is_some() {
                                            "grpc_ok"
                                        } else {
                                            ""
                                        }),
                                        // A gRPC call's HTTP 200 says nothing; its kind names
                                        // the grpc-status.
                                        status: if answer.grpc.is_some() {
                                            0
                                        } else {
                                            answer.status
                                        },
                                        done,
                                        grpc_message: match line.conn.as_ref().map(|c| &c.conn) {
                                            Some(Link::H2(h)) => h.grpc_message.as_deref(),
                                            _ => None,
                                        },
                                    };
                                    let on = (spec.dynamic.as_deref(), vars.as_deref());
                                    tally.rec.samples.debug(step, on, failed);
                                    if fails {
                                        tally.rec.samples.note(step, on, failed);
                                    }
                                    (done, answer.keep_alive, ends)
                                }
                                Err(Failure(kind)) => {
                                    let failed = Failed {
                                        kind,
                                        status: 0,
                                        done,
                                        grpc_message: None,
                                    };
                                    let on = (spec.dynamic.as_deref(), vars.as_deref());
                                    tally.rec.samples.debug(step, on, failed);
                                    tally.rec.samples.note(step, on, failed);
                                    tally.rec.endpoints.record(&endpoint, None);
                                    tally.rec.with(tally.phase, |s| {
                                        s.record_failure(ordinal, kind);
                                        tally.close(s, false, done);
                                    });
                                    return Ended::Ran(done);
                                }
                            }
                        };
                        if !keep_alive {
                            close_after_server(
                                &mut line.conn,
                                &mut line.timer,
                                spec.request_timeout,
                            )
                            .await;
                        }
                        if ends {
                            // Closing the connection (and waiting for the server's FIN) takes
                            // time of its own: the session ends after it.
                            return Ended::Ran(if keep_alive { done } else { Instant::now() });
                        }
                        // After a wait for the server's FIN the reading is stale: the next
                        // request reads the clock again.
                        clock = keep_alive.then_some(done);
                        due = done;
                    }
                }
            }
        }
        // A session that ends on a think time (or has no steps) ends here.
        if !tally.ended {
            tally.rec.with(tally.phase, |s| tally.close(s, true, due));
        }
        Ended::Ran(due)
    }
}

/// Whether the request of step `i` is the last on its connection: the request after it (the
/// step's next repeat when `repeating`, else the next request step, wrapping to the first for
/// the session that follows on a kept connection) opens a new one. Such a request asks the
/// server to close (see [`crate::http1::PreparedRequest`]).
pub(super) fn last_on_connection(steps: &[StepPlan], i: usize, repeating: bool) -> bool {
    let opens_new = |s: &StepPlan| match s {
        StepPlan::Http { new_connection, .. }
        | StepPlan::HttpDynamic { new_connection, .. }
        | StepPlan::Tcp { new_connection, .. }
        | StepPlan::Udp { new_connection, .. }
        | StepPlan::Grpc { new_connection, .. }
        | StepPlan::Ws { new_connection, .. } => Some(*new_connection),
        StepPlan::Think(_) => None,
    };
    if repeating {
        return opens_new(&steps[i]).unwrap_or(false);
    }
    let (head, tail) = steps.split_at(i + 1);
    tail.iter().chain(head).find_map(opens_new).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::time::Instant;

    use super::{latencies, session, At, Ended, Line};
    use crate::runner::Recorder;

    /// A request sent when due has one latency, subtracted once; one sent later (after a
    /// connect) has a service time shorter than its response time by the wait.
    #[test]
    fn a_request_sent_when_due_has_one_latency_and_a_late_one_two() {
        let due = Instant::now();
        let done = due + Duration::from_micros(1_500);
        assert_eq!(latencies(done, due, due), (1_500, 1_500));
        let sent = due + Duration::from_micros(400);
        assert_eq!(latencies(done, due, sent), (1_500, 1_100));
    }

    /// How long the target holds each TLS handshake.
    const HANDSHAKE: Duration = Duration::from_millis(300);

    /// An HTTPS target that takes [`HANDSHAKE`] to complete a handshake (it moves the paused
    /// clock on by that much), then answers every request at once, on one connection.
    async fn slow_handshake_target() -> std::net::SocketAddr {
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        let chain = vec![CertificateDer::from(cert.cert.der().to_vec())];
        let key = PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            tokio::time::advance(HANDSHAKE).await;
            let tls = acceptor.accept(tcp).await.unwrap();
            let (read, mut write) = tokio::io::split(tls);
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.is_empty() {
                    write
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                        .await
                        .unwrap();
                }
            }
        });
        addr
    }

    /// A request that opens its connection counts the connect (here a TLS handshake that the
    /// target holds 300 ms) in its response time only: the service time is the exchange's
    /// alone, as wrk and k6 time theirs. The session's second request, on the open
    /// connection, has neither.
    #[tokio::test(start_paused = true)]
    async fn the_connect_counts_in_the_response_time_only() {
        // A blocking task keeps the paused clock from jumping ahead on its own while the real
        // sockets are in flight: only the target moves it.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let holder = tokio::task::spawn_blocking(move || held.recv());
        let addr = slow_handshake_target().await;
        let scenario = format!(
            "name: connect\ntarget: https://{addr}\ntls: {{ insecure_skip_verify: true }}\n\
             request_timeout: 10s\nload: {{ model: closed, connections: 1, duration: 10s }}\n\
             session:\n  - http: {{ path: /a }}\n  - http: {{ path: /b }}\n"
        );
        let run = crate::runner::tests::one_shard(scenario).await;
        let spec = run.workloads[0].clone();
        let rec = Recorder::new(run.phases, run.steps);
        let stop = crate::runner::stop::Stop::default();
        let t0 = Instant::now();
        let at = At {
            intended: t0,
            plan: true,
            phase: 0,
            index: 0,
            connection: 0,
            kind: 0,
            fresh: false,
        };
        let timer = std::pin::pin!(tokio::time::sleep_until(t0));
        let mut line = Line::new(None, timer);
        let ended = session::<super::Inline>(&spec, &rec, at, &stop, &mut line).await;
        assert_eq!(ended, Ended::Ran(t0 + HANDSHAKE));
        // The paused clock moves only for the target's wait: every other time is 0 µs, which
        // the histograms keep as their lowest value, 1 µs.
        let handshake = HANDSHAKE.as_micros() as u64;
        rec.with(0, |s| {
            let s = s.settle().unwrap();
            assert_eq!(s.counters.requests_completed, 2);
            let (first, second) = (&s.steps[0], &s.steps[1]);
            // Equivalent values (3 significant digits): the bucket holding the handshake.
            let max = first.response.max();
            assert!(
                first.response.min() <= handshake
                    && handshake <= max
                    && max - handshake < handshake / 500,
                "{handshake} µs recorded as {max}"
            );
            assert_eq!(first.service.max(), 1);
            assert_eq!(second.response.max(), 1);
            assert_eq!(second.service.max(), 1);
        })
        .unwrap();
        drop(release);
        let _ = holder.await;
    }
}
