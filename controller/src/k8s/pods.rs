//! The agent pods, watched with a reflector: their node, IP and readiness.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use stampede_proto::v1;

/// A reflector over the pods matching `selector` in `namespace`: the store, and the future that
/// keeps it current (it retries with backoff and never ends on its own).
pub fn reflect(
    client: kube::Client,
    namespace: &str,
    selector: &str,
) -> (
    Store<Pod>,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let api: Api<Pod> = Api::namespaced(client, namespace);
    let (store, writer) = reflector::store();
    let cfg = watcher::Config::default().labels(selector);
    let stream = reflector::reflector(writer, watcher(api, cfg))
        .default_backoff()
        .touched_objects();
    let fut = async move {
        stream
            .for_each(|r| async move {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "agent pod watch");
                }
            })
            .await;
    };
    (store, fut)
}

/// `Ready`, `NotReady`, `Terminating` or the pod's phase when it is not running.
pub fn pod_status(p: &Pod) -> String {
    if p.metadata.deletion_timestamp.is_some() {
        return "Terminating".into();
    }
    let status = p.status.as_ref();
    let phase = status.and_then(|s| s.phase.clone()).unwrap_or_default();
    if phase != "Running" {
        return if phase.is_empty() {
            "Pending".into()
        } else {
            phase
        };
    }
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if ready {
        "Ready".into()
    } else {
        "NotReady".into()
    }
}

/// Adds pod facts to the attached agents (`pod_status`, and node/IP when the agent did not
/// report them), and lists agent pods that have not attached yet with state `not-attached`.
pub fn annotate(agents: &mut Vec<v1::AgentInfo>, store: &Store<Pod>) {
    let pods = store.state();
    for a in agents.iter_mut() {
        let name = if a.pod_name.is_empty() {
            &a.agent_id
        } else {
            &a.pod_name
        };
        if let Some(p) = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
        {
            a.pod_status = pod_status(p);
            if a.node_name.is_empty() {
                a.node_name = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
            }
            if a.pod_ip.is_empty() {
                a.pod_ip = p
                    .status
                    .as_ref()
                    .and_then(|s| s.pod_ip.clone())
                    .unwrap_or_default();
            }
        } else {
            a.pod_status = "Gone".into();
        }
    }
    for p in pods.iter() {
        let Some(name) = p.metadata.name.as_deref() else {
            continue;
        };
        if agents
            .iter()
            .any(|a| a.pod_name == name || a.agent_id == name)
        {
            continue;
        }
        agents.push(v1::AgentInfo {
            agent_id: name.to_string(),
            pod_name: name.to_string(),
            node_name: p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default(),
            pod_ip: p
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .unwrap_or_default(),
            state: "not-attached".into(),
            pod_status: pod_status(p),
            ..Default::default()
        });
    }
}
