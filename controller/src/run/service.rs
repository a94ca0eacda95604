//! `endpoints: service` in a run: the Service followed from before the assignment to the
//! report, each new ready set passed on to the agents, each pod remembered for the report; and
//! the pods of the target's Service (followed or not) sampled for their resources.

use stampede_core::service::{ServiceEndpoint, ServiceRef};
use stampede_proto::v1::{self, controller_message::Msg as Out};

use super::member::Member;
use super::Driver;
use crate::k8s::endpoints::ServiceWatchError;

impl Driver {
    /// Starts following the target's Service; the error is the run's failure message.
    pub(super) async fn follow_service(&mut self) -> Result<(), ServiceWatchError> {
        let target = self
            .scenario
            .target
            .as_ref()
            .ok_or(ServiceWatchError::NoTarget)?;
        let service = ServiceRef::from_target(target).map_err(ServiceWatchError::Target)?;
        let kube = self.inner.kube.get().cloned();
        let (client, namespace) = crate::k8s::endpoints::client_for(kube.as_deref()).await?;
        let watch = crate::k8s::endpoints::follow(client, &namespace, &service).await?;
        let set = watch.current();
        tracing::info!(run = %self.h.run_id, service = %service.name, endpoints = ?set, "following the target Service's endpoints");
        self.remember(&set);
        self.service = Some(watch);
        Ok(())
    }

    /// Starts sampling the pods of the target's Service (CPU, throttling, memory, restarts)
    /// from `t0`: the followed one of `endpoints: service`, or, for a controller running in
    /// its cluster, the Service the target's host names when there is one (loaded through
    /// its cluster address, its pods are still what answers). `None` otherwise.
    pub(super) async fn observe_pods(
        &self,
        t0: (tokio::time::Instant, u64),
        before: Vec<stampede_core::pods::PodEvent>,
    ) -> Option<crate::k8s::target_pods::PodObserver> {
        let service = ServiceRef::from_target(self.scenario.target.as_ref()?).ok()?;
        let kube = self.inner.kube.get().cloned();
        // A re-adopted run goes on sampling what the previous controller sampled, also when
        // it is re-adopted before this controller's Kubernetes side is up.
        if self.service.is_none() && kube.is_none() && before.is_empty() {
            return None;
        }
        let (client, namespace) = crate::k8s::endpoints::client_for(kube.as_deref())
            .await
            .ok()?;
        let namespace = service.namespace_or(&namespace).to_string();
        if self.service.is_none() {
            // A host name that names no Service here is no Service target: nothing to say.
            // One that cannot be read (RBAC) is sampled, and the sampler says why it cannot.
            let api = kube::Api::<k8s_openapi::api::core::v1::Service>::namespaced(
                client.clone(),
                &namespace,
            );
            if let Ok(None) = api.get_opt(&service.name).await {
                return None;
            }
        }
        Some(crate::k8s::target_pods::PodObserver::start(
            client,
            namespace,
            service,
            t0,
            self.inner.cfg.interval,
            before,
        ))
    }

    /// The Service's next ready set (never without a Service).
    pub(super) async fn next_service_set(
        service: &mut Option<crate::k8s::endpoints::ServiceWatch>,
    ) -> Vec<ServiceEndpoint> {
        match service {
            Some(w) => w.changed().await,
            None => std::future::pending().await,
        }
    }

    /// Sends a new ready set to every agent still running the run.
    pub(super) fn forward_service_set(&mut self, members: &[Member], set: Vec<ServiceEndpoint>) {
        self.remember(&set);
        let msg = v1::ServiceEndpoints {
            run_id: self.h.run_id.clone(),
            endpoints: stampede_proto::service::to_wire(&set),
        };
        for m in members.iter().filter(|m| m.pending()) {
            let out = v1::ControllerMessage {
                msg: Some(Out::ServiceEndpoints(msg.clone())),
            };
            if m.tx.try_send(Ok(out)).is_err() {
                tracing::warn!(run = %self.h.run_id, agent = %m.agent_id, "could not pass on the Service's new endpoints");
            }
        }
    }

    fn remember(&mut self, set: &[ServiceEndpoint]) {
        for e in set {
            if let Some(pod) = &e.pod {
                self.pods.insert(e.address, pod.clone());
            }
        }
    }

    /// Names the pod of each endpoint row the run was given.
    pub(super) fn name_pods(&self, report: &mut stampede_core::report::Report) {
        if self.pods.is_empty() {
            return;
        }
        let rows = report.endpoints.iter_mut().chain(
            report
                .timeline
                .iter_mut()
                .flat_map(|t| t.endpoints.iter_mut()),
        );
        for row in rows {
            if let Ok(a) = row.address.parse::<std::net::SocketAddr>() {
                row.pod = self.pods.get(&a).cloned();
            }
        }
    }
}
