//! `endpoints: service`: follows the ready pods of the Service a run's target names, from its
//! EndpointSlices, for as long as the run holds the watch.
//!
//! The Service is read once to learn which of its ports the target URL's port is; the
//! EndpointSlices (label `kubernetes.io/service-name`) are then watched, and each change of the
//! ready set is published on a `watch` channel the run's driver forwards to its agents. The set
//! logic itself is `stampede_core::service`; this module only speaks to the API.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use stampede_core::service::{
    slice_port_name, ServiceEndpoint, ServicePort, ServiceRef, ServiceSlices, Slice, SliceEndpoint,
    SlicePort,
};
use tokio::sync::watch;

/// How long a run waits for the Service's first complete list of EndpointSlices.
pub const FIRST_LIST: Duration = Duration::from_secs(15);

/// Why a Service's endpoints cannot be followed; the run is refused before any load.
#[derive(Debug, thiserror::Error)]
pub enum ServiceWatchError {
    /// `endpoints: service` without a target URL to name the Service.
    #[error("target: is required")]
    NoTarget,
    /// The target URL names no Service.
    #[error("target: with `endpoints: service`, {0}")]
    Target(stampede_core::service::ServiceError),
    /// No Kubernetes API to ask (outside a cluster, no KUBECONFIG).
    #[error(
        "endpoints: service follows the target's Kubernetes Service and needs the Kubernetes API, \
         but the controller runs outside a cluster and KUBECONFIG is not set; list the pods' \
         addresses in `endpoints:` instead"
    )]
    NoCluster,
    /// The client could not be configured.
    #[error("endpoints: service: kubernetes client: {0}")]
    Client(String),
    /// The Service could not be read (missing, forbidden).
    #[error("endpoints: service: cannot read the Service {namespace}/{name}: {error}")]
    Service {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
        /// The API server's answer.
        error: kube::Error,
    },
    /// The Service has no such port, or the URL names no Service.
    #[error("endpoints: service: {0}")]
    Port(stampede_core::service::ServiceError),
    /// The slices could not be listed in time.
    #[error("endpoints: service: the EndpointSlices of {namespace}/{name} were not listed within {}s (last error: {last})", FIRST_LIST.as_secs())]
    FirstList {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
        /// The last listing error, so a refusal (RBAC) is not mistaken for a slow API server.
        last: String,
    },
    /// Listed, and no pod is ready.
    #[error(
        "endpoints: service: the Service {namespace}/{name} has no ready endpoint on port {port}"
    )]
    NoneReady {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
        /// The port the scenario's target names.
        port: u16,
    },
}

// Each cause below is part of its variant's message, so it is not also a `source()`
// (`#[from]` would make it one, and a chain printer would say it twice).
impl From<stampede_core::service::ServiceError> for ServiceWatchError {
    fn from(e: stampede_core::service::ServiceError) -> Self {
        Self::Port(e)
    }
}

/// A client and its namespace for a run's Service: the Kubernetes side's when it runs,
/// otherwise one from the in-cluster environment or `KUBECONFIG`.
pub(crate) async fn client_for(
    kube: Option<&super::KubeState>,
) -> Result<(kube::Client, String), ServiceWatchError> {
    if let Some(k) = kube {
        return Ok((k.client.clone(), k.namespace.clone()));
    }
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let kubeconfig = std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty());
    if !in_cluster && !kubeconfig {
        return Err(ServiceWatchError::NoCluster);
    }
    let client = kube::Client::try_default()
        .await
        .map_err(|e| ServiceWatchError::Client(e.to_string()))?;
    let namespace = client.default_namespace().to_string();
    Ok((client, namespace))
}

/// A followed Service: its current ready set, replaced as it changes. Dropping it stops the
/// watch.
#[derive(Debug)]
pub struct ServiceWatch {
    /// The ready endpoints, replaced whole on every change; runs send each version to their agents.
    pub rx: watch::Receiver<Vec<ServiceEndpoint>>,
    task: tokio::task::AbortHandle,
}

impl Drop for ServiceWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ServiceWatch {
    /// The ready set now.
    pub fn current(&self) -> Vec<ServiceEndpoint> {
        self.rx.borrow().clone()
    }

    /// The next ready set that differs from the last one seen; never, once the watch ended.
    pub async fn changed(&mut self) -> Vec<ServiceEndpoint> {
        if self.rx.changed().await.is_ok() {
            return self.rx.borrow_and_update().clone();
        }
        std::future::pending().await
    }
}

/// Reads the Service, starts watching its EndpointSlices, and returns once the first complete
/// list has a ready endpoint.
pub async fn follow(
    client: kube::Client,
    run_namespace: &str,
    service: &ServiceRef,
) -> Result<ServiceWatch, ServiceWatchError> {
    let namespace = service.namespace_or(run_namespace).to_string();
    let svc = Api::<Service>::namespaced(client.clone(), &namespace)
        .get(&service.name)
        .await
        .map_err(|error| ServiceWatchError::Service {
            namespace: namespace.clone(),
            name: service.name.clone(),
            error,
        })?;
    let port_name = slice_port_name(&service.name, &service_ports(&svc), service.port)?;
    let api = Api::<EndpointSlice>::namespaced(client, &namespace);
    let cfg = watcher::Config::default().labels(&service.slice_selector());
    let (tx, mut rx) = watch::channel(Vec::new());
    let (first_tx, mut first_rx) = watch::channel::<Option<String>>(None);
    let name = service.name.clone();
    let task = tokio::spawn(async move {
        let mut slices = ServiceSlices::new(port_name);
        let mut listing = ServiceSlices::default();
        let mut stream = watcher(api, cfg).default_backoff().boxed();
        while let Some(ev) = stream.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(service = %name, error = %e, "EndpointSlice watch");
                    let _ = first_tx.send(Some(e.to_string()));
                    continue;
                }
            };
            if apply(&mut slices, &mut listing, ev) {
                let ready = slices.ready();
                tx.send_if_modified(|now| {
                    if *now == ready {
                        return false;
                    }
                    let d = stampede_core::service::diff(now, &ready);
                    tracing::info!(service = %name, added = ?d.added, removed = ?d.removed, "the Service's ready endpoints changed");
                    *now = ready;
                    true
                });
                let _ = first_tx.send(Some(String::new()));
            }
        }
    });
    let watch = ServiceWatch {
        rx: rx.clone(),
        task: task.abort_handle(),
    };
    // The first complete list (an empty error string), or the last error when time runs out.
    let mut last = String::from("no answer");
    let listed = tokio::time::timeout(FIRST_LIST, async {
        loop {
            if first_rx.changed().await.is_err() {
                return false;
            }
            match first_rx.borrow_and_update().clone() {
                Some(e) if e.is_empty() => return true,
                Some(e) => last = e,
                None => {}
            }
        }
    })
    .await
    .unwrap_or(false);
    if !listed {
        return Err(ServiceWatchError::FirstList {
            namespace,
            name: service.name.clone(),
            last,
        });
    }
    if rx.borrow_and_update().is_empty() {
        return Err(ServiceWatchError::NoneReady {
            namespace,
            name: service.name.clone(),
            port: service.port,
        });
    }
    Ok(watch)
}

/// Takes one watch event into the slices; true when the set is complete after it (a relist
/// builds in `listing` and replaces `slices` at its end).
fn apply(
    slices: &mut ServiceSlices,
    listing: &mut ServiceSlices,
    ev: watcher::Event<EndpointSlice>,
) -> bool {
    match ev {
        watcher::Event::Init => {
            *listing = slices.clone();
            listing.clear();
            false
        }
        watcher::Event::InitApply(s) => {
            listing.apply(&slice_name(&s), &slice_of(&s));
            false
        }
        watcher::Event::InitDone => {
            std::mem::swap(slices, listing);
            true
        }
        watcher::Event::Apply(s) => {
            slices.apply(&slice_name(&s), &slice_of(&s));
            true
        }
        watcher::Event::Delete(s) => {
            slices.delete(&slice_name(&s));
            true
        }
    }
}

fn slice_name(s: &EndpointSlice) -> String {
    s.metadata.name.clone().unwrap_or_default()
}

/// The Service's ports, as core reads them.
pub fn service_ports(svc: &Service) -> Vec<ServicePort> {
    svc.spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(ServicePort {
                name: p.name.clone(),
                port: u16::try_from(p.port).ok()?,
            })
        })
        .collect()
}

/// An EndpointSlice as core reads it: addresses, readiness and pod of each endpoint, its ports.
pub fn slice_of(s: &EndpointSlice) -> Slice {
    Slice {
        endpoints: s
            .endpoints
            .iter()
            .map(|e| SliceEndpoint {
                addresses: e.addresses.clone(),
                ready: e.conditions.as_ref().and_then(|c| c.ready),
                pod: e
                    .target_ref
                    .as_ref()
                    .filter(|r| r.kind.as_deref() == Some("Pod"))
                    .and_then(|r| r.name.clone()),
            })
            .collect(),
        ports: s
            .ports
            .iter()
            .flatten()
            .map(|p| SlicePort {
                name: p.name.clone(),
                port: p.port,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(json: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json).unwrap()
    }

    fn web(name: &str, pods: &[(&str, &str, Option<bool>)]) -> EndpointSlice {
        let endpoints: Vec<serde_json::Value> = pods
            .iter()
            .map(|(ip, pod, ready)| {
                let mut e = serde_json::json!({
                    "addresses": [ip],
                    "targetRef": { "kind": "Pod", "name": pod, "namespace": "shop" },
                });
                if let Some(r) = ready {
                    e["conditions"] = serde_json::json!({ "ready": r });
                }
                e
            })
            .collect();
        slice(serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": "shop",
                "labels": { "kubernetes.io/service-name": "web" }
            },
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [
                { "name": "metrics", "port": 9102, "protocol": "TCP" },
                { "name": "http", "port": 8080, "protocol": "TCP" }
            ]
        }))
    }

    fn shown(s: &ServiceSlices) -> Vec<String> {
        s.ready()
            .iter()
            .map(|e| format!("{} {}", e.address, e.pod.as_deref().unwrap_or("-")))
            .collect()
    }

    /// Real EndpointSlice and Service objects through the watch events: the Service port
    /// names the slice port, not-ready pods are left out, a relist replaces the set.
    #[test]
    fn watch_events_of_real_slices_make_the_ready_set() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": { "name": "web", "namespace": "shop" },
            "spec": { "ports": [
                { "name": "http", "port": 80, "targetPort": "http-port" },
                { "name": "metrics", "port": 9102, "targetPort": 9102 }
            ] }
        }))
        .unwrap();
        let port = slice_port_name("web", &service_ports(&svc), 80).unwrap();
        assert_eq!(port, "http");
        let mut slices = ServiceSlices::new(port);
        let mut listing = ServiceSlices::default();
        assert!(!apply(&mut slices, &mut listing, watcher::Event::Init));
        let a = web(
            "web-a",
            &[
                ("10.1.0.7", "web-7", Some(true)),
                ("10.1.0.8", "web-8", Some(false)),
            ],
        );
        assert!(!apply(
            &mut slices,
            &mut listing,
            watcher::Event::InitApply(a.clone())
        ));
        assert!(
            shown(&slices).is_empty(),
            "nothing before the list is whole"
        );
        assert!(apply(&mut slices, &mut listing, watcher::Event::InitDone));
        assert_eq!(shown(&slices), ["10.1.0.7:8080 web-7"]);
        let b = web("web-b", &[("10.1.0.9", "web-9", None)]);
        assert!(apply(
            &mut slices,
            &mut listing,
            watcher::Event::Apply(b.clone())
        ));
        assert_eq!(
            shown(&slices),
            ["10.1.0.7:8080 web-7", "10.1.0.9:8080 web-9"]
        );
        assert!(apply(&mut slices, &mut listing, watcher::Event::Delete(a)));
        assert_eq!(shown(&slices), ["10.1.0.9:8080 web-9"]);
        // A relist that finds only a new slice forgets the old ones.
        apply(&mut slices, &mut listing, watcher::Event::Init);
        let c = web("web-c", &[("10.1.0.10", "web-10", Some(true))]);
        apply(&mut slices, &mut listing, watcher::Event::InitApply(c));
        apply(&mut slices, &mut listing, watcher::Event::InitDone);
        assert_eq!(shown(&slices), ["10.1.0.10:8080 web-10"]);
        // A URL port the Service does not have is refused by name.
        let e = slice_port_name("web", &service_ports(&svc), 8080).unwrap_err();
        assert!(e.to_string().contains("80 (http), 9102 (metrics)"), "{e}");
    }
}
