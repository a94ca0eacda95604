//! The gRPC target (`stampede target grpc`): a tonic server of `stampede.target.v1.Target`
//! (`target-servers/proto/stampede/target/v1/target.proto`) with a unary `Echo` (which can be
//! told to answer a non-OK status, so the load tester's status accounting is tested against a
//! real server) and `Work` (a call of a known CPU cost, for calibration), plus the server
//! reflection service (`grpc.reflection.v1`), so clients need no `.proto` file. Three
//! streaming methods test streamed calls against a real server: `Stream` (server-streaming, N
//! messages M ms apart), `Collect` (client-streaming, counts what it received) and `Chat`
//! (bidirectional, echoes each message).
//!
//! Metrics (prefix `stampede_target_grpc_`): `calls_total{method,code}` (every answered call,
//! by gRPC status code name), `stream_messages_total{method,direction}` (messages of streamed
//! calls, `in` from clients and `out` to them) and the `call_duration_seconds{method}`
//! histogram. Serve them with
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
    streamed: IntCounterVec,
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
        let streamed = IntCounterVec::new(
            prometheus::Opts::new(
                "stream_messages_total",
                "Messages of streamed calls, by method and direction (in, out)",
            ),
            &["method", "direction"],
        )?;
        registry.register(Box::new(calls.clone()))?;
        registry.register(Box::new(streamed.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        Ok(Self {
            registry,
            calls,
            streamed,
            duration,
        })
    }

    fn streamed(&self, method: &str, direction: &str) {
        self.streamed.with_label_values(&[method, direction]).inc();
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

    /// Messages of the streamed calls of `method` (`Stream`, `Collect`, `Chat`) that went
    /// `direction` (`in` from clients, `out` to them).
    pub fn streamed(&self, method: &str, direction: &str) -> u64 {
        self.metrics
            .streamed
            .get_metric_with_label_values(&[method, direction])
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

/// Most messages one `Stream` call may ask for, and the longest gap between them.
const MAX_STREAMED: u32 = 1_000_000;
const MAX_GAP_MS: u32 = 60_000;

/// The answers of a streaming method, produced by a task of its own.
type Answers =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::EchoReply, Status>> + Send + 'static>>;

/// A status of a `fail_with` code (codes above 16 are UNKNOWN, as tonic reads them).
fn failed_as_asked(fail_with: u32) -> Status {
    let code = Code::from_i32(i32::try_from(fail_with).unwrap_or(i32::MAX));
    Status::new(code, format!("failed as asked (fail_with = {fail_with})"))
}

#[tonic::async_trait]
impl Target for Service {
    type StreamStream = Answers;
    type ChatStream = Answers;

    async fn stream(
        &self,
        request: Request<pb::StreamRequest>,
    ) -> Result<Response<Answers>, Status> {
        let started = Instant::now();
        let r = request.into_inner();
        if r.count > MAX_STREAMED || r.gap_ms > MAX_GAP_MS {
            self.metrics
                .record("Stream", started, Code::InvalidArgument);
            return Err(Status::invalid_argument(format!(
                "count is at most {MAX_STREAMED} and gap_ms at most {MAX_GAP_MS}"
            )));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let gap = Duration::from_millis(u64::from(r.gap_ms));
            for i in 0..r.count {
                if i > 0 {
                    tokio::time::sleep(gap).await;
                }
                let reply = pb::EchoReply {
                    text: r.text.clone(),
                    id: i64::from(i),
                    ..Default::default()
                };
                if tx.send(Ok(reply)).await.is_err() {
                    // The client went away.
                    metrics.record("Stream", started, Code::Cancelled);
                    return;
                }
                metrics.streamed("Stream", "out");
            }
            let code = if r.fail_with != 0 {
                let status = failed_as_asked(r.fail_with);
                let code = status.code();
                let _ = tx.send(Err(status)).await;
                code
            } else {
                Code::Ok
            };
            metrics.record("Stream", started, code);
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn collect(
        &self,
        request: Request<tonic::Streaming<pb::EchoRequest>>,
    ) -> Result<Response<pb::CollectReply>, Status> {
        let mut incoming = request.into_inner();
        let metrics = self.metrics.clone();
        self.measured("Collect", async move {
            let mut reply = pb::CollectReply::default();
            while let Some(m) = incoming.message().await? {
                metrics.streamed("Collect", "in");
                reply.messages += 1;
                reply.bytes += prost::Message::encoded_len(&m) as u64;
                if m.fail_with != 0 {
                    return Err(failed_as_asked(m.fail_with));
                }
            }
            Ok(reply)
        })
        .await
    }

    async fn chat(
        &self,
        request: Request<tonic::Streaming<pb::EchoRequest>>,
    ) -> Result<Response<Answers>, Status> {
        let started = Instant::now();
        let mut incoming = request.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let code = loop {
                let m = match incoming.message().await {
                    Ok(Some(m)) => m,
                    Ok(None) => break Code::Ok,
                    Err(status) => break status.code(),
                };
                metrics.streamed("Chat", "in");
                if m.fail_with != 0 {
                    let status = failed_as_asked(m.fail_with);
                    let code = status.code();
                    let _ = tx.send(Err(status)).await;
                    break code;
                }
                let reply = pb::EchoReply {
                    text: m.text,
                    id: m.id,
                    payload: m.payload,
                    tags: m.tags,
                    inner: m.inner,
                };
                if tx.send(Ok(reply)).await.is_err() {
                    break Code::Cancelled;
                }
                metrics.streamed("Chat", "out");
            };
            metrics.record("Chat", started, code);
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

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
                return Err(failed_as_asked(r.fail_with));
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
    async fn streaming_methods_stream_count_and_echo() {
        let (server, url, _stop) = start().await;
        let mut c = TargetClient::connect(url).await.unwrap();
        let mut answers = c
            .stream(pb::StreamRequest {
                count: 3,
                gap_ms: 1,
                text: "t".into(),
                fail_with: 14,
            })
            .await
            .unwrap()
            .into_inner();
        let mut ids = Vec::new();
        let end = loop {
            match answers.message().await {
                Ok(Some(m)) => ids.push(m.id),
                Ok(None) => break Code::Ok,
                Err(s) => break s.code(),
            }
        };
        assert_eq!((ids, end), (vec![0, 1, 2], Code::Unavailable));
        let sent = (0..4).map(|i| pb::EchoRequest {
            id: i,
            ..Default::default()
        });
        let got = c
            .collect(tokio_stream::iter(sent))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.messages, 4);
        let sent = (0..2).map(|i| pb::EchoRequest {
            id: i,
            text: "x".into(),
            ..Default::default()
        });
        let mut echoes = c.chat(tokio_stream::iter(sent)).await.unwrap().into_inner();
        let mut back = Vec::new();
        while let Some(m) = echoes.message().await.unwrap() {
            back.push((m.id, m.text));
        }
        assert_eq!(back, [(0, "x".to_string()), (1, "x".to_string())]);
        assert_eq!(server.streamed("Stream", "out"), 3);
        assert_eq!(server.streamed("Collect", "in"), 4);
        assert_eq!(server.streamed("Chat", "in"), 2);
        assert_eq!(server.streamed("Chat", "out"), 2);
        assert_eq!(server.calls("Stream", "unavailable"), 1);
        assert_eq!(server.calls("Collect", "ok"), 1);
        // A streaming call is recorded before its answers end, so it is counted already.
        assert_eq!(server.calls("Chat", "ok"), 1);
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
