//! `stampede target <kind>`: the clap subcommands that run a target server in the foreground.
//!
//! Each subcommand binds `--listen`, logs with `tracing` (the caller installs the subscriber),
//! and shuts down gracefully on SIGTERM or SIGINT; a second signal exits at once (status 130).

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::signal::unix::{signal, SignalKind};

use crate::common::parse_duration;
use crate::http::{self, AccessLog, HttpConfig};
use crate::TargetError;

/// Listen backlog for the TCP targets (load tests open many connections at once).
const BACKLOG: u32 = 4096;

/// A target server to run.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum TargetCommand {
    /// HTTP/1.1 and h2c target: `/`, `/work?ms=N`, `/delay?ms=N`, `/bytes?n=N`, `POST /echo`,
    /// `/data` (configured defaults), `/metrics`, `/healthz`, `/readyz`.
    Http(HttpArgs),
}

/// Options of `stampede target http`.
#[derive(clap::Args, Debug, Clone)]
pub struct HttpArgs {
    /// Address to listen on (HTTP/1.1 and h2c on the same port; `/metrics` is served here too).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// CPU milliseconds burnt per `GET /data` request (and the default of `/work`).
    #[arg(long, default_value_t = 0)]
    pub work_ms: u64,
    /// Milliseconds `GET /data` waits before answering (and the default of `/delay`).
    #[arg(long, default_value_t = 0)]
    pub delay_ms: u64,
    /// Body size of `GET /data` in bytes (and the default of `/bytes`).
    #[arg(long, default_value_t = 1024)]
    pub bytes: u64,
    /// Largest request body accepted by `POST /echo`; larger is answered 413.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: u64,
    /// Largest response size `/bytes` and `/data` may be asked for.
    #[arg(long, default_value_t = 1 << 30)]
    pub max_response_bytes: u64,
    /// Largest `ms` accepted by `/work`.
    #[arg(long, default_value_t = 10_000)]
    pub max_work_ms: u64,
    /// Largest `ms` accepted by `/delay`.
    #[arg(long, default_value_t = 60_000)]
    pub max_delay_ms: u64,
    /// Most connections open at once; more are closed right after accept.
    #[arg(long, default_value_t = 10_000)]
    pub max_connections: usize,
    /// Time allowed to receive a request head (also the keep-alive idle timeout) or body,
    /// e.g. `30s`, `500ms`.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub read_timeout: Duration,
    /// On SIGTERM/SIGINT, how long open connections get to finish.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Access log: `off`, `stdout`, or a file path (appended to).
    #[arg(long, default_value = "off")]
    pub access_log: AccessLog,
    /// Access log buffer size in bytes (flushed when full, every second, and at exit).
    #[arg(long, default_value_t = 64 * 1024)]
    pub access_log_buffer: usize,
    /// Distinct client IPs tracked for the `distinct_source_ips` gauge.
    #[arg(long, default_value_t = 65_536)]
    pub max_source_ips: usize,
}

impl From<&HttpArgs> for HttpConfig {
    fn from(a: &HttpArgs) -> Self {
        HttpConfig {
            work_ms: a.work_ms,
            delay_ms: a.delay_ms,
            bytes: a.bytes,
            max_body_bytes: a.max_body_bytes,
            max_response_bytes: a.max_response_bytes,
            max_work_ms: a.max_work_ms,
            max_delay_ms: a.max_delay_ms,
            max_connections: a.max_connections,
            read_timeout: a.read_timeout,
            shutdown_grace: a.shutdown_grace,
            access_log: a.access_log.clone(),
            access_log_buffer: a.access_log_buffer,
            max_source_ips: a.max_source_ips,
            ..HttpConfig::default()
        }
    }
}

impl TargetCommand {
    /// Binds the listener(s) and runs the server until SIGTERM or SIGINT.
    pub async fn run(self) -> Result<(), TargetError> {
        let shutdown = shutdown_signal()?;
        match self {
            TargetCommand::Http(args) => {
                let listener = bind_tcp(args.listen)?;
                http::serve(listener, HttpConfig::from(&args), shutdown).await
            }
        }
    }
}

/// Binds a TCP listener with `SO_REUSEADDR` and a large backlog.
pub(crate) fn bind_tcp(addr: SocketAddr) -> Result<TcpListener, TargetError> {
    let err = |source| TargetError::Bind { addr, source };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(err)?;
    socket.set_reuseaddr(true).map_err(err)?;
    socket.bind(addr).map_err(err)?;
    socket.listen(BACKLOG).map_err(err)
}

/// Resolves on the first SIGTERM or SIGINT; a second one exits the process at once.
fn shutdown_signal() -> Result<impl Future<Output = ()> + Send + 'static, TargetError> {
    let mut term = signal(SignalKind::terminate()).map_err(TargetError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(TargetError::Signal)?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("shutting down gracefully (signal again to exit now)");
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tracing::warn!("second signal, exiting now");
            std::process::exit(130);
        });
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        target: TargetCommand,
    }

    #[test]
    fn http_args_parse() {
        let cli = Cli::try_parse_from([
            "t",
            "http",
            "--listen",
            "127.0.0.1:0",
            "--delay-ms",
            "5",
            "--read-timeout",
            "500ms",
            "--access-log",
            "stdout",
        ])
        .unwrap();
        let TargetCommand::Http(a) = cli.target;
        let cfg = HttpConfig::from(&a);
        assert_eq!(cfg.delay_ms, 5);
        assert_eq!(cfg.read_timeout, Duration::from_millis(500));
        assert_eq!(cfg.access_log, AccessLog::Stdout);
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
