//! `stampede`: the CLI, and the controller, agent and target servers, in one binary.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use stampede_cli::client::{self, Live};
use stampede_cli::local::LocalCluster;
use stampede_cli::{exit, render};
use stampede_core::report::{Report, RunOutcome};
use stampede_core::Scenario;
use stampede_proto::v1;

/// Stampede: a distributed load tester with exact merged percentiles.
#[derive(Parser, Debug)]
#[command(name = "stampede", version, about, long_about = None)]
struct Cli {
    /// Log format: text, or json (the default in a cluster).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "STAMPEDE_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(flatten)]
    tls: stampede_cli::security::ClientTls,
    #[command(subcommand)]
    command: Command,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
}

/// Where the controller is.
#[derive(clap::Args, Debug, Clone)]
struct Conn {
    /// Controller URL. Without it, the controller pod is found in the current kube context and
    /// namespace and reached through a port-forward; with no kube configuration at all,
    /// http://127.0.0.1:7070.
    #[arg(long, env = "STAMPEDE_CONTROLLER")]
    controller: Option<String>,
    /// Shared token of the controller (in a cluster, read from the controller's Secret by default).
    #[arg(long, env = "STAMPEDE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Kubernetes namespace of the controller (default: the kube context's namespace).
    #[arg(long, env = "STAMPEDE_NAMESPACE")]
    namespace: Option<String>,
    /// Kubernetes context to use (default: the current context).
    #[arg(long, env = "STAMPEDE_KUBE_CONTEXT")]
    context: Option<String>,
}

/// A resolved controller address (and the port-forward that keeps it reachable).
struct Endpoint {
    url: String,
    token: Option<String>,
    _forward: Option<stampede_cli::kube::Forward>,
}

impl Conn {
    async fn endpoint(&self) -> Result<Endpoint> {
        if let Some(url) = &self.controller {
            return Ok(Endpoint {
                url: url.clone(),
                token: self.token.clone(),
                _forward: None,
            });
        }
        stampede_cli::kube::check_flags(self.namespace.as_deref(), self.context.as_deref())?;
        if !stampede_cli::kube::configured() {
            return Ok(Endpoint {
                url: "http://127.0.0.1:7070".into(),
                token: self.token.clone(),
                _forward: None,
            });
        }
        let f = stampede_cli::kube::forward(
            self.namespace.as_deref(),
            self.context.as_deref(),
            self.token.clone(),
        )
        .await?;
        tracing::debug!(pod = %f.pod, namespace = %f.namespace, url = %f.url, "port-forward to the controller");
        Ok(Endpoint {
            url: f.url.clone(),
            token: f.token.clone(),
            _forward: Some(f),
        })
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a scenario against a controller, or embedded with --local, and print the report.
    Run(RunArgs),
    /// Start a local HTTP target, a controller and agents in this process, and run the demo scenario.
    Demo(DemoArgs),
    /// Find the highest arrival rate at which the SLOs hold: a stair-step test, then a bisection.
    Capacity(stampede_cli::capacity::CapacityArgs),
    /// List runs known to the controller.
    Status {
        #[command(flatten)]
        conn: Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Fetch the report of a finished run.
    Report {
        run_id: String,
        #[command(flatten)]
        conn: Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// List the agents attached to the controller.
    Agents {
        #[command(flatten)]
        conn: Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Abort a running run.
    Abort {
        run_id: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Dry run: each agent's share per phase, peak connections and the port budget per source
    /// address, and whether the controller would refuse the run (exit 1), without any load.
    Plan(stampede_cli::plan::PlanArgs),
    /// Check a scenario file and print what it plans.
    Validate { scenario: PathBuf },
    /// Print the JSON Schema of the scenario file.
    Schema,
    /// Print the LoadTest CustomResourceDefinition (the chart's crds/ file is generated from it).
    Crd,
    /// Print a shell completion script, e.g. `stampede completions bash > /etc/bash_completion.d/stampede`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Serve the controller.
    Controller(ControllerArgs),
    /// Serve an agent that dials the controller.
    Agent(AgentArgs),
    /// Serve a target server for tests.
    #[command(subcommand)]
    Target(stampede_target_servers::TargetCommand),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The scenario file (YAML or JSON).
    scenario: PathBuf,
    #[command(flatten)]
    conn: Conn,
    /// Run embedded: start a controller and agents in this process.
    #[arg(long)]
    local: bool,
    /// Number of agents (overrides the scenario's `agents`).
    #[arg(long)]
    agents: Option<u32>,
    /// How long to wait for enough agents, e.g. 30s.
    #[arg(long, value_parser = parse_duration)]
    agent_wait: Option<Duration>,
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
    /// Also write the JSON report to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Write the HdrHistogram interval log (.hlog) to this file.
    #[arg(long)]
    hdr_log: Option<PathBuf>,
    /// Write the per-interval timeline as CSV to this file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write a self-contained HTML report (SVG charts, tables, threshold verdicts) to this file.
    #[arg(long)]
    html: Option<PathBuf>,
    /// No live progress line.
    #[arg(long)]
    quiet: bool,
}

#[derive(clap::Args, Debug)]
struct DemoArgs {
    /// Total length of the demo (its phases are scaled to it), e.g. 12s.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Number of embedded agents.
    #[arg(long, default_value_t = 2)]
    agents: u32,
    /// Where to write the JSON report; the HTML report goes next to it (same name, `.html`).
    #[arg(long, default_value = "stampede-report.json")]
    report: PathBuf,
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(clap::Args, Debug)]
struct ControllerArgs {
    /// Address to serve gRPC on.
    #[arg(long, default_value = "0.0.0.0:7070")]
    listen: SocketAddr,
    /// Where reports are stored.
    #[arg(long, default_value = "stampede-data", env = "STAMPEDE_DATA_DIR")]
    data_dir: PathBuf,
    #[command(flatten)]
    security: stampede_cli::security::ServerSecurity,
    /// How long a run waits for enough agents, e.g. 30s.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    agent_wait: Duration,
    /// Lease granted to agents; load stops this long after the controller goes away
    /// (100ms to 60s).
    #[arg(long, default_value = "1s", value_parser = parse_lease)]
    lease: Duration,
    /// Most agents one run may ask for; the agent Deployment is never scaled above it.
    #[arg(long, env = "STAMPEDE_MAX_AGENTS", default_value_t = stampede_core::scenario::MAX_AGENTS)]
    max_agents: u32,
    /// Stored reports to keep (the newest); older ones are removed after each run.
    #[arg(long, env = "STAMPEDE_REPORTS_KEEP", default_value_t = 200)]
    reports_keep: usize,
    /// Stored reports older than this are removed after each run, e.g. 720h.
    #[arg(long, env = "STAMPEDE_REPORTS_MAX_AGE", default_value = "720h", value_parser = parse_duration)]
    reports_max_age: Duration,
    /// Also serve Prometheus `GET /metrics` on this address (e.g. 0.0.0.0:9090).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Kubernetes integration (agent pods, scaling, LoadTest resources): `auto` turns it on when
    /// running in a pod (KUBERNETES_SERVICE_HOST is set).
    #[arg(long, env = "STAMPEDE_KUBE", value_enum, default_value_t = KubeMode::Auto)]
    kube: KubeMode,
    /// Namespace of LoadTests, agent pods and the agent Deployment (default: the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: Option<String>,
    /// Label selector of the agent pods to watch.
    #[arg(long, env = "STAMPEDE_AGENT_SELECTOR")]
    agent_selector: Option<String>,
    /// Agent Deployment to scale up when a run needs more agents than are attached.
    #[arg(long, env = "STAMPEDE_AGENT_DEPLOYMENT")]
    agent_deployment: Option<String>,
    /// Scale the agent Deployment back to its previous size after a run that scaled it up.
    #[arg(long, env = "STAMPEDE_SCALE_DOWN_AFTER")]
    scale_down_after: bool,
    /// Do not reconcile LoadTest resources (the rest of the Kubernetes side still runs).
    #[arg(long, env = "STAMPEDE_NO_LOADTESTS")]
    no_loadtests: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum KubeMode {
    Auto,
    On,
    Off,
}

#[derive(clap::Args, Debug)]
struct AgentArgs {
    /// Controller URL.
    #[arg(long, env = "STAMPEDE_CONTROLLER")]
    controller: String,
    /// Agent id (default: the pod name, or host name and pid).
    #[arg(long, env = "STAMPEDE_AGENT_ID")]
    id: Option<String>,
    /// The user token, used only when no agent token is given (a controller with one shared
    /// token).
    #[arg(long, env = "STAMPEDE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The agent token the controller expects from agents (prefer the environment variable or
    /// --agent-token-file).
    #[arg(long, env = "STAMPEDE_AGENT_TOKEN", hide_env_values = true)]
    agent_token: Option<String>,
    /// File holding the agent token.
    #[arg(long, env = "STAMPEDE_AGENT_TOKEN_FILE")]
    agent_token_file: Option<PathBuf>,
    #[command(flatten)]
    targets: stampede_cli::security::TargetPolicyArgs,
    /// Sessions in flight at once before arrivals are dropped (and counted).
    #[arg(long, default_value_t = 10_000)]
    capacity: u32,
    /// Local addresses to open load connections from, round-robin (comma-separated, e.g.
    /// 10.0.0.2,10.0.0.3); each multiplies the port budget per target.
    #[arg(long, value_delimiter = ',', env = "STAMPEDE_SOURCE_IPS")]
    source_ips: Vec<std::net::IpAddr>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    stampede_core::duration::parse_duration(s)
}

/// A lease between the controller's bounds: 0 would panic the renewal timer, an hour would
/// turn "load stops within a second" into an hour.
fn parse_lease(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    let (min, max) = (
        stampede_controller::MIN_LEASE,
        stampede_controller::MAX_LEASE,
    );
    if d < min || d > max {
        return Err(format!(
            "`{s}` is outside {}ms to {}s",
            min.as_millis(),
            max.as_secs()
        ));
    }
    Ok(d)
}

fn init_logging(format: LogFormat, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Resolves on the first SIGINT/SIGTERM; a second one exits at once.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    tracing::info!("shutting down (signal again to force)");
    tokio::spawn(async move {
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        std::process::exit(130);
    });
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let server = matches!(
        cli.command,
        Command::Controller(_) | Command::Agent(_) | Command::Target(_)
    );
    init_logging(cli.log_format, if server { "info" } else { "warn" });
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(exit::RUN_FAILED as u8);
        }
    };
    match rt.block_on(dispatch(cli.command, cli.tls)) {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit::RUN_FAILED as u8)
        }
    }
}

async fn dispatch(cmd: Command, cli_tls: stampede_cli::security::ClientTls) -> Result<i32> {
    client::set_tls(cli_tls.load()?);
    match cmd {
        Command::Run(a) => run(a).await,
        Command::Demo(a) => demo(a).await,
        Command::Capacity(a) => stampede_cli::capacity::command(a).await,
        Command::Status { conn, output } => {
            let ep = conn.endpoint().await?;
            let mut c = client::connect(&ep.url, ep.token.as_deref()).await?;
            let runs = c
                .list_runs(v1::ListRunsRequest {})
                .await
                .map_err(client::status_error)?
                .into_inner()
                .runs;
            if output == Output::Json {
                let rows: Vec<_> = runs.iter().map(|r| serde_json::json!({"run_id": r.run_id, "scenario": r.scenario, "state": r.state, "submitted_at_unix_ms": r.submitted_at_unix_ms, "agents": r.agents, "message": r.message})).collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!(
                    "{:<18} {:<24} {:<10} {:>6}  message",
                    "run", "scenario", "state", "agents"
                );
                for r in runs {
                    println!(
                        "{:<18} {:<24} {:<10} {:>6}  {}",
                        r.run_id, r.scenario, r.state, r.agents, r.message
                    );
                }
            }
            Ok(exit::OK)
        }
        Command::Report {
            run_id,
            conn,
            output,
        } => {
            let ep = conn.endpoint().await?;
            let mut c = client::connect(&ep.url, ep.token.as_deref()).await?;
            let report = client::get_report(&mut c, &run_id).await?;
            print_report(&report, output)?;
            Ok(outcome_code(&report))
        }
        Command::Agents { conn, output } => {
            let ep = conn.endpoint().await?;
            let mut c = client::connect(&ep.url, ep.token.as_deref()).await?;
            let agents = c
                .list_agents(v1::ListAgentsRequest {})
                .await
                .map_err(client::status_error)?
                .into_inner()
                .agents;
            if output == Output::Json {
                let rows: Vec<_> = agents.iter().map(|a| serde_json::json!({"id": a.agent_id, "version": a.version, "peer": a.peer, "pod": a.pod_name, "node": a.node_name, "ip": a.pod_ip, "pod_status": a.pod_status, "state": a.state, "run_id": a.run_id, "clock_offset_us": a.clock_offset_us, "capacity": a.capacity})).collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!(
                    "{:<36} {:<12} {:<36} {:<16} {:<16} {:<9} {:>10}",
                    "id", "state", "pod", "node", "ip", "pod", "clock off"
                );
                let dash = |v: &str| {
                    if v.is_empty() {
                        "-".to_string()
                    } else {
                        v.to_string()
                    }
                };
                for a in agents {
                    println!(
                        "{:<36} {:<12} {:<36} {:<16} {:<16} {:<9} {:>8}µs",
                        a.agent_id,
                        a.state,
                        dash(&a.pod_name),
                        dash(&a.node_name),
                        dash(&a.pod_ip),
                        dash(&a.pod_status),
                        a.clock_offset_us
                    );
                }
            }
            Ok(exit::OK)
        }
        Command::Abort { run_id, conn } => {
            let ep = conn.endpoint().await?;
            let mut c = client::connect(&ep.url, ep.token.as_deref()).await?;
            c.abort_run(v1::AbortRunRequest {
                run_id: run_id.clone(),
                reason: "aborted from the CLI".into(),
            })
            .await
            .map_err(client::status_error)?;
            println!("abort requested for {run_id}");
            Ok(exit::OK)
        }
        Command::Plan(a) => {
            let (_, s) = client::read_scenario(&a.scenario)?;
            let r = stampede_cli::plan::plan(&s, &a)?;
            match a.output.as_str() {
                "json" => println!("{}", serde_json::to_string_pretty(&r)?),
                "text" => print!("{}", stampede_cli::plan::render(&r, s.is_closed())),
                other => anyhow::bail!("--output: `{other}` is not one of text, json"),
            }
            // Refused by the port budget: 1, like a breached threshold (a verdict, not an error).
            Ok(if r.refusals.is_empty() {
                exit::OK
            } else {
                exit::THRESHOLD
            })
        }
        Command::Validate { scenario } => {
            let (_, s) = client::read_scenario(&scenario)?;
            let plan = stampede_core::plan::Plan::new(
                &s,
                s.agents.unwrap_or(1),
                &[],
                s.seed.unwrap_or(0),
            )?;
            let shape = match &s.load {
                Some(l) => {
                    format!("{:?} load, {} connections", l.model, l.connections).to_lowercase()
                }
                None => format!("{} phases", s.phases.len()),
            };
            let planned = if s.is_closed() {
                "requests back to back (closed model: nothing planned ahead)".to_string()
            } else {
                format!(
                    "{} sessions and {} requests planned",
                    plan.total_sessions(),
                    plan.total_requests()
                )
            };
            println!(
                "{}: ok — {shape}, {:.1}s, {planned} over {} agent(s)",
                scenario.display(),
                s.duration().as_secs_f64(),
                plan.agents
            );
            Ok(exit::OK)
        }
        Command::Crd => {
            print!("{}", stampede_controller::k8s::crd::crd_yaml());
            Ok(exit::OK)
        }
        Command::Schema => {
            println!(
                "{}",
                serde_json::to_string_pretty(&stampede_core::scenario::json_schema())?
            );
            Ok(exit::OK)
        }
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            // Into a buffer first: clap_complete panics on a write error (e.g. `| head`).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "stampede", &mut script);
            use std::io::Write as _;
            match std::io::stdout().write_all(&script) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    Err(e).context("writing the completion script")
                }
                _ => Ok(exit::OK),
            }
        }
        Command::Controller(a) => {
            stampede_cli::security::warn_if_in_argv(&["--token", "--agent-token"]);
            let creds = a.security.resolve(a.listen)?;
            let mut cfg = stampede_controller::ControllerConfig::new(&a.data_dir);
            cfg.token = creds.token;
            cfg.agent_token = creds.agent_token;
            cfg.tls = creds.tls;
            cfg.agent_wait = a.agent_wait;
            cfg.lease = a.lease;
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
                    let l = tokio::net::TcpListener::bind(m)
                        .await
                        .with_context(|| format!("binding {m}"))?;
                    let maddr = l.local_addr()?;
                    tracing::info!(addr = %maddr, "metrics listening");
                    println!("stampede controller metrics on {maddr}");
                    let (c, stop) = (controller.clone(), metrics_stop.clone());
                    Some(tokio::spawn(async move {
                        c.serve_metrics(l, async move { stop.cancelled().await })
                            .await;
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
            let served = controller.serve(listener, shutdown_signal()).await;
            metrics_stop.cancel();
            if let Some(t) = kube_task {
                let _ = t.await;
            }
            if let Some(t) = metrics_task {
                let _ = t.await;
            }
            served?;
            Ok(exit::OK)
        }
        Command::Agent(a) => {
            let id =
                a.id.or_else(|| std::env::var("POD_NAME").ok())
                    .unwrap_or_else(default_agent_id);
            stampede_cli::security::warn_if_in_argv(&["--token", "--agent-token"]);
            let mut cfg = stampede_agent::AgentConfig::new(a.controller, id);
            // The agent token; the shared user token only where the controller has no other.
            cfg.token = stampede_cli::security::token_from(
                a.agent_token.as_deref(),
                a.agent_token_file.as_deref(),
                "--agent-token",
            )?
            .or(a.token);
            cfg.target_policy = a.targets.policy();
            let material = cli_tls.load()?;
            cfg.ca_pem = material.ca_pem;
            cfg.identity = material.identity;
            cfg.capacity = a.capacity;
            cfg.source_ips = a.source_ips;
            cfg.pod_name = std::env::var("POD_NAME").unwrap_or_default();
            cfg.node_name = std::env::var("NODE_NAME").unwrap_or_default();
            cfg.pod_ip = std::env::var("POD_IP").unwrap_or_default();
            stampede_agent::run(cfg, shutdown_signal()).await?;
            Ok(exit::OK)
        }
        Command::Target(t) => {
            t.run().await?;
            Ok(exit::OK)
        }
    }
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

fn outcome_code(r: &Report) -> i32 {
    match r.outcome {
        RunOutcome::Succeeded if r.thresholds_passed() => exit::OK,
        RunOutcome::Succeeded => exit::THRESHOLD,
        // abort_on_fail stopped the run on a threshold breach: a breach, not a broken run.
        RunOutcome::Aborted if r.threshold_abort.is_some() => exit::THRESHOLD,
        // Less than planned was delivered: never a pass, whatever the numbers say.
        RunOutcome::Failed | RunOutcome::Aborted | RunOutcome::Incomplete => exit::RUN_FAILED,
    }
}

fn print_report(r: &Report, output: Output) -> Result<()> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(r)?),
        Output::Text => print!("{}", render::report_text(r)),
    }
    Ok(())
}

fn write_html(r: &Report, path: &std::path::Path) -> Result<()> {
    let page = stampede_cli::html::html(r)
        .map_err(|e| anyhow::anyhow!("rendering the HTML report: {e}"))?;
    std::fs::write(path, page).with_context(|| format!("writing {}", path.display()))
}

fn write_report(r: &Report, path: &std::path::Path) -> Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(r)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

/// Prints live progress: a rewritten line on a terminal, a line every 5 s otherwise.
struct Progress {
    tty: bool,
    quiet: bool,
    last_printed: f64,
}

impl Progress {
    fn new(quiet: bool) -> Self {
        Self {
            tty: std::io::stderr().is_terminal(),
            quiet,
            last_printed: -10.0,
        }
    }
    fn on(&mut self, live: Live<'_>) {
        if self.quiet {
            return;
        }
        match live {
            Live::State(s) => {
                if self.tty {
                    eprint!("\r\x1b[2K");
                }
                if s.message.is_empty() {
                    eprintln!("run {}: {}", s.run_id, s.state);
                } else {
                    eprintln!("run {}: {} — {}", s.run_id, s.state, s.message);
                }
            }
            Live::Snapshot(s) => {
                if self.tty {
                    eprint!("\r\x1b[2K{}", render::progress_line(s));
                } else if s.elapsed_s - self.last_printed >= 5.0 {
                    self.last_printed = s.elapsed_s;
                    eprintln!("{}", render::progress_line(s));
                }
            }
        }
    }
    fn done(&self) {
        if self.tty && !self.quiet {
            eprint!("\r\x1b[2K");
        }
    }
}

/// Submits, follows, and on Ctrl-C aborts the run but still waits for its final report.
async fn submit_follow(
    url: &str,
    token: Option<&str>,
    text: &str,
    agents: Option<u32>,
    wait: Option<Duration>,
    quiet: bool,
) -> Result<Report> {
    let mut c = client::connect(url, token).await?;
    let run_id = client::submit(&mut c, text, agents, wait).await?;
    let mut progress = Progress::new(quiet);
    let mut watcher = c.clone();
    let mut on_live = |l: Live<'_>| progress.on(l);
    let watch = client::watch(&mut watcher, &run_id, &mut on_live);
    tokio::pin!(watch);
    let report = tokio::select! {
        r = &mut watch => r,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\ninterrupted: aborting {run_id} (Ctrl-C again to quit at once)");
            c.abort_run(v1::AbortRunRequest { run_id: run_id.clone(), reason: "interrupted from the CLI".into() }).await.map_err(client::status_error)?;
            tokio::select! {
                r = &mut watch => r,
                _ = tokio::signal::ctrl_c() => std::process::exit(130),
            }
        }
    };
    Progress::new(quiet).done();
    report
}

async fn run(a: RunArgs) -> Result<i32> {
    let (text, scenario) = match client::read_scenario(&a.scenario) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(exit::RUN_FAILED);
        }
    };
    let report = if a.local {
        let n = a.agents.or(scenario.agents).unwrap_or(1);
        let cluster = LocalCluster::start(n, None).await?;
        let r = submit_follow(
            &cluster.url(),
            Some(&cluster.token),
            &text,
            Some(n),
            a.agent_wait,
            a.quiet,
        )
        .await;
        cluster.stop().await;
        r?
    } else {
        let ep = a.conn.endpoint().await?;
        submit_follow(
            &ep.url,
            ep.token.as_deref(),
            &text,
            a.agents,
            a.agent_wait,
            a.quiet,
        )
        .await?
    };
    if let Some(path) = &a.report {
        write_report(&report, path)?;
    }
    if let Some(path) = &a.hdr_log {
        std::fs::write(path, stampede_cli::export::hdr_log(&report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &a.html {
        write_html(&report, path)?;
    }
    if let Some(path) = &a.csv {
        std::fs::write(path, stampede_cli::export::csv(&report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    print_report(&report, a.output)?;
    Ok(outcome_code(&report))
}

/// The demo scenario, with its phases scaled to `duration`.
fn demo_scenario(target: &str, duration: Option<Duration>) -> Result<Scenario> {
    let mut s = Scenario::from_yaml(include_str!("../../examples/demo.yaml"))?;
    s.target = Some(target.parse().map_err(|e| anyhow::anyhow!("target: {e}"))?);
    if let Some(d) = duration {
        let factor = d.as_secs_f64() / s.duration().as_secs_f64();
        for p in &mut s.phases {
            p.duration =
                stampede_core::HumanDuration::from_secs_f64(p.duration.as_secs_f64() * factor);
        }
    }
    s.validate()?;
    Ok(s)
}

async fn demo(a: DemoArgs) -> Result<i32> {
    use stampede_target_servers::http::{HttpConfig, HttpServer};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the demo target")?;
    let target_addr = listener.local_addr()?;
    let server = HttpServer::new(HttpConfig {
        delay_ms: 2,
        bytes: 512,
        ..HttpConfig::default()
    })?;
    let stop = tokio_util::sync::CancellationToken::new();
    let s = stop.clone();
    let target = tokio::spawn(
        server
            .clone()
            .serve(listener, async move { s.cancelled().await }),
    );
    let scenario = demo_scenario(&format!("http://{target_addr}"), a.duration)?;
    eprintln!(
        "demo: HTTP target on {target_addr} (GET /data answers after 2 ms), controller and {} agents in-process; {:.0}s of load",
        a.agents,
        scenario.duration().as_secs_f64()
    );
    let text = serde_json::to_string(&scenario)?;
    let cluster = LocalCluster::start(a.agents, None).await?;
    let report = submit_follow(
        &cluster.url(),
        Some(&cluster.token),
        &text,
        Some(a.agents),
        None,
        false,
    )
    .await;
    cluster.stop().await;
    stop.cancel();
    let _ = target.await;
    let report = report?;
    write_report(&report, &a.report)?;
    let html = a.report.with_extension("html");
    write_html(&report, &html)?;
    print_report(&report, a.output)?;
    eprintln!(
        "target saw {} requests; report written to {} and {}",
        server.stats().requests_total,
        a.report.display(),
        html.display()
    );
    Ok(outcome_code(&report))
}
