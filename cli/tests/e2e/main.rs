//! End-to-end tests: a real controller, real agents (in-process or as child processes of the
//! `stampede` binary) and real target servers, over loopback with ephemeral ports. Every test
//! is bounded in time and stops what it started. One test binary; one module per area.

mod capacity;
mod compare;
mod compression;
mod debug;
mod endurance;
mod faults;
mod first_hour;
mod grpc;
mod grpc_reply;
mod grpc_streams;
mod mixes;
mod mtls;
mod multipart;
mod netcut;
mod ports;
mod protocols;
mod ramps;
mod restarts;
mod results;
mod sample_secrets;
mod samples;
mod security;
mod sessions;
mod spine;
mod step_targets;
mod stops;
mod streams;
mod tls;
mod verdicts;
mod websocket;
mod workloads;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use stampede_cli::client;
use stampede_core::report::Report;
use stampede_target_servers::http::{HttpConfig, HttpServer};
use tokio::net::TcpListener;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

pub const BIN: &str = env!("CARGO_BIN_EXE_stampede");

pub struct Target {
    pub server: HttpServer,
    pub url: String,
    _stop: Stop,
}

impl Target {
    pub async fn start(delay_ms: u64) -> Self {
        Self::start_with(HttpConfig {
            delay_ms,
            ..HttpConfig::default()
        })
        .await
    }

    pub async fn start_with(config: HttpConfig) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = HttpServer::new(config).unwrap();
        let stop = serve_until_dropped(|shutdown| server.clone().serve(listener, shutdown));
        Self {
            server,
            url,
            _stop: stop,
        }
    }
    pub fn requests(&self) -> u64 {
        self.server.stats().requests_total
    }
}

/// Cancels its token when dropped: stops a server a test spawned.
pub struct Stop(CancellationToken);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Spawns the server future `serve(shutdown)`; it shuts down when the returned guard drops.
pub fn serve_until_dropped<F>(serve: impl FnOnce(WaitForCancellationFutureOwned) -> F) -> Stop
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let stop = CancellationToken::new();
    tokio::spawn(serve(stop.clone().cancelled_owned()));
    Stop(stop)
}

/// Serves each connection `listener` accepts with `serve`, in a task of its own, until the
/// returned guard drops.
pub fn serve_each<S, F>(listener: tokio::net::TcpListener, serve: S) -> Stop
where
    S: Fn(tokio::net::TcpStream) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    serve_until_dropped(move |shutdown| async move {
        tokio::select! {
            _ = shutdown => {}
            _ = async {
                loop {
                    let Ok((s, _)) = listener.accept().await else { continue };
                    tokio::spawn(serve(s));
                }
            } => {}
        }
    })
}

/// Reads from `s` into `buf` until `buf` holds a whole HTTP head; the head's length, or
/// `None` once the peer closed first.
pub async fn read_head(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    use tokio::io::AsyncReadExt as _;
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(i + 4);
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// One request a test target read whole: its head, for the path and the headers.
pub struct Request {
    pub head: String,
}

impl Request {
    /// The request target (`/login?user=u01`).
    pub fn path(&self) -> &str {
        self.head.split(' ').nth(1).unwrap_or_default()
    }

    /// The value of header `name` (any case), or empty.
    pub fn header(&self, name: &str) -> String {
        self.head
            .lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    }
}

/// Reads one whole request from `s` (its head, then a body by its content-length), leaving
/// in `buf` what follows it; `None` once the peer closed first.
pub async fn read_request(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<Request> {
    use tokio::io::AsyncReadExt as _;
    let end = read_head(s, buf).await?;
    let req = Request {
        head: String::from_utf8_lossy(&buf[..end]).to_string(),
    };
    let length: usize = req.header("content-length").parse().unwrap_or(0);
    let mut chunk = [0u8; 4096];
    while buf.len() < end + length {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    buf.drain(..end + length);
    Some(req)
}

/// Writes a JSON answer with `status` (`200 OK`); whether it could.
pub async fn answer_json(s: &mut tokio::net::TcpStream, status: &str, body: &str) -> bool {
    use tokio::io::AsyncWriteExt as _;
    let out = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(out.as_bytes()).await.is_ok()
}

/// A child process that is killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A local controller with no agents of its own and child-process agents `ids` attached to
/// it (each can be killed on its own: drop its [`Proc`]).
pub async fn cluster_with_agents(ids: &[&str]) -> (stampede_cli::local::LocalCluster, Vec<Proc>) {
    let cluster = stampede_cli::local::LocalCluster::start(0, None)
        .await
        .unwrap();
    let url = cluster.url();
    let agents = ids
        .iter()
        .map(|id| spawn_agent(&url, &cluster.agent_token, id))
        .collect();
    tokio::time::timeout(
        Duration::from_secs(20),
        cluster.controller.wait_for_agents(ids.len()),
    )
    .await
    .expect("agents attach");
    (cluster, agents)
}

/// The report of the run `watch` follows (`client::run_and_watch` on a task), within a minute.
pub async fn report_of(watch: tokio::task::JoinHandle<anyhow::Result<Report>>) -> Report {
    tokio::time::timeout(Duration::from_secs(60), watch)
        .await
        .expect("run ends")
        .unwrap()
        .unwrap()
}

pub fn spawn_agent(controller: &str, token: &str, id: &str) -> Proc {
    let child = Command::new(BIN)
        .args([
            "agent",
            "--controller",
            controller,
            "--id",
            id,
            "--agent-token",
            token,
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn agent");
    Proc(child)
}

/// Starts `stampede controller` on an ephemeral port; returns it and its URL.
pub fn spawn_controller(token: &str, data_dir: &std::path::Path) -> (Proc, String) {
    spawn_controller_on("127.0.0.1:0", token, data_dir)
}

/// Starts `stampede controller` listening on `listen`; returns it and its URL.
pub fn spawn_controller_on(
    listen: &str,
    token: &str,
    data_dir: &std::path::Path,
) -> (Proc, String) {
    spawn_controller_with(listen, token, data_dir, &[])
}

/// [`spawn_controller_on`] with more arguments (say `--lease 3s`).
pub fn spawn_controller_with(
    listen: &str,
    token: &str,
    data_dir: &std::path::Path,
    extra: &[&str],
) -> (Proc, String) {
    let mut child = Command::new(BIN)
        .args([
            "controller",
            "--listen",
            listen,
            "--token",
            token,
            "--data-dir",
        ])
        .arg(data_dir)
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn controller");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    (Proc(child), format!("http://{addr}"))
}

pub fn scenario(target: &str, phases: &str, extra: &str) -> String {
    format!("name: e2e\ntarget: {target}\nphases:\n{phases}session:\n  - http: {{ method: GET, path: /data }}\n{extra}")
}

/// What `stampede run --local` printed, and its JSON report.
pub struct CliRun {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub report: Report,
}

/// Writes `text` to `DIR/NAME.yaml` (so relative files in it are read from `dir`) and runs
/// `stampede run --local --quiet --agents 1` on it with a JSON report.
pub fn cli_run_local(dir: &std::path::Path, name: &str, text: &str) -> CliRun {
    cli_run_local_via(Command::new(BIN), dir, name, text)
}

/// [`cli_run_local`] through `cmd`, a command that runs the binary (say `taskset -c 1 BIN`).
pub fn cli_run_local_via(
    mut cmd: Command,
    dir: &std::path::Path,
    name: &str,
    text: &str,
) -> CliRun {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    let report = dir.join(format!("{name}.json"));
    let out = cmd
        .args(["run", "--local", "--quiet", "--agents", "1", "--report"])
        .arg(&report)
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let text =
        std::fs::read_to_string(&report).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    CliRun {
        code: out.status.code(),
        stdout,
        stderr,
        report: serde_json::from_str(&text).unwrap(),
    }
}

pub async fn run(url: &str, token: &str, text: &str, agents: u32) -> Report {
    let mut c = client::connect(url, Some(token)).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(90),
        client::run_and_watch(
            &mut c,
            text,
            Some(agents),
            Some(Duration::from_secs(20)),
            |_| {},
        ),
    )
    .await
    .expect("run finished in time")
    .unwrap()
}

/// Asserts that report `r` counts what the target served (`served`): every answered request
/// once, besides at most `slack` in flight when the load was stopped (started, then abandoned).
pub fn assert_counts_what_was_served(r: &Report, served: u64, slack: u64) {
    let finished = r.totals.completed + r.totals.failed;
    assert!(
        finished <= served && served <= r.totals.started && r.totals.started - finished <= slack,
        "served {served}, report: started {} finished {finished}",
        r.totals.started
    );
}
