//! Realistic sessions: a data file split exactly across agents, a token extracted from a
//! login response and carried into the next request, checks, cookies, `${env:...}`, and a
//! run refused before any load when the rows would run out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use stampede_cli::client;
use stampede_core::report::RunOutcome;

use crate::{read_head, serve_until_dropped, Stop, BIN};

/// One request as the login server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// The client's port: one per connection.
    pub(crate) peer: u16,
    pub(crate) path: String,
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) body: String,
}

/// A small real HTTP/1.1 keep-alive server: `/login` issues `{"token":"t-N","status":"ok"}`
/// and a `sid` cookie; `/me` answers 200 only to `Bearer t-N` of an issued token.
pub(crate) struct LoginServer {
    pub(crate) url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    _stop: Stop,
}

impl LoginServer {
    pub(crate) async fn start() -> Self {
        Self::start_on("127.0.0.1:0").await
    }

    /// On `addr` (another loopback address is another host to a cookie jar).
    pub(crate) async fn start_on(addr: &str) -> Self {
        let listener = TcpListener::bind(addr).await.unwrap();
        let url = format!("http://{}/api", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let issued = Arc::new(Mutex::new(BTreeSet::new()));
        let log = seen.clone();
        let stop = serve_until_dropped(move |shutdown| async move {
            tokio::select! {
                _ = shutdown => {}
                _ = async {
                    loop {
                        let Ok((s, _)) = listener.accept().await else { continue };
                        tokio::spawn(serve(s, log.clone(), issued.clone()));
                    }
                } => {}
            }
        });
        Self {
            url,
            seen,
            _stop: stop,
        }
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(mut s: TcpStream, log: Arc<Mutex<Vec<Seen>>>, issued: Arc<Mutex<BTreeSet<String>>>) {
    let peer = s.peer_addr().map_or(0, |a| a.port());
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Some(head_end) = read_head(&mut s, &mut buf).await else {
            return;
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let mut lines = head.split("\r\n");
        let path = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .unwrap_or_default()
            .to_string();
        let headers: BTreeMap<String, String> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + len {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = String::from_utf8_lossy(&buf[head_end..head_end + len]).to_string();
        buf.drain(..head_end + len);
        let (status, extra, out) = if path.starts_with("/api/login") {
            let mut set = issued.lock().unwrap();
            let n = set.len() + 1;
            set.insert(format!("t-{n}"));
            (
                200,
                format!("set-cookie: sid=s-{n}; Path=/\r\n"),
                format!("{{\"token\":\"t-{n}\",\"status\":\"ok\"}}"),
            )
        } else if path == "/api/me" {
            let token = headers
                .get("authorization")
                .and_then(|a| a.strip_prefix("Bearer "))
                .unwrap_or_default();
            if issued.lock().unwrap().contains(token) {
                (200, String::new(), "{\"me\":\"ok\"}".to_string())
            } else {
                (401, String::new(), "no".to_string())
            }
        } else {
            (200, String::new(), "ok".to_string())
        };
        log.lock().unwrap().push(Seen {
            peer,
            path,
            headers,
            body,
        });
        let reply = format!(
            "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n{extra}\r\n{out}",
            out.len()
        );
        if s.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn scenario(url: &str, file: &str, rows_policy: &str) -> String {
    format!(
        r#"name: sessions
target: {url}
cookies: true
data:
  users: {{ file: {file}, order: shuffle, on_exhausted: {rows_policy} }}
phases: [ {{ duration: 2s, arrival_rate: 60 }} ]
session:
  - name: login
    http: {{ method: post, path: '/login?u=${{users.name|url}}', headers: {{ x-key: '${{env:E2E_SESSION_KEY}}' }}, body: '{{"id":${{users.id}},"n":${{seq(1000,1)}}}}' }}
    extract: {{ token: {{ json: /token }}, sid: {{ cookie: sid }} }}
    check: {{ status: [200], json: {{ /status: ok }} }}
  - name: me
    http: {{ path: /me, headers: {{ authorization: 'Bearer ${{token}}', x-sid: '${{sid}}' }} }}
    check: {{ status: [200], body_contains: '"ok"' }}
"#
    )
}

/// Runs `text` (saved as `NAME.yaml` in `dir`) with `stampede run --local` on `agents` agents,
/// its report in `NAME.json`: the exit code and everything it printed.
async fn run_cli(
    dir: &std::path::Path,
    name: &str,
    text: &str,
    agents: &str,
) -> (Option<i32>, String) {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    let out = tokio::process::Command::new(BIN)
        .args(["run", "--local", "--quiet", "--agents", agents, "--report"])
        .arg(dir.join(format!("{name}.json")))
        .arg(&path)
        .env("E2E_SESSION_KEY", "k-e2e")
        .output()
        .await
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_carry_their_token_and_rows_split_exactly() {
    let server = LoginServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..120).map(|i| format!("{i},user {i}\n")).collect();
    std::fs::write(dir.path().join("users.csv"), format!("id,name\n{rows}")).unwrap();

    let text = scenario(&server.url, "users.csv", "fail");
    let (code, out) = run_cli(dir.path(), "ok", &text, "3").await;
    assert_eq!(code, Some(0), "{out}");
    let seen = server.seen();
    let logins: Vec<_> = seen
        .iter()
        .filter(|s| s.path.starts_with("/api/login"))
        .collect();
    let users: BTreeSet<_> = logins.iter().map(|s| s.path.clone()).collect();
    assert_eq!((logins.len(), users.len()), (120, 120), "each row once");
    assert!(users.contains("/api/login?u=user%207"), "{users:?}");
    assert!(logins.iter().all(|s| s.headers["x-key"] == "k-e2e"));
    let seqs: BTreeSet<_> = logins.iter().map(|s| s.body.clone()).collect();
    assert_eq!(seqs.len(), 120);
    let me: Vec<_> = seen.iter().filter(|s| s.path == "/api/me").collect();
    assert_eq!(me.len(), 120);
    assert!(me.iter().all(|s| {
        let sid = s.headers["x-sid"].as_str();
        s.headers["cookie"] == format!("sid={sid}")
            && s.headers["authorization"].starts_with("Bearer t-")
    }));
    let report = std::fs::read_to_string(dir.path().join("ok.json")).unwrap();
    assert!(!report.contains("k-e2e") && !report.contains("E2E_SESSION_KEY"));

    // 119 rows for 120 arrivals: refused before any load, naming the counts.
    let short: String = (0..119).map(|i| format!("{i},u{i}\n")).collect();
    std::fs::write(dir.path().join("few.csv"), format!("id,name\n{short}")).unwrap();
    let before = server.seen().len();
    let text = scenario(&server.url, "few.csv", "fail");
    let (code, out) = run_cli(dir.path(), "few", &text, "2").await;
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("119 rows, 120 arrivals: rows run out at t=2.0 s"),
        "{out}"
    );
    assert_eq!(server.seen().len(), before, "no load was sent");
}

/// `order: random`: 120 sessions over 3 agents draw from 10 rows, never running out (even with
/// `on_exhausted: fail`), exactly the rows the run seed and each arrival index draw, whatever
/// agent ran the arrival.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_rows_are_drawn_from_the_seed_and_the_arrival() {
    let server = LoginServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..10).map(|i| format!("{i},user {i}\n")).collect();
    std::fs::write(dir.path().join("ten.csv"), format!("id,name\n{rows}")).unwrap();
    let text = format!(
        "seed: 11\n{}",
        scenario(&server.url, "ten.csv", "fail").replace("order: shuffle", "order: random")
    );
    let (code, out) = run_cli(dir.path(), "random", &text, "3").await;
    assert_eq!(code, Some(0), "{out}");
    let mut got: BTreeMap<String, u64> = BTreeMap::new();
    for s in server
        .seen()
        .iter()
        .filter(|s| s.path.starts_with("/api/login"))
    {
        *got.entry(s.path.clone()).or_default() += 1;
    }
    let salt = stampede_core::data::DataSource::random_salt("users", 11);
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for k in 0..120 {
        let row = stampede_core::data::random_row(salt, k, 10);
        *want
            .entry(format!("/api/login?u=user%20{row}"))
            .or_default() += 1;
    }
    assert_eq!(got, want);
    assert!(want.len() > 5, "the draw spreads over the rows: {want:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_and_extraction_have_their_own_kinds() {
    let server = LoginServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"name: checks
target: {}
phases: [ {{ duration: 1s, arrival_rate: 20 }} ]
session:
  - name: login
    http: {{ path: /login }}
    extract: {{ nope: {{ json: /missing }} }}
  - name: other
    http: {{ path: /x }}
    check: {{ body_contains: never }}
"#,
        server.url
    );
    let (code, out) = run_cli(dir.path(), "checks", &text, "1").await;
    // No request succeeded (every login failed its extraction): a failed run, exit 2.
    assert_eq!(code, Some(2), "{out}");
    let r: stampede_core::report::Report =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("checks.json")).unwrap())
            .unwrap();
    assert_eq!(
        r.totals.errors.get("extract.nope"),
        Some(&20),
        "{:?}",
        r.totals.errors
    );
    let text = text.replace("json: /missing", "json: /token");
    let (_, out) = run_cli(dir.path(), "checks2", &text, "1").await;
    let r: stampede_core::report::Report =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("checks2.json")).unwrap())
            .unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        r.totals.errors.get("check.body_contains"),
        Some(&20),
        "{:?}",
        r.totals.errors
    );
}

/// `per: request` gives every request that reads the source a row of its own (three per
/// session here), each once across two agents; `per: connection` gives each connection of a
/// closed load one row, kept by every session on it; a share larger than a gRPC message
/// arrives whole, in chunks; too few rows for the connections is refused before any load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_bind_per_request_and_per_connection() {
    let server = LoginServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    // 60 rows of 100 KB: 6 MB, more than a 4 MiB message.
    let pad = "p".repeat(100_000);
    let rows: String = (0..60).map(|i| format!("{i},{pad}\n")).collect();
    std::fs::write(dir.path().join("items.csv"), format!("id,pad\n{rows}")).unwrap();
    let text = format!(
        r#"name: per-request
target: {}
data:
  items: {{ file: items.csv, per: request, on_exhausted: fail }}
phases: [ {{ duration: 1s, arrival_rate: 20 }} ]
session:
  - http: {{ path: /static }}
  - http: {{ path: '/item/${{items.id}}' }}
    repeat: 3
"#,
        server.url
    );
    let (code, out) = run_cli(dir.path(), "per-request", &text, "2").await;
    assert_eq!(code, Some(0), "{out}");
    let items: Vec<String> = server
        .seen()
        .iter()
        .filter_map(|s| s.path.strip_prefix("/api/item/").map(str::to_string))
        .collect();
    let distinct: BTreeSet<u32> = items.iter().map(|i| i.parse().unwrap()).collect();
    assert_eq!(items.len(), 60, "{items:?}");
    assert_eq!(distinct, (0..60).collect(), "each row once");

    let accounts = "u\na0\na1\na2\na3\n";
    std::fs::write(dir.path().join("accounts.csv"), accounts).unwrap();
    let closed = |url: &str| {
        format!(
            r#"name: per-connection
target: {url}
data:
  accounts: {{ file: accounts.csv, order: shuffle, per: connection, on_exhausted: fail }}
load: {{ model: closed, connections: 4, duration: 1s }}
session:
  - http: {{ path: '/who?u=${{accounts.u}}' }}
"#
        )
    };
    let before = server.seen().len();
    let (code, out) = run_cli(dir.path(), "per-connection", &closed(&server.url), "2").await;
    assert_eq!(code, Some(0), "{out}");
    let seen = server.seen();
    let mut by_conn: BTreeMap<u16, BTreeSet<String>> = BTreeMap::new();
    for s in &seen[before..] {
        if let Some(u) = s.path.strip_prefix("/api/who?u=") {
            by_conn.entry(s.peer).or_default().insert(u.to_string());
        }
    }
    assert_eq!(by_conn.len(), 4, "{by_conn:?}");
    assert!(by_conn.values().all(|u| u.len() == 1), "{by_conn:?}");
    let users: BTreeSet<_> = by_conn.values().flatten().cloned().collect();
    assert_eq!(users.len(), 4, "each connection its own row: {by_conn:?}");
    assert!(
        seen.len() - before > 8,
        "sessions reuse their connection's row"
    );

    std::fs::write(dir.path().join("accounts.csv"), "u\na0\na1\na2\n").unwrap();
    let before = server.seen().len();
    let (code, out) = run_cli(dir.path(), "few-accounts", &closed(&server.url), "2").await;
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("data.accounts: 3 rows, 4 connections: rows run out at connection 4 of 4"),
        "{out}"
    );
    assert_eq!(server.seen().len(), before, "no load was sent");
}

/// A run of `duration` at 20 sessions/s whose setup logs in once and whose sessions send the
/// token (and say which agent they ran on); `extra` goes before the setup steps.
pub(crate) fn setup_scenario(url: &str, duration: &str, extra: &str) -> String {
    format!(
        r#"name: setup
target: {url}
phases: [ {{ duration: {duration}, arrival_rate: 20 }} ]
{extra}setup:
  - name: login
    http: {{ method: post, path: /login, body: 'key=${{env:E2E_SESSION_KEY}}' }}
    extract: {{ token: {{ json: /token }} }}
    check: {{ json: {{ /status: ok }} }}
session:
  - name: me
    http: {{ path: /me, headers: {{ authorization: 'Bearer ${{setup.token}}', x-agent: '${{session.agent}}' }} }}
    check: {{ status: [200] }}
"#
    )
}

/// Setup steps run once per run before the load, outside the report: of two agents, one
/// logs in, and every session of both sends that login's token; a setup that fails its check
/// refuses the run before any session starts, naming the step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_runs_once_per_run_and_its_values_reach_every_session() {
    let server = LoginServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = setup_scenario(&server.url, "1s", "");
    let (code, out) = run_cli(dir.path(), "setup", &text, "2").await;
    assert_eq!(code, Some(0), "{out}");
    let seen = server.seen();
    let logins: Vec<_> = seen.iter().filter(|s| s.path == "/api/login").collect();
    assert_eq!(logins.len(), 1, "one login per run");
    assert!(logins.iter().all(|s| s.body == "key=k-e2e"));
    let tokens: BTreeSet<_> = seen
        .iter()
        .filter(|s| s.path == "/api/me")
        .map(|s| {
            (
                s.headers["x-agent"].clone(),
                s.headers["authorization"].clone(),
            )
        })
        .collect();
    assert_eq!(
        tokens,
        BTreeSet::from([
            ("0".to_string(), "Bearer t-1".to_string()),
            ("1".to_string(), "Bearer t-1".to_string())
        ]),
        "both agents' sessions send the one login's token"
    );
    let r: stampede_core::report::Report =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("setup.json")).unwrap())
            .unwrap();
    assert_eq!(
        r.totals.completed, 20,
        "setup requests are not in the report"
    );
    assert_eq!(r.steps.len(), 1);

    let before = server.seen().len();
    let text = text.replace("/status: ok", "/status: denied");
    let (code, out) = run_cli(dir.path(), "setup-fails", &text, "2").await;
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("setup[0] (login): check.json (status 200)"),
        "{out}"
    );
    assert!(
        server.seen()[before..]
            .iter()
            .all(|s| s.path == "/api/login"),
        "no session started"
    );
}

/// With `setup_refresh`, the agent that runs the setup logs in again while the load runs, and
/// the new token reaches the sessions of both agents (the other one through the controller);
/// the refreshes are not in the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_refresh_reaches_every_agent_and_stays_out_of_the_report() {
    let server = LoginServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = setup_scenario(&server.url, "3s", "setup_refresh: 1s\n");
    let (code, out) = run_cli(dir.path(), "setup-refresh", &text, "2").await;
    assert_eq!(code, Some(0), "{out}");
    let seen = server.seen();
    let logins = seen.iter().filter(|s| s.path == "/api/login").count();
    assert!(
        (3..=10).contains(&logins),
        "one login, then one a second while the run goes on: {logins}"
    );
    let mut by_agent: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in seen.iter().filter(|s| s.path == "/api/me") {
        by_agent
            .entry(s.headers["x-agent"].clone())
            .or_default()
            .insert(s.headers["authorization"].clone());
    }
    assert_eq!(by_agent.len(), 2, "{by_agent:?}");
    for (agent, tokens) in &by_agent {
        assert!(
            tokens.contains("Bearer t-1") && tokens.len() >= 2,
            "agent {agent} read the first token, then a refreshed one: {tokens:?}"
        );
    }
    let r: stampede_core::report::Report = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("setup-refresh.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(r.totals.completed, 60, "refreshes are not in the report");
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
}

/// The agent that runs and refreshes the setup is killed mid-run, with the loss tolerated:
/// another agent takes the refresh over, at once, and the sessions of both survivors go on
/// receiving tokens issued after the kill (a token that expires would otherwise fail every
/// request for the rest of the run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_agent_takes_over_the_setup_refresh_when_its_agent_is_lost() {
    let server = LoginServer::start().await;
    // Sorted by id, a-1 is the first member: the one that runs the setup.
    let (cluster, mut agents) = crate::cluster_with_agents(&["a-1", "a-2", "a-3"]).await;
    let url = cluster.url();
    let text = setup_scenario(
        &server.url,
        "8s",
        "setup_refresh: 1s\non_agent_loss: { tolerate: 50 }\n",
    )
    .replace("${env:E2E_SESSION_KEY}", "k-e2e");
    let mut c = client::connect(&url, Some(&cluster.token)).await.unwrap();
    let watch =
        tokio::spawn(
            async move { client::run_and_watch(&mut c, &text, Some(3), None, |_| {}).await },
        );
    let logins = |server: &LoginServer| {
        server
            .seen()
            .iter()
            .filter(|s| s.path == "/api/login")
            .count()
    };
    // Kill a-1 once it has logged in and refreshed once.
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while logins(&server) < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the setup agent refreshes");
    drop(agents.remove(0)); // SIGKILL
    let before = logins(&server);
    let r = crate::report_of(watch).await;
    drop(agents);
    cluster.stop().await;
    assert_eq!(r.outcome, RunOutcome::Incomplete, "{:?}", r.message);
    let after = logins(&server);
    assert!(
        after >= before + 2,
        "the refresh went on after the setup agent was lost: {before} logins, then {after}"
    );
    let seen = server.seen();
    for agent in ["1", "2"] {
        let newest = seen
            .iter()
            .filter(|s| s.path == "/api/me" && s.headers["x-agent"] == agent)
            .filter_map(|s| {
                s.headers["authorization"]
                    .strip_prefix("Bearer t-")?
                    .parse::<usize>()
                    .ok()
            })
            .max();
        assert!(
            newest.is_some_and(|n| n > before),
            "agent {agent} sent a token issued after the kill: newest t-{newest:?}, {before} logins before it"
        );
    }
}
