//! Talking to a controller: submit a run, follow it live, fetch reports, list, abort.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use stampede_core::report::Report;
use stampede_proto::v1::{self, control_service_client::ControlServiceClient, run_event::Event};
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone)]
pub struct Auth(Option<MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A `ControlService` client that sends the user token with every call.
pub type Client = ControlServiceClient<InterceptedService<Channel, Auth>>;

/// Largest message the CLI accepts from the controller. A report grows with the run (a
/// timeline row per interval, per-phase and per-step sections): hours-long runs and capacity
/// searches with many steps pass tonic's default of 4 MiB, and a finished run must always be
/// readable.
pub const MAX_REPORT_BYTES: usize = 1 << 30;

/// PEM material for an `https://` controller: extra trusted CAs, and a client identity for
/// mutual TLS.
#[derive(Debug, Clone, Default)]
pub struct TlsMaterial {
    /// Extra CAs to trust, PEM, beside the system's.
    pub ca_pem: Option<Vec<u8>>,
    /// The client certificate chain and its key, PEM, for a controller that requires one.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name the controller's certificate must carry, when not the URL's host.
    pub server_name: Option<String>,
    /// The CA of a controller found in the kube context (its chart's TLS Secret).
    pub cluster_ca_pem: Option<Vec<u8>>,
}

static TLS: std::sync::Mutex<TlsMaterial> = std::sync::Mutex::new(TlsMaterial {
    ca_pem: None,
    identity: None,
    server_name: None,
    cluster_ca_pem: None,
});

fn tls() -> std::sync::MutexGuard<'static, TlsMaterial> {
    TLS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sets the TLS material every later [`connect`] uses (from the flags).
pub fn set_tls(material: TlsMaterial) {
    *tls() = material;
}

/// Trusts the CA of a controller reached through a kube port-forward, checking its
/// certificate against `server_name` (the Service name) unless the user named one.
pub fn trust_cluster_controller(ca_pem: Vec<u8>, server_name: String) {
    let mut m = tls();
    m.cluster_ca_pem = Some(ca_pem);
    m.server_name.get_or_insert(server_name);
}

/// Connects to a controller at `url` (e.g. `http://127.0.0.1:7070`, or `https://…` over TLS
/// with the system's roots plus `--ca-cert`).
pub async fn connect(url: &str, token: Option<&str>) -> Result<Client> {
    let mut endpoint = tonic::transport::Endpoint::from_shared(url.to_string())
        .with_context(|| format!("invalid controller URL `{url}`"))?;
    if url.starts_with("https://") {
        let m = tls().clone();
        let cas: Vec<&[u8]> = [&m.ca_pem, &m.cluster_ca_pem]
            .into_iter()
            .flatten()
            .map(Vec::as_slice)
            .collect();
        let config = stampede_proto::tls::client_tls(
            &cas,
            m.identity
                .as_ref()
                .map(|(c, k)| (c.as_slice(), k.as_slice())),
            m.server_name.as_deref(),
        );
        endpoint = endpoint.tls_config(config).context("TLS settings")?;
    }
    let endpoint = endpoint
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true);
    let channel = endpoint.connect().await.map_err(|e| {
        anyhow!(
            "cannot reach the controller at {url}: {}",
            crate::causes(&e)
        )
    })?;
    let auth = match token {
        Some(t) => Some(
            MetadataValue::try_from(format!("Bearer {t}"))
                .context("the token must be printable ASCII")?,
        ),
        None => None,
    };
    Ok(ControlServiceClient::with_interceptor(channel, Auth(auth))
        .max_decoding_message_size(MAX_REPORT_BYTES))
}

/// What the watcher sees while a run goes on.
pub enum Live<'a> {
    /// The run's state changed.
    State(&'a v1::RunState),
    /// The merged figures of the latest interval, for the live line.
    Snapshot(&'a v1::LiveSnapshot),
    /// Requests and answers an agent reported for `run --debug`.
    Debug(&'a v1::DebugExchanges),
}

/// Submits the scenario text; returns the run id.
pub async fn submit(
    client: &mut Client,
    scenario: &str,
    agents: Option<u32>,
    agent_wait: Option<Duration>,
) -> Result<String> {
    Ok(client
        .submit_run(v1::SubmitRunRequest {
            scenario: scenario.to_string(),
            agents: agents.unwrap_or(0),
            agent_wait_ms: agent_wait.map_or(0, |d| d.as_millis() as u64),
        })
        .await
        .map_err(status_error)?
        .into_inner()
        .run_id)
}

/// Submits the scenario text and follows the run to its report.
pub async fn run_and_watch(
    client: &mut Client,
    scenario: &str,
    agents: Option<u32>,
    agent_wait: Option<Duration>,
    mut on_live: impl FnMut(Live<'_>),
) -> Result<Report> {
    let run_id = submit(client, scenario, agents, agent_wait).await?;
    watch(client, &run_id, &mut on_live).await
}

/// How long a watcher whose stream broke keeps trying to reach the controller again: a
/// controller restarted on its data directory re-adopts the run and is back well within it.
const WATCH_RETRY: Duration = Duration::from_secs(30);

/// Follows a run until its final report. When the stream breaks (the controller restarted,
/// or the link dropped), it reconnects and follows on, for up to [`WATCH_RETRY`] without
/// hearing from the controller.
pub async fn watch(
    client: &mut Client,
    run_id: &str,
    on_live: &mut impl FnMut(Live<'_>),
) -> Result<Report> {
    let mut broken_since: Option<tokio::time::Instant> = None;
    let mut pause = Duration::from_millis(200);
    loop {
        let (heard, status) = match watch_once(client, run_id, on_live).await {
            Watched::Report(r) => return *r,
            Watched::Broken { heard, status } => (heard, status),
        };
        if !retriable(&status) {
            return Err(status_error(status));
        }
        if heard {
            broken_since = None;
            pause = Duration::from_millis(200);
        }
        let since = *broken_since.get_or_insert_with(tokio::time::Instant::now);
        if since.elapsed() >= WATCH_RETRY {
            return Err(status_error(status).context(format!(
                "following run {run_id}: the controller did not come back within {} s",
                WATCH_RETRY.as_secs()
            )));
        }
        tracing::warn!(run = %run_id, error = %status.message(), "lost the controller; reconnecting to follow the run");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// How one watch of a run ended.
enum Watched {
    /// With the final report (or a report this CLI cannot read).
    Report(Box<Result<Report>>),
    /// Without it; `heard` says whether the controller sent anything first.
    Broken { heard: bool, status: tonic::Status },
}

/// A watch that broke with this status may succeed once the controller is back.
fn retriable(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::Unavailable
            | tonic::Code::Unknown
            | tonic::Code::Internal
            | tonic::Code::Cancelled
            | tonic::Code::Aborted
            | tonic::Code::DeadlineExceeded
            | tonic::Code::FailedPrecondition
    )
}

async fn watch_once(
    client: &mut Client,
    run_id: &str,
    on_live: &mut impl FnMut(Live<'_>),
) -> Watched {
    let mut stream = match client
        .watch_run(v1::WatchRunRequest {
            run_id: run_id.to_string(),
        })
        .await
    {
        Ok(s) => s.into_inner(),
        Err(status) => {
            return Watched::Broken {
                heard: false,
                status,
            }
        }
    };
    let mut heard = false;
    loop {
        match stream.message().await {
            Ok(Some(ev)) => {
                heard = true;
                match ev.event {
                    Some(Event::State(s)) => on_live(Live::State(&s)),
                    Some(Event::Snapshot(s)) => on_live(Live::Snapshot(&s)),
                    Some(Event::Debug(d)) => on_live(Live::Debug(&d)),
                    Some(Event::ReportJson(json)) => {
                        return Watched::Report(Box::new(parse_report(&json)))
                    }
                    None => {}
                }
            }
            Ok(None) => break,
            Err(status) => return Watched::Broken { heard, status },
        }
    }
    // The stream ended without a report: ask for it once more (it is persisted first).
    match client
        .get_report(v1::GetReportRequest {
            run_id: run_id.to_string(),
        })
        .await
    {
        Ok(r) => Watched::Report(Box::new(parse_report(&r.into_inner().report_json))),
        Err(status) => Watched::Broken { heard, status },
    }
}

/// Fetches and parses the stored report of `run_id`; a run not finished yet is an error.
pub async fn get_report(client: &mut Client, run_id: &str) -> Result<Report> {
    let json = client
        .get_report(v1::GetReportRequest {
            run_id: run_id.to_string(),
        })
        .await
        .map_err(status_error)?
        .into_inner()
        .report_json;
    parse_report(&json)
}

fn parse_report(json: &str) -> Result<Report> {
    serde_json::from_str(json).context("the controller sent a report this CLI cannot read")
}

/// Turns a gRPC status into an error that says what to do.
pub fn status_error(s: tonic::Status) -> anyhow::Error {
    // What a gRPC client reports when the other end speaks plain HTTP/1 (a target server,
    // a metrics port): not an error of the controller, a wrong address.
    let msg = s.message();
    if matches!(
        s.code(),
        tonic::Code::Internal | tonic::Code::Unknown | tonic::Code::Unimplemented
    ) && (msg.contains("compression flag")
        || msg.contains("h2 protocol error")
        || msg.contains("content-type")
        || msg.contains("HTTP status"))
    {
        return anyhow!(
            "this address does not answer like a Stampede controller (wrong port? the controller serves gRPC, 7070 by default): {msg}"
        );
    }
    match s.code() {
        tonic::Code::Unauthenticated => anyhow!("unauthenticated: {}", s.message()),
        tonic::Code::InvalidArgument => anyhow!("{}", s.message()),
        tonic::Code::NotFound => anyhow!("{}", s.message()),
        tonic::Code::Unavailable => anyhow!("controller unavailable: {}", s.message()),
        _ => anyhow!("controller error ({:?}): {}", s.code(), s.message()),
    }
}

/// Reads a scenario file and validates it locally first, for a clear error before any RPC.
pub fn read_scenario(path: &std::path::Path) -> Result<(String, stampede_core::Scenario)> {
    read_scenario_with(path, stampede_core::Scenario::from_yaml)
}

/// [`read_scenario`] for a dry run (`validate`, `plan`): the files are read, but
/// `${env:NAME}` references are left as they are, so the variables a run needs need not be
/// set (see [`stampede_core::Scenario::env_names`]).
/// A literal target address the agents' default policy refuses is refused here too, with the
/// controller's message: a dry run says what the run would be told.
pub fn read_scenario_dry(path: &std::path::Path) -> Result<stampede_core::Scenario> {
    let (_, s) = read(path, stampede_core::Scenario::from_yaml, Env::Leave)?;
    stampede_core::target_policy::check_literals(&s)?;
    Ok(s)
}

/// [`read_scenario`] with another parser (capacity's, which needs no load).
pub fn read_scenario_with(
    path: &std::path::Path,
    parse: fn(&str) -> Result<stampede_core::Scenario, stampede_core::scenario::ScenarioError>,
) -> Result<(String, stampede_core::Scenario)> {
    read(path, parse, Env::Resolve)
}

/// Whether `${env:NAME}` references are resolved from the CLI's environment.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Env {
    Resolve,
    Leave,
}

fn read(
    path: &std::path::Path,
    parse: fn(&str) -> Result<stampede_core::Scenario, stampede_core::scenario::ScenarioError>,
    env: Env,
) -> Result<(String, stampede_core::Scenario)> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the scenario from stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
    };
    let mut scenario = match parse(&text) {
        Ok(s) => s,
        Err(e) => bail!("{}: {e}", path.display()),
    };
    // A ConfigMap or Secret is read by the controller for a LoadTest, in its namespace; a run
    // from the CLI has neither (`validate` and `plan` still check such a LoadTest's scenario).
    if env == Env::Resolve {
        if let Some((name, kind, k)) = stampede_core::data::object::objects(&scenario.data).next() {
            bail!(
                "{}: data.{name}.{}: a {kind} is read only for a LoadTest, by the controller in its namespace; \
                 `stampede run` reads rows from a file: save key {} of {kind} {} and give it as `file:`",
                path.display(),
                kind.field(),
                k.key,
                k.name
            );
        }
    }
    // File payloads and bodies are read here, so agents (in pods) never need the files: the
    // submitted scenario carries their bytes.
    let base = path.parent().unwrap_or(std::path::Path::new("."));
    if scenario.insecure_tls() {
        eprintln!(
            "\n!!! WARNING: {}: TLS certificate verification is OFF (tls.insecure_skip_verify).\n\
             !!! Any certificate will be accepted. Use this only against your own self-signed test targets.\n",
            path.display()
        );
    }
    // `${env:NAME}` is resolved here too: agents never read their own environment, and the
    // values are never written to a report or a log.
    let changed = scenario
        .inline_files(base, &mut |p| std::fs::read(p))
        .and_then(|files| {
            Ok(match env {
                Env::Resolve => scenario.resolve_env(&|n| std::env::var(n).ok())? | files,
                Env::Leave => files,
            })
        });
    match changed {
        Ok(false) => Ok((text, scenario)),
        Ok(true) => {
            let json = serde_json::to_string(&scenario).context("serialising the scenario")?;
            let max = stampede_core::scenario::MAX_SCENARIO_BYTES;
            if json.len() > max {
                bail!(
                    "{}: the scenario with its files is {:.1} MiB; at most {} MiB (data files, bodies and payloads included)",
                    path.display(),
                    json.len() as f64 / f64::from(1u32 << 20),
                    max >> 20
                );
            }
            Ok((json, scenario))
        }
        Err(e) => bail!("{}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_refuses_data_from_a_configmap_and_validate_accepts_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lt.yaml");
        std::fs::write(
            &path,
            r#"
name: lt
target: http://127.0.0.1:8080
data:
  users: { config_map: { name: users, key: users.csv } }
phases: [ { duration: 1s, arrival_rate: 2 } ]
session:
  - http: { path: '/u/${users.id}' }
"#,
        )
        .unwrap();
        let e = format!("{:#}", read_scenario(&path).unwrap_err());
        assert!(
            e.contains("data.users.config_map: a configmap is read only for a LoadTest"),
            "{e}"
        );
        let s = read_scenario_dry(&path).unwrap();
        assert!(s.data["users"].config_map.is_some());
    }

    /// `validate` and `plan` refuse a literal metadata address as the controller would.
    #[test]
    fn a_dry_run_refuses_what_the_target_policy_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.yaml");
        for target in [
            "http://100.100.100.200/",
            "http://[fd20:ce::254]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "tcp://168.63.129.16:80",
        ] {
            std::fs::write(
                &path,
                format!("name: p\ntarget: {target}\nphases: [ {{ duration: 1s, arrival_rate: 2 }} ]\nsession: [ {{ http: {{ path: / }} }} ]\n").replace(
                    "session: [ { http: { path: / } } ]",
                    if target.starts_with("tcp") {
                        "session: [ { tcp: { send: { text: x } } } ]"
                    } else {
                        "session: [ { http: { path: / } } ]"
                    },
                ),
            )
            .unwrap();
            let e = format!("{:#}", read_scenario_dry(&path).unwrap_err());
            assert!(
                e.starts_with("target: ") && e.contains("refused by the target policy"),
                "{e}"
            );
        }
    }
}
