//! Faults of the control plane, with real processes: a controller killed mid-run and started
//! again over the same data directory, which re-adopts the run.

use std::time::Duration;

use stampede_cli::client;
use stampede_core::report::RunOutcome;
use stampede_proto::v1;

use crate::{spawn_agent, spawn_controller_on, spawn_controller_with, Target};

/// A fresh port on loopback for a controller that must come back on the same address.
pub(crate) fn fresh_listen() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// Submits `scenario` and waits (bounded) until the run is running.
async fn submit_running(url: &str, token: &str, scenario: &str) -> String {
    submit_running_on(url, token, scenario, 1).await
}

/// Submits `scenario` on `agents` agents and waits (bounded) until the run is running.
pub(crate) async fn submit_running_on(
    url: &str,
    token: &str,
    scenario: &str,
    agents: u32,
) -> String {
    let mut c = client::connect(url, Some(token)).await.unwrap();
    let run_id = client::submit(
        &mut c,
        scenario,
        Some(agents),
        Some(Duration::from_secs(20)),
    )
    .await
    .unwrap();
    let running = async {
        loop {
            let runs = c
                .list_runs(v1::ListRunsRequest {})
                .await
                .unwrap()
                .into_inner();
            if runs
                .runs
                .iter()
                .any(|r| r.run_id == run_id && r.state == "running")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("running");
    run_id
}

/// Polls (bounded) a restarted controller for a run's report.
pub(crate) async fn report_after_restart(
    url: &str,
    token: &str,
    run_id: &str,
) -> stampede_core::report::Report {
    let fetch = async {
        loop {
            if let Ok(mut c) = client::connect(url, Some(token)).await {
                if let Ok(r) = client::get_report(&mut c, run_id).await {
                    return r;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(40), fetch)
        .await
        .expect("the report of the re-adopted run")
}

/// The controller is SIGKILLed mid-run and started again on the same address and data
/// directory: it re-adopts the run from its checkpoint, the agent (which kept loading through
/// the restart) comes back and replays what was not checkpointed, and the run ends
/// `succeeded` with exactly what the target served: nothing lost, nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_mid_run_comes_back_and_the_run_loses_nothing() {
    let target = Target::start(0).await;
    let data = tempfile::tempdir().unwrap();
    let listen = fresh_listen();
    let token = "restart-token";
    let (mut controller, url) = spawn_controller_on(&listen, token, data.path());
    let _agent = spawn_agent(&url, token, "restart-agent");
    let scenario = format!(
        "name: long\ntarget: {}\nphases:\n  - {{ duration: 6s, arrival_rate: 50 }}\nsession:\n  - http: {{ path: /data }}\n",
        target.url
    );
    let run_id = submit_running(&url, token, &scenario).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The controller dies without a chance to say anything, and comes back a second later.
    controller.0.kill().unwrap();
    controller.0.wait().unwrap();
    let at_kill = target.requests();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_controller, url) = spawn_controller_on(&listen, token, data.path());

    let r = report_after_restart(&url, token, &run_id).await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert!(
        target.requests() > at_kill,
        "the load went on through the restart"
    );
    assert_eq!(r.totals.completed, 300, "the whole schedule, once");
    assert_eq!(
        r.totals.completed,
        target.requests(),
        "what the target served"
    );
    assert!(
        !data
            .path()
            .join("checkpoints")
            .join(format!("{run_id}.json"))
            .exists(),
        "the checkpoint goes with the stored report"
    );

    // The agent is free for the next run.
    let short = format!(
        "name: after\ntarget: {}\nphases:\n  - {{ duration: 1s, arrival_rate: 20 }}\nsession:\n  - http: {{ path: /data }}\n",
        target.url
    );
    let next = crate::run(&url, token, &short, 1).await;
    assert_eq!(next.outcome, RunOutcome::Succeeded, "{:?}", next.message);
    assert_eq!(next.totals.completed, 20);
}

/// The controller is SIGKILLed mid-run, and its agent dies too: the restarted controller
/// re-adopts the run, waits for the agent its lease and restart grace, then ends the run
/// `failed`, naming the agent and why; its report is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_adopted_run_whose_agent_never_returns_fails_after_the_grace() {
    let target = Target::start(0).await;
    let data = tempfile::tempdir().unwrap();
    let listen = fresh_listen();
    let token = "restart-token";
    let grace = ["--restart-grace", "2s"];
    let (mut controller, url) = spawn_controller_with(&listen, token, data.path(), &grace);
    let mut agent = spawn_agent(&url, token, "gone-agent");
    let scenario = format!(
        "name: long\ntarget: {}\nphases:\n  - {{ duration: 60s, arrival_rate: 50 }}\nsession:\n  - http: {{ path: /data }}\n",
        target.url
    );
    let run_id = submit_running(&url, token, &scenario).await;
    // Past two intervals: the first is checkpointed at the second's tick.
    tokio::time::sleep(Duration::from_secs(3)).await;
    controller.0.kill().unwrap();
    controller.0.wait().unwrap();
    agent.0.kill().unwrap();
    agent.0.wait().unwrap();
    let restarted = std::time::Instant::now();
    let (_controller, url) = spawn_controller_with(&listen, token, data.path(), &grace);

    let r = report_after_restart(&url, token, &run_id).await;
    assert_eq!(r.outcome, RunOutcome::Failed, "{:?}", r.message);
    let message = r.message.unwrap_or_default();
    assert!(
        message.contains("gone-agent") && message.contains("not back within"),
        "{message}"
    );
    // Lease 1 s + grace 2 s + the rejoin margin, not the run's remaining minute.
    assert!(restarted.elapsed() < Duration::from_secs(20));
    assert!(
        r.totals.completed > 0,
        "what was merged before the kill is kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_past_grpc_default_size_reaches_the_agents_and_a_huge_one_is_refused() {
    let target = Target::start_with(stampede_target_servers::http::HttpConfig {
        max_body_bytes: 8 << 20,
        ..Default::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    // Five steps with 1 MiB bodies (the most one body may have): the Assign that carries
    // them is over tonic's default 4 MiB.
    let step = format!(
        "  - http: {{ method: POST, path: /echo, body: '{}' }}\n",
        "x".repeat(1 << 20)
    );
    let text = format!(
        "name: big\ntarget: {}\nphases:\n  - {{ duration: 1s, arrival_rate: 2 }}\nsession:\n{}",
        target.url,
        step.repeat(5)
    );
    let d = dir.path().to_path_buf();
    let run = tokio::task::spawn_blocking(move || crate::cli_run_local(&d, "big", &text))
        .await
        .unwrap();
    assert_eq!(
        run.code,
        Some(0),
        "{}\n{:?}",
        run.stderr,
        run.report.message
    );
    assert_eq!(run.report.totals.completed, 10);
    assert!(run.report.totals.bytes_sent > 10 << 20);
    // Past the bound: refused by the CLI, naming it, before any load.
    let huge = format!(
        "name: huge\ntarget: {}\nphases:\n  - {{ duration: 1s, arrival_rate: 2 }}\nsession:\n  - http: {{ method: POST, path: /echo, body: '{}' }}\n",
        target.url,
        "x".repeat(33 << 20)
    );
    let path = dir.path().join("huge.yaml");
    std::fs::write(&path, huge).unwrap();
    let out = std::process::Command::new(crate::BIN)
        .args(["validate"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at most 32 MiB"));
    assert_eq!(target.requests(), 10);
}

/// A report the controller cannot store (its `runs` folder replaced by a file) fails the run:
/// in what `stampede run` prints and in its exit code (2), not only in `stampede status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_that_cannot_be_stored_fails_the_run() {
    let target = Target::start(0).await;
    let data = tempfile::tempdir().unwrap();
    let token = "unstored-token";
    let (_controller, url) = crate::spawn_controller(token, data.path());
    let _agent = spawn_agent(&url, token, "unstored-agent");
    let runs = data.path().join("runs");
    if runs.exists() {
        std::fs::remove_dir_all(&runs).unwrap();
    }
    std::fs::write(&runs, "not a folder").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.yaml");
    std::fs::write(
        &path,
        crate::scenario(&target.url, "  - { duration: 1s, arrival_rate: 10 }\n", ""),
    )
    .unwrap();
    let report = dir.path().join("r.json");
    let out = tokio::process::Command::new(crate::BIN)
        .args(["run", "--quiet", "--agents", "1", "--agent-wait", "20s"])
        .args(["--controller", &url, "--report"])
        .env("STAMPEDE_TOKEN", token)
        .arg(&report)
        .arg(&path)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("the run ends")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    let r: stampede_core::report::Report =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r.outcome, RunOutcome::Failed);
    assert_eq!(r.totals.completed, 10, "the load itself ran");
    let why = r.message.unwrap_or_default();
    assert!(why.contains("could not be persisted"), "{why}");
    assert!(stdout.contains("failed"), "{stdout}");
}
