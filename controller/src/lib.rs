//! Stampede controller: the agent registry, the run state machine (pending → assigning →
//! ready → running → finishing → done | failed | aborted), the synchronized start, live and
//! final merging, and the report store. The CLI talks to it over `ControlService`; agents
//! attach over `AgentService`. Users and agents hold different tokens (`auth`); gRPC can be
//! served over TLS, with client certificates required when a client CA is given. Health and
//! reflection are open.
//!
//! # Layout
//!
//! - `agents`: one task per agent stream, the registry, the clock estimate, routing to runs.
//! - `run`: one run's life, driven by one task. `run/assign` waits for agents, checks the port
//!   budget and sends the shards; `run/running` starts them at one T0, merges their Progress and
//!   applies the agent-loss policy; `run/member` is an agent's part in a run; `run/finish`
//!   stores the report before the run is declared finished; `run/checkpoint` writes a running
//!   run's merged state to the data directory, and `run/adopt` re-adopts those runs when a
//!   controller starts on it.
//! - `renew`: lease renewals from a task of their own, only to agents heard from.
//! - `control`: the user-facing `ControlService` (submit, watch, report, list, abort).
//! - `data`: each agent's data rows, sent before its shard.
//! - [`store`]: report files written atomically, retention, markers of runs in flight.
//! - [`auth`]: the user and agent tokens, compared in constant time.
//! - `metrics`: Prometheus `/metrics` and `/healthz`, on a listener bounded in connections and time.
//! - `listen`: which connections reach the gRPC server: a first byte within a timeout, a cap.
//! - [`k8s`]: with `--kube` or in a pod: the `LoadTest` CRD and reconciler, ConfigMap and Secret
//!   data, `.proto` files from a ConfigMap, the agent pod reflector and Deployment scaling.

#![warn(unreachable_pub, missing_docs)]

mod agents;
pub mod auth;
mod control;
mod data;
pub mod k8s;
mod listen;
mod metrics;
mod observe;
mod own;
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
use tokio_util::sync::CancellationToken;
use tonic::Status;

pub use run::RunHandle;
pub use store::{ReportStore, StoreError};

/// Controller settings. `Debug` leaves the tokens out.
#[derive(Clone)]
pub struct ControllerConfig {
    /// Where finished reports are stored.
    pub data_dir: PathBuf,
    /// The users' token (CLI, LoadTest-free clients); `None` with no agent token disables the
    /// check (only allowed on loopback or with `--insecure`).
    pub token: Option<String>,
    /// The agents' token; `None`: agents present the user token.
    pub agent_token: Option<String>,
    /// Serve gRPC over TLS.
    pub tls: Option<ServerTls>,
    /// Lease granted to agents; renewed every third of it (`renew::RENEWALS_PER_LEASE`).
    pub lease: Duration,
    /// How long beyond their lease a run's agents keep loading when their stream closes, and
    /// how long a re-adopted run waits for them to come back: long enough for this controller
    /// to restart on its data directory and re-adopt the run (agents cap it with their own
    /// setting). A controller that did not restart waits only for a reconnect.
    pub restart_grace: Duration,
    /// How long a run stays open, after the agent-loss policy has decided, for the books of
    /// an agent lost while its load may still run (its stream went silent or closed before
    /// its lease lapsed): one that reconnects within it replays what it collected, so the
    /// report counts every request it sent. `None`: the lease, the restart grace and a margin
    /// to reconnect (the longest its load can go on); zero: the report is written at once,
    /// naming what each such agent may have sent after its last interval delivered.
    pub lost_agent_wait: Option<Duration>,
    /// How long a submitted run waits for enough agents before failing, when its submission
    /// names no wait.
    pub agent_wait: Duration,
    /// The longest wait for agents a submission may ask for (at most
    /// `stampede_core::scenario::MAX_AGENT_WAIT`): a waiting run holds its scenario, its data
    /// rows and a pending place.
    pub max_agent_wait: Duration,
    /// Runs waiting for agents at once; the next submission is refused (`resource_exhausted`)
    /// rather than queued, so a client looping on submit cannot fill the controller's memory.
    pub max_pending_runs: usize,
    /// How long agents have to acknowledge an assignment.
    pub ready_timeout: Duration,
    /// Interval of progress reports and live snapshots.
    pub interval: Duration,
    /// Least time between the start decision and T0.
    pub start_delay: Duration,
    /// Most agents one run may ask for (and the most the scaler grows the agent Deployment
    /// to): a bound on what one token holder can make the cluster spend.
    pub max_agents: u32,
    /// Stored reports kept: the newest `reports_keep`, none older than `reports_max_age`.
    pub reports_keep: usize,
    /// `None`: reports are kept whatever their age, up to `reports_keep`.
    pub reports_max_age: Option<Duration>,
    /// Finished runs kept in memory (their reports stay in the store): memory stays flat
    /// however many runs a controller serves.
    pub finished_in_memory: usize,
}

impl std::fmt::Debug for ControllerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerConfig")
            .field("data_dir", &self.data_dir)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("agent_token", &self.agent_token.as_ref().map(|_| "<set>"))
            .field("tls", &self.tls.as_ref().map(|t| t.client_ca_pem.is_some()))
            .field("lease", &self.lease)
            .field("max_agents", &self.max_agents)
            .field("max_pending_runs", &self.max_pending_runs)
            .finish_non_exhaustive()
    }
}

/// The controller's TLS identity, PEM; with `client_ca_pem`, clients must present a
/// certificate it signed (mutual TLS).
#[derive(Clone)]
pub struct ServerTls {
    /// The certificate chain the controller presents.
    pub cert_pem: Vec<u8>,
    /// The certificate's private key.
    pub key_pem: Vec<u8>,
    /// The CA that client certificates must chain to; `None`: no client certificate is asked for.
    pub client_ca_pem: Option<Vec<u8>>,
}

/// The default [`ControllerConfig::restart_grace`]: a controller pod rescheduled on its node,
/// or a process restarted by its supervisor, is back well within it.
pub const DEFAULT_RESTART_GRACE: Duration = Duration::from_secs(15);

/// The default [`ControllerConfig::max_pending_runs`]: far more runs than a cluster's agents
/// can start one after another within an agent wait, far fewer than fill a controller's memory.
pub const DEFAULT_MAX_PENDING_RUNS: usize = 64;

/// Shortest lease the controller grants: renewals go out every third of it, and a lease
/// shorter than a few scheduling hiccups would stop healthy agents.
pub const MIN_LEASE: Duration = Duration::from_millis(100);
/// Longest lease: "load stops within the lease" must stay a promise about seconds.
pub const MAX_LEASE: Duration = Duration::from_secs(60);

impl ControllerConfig {
    /// The defaults the `stampede controller` command starts from, storing reports in `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            token: None,
            agent_token: None,
            tls: None,
            lease: Duration::from_secs(1),
            restart_grace: DEFAULT_RESTART_GRACE,
            lost_agent_wait: None,
            agent_wait: Duration::from_secs(30),
            max_agent_wait: stampede_core::scenario::MAX_AGENT_WAIT,
            max_pending_runs: DEFAULT_MAX_PENDING_RUNS,
            ready_timeout: Duration::from_secs(15),
            interval: Duration::from_secs(1),
            start_delay: Duration::from_millis(300),
            max_agents: stampede_core::scenario::MAX_AGENTS,
            reports_keep: 200,
            reports_max_age: Some(Duration::from_secs(30 * 86_400)),
            finished_in_memory: 32,
        }
    }
}

/// Controller failures, mapped to gRPC statuses in one place ([`From`] below).
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The scenario does not validate; the message names the field.
    #[error("scenario: {0}")]
    Scenario(stampede_core::ScenarioError),
    /// A scenario that still needs something only its submitter can do: a file read, data
    /// fetched, a gRPC call encoded. The message names the field.
    #[error(transparent)]
    NotReady(#[from] stampede_core::scenario::NotReady),
    /// No run of that id is in memory or in the store.
    #[error("run {0} not found")]
    RunNotFound(String),
    /// The run is still going, so it has no report yet.
    #[error("run {0} has not finished yet")]
    NotFinished(String),
    /// The report store could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The request itself is wrong (an agent count, a wait); the message names what.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A bound on the controller's work is reached; the same request can succeed later.
    #[error("{0}")]
    Exhausted(String),
    /// The gRPC server could not be served on its listener.
    #[error("serving: {0}")]
    Transport(tonic::transport::Error),
}

// Each cause below is part of its variant's message, so it is not also a `source()`
// (`#[from]` would make it one, and a chain printer would say it twice).
impl From<stampede_core::ScenarioError> for ControllerError {
    fn from(e: stampede_core::ScenarioError) -> Self {
        Self::Scenario(e)
    }
}

impl From<tonic::transport::Error> for ControllerError {
    fn from(e: tonic::transport::Error) -> Self {
        Self::Transport(e)
    }
}

impl From<ControllerError> for Status {
    fn from(e: ControllerError) -> Self {
        match &e {
            ControllerError::Scenario(_)
            | ControllerError::NotReady(_)
            | ControllerError::Invalid(_) => Status::invalid_argument(e.to_string()),
            ControllerError::Exhausted(_) => Status::resource_exhausted(e.to_string()),
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
    /// Held from the count of pending runs to the new run's entry, so two submissions cannot
    /// both take the last pending place.
    pub admission: Mutex<()>,
    pub next_conn: AtomicU64,
    pub shutdown: CancellationToken,
    pub metrics: metrics::Metrics,
    /// The Kubernetes side, when it runs (`Controller::run_kube`).
    pub kube: OnceLock<Arc<k8s::KubeState>>,
    /// Where this controller serves, which every agent is told to refuse as a target.
    pub own: own::OwnAddresses,
}

/// The controller. Cheap to clone.
#[derive(Clone)]
pub struct Controller {
    inner: Arc<Inner>,
    /// Serving status, shared by the gRPC listener and the plaintext health listener.
    health: tonic_health::server::HealthReporter,
}

impl Controller {
    /// Opens the report store under `cfg.data_dir` and takes over what a previous controller
    /// left there: checkpointed runs go on, other runs it had in flight are recorded as failed.
    pub fn new(cfg: ControllerConfig) -> Result<Self, ControllerError> {
        let store = ReportStore::open(&cfg.data_dir)?;
        let inner = Arc::new(Inner {
            cfg,
            store,
            agents: Mutex::new(BTreeMap::new()),
            agents_changed: Notify::new(),
            runs: Mutex::new(BTreeMap::new()),
            admission: Mutex::new(()),
            next_conn: AtomicU64::new(1),
            shutdown: CancellationToken::new(),
            metrics: metrics::Metrics::default(),
            kube: OnceLock::new(),
            own: own::OwnAddresses::default(),
        });
        // Runs checkpointed by the previous controller on this data directory go on; the
        // others it had in flight are lost, and recorded as failed.
        let adopted = run::adopt_all(&inner);
        for r in inner.store.recover_interrupted(&adopted) {
            tracing::warn!(run = %r.run_id, scenario = %r.scenario, "run was in flight when the controller stopped: recorded as failed");
        }
        Ok(Self {
            inner,
            health: tonic_health::server::HealthReporter::new(),
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
        self.listening(&listener);
        metrics::serve(self.inner.clone(), listener, shutdown).await;
    }

    /// Notes a listener of this controller, for agents to refuse as a target.
    fn listening(&self, listener: &TcpListener) {
        if let Ok(a) = listener.local_addr() {
            self.inner.own.add_listener(a);
        }
    }

    /// The current metrics in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        metrics::render(&self.inner)
    }

    fn health_service(
        &self,
    ) -> tonic_health::pb::health_server::HealthServer<tonic_health::server::HealthService> {
        tonic_health::pb::health_server::HealthServer::new(
            tonic_health::server::HealthService::from_health_reporter(self.health.clone()),
        )
    }

    /// Serves only the gRPC health service, in plaintext, on `listener` until `shutdown`
    /// resolves (`stampede controller --health-listen`). Kubelet's gRPC probes cannot speak
    /// TLS: with TLS on the main port, the probes come here. It tells whether the controller
    /// serves, nothing else, and needs no credential.
    pub async fn serve_health(
        &self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ControllerError> {
        self.listening(&listener);
        let stop = CancellationToken::new();
        let admitted = listen::admit(
            listener,
            listen::MAX_GRPC_CONNECTIONS,
            listen::FIRST_BYTE_TIMEOUT,
            stop.clone(),
        );
        let _stop_admitting = stop.drop_guard();
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(5)))
            .http2_keepalive_timeout(Some(Duration::from_secs(5)))
            .add_service(self.health_service())
            .serve_with_incoming_shutdown(admitted, shutdown)
            .await?;
        Ok(())
    }

    /// Serves gRPC on `listener` until `shutdown` resolves. On shutdown every agent stream is
    /// closed (so agents' leases lapse and load stops) and running runs end as aborted with
    /// the data collected so far persisted.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ControllerError> {
        self.listening(&listener);
        let health = self.health_service();
        self.health
            .set_serving::<v1::agent_service_server::AgentServiceServer<agents::AgentSvc>>()
            .await;
        self.health
            .set_serving::<v1::control_service_server::ControlServiceServer<control::ControlSvc>>()
            .await;
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(stampede_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(|e| ControllerError::Invalid(format!("reflection: {e}")))?;
        let creds = auth::Credentials::new(
            self.inner.cfg.token.as_deref(),
            self.inner.cfg.agent_token.as_deref(),
        );
        use stampede_core::scenario::{MAX_SCENARIO_BYTES, MESSAGE_OVERHEAD};
        use tonic::service::interceptor::InterceptedService;
        let agent_svc = InterceptedService::new(
            v1::agent_service_server::AgentServiceServer::new(agents::AgentSvc {
                inner: self.inner.clone(),
            })
            .max_encoding_message_size(MAX_SCENARIO_BYTES + MESSAGE_OVERHEAD)
            .max_decoding_message_size(stampede_core::scenario::MAX_AGENT_MESSAGE_BYTES),
            creds.interceptor(auth::Role::Agent),
        );
        // A SubmitRun carries the scenario with its files inlined: accept what the CLI accepts.
        let control_svc = InterceptedService::new(
            v1::control_service_server::ControlServiceServer::new(control::ControlSvc {
                inner: self.inner.clone(),
            })
            .max_decoding_message_size(MAX_SCENARIO_BYTES + MESSAGE_OVERHEAD)
            .max_encoding_message_size(usize::MAX),
            creds.interceptor(auth::Role::User),
        );
        let stop = self.inner.shutdown.clone();
        let signal = async move {
            shutdown.await;
            tracing::info!("controller shutting down: closing agent streams");
            stop.cancel();
        };
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &self.inner.cfg.tls {
            let mut config = tonic::transport::ServerTlsConfig::new().identity(
                tonic::transport::Identity::from_pem(&tls.cert_pem, &tls.key_pem),
            );
            if let Some(ca) = &tls.client_ca_pem {
                config = config.client_ca_root(tonic::transport::Certificate::from_pem(ca));
            }
            builder = builder
                .tls_config(config)
                .map_err(|e| ControllerError::Invalid(format!("tls: {e}")))?;
        }
        builder
            .tcp_nodelay(true)
            // A peer that stops answering pings is closed within 10 s; a quiet one that
            // answers them (an agent between runs) stays.
            .http2_keepalive_interval(Some(Duration::from_secs(5)))
            .http2_keepalive_timeout(Some(Duration::from_secs(5)))
            .add_service(health)
            .add_service(reflection)
            .add_service(agent_svc)
            .add_service(control_svc)
            .serve_with_incoming_shutdown(
                listen::admit(
                    listener,
                    listen::MAX_GRPC_CONNECTIONS,
                    listen::FIRST_BYTE_TIMEOUT,
                    self.inner.shutdown.clone(),
                ),
                signal,
            )
            .await?;
        Ok(())
    }
}
