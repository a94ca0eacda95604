//! The HTTP target: HTTP/1.1 and h2c on one port (hyper 1 + hyper-util's `auto` builder).
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /` | a tiny body (`hello from stampede\n`) |
//! | `GET /work?ms=N[&clock=wall]` | burns N ms of CPU time (a real computation, per request); with `clock=wall`, computes for N ms of wall time (a fixed service time on a shared CPU) |
//! | `GET /delay?ms=N` | answers after N ms without using CPU |
//! | `GET /bytes?n=N` | N bytes |
//! | `POST /echo` (or `PUT`) | the request body (at most [`HttpConfig::max_body_bytes`], else 413) |
//! | `GET /data` and any other `GET` path (404 with [`HttpConfig::strict`]) | the configured defaults: work [`HttpConfig::work_ms`], then delay [`HttpConfig::delay_ms`], then [`HttpConfig::bytes`] bytes; `?work_ms=`, `?delay_ms=`, `?bytes=` override them |
//! | `GET /sse?events=N&gap_ms=M` | `text/event-stream`: N events (`id: I`, `data: event-I`), the first at once, then one every M ms from the start (defaults 5 and 100) |
//! | `GET /chunks?n=N&gap_ms=M&size=B` | a chunked body of N chunks of B bytes, M ms apart (defaults 5, 100 and 64) |
//! | `GET /ws` (a WebSocket upgrade) | echoes every text and binary message to its sender |
//! | `GET /ws/broadcast` (a WebSocket upgrade) | sends every message to every client of the route, the sender included |
//! | `GET /metrics` | Prometheus text format |
//! | `GET /healthz`, `GET /readyz` | `ok`; `/readyz` is 503 while draining |
//!
//! `HEAD` is accepted wherever `GET` is. Keep-alive is the default; `Connection: close` is honoured.
//! A bad query value is 400, a wrong method 405, a body over the limit 413, a body not received within
//! [`HttpConfig::read_timeout`] 408.
//!
//! ## Metrics (`stampede_target_http_` prefix)
//! * `connections_open` (gauge: connected clients), `connections_total`, `connections_rejected_total`
//! * `distinct_source_ips` (gauge: distinct client IPs seen, tracking capped at
//!   [`HttpConfig::max_source_ips`])
//! * `requests_in_flight` (gauge)
//! * `requests_total{route,status}`, `request_duration_seconds{route}` (histogram, from request
//!   head received to response head ready)
//! * `errors_total{kind}`: `connection` (protocol error or header timeout), `body_timeout`,
//!   `body_too_large`, `bad_request`

mod access_log;
mod body;
mod gzip;
mod metrics;
mod paced;
mod route;
mod ws;

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus::IntGauge;
use tokio::net::{TcpListener, TcpStream};

use access_log::AccessLogger;
pub use access_log::{AccessLog, EmptyAccessLog};
use body::Body;
use metrics::HttpMetrics;
use route::{query_str, query_u64, Route};
pub use ws::WsStats;

use crate::common::{self, ConnGuard, ConnTracker, Lifecycle, Phase, SourceIps};
use crate::work;
use crate::TargetError;

/// Configuration of the HTTP target. [`Default`] gives sensible limits and no per-request cost.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// CPU milliseconds burnt by `GET /data` (and unknown `GET` paths); also `/work`'s default.
    pub work_ms: u64,
    /// Milliseconds `GET /data` waits before answering; also `/delay`'s default.
    pub delay_ms: u64,
    /// Bytes returned by `GET /data`; also `/bytes`'s default.
    pub bytes: u64,
    /// Largest request body accepted by `POST /echo`; larger is answered 413.
    pub max_body_bytes: u64,
    /// Largest `n` for `/bytes` (and `bytes` for `/data`); larger is answered 400.
    pub max_response_bytes: u64,
    /// Largest `ms` for `/work`; larger is answered 400.
    pub max_work_ms: u64,
    /// Largest `ms` for `/delay`; larger is answered 400.
    pub max_delay_ms: u64,
    /// Connections held open at once; connections beyond it are closed right after accept.
    pub max_connections: usize,
    /// Time allowed to receive a request head (also the keep-alive idle timeout) and a request body.
    pub read_timeout: Duration,
    /// After shutdown is asked for, how long open connections get to finish.
    pub shutdown_grace: Duration,
    /// Access log destination.
    pub access_log: AccessLog,
    /// Access log buffer size in bytes.
    pub access_log_buffer: usize,
    /// Distinct client IPs tracked for `distinct_source_ips` (memory bound).
    pub max_source_ips: usize,
    /// HTTP/2 streams allowed at once per connection.
    pub max_concurrent_streams: u32,
    /// Serve HTTPS (h2 and HTTP/1.1 by ALPN) instead of cleartext HTTP/1.1 and h2c.
    pub tls: Option<crate::tls::TlsServer>,
    /// Answer 404 to paths that are not routes (instead of serving them as `/data`), so a
    /// typo in a scenario's path shows as `status_404` rather than passing unnoticed.
    pub strict: bool,
    /// Gzip successful bodies (up to 64 MiB) for requests whose `accept-encoding` lists
    /// gzip, so a client's decoding meets real compressed answers.
    pub gzip: bool,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            work_ms: 0,
            delay_ms: 0,
            bytes: 1024,
            max_body_bytes: 1 << 20,
            max_response_bytes: 1 << 30,
            max_work_ms: 10_000,
            max_delay_ms: 60_000,
            max_connections: 10_000,
            read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            access_log: AccessLog::Off,
            access_log_buffer: 64 * 1024,
            max_source_ips: 65_536,
            max_concurrent_streams: 256,
            tls: None,
            strict: false,
            gzip: false,
        }
    }
}

/// Counters of an [`HttpServer`], read without scraping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HttpStats {
    /// Requests answered (any route, any status), counted before the response is sent.
    pub requests_total: u64,
    /// Of those, requests that came over HTTP/2 (h2c, or h2 over TLS).
    pub requests_http2: u64,
    /// Requests being handled now.
    pub requests_in_flight: u64,
    /// Connections open now (the connected-clients gauge).
    pub connections_open: u64,
    /// Connections accepted since start (not counting rejected ones).
    pub connections_total: u64,
    /// Connections closed at once because [`HttpConfig::max_connections`] were open.
    pub connections_rejected: u64,
    /// Distinct client IP addresses seen (capped at [`HttpConfig::max_source_ips`]).
    pub distinct_source_ips: u64,
    /// Sum of `errors_total` over all kinds.
    pub errors_total: u64,
    /// TLS handshakes that resumed an earlier session rather than doing a full one, so a test
    /// can tell a client that resumes from one that does every handshake in full.
    pub tls_resumed: u64,
    /// The WebSocket routes' connections and messages.
    pub ws: WsStats,
}

/// An HTTP target server and a handle on its counters.
///
/// Cheap to clone; all clones share the same state. Typical in-process use:
///
/// ```no_run
/// # async fn f() -> Result<(), stampede_target_servers::TargetError> {
/// use stampede_target_servers::http::{HttpConfig, HttpServer};
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
/// let server = HttpServer::new(HttpConfig { delay_ms: 5, ..HttpConfig::default() })?;
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let task = tokio::spawn(server.clone().serve(listener, async { let _ = stopped.await; }));
/// // ... drive load ...
/// assert!(server.stats().requests_total > 0);
/// let _ = stop.send(());
/// task.await.unwrap()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct HttpServer {
    shared: Arc<Shared>,
}

/// Serves HTTP on `listener` with `cfg` until `shutdown` resolves, then drains gracefully.
///
/// Equivalent to `HttpServer::new(cfg)?.serve(listener, shutdown)`.
pub async fn serve(
    listener: TcpListener,
    cfg: HttpConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), TargetError> {
    HttpServer::new(cfg)?.serve(listener, shutdown).await
}

impl HttpServer {
    /// Builds the server state: metrics registry, access log (opened here), limits.
    pub fn new(cfg: HttpConfig) -> Result<Self, TargetError> {
        if cfg.max_connections == 0 {
            return Err(TargetError::Config(
                "max_connections must be at least 1".into(),
            ));
        }
        let metrics = HttpMetrics::new()?;
        let access_log = AccessLogger::open(&cfg.access_log, cfg.access_log_buffer)?;
        let conns = Arc::new(ConnTracker::new(
            cfg.max_connections,
            metrics.conn_open.clone(),
            metrics.conn_total.clone(),
            metrics.conn_rejected.clone(),
        ));
        let source_ips = SourceIps::new(cfg.max_source_ips, metrics.source_ips.clone());
        let pattern: Vec<u8> = (0..64 * 1024).map(|i| b'a' + (i % 26) as u8).collect();
        let cfg_max_body = cfg.max_body_bytes;
        Ok(Self {
            shared: Arc::new(Shared {
                cfg,
                metrics,
                access_log,
                conns,
                source_ips,
                lifecycle: Lifecycle::new(),
                requests_total: AtomicU64::new(0),
                requests_http2: AtomicU64::new(0),
                pattern: Bytes::from(pattern),
                ws: Arc::new(ws::WsState::new(cfg_max_body)),
            }),
        })
    }

    /// The configuration the server runs with.
    pub fn config(&self) -> &HttpConfig {
        &self.shared.cfg
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> HttpStats {
        let s = &self.shared;
        HttpStats {
            requests_total: s.requests_total.load(Ordering::Relaxed),
            requests_http2: s.requests_http2.load(Ordering::Relaxed),
            tls_resumed: s.metrics.tls_resumed.get(),
            requests_in_flight: u64::try_from(s.metrics.in_flight.get()).unwrap_or(0),
            connections_open: s.conns.open(),
            connections_total: s.conns.total(),
            connections_rejected: s.conns.rejected(),
            distinct_source_ips: s.source_ips.count(),
            errors_total: s.metrics.errors_sum(),
            ws: s.ws.stats(),
        }
    }

    /// Waits until `pred(&self.stats())` holds. The predicate is re-evaluated whenever a
    /// connection opens or closes (not on every request); bound it with a timeout in tests.
    pub async fn wait_until(&self, mut pred: impl FnMut(&HttpStats) -> bool) {
        self.shared.conns.wait_until(|_| pred(&self.stats())).await;
    }

    /// The `/metrics` text (Prometheus text exposition format).
    pub fn metrics_text(&self) -> String {
        crate::metrics::render(&self.shared.metrics.registry)
    }

    /// Serves `listener` until `shutdown` resolves, then stops accepting, lets open connections
    /// finish their current request for [`HttpConfig::shutdown_grace`], drops the rest and returns.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), TargetError> {
        let shared = self.shared;
        let local = listener.local_addr().map_err(TargetError::LocalAddr)?;
        tracing::info!(addr = %local, tls = shared.cfg.tls.is_some(), "http target listening");
        let builder = Arc::new(shared.builder());
        let flusher = shared.access_log.is_some().then(|| {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    if let Some(log) = &shared.access_log {
                        log.flush();
                    }
                }
            })
        });
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let Some(guard) = shared.conns.try_admit() else {
                            drop(stream);
                            continue;
                        };
                        shared.source_ips.record(peer.ip());
                        tokio::spawn(connection(Arc::clone(&shared), Arc::clone(&builder), stream, peer, guard));
                    }
                    Err(e) => common::accept_backoff(&e).await,
                },
            }
        }
        drop(listener);
        tracing::info!(open = shared.conns.open(), "http target draining");
        common::drain(&shared.lifecycle, &shared.conns, shared.cfg.shutdown_grace).await;
        if let Some(f) = flusher {
            f.abort();
        }
        if let Some(log) = &shared.access_log {
            log.flush();
        }
        tracing::info!("http target stopped");
        Ok(())
    }
}

struct Shared {
    cfg: HttpConfig,
    metrics: HttpMetrics,
    access_log: Option<AccessLogger>,
    conns: Arc<ConnTracker>,
    source_ips: SourceIps,
    lifecycle: Lifecycle,
    requests_total: AtomicU64,
    requests_http2: AtomicU64,
    /// Source of `/bytes` and `/data` bodies.
    pattern: Bytes,
    ws: Arc<ws::WsState>,
}

impl Shared {
    fn builder(&self) -> auto::Builder<TokioExecutor> {
        let mut b = auto::Builder::new(TokioExecutor::new());
        b.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.cfg.read_timeout)
            .max_buf_size(64 * 1024)
            .writev(false)
            .keep_alive(true);
        b.http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(self.cfg.max_concurrent_streams)
            .max_header_list_size(16 * 1024)
            .max_send_buf_size(256 * 1024)
            .keep_alive_interval(None);
        b
    }

    async fn handle(
        &self,
        req: Request<Incoming>,
        peer: IpAddr,
        slot: &ws::Slot,
    ) -> Response<Body> {
        let start = Instant::now();
        // Decrements on drop, also when the client goes away mid-request.
        let in_flight = InFlight::new(&self.metrics.in_flight);
        let log_head = self.access_log.as_ref().map(|_| {
            (
                req.method().clone(),
                req.uri()
                    .path_and_query()
                    .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned()),
                req.version(),
            )
        });
        if req.version() == hyper::Version::HTTP_2 {
            self.requests_http2.fetch_add(1, Ordering::Relaxed);
        }
        let gzip = self.cfg.gzip && gzip::accepted(req.headers());
        let (route, mut resp) = self.route(req, slot).await;
        if gzip {
            resp = gzip::compress(resp);
        }
        let elapsed = start.elapsed();
        self.metrics.observe(route, resp.status(), elapsed);
        self.requests_total.fetch_add(1, Ordering::Relaxed);
        drop(in_flight);
        if let (Some(log), Some((method, target, version))) = (&self.access_log, log_head) {
            log.log(
                peer,
                method.as_str(),
                &target,
                version_str(version),
                resp.status().as_u16(),
                resp.body().len(),
                elapsed,
            );
        }
        resp
    }

    async fn route(&self, req: Request<Incoming>, slot: &ws::Slot) -> (Route, Response<Body>) {
        let get = matches!(*req.method(), Method::GET | Method::HEAD);
        let path = req.uri().path();
        let route = Route::of(path);
        if let (Some(kind), true) = (route.websocket(), *req.method() == Method::GET) {
            let phase = self.lifecycle.subscribe();
            return (route, ws::upgrade(&self.ws, kind, req, slot, phase));
        }
        if self.cfg.strict && route == Route::Data && path != "/data" {
            return (
                route,
                text(StatusCode::NOT_FOUND, Body::from_static(b"no such path\n")),
            );
        }
        if route == Route::Echo {
            return if matches!(*req.method(), Method::POST | Method::PUT) {
                (route, Box::pin(self.echo(req)).await)
            } else {
                (route, status_only(StatusCode::METHOD_NOT_ALLOWED))
            };
        }
        if !get {
            let status = if route == Route::Data {
                StatusCode::NOT_FOUND
            } else {
                StatusCode::METHOD_NOT_ALLOWED
            };
            return (route, status_only(status));
        }
        let query = req.uri().query();
        let resp = match route {
            Route::Root => text(StatusCode::OK, Body::from_static(b"hello from stampede\n")),
            Route::Work => match self.param(query, "ms", self.cfg.work_ms, self.cfg.max_work_ms) {
                Ok(ms) => {
                    let Some(clock) = query_str(query, "clock")
                        .map_or(Some(work::Clock::Cpu), work::Clock::parse)
                    else {
                        return (
                            route,
                            text(
                                StatusCode::BAD_REQUEST,
                                Body::from_static(b"clock must be cpu or wall\n"),
                            ),
                        );
                    };
                    let sum = Box::pin(work::burn(Duration::from_millis(ms), ms, clock)).await;
                    text(
                        StatusCode::OK,
                        Body::full(Bytes::from(format!("worked {ms} ms ({sum:016x})\n"))),
                    )
                }
                Err(resp) => *resp,
            },
            Route::Delay => match self.param(query, "ms", self.cfg.delay_ms, self.cfg.max_delay_ms)
            {
                Ok(ms) => {
                    if ms > 0 {
                        Box::pin(crate::precise::sleep(Duration::from_millis(ms))).await;
                    }
                    text(
                        StatusCode::OK,
                        Body::full(Bytes::from(format!("delayed {ms} ms\n"))),
                    )
                }
                Err(resp) => *resp,
            },
            Route::Bytes => {
                match self.param(query, "n", self.cfg.bytes, self.cfg.max_response_bytes) {
                    Ok(n) => octets(Body::repeat(&self.pattern, n)),
                    Err(resp) => *resp,
                }
            }
            Route::Data => Box::pin(self.data(query)).await,
            Route::Sse => match self.paced_params(query, "events", None) {
                Ok((n, gap, _)) => {
                    let mut resp = Response::new(Body::Paced(Box::new(paced::Paced::new(
                        paced::Framing::Sse,
                        n,
                        gap,
                    ))));
                    let h = resp.headers_mut();
                    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
                    h.insert(
                        hyper::header::CACHE_CONTROL,
                        HeaderValue::from_static("no-cache"),
                    );
                    resp
                }
                Err(resp) => *resp,
            },
            Route::Chunks => match self.paced_params(query, "n", Some(64)) {
                Ok((n, gap, size)) => {
                    let framing = paced::Framing::Chunks {
                        pattern: self.pattern.clone(),
                        size: usize::try_from(size).unwrap_or(0),
                    };
                    octets(Body::Paced(Box::new(paced::Paced::new(framing, n, gap))))
                }
                Err(resp) => *resp,
            },
            // Not GET (answered above when it is).
            Route::Ws | Route::WsBroadcast => status_only(StatusCode::METHOD_NOT_ALLOWED),
            Route::Metrics => {
                let mut resp = Response::new(Body::full(Bytes::from(self.metrics.render())));
                resp.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
                );
                resp
            }
            Route::Healthz => text(StatusCode::OK, Body::from_static(b"ok\n")),
            Route::Readyz => {
                if self.lifecycle.phase() == Phase::Running {
                    text(StatusCode::OK, Body::from_static(b"ok\n"))
                } else {
                    text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        Body::from_static(b"draining\n"),
                    )
                }
            }
            Route::Echo => status_only(StatusCode::METHOD_NOT_ALLOWED),
        };
        (route, resp)
    }

    async fn data(&self, query: Option<&str>) -> Response<Body> {
        let cfg = &self.cfg;
        let work_ms = match self.param(query, "work_ms", cfg.work_ms, cfg.max_work_ms) {
            Ok(v) => v,
            Err(r) => return *r,
        };
        let delay_ms = match self.param(query, "delay_ms", cfg.delay_ms, cfg.max_delay_ms) {
            Ok(v) => v,
            Err(r) => return *r,
        };
        let bytes = match self.param(query, "bytes", cfg.bytes, cfg.max_response_bytes) {
            Ok(v) => v,
            Err(r) => return *r,
        };
        if work_ms > 0 {
            std::hint::black_box(
                work::burn(Duration::from_millis(work_ms), bytes, work::Clock::Cpu).await,
            );
        }
        if delay_ms > 0 {
            crate::precise::sleep(Duration::from_millis(delay_ms)).await;
        }
        octets(Body::repeat(&self.pattern, bytes))
    }

    async fn echo(&self, req: Request<Incoming>) -> Response<Body> {
        let max = self.cfg.max_body_bytes;
        let declared = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max) {
            self.metrics.error("body_too_large");
            return status_only(StatusCode::PAYLOAD_TOO_LARGE);
        }
        let limit = usize::try_from(max).unwrap_or(usize::MAX);
        let collect = Limited::new(req.into_body(), limit).collect();
        match tokio::time::timeout(self.cfg.read_timeout, collect).await {
            Err(_) => {
                self.metrics.error("body_timeout");
                status_only(StatusCode::REQUEST_TIMEOUT)
            }
            Ok(Err(e)) => {
                if e.is::<http_body_util::LengthLimitError>() {
                    self.metrics.error("body_too_large");
                    status_only(StatusCode::PAYLOAD_TOO_LARGE)
                } else {
                    self.metrics.error("bad_request");
                    status_only(StatusCode::BAD_REQUEST)
                }
            }
            Ok(Ok(body)) => octets(Body::full(body.to_bytes())),
        }
    }

    /// A paced reply's frame count (`count_key`, default 5), `gap_ms` (default 100) and, for
    /// chunks, `size` (default `size`): each bounded, a 400 naming the parameter otherwise.
    #[allow(clippy::type_complexity)]
    fn paced_params(
        &self,
        query: Option<&str>,
        count_key: &str,
        size: Option<u64>,
    ) -> Result<(u64, Duration, u64), Box<Response<Body>>> {
        let n = self.param(query, count_key, 5, paced::MAX_FRAMES)?;
        let gap = self.param(query, "gap_ms", 100, self.cfg.max_delay_ms)?;
        let size = match size {
            Some(default) => self.param(query, "size", default, paced::MAX_CHUNK)?.max(1),
            None => 0,
        };
        Ok((n, Duration::from_millis(gap), size))
    }

    /// Reads `key` from the query: absent is `default`; unparsable or above `max` is a 400.
    fn param(
        &self,
        query: Option<&str>,
        key: &str,
        default: u64,
        max: u64,
    ) -> Result<u64, Box<Response<Body>>> {
        match query_u64(query, key) {
            Ok(Some(v)) if v <= max => Ok(v),
            Ok(None) if default <= max => Ok(default),
            Ok(_) => {
                self.metrics.error("bad_request");
                Err(Box::new(text(
                    StatusCode::BAD_REQUEST,
                    Body::full(Bytes::from(format!("{key} must be at most {max}\n"))),
                )))
            }
            Err(()) => {
                self.metrics.error("bad_request");
                Err(Box::new(text(
                    StatusCode::BAD_REQUEST,
                    Body::full(Bytes::from(format!(
                        "{key} must be a non-negative integer\n"
                    ))),
                )))
            }
        }
    }
}

/// Holds one unit of the in-flight gauge.
struct InFlight<'a>(&'a IntGauge);

impl<'a> InFlight<'a> {
    fn new(gauge: &'a IntGauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

async fn connection(
    shared: Arc<Shared>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    stream: TcpStream,
    peer: SocketAddr,
    guard: ConnGuard,
) {
    let _ = stream.set_nodelay(true);
    let ip = peer.ip();
    let svc_shared = Arc::clone(&shared);
    // The admission slot: a WebSocket upgrade takes it into its own task, which outlives this one.
    let slot: ws::Slot = Arc::new(std::sync::Mutex::new(Some(guard)));
    let svc_slot = Arc::clone(&slot);
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let shared = Arc::clone(&svc_shared);
        let slot = Arc::clone(&svc_slot);
        async move { Ok::<_, Infallible>(shared.handle(req, ip, &slot).await) }
    });
    let io = match &shared.cfg.tls {
        None => tokio_util::either::Either::Left(stream),
        Some(tls) => {
            let handshake = tls.acceptor().accept(stream).into_fallible();
            match tokio::time::timeout(shared.cfg.read_timeout, handshake).await {
                Ok(Ok(s)) => {
                    if s.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                        shared.metrics.tls_resumed.inc();
                    }
                    tokio_util::either::Either::Right(s)
                }
                Ok(Err((e, stream))) => {
                    shared.metrics.error("tls");
                    tracing::debug!(peer = %peer, error = %e, "tls handshake failed");
                    linger(stream, shared.cfg.read_timeout).await;
                    return;
                }
                Err(_) => {
                    // A timed-out handshake; the guard closes the connection's slot.
                    shared.metrics.error("tls");
                    return;
                }
            }
        }
    };
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
    tokio::pin!(conn);
    let mut phase = shared.lifecycle.subscribe();
    let result = tokio::select! {
        res = conn.as_mut() => Some(res),
        () = phase.reached(Phase::Draining) => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                res = conn.as_mut() => Some(res),
                () = phase.reached(Phase::Forced) => None,
            }
        }
    };
    if let Some(Err(e)) = result {
        shared.metrics.error("connection");
        tracing::debug!(peer = %peer, error = %e, "http connection error");
    }
    drop(slot);
}

/// Closes a connection whose handshake failed without resetting it. The alert naming the
/// failure has been written, but with TLS 1.3 a client that finished its side already sent its
/// first request: closing with those bytes unread would send a reset, which can overtake the
/// alert, so the client would see `reset` instead of the refusal. A FIN after the alert, then
/// reading until the client closes (or `within`), keeps the alert readable.
async fn linger(mut stream: TcpStream, within: Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(within.min(Duration::from_secs(2)), async {
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

fn version_str(v: hyper::Version) -> &'static str {
    match v {
        hyper::Version::HTTP_09 => "HTTP/0.9",
        hyper::Version::HTTP_10 => "HTTP/1.0",
        hyper::Version::HTTP_11 => "HTTP/1.1",
        hyper::Version::HTTP_2 => "HTTP/2.0",
        hyper::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/?",
    }
}

fn text(status: StatusCode, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn octets(body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    resp
}

fn status_only(status: StatusCode) -> Response<Body> {
    let reason = status.canonical_reason().unwrap_or("error");
    text(status, Body::full(Bytes::from(format!("{reason}\n"))))
}
