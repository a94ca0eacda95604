//! Embedded mode: a controller and agents in this process, talking real gRPC over loopback.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use stampede_agent::AgentConfig;
use stampede_controller::{Controller, ControllerConfig};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A controller plus agents running in this process.
pub struct LocalCluster {
    pub addr: SocketAddr,
    pub token: String,
    pub controller: Controller,
    controller_stop: CancellationToken,
    controller_task: JoinHandle<()>,
    agents: Vec<LocalAgent>,
    _data_dir: Option<tempfile::TempDir>,
}

/// One embedded agent.
pub struct LocalAgent {
    pub id: String,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl LocalAgent {
    /// Ends the agent as if its process was killed: the task is dropped mid-flight.
    pub fn kill(&self) {
        self.task.abort();
    }
}

impl LocalCluster {
    /// Starts a controller on 127.0.0.1:0 and `agents` agents. Reports go to `data_dir`, or to
    /// a temporary directory when `None`.
    pub async fn start(agents: u32, data_dir: Option<std::path::PathBuf>) -> Result<Self> {
        let (dir, tmp) = match data_dir {
            Some(d) => (d, None),
            None => {
                let t = tempfile::tempdir().context("creating a temporary data directory")?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let token = crate::random_token();
        let mut cfg = ControllerConfig::new(dir);
        cfg.token = Some(token.clone());
        let controller = Controller::new(cfg).context("starting the controller")?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the controller")?;
        let addr = listener.local_addr()?;
        let controller_stop = CancellationToken::new();
        let controller_task = {
            let c = controller.clone();
            let stop = controller_stop.clone();
            tokio::spawn(async move {
                if let Err(e) = c
                    .serve(listener, async move { stop.cancelled().await })
                    .await
                {
                    tracing::error!(error = %e, "embedded controller failed");
                }
            })
        };
        let mut cluster = Self {
            addr,
            token,
            controller,
            controller_stop,
            controller_task,
            agents: Vec::new(),
            _data_dir: tmp,
        };
        for i in 0..agents {
            cluster.add_agent(&format!("local-{}", i + 1));
        }
        cluster.controller.wait_for_agents(agents as usize).await;
        Ok(cluster)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts one more agent with this id.
    pub fn add_agent(&mut self, id: &str) {
        let mut cfg = AgentConfig::new(self.url(), id);
        cfg.token = Some(self.token.clone());
        cfg.max_backoff = std::time::Duration::from_millis(500);
        let stop = CancellationToken::new();
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let _ = stampede_agent::run(cfg, async move { s.cancelled().await }).await;
        });
        self.agents.push(LocalAgent {
            id: id.to_string(),
            stop,
            task,
        });
    }

    pub fn agents(&self) -> &[LocalAgent] {
        &self.agents
    }

    /// Stops the controller only (agents keep running and must stop on their own lease).
    pub async fn stop_controller(&mut self) {
        self.controller_stop.cancel();
        let _ = (&mut self.controller_task).await;
    }

    /// Stops everything.
    pub async fn stop(mut self) {
        for a in &self.agents {
            a.stop.cancel();
        }
        for a in self.agents.drain(..) {
            let _ = a.task.await;
        }
        self.controller_stop.cancel();
        let _ = self.controller_task.await;
    }
}
