//! Faults of the control plane, with real processes: a controller killed mid-run and started
//! again over the same data directory.

use std::time::Duration;

use stampede_cli::client;
use stampede_core::report::RunOutcome;
use stampede_proto::v1;

use crate::{spawn_agent, spawn_controller_on, Target};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_restart_fails_the_runs_in_flight_and_frees_their_agents() {
    let target = Target::start(0).await;
    let data = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let token = "restart-token";
    let (mut controller, url) = spawn_controller_on(&listen, token, data.path());
    let _agent = spawn_agent(&url, token, "restart-agent");

    // A long run, followed until it is running.
    let long = format!(
        "name: long\ntarget: {}\nphases:\n  - {{ duration: 60s, arrival_rate: 50 }}\nsession:\n  - http: {{ path: /data }}\n",
        target.url
    );
    let mut c = client::connect(&url, Some(token)).await.unwrap();
    let run_id = client::submit(&mut c, &long, Some(1), Some(Duration::from_secs(20)))
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

    // The controller dies without a chance to say anything, and comes back.
    controller.0.kill().unwrap();
    controller.0.wait().unwrap();
    let sent_at_kill = target.requests();
    let (_controller, url) = spawn_controller_on(&listen, token, data.path());

    // The run it lost is failed, with a report that says why.
    let mut c = client::connect(&url, Some(token)).await.unwrap();
    let r = client::get_report(&mut c, &run_id).await.unwrap();
    assert_eq!(r.outcome, RunOutcome::Failed);
    assert!(
        r.message
            .as_deref()
            .unwrap_or_default()
            .contains("controller restarted"),
        "{:?}",
        r.message
    );
    let runs = c
        .list_runs(v1::ListRunsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(runs
        .runs
        .iter()
        .any(|x| x.run_id == run_id && x.state == "failed"));

    // The agent stopped the orphaned load, came back, and is free for the next run.
    let short = format!(
        "name: after\ntarget: {}\nphases:\n  - {{ duration: 1s, arrival_rate: 20 }}\nsession:\n  - http: {{ path: /data }}\n",
        target.url
    );
    let next = crate::run(&url, token, &short, 1).await;
    assert_eq!(next.outcome, RunOutcome::Succeeded, "{:?}", next.message);
    assert_eq!(next.totals.completed, 20);
    // The orphaned load stopped within its lease (1 s): far fewer than the 50/s of the lost
    // run's remaining minute reached the target besides the new run's 20.
    let after = target.requests() - sent_at_kill;
    assert!(
        after < 20 + 50 * 5,
        "the orphaned load went on: {after} requests after the kill"
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
