//! Embedded mode: a controller and agents in this process, talking real gRPC over loopback.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use stampede_agent::AgentConfig;
use stampede_controller::{Controller, ControllerConfig};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A controller plus agents running in this process.
pub struct LocalCluster {
    /// Where the controller serves gRPC, on loopback.
    pub addr: SocketAddr,
    /// The user token (CLI calls).
    pub token: String,
    /// The agent token (what embedded agents present).
    pub agent_token: String,
    /// The embedded controller, for tests that look inside it.
    pub controller: Controller,
    controller_stop: CancellationToken,
    /// Resolves when the controller's thread has stopped serving.
    controller_done: Option<tokio::sync::oneshot::Receiver<()>>,
    agents: Vec<LocalAgent>,
    _data_dir: Option<tempfile::TempDir>,
}

/// One embedded agent.
pub struct LocalAgent {
    /// The agent's id, as the controller lists it.
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

impl Drop for LocalCluster {
    /// The controller's thread outlives a dropped handle otherwise.
    fn drop(&mut self) {
        for a in &self.agents {
            a.stop.cancel();
        }
        self.controller_stop.cancel();
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
        let agent_token = crate::random_token();
        let mut cfg = ControllerConfig::new(dir);
        cfg.token = Some(token.clone());
        cfg.agent_token = Some(agent_token.clone());
        let controller = Controller::new(cfg).context("starting the controller")?;
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").context("binding the controller")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let controller_stop = CancellationToken::new();
        // The controller gets a runtime and threads of its own, as it would in its own
        // process: lease renewals and merging never queue behind the embedded agents' load.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("stampede-local-controller")
            .enable_all()
            .build()
            .context("starting the controller's runtime")?;
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        {
            let c = controller.clone();
            let stop = controller_stop.clone();
            std::thread::Builder::new()
                .name("stampede-local-controller".into())
                .spawn(move || {
                    runtime.block_on(async move {
                        match tokio::net::TcpListener::from_std(listener) {
                            Ok(l) => {
                                if let Err(e) =
                                    c.serve(l, async move { stop.cancelled().await }).await
                                {
                                    tracing::error!(error = %e, "embedded controller failed");
                                }
                            }
                            Err(e) => tracing::error!(error = %e, "embedded controller failed"),
                        }
                    });
                    runtime.shutdown_background();
                    let _ = done_tx.send(());
                })
                .context("starting the controller's thread")?;
        }
        let mut cluster = Self {
            addr,
            token,
            agent_token,
            controller,
            controller_stop,
            controller_done: Some(done_rx),
            agents: Vec::new(),
            _data_dir: tmp,
        };
        for i in 0..agents {
            cluster.add_agent(&format!("local-{}", i + 1));
        }
        cluster.controller.wait_for_agents(agents as usize).await;
        Ok(cluster)
    }

    /// The controller's URL, for a client in this process.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts one more agent with this id.
    pub fn add_agent(&mut self, id: &str) {
        let mut cfg = AgentConfig::new(self.url(), id);
        cfg.token = Some(self.agent_token.clone());
        // Embedded agents run on the CLI's machine: its unix sockets are theirs.
        cfg.target_policy.allow_unix = true;
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

    /// The agents started so far, in the order they were started.
    pub fn agents(&self) -> &[LocalAgent] {
        &self.agents
    }

    /// Stops the controller only (agents keep running and must stop on their own lease).
    pub async fn stop_controller(&mut self) {
        self.controller_stop.cancel();
        if let Some(done) = self.controller_done.take() {
            let _ = done.await;
        }
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
        if let Some(done) = self.controller_done.take() {
            let _ = done.await;
        }
    }
}
