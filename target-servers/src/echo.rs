//! Echo ("ping-pong") servers, to compare transports.
//!
//! * TCP and Unix sockets: each frame is answered with the same frame. Framing is
//!   [`Framing::Length`] (4-byte big-endian length, then the payload) or [`Framing::Newline`]
//!   (payload then `\n`); see [`crate::frame`].
//! * UDP: each datagram is sent back unchanged to its sender. Datagrams longer than
//!   [`EchoConfig::max_frame_bytes`] are dropped and counted as `oversize` errors.
//!
//! Metrics (prefix `stampede_target_echo_`): `connections_open`, `connections_total`,
//! `connections_rejected_total`, `frames_total`, `received_bytes_total`, `sent_bytes_total`,
//! `errors_total{kind}` and the `request_duration_seconds` histogram. Serve them with
//! [`crate::metrics::serve`] and [`EchoServer::metrics_text`].

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::net::{TcpListener, UdpSocket, UnixListener};

use crate::common::Phase;
use crate::frame::{self as codec, Framing};
pub use crate::framed::FramedStats;
use crate::framed::{self, Core, Handler, Limits};
use crate::TargetError;

/// Largest UDP payload.
const MAX_DATAGRAM: usize = 65_507;

/// Configuration of the echo servers.
#[derive(Clone, Debug)]
pub struct EchoConfig {
    /// Stream framing (TCP and Unix).
    pub framing: Framing,
    /// Largest frame payload (UDP: datagram) accepted; a longer one closes the connection
    /// (UDP: is dropped) and counts an `oversize` error.
    pub max_frame_bytes: usize,
    /// Connections held open at once (TCP and Unix).
    pub max_connections: usize,
    /// Each frame must be fully received within this time of the previous one (also the idle
    /// timeout); writes that block longer close the connection.
    pub read_timeout: Duration,
    /// After shutdown is asked for, how long open connections get to finish.
    pub shutdown_grace: Duration,
}

impl Default for EchoConfig {
    fn default() -> Self {
        Self {
            framing: Framing::Length,
            max_frame_bytes: 64 * 1024,
            max_connections: 10_000,
            read_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// An echo server and a handle on its counters. Cheap to clone; clones share state.
///
/// One `EchoServer` serves one socket; build another for a second transport.
#[derive(Clone)]
pub struct EchoServer {
    core: Arc<Core>,
    handler: Arc<Echo>,
}

struct Echo {
    framing: Framing,
}

impl Handler for Echo {
    fn handle(&self, frame: Bytes, out: &mut BytesMut) -> Result<(), &'static str> {
        codec::encode(self.framing, &frame, out).map_err(|_| "malformed")
    }
}

impl EchoServer {
    /// Builds the server state and its metrics registry.
    pub fn new(cfg: EchoConfig) -> Result<Self, TargetError> {
        let limits = Limits {
            framing: cfg.framing,
            max_frame: cfg.max_frame_bytes,
            read_timeout: cfg.read_timeout,
            shutdown_grace: cfg.shutdown_grace,
        };
        Ok(Self {
            core: Arc::new(Core::new("echo", limits, cfg.max_connections)?),
            handler: Arc::new(Echo {
                framing: cfg.framing,
            }),
        })
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> FramedStats {
        self.core.stats()
    }

    /// The metrics in Prometheus text format.
    pub fn metrics_text(&self) -> String {
        self.core.metrics_text()
    }

    /// Waits until `pred(&self.stats())` holds; re-evaluated when a connection opens or closes.
    pub async fn wait_until(&self, mut pred: impl FnMut(&FramedStats) -> bool) {
        self.core
            .conns
            .wait_until(|_| pred(&self.core.stats()))
            .await;
    }

    /// Serves TCP connections until `shutdown` resolves, then drains (see [`EchoConfig`]).
    pub async fn serve_tcp(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), TargetError> {
        framed::serve_tcp(
            self.core,
            self.handler,
            listener,
            shutdown,
            "echo tcp target",
        )
        .await
    }

    /// Serves Unix-socket connections until `shutdown` resolves, then drains.
    pub async fn serve_unix(
        self,
        listener: UnixListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), TargetError> {
        framed::serve_unix(
            self.core,
            self.handler,
            listener,
            shutdown,
            "echo unix target",
        )
        .await
    }

    /// Echoes datagrams on `socket` until `shutdown` resolves.
    pub async fn serve_udp(
        self,
        socket: UdpSocket,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), TargetError> {
        let local = socket.local_addr().map_err(TargetError::LocalAddr)?;
        tracing::info!(addr = %local, "echo udp target listening");
        let m = &self.core.metrics;
        let max = self.core.limits.max_frame.min(MAX_DATAGRAM);
        // One byte more than allowed, to tell an oversize datagram from a full-size one.
        let mut buf = vec![0u8; max + 1];
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                res = socket.recv_from(&mut buf) => {
                    let (n, peer) = match res {
                        Ok(r) => r,
                        Err(e) => {
                            // e.g. ICMP errors surfacing on the socket: count and go on.
                            m.error("io");
                            tracing::debug!(error = %e, "udp receive failed");
                            continue;
                        }
                    };
                    m.bytes_in.inc_by(n as u64);
                    if n > max {
                        m.error("oversize");
                        continue;
                    }
                    let started = Instant::now();
                    match socket.send_to(&buf[..n], peer).await {
                        Ok(sent) => {
                            m.bytes_out.inc_by(sent as u64);
                            m.frames.inc();
                            m.duration.observe(started.elapsed().as_secs_f64());
                        }
                        Err(e) => {
                            m.error("io");
                            tracing::debug!(error = %e, peer = %peer, "udp send failed");
                        }
                    }
                }
            }
        }
        self.core.lifecycle.set(Phase::Forced);
        tracing::info!("echo udp target stopped");
        Ok(())
    }
}

/// Serves TCP echo on `listener` until `shutdown`; see [`EchoServer::serve_tcp`].
pub async fn serve_tcp(
    listener: TcpListener,
    cfg: EchoConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), TargetError> {
    EchoServer::new(cfg)?.serve_tcp(listener, shutdown).await
}

/// Serves UDP echo on `socket` until `shutdown`; see [`EchoServer::serve_udp`].
pub async fn serve_udp(
    socket: UdpSocket,
    cfg: EchoConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), TargetError> {
    EchoServer::new(cfg)?.serve_udp(socket, shutdown).await
}

/// Serves Unix-socket echo on `listener` until `shutdown`; see [`EchoServer::serve_unix`].
pub async fn serve_unix(
    listener: UnixListener,
    cfg: EchoConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), TargetError> {
    EchoServer::new(cfg)?.serve_unix(listener, shutdown).await
}
