//! Stampede controller: the agent registry, the run state machine (pending → assigning →
//! ready → running → finishing → done | failed | aborted), the synchronized start, live and
//! final merging, and the report store. The CLI talks to it over `ControlService`; agents
//! attach over `AgentService`. Both require the shared token; health and reflection are open.

mod agents;
mod control;
pub mod k8s;
mod metrics;
mod renew;
mod run;
pub mod store;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stampede_proto::v1;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Status};

pub use run::RunHandle;
pub use store::{ReportStore, StoreError};

/// Controller settings.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Where finished reports are stored.
    pub data_dir: PathBuf,
    /// Shared token required from agents and CLIs; `None` disables the check.
    pub token: Option<String>,
    /// Lease granted to agents; renewed every quarter of it.
    pub lease: Duration,
    /// How long a submitted run waits for enough agents before failing.
    pub agent_wait: Duration,
    /// How long agents have to acknowledge an assignment.
    pub ready_timeout: Duration,
    /// Interval of progress reports and live snapshots.
    pub interval: Duration,
    /// Least time between the start decision and T0.
    pub start_delay: Duration,
}

impl ControllerConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            token: None,
            lease: Duration::from_secs(1),
            agent_wait: Duration::from_secs(30),
            ready_timeout: Duration::from_secs(15),
            interval: Duration::from_secs(1),
            start_delay: Duration::from_millis(300),
        }
    }
}

/// Controller failures, mapped to gRPC statuses in one place ([`From`] below).
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("scenario: {0}")]
    Scenario(#[from] stampede_core::ScenarioError),
    #[error("run {0} not found")]
    RunNotFound(String),
    #[error("run {0} has not finished yet")]
    NotFinished(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("serving: {0}")]
    Transport(#[from] tonic::transport::Error),
}

impl From<ControllerError> for Status {
    fn from(e: ControllerError) -> Self {
        match &e {
            ControllerError::Scenario(_) | ControllerError::Invalid(_) => {
                Status::invalid_argument(e.to_string())
            }
            ControllerError::RunNotFound(_) => Status::not_found(e.to_string()),
            ControllerError::NotFinished(_) => Status::failed_precondition(e.to_string()),
            ControllerError::Store(StoreError::BadId(_)) => Status::invalid_argument(e.to_string()),
            ControllerError::Store(_) | ControllerError::Transport(_) => {
                Status::internal(e.to_string())
            }
        }
    }
}

pub(crate) fn unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

pub(crate) fn unix_ms() -> u64 {
    (unix_ns() / 1_000_000).max(0) as u64
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// State shared by the services and run drivers.
pub(crate) struct Inner {
    pub cfg: ControllerConfig,
    pub store: ReportStore,
    pub agents: Mutex<BTreeMap<u64, agents::AgentEntry>>,
    pub agents_changed: Notify,
    pub runs: Mutex<BTreeMap<String, Arc<RunHandle>>>,
    pub next_conn: AtomicU64,
    pub shutdown: CancellationToken,
    pub metrics: metrics::Metrics,
    /// The Kubernetes side, when it runs (`Controller::run_kube`).
    pub kube: OnceLock<Arc<k8s::KubeState>>,
}

/// The controller. Cheap to clone.
#[derive(Clone)]
pub struct Controller {
    inner: Arc<Inner>,
}

impl Controller {
    pub fn new(cfg: ControllerConfig) -> Result<Self, ControllerError> {
        let store = ReportStore::open(&cfg.data_dir)?;
        Ok(Self {
            inner: Arc::new(Inner {
                cfg,
                store,
                agents: Mutex::new(BTreeMap::new()),
                agents_changed: Notify::new(),
                runs: Mutex::new(BTreeMap::new()),
                next_conn: AtomicU64::new(1),
                shutdown: CancellationToken::new(),
                metrics: metrics::Metrics::default(),
                kube: OnceLock::new(),
            }),
        })
    }

    /// Number of agents attached right now.
    pub fn agent_count(&self) -> usize {
        lock(&self.inner.agents).len()
    }

    /// Waits until at least `n` agents are attached.
    pub async fn wait_for_agents(&self, n: usize) {
        loop {
            let notified = self.inner.agents_changed.notified();
            if self.agent_count() >= n {
                return;
            }
            notified.await;
        }
    }

    /// Serves Prometheus `GET /metrics` (and `GET /healthz`) on `listener` until `shutdown`
    /// resolves. Separate from the gRPC listener (`stampede controller --metrics-listen`).
    pub async fn serve_metrics(
        &self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        metrics::serve(self.inner.clone(), listener, shutdown).await;
    }

    /// The current metrics in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        metrics::render(&self.inner)
    }

    /// Serves gRPC on `listener` until `shutdown` resolves. On shutdown every agent stream is
    /// closed (so agents' leases lapse and load stops) and running runs end as aborted with
    /// the data collected so far persisted.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ControllerError> {
        let (health_reporter, health) = tonic_health::server::health_reporter();
        health_reporter
            .set_serving::<v1::agent_service_server::AgentServiceServer<agents::AgentSvc>>()
            .await;
        health_reporter
            .set_serving::<v1::control_service_server::ControlServiceServer<control::ControlSvc>>()
            .await;
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(stampede_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(|e| ControllerError::Invalid(format!("reflection: {e}")))?;
        let token: Option<Arc<str>> = self.inner.cfg.token.as_deref().map(Arc::from);
        let agent_svc = v1::agent_service_server::AgentServiceServer::with_interceptor(
            agents::AgentSvc {
                inner: self.inner.clone(),
            },
            auth(token.clone()),
        );
        let control_svc = v1::control_service_server::ControlServiceServer::with_interceptor(
            control::ControlSvc {
                inner: self.inner.clone(),
            },
            auth(token),
        );
        let stop = self.inner.shutdown.clone();
        let signal = async move {
            shutdown.await;
            tracing::info!("controller shutting down: closing agent streams");
            stop.cancel();
        };
        tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .http2_keepalive_interval(Some(Duration::from_secs(5)))
            .http2_keepalive_timeout(Some(Duration::from_secs(5)))
            .add_service(health)
            .add_service(reflection)
            .add_service(agent_svc)
            .add_service(control_svc)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), signal)
            .await?;
        Ok(())
    }
}

/// Checks `authorization: Bearer <token>` in constant time.
fn auth(token: Option<Arc<str>>) -> impl Fn(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |req: Request<()>| {
        let Some(expected) = token.as_deref() else {
            return Ok(req);
        };
        let given = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        let same = given.len() == expected.len()
            && given
                .bytes()
                .zip(expected.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if same {
            Ok(req)
        } else {
            Err(Status::unauthenticated(
                "missing or wrong token: pass --token or set STAMPEDE_TOKEN to the controller's token",
            ))
        }
    }
}
