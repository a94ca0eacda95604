//! The one configuration surface: every command, flag and environment variable of the
//! `stampede` binary, with its default, in one place. A setting comes from, in order: the
//! flag, then its environment variable (named in `env = ...` below, and listed by
//! `stampede <command> --help`), then the scenario file where one applies (`agents`, `target`
//! and the load, which `run`'s flags override), then the default written here. The docs'
//! "Settings" table is generated from these definitions ([`settings_table`]) and a test keeps
//! it in step.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};

/// Stampede: a distributed load tester with exact merged percentiles.
#[derive(Parser, Debug)]
#[command(name = "stampede", version, about, long_about = None)]
pub struct Cli {
    /// Log format: text, or json (the default in a cluster).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "STAMPEDE_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Threads that run this process's work (the load, in `run --local` and `agent`): one per
    /// CPU it may use by default; with one (as on one CPU), all on the main thread, which costs
    /// the load less than a multi-thread runtime's one worker.
    #[arg(long, global = true, env = "STAMPEDE_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// TLS settings for reaching a controller over `https://`.
    #[command(flatten)]
    pub tls: crate::security::ClientTls,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The format of log lines on standard error.
#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for a log collector.
    Json,
}

/// How a command prints its result.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Text for a terminal.
    Text,
    /// JSON, for scripts.
    Json,
}

/// Where the controller is.
#[derive(clap::Args, Debug, Clone)]
pub struct Conn {
    /// Controller URL. Without it, the controller pod is found in the current kube context and
    /// namespace and reached through a port-forward; with no kube configuration at all,
    /// http://127.0.0.1:7070.
    #[arg(long, env = "STAMPEDE_CONTROLLER")]
    pub controller: Option<String>,
    /// Shared token of the controller (in a cluster, read from the controller's Secret by default).
    #[arg(long, env = "STAMPEDE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Kubernetes namespace of the controller (default: the kube context's namespace).
    #[arg(long, env = "STAMPEDE_NAMESPACE")]
    pub namespace: Option<String>,
    /// Kubernetes context to use (default: the current context).
    #[arg(long, env = "STAMPEDE_KUBE_CONTEXT")]
    pub context: Option<String>,
}

/// A resolved controller address (and the port-forward that keeps it reachable).
pub struct Endpoint {
    /// The controller's URL, with a port-forward's local port when one was opened.
    pub url: String,
    /// The token to present; `None` when neither a flag nor the controller's Secret gave one.
    pub token: Option<String>,
    _forward: Option<crate::kube::Forward>,
}

impl Conn {
    /// Where to reach the controller: the URL given, else a port-forward to its pod, else the
    /// local default.
    pub async fn endpoint(&self) -> Result<Endpoint> {
        if let Some(url) = &self.controller {
            return Ok(Endpoint {
                url: url.clone(),
                token: self.token.clone(),
                _forward: None,
            });
        }
        crate::kube::check_flags(self.namespace.as_deref(), self.context.as_deref())?;
        if !crate::kube::configured() {
            return Ok(Endpoint {
                url: "http://127.0.0.1:7070".into(),
                token: self.token.clone(),
                _forward: None,
            });
        }
        let f = crate::kube::forward(
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

/// The commands of `stampede`, one per line of its `--help`; `cmd::dispatch` runs each.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a scenario against a controller, or embedded with --local, and print the report.
    Run(RunArgs),
    /// Start a local HTTP target, a controller and agents in this process, and run the demo scenario.
    Demo(DemoArgs),
    /// Find the highest arrival rate at which the SLOs hold: a stair-step test, then a bisection.
    Capacity(crate::capacity::CapacityArgs),
    /// List runs known to the controller.
    Status {
        /// Where the controller is.
        #[command(flatten)]
        conn: Conn,
        /// How the list is printed.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Fetch the report of a finished run, or render a local JSON report file.
    Report {
        /// A run id, or a report file (an existing path, or a name ending in .json).
        run_id: String,
        /// Where the controller is.
        #[command(flatten)]
        conn: Conn,
        /// How the report is printed.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Files to write the report as.
        #[command(flatten)]
        files: crate::report_file::Outputs,
    },
    /// Compare two JSON reports, figure by figure, with confidence intervals; exit 1 when a
    /// significant regression is beyond a --max-regression limit.
    Compare(crate::compare::CompareArgs),
    /// List the agents attached to the controller.
    Agents {
        /// Where the controller is.
        #[command(flatten)]
        conn: Conn,
        /// How the list is printed.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Abort a running run.
    Abort {
        /// The run to abort.
        run_id: String,
        /// Where the controller is.
        #[command(flatten)]
        conn: Conn,
    },
    /// Dry run: each agent's share per phase, peak connections and the port budget per source
    /// address, and whether the controller would refuse the run (exit 1), without any load.
    Plan(crate::plan::PlanArgs),
    /// Check a scenario file (`-` reads standard input) and print what it plans.
    Validate {
        /// The scenario file; `-` reads standard input.
        scenario: PathBuf,
    },
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

/// Runs a scenario.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The scenario file (YAML or JSON; `-` reads standard input). Optional with --url.
    pub scenario: Option<PathBuf>,
    /// The one-line run's flags, and the flags that override the file.
    #[command(flatten)]
    pub quick: crate::quick::QuickArgs,
    /// Where the controller is (not with --local).
    #[command(flatten)]
    pub conn: Conn,
    /// Run embedded: start a controller and agents in this process.
    #[arg(long)]
    pub local: bool,
    /// Number of agents (overrides the scenario's `agents`; at least 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub agents: Option<u32>,
    /// How long to wait for enough agents, e.g. 30s (at most 1h).
    #[arg(long, value_parser = parse_agent_wait)]
    pub agent_wait: Option<Duration>,
    /// How the report is printed.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Also write the JSON report to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write the HdrHistogram interval log (.hlog) to this file.
    #[arg(long)]
    pub hdr_log: Option<PathBuf>,
    /// Write the per-interval timeline as CSV to this file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write a self-contained HTML report (SVG charts, tables, threshold verdicts) to this file.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Write JUnit XML for CI to this file: a testcase per threshold with its measured
    /// value, a failure element where one failed.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Write a short Markdown summary (outcome, headline figures, thresholds) to this file,
    /// e.g. "$GITHUB_STEP_SUMMARY".
    #[arg(long, value_name = "FILE")]
    pub summary_md: Option<PathBuf>,
    /// Print the text report with every column (min, p99.99, full names) and no wrapping;
    /// without it the report fits 80 columns.
    #[arg(long)]
    pub wide: bool,
    /// No live progress line.
    #[arg(long)]
    pub quiet: bool,
    /// With --local: also serve the controller's Prometheus `GET /metrics` on this address
    /// while the run goes on (the same metrics as `stampede controller`), e.g. 127.0.0.1:9090;
    /// the bound address is printed on standard error.
    #[arg(long, value_name = "ADDR", requires = "local")]
    pub metrics_listen: Option<SocketAddr>,
    /// Print the run's first N requests and their answers as they happen, on standard
    /// error: the request line and headers as sent (`${env:...}` and setup values masked),
    /// the status or error, the first 1 KiB of the answer (at most 100). HTTP steps read
    /// whole answers while it is on.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(stampede_core::scenario::MAX_DEBUG)))]
    pub debug: Option<u32>,
}

/// Runs the demo.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Total length of the demo (its phases are scaled to it), e.g. 12s.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Number of embedded agents.
    #[arg(long, default_value_t = 2)]
    pub agents: u32,
    /// Where to write the JSON report; the HTML report goes next to it (same name, `.html`).
    #[arg(long, default_value = "stampede-report.json")]
    pub report: PathBuf,
    /// How the report is printed.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// Serves the controller.
#[derive(clap::Args, Debug)]
pub struct ControllerArgs {
    /// Address to serve gRPC on.
    #[arg(long, default_value = "0.0.0.0:7070")]
    pub listen: SocketAddr,
    /// Where reports are stored.
    #[arg(long, default_value = "stampede-data", env = "STAMPEDE_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Tokens and TLS of the controller.
    #[command(flatten)]
    pub security: crate::security::ServerSecurity,
    /// How long a run waits for enough agents when its submission names no wait, e.g. 30s.
    #[arg(long, default_value = "30s", value_parser = parse_agent_wait)]
    pub agent_wait: Duration,
    /// The longest wait for agents a submission may ask for (at most 1h).
    #[arg(long, env = "STAMPEDE_MAX_AGENT_WAIT", default_value = "1h", value_parser = parse_agent_wait)]
    pub max_agent_wait: Duration,
    /// Runs waiting for agents at once; past it a submission is refused (resource exhausted)
    /// until one starts or fails.
    #[arg(long, env = "STAMPEDE_MAX_PENDING_RUNS", default_value_t = stampede_controller::DEFAULT_MAX_PENDING_RUNS as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_pending_runs: u32,
    /// Lease granted to agents; load stops this long after the controller goes away
    /// (100ms to 60s).
    #[arg(long, default_value = "1s", value_parser = parse_lease)]
    pub lease: Duration,
    /// How long beyond their lease a run's agents keep loading when their stream closes, and
    /// how long a restarted controller waits for them to come back: a controller restarted on
    /// the same data directory within it re-adopts its runs (0s: runs end when the controller
    /// goes)
    #[arg(long, env = "STAMPEDE_RESTART_GRACE", default_value = "15s", value_parser = parse_duration)]
    pub restart_grace: Duration,
    /// How long a run stays open, once an agent is lost while its load may still run (its
    /// link cut), for that agent to come back and deliver what it sent (default: the lease,
    /// the restart grace and 2s; 0s: end at once, the report naming what may be missing)
    #[arg(long, env = "STAMPEDE_LOST_AGENT_WAIT", value_parser = parse_duration)]
    pub lost_agent_wait: Option<Duration>,
    /// Most agents one run may ask for; the agent Deployment is never scaled above it.
    #[arg(long, env = "STAMPEDE_MAX_AGENTS", default_value_t = stampede_core::scenario::MAX_AGENTS)]
    pub max_agents: u32,
    /// Stored reports to keep (the newest); older ones are removed after each run.
    #[arg(long, env = "STAMPEDE_REPORTS_KEEP", default_value_t = 200)]
    pub reports_keep: usize,
    /// Stored reports older than this are removed after each run, e.g. 720h.
    #[arg(long, env = "STAMPEDE_REPORTS_MAX_AGE", default_value = "720h", value_parser = parse_duration)]
    pub reports_max_age: Duration,
    /// Also serve Prometheus `GET /metrics` on this address (e.g. 0.0.0.0:9090).
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Also serve the gRPC health service alone, in plaintext, on this address (e.g.
    /// 0.0.0.0:7071): kubelet's gRPC probes cannot speak TLS.
    #[arg(long)]
    pub health_listen: Option<SocketAddr>,
    /// Kubernetes integration (agent pods, scaling, LoadTest resources): `auto` turns it on when
    /// running in a pod (KUBERNETES_SERVICE_HOST is set).
    #[arg(long, env = "STAMPEDE_KUBE", value_enum, default_value_t = KubeMode::Auto)]
    pub kube: KubeMode,
    /// Namespace of LoadTests, agent pods and the agent Deployment (default: the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Label selector of the agent pods to watch.
    #[arg(long, env = "STAMPEDE_AGENT_SELECTOR")]
    pub agent_selector: Option<String>,
    /// Agent Deployment to scale up when a run needs more agents than are attached.
    #[arg(long, env = "STAMPEDE_AGENT_DEPLOYMENT")]
    pub agent_deployment: Option<String>,
    /// Scale the agent Deployment back to its previous size after a run that scaled it up.
    #[arg(long, env = "STAMPEDE_SCALE_DOWN_AFTER")]
    pub scale_down_after: bool,
    /// Do not reconcile LoadTest resources (the rest of the Kubernetes side still runs).
    #[arg(long, env = "STAMPEDE_NO_LOADTESTS")]
    pub no_loadtests: bool,
}

/// Whether the controller runs its Kubernetes side (LoadTests, agent pods, scaling).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KubeMode {
    /// On when the process runs in a pod, or when a kube configuration is found.
    Auto,
    /// Always; failing to reach the API server is an error.
    On,
    /// Never, even in a pod.
    Off,
}

/// Serves an agent.
#[derive(clap::Args, Debug)]
pub struct AgentArgs {
    /// Controller URL.
    #[arg(long, env = "STAMPEDE_CONTROLLER")]
    pub controller: String,
    /// Agent id (default: the pod name, or host name and pid).
    #[arg(long, env = "STAMPEDE_AGENT_ID")]
    pub id: Option<String>,
    /// The user token, used only when no agent token is given (a controller with one shared
    /// token).
    #[arg(long, env = "STAMPEDE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The agent token the controller expects from agents (prefer the environment variable or
    /// --agent-token-file).
    #[arg(long, env = "STAMPEDE_AGENT_TOKEN", hide_env_values = true)]
    pub agent_token: Option<String>,
    /// File holding the agent token.
    #[arg(long, env = "STAMPEDE_AGENT_TOKEN_FILE")]
    pub agent_token_file: Option<PathBuf>,
    /// Which target addresses the agent may send load to.
    #[command(flatten)]
    pub targets: crate::security::TargetPolicyArgs,
    /// Sessions in flight at once before arrivals are dropped (and counted).
    #[arg(long, default_value_t = 10_000)]
    pub capacity: u32,
    /// Local addresses to open load connections from, round-robin (comma-separated, e.g.
    /// 10.0.0.2,10.0.0.3); each multiplies the port budget per target.
    #[arg(long, value_delimiter = ',', env = "STAMPEDE_SOURCE_IPS")]
    pub source_ips: Vec<std::net::IpAddr>,
    /// Most time beyond its lease this agent keeps a run's load going when its stream to the
    /// controller closes, waiting for the controller to come back (the run's own grace applies
    /// when shorter; 0s: stop at the lease)
    #[arg(long, env = "STAMPEDE_RESTART_GRACE", default_value = "15s", value_parser = parse_duration)]
    pub restart_grace: Duration,
    /// The cores this agent may use, e.g. 0.5 or 500m (millicores, as Kubernetes writes a CPU
    /// limit), when its process cannot see its quota (default: the cgroup's CPU quota, else the
    /// CPUs it may run on). Its CPU share is measured against them: at 90 % the report, and
    /// `capacity`, name it as the limit.
    #[arg(long, env = "STAMPEDE_CPU_LIMIT", value_parser = parse_cores)]
    pub cpu_limit: Option<f64>,
}

/// A number of cores, positive and finite: `0.5`, `2`, or millicores as Kubernetes writes a
/// CPU quantity (`500m`), which is how the chart passes a pod's CPU limit from the downward
/// API (`limits.cpu` in units of 1m, suffixed with `m`).
pub fn parse_cores(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let cores = match t.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().map(|m| m / 1000.0),
        None => t.parse::<f64>(),
    };
    match cores {
        Ok(c) if c.is_finite() && c > 0.0 => Ok(c),
        _ => Err(format!("`{s}`: a number of cores > 0, e.g. 0.5, 2 or 500m")),
    }
}

/// The duration grammar of scenarios (`500ms`, `2m30s`), for flags.
pub fn parse_duration(s: &str) -> Result<Duration, stampede_core::duration::DurationError> {
    stampede_core::duration::parse_duration(s)
}

/// A wait for agents no longer than any controller allows: refused here with the message a
/// controller would give, before anything is sent.
pub fn parse_agent_wait(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?;
    stampede_core::scenario::check_agent_wait(d, stampede_core::scenario::MAX_AGENT_WAIT)
        .map_err(|e| e.to_string())?;
    Ok(d)
}

/// A lease between the controller's bounds: 0 would panic the renewal timer, an hour would
/// turn "load stops within a second" into an hour.
pub fn parse_lease(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?;
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

/// The settings table of `docs/settings.md`: each command's flags, environment variables and
/// defaults, from the clap definitions themselves (so the docs cannot drift from the code).
pub fn settings_table() -> String {
    use clap::CommandFactory as _;
    let mut out = String::from(
        "| command | flag | environment | default | what it sets |\n|---|---|---|---|---|\n",
    );
    let root = Cli::command();
    let mut rows = |cmd: &clap::Command, name: &str| {
        for a in cmd.get_arguments() {
            let Some(long) = a.get_long() else { continue };
            if long == "help" || long == "version" {
                continue;
            }
            let env = a
                .get_env()
                .map(|e| format!("`{}`", e.to_string_lossy()))
                .unwrap_or_default();
            let default: Vec<String> = a
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let default = if default.is_empty() {
                String::new()
            } else {
                format!("`{}`", default.join(","))
            };
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            // The first sentence ("e.g. " does not end one).
            let help = help.replace("e.g. ", "e.g.\u{a0}");
            let first = help.split(". ").next().unwrap_or_default();
            let first = first
                .trim_end_matches('.')
                .replace('\u{a0}', " ")
                .replace('|', "\\|");
            out.push_str(&format!(
                "| {name} | `--{long}` | {env} | {default} | {first} |\n"
            ));
        }
    };
    rows(&root, "(all)");
    for sub in root.get_subcommands().filter(|s| s.get_name() != "target") {
        rows(sub, sub.get_name());
    }
    out
}

#[cfg(test)]
mod tests {
    /// The chart passes a pod's CPU limit as `$(millicores)m` (the downward API's `limits.cpu`
    /// with divisor 1m); a number of cores reads as before, and nothing that is not a positive
    /// number of cores is taken.
    #[test]
    fn cores_read_as_numbers_and_as_kubernetes_millicores() {
        use super::parse_cores;
        assert_eq!(parse_cores("0.5"), Ok(0.5));
        assert_eq!(parse_cores("2"), Ok(2.0));
        assert_eq!(parse_cores("500m"), Ok(0.5));
        assert_eq!(parse_cores("1000m"), Ok(1.0));
        assert_eq!(parse_cores("4000m"), Ok(4.0));
        assert_eq!(parse_cores(" 250m "), Ok(0.25));
        for bad in [
            "0",
            "0m",
            "-1",
            "m",
            "",
            "1.5k",
            "NaNm",
            "infm",
            "$(CPU_LIMIT_MILLICORES)m",
        ] {
            let e = parse_cores(bad).unwrap_err();
            assert!(e.contains("a number of cores > 0"), "{bad}: {e}");
        }
    }

    /// clap's own checks of the command line (conflicting names, defaults that do not parse,
    /// groups naming no argument), which it otherwise makes only when a command is used.
    #[test]
    fn the_command_line_passes_clap_checks() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }

    /// `docs/settings.md` lists every setting; regenerate with `STAMPEDE_BLESS=1 cargo test -p
    /// stampede --lib settings`.
    #[test]
    fn the_settings_table_matches_the_flags() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/settings.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let (begin, end) = ("<!-- settings:begin -->\n", "<!-- settings:end -->");
        let table = super::settings_table();
        let (Some(i), Some(j)) = (doc.find(begin), doc.find(end)) else {
            panic!("docs/settings.md has no settings markers");
        };
        let current = &doc[i + begin.len()..j];
        if std::env::var_os("STAMPEDE_BLESS").is_some() && current != table {
            let updated = format!("{}{table}{}", &doc[..i + begin.len()], &doc[j..]);
            std::fs::write(path, updated).unwrap();
            return;
        }
        assert_eq!(
            current, table,
            "docs/settings.md's settings table is stale: run `STAMPEDE_BLESS=1 cargo test -p stampede --lib settings`"
        );
    }
}
