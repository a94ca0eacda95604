//! Endurance: what long runs produce (reports past tonic's default message size) reaches the
//! CLI.

use stampede_cli::client;
use stampede_cli::local::LocalCluster;
use stampede_core::report::{Report, TimelineRow};

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
