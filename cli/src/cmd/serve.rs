//! The server modes: `stampede controller` and `stampede agent`.

use anyhow::{Context, Result};

use crate::config::{AgentArgs, ControllerArgs, KubeMode};
use crate::exit;
use crate::security::ClientTls;

/// `stampede controller`: serves gRPC (and metrics, and the Kubernetes side) until a signal.
pub async fn controller(a: ControllerArgs) -> Result<i32> {
    crate::security::warn_if_in_argv(&["--token", "--agent-token"]);
    let creds = a.security.resolve(a.listen)?;
    let mut cfg = stampede_controller::ControllerConfig::new(&a.data_dir);
    cfg.token = creds.token;
    cfg.agent_token = creds.agent_token;
    cfg.tls = creds.tls;
    if a.agent_wait > a.max_agent_wait {
        anyhow::bail!(
            "--agent-wait {} is longer than --max-agent-wait {}",
            stampede_core::duration::HumanDuration(a.agent_wait),
            stampede_core::duration::HumanDuration(a.max_agent_wait)
        );
    }
    cfg.agent_wait = a.agent_wait;
    cfg.max_agent_wait = a.max_agent_wait;
    cfg.max_pending_runs = a.max_pending_runs as usize;
    cfg.lease = a.lease;
    cfg.restart_grace = a.restart_grace;
    cfg.lost_agent_wait = a.lost_agent_wait;
    cfg.max_agents = a.max_agents.max(1);
    cfg.reports_keep = a.reports_keep.max(1);
    cfg.reports_max_age = Some(a.reports_max_age);
    let controller = stampede_controller::Controller::new(cfg)?;
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .with_context(|| format!("binding {}", a.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, data_dir = %a.data_dir.display(), "controller listening");
    // Scripts and tests read the bound address (useful with --listen 127.0.0.1:0).
    println!("stampede controller listening on {addr}");
    let metrics_stop = tokio_util::sync::CancellationToken::new();
    let metrics_task = match a.metrics_listen {
        Some(m) => {
            let l = bind_announced(m, "metrics").await?;
            let (c, stop) = (controller.clone(), metrics_stop.clone());
            Some(tokio::spawn(async move {
                c.serve_metrics(l, async move { stop.cancelled().await })
                    .await;
            }))
        }
        None => None,
    };
    let health_task = match a.health_listen {
        Some(h) => {
            let l = bind_announced(h, "health").await?;
            let (c, stop) = (controller.clone(), metrics_stop.clone());
            Some(tokio::spawn(async move {
                if let Err(e) = c
                    .serve_health(l, async move { stop.cancelled().await })
                    .await
                {
                    tracing::error!(error = %e, "health listener");
                }
            }))
        }
        None => None,
    };
    let kube_on = match a.kube {
        KubeMode::On => true,
        KubeMode::Off => false,
        KubeMode::Auto => std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
    };
    let kube_task = if kube_on {
        let client = kube::Client::try_default()
            .await
            .context("kubernetes client (--kube)")?;
        let settings = stampede_controller::k8s::KubeSettings {
            namespace: a
                .namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_string()),
            agent_selector: a.agent_selector.clone(),
            agent_deployment: a.agent_deployment.clone(),
            scale_down_after: a.scale_down_after,
            pod_name: std::env::var("POD_NAME").ok(),
            loadtests: !a.no_loadtests,
        };
        let (c, stop) = (controller.clone(), metrics_stop.clone());
        Some(tokio::spawn(async move {
            if let Err(e) = c.run_kube_with(client, settings, stop).await {
                tracing::error!(error = %e, "kubernetes side");
            }
        }))
    } else {
        None
    };
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let served = controller
        .serve(listener, crate::cmd::shutdown_signal())
        .await;
    metrics_stop.cancel();
    if let Some(t) = kube_task {
        let _ = t.await;
    }
    for t in [metrics_task, health_task].into_iter().flatten() {
        let _ = t.await;
    }
    served?;
    Ok(exit::OK)
}

/// Binds one of the controller's extra listeners and prints `stampede controller WHAT on ADDR`
/// (scripts and tests read the bound address, useful with port 0).
async fn bind_announced(addr: std::net::SocketAddr, what: &str) -> Result<tokio::net::TcpListener> {
    let l = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let bound = l.local_addr()?;
    tracing::info!(addr = %bound, "{what} listening");
    println!("stampede controller {what} on {bound}");
    Ok(l)
}

/// `stampede agent`: dials the controller and runs what it is assigned until a signal.
pub async fn agent(a: AgentArgs, cli_tls: ClientTls) -> Result<i32> {
    let id =
        a.id.or_else(|| std::env::var("POD_NAME").ok())
            .unwrap_or_else(default_agent_id);
    crate::security::warn_if_in_argv(&["--token", "--agent-token"]);
    let mut cfg = stampede_agent::AgentConfig::new(a.controller, id);
    // The agent token; the shared user token only where the controller has no other.
    cfg.token = crate::security::token_from(
        a.agent_token.as_deref(),
        a.agent_token_file.as_deref(),
        "--agent-token",
    )?
    .or(a.token);
    cfg.target_policy = a.targets.policy();
    let material = cli_tls.load()?;
    cfg.ca_pem = material.ca_pem;
    cfg.identity = material.identity;
    cfg.server_name = material.server_name;
    cfg.capacity = a.capacity;
    cfg.source_ips = a.source_ips;
    cfg.restart_grace = a.restart_grace;
    cfg.cpu_limit = a.cpu_limit;
    cfg.pod_name = std::env::var("POD_NAME").unwrap_or_default();
    cfg.node_name = std::env::var("NODE_NAME").unwrap_or_default();
    cfg.pod_ip = std::env::var("POD_IP").unwrap_or_default();
    stampede_agent::run(cfg, crate::cmd::shutdown_signal()).await?;
    Ok(exit::OK)
}

fn default_agent_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "agent".to_string()
    } else {
        host
    };
    format!("{host}-{}", std::process::id())
}
