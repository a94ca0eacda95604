//! Scales the agent Deployment through its scale subresource (RBAC: `deployments/scale` get and
//! patch on that one Deployment): up to a run's `agents` when fewer are attached, and back to the
//! size it had before once no run needs more, if `scale_down_after` is set.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use kube::Api;
use tokio::sync::Mutex;

use crate::run::RunHandle;

#[derive(Default)]
struct State {
    /// Replicas before the first scale-up of the current busy period.
    baseline: Option<i32>,
    /// Runs that asked for a scale-up and have not finished.
    active: usize,
}

/// Scales the agents' Deployment up for runs that want more agents than are connected, and
/// (with `scale_down_after`) back once the last such run ends.
pub struct Scaler {
    api: Api<Deployment>,
    name: String,
    scale_down_after: bool,
    state: Arc<Mutex<State>>,
}

impl Scaler {
    /// Scales the Deployment `name` in `namespace`; nothing is changed until a run holds it.
    pub fn new(client: kube::Client, namespace: &str, name: &str, scale_down_after: bool) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            scale_down_after,
            state: Arc::default(),
        }
    }

    async fn replicas(&self) -> Result<i32, kube::Error> {
        let s = self.api.get_scale(&self.name).await?;
        Ok(s.spec.and_then(|s| s.replicas).unwrap_or(0))
    }

    async fn set_replicas(&self, n: i32) -> Result<(), kube::Error> {
        let patch = serde_json::json!({ "spec": { "replicas": n } });
        self.api
            .patch_scale(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Makes sure the Deployment asks for at least `n` agents while `run` lasts. Errors are
    /// logged: the run then waits for agents as usual and fails with its own message.
    pub async fn hold(self: Arc<Self>, n: u32, run: Arc<RunHandle>) {
        let want = i32::try_from(n).unwrap_or(i32::MAX);
        {
            let mut st = self.state.lock().await;
            match self.replicas().await {
                Ok(current) if current < want => {
                    if let Err(e) = self.set_replicas(want).await {
                        tracing::warn!(deployment = %self.name, error = %e, "scaling agents up");
                        return;
                    }
                    tracing::info!(deployment = %self.name, from = current, to = want, run = %run.run_id, "scaled agents up");
                    st.baseline.get_or_insert(current);
                    st.active += 1;
                }
                Ok(_) => {
                    if st.baseline.is_none() {
                        return;
                    }
                    st.active += 1;
                }
                Err(e) => {
                    tracing::warn!(deployment = %self.name, error = %e, "reading the agent deployment's scale");
                    return;
                }
            }
        }
        run.finished().await;
        let mut st = self.state.lock().await;
        st.active = st.active.saturating_sub(1);
        if st.active == 0 {
            if let Some(baseline) = st.baseline.take() {
                if self.scale_down_after {
                    match self.set_replicas(baseline).await {
                        Ok(()) => {
                            tracing::info!(deployment = %self.name, to = baseline, "scaled agents back down")
                        }
                        Err(e) => {
                            tracing::warn!(deployment = %self.name, error = %e, "scaling agents down")
                        }
                    }
                }
            }
        }
    }
}
