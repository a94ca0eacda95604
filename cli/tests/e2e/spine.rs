//! The spine: exact merge, ramps, agent loss, the dead-man switch, auth, bad input, live
//! snapshots, thresholds and exports.

use std::process::Command;
use std::time::Duration;

use stampede_cli::client::{self, Live};
use stampede_cli::local::LocalCluster;
use stampede_core::report::{Report, RunOutcome};

use crate::{
    cli_run_local_via, cluster_with_agents, run, scenario, spawn_agent, Proc, Target, BIN,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_merge_exactly_and_measure_the_delay() {
    let target = Target::start(5).await;
    let cluster = LocalCluster::start(3, None).await.unwrap();
    let text = scenario(&target.url, "  - { duration: 3s, arrival_rate: 100 }\n", "");
    let r = run(&cluster.url(), &cluster.token, &text, 3).await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert_eq!(r.totals.planned, 300);
    assert_eq!(r.totals.completed, 300, "errors: {:?}", r.totals.errors);
    assert!(r.totals.errors.is_empty());
    let per_agent: u64 = r.agents.iter().map(|a| a.completed).sum();
    assert_eq!(per_agent, r.totals.completed);
    assert_eq!(r.agents.len(), 3);
    assert!(
        r.agents.iter().all(|a| a.completed == 100),
        "{:?}",
        r.agents
    );
    assert_eq!(target.requests(), 300);
    // The target holds each answer 5 ms: no request can take less, at any speed (HDR's
    // lowest equivalent value may sit a few µs under it), and the time from the intended
    // send is never shorter than the time from the actual send.
    let (rt, st) = (&r.latency.response_time, &r.latency.service_time);
    eprintln!(
        "response p50 {} µs, service p50 {} µs",
        rt.p50_us, st.p50_us
    );
    assert!(st.min_us >= 4_990, "service min {} µs", st.min_us);
    assert!(rt.min_us >= st.min_us, "{rt:?} {st:?}");
    assert_eq!(rt.count, 300);
    assert_eq!(st.count, 300);
    for (r, s) in [
        (rt.p50_us, st.p50_us),
        (rt.p99_us, st.p99_us),
        (rt.max_us, st.max_us),
    ] {
        assert!(s <= r, "service {s} µs above response {r} µs");
    }
    // The report was persisted and can be fetched after the watch ended.
    let mut c = client::connect(&cluster.url(), Some(&cluster.token))
        .await
        .unwrap();
    let again = client::get_report(&mut c, &r.run_id).await.unwrap();
    assert_eq!(again.totals.completed, 300);
    cluster.stop().await;
}

/// `--threads 1`, what a process on one CPU gets by default, runs the CLI, the embedded
/// agent's load and its ticker on the main thread (a current-thread runtime): a closed run
/// and an open one count exactly what the target served, and the open one its whole plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_run_on_one_thread_counts_what_was_served() {
    let target = Target::start(0).await;
    let dir = tempfile::tempdir().unwrap();
    let closed = format!(
        "name: one-thread\ntarget: {}\nload: {{ model: closed, connections: 8, duration: 2s }}\n\
         session:\n  - http: {{ method: GET, path: /data }}\n",
        target.url
    );
    let open = scenario(&target.url, "  - { duration: 2s, arrival_rate: 100 }\n", "");
    let path = dir.path().to_path_buf();
    let runs = tokio::task::spawn_blocking(move || {
        [("closed", closed), ("open", open)].map(|(name, text)| {
            let mut cmd = Command::new(BIN);
            cmd.args(["--threads", "1"]);
            cli_run_local_via(cmd, &path, name, &text)
        })
    })
    .await
    .unwrap();
    let [closed, open] = runs;
    for r in [&closed, &open] {
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        assert!(r.report.totals.errors.is_empty(), "{:?}", r.report.totals);
    }
    assert!(
        closed.report.totals.completed > 100,
        "{:?}",
        closed.report.totals
    );
    assert_eq!(open.report.totals.planned, 200);
    assert_eq!(open.report.totals.completed, 200);
    assert_eq!(
        target.requests(),
        closed.report.totals.completed + open.report.totals.completed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ramp_phases_plan_the_integral_of_their_rate() {
    let target = Target::start(0).await;
    let cluster = LocalCluster::start(2, None).await.unwrap();
    let phases = "  - { name: flat, duration: 2s, arrival_rate: 25 }\n  - { name: ramp, duration: 3s, arrival_rate: 25, ramp_to: 95 }\n";
    let r = run(
        &cluster.url(),
        &cluster.token,
        &scenario(&target.url, phases, ""),
        2,
    )
    .await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    let integrals = [50.0, 180.0];
    for (p, want) in r.phases.iter().zip(integrals) {
        assert!(
            (p.planned as f64 - want).abs() <= 1.0,
            "{}: planned {} vs integral {want}",
            p.name,
            p.planned
        );
        assert_eq!(p.completed, p.planned, "{}", p.name);
    }
    assert_eq!(r.totals.completed, 230);
    cluster.stop().await;
}

/// Runs 3 child-process agents, kills one mid-run, and returns the report.
async fn run_killing_one_agent(policy: &str) -> (Report, String) {
    let target = Target::start(1).await;
    let (cluster, mut agents) = cluster_with_agents(&["a-1", "a-2", "a-3"]).await;
    let url = cluster.url();
    let text = scenario(
        &target.url,
        "  - { duration: 6s, arrival_rate: 60 }\n",
        &format!("on_agent_loss: {policy}\n"),
    );
    let mut c = client::connect(&url, Some(&cluster.token)).await.unwrap();
    let watch =
        tokio::spawn(
            async move { client::run_and_watch(&mut c, &text, Some(3), None, |_| {}).await },
        );
    // Kill a-2 once load is flowing.
    let srv = target.server.clone();
    tokio::time::timeout(
        Duration::from_secs(20),
        srv.wait_until(|s| s.requests_total >= 60),
    )
    .await
    .expect("load started");
    let victim = agents.remove(1);
    drop(victim); // SIGKILL
    let r = crate::report_of(watch).await;
    drop(agents);
    cluster.stop().await;
    (r, "a-2".to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_an_agent_fails_the_run_under_fail_policy() {
    let (r, victim) = run_killing_one_agent("fail").await;
    assert_eq!(r.outcome, RunOutcome::Failed);
    let msg = r.message.clone().unwrap_or_default();
    assert!(msg.contains(&victim) && msg.contains("lost"), "{msg}");
    let lost: Vec<_> = r
        .agents
        .iter()
        .filter(|a| a.lost)
        .map(|a| a.id.clone())
        .collect();
    assert_eq!(lost, vec![victim]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_an_agent_is_tolerated_and_reported() {
    let (r, victim) = run_killing_one_agent("{ tolerate: 50 }").await;
    // Tolerated, but less than planned was delivered: incomplete, never succeeded.
    assert_eq!(r.outcome, RunOutcome::Incomplete, "{:?}", r.message);
    assert!(
        r.message.as_deref().unwrap_or_default().contains(&victim),
        "{:?}",
        r.message
    );
    let a = r.agents.iter().find(|a| a.id == victim).unwrap();
    assert!(a.lost);
    assert!(
        a.lost_share > 0.0 && a.lost_share < 0.34,
        "{}",
        a.lost_share
    );
    assert!((r.lost_share - a.lost_share).abs() < 1e-9);
    for other in r.agents.iter().filter(|a| a.id != victim) {
        assert!(!other.lost);
        assert_eq!(other.completed, other.planned, "{other:?}");
    }
    assert!(
        r.generator.warnings.iter().any(|w| w.contains(&victim)),
        "{:?}",
        r.generator.warnings
    );
}

/// Without a restart grace, load stops at the lease. (With one, the agents ride out the grace
/// for a controller that restarts; the agent's watchdog tests bound that under a paused clock.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_stop_within_two_seconds_when_the_controller_dies() {
    let target = Target::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let token = stampede_cli::random_token();
    let (controller, url) = crate::spawn_controller_with(
        "127.0.0.1:0",
        &token,
        dir.path(),
        &["--restart-grace", "0s"],
    );
    let agents: Vec<Proc> = ["k-1", "k-2", "k-3"]
        .iter()
        .map(|id| spawn_agent(&url, &token, id))
        .collect();
    let mut c = client::connect(&url, Some(&token)).await.unwrap();
    let text = scenario(
        &target.url,
        "  - { duration: 30s, arrival_rate: 200 }\n",
        "",
    );
    let _run = c
        .submit_run(stampede_proto::v1::SubmitRunRequest {
            scenario: text,
            agents: 3,
            agent_wait_ms: 20_000,
        })
        .await
        .unwrap();
    let srv = target.server.clone();
    tokio::time::timeout(
        Duration::from_secs(30),
        srv.wait_until(|s| s.requests_total >= 200),
    )
    .await
    .expect("load started");
    // SIGKILL: no goodbye to the agents. Load must stop within 2 s of it.
    drop(controller);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let at_2s = target.requests();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let at_3s = target.requests();
    assert_eq!(
        at_2s, at_3s,
        "agents still sending 2 s after the controller died"
    );
    assert!(at_2s < 30 * 200, "the run was not cut short");
    drop(agents);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_agents_fail_with_a_clear_message() {
    let target = Target::start(0).await;
    let cluster = LocalCluster::start(1, None).await.unwrap();
    let mut c = client::connect(&cluster.url(), Some(&cluster.token))
        .await
        .unwrap();
    let text = scenario(&target.url, "  - { duration: 1s, arrival_rate: 10 }\n", "");
    let r = client::run_and_watch(
        &mut c,
        &text,
        Some(2),
        Some(Duration::from_millis(500)),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(r.outcome, RunOutcome::Failed);
    let msg = r.message.unwrap_or_default();
    assert!(
        msg.contains("needs 2 agents") && msg.contains("only 1"),
        "{msg}"
    );
    assert_eq!(target.requests(), 0);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_token_is_unauthenticated_and_health_stays_open() {
    let cluster = LocalCluster::start(0, None).await.unwrap();
    let mut c = client::connect(&cluster.url(), Some("wrong"))
        .await
        .unwrap();
    let err = c
        .list_agents(stampede_proto::v1::ListAgentsRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    let mut anon = client::connect(&cluster.url(), None).await.unwrap();
    assert_eq!(
        anon.list_runs(stampede_proto::v1::ListRunsRequest {})
            .await
            .unwrap_err()
            .code(),
        tonic::Code::Unauthenticated
    );
    // An agent with a wrong token never registers.
    let bad = spawn_agent(&cluster.url(), "wrong", "intruder");
    let channel = tonic::transport::Endpoint::from_shared(cluster.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let resp = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "stampede.v1.ControlService".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        resp.into_inner().status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    assert_eq!(cluster.controller.agent_count(), 0);
    drop(bad);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_scenarios_get_clear_errors_and_no_panic() {
    let cases = [
        (
            "phases:\n  - { duration: 1s, arrival_rate: fast }\n",
            "phases[0].arrival_rate",
        ),
        (
            "phases:\n  - { duration: 1s, arrival_rate: -3 }\n",
            "phases[0].arrival_rate: must be >= 0",
        ),
        (
            "phases:\n  - { duration: 1s, arrival_rate: 3, ramp_to: -1 }\n",
            "phases[0].ramp_to: must be >= 0",
        ),
        ("phases: []\n", "phases: must contain at least one phase"),
        (
            "phases:\n  - { duration: soon, arrival_rate: 3 }\n",
            "phases[0].duration",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, (phases, expected)) in cases.iter().enumerate() {
        let text = format!(
            "name: bad\ntarget: http://127.0.0.1:9\n{phases}session:\n  - http: {{ path: / }}\n"
        );
        let path = dir.path().join(format!("bad{i}.yaml"));
        std::fs::write(&path, &text).unwrap();
        let out = Command::new(BIN)
            .args(["run", "--local"])
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(expected),
            "expected `{expected}` in: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let path = dir.path().join("proto.yaml");
    std::fs::write(&path, "name: x\ntarget: http://127.0.0.1:9\nphases:\n  - { duration: 1s, arrival_rate: 1 }\nsession:\n  - gopher: { path: / }\n").unwrap();
    let out = Command::new(BIN)
        .arg("validate")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("session[0].gopher: unknown field `gopher`"),
        "{stderr}"
    );

    // The controller applies the same validation at its boundary.
    let cluster = LocalCluster::start(0, None).await.unwrap();
    let mut c = client::connect(&cluster.url(), Some(&cluster.token))
        .await
        .unwrap();
    let err = c
        .submit_run(stampede_proto::v1::SubmitRunRequest {
            scenario: "name: x\nphases: 7\n".into(),
            agents: 1,
            agent_wait_ms: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("phases"), "{}", err.message());
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_snapshots_arrive_while_the_run_goes_on() {
    let target = Target::start(0).await;
    let cluster = LocalCluster::start(1, None).await.unwrap();
    let mut c = client::connect(&cluster.url(), Some(&cluster.token))
        .await
        .unwrap();
    let observe = format!(
        "observe: [ {{ prometheus: \"{}/metrics\" }} ]\n",
        target.url
    );
    let text = scenario(
        &target.url,
        "  - { duration: 3s, arrival_rate: 50 }\n",
        &observe,
    );
    let mut snapshots = Vec::new();
    let mut watched = Vec::new();
    let mut states = Vec::new();
    let r = client::run_and_watch(&mut c, &text, Some(1), None, |l| match l {
        Live::Snapshot(s) => {
            snapshots.push(s.completed);
            watched.push((
                s.target_cpu_cores,
                s.busiest_agent.clone(),
                s.busiest_agent_cpu_pct,
            ));
        }
        Live::State(s) => states.push(s.state.clone()),
        Live::Debug(_) => {}
    })
    .await
    .unwrap();
    assert_eq!(r.totals.completed, 150);
    assert!(snapshots.len() >= 2, "{snapshots:?}");
    // The live view carries the target's cores (from its scrapes) and the busiest agent's CPU.
    let agent = &r.agents[0].id;
    assert!(
        watched.iter().any(|(cores, busiest, pct)| {
            cores.is_some_and(|c| c.is_finite() && c >= 0.0)
                && busiest == agent
                && pct.is_some_and(|p| (0.0..=1_000.0).contains(&p))
        }),
        "{watched:?}"
    );
    assert!(snapshots.windows(2).all(|w| w[0] <= w[1]));
    assert!(
        states.contains(&"running".to_string()) && states.last() == Some(&"done".to_string()),
        "{states:?}"
    );
    assert!(!r.timeline.is_empty());
    let timeline_total: u64 = r.timeline.iter().map(|t| t.completed).sum();
    assert_eq!(timeline_total, 150);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thresholds_set_the_exit_code() {
    let target = Target::start(2).await;
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[\"p99 < 5s\", \"error_rate < 1%\", \"throughput >= 99% planned\"]",
            0,
        ),
        ("[\"p99 < 1ms\"]", 1),
    ];
    for (i, (thresholds, code)) in cases.iter().enumerate() {
        let text = scenario(
            &target.url,
            "  - { duration: 1s, arrival_rate: 40 }\n",
            &format!("thresholds: {thresholds}\n"),
        );
        let path = dir.path().join(format!("t{i}.yaml"));
        std::fs::write(&path, text).unwrap();
        let report = dir.path().join(format!("t{i}.json"));
        let out = Command::new(BIN)
            .args(["run", "--local", "--quiet", "--agents", "2", "--report"])
            .arg(&report)
            .arg(&path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(*code),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("Thresholds"), "{stdout}");
        let r: Report = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        assert_eq!(r.thresholds.iter().all(|t| t.passed), *code == 0);
    }
    // A run that cannot complete exits 2 (no agent can reach the controller in time).
    let text = scenario(
        &target.url,
        "  - { duration: 1s, arrival_rate: 40 }\n",
        "thresholds: [\"p99 < 5s\"]\n",
    );
    let path = dir.path().join("lost.yaml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(BIN)
        .args([
            "run",
            "--quiet",
            "--controller",
            "http://127.0.0.1:1",
            "--token",
            "x",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `.hlog` decodes with an independent HdrHistogram implementation (Python's `hdrh`) to the
/// same percentiles as our report. CI installs `hdrhistogram` and sets `STAMPEDE_PYTHON`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hdr_log_matches_an_independent_decoder() {
    let python = std::env::var("STAMPEDE_PYTHON").unwrap_or_else(|_| "python3".into());
    let has_hdrh = Command::new(&python)
        .args(["-c", "import hdrh"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_hdrh {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must provide python with the hdrhistogram package ({python})"
        );
        eprintln!("SKIPPED hdr_log_matches_an_independent_decoder: `{python}` has no hdrh module (pip install hdrhistogram)");
        return;
    }
    let target = Target::start(0).await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "name: hlog\ntarget: {}\nphases:\n  - {{ duration: 2s, arrival_rate: 100 }}\nsession:\n  - http: {{ path: '/delay?ms=1' }}\n  - http: {{ path: '/delay?ms=4' }}\n",
        target.url
    );
    let scenario = dir.path().join("s.yaml");
    std::fs::write(&scenario, text).unwrap();
    let (hlog, report, csv) = (
        dir.path().join("r.hlog"),
        dir.path().join("r.json"),
        dir.path().join("r.csv"),
    );
    let out = Command::new(BIN)
        .args(["run", "--local", "--quiet", "--agents", "2", "--hdr-log"])
        .arg(&hlog)
        .arg("--report")
        .arg(&report)
        .arg("--csv")
        .arg(&csv)
        .arg(&scenario)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Report = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/hlog_check.py");
    let py = Command::new(&python)
        .arg(script)
        .arg(&hlog)
        .output()
        .unwrap();
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    let theirs: serde_json::Value = serde_json::from_slice(&py.stdout).unwrap();
    let ours = &r.latency.response_time;
    assert_eq!(theirs["count"].as_u64(), Some(ours.count));
    assert_eq!(ours.count, 400);
    for (key, mine) in [
        ("p50", ours.p50_us),
        ("p90", ours.p90_us),
        ("p99", ours.p99_us),
        ("max", ours.max_us),
    ] {
        assert_eq!(
            theirs[key].as_u64(),
            Some(mine),
            "{key}: python {} vs ours {mine}",
            theirs[key]
        );
    }
    let rows = std::fs::read_to_string(&csv).unwrap();
    let completed: u64 = rows
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(3).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(completed, 400);
}
