//! Workloads and exact weighted session mixes: two traffic shapes from one T0 over three real
//! agents, one of them a 3:1 mix, against a real server whose access log says what it served.

use std::collections::BTreeMap;

use stampede_cli::local::LocalCluster;
use stampede_core::report::RunOutcome;
use stampede_target_servers::http::{AccessLog, HttpConfig};

use crate::{run, Target};

/// Requests per path in an access log (`<unix-ms> <ip> "<METHOD> <path> <version>" ...`), and
/// the first time each path was served.
fn served(log: &std::path::Path) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let (mut counts, mut first) = (BTreeMap::new(), BTreeMap::new());
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let ms: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
        let Some(path) = words.nth(2) else { continue };
        *counts.entry(path.to_string()).or_insert(0) += 1;
        first.entry(path.to_string()).or_insert(ms);
    }
    (counts, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workloads_from_one_t0_and_an_exact_mix_over_three_agents() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let target = Target::start_with(HttpConfig {
        access_log: AccessLog::File(log.clone()),
        access_log_buffer: 1,
        ..HttpConfig::default()
    })
    .await;
    let cluster = LocalCluster::start(3, None).await.unwrap();
    let text = format!(
        "name: e2e-mix
target: {}
workloads:
  - name: shoppers
    phases: [ {{ duration: 3s, arrival_rate: 40 }} ]
    sessions:
      - {{ name: browse, weight: 3, steps: [ {{ http: {{ method: GET, path: /browse }} }} ] }}
      - {{ name: checkout, weight: 1, steps: [ {{ http: {{ method: GET, path: /checkout }} }}, {{ http: {{ method: GET, path: /pay }} }} ] }}
  - name: background
    start: 1s
    load: {{ model: constant, rate: 20, connections: 2, duration: 2s }}
    session: [ {{ http: {{ method: GET, path: /bg }} }} ]
thresholds: [ \"workload(background).error_rate < 1%\", \"session(checkout).p99 < 5s\" ]
",
        target.url
    );
    let (url, token) = (cluster.url(), cluster.token.clone());
    let r = run(&url, &token, &text, 3).await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert_eq!(target.requests(), 190, "served in all");
    // The log is written through a buffer flushed by the server: wait for all of it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (counts, first) = loop {
        let (counts, first) = served(&log);
        if counts.values().sum::<u64>() >= 190 || std::time::Instant::now() > deadline {
            break (counts, first);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    // 120 shopper arrivals, 3:1 exactly; 40 background slots, none before their start, all
    // run though the background's 2 connections are fewer than the 3 agents (its slots go
    // only to the agents holding them).
    assert_eq!(counts.get("/browse"), Some(&90), "{counts:?}");
    assert_eq!(counts.get("/checkout"), Some(&30), "{counts:?}");
    assert_eq!(counts.get("/pay"), Some(&30), "{counts:?}");
    assert_eq!(counts.get("/bg"), Some(&40), "{counts:?}");
    assert!(
        first["/bg"] >= first["/browse"] + 900,
        "the background workload started {} ms after the shoppers, not 1 s",
        first["/bg"] - first["/browse"]
    );
    assert_eq!(r.workloads.len(), 2);
    let shoppers = &r.workloads[0];
    assert_eq!(shoppers.figures.name, "shoppers");
    assert_eq!(shoppers.figures.planned, 150, "90 + 30 × 2 requests");
    assert_eq!(shoppers.figures.completed, 150);
    let types: Vec<(&str, u64, u64)> = shoppers
        .session_types
        .iter()
        .map(|t| (t.name.as_str(), t.planned, t.started))
        .collect();
    assert_eq!(types, [("browse", 90, 90), ("checkout", 30, 30)]);
    let background = &r.workloads[1];
    assert_eq!(
        (background.model.as_str(), background.figures.start_s),
        ("constant", 1.0)
    );
    assert_eq!(background.figures.completed, 40);
    assert_eq!(r.totals.planned, 190);
    assert_eq!(r.totals.completed, 190);
    let names: Vec<&str> = r.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "shoppers/browse/step-1",
            "shoppers/checkout/step-1",
            "shoppers/checkout/step-2",
            "background/step-1"
        ]
    );
    assert!(r.thresholds.iter().all(|t| t.passed), "{:?}", r.thresholds);
}

/// A server on a port of its own that logs every request it serves.
async fn logged_target(dir: &std::path::Path, name: &str) -> (Target, std::path::PathBuf) {
    let log = dir.join(format!("{name}.log"));
    let target = Target::start_with(HttpConfig {
        access_log: AccessLog::File(log.clone()),
        access_log_buffer: 1,
        ..HttpConfig::default()
    })
    .await;
    (target, log)
}

/// A target URL's `host:port`, what a `target()` scope names.
fn host_port(url: &str) -> &str {
    url.strip_prefix("http://").unwrap_or(url)
}

/// Waits until `log` holds `n` requests (it is flushed by the server), then counts them.
async fn served_at_least(log: &std::path::Path, n: u64) -> BTreeMap<String, u64> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (counts, _) = served(log);
        if counts.values().sum::<u64>() >= n || std::time::Instant::now() > deadline {
            return counts;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_workload_loads_its_own_target_over_two_agents() {
    let dir = tempfile::tempdir().unwrap();
    let (auth, auth_log) = logged_target(dir.path(), "auth").await;
    let (api, api_log) = logged_target(dir.path(), "api").await;
    let cluster = LocalCluster::start(2, None).await.unwrap();
    // `auth` loads the scenario's target, `api` one of its own.
    let text = format!(
        "name: e2e-targets
target: {}
workloads:
  - name: auth
    phases: [ {{ duration: 2s, arrival_rate: 30 }} ]
    session: [ {{ http: {{ method: GET, path: /auth }} }} ]
  - name: api
    target: {}
    phases: [ {{ duration: 2s, arrival_rate: 20 }} ]
    session: [ {{ http: {{ method: GET, path: /api }} }} ]
thresholds: [ \"target({}).error_rate < 1%\", \"target({}).p99 < 5s\" ]
",
        auth.url,
        api.url,
        host_port(&auth.url),
        host_port(&api.url)
    );
    let (url, token) = (cluster.url(), cluster.token.clone());
    let r = run(&url, &token, &text, 2).await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    let (on_auth, on_api) = (
        served_at_least(&auth_log, 60).await,
        served_at_least(&api_log, 40).await,
    );
    assert_eq!(on_auth, BTreeMap::from([("/auth".to_string(), 60)]));
    assert_eq!(on_api, BTreeMap::from([("/api".to_string(), 40)]));
    assert_eq!((auth.requests(), api.requests()), (60, 40));
    let rows: Vec<(&str, &str, u64)> = r
        .workloads
        .iter()
        .map(|w| {
            (
                w.figures.name.as_str(),
                w.target.as_str(),
                w.figures.completed,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("auth", auth.url.as_str(), 60),
            ("api", api.url.as_str(), 40)
        ]
    );
    // Each target has its row, what `target(host:port)` judges.
    let targets: Vec<(&str, &str, u64, &[String])> = r
        .targets
        .iter()
        .map(|t| {
            (
                t.figures.name.as_str(),
                t.url.as_str(),
                t.figures.completed,
                t.workloads.as_slice(),
            )
        })
        .collect();
    let (auth_name, api_name) = (host_port(&auth.url), host_port(&api.url));
    assert_eq!(
        targets,
        [
            (auth_name, auth.url.as_str(), 60, &["auth".to_string()][..]),
            (api_name, api.url.as_str(), 40, &["api".to_string()][..])
        ]
    );
    let judged: Vec<(&str, bool)> = r
        .thresholds
        .iter()
        .filter(|t| t.expr.starts_with("target("))
        .map(|t| (t.measured_text.as_str(), t.passed))
        .collect();
    assert_eq!(judged.len(), 2, "{:?}", r.thresholds);
    assert_eq!(judged[0], ("0.000%", true), "{:?}", r.thresholds);
    assert!(judged[1].1, "{:?}", r.thresholds);
    // Each target's address has its row.
    let mut endpoints: Vec<(String, u64)> = r
        .endpoints
        .iter()
        .map(|e| (format!("http://{}", e.address), e.completed))
        .collect();
    endpoints.sort();
    let mut want = vec![(auth.url.clone(), 60), (api.url.clone(), 40)];
    want.sort();
    assert_eq!(endpoints, want);
    cluster.stop().await;
}
