//! Endurance: what long runs produce (reports past tonic's default message size) reaches the
//! CLI.

use stampede_cli::client;
use stampede_cli::local::LocalCluster;
use stampede_core::report::{Report, RunOutcome, TimelineRow};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_over_4_mib_reaches_the_cli() {
    let _quiet = crate::QUIET.read().await;
    let dir = tempfile::tempdir().unwrap();
    // A day-long run's timeline: 30,000 intervals, each with its histogram.
    let report = Report {
        run_id: "run-long".into(),
        scenario: "long".into(),
        timeline: (0..30_000)
            .map(|i| TimelineRow {
                interval: i,
                t_s: i as f64,
                response_hist: "A".repeat(160),
                ..TimelineRow::default()
            })
            .collect(),
        ..Report::default()
    };
    let json = serde_json::to_string_pretty(&report).unwrap();
    assert!(json.len() > 6 << 20, "{} bytes", json.len());
    std::fs::create_dir_all(dir.path().join("runs")).unwrap();
    std::fs::write(dir.path().join("runs/run-long.json"), &json).unwrap();
    let cluster = LocalCluster::start(0, Some(dir.path().to_path_buf()))
        .await
        .unwrap();
    let mut c = client::connect(&cluster.url(), Some(&cluster.token))
        .await
        .unwrap();
    let back = client::get_report(&mut c, "run-long").await.unwrap();
    assert_eq!(back.timeline.len(), 30_000);
    assert_eq!(back, report);
    cluster.stop().await;
}

/// A real agent process gets SIGTERM mid-run: it stops its load, sends everything it recorded
/// and its `Done`, and the report counts exactly what the target served — nothing lost, nothing
/// twice. Under `tolerate` the run goes on and ends `incomplete`, naming the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_flushes_what_the_agent_collected() {
    let _quiet = crate::QUIET.read().await;
    let target = crate::Target::start(0).await;
    let cluster = LocalCluster::start(0, None).await.unwrap();
    let agent = crate::spawn_agent(&cluster.url(), &cluster.agent_token, "term-1");
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        cluster.controller.wait_for_agents(1),
    )
    .await
    .expect("the agent process registers");
    let text = crate::scenario(
        &target.url,
        "  - { duration: 30s, arrival_rate: 100 }\n",
        "on_agent_loss: { tolerate: 100 }\n",
    );
    let (url, token) = (cluster.url(), cluster.token.clone());
    let run = tokio::spawn(async move { crate::run(&url, &token, &text, 1).await });
    // Wait (bounded) until load is flowing, then SIGTERM the agent process.
    for _ in 0..200 {
        if target.requests() >= 100 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(target.requests() >= 100, "no load reached the target");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &agent.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let r = run.await.unwrap();
    assert_eq!(r.outcome, RunOutcome::Incomplete, "{:?}", r.message);
    let message = r.message.clone().unwrap_or_default();
    assert!(
        message.contains("term-1") && message.contains("shut down"),
        "{message}"
    );
    // Everything the target served is in the report, once: every answered request, plus at
    // most the few that were in flight at the signal (started, abandoned by the stop).
    let served = target.requests();
    let finished = r.totals.completed + r.totals.failed;
    assert!(
        finished <= served && served <= r.totals.started && r.totals.started - finished <= 5,
        "served {served}, report: started {} finished {finished}",
        r.totals.started
    );
    assert!(r.totals.completed >= 100 && r.totals.completed < 3000);
    cluster.stop().await;
}
