//! Finding the controller in a Kubernetes cluster: the controller pod of the current (or given)
//! context and namespace, reached through a kube-rs port-forward bridged to a local listener, so
//! no Service has to be exposed. The token comes from the Secret the controller pod reads it from.

use anyhow::{anyhow, bail, Context, Result};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Label selector of the controller pod (the chart's standard labels).
pub const CONTROLLER_SELECTOR: &str =
    "app.kubernetes.io/name=stampede,app.kubernetes.io/component=controller";

/// A live port-forward to the controller; dropping it stops forwarding.
pub struct Forward {
    /// `http://127.0.0.1:PORT`, the forward's local end.
    pub url: String,
    /// The user token read from the controller's Secret, if the CLI may read it.
    pub token: Option<String>,
    /// The controller pod the forward goes to.
    pub pod: String,
    /// The pod's namespace.
    pub namespace: String,
    task: JoinHandle<()>,
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether a kube client configuration exists at all (kubeconfig or in-cluster).
pub fn configured() -> bool {
    std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty())
        || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        || Kubeconfig::read().is_ok()
}

async fn client(context: Option<&str>) -> Result<Client> {
    let cfg = match context {
        Some(ctx) => Config::from_kubeconfig(&KubeConfigOptions {
            context: Some(ctx.to_string()),
            ..Default::default()
        })
        .await
        .with_context(|| format!("kube context `{ctx}`"))?,
        None => Config::infer().await.context("kube configuration")?,
    };
    Client::try_from(cfg).context("kube client")
}

fn is_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Finds the ready controller pod and forwards a local port to its gRPC port.
pub async fn forward(
    namespace: Option<&str>,
    context: Option<&str>,
    token: Option<String>,
) -> Result<Forward> {
    let client = client(context).await?;
    let ns = namespace
        .map(str::to_string)
        .unwrap_or_else(|| client.default_namespace().to_string());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let list = pods
        .list(&ListParams::default().labels(CONTROLLER_SELECTOR))
        .await
        .with_context(|| format!("listing stampede controller pods in namespace {ns}"))?;
    let pod = list
        .items
        .into_iter()
        .find(is_ready)
        .ok_or_else(|| anyhow!(
            "no ready stampede controller pod (labels {CONTROLLER_SELECTOR}) in namespace {ns}: \
             install the chart (helm install stampede helm/stampede), pick the namespace with --namespace, \
             or give --controller URL"
        ))?;
    let name = pod.name_any();
    let container = pod
        .spec
        .as_ref()
        .and_then(|s| {
            s.containers
                .iter()
                .find(|c| c.name == "controller")
                .or(s.containers.first())
        })
        .ok_or_else(|| anyhow!("controller pod {name} has no containers"))?;
    let port = container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("grpc"))
        .map(|p| p.container_port)
        .unwrap_or(7070);
    let port = u16::try_from(port).context("controller gRPC port")?;
    let token = match token {
        Some(t) => Some(t),
        None => secret_token(&client, &ns, container).await?,
    };
    let scheme = match controller_tls(&client, &ns, &pod).await? {
        Some((ca, server_name)) => {
            crate::client::trust_cluster_controller(ca, server_name);
            "https"
        }
        None => "http",
    };
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding a local port")?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(bridge(listener, pods, name.clone(), port));
    Ok(Forward {
        url: format!("{scheme}://{local}"),
        token,
        pod: name,
        namespace: ns,
        task,
    })
}

/// Pod annotations the chart sets when the controller serves TLS: the Secret holding its CA
/// (`ca.crt`), and the name its certificate carries.
const TLS_SECRET_ANNOTATION: &str = "stampede.dev/tls-secret";
const TLS_SERVER_NAME_ANNOTATION: &str = "stampede.dev/tls-server-name";

/// The CA and server name of a controller pod that serves TLS (per its annotations), read from
/// its Secret; `None` for a plaintext controller.
async fn controller_tls(client: &Client, ns: &str, pod: &Pod) -> Result<Option<(Vec<u8>, String)>> {
    let annotations = pod.annotations();
    let Some(secret) = annotations.get(TLS_SECRET_ANNOTATION) else {
        return Ok(None);
    };
    let server_name = annotations
        .get(TLS_SERVER_NAME_ANNOTATION)
        .cloned()
        .ok_or_else(|| {
            anyhow!(
                "controller pod has {TLS_SECRET_ANNOTATION} but no {TLS_SERVER_NAME_ANNOTATION}"
            )
        })?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let s = secrets.get(secret).await.with_context(|| {
        format!("reading the controller's CA from Secret {ns}/{secret} (or pass --controller and --ca-cert)")
    })?;
    let ca = s
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .ok_or_else(|| anyhow!("Secret {ns}/{secret} has no ca.crt"))?;
    Ok(Some((ca.0.clone(), server_name)))
}

/// The token the controller container reads from a Secret (`STAMPEDE_TOKEN` via `secretKeyRef`).
async fn secret_token(
    client: &Client,
    ns: &str,
    c: &k8s_openapi::api::core::v1::Container,
) -> Result<Option<String>> {
    let Some(env) = c.env.as_ref() else {
        return Ok(None);
    };
    let Some(var) = env.iter().find(|e| e.name == "STAMPEDE_TOKEN") else {
        return Ok(None);
    };
    if let Some(v) = &var.value {
        return Ok(Some(v.clone()));
    }
    let Some(sel) = var
        .value_from
        .as_ref()
        .and_then(|v| v.secret_key_ref.as_ref())
    else {
        return Ok(None);
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = secrets.get(&sel.name).await.with_context(|| {
        format!(
            "reading the controller's token from Secret {ns}/{} (or pass --token / STAMPEDE_TOKEN)",
            sel.name
        )
    })?;
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&sel.key))
        .ok_or_else(|| anyhow!("Secret {ns}/{} has no key {}", sel.name, sel.key))?;
    let token = String::from_utf8(bytes.0.clone()).context("the token is not UTF-8")?;
    Ok(Some(token.trim().to_string()))
}

/// Accepts local connections and pipes each through its own port-forward stream.
async fn bridge(listener: TcpListener, pods: Api<Pod>, pod: String, port: u16) {
    loop {
        let Ok((mut local, _)) = listener.accept().await else {
            return;
        };
        let _ = local.set_nodelay(true);
        let pods = pods.clone();
        let pod = pod.clone();
        tokio::spawn(async move {
            let mut pf = match pods.portforward(&pod, &[port]).await {
                Ok(pf) => pf,
                Err(e) => {
                    eprintln!("port-forward to {pod}:{port}: {e}");
                    return;
                }
            };
            let Some(mut remote) = pf.take_stream(port) else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut local, &mut remote).await;
            drop(remote);
            let _ = pf.join().await;
        });
    }
}

/// Fails early with a clear message when a namespace/context was given without a cluster.
pub fn check_flags(namespace: Option<&str>, context: Option<&str>) -> Result<()> {
    if (namespace.is_some() || context.is_some()) && !configured() {
        bail!("--namespace/--context need a kube configuration (KUBECONFIG or ~/.kube/config)");
    }
    Ok(())
}
