//! The pods behind a run's target Service, sampled while the run goes on: each interval, the
//! pods the Service's selector matches (status: node, restarts, readiness; one LIST), then
//! each of their nodes' kubelet metrics through the API server's node proxy:
//! `/api/v1/nodes/NODE/proxy/metrics/resource` (CPU and working set per container, from the
//! container runtime) and `.../metrics/cadvisor` (the CFS periods, for throttling), two GETs per
//! node, each read up to [`MAX_METRICS_BYTES`]. The parsing and the arithmetic are
//! `stampede_core::pods`'.
//!
//! Nothing here fails a run: a Service without a selector, pods that cannot be listed or a
//! kubelet that cannot be read (RBAC off, a managed cluster's proxy closed) is said once, in
//! the report's `target_resources.pods_unavailable` and the log, and the run goes on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::ListParams;
use kube::Api;
use stampede_core::pods::{
    parse_kubelet, PodCounters, PodEvent, PodSample, PodsObserved, ReadyReplicas, MAX_METRICS_BYTES,
};
use stampede_core::service::ServiceRef;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Most one look at the pods may take: a slow kubelet costs one sample, not the interval.
const LOOK_TIMEOUT: Duration = Duration::from_secs(5);

/// The Service's pods could not be listed (no RBAC for pods, the API server away): the run
/// goes on without its target's pods, and says why once.
#[derive(Debug, thiserror::Error)]
#[error("the pods of the Service {namespace}/{service} cannot be listed: {error}")]
pub struct PodListError {
    namespace: String,
    service: String,
    error: kube::Error,
}

/// Why one read of the kubelet's metrics failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeMetricsError {
    /// The API server answered with an error status (403: no `nodes/proxy` get).
    #[error("HTTP {status} from {path}{}", hint(*status))]
    Status {
        /// The API path asked for.
        path: String,
        /// The HTTP status it answered.
        status: u16,
    },
    /// The request could not be made or the answer not read.
    #[error("{path}: {error}")]
    Request {
        /// The API path asked for.
        path: String,
        /// The client's error.
        error: kube::Error,
    },
    /// The answer is larger than [`MAX_METRICS_BYTES`] or broke off.
    #[error("{path}: the body could not be read within {MAX_METRICS_BYTES} bytes")]
    Body {
        /// The API path asked for.
        path: String,
    },
}

fn hint(status: u16) -> &'static str {
    match status {
        403 => " (forbidden: the controller needs `get` on nodes/proxy; the chart grants it with rbac.targetPods)",
        404 => " (not found: the node or its kubelet's cAdvisor endpoint)",
        _ => "",
    }
}

/// GETs one of a node's kubelet metrics texts (`resource` or `cadvisor`) through the API
/// server, bounded.
pub async fn kubelet_text(
    client: &kube::Client,
    node: &str,
    which: &str,
) -> Result<String, NodeMetricsError> {
    let path = format!("/api/v1/nodes/{node}/proxy/metrics/{which}");
    let req = http::Request::get(&path)
        .header(http::header::ACCEPT, "text/plain")
        .body(kube::client::Body::empty())
        .map_err(|e| NodeMetricsError::Request {
            path: path.clone(),
            error: kube::Error::HttpError(e),
        })?;
    let res = client
        .send(req)
        .await
        .map_err(|error| NodeMetricsError::Request {
            path: path.clone(),
            error,
        })?;
    let status = res.status().as_u16();
    if status != 200 {
        return Err(NodeMetricsError::Status { path, status });
    }
    let body = http_body_util::Limited::new(res.into_body(), MAX_METRICS_BYTES)
        .collect()
        .await
        .map_err(|_| NodeMetricsError::Body { path: path.clone() })?
        .to_bytes();
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// What the sampling saw so far, shared by the sampling task and the run's driver.
#[derive(Default)]
struct Seen {
    observed: PodsObserved,
    /// Changes not yet handed to the checkpoint.
    fresh: Vec<PodEvent>,
}

impl Seen {
    fn record(&mut self, event: PodEvent) {
        if self.observed.apply(event.clone()) {
            self.fresh.push(event);
        }
    }
}

/// The sampling task of one run's Service.
pub(crate) struct PodObserver {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    observed: Arc<Mutex<Seen>>,
}

impl PodObserver {
    /// Starts sampling the pods of `service` at `t0` (`t0_unix_ms` on the wall clock, which
    /// cAdvisor's stamps are in), then every `interval`, after what a previous controller saw
    /// (`before`, a re-adopted run's checkpoint).
    pub(crate) fn start(
        client: kube::Client,
        namespace: String,
        service: ServiceRef,
        (t0, t0_unix_ms): (Instant, u64),
        interval: Duration,
        before: Vec<PodEvent>,
    ) -> Self {
        let stop = CancellationToken::new();
        let mut seen = Seen::default();
        for e in before {
            seen.observed.apply(e);
        }
        let observed = Arc::new(Mutex::new(seen));
        let task = tokio::spawn(sample(
            Target {
                client,
                namespace,
                service,
            },
            (t0, t0_unix_ms),
            interval.max(Duration::from_millis(500)),
            stop.clone(),
            observed.clone(),
        ));
        Self {
            stop,
            task,
            observed,
        }
    }

    /// The changes since the last call, for the checkpoint.
    pub(crate) fn take_fresh(&self) -> Vec<PodEvent> {
        std::mem::take(&mut crate::lock(&self.observed).fresh)
    }

    /// The cores the pods used between their last two samples (`None` before two).
    pub(crate) fn latest_cores(&self) -> Option<f64> {
        crate::lock(&self.observed).observed.latest_cores()
    }

    /// Stops after one last look and returns what was seen.
    pub(crate) async fn finish(self) -> PodsObserved {
        self.stop.cancel();
        let _ = self.task.await;
        crate::lock(&self.observed).observed.clone()
    }
}

struct Target {
    client: kube::Client,
    namespace: String,
    service: ServiceRef,
}

async fn sample(
    target: Target,
    (t0, t0_unix_ms): (Instant, u64),
    interval: Duration,
    stop: CancellationToken,
    observed: Arc<Mutex<Seen>>,
) {
    let say = |why: String| {
        tracing::warn!(service = %target.service.name, %why, "the target's pods are not sampled");
        crate::lock(&observed).record(PodEvent::Unavailable(why));
    };
    let svc = Api::<Service>::namespaced(target.client.clone(), &target.namespace)
        .get(&target.service.name)
        .await;
    let selector = match svc.as_ref().map(selector_of) {
        Ok(Some(s)) => s,
        Ok(None) => {
            return say(format!(
                "the Service {}/{} has no selector: its pods are not known",
                target.namespace, target.service.name
            ))
        }
        Err(e) => {
            return say(format!(
                "the Service {}/{} cannot be read: {e}",
                target.namespace, target.service.name
            ))
        }
    };
    let pods_api = Api::<Pod>::namespaced(target.client.clone(), &target.namespace);
    let mut metrics_ok = true;
    let mut tick = tokio::time::interval_at(t0.max(Instant::now()), interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            _ = stop.cancelled() => true,
        };
        let look = look(&target, &pods_api, &selector, metrics_ok);
        match tokio::time::timeout(LOOK_TIMEOUT, look).await {
            Ok(Ok(look)) => {
                let at_s = Instant::now().saturating_duration_since(t0).as_secs_f64();
                let mut o = crate::lock(&observed);
                if let Some(why) = look.metrics_error {
                    // Forbidden or not found does not get better during a run: asked once.
                    metrics_ok = false;
                    tracing::warn!(service = %target.service.name, %why, "the kubelet's metrics cannot be read");
                    o.record(PodEvent::Unavailable(format!(
                        "the kubelet's metrics cannot be read: {why}"
                    )));
                }
                let ready = look.pods.iter().filter(|p| p.ready).count() as u32;
                o.record(PodEvent::Ready(ReadyReplicas {
                    at_s,
                    ready,
                    pods: look.pods.len() as u32,
                }));
                for p in look.pods {
                    let sample_at = p
                        .counters
                        .stamp_ms
                        .map(|ms| (ms - t0_unix_ms as i64) as f64 / 1000.0)
                        .unwrap_or(at_s);
                    o.record(PodEvent::Sample {
                        pod: p.name,
                        sample: PodSample {
                            at_s: sample_at,
                            counters: p.counters,
                            restarts: p.restarts,
                            ready: p.ready,
                        },
                    });
                }
            }
            Ok(Err(why)) => {
                tracing::warn!(service = %target.service.name, %why, "the target's pods cannot be listed");
                crate::lock(&observed).record(PodEvent::Unavailable(why.to_string()));
            }
            Err(_) => {
                tracing::warn!(service = %target.service.name, "a look at the target's pods took over {LOOK_TIMEOUT:?}")
            }
        }
        if last {
            break;
        }
    }
}

/// One pod as one look found it.
struct PodLook {
    name: String,
    counters: PodCounters,
    restarts: u32,
    ready: bool,
}

struct Look {
    pods: Vec<PodLook>,
    /// Set when a node's metrics could not be read.
    metrics_error: Option<String>,
}

/// Lists the Service's pods, then reads each of their nodes' cAdvisor text (when `metrics`).
async fn look(
    target: &Target,
    pods_api: &Api<Pod>,
    selector: &str,
    metrics: bool,
) -> Result<Look, PodListError> {
    let list = pods_api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|error| PodListError {
            namespace: target.namespace.clone(),
            service: target.service.name.clone(),
            error,
        })?;
    let mut by_node: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut pods = Vec::new();
    for p in list.items.iter().take(stampede_core::pods::MAX_PODS) {
        let Some(name) = p.metadata.name.clone() else {
            continue;
        };
        let status = p.status.as_ref();
        let restarts = status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .map(|c| c.restart_count.max(0) as u32)
            .sum();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            by_node.entry(node).or_default().insert(name.clone());
        }
        pods.push(PodLook {
            name,
            counters: PodCounters::default(),
            restarts,
            ready,
        });
    }
    let mut metrics_error = None;
    if metrics {
        let mut found = BTreeMap::new();
        for (node, names) in &by_node {
            // CPU and memory from the resource metrics (the container runtime's, fresh at
            // each read), the CFS periods from cAdvisor's.
            let read = async {
                let resource = kubelet_text(&target.client, node, "resource").await?;
                let cadvisor = kubelet_text(&target.client, node, "cadvisor").await?;
                Ok::<_, NodeMetricsError>((resource, cadvisor))
            };
            match read.await {
                Ok((resource, cadvisor)) => {
                    let mut advised = parse_kubelet(&cadvisor, &target.namespace, names);
                    for (pod, c) in parse_kubelet(&resource, &target.namespace, names) {
                        let old = advised.remove(&pod).unwrap_or_default();
                        found.insert(pod, c.or(old));
                    }
                    found.extend(advised);
                }
                Err(e) => {
                    metrics_error = Some(e.to_string());
                    break;
                }
            }
        }
        for p in &mut pods {
            if let Some(c) = found.remove(&p.name) {
                p.counters = c;
            }
        }
    }
    Ok(Look {
        pods,
        metrics_error,
    })
}

/// The Service's selector as a label selector string; `None` without one.
fn selector_of(svc: &Service) -> Option<String> {
    let sel = svc.spec.as_ref()?.selector.as_ref()?;
    (!sel.is_empty()).then(|| {
        sel.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    })
}
