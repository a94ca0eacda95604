//! The gRPC target (`stampede target grpc`): a tonic server of `stampede.target.v1.Target`
//! (`target-servers/proto/stampede/target/v1/target.proto`) with a unary `Echo` (which can be
//! told to answer a non-OK status, so the load tester's status accounting is tested against a
//! real server) and `Work` (a call of a known CPU cost, for calibration), plus the server
//! reflection service (`grpc.reflection.v1`), so clients need no `.proto` file.
//!
//! Metrics (prefix `stampede_target_grpc_`): `calls_total{method,code}` (every answered call,
//! by gRPC status code name) and the `call_duration_seconds{method}` histogram. Serve them with
//! [`crate::metrics::serve`] and [`GrpcServer::metrics_text`].

use std::future::Future;
use std::time::{Duration, Instant};

use prometheus::{HistogramVec, IntCounterVec, Registry};
use tokio::net::TcpListener;
use tonic::{Code, Request, Response, Status};

use crate::TargetError;

/// The generated messages, server and client of `stampede.target.v1`: documented in
/// `target.proto`, not here.
#[allow(missing_docs)]
pub mod pb {
    tonic::include_proto!("stampede.target.v1");

    /// The encoded descriptors of `target.proto`, served by reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/target_descriptor.bin"));
}

use pb::target_server::{Target, TargetServer};

/// Configuration of the gRPC target.
#[derive(Clone, Debug)]
pub struct GrpcConfig {
    /// Largest `cpu_us` a `Work` call may ask for; more is `INVALID_ARGUMENT`.
    pub max_work_us: u32,
    /// Largest request message accepted (decoded size); larger is `RESOURCE_EXHAUSTED`.
    pub max_message_bytes: usize,
    /// Concurrent streams one HTTP/2 connection may open.
    pub max_concurrent_streams: u32,
    /// After shutdown is asked for, how long in-flight calls get to finish.
    pub shutdown_grace: Duration,
    /// Keep this many of the first `Echo` requests, with their `x-` metadata
    /// ([`GrpcServer::echoes`]): tests read what a load tester really sent.
    pub keep_echoes: usize,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        Self {
            max_work_us: 10_000_000,
            max_message_bytes: 4 << 20,
            max_concurrent_streams: 1024,
            shutdown_grace: Duration::from_secs(10),
            keep_echoes: 0,
        }
    }
}

/// The server state and a handle on its metrics. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct GrpcServer {
    cfg: GrpcConfig,
    metrics: Metrics,
    echoes: Echoes,
}

/// The `Echo` requests kept (at most [`GrpcConfig::keep_echoes`]).
type Echoes = std::sync::Arc<std::sync::Mutex<Vec<Echoed>>>;

/// An `Echo` request as the server decoded it.
#[derive(Clone, Debug)]
pub struct Echoed {
    /// The request's message, for tests to check what the load generator sent.
    pub request: pb::EchoRequest,
    /// Its metadata whose names start with `x-` (ASCII values), by name.
    pub metadata: std::collections::BTreeMap<String, String>,
}

#[derive(Clone)]
struct Metrics {
    registry: Registry,
    calls: IntCounterVec,
    duration: HistogramVec,
}

impl Metrics {
    fn new() -> Result<Self, TargetError> {
        let registry = crate::metrics::registry("grpc")?;
        let calls = IntCounterVec::new(
            prometheus::Opts::new("calls_total", "gRPC calls answered, by method and status"),
            &["method", "code"],
        )?;
        let duration = HistogramVec::new(
            crate::metrics::histogram_opts(
                "call_duration_seconds",
                "Time from a call's decoded request to its answer",
            ),
            &["method"],
        )?;
        registry.register(Box::new(calls.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        Ok(Self {
            registry,
            calls,
            duration,
        })
    }

    fn record(&self, method: &str, started: Instant, code: Code) {
        self.calls
            .with_label_values(&[method, code_name(code)])
            .inc();
        self.duration
            .with_label_values(&[method])
            .observe(started.elapsed().as_secs_f64());
    }
}

/// The lower-case name of a status code, as the metrics label it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

impl GrpcServer {
    /// Builds the server state and its metrics registry.
    pub fn new(cfg: GrpcConfig) -> Result<Self, TargetError> {
        if cfg.max_message_bytes == 0 || cfg.max_concurrent_streams == 0 {
            return Err(TargetError::Config(
                "grpc: max_message_bytes and max_concurrent_streams must be > 0".into(),
            ));
        }
        Ok(Self {
            cfg,
            metrics: Metrics::new()?,
            echoes: Echoes::default(),
        })
    }

    /// The `Echo` requests kept so far (see [`GrpcConfig::keep_echoes`]).
    pub fn echoes(&self) -> Vec<Echoed> {
        self.echoes.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// The metrics in Prometheus text format.
    pub fn metrics_text(&self) -> String {
        crate::metrics::render(&self.metrics.registry)
    }

    /// Calls of `method` (`Echo`, `Work`) answered with `code` (a label of `calls_total`:
    /// `ok`, `invalid_argument`, ...).
    pub fn calls(&self, method: &str, code: &str) -> u64 {
        self.metrics
            .calls
            .get_metric_with_label_values(&[method, code])
            .map(|c| c.get())
            .unwrap_or(0)
    }

    /// Serves on `listener` until `shutdown` resolves, then lets in-flight calls finish for
    /// at most the configured grace.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), TargetError> {
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(|e| TargetError::Config(format!("grpc reflection: {e}")))?;
        let grace = self.cfg.shutdown_grace;
        let service = TargetServer::new(Service {
            cfg: self.cfg.clone(),
            metrics: self.metrics.clone(),
            echoes: self.echoes.clone(),
        })
        .max_decoding_message_size(self.cfg.max_message_bytes);
        // Without TCP_NODELAY an answer's HEADERS, DATA and trailers frames wait on the
        // client's delayed ACK (40 ms) whenever they go out as separate writes.
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let (stopping_tx, stopping) = tokio::sync::oneshot::channel::<()>();
        let server = tonic::transport::Server::builder()
            .max_concurrent_streams(self.cfg.max_concurrent_streams)
            .add_service(reflection)
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, async move {
                shutdown.await;
                let _ = stopping_tx.send(());
            });
        tokio::pin!(server);
        tokio::select! {
            r = &mut server => return r.map_err(TargetError::Grpc),
            _ = stopping => {}
        }
        // Draining: clients that keep their connections open would hold it forever.
        match tokio::time::timeout(grace, server).await {
            Ok(r) => r.map_err(TargetError::Grpc),
            Err(_) => {
                tracing::warn!(
                    ?grace,
                    "grpc: connections still open after the grace; stopping"
                );
                Ok(())
            }
        }
    }
}

struct Service {
    cfg: GrpcConfig,
    metrics: Metrics,
    echoes: Echoes,
}

impl Service {
    /// Runs a call's handler, and records the call under `method` with the status it answered.
    async fn measured<T>(
        &self,
        method: &str,
        handler: impl Future<Output = Result<T, Status>>,
    ) -> Result<Response<T>, Status> {
        let started = Instant::now();
        let answer = handler.await;
        let code = answer.as_ref().map_or_else(Status::code, |_| Code::Ok);
        self.metrics.record(method, started, code);
        answer.map(Response::new)
    }
}

#[tonic::async_trait]
impl Target for Service {
    async fn echo(
        &self,
        request: Request<pb::EchoRequest>,
    ) -> Result<Response<pb::EchoReply>, Status> {
        if self.cfg.keep_echoes > 0 {
            let metadata = request
                .metadata()
                .iter()
                .filter_map(|kv| match kv {
                    tonic::metadata::KeyAndValueRef::Ascii(k, v)
                        if k.as_str().starts_with("x-") =>
                    {
                        Some((k.as_str().to_string(), v.to_str().ok()?.to_string()))
                    }
                    _ => None,
                })
                .collect();
            if let Ok(mut kept) = self.echoes.lock() {
                if kept.len() < self.cfg.keep_echoes {
                    kept.push(Echoed {
                        request: request.get_ref().clone(),
                        metadata,
                    });
                }
            }
        }
        let r = request.into_inner();
        self.measured("Echo", async move {
            if r.fail_with != 0 {
                // Codes above 16 are not gRPC codes: tonic calls them UNKNOWN.
                let code = Code::from_i32(i32::try_from(r.fail_with).unwrap_or(i32::MAX));
                let why = format!("failed as asked (fail_with = {})", r.fail_with);
                return Err(Status::new(code, why));
            }
            Ok(pb::EchoReply {
                text: r.text,
                id: r.id,
                payload: r.payload,
                tags: r.tags,
                inner: r.inner,
            })
        })
        .await
    }

    async fn work(
        &self,
        request: Request<pb::WorkRequest>,
    ) -> Result<Response<pb::WorkReply>, Status> {
        let r = request.into_inner();
        let max = self.cfg.max_work_us;
        self.measured("Work", async move {
            if r.cpu_us > max {
                return Err(Status::invalid_argument(format!(
                    "cpu_us: {} is more than the limit of {max}",
                    r.cpu_us
                )));
            }
            let clock = if r.wall_clock {
                crate::work::Clock::Wall
            } else {
                crate::work::Clock::Cpu
            };
            let started = Instant::now();
            let us = Duration::from_micros(u64::from(r.cpu_us));
            let checksum = crate::work::burn(us, u64::from(r.cpu_us), clock).await;
            Ok(pb::WorkReply {
                checksum,
                used_us: started.elapsed().as_micros() as u64,
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::target_client::TargetClient;

    async fn start() -> (GrpcServer, String, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = GrpcServer::new(GrpcConfig::default()).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.clone().serve(listener, async move {
            let _ = stopped.await;
        }));
        (server, url, stop)
    }

    #[tokio::test]
    async fn echo_work_and_failures_are_answered_and_counted() {
        let (server, url, _stop) = start().await;
        let mut c = TargetClient::connect(url).await.unwrap();
        let reply = c
            .echo(pb::EchoRequest {
                text: "hi".into(),
                id: 7,
                tags: vec!["a".into()],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (reply.text.as_str(), reply.id, reply.tags.len()),
            ("hi", 7, 1)
        );
        let e = c
            .echo(pb::EchoRequest {
                fail_with: 14,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unavailable);
        let w = c
            .work(pb::WorkRequest {
                cpu_us: 2000,
                wall_clock: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(w.used_us >= 2000, "{}", w.used_us);
        let too_much = c
            .work(pb::WorkRequest {
                cpu_us: u32::MAX,
                wall_clock: true,
            })
            .await
            .unwrap_err();
        assert_eq!(too_much.code(), Code::InvalidArgument);
        assert_eq!(server.calls("Echo", "ok"), 1);
        assert_eq!(server.calls("Echo", "unavailable"), 1);
        assert_eq!(server.calls("Work", "ok"), 1);
        assert_eq!(server.calls("Work", "invalid_argument"), 1);
        let text = server.metrics_text();
        assert!(
            text.contains(
                r#"stampede_target_grpc_calls_total{code="unavailable",method="Echo"} 1"#
            ),
            "{text}"
        );
    }

    #[tokio::test]
    async fn reflection_serves_the_schema() {
        use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
        use tonic_reflection::pb::v1::ServerReflectionRequest;
        let (_server, url, _stop) = start().await;
        let channel = tonic::transport::Channel::from_shared(url)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut c = ServerReflectionClient::new(channel);
        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut answers = c
            .server_reflection_info(tokio_stream::iter([req]))
            .await
            .unwrap()
            .into_inner();
        let Some(MessageResponse::ListServicesResponse(list)) =
            answers.message().await.unwrap().unwrap().message_response
        else {
            panic!("not a service list");
        };
        let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"stampede.target.v1.Target"), "{names:?}");
    }

    #[test]
    fn bad_configuration_is_refused() {
        assert!(GrpcServer::new(GrpcConfig {
            max_concurrent_streams: 0,
            ..GrpcConfig::default()
        })
        .is_err());
    }
}
