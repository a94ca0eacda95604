//! The connection loop shared by the frame-based stream servers (login, echo over TCP and Unix).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, Registry};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};

use crate::common::{self, ConnGuard, ConnTracker, Lifecycle, Phase};
use crate::frame::{Decoder, FrameError, Framing};
use crate::TargetError;

/// Most bytes read from a socket at once.
const READ_CHUNK: usize = 8 * 1024;

/// Counters of a frame-based server (login, echo), read without scraping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FramedStats {
    /// Connections open now (always 0 for UDP).
    pub connections_open: u64,
    /// Connections accepted since start.
    pub connections_total: u64,
    /// Connections closed at accept because the connection cap was reached.
    pub connections_rejected: u64,
    /// Frames (UDP: datagrams) answered.
    pub frames_total: u64,
    /// Sum of `errors_total` over all kinds.
    pub errors_total: u64,
    /// Payload and framing bytes received.
    pub bytes_received: u64,
    /// Payload and framing bytes sent.
    pub bytes_sent: u64,
}

/// Error kinds, as used in the `errors_total{kind}` label.
pub(crate) const ERROR_KINDS: [&str; 6] = [
    "malformed",
    "oversize",
    "truncated",
    "timeout",
    "io",
    "rejected",
];

pub(crate) struct FramedMetrics {
    pub(crate) registry: Registry,
    pub(crate) conn_open: IntGauge,
    pub(crate) conn_total: IntCounter,
    pub(crate) conn_rejected: IntCounter,
    pub(crate) frames: IntCounter,
    pub(crate) errors: IntCounterVec,
    pub(crate) duration: Histogram,
    pub(crate) bytes_in: IntCounter,
    pub(crate) bytes_out: IntCounter,
}

impl FramedMetrics {
    /// Metrics named `stampede_target_<kind>_...`.
    pub(crate) fn new(kind: &str) -> Result<Self, TargetError> {
        let registry = crate::metrics::registry(kind)?;
        let conn_open = IntGauge::new("connections_open", "Connected clients (open connections).")?;
        let conn_total = IntCounter::new("connections_total", "Connections accepted.")?;
        let conn_rejected = IntCounter::new(
            "connections_rejected_total",
            "Connections closed at accept because the connection cap was reached.",
        )?;
        let frames = IntCounter::new("frames_total", "Frames (datagrams) answered.")?;
        let errors = IntCounterVec::new(
            prometheus::Opts::new(
                "errors_total",
                "Errors by kind: malformed, oversize, truncated, timeout, io, rejected.",
            ),
            &["kind"],
        )?;
        let duration = Histogram::with_opts(crate::metrics::histogram_opts(
            "request_duration_seconds",
            "Time from a complete frame received to its answer written.",
        ))?;
        let bytes_in =
            IntCounter::new("received_bytes_total", "Bytes received, framing included.")?;
        let bytes_out = IntCounter::new("sent_bytes_total", "Bytes sent, framing included.")?;
        for m in [&conn_total, &conn_rejected, &frames, &bytes_in, &bytes_out] {
            registry.register(Box::new(m.clone()))?;
        }
        registry.register(Box::new(conn_open.clone()))?;
        registry.register(Box::new(errors.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        // Export every error kind from the start, so rates work from the first scrape.
        for k in ERROR_KINDS {
            errors.with_label_values(&[k]);
        }
        Ok(Self {
            registry,
            conn_open,
            conn_total,
            conn_rejected,
            frames,
            errors,
            duration,
            bytes_in,
            bytes_out,
        })
    }

    pub(crate) fn error(&self, kind: &str) {
        self.errors.with_label_values(&[kind]).inc();
    }

    pub(crate) fn errors_sum(&self) -> u64 {
        ERROR_KINDS
            .iter()
            .map(|k| self.errors.with_label_values(&[*k]).get())
            .sum()
    }
}

/// Limits of a frame-based stream server.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) framing: Framing,
    pub(crate) max_frame: usize,
    pub(crate) read_timeout: Duration,
    pub(crate) shutdown_grace: Duration,
}

/// What a server does with one frame.
pub(crate) trait Handler: Send + Sync + 'static {
    /// Appends the answer to `frame` to `out` (already framed), or names the error kind that
    /// closes the connection.
    fn handle(&self, frame: Bytes, out: &mut BytesMut) -> Result<(), &'static str>;
}

/// State shared by all connections of one server.
pub(crate) struct Core {
    pub(crate) metrics: FramedMetrics,
    pub(crate) conns: Arc<ConnTracker>,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) limits: Limits,
}

impl Core {
    pub(crate) fn new(
        kind: &str,
        limits: Limits,
        max_connections: usize,
    ) -> Result<Self, TargetError> {
        if max_connections == 0 {
            return Err(TargetError::Config(
                "max_connections must be at least 1".into(),
            ));
        }
        if limits.max_frame > u32::MAX as usize {
            return Err(TargetError::Config(
                "max_frame_bytes must fit in 32 bits".into(),
            ));
        }
        let metrics = FramedMetrics::new(kind)?;
        let conns = Arc::new(ConnTracker::new(
            max_connections,
            metrics.conn_open.clone(),
            metrics.conn_total.clone(),
            metrics.conn_rejected.clone(),
        ));
        Ok(Self {
            metrics,
            conns,
            lifecycle: Lifecycle::new(),
            limits,
        })
    }

    pub(crate) fn stats(&self) -> FramedStats {
        let m = &self.metrics;
        FramedStats {
            connections_open: self.conns.open(),
            connections_total: self.conns.total(),
            connections_rejected: self.conns.rejected(),
            frames_total: m.frames.get(),
            errors_total: m.errors_sum(),
            bytes_received: m.bytes_in.get(),
            bytes_sent: m.bytes_out.get(),
        }
    }

    pub(crate) fn metrics_text(&self) -> String {
        crate::metrics::render(&self.metrics.registry)
    }
}

/// Accepts TCP connections until `shutdown`, then drains.
pub(crate) async fn serve_tcp<H: Handler>(
    core: Arc<Core>,
    handler: Arc<H>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    what: &'static str,
) -> Result<(), TargetError> {
    let local = listener.local_addr().map_err(TargetError::LocalAddr)?;
    tracing::info!(addr = %local, "{what} listening");
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let Some(guard) = core.conns.try_admit() else { continue };
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(connection(Arc::clone(&core), Arc::clone(&handler), stream, guard));
                }
                Err(e) => common::accept_backoff(&e).await,
            }
        }
    }
    drop(listener);
    common::drain(&core.lifecycle, &core.conns, core.limits.shutdown_grace).await;
    tracing::info!("{what} stopped");
    Ok(())
}

/// Accepts Unix-socket connections until `shutdown`, then drains.
pub(crate) async fn serve_unix<H: Handler>(
    core: Arc<Core>,
    handler: Arc<H>,
    listener: UnixListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    what: &'static str,
) -> Result<(), TargetError> {
    let local = listener.local_addr().map_err(TargetError::LocalAddr)?;
    tracing::info!(addr = ?local, "{what} listening");
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let Some(guard) = core.conns.try_admit() else { continue };
                    tokio::spawn(connection(Arc::clone(&core), Arc::clone(&handler), stream, guard));
                }
                Err(e) => common::accept_backoff(&e).await,
            }
        }
    }
    drop(listener);
    common::drain(&core.lifecycle, &core.conns, core.limits.shutdown_grace).await;
    tracing::info!("{what} stopped");
    Ok(())
}

fn frame_error_kind(e: &FrameError) -> &'static str {
    match e {
        FrameError::Oversize { .. } | FrameError::LineTooLong { .. } => "oversize",
        FrameError::Truncated { .. } => "truncated",
        FrameError::EmbeddedNewline => "malformed",
    }
}

enum Step {
    Continue,
    Close,
}

/// Serves one connection: read, split into frames, answer each, until EOF, error, timeout or
/// shutdown. Every frame must be complete within `read_timeout` of the previous one (so an idle
/// or trickling client is closed), and no more than one frame plus a read chunk is buffered.
async fn connection<S, H>(core: Arc<Core>, handler: Arc<H>, mut stream: S, guard: ConnGuard)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    let limits = core.limits;
    let m = &core.metrics;
    let mut decoder = Decoder::new(limits.framing, limits.max_frame);
    let mut rbuf = BytesMut::with_capacity(READ_CHUNK.min(decoder.max_buffered() + 1));
    let mut wbuf = BytesMut::new();
    let mut phase = core.lifecycle.subscribe();
    let mut deadline = tokio::time::Instant::now() + limits.read_timeout;
    'conn: loop {
        // Answer every complete frame in the buffer.
        let mut step = Step::Continue;
        loop {
            match decoder.decode(&mut rbuf) {
                Ok(Some(frame)) => {
                    let started = Instant::now();
                    if let Err(kind) = handler.handle(frame, &mut wbuf) {
                        m.error(kind);
                        step = Step::Close;
                        break;
                    }
                    m.frames.inc();
                    m.duration.observe(started.elapsed().as_secs_f64());
                    deadline = tokio::time::Instant::now() + limits.read_timeout;
                }
                Ok(None) => break,
                Err(e) => {
                    m.error(frame_error_kind(&e));
                    step = Step::Close;
                    break;
                }
            }
        }
        if !wbuf.is_empty() {
            match tokio::time::timeout(limits.read_timeout, stream.write_all(&wbuf)).await {
                Ok(Ok(())) => m.bytes_out.inc_by(wbuf.len() as u64),
                Ok(Err(_)) => {
                    m.error("io");
                    break 'conn;
                }
                Err(_) => {
                    m.error("timeout");
                    break 'conn;
                }
            }
            wbuf.clear();
        }
        if matches!(step, Step::Close) {
            break;
        }
        // Between frames, a draining server closes the connection.
        if rbuf.is_empty() && core.lifecycle.phase() != Phase::Running {
            break;
        }
        let room = (decoder.max_buffered() + 1)
            .saturating_sub(rbuf.len())
            .clamp(1, READ_CHUNK);
        rbuf.reserve(room);
        // Between frames a draining server closes the connection; inside one it waits to force.
        let wait_for = if rbuf.is_empty() {
            Phase::Draining
        } else {
            Phase::Forced
        };
        let outcome = {
            let mut limited = (&mut stream).take(room as u64);
            let read = tokio::time::timeout_at(deadline, limited.read_buf(&mut rbuf));
            tokio::select! {
                res = read => Some(res),
                () = phase.reached(wait_for) => None,
            }
        };
        match outcome {
            None => break,
            Some(Ok(Ok(0))) => {
                if !rbuf.is_empty() {
                    let e = decoder
                        .decode_eof(&mut rbuf)
                        .err()
                        .unwrap_or(FrameError::Truncated {
                            buffered: rbuf.len(),
                        });
                    m.error(frame_error_kind(&e));
                }
                break;
            }
            Some(Ok(Ok(n))) => m.bytes_in.inc_by(n as u64),
            Some(Ok(Err(_))) => {
                m.error("io");
                break;
            }
            Some(Err(_)) => {
                // Idle between frames is a normal close; inside a frame it is an error.
                if !rbuf.is_empty() {
                    m.error("timeout");
                }
                break;
            }
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.shutdown()).await;
    drop(guard);
}
