//! `stampede target <kind>`: the clap subcommands that run a target server in the foreground.
//!
//! Each subcommand binds `--listen`, logs with `tracing` (the caller installs the subscriber),
//! and shuts down gracefully on SIGTERM or SIGINT; a second signal exits at once (status 130).

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, UdpSocket, UnixListener};
use tokio::signal::unix::{signal, SignalKind};

use crate::common::parse_duration;
use crate::echo::{EchoConfig, EchoServer};
use crate::frame::Framing;
use crate::grpc::{GrpcConfig, GrpcServer};
use crate::http::{self, AccessLog, HttpConfig};
use crate::login::{LoginConfig, LoginServer, UserTable};
use crate::TargetError;

/// Listen backlog for the TCP targets (load tests open many connections at once).
const BACKLOG: u32 = 4096;

/// A target server to run.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum TargetCommand {
    /// HTTP/1.1 and h2c target: `/`, `/work?ms=N[&clock=wall]`, `/delay?ms=N`, `/bytes?n=N`, `POST /echo`,
    /// `/data` (configured defaults), `/metrics`, `/healthz`, `/readyz`.
    Http(HttpArgs),
    /// TCP login service: length-delimited JSON `LoginRequest` frames answered with a
    /// `LoginAction` (granted with a role, or denied with a reason).
    Login(LoginArgs),
    /// TCP echo: each frame (length- or newline-delimited) is sent back.
    EchoTcp(EchoTcpArgs),
    /// UDP echo: each datagram is sent back to its sender.
    EchoUdp(EchoUdpArgs),
    /// Unix-socket echo: each frame (length- or newline-delimited) is sent back.
    EchoUnix(EchoUnixArgs),
    /// gRPC target (h2c): `stampede.target.v1.Target/Echo` (answers a chosen status with
    /// `fail_with`), `Work` (a CPU cost in microseconds) and server reflection.
    Grpc(GrpcArgs),
}

/// Options of `stampede target grpc`.
#[derive(clap::Args, Debug, Clone)]
pub struct GrpcArgs {
    /// Address to listen on (HTTP/2 with prior knowledge).
    #[arg(long, default_value = "0.0.0.0:50051")]
    pub listen: SocketAddr,
    /// Set SO_REUSEPORT on the listener (see `stampede target http --reuse-port`).
    #[arg(long)]
    pub reuse_port: bool,
    /// Largest `cpu_us` a `Work` call may ask for.
    #[arg(long, default_value_t = 10_000_000)]
    pub max_work_us: u32,
    /// Largest request message accepted; a larger one is answered RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_message_bytes: usize,
    /// Concurrent streams one connection may open.
    #[arg(long, default_value_t = 1024)]
    pub max_concurrent_streams: u32,
    /// On SIGTERM/SIGINT, how long in-flight calls get to finish.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Serve Prometheus `/metrics` (and `/healthz`, `/readyz`) on this address.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
}

impl From<&GrpcArgs> for GrpcConfig {
    fn from(a: &GrpcArgs) -> Self {
        GrpcConfig {
            max_work_us: a.max_work_us,
            max_message_bytes: a.max_message_bytes,
            max_concurrent_streams: a.max_concurrent_streams,
            shutdown_grace: a.shutdown_grace,
            keep_echoes: 0,
        }
    }
}

/// Options shared by the frame-based servers.
#[derive(clap::Args, Debug, Clone)]
pub struct StreamOpts {
    /// Largest frame payload accepted; a longer one closes the connection (UDP: is dropped).
    #[arg(long, default_value_t = 64 * 1024)]
    pub max_frame_bytes: usize,
    /// Most connections open at once; more are closed right after accept.
    #[arg(long, default_value_t = 10_000)]
    pub max_connections: usize,
    /// Each frame must arrive within this time of the previous one (also the idle timeout),
    /// e.g. `60s`, `500ms`.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub read_timeout: Duration,
    /// On SIGTERM/SIGINT, how long open connections get to finish.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Serve Prometheus `/metrics` (and `/healthz`, `/readyz`) on this address.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
}

/// Options of `stampede target login`.
#[derive(clap::Args, Debug, Clone)]
pub struct LoginArgs {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:7000")]
    pub listen: SocketAddr,
    /// Set SO_REUSEPORT on the listener, so several target processes can listen on the same
    /// ip:port and the kernel spreads new connections over them (one process can only hold as
    /// many connections as it may open files).
    #[arg(long)]
    pub reuse_port: bool,
    /// Users file: a JSON array of `{"username","password","role","locked"}`. Without it, the
    /// built-in table (alice/wonderland, bob/builder, locked mallory, userN/passN).
    #[arg(long)]
    pub users: Option<PathBuf>,
    /// Largest request frame payload accepted; a longer one closes the connection.
    #[arg(long, default_value_t = 4096)]
    pub max_frame_bytes: usize,
    /// Most connections open at once; more are closed right after accept.
    #[arg(long, default_value_t = 10_000)]
    pub max_connections: usize,
    /// Each request must arrive within this time of the previous one (also the idle timeout).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub read_timeout: Duration,
    /// On SIGTERM/SIGINT, how long open connections get to finish.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Serve Prometheus `/metrics` (and `/healthz`, `/readyz`) on this address.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
}

/// Options of `stampede target echo-tcp`.
#[derive(clap::Args, Debug, Clone)]
pub struct EchoTcpArgs {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:7001")]
    pub listen: SocketAddr,
    /// Set SO_REUSEPORT on the listener, so several target processes can listen on the same
    /// ip:port and the kernel spreads new connections over them (one process can only hold as
    /// many connections as it may open files).
    #[arg(long)]
    pub reuse_port: bool,
    /// Framing: `length` (4-byte big-endian length prefix) or `newline`.
    #[arg(long, value_enum, default_value_t = Framing::Length)]
    pub framing: Framing,
    /// The limits every stream server shares.
    #[command(flatten)]
    pub opts: StreamOpts,
}

/// Options of `stampede target echo-udp`.
#[derive(clap::Args, Debug, Clone)]
pub struct EchoUdpArgs {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:7002")]
    pub listen: SocketAddr,
    /// Largest datagram echoed; longer ones are dropped and counted as errors.
    #[arg(long, default_value_t = 65_507)]
    pub max_datagram_bytes: usize,
    /// Serve Prometheus `/metrics` (and `/healthz`, `/readyz`) on this address.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
}

/// Options of `stampede target echo-unix`.
#[derive(clap::Args, Debug, Clone)]
pub struct EchoUnixArgs {
    /// Socket path to listen on (a stale socket file there is replaced).
    #[arg(long, default_value = "/tmp/stampede-echo.sock")]
    pub listen: PathBuf,
    /// Framing: `length` (4-byte big-endian length prefix) or `newline`.
    #[arg(long, value_enum, default_value_t = Framing::Length)]
    pub framing: Framing,
    /// The limits every stream server shares.
    #[command(flatten)]
    pub opts: StreamOpts,
}

impl StreamOpts {
    fn echo_config(&self, framing: Framing) -> EchoConfig {
        EchoConfig {
            framing,
            max_frame_bytes: self.max_frame_bytes,
            max_connections: self.max_connections,
            read_timeout: self.read_timeout,
            shutdown_grace: self.shutdown_grace,
        }
    }
}

/// Options of `stampede target http`.
#[derive(clap::Args, Debug, Clone)]
pub struct HttpArgs {
    /// Address to listen on (HTTP/1.1 and h2c on the same port; `/metrics` is served here too).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Set SO_REUSEPORT on the listener, so several target processes can listen on the same
    /// ip:port and the kernel spreads new connections over them (one process can only hold as
    /// many connections as it may open files).
    #[arg(long)]
    pub reuse_port: bool,
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
    /// Serve HTTPS (h2 and HTTP/1.1 by ALPN) with this PEM certificate chain (with `--tls-key`).
    #[arg(
        long,
        value_name = "PEM",
        requires = "tls_key",
        conflicts_with = "tls_self_signed"
    )]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of `--tls-cert`.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Serve HTTPS with a self-signed certificate made at start for the `--tls-name`s, and
    /// write the certificate (PEM) to this file, for clients to trust (`tls.ca_file`).
    #[arg(long, value_name = "CERT_OUT")]
    pub tls_self_signed: Option<std::path::PathBuf>,
    /// Require every client to present a certificate signed by a CA of this PEM file
    /// (mutual TLS); a handshake without one fails. With `--tls-cert` or `--tls-self-signed`.
    #[arg(long, value_name = "PEM")]
    pub tls_client_ca: Option<std::path::PathBuf>,
    /// Names of the self-signed certificate (DNS names or IP addresses; repeat the flag).
    #[arg(long = "tls-name", value_name = "NAME", default_values_t = ["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()])]
    pub tls_names: Vec<String>,
    /// Answer 404 to unknown paths instead of serving them as `/data`: a typo in a
    /// scenario's path then fails its run instead of passing unnoticed.
    #[arg(long)]
    pub strict: bool,
    /// Gzip successful bodies (up to 64 MiB) for requests whose `accept-encoding` lists gzip.
    #[arg(long)]
    pub gzip: bool,
}

impl HttpArgs {
    /// The TLS configuration the flags ask for, if any (files are read, a certificate made).
    pub fn tls(&self) -> Result<Option<crate::tls::TlsServer>, TargetError> {
        let read = |p: &std::path::Path| {
            std::fs::read(p)
                .map_err(|e| TargetError::Config(format!("tls: cannot read {}: {e}", p.display())))
        };
        let client_ca = self.tls_client_ca.as_deref().map(read).transpose()?;
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            return crate::tls::TlsServer::new(&read(cert)?, &read(key)?, client_ca.as_deref())
                .map(Some);
        }
        let Some(out) = &self.tls_self_signed else {
            if client_ca.is_some() {
                return Err(TargetError::Config(
                    "--tls-client-ca: needs --tls-cert or --tls-self-signed".into(),
                ));
            }
            return Ok(None);
        };
        let (server, cert_pem) =
            crate::tls::TlsServer::self_signed_requiring(&self.tls_names, client_ca.as_deref())?;
        std::fs::write(out, cert_pem).map_err(|e| {
            TargetError::Config(format!("tls: cannot write {}: {e}", out.display()))
        })?;
        tracing::info!(cert = %out.display(), names = ?self.tls_names, "self-signed certificate written");
        Ok(Some(server))
    }
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
            strict: a.strict,
            gzip: a.gzip,
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
                let cfg = HttpConfig {
                    tls: args.tls()?,
                    ..HttpConfig::from(&args)
                };
                let listener = bind_tcp(args.listen, args.reuse_port)?;
                http::serve(listener, cfg, shutdown).await
            }
            TargetCommand::Login(args) => {
                let users = match &args.users {
                    Some(path) => UserTable::from_file(path)?,
                    None => UserTable::builtin(),
                };
                let server = LoginServer::new(LoginConfig {
                    users,
                    max_frame_bytes: args.max_frame_bytes,
                    max_connections: args.max_connections,
                    read_timeout: args.read_timeout,
                    shutdown_grace: args.shutdown_grace,
                })?;
                let listener = bind_tcp(args.listen, args.reuse_port)?;
                let render = server.clone();
                let serve = server.serve(listener, shutdown);
                with_metrics(args.metrics_listen, move || render.metrics_text(), serve).await
            }
            TargetCommand::EchoTcp(args) => {
                let server = EchoServer::new(args.opts.echo_config(args.framing))?;
                let listener = bind_tcp(args.listen, args.reuse_port)?;
                let render = server.clone();
                with_metrics(
                    args.opts.metrics_listen,
                    move || render.metrics_text(),
                    async move { server.serve_tcp(listener, shutdown).await },
                )
                .await
            }
            TargetCommand::EchoUdp(args) => {
                let server = EchoServer::new(EchoConfig {
                    max_frame_bytes: args.max_datagram_bytes,
                    ..EchoConfig::default()
                })?;
                let socket =
                    UdpSocket::bind(args.listen)
                        .await
                        .map_err(|source| TargetError::Bind {
                            addr: args.listen,
                            source,
                        })?;
                let render = server.clone();
                with_metrics(
                    args.metrics_listen,
                    move || render.metrics_text(),
                    async move { server.serve_udp(socket, shutdown).await },
                )
                .await
            }
            TargetCommand::EchoUnix(args) => {
                let server = EchoServer::new(args.opts.echo_config(args.framing))?;
                remove_stale_socket(&args.listen);
                let listener =
                    UnixListener::bind(&args.listen).map_err(|source| TargetError::BindUnix {
                        path: args.listen.clone(),
                        source,
                    })?;
                let render = server.clone();
                let result = with_metrics(
                    args.opts.metrics_listen,
                    move || render.metrics_text(),
                    async move { server.serve_unix(listener, shutdown).await },
                )
                .await;
                remove_stale_socket(&args.listen);
                result
            }
            TargetCommand::Grpc(args) => {
                let server = GrpcServer::new(GrpcConfig::from(&args))?;
                let listener = bind_tcp(args.listen, args.reuse_port)?;
                let metrics = server.clone();
                let serve = server.serve(listener, shutdown);
                with_metrics(args.metrics_listen, move || metrics.metrics_text(), serve).await
            }
        }
    }
}

/// Runs `main`, with a metrics endpoint beside it when `listen` is given; the endpoint stays
/// up while `main` drains and stops after it.
async fn with_metrics<R>(
    listen: Option<SocketAddr>,
    render: R,
    main: impl Future<Output = Result<(), TargetError>>,
) -> Result<(), TargetError>
where
    R: Fn() -> String + Send + Sync + 'static,
{
    let Some(addr) = listen else {
        return main.await;
    };
    let listener = bind_tcp(addr, false)?;
    let local = listener.local_addr().map_err(TargetError::LocalAddr)?;
    tracing::info!(addr = %local, "metrics listening");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let metrics = tokio::spawn(crate::metrics::serve(listener, render, async move {
        let _ = stopped.await;
    }));
    let result = main.await;
    let _ = stop.send(());
    match metrics.await {
        Ok(Err(e)) => tracing::warn!(error = %e, "metrics endpoint failed"),
        Err(e) => tracing::warn!(error = %e, "metrics endpoint task failed"),
        Ok(Ok(())) => {}
    }
    result
}

/// Removes `path` if it is a socket (left over by an earlier run); never removes other files.
fn remove_stale_socket(path: &Path) {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Binds a TCP listener with `SO_REUSEADDR` and a large backlog; with `reuse_port`, also
/// `SO_REUSEPORT`, so other processes (of the same user) that set it too can bind the same
/// ip:port and the kernel balances new connections between them. Without it a second bind of
/// a listening ip:port fails with "address in use".
pub fn bind_tcp(addr: SocketAddr, reuse_port: bool) -> Result<TcpListener, TargetError> {
    let err = |source| TargetError::Bind { addr, source };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(err)?;
    socket.set_reuseaddr(true).map_err(err)?;
    if reuse_port {
        socket.set_reuseport(true).map_err(err)?;
    }
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

    fn http_args(extra: &[&str]) -> Result<HttpArgs, clap::Error> {
        let args = ["t", "http"].iter().chain(extra).copied();
        match Cli::try_parse_from(args)?.target {
            TargetCommand::Http(a) => Ok(a),
            _ => panic!("not http"),
        }
    }

    #[test]
    fn tls_flags_make_a_server_or_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("cert.pem");
        let a = http_args(&[
            "--tls-self-signed",
            out.to_str().unwrap(),
            "--tls-name",
            "svc.test",
        ])
        .unwrap();
        assert_eq!(a.tls_names, ["svc.test"]);
        assert!(a.tls().unwrap().is_some());
        let pem = std::fs::read_to_string(&out).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        // The written certificate works as the chain of --tls-cert (with a key it does not
        // match, which is refused by name).
        let key = dir.path().join("key.pem");
        std::fs::write(&key, "not a key").unwrap();
        let a = http_args(&[
            "--tls-cert",
            out.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ])
        .unwrap();
        let e = a.tls().unwrap_err().to_string();
        assert!(e.contains("private key"), "{e}");
        assert!(
            http_args(&["--tls-cert", "c.pem"]).is_err(),
            "--tls-cert needs --tls-key"
        );
        assert!(http_args(&[]).unwrap().tls().unwrap().is_none());
        // --tls-client-ca: the written certificate serves as a client CA; a key is not one,
        // and without a server certificate the flag is refused by name.
        let a = http_args(&[
            "--tls-self-signed",
            out.to_str().unwrap(),
            "--tls-client-ca",
            out.to_str().unwrap(),
        ])
        .unwrap();
        assert!(a.tls().unwrap().is_some());
        let a = http_args(&[
            "--tls-self-signed",
            dir.path().join("c2.pem").to_str().unwrap(),
            "--tls-client-ca",
            key.to_str().unwrap(),
        ])
        .unwrap();
        let e = a.tls().unwrap_err().to_string();
        assert!(e.contains("client CA"), "{e}");
        let e = http_args(&["--tls-client-ca", out.to_str().unwrap()])
            .unwrap()
            .tls()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--tls-client-ca: needs --tls-cert"), "{e}");
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
        let TargetCommand::Http(a) = cli.target else {
            panic!("not http");
        };
        let cfg = HttpConfig::from(&a);
        assert_eq!(cfg.delay_ms, 5);
        assert_eq!(cfg.read_timeout, Duration::from_millis(500));
        assert_eq!(cfg.access_log, AccessLog::Stdout);
    }

    #[test]
    fn stream_args_parse() {
        let cli = Cli::try_parse_from([
            "t",
            "echo-tcp",
            "--framing",
            "newline",
            "--metrics-listen",
            "127.0.0.1:0",
            "--max-frame-bytes",
            "10",
        ])
        .unwrap();
        let TargetCommand::EchoTcp(a) = cli.target else {
            panic!("not echo-tcp");
        };
        assert_eq!(a.framing, Framing::Newline);
        assert_eq!(a.opts.echo_config(a.framing).max_frame_bytes, 10);
        assert!(a.opts.metrics_listen.is_some());
        for args in [
            &["t", "login", "--users", "/x.json"][..],
            &["t", "echo-udp", "--listen", "127.0.0.1:0"],
            &["t", "echo-unix", "--listen", "/tmp/x.sock"],
            &["t", "grpc", "--listen", "127.0.0.1:0", "--max-work-us", "5"],
        ] {
            Cli::try_parse_from(args).unwrap();
        }
    }

    #[tokio::test]
    async fn reuse_port_lets_a_second_listener_share_the_address() {
        let first = bind_tcp("127.0.0.1:0".parse().unwrap(), true).unwrap();
        let addr = first.local_addr().unwrap();
        let second = bind_tcp(addr, true).unwrap();
        assert_eq!(second.local_addr().unwrap(), addr);
        // Every listener on the address must have asked for it.
        let e = bind_tcp(addr, false).unwrap_err();
        assert!(matches!(e, TargetError::Bind { .. }), "{e}");
        drop((first, second));

        let alone = bind_tcp("127.0.0.1:0".parse().unwrap(), false).unwrap();
        let addr = alone.local_addr().unwrap();
        assert!(bind_tcp(addr, false).is_err());
        assert!(bind_tcp(addr, true).is_err());
    }

    #[test]
    fn reuse_port_flag_parses_on_the_tcp_targets() {
        for kind in ["http", "login", "echo-tcp", "grpc"] {
            let cli = Cli::try_parse_from(["t", kind, "--reuse-port"]).unwrap();
            let reuse = match cli.target {
                TargetCommand::Http(a) => a.reuse_port,
                TargetCommand::Login(a) => a.reuse_port,
                TargetCommand::EchoTcp(a) => a.reuse_port,
                TargetCommand::Grpc(a) => a.reuse_port,
                _ => false,
            };
            assert!(reuse, "{kind}");
        }
        assert!(!http_args(&[]).unwrap().reuse_port);
        assert!(Cli::try_parse_from(["t", "echo-udp", "--reuse-port"]).is_err());
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
