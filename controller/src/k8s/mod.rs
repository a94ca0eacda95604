//! The controller's Kubernetes side (kube-rs), enabled with `stampede controller --kube` (the
//! default when `KUBERNETES_SERVICE_HOST` is set). Local mode never touches any of this.
//!
//! - [`pods`]: a reflector over the agent pods (`STAMPEDE_AGENT_SELECTOR`); `ListAgents` shows
//!   each agent's pod readiness, and agent pods that have not attached yet.
//! - [`scale`]: scales the agent Deployment (`STAMPEDE_AGENT_DEPLOYMENT`) through its scale
//!   subresource when a run asks for more agents than are attached, and back after the run when
//!   `--scale-down-after` is set.
//! - [`endpoints`]: `endpoints: service`, a run's Service's ready pods from its EndpointSlices.
//! - [`target_pods`]: the CPU, throttling, memory and restarts of that Service's pods, from the
//!   kubelet's cAdvisor metrics through the API server's node proxy.
//! - [`loadtest`]: reconciles `LoadTest` resources with `kube::runtime::Controller`; `data`
//!   reads a LoadTest's `config_map:` / `secret:` data sources and `protos` compiles the
//!   `.proto` files of its `grpc.config_map` and encodes its gRPC calls, before it is submitted.

pub mod crd;
mod data;
pub mod endpoints;
pub mod loadtest;
pub mod pods;
mod protos;
pub mod scale;
pub mod target_pods;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::{Controller, Inner};

pub use crd::{LoadTest, LoadTestPhase, LoadTestSpec, LoadTestStatus};

/// Settings of the Kubernetes side.
#[derive(Debug, Clone)]
pub struct KubeSettings {
    /// Namespace of the controller (its LoadTests, agent pods and agent Deployment).
    pub namespace: String,
    /// Label selector of the agent pods.
    pub agent_selector: Option<String>,
    /// Name of the agent Deployment the controller may scale.
    pub agent_deployment: Option<String>,
    /// Scale the agent Deployment back to its previous size after a run that scaled it up.
    pub scale_down_after: bool,
    /// Name of this controller's pod (the events' reporting instance).
    pub pod_name: Option<String>,
    /// Reconcile LoadTest resources.
    pub loadtests: bool,
}

/// Failures of the Kubernetes side.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The API server refused or could not be reached.
    #[error("kubernetes api: {0}")]
    Api(kube::Error),
    /// No kube config or in-cluster service account could be loaded.
    #[error("kubernetes client configuration: {0}")]
    Config(String),
    /// One LoadTest could not be handled: its name, then why.
    #[error("loadtest {0}: {1}")]
    LoadTest(String, String),
}

// Each cause below is part of its variant's message, so it is not also a `source()`
// (`#[from]` would make it one, and a chain printer would say it twice).
impl From<kube::Error> for KubeError {
    fn from(e: kube::Error) -> Self {
        Self::Api(e)
    }
}

/// What the rest of the controller sees of Kubernetes.
pub(crate) struct KubeState {
    pub pods: Option<Store<Pod>>,
    pub scaler: Option<Arc<scale::Scaler>>,
    /// For what runs ask of the cluster (`endpoints: service`).
    pub client: kube::Client,
    /// The controller's namespace: a run's, for a Service named without one.
    pub namespace: String,
}

impl Controller {
    /// Starts the Kubernetes side with the in-cluster (or kubeconfig) client: the agent pod
    /// reflector, the scaler and the LoadTest reconciler. Runs until `stop` is cancelled.
    pub async fn run_kube(
        &self,
        settings: KubeSettings,
        stop: CancellationToken,
    ) -> Result<(), KubeError> {
        let client = kube::Client::try_default().await?;
        self.run_kube_with(client, settings, stop).await
    }

    /// As [`Controller::run_kube`], with a given client.
    pub async fn run_kube_with(
        &self,
        client: kube::Client,
        settings: KubeSettings,
        stop: CancellationToken,
    ) -> Result<(), KubeError> {
        let inner: Arc<Inner> = self.inner.clone();
        let mut tasks = tokio::task::JoinSet::new();
        let pods = match &settings.agent_selector {
            Some(sel) => {
                let (store, fut) = pods::reflect(client.clone(), &settings.namespace, sel);
                tasks.spawn(fut);
                Some(store)
            }
            None => None,
        };
        let scaler = settings.agent_deployment.as_ref().map(|d| {
            Arc::new(scale::Scaler::new(
                client.clone(),
                &settings.namespace,
                d,
                settings.scale_down_after,
            ))
        });
        if inner
            .kube
            .set(Arc::new(KubeState {
                pods,
                scaler,
                client: client.clone(),
                namespace: settings.namespace.clone(),
            }))
            .is_err()
        {
            return Err(KubeError::Config(
                "the kubernetes side is already running".into(),
            ));
        }
        if settings.loadtests {
            tasks.spawn(loadtest::run(inner.clone(), client, settings.clone()));
        }
        tracing::info!(namespace = %settings.namespace, selector = ?settings.agent_selector,
            deployment = ?settings.agent_deployment, loadtests = settings.loadtests, "kubernetes side started");
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = inner.shutdown.cancelled() => {}
        }
        tasks.shutdown().await;
        Ok(())
    }
}
