//! The one exchange of a request over whichever link the target speaks: connect if needed,
//! send, read the answer, and close a connection the server said it closes.

use std::time::Duration;

use stampede_core::scenario::status_error;
use stampede_core::stats::error_kind;
use tokio::time::Instant;

use crate::http1::Failure;
use crate::net::NO_ENDPOINT;
use crate::runner::deadline::RequestTimer;
use crate::runner::{Link, Recorder, RunSpec, StepPlan, Tracked};

/// When the answer just read arrived, on a connection read at ticks: the kernel's receive
/// time, never before the request was `sent`. `None` on any other link, whose answer is
/// timed by the clock when it is read.
pub(super) fn arrival(conn: &mut Option<Tracked<'_>>, sent: Instant) -> Option<Instant> {
    match conn.as_mut().map(|t| &mut t.conn) {
        Some(Link::Ticked(c)) => c.io_mut().take_arrival().map(|t| t.max(sent)),
        _ => None,
    }
}

/// Most time given to a server that said it closes to do so.
const SERVER_CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Drops a connection the server said it closes; an HTTP/1.1 one only after the server has
/// closed (within the request timeout and [`SERVER_CLOSE_WAIT`]), so that the TIME_WAIT
/// stays on the server's side and a connection per request does not use up the generator's
/// ephemeral ports.
///
/// The wait runs on the line's request timer, free between requests: a timer of its own would
/// be 112 bytes more in every connection task's future.
pub(super) async fn close_after_server(
    conn: &mut Option<Tracked<'_>>,
    timer: &mut RequestTimer<'_>,
    timeout: Duration,
) {
    let until = Instant::now() + timeout.min(SERVER_CLOSE_WAIT);
    match conn.as_mut().map(|t| &mut t.conn) {
        Some(Link::Http1(c)) if !c.closed_already() => {
            let _ = timer
                .within(until, std::pin::pin!(c.closed_by_server()))
                .await;
        }
        Some(Link::Ticked(c)) => {
            let _ = timer
                .within(until, std::pin::pin!(c.closed_by_server()))
                .await;
        }
        _ => {}
    }
    *conn = None;
}

/// How a session instance runs a static HTTP/1.1 exchange: inline in its task ([`Inline`]) or
/// boxed per request ([`Boxed`]). Every held connection is a task of the session's size, and
/// the inline exchange (a response's parser and its reads) is most of it: a run with static
/// HTTP/1.1 steps keeps it inline, for an allocation fewer per request, and every other run
/// (a WebSocket's, a stream's) gets tasks a size class smaller. A trait and not a `const`
/// flag: a future's layout is fixed before a constant is known, so both paths would count.
pub(in crate::runner) trait Http1Path {
    /// [`crate::http1::Conn::request_as`] on a plain or TLS connection.
    fn plain<'c>(
        c: &'c mut crate::http1::Conn,
        request: &'c crate::http1::PreparedRequest,
        last: bool,
        ahead: usize,
    ) -> impl std::future::Future<Output = Result<crate::http1::Response, Failure>> + 'c;

    /// The same on a connection read at ticks.
    fn ticked<'c>(
        c: &'c mut crate::http1::Conn<crate::ticked::Ticked>,
        request: &'c crate::http1::PreparedRequest,
        last: bool,
        ahead: usize,
    ) -> impl std::future::Future<Output = Result<crate::http1::Response, Failure>> + 'c;
}

/// The exchange inline in the session's task.
pub(in crate::runner) struct Inline;

/// The exchange boxed per request.
pub(in crate::runner) struct Boxed;

impl Http1Path for Inline {
    fn plain<'c>(
        c: &'c mut crate::http1::Conn,
        request: &'c crate::http1::PreparedRequest,
        last: bool,
        ahead: usize,
    ) -> impl std::future::Future<Output = Result<crate::http1::Response, Failure>> + 'c {
        c.request_as(request, last, ahead)
    }

    fn ticked<'c>(
        c: &'c mut crate::http1::Conn<crate::ticked::Ticked>,
        request: &'c crate::http1::PreparedRequest,
        last: bool,
        ahead: usize,
    ) -> impl std::future::Future<Output = Result<crate::http1::Response, Failure>> + 'c {
        c.request_as(request, last, ahead)
    }
}

impl Http1Path for Boxed {
    fn plain<'c>(
        c: &'c mut crate::http1::Conn,
        request: &'c crate::http1::PreparedRequest,
        last: bool,
        ahead: usize,
    ) -> impl std::future::Future<Output = Result<crate::http1::Response, Failure>> + 'c {
        Box::pin(c.request_as(request, last, ahead))
    }

    fn ticked<'c>(
        c: &'c mut crate::http1::Conn<crate::ticked::Ticked>,
        request: &'c crate::http1::PreparedRequest,
        last: bool,
        ahead: usize,
    ) -> impl std::future::Future<Output = Result<crate::http1::Response, Failure>> + 'c {
        Box::pin(c.request_as(request, last, ahead))
    }
}

/// What one request brought back.
pub(super) struct Answer<'s> {
    pub(super) sent: u64,
    pub(super) received: u64,
    /// The error kind when the reply is not the expected one (HTTP: `status_NNN`; a dynamic
    /// step's failed check or extraction).
    pub(super) error: Option<&'s str>,
    /// The HTTP status code (0 for tcp and udp, which have none).
    pub(super) status: u16,
    /// The connection may carry another request.
    pub(super) keep_alive: bool,
    /// A gRPC call's `grpc-status` code: counted instead of its HTTP status, which is 200
    /// whatever the call's outcome.
    pub(super) grpc: Option<u8>,
    /// A streamed reply's arrivals.
    pub(super) arrivals: Option<Box<crate::http1::stream::Arrivals>>,
}

/// Connects if needed, then sends one request of `step`. The caller bounds it by `deadline`
/// (the request timeout); the UDP driver, which waits for a datagram, also takes it. `sent`
/// is when the request was sent: a connect (with its handshake) moves it to the connect's
/// end, so that the service time is the exchange's alone, as wrk, wrk2 and k6 time theirs;
/// the response time, from the due time, keeps the connect.
///
/// An async block, not an `async fn` (whose future would hold its arguments twice): it is
/// part of every connection task's future.
#[allow(clippy::too_many_arguments)]
#[allow(clippy::manual_async_fn)] // the arguments held once: see above
pub(super) fn exchange<'a, 's, 'c, 'v, P: Http1Path>(
    (spec, endpoint): (&'s RunSpec, &'c crate::runner::endpoints::Pick),
    rec: &'a Recorder,
    conn: &'c mut Option<Tracked<'a>>,
    step: &'s StepPlan,
    vars: &'v mut Option<Box<crate::dynamic::SessionVars>>,
    (last, deadline): (bool, Instant),
    (sent, ticks): (
        &'c mut Instant,
        Option<&'c std::sync::Arc<crate::ticked::Ticks>>,
    ),
) -> impl std::future::Future<Output = Result<Answer<'s>, Failure>> + use<'a, 's, 'c, 'v, P> {
    async move {
        if let StepPlan::Ws { step, .. } = step {
            // Boxed like the other drivers: a static session keeps its size.
            return Box::pin(websocket((spec, endpoint), rec, conn, step, vars)).await;
        }
        // Bytes of the request that left with the connect.
        let mut ahead = 0;
        if conn.is_none() {
            // A static HTTP/1.1 request goes with a plain connect that completes at once.
            let first = match step {
                StepPlan::Http { request, .. } => request.bytes(last),
                _ => &[],
            };
            // Boxed: connecting (a TLS or h2 handshake especially) needs a large future, and
            // inline it would make every session task that large for its whole life, though a
            // kept-alive connection opens once.
            let target = spec.endpoint_of(step, endpoint);
            let opened = Box::pin(Link::open_sending(target, first, ticks, spec.h2)).await?;
            rec.endpoints.opened(endpoint);
            rec.connects.record(opened.began, opened.at);
            ahead = opened.ahead;
            *sent = opened.at;
            let mut tracked = rec.connections.track(opened.link);
            tracked.endpoint = endpoint.as_ref().map_or(NO_ENDPOINT, |s| s.id);
            *conn = Some(tracked);
        }
        let Some(c) = conn.as_mut() else {
            return Err(Failure(error_kind::CONNECT));
        };
        let result = match (&mut c.conn, step) {
            (
                Link::Http1(c),
                StepPlan::Http {
                    request, expect, ..
                },
            ) => {
                let resp = P::plain(c, request, last, ahead).await;
                resp.map(|r| Answer::http1(request.bytes(last), expect, r))
            }
            // The same exchange on a connection read at ticks.
            (
                Link::Ticked(c),
                StepPlan::Http {
                    request, expect, ..
                },
            ) => {
                let resp = P::ticked(c, request, last, ahead).await;
                resp.map(|r| Answer::http1(request.bytes(last), expect, r))
            }
            // The other drivers' futures are boxed so that the HTTP/1.1 one sets the size of every
            // session task (10,000 connections are 10,000 tasks); their own per-request costs
            // (an h2 stream, a syscall per datagram) dwarf one allocation.
            (
                Link::H2(c),
                StepPlan::Http {
                    h2: Some(request),
                    expect,
                    ..
                },
            ) => Box::pin(c.request(request)).await.map(|resp| Answer {
                sent: request.len() as u64,
                received: resp.bytes_received,
                error: status_error(expect.as_deref(), resp.status),
                status: resp.status,
                keep_alive: true,
                grpc: None,
                arrivals: None,
            }),
            // Dynamic steps are boxed like the other drivers, so static sessions keep their size.
            (Link::Http1(c), StepPlan::HttpDynamic { step, .. }) => {
                match (spec.dynamic.as_ref(), vars.as_deref_mut()) {
                    (Some(ctx), Some(v)) => Box::pin(step.http1(c, ctx, v)).await.map(Answer::from),
                    _ => Err(Failure(error_kind::PROTOCOL)),
                }
            }
            (Link::H2(c), StepPlan::HttpDynamic { step, .. }) => {
                match (spec.dynamic.as_ref(), vars.as_deref_mut()) {
                    (Some(ctx), Some(v)) => Box::pin(step.h2(c, ctx, v)).await.map(Answer::from),
                    _ => Err(Failure(error_kind::PROTOCOL)),
                }
            }
            (
                Link::Stream(c),
                StepPlan::Tcp {
                    request,
                    send: None,
                    ..
                },
            ) => Box::pin(c.request(request))
                .await
                .map(|received| Answer::raw(request.len() as u64, received)),
            (
                Link::Udp(c),
                StepPlan::Udp {
                    request,
                    send: None,
                    ..
                },
            ) => Box::pin(c.request(request, deadline))
                .await
                .map(|received| Answer::raw(request.len() as u64, received)),
            (
                Link::Stream(c),
                StepPlan::Tcp {
                    request,
                    send: Some(send),
                    ..
                },
            ) => match (spec.dynamic.as_ref(), vars.as_deref_mut()) {
                (Some(ctx), Some(v)) => Box::pin(send.tcp(c, request, ctx, v))
                    .await
                    .map(Answer::from),
                _ => Err(Failure(error_kind::PROTOCOL)),
            },
            (
                Link::Udp(c),
                StepPlan::Udp {
                    request,
                    send: Some(send),
                    ..
                },
            ) => match (spec.dynamic.as_ref(), vars.as_deref_mut()) {
                (Some(ctx), Some(v)) => Box::pin(send.udp(c, request, deadline, ctx, v))
                    .await
                    .map(Answer::from),
                _ => Err(Failure(error_kind::PROTOCOL)),
            },
            (
                Link::H2(c),
                StepPlan::Grpc {
                    request,
                    stream: Some(st),
                    ..
                },
            ) => {
                let dynamic = match (spec.dynamic.as_deref(), vars.as_deref_mut()) {
                    (Some(ctx), Some(v)) => Some((ctx, v)),
                    _ => None,
                };
                Box::pin(st.call(c, request, dynamic))
                    .await
                    .map(|(sent, reply, arrivals)| Answer {
                        sent,
                        received: reply.received,
                        error: st.verdict(&reply, vars.as_deref_mut()),
                        status: reply.status,
                        keep_alive: true,
                        grpc: reply.grpc_status,
                        arrivals,
                    })
            }
            (
                Link::H2(c),
                StepPlan::Grpc {
                    request,
                    dynamic: Some(d),
                    ..
                },
            ) => match (spec.dynamic.as_ref(), vars.as_deref_mut()) {
                (Some(ctx), Some(v)) => {
                    Box::pin(d.call(c, request, ctx, v))
                        .await
                        .map(|(sent, reply)| Answer {
                            sent,
                            received: reply.received,
                            error: d.verdict(&reply, v),
                            status: reply.status,
                            keep_alive: true,
                            grpc: reply.grpc_status,
                            arrivals: None,
                        })
                }
                _ => Err(Failure(error_kind::PROTOCOL)),
            },
            (Link::H2(c), StepPlan::Grpc { request, .. }) => {
                Box::pin(request.call(c)).await.map(|reply| Answer {
                    sent: request.len() as u64,
                    received: reply.received,
                    error: reply.error,
                    status: reply.status,
                    keep_alive: true,
                    grpc: reply.grpc_status,
                    arrivals: None,
                })
            }
            // Validation ties the step kind to the target's scheme; this cannot happen.
            _ => Err(Failure(error_kind::PROTOCOL)),
        };
        if result.is_err() {
            *conn = None;
        }
        result
    }
}

/// One WebSocket step over the session's WebSocket: a `connect` replaces whatever connection
/// the session held with a new, upgraded one (counted open while it is held); a `close` or
/// any failure leaves none.
async fn websocket<'a, 's>(
    (spec, endpoint): (&'s RunSpec, &crate::runner::endpoints::Pick),
    rec: &'a Recorder,
    conn: &mut Option<Tracked<'a>>,
    step: &'s crate::dynamic::DynamicWs,
    vars: &mut Option<Box<crate::dynamic::SessionVars>>,
) -> Result<Answer<'s>, Failure> {
    use crate::dynamic::After;
    let (Some(ctx), Some(v)) = (spec.dynamic.as_ref(), vars.as_deref_mut()) else {
        return Err(Failure(error_kind::PROTOCOL));
    };
    let crate::runner::Endpoint::Ws(addr, tls) = spec.endpoint(endpoint) else {
        return Err(Failure(error_kind::PROTOCOL));
    };
    // A connect's time, for the connect times of a ramp's stages: the TCP connect, the TLS
    // handshake and the upgrade, which is a WebSocket's handshake.
    let began = step.connects().then(Instant::now);
    if began.is_some() {
        *conn = None;
    }
    let open = conn.as_mut().and_then(|c| match &mut c.conn {
        Link::Ws(w) => Some(w),
        _ => None,
    });
    let (outcome, after) = match step.run(open, (addr, tls.as_deref()), ctx, v).await {
        Ok(done) => done,
        Err(f) => {
            *conn = None;
            return Err(f);
        }
    };
    match after {
        After::Same => {}
        After::Opened(w) => {
            rec.endpoints.opened(endpoint);
            if let Some(began) = began {
                rec.connects.record(began, Instant::now());
            }
            *conn = Some(rec.connections.track(Link::Ws(w)));
        }
        After::Closed => *conn = None,
    }
    Ok(Answer::from(outcome))
}

impl<'s> Answer<'s> {
    /// An HTTP/1.1 exchange of `request` (as written) answered by `resp`.
    fn http1(request: &[u8], expect: &'s Option<Vec<u16>>, resp: crate::http1::Response) -> Self {
        Self {
            sent: request.len() as u64,
            received: resp.bytes_received,
            error: status_error(expect.as_deref(), resp.status),
            status: resp.status,
            keep_alive: resp.keep_alive,
            grpc: None,
            arrivals: None,
        }
    }

    /// A tcp or udp exchange: no status, the connection kept.
    fn raw(sent: u64, received: u64) -> Self {
        Self {
            sent,
            received,
            error: None,
            status: 0,
            keep_alive: true,
            grpc: None,
            arrivals: None,
        }
    }
}

impl<'s> From<crate::dynamic::Outcome<'s>> for Answer<'s> {
    fn from(o: crate::dynamic::Outcome<'s>) -> Self {
        Self {
            sent: o.sent,
            received: o.received,
            error: o.error,
            status: o.status,
            keep_alive: o.keep_alive,
            grpc: None,
            arrivals: o.arrivals,
        }
    }
}
