//! Endurance: what long runs produce (reports past tonic's default message size) reaches the
//! CLI, and wide latency spreads arrive whole.

use stampede_cli::client;
use stampede_cli::local::LocalCluster;
use stampede_core::hist;
use stampede_core::report::{Percentiles, Report, RunOutcome, TimelineRow};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_over_4_mib_reaches_the_cli() {
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
    crate::assert_counts_what_was_served(&r, target.requests(), 5);
    assert!(r.totals.completed >= 100 && r.totals.completed < 3000);
    cluster.stop().await;
}

/// Decodes and adds up the timeline's per-interval histograms (base64 V2) of field `$f` with
/// the dense library, independently of the controller's sparse merge. (A macro: the test crate
/// does not name the histogram library's type.)
macro_rules! timeline_sum {
    ($rows:expr, $f:ident) => {{
        let mut sum = hist::new_histogram();
        for row in $rows.iter().filter(|row| !row.$f.is_empty()) {
            let h = hist::from_text(&row.$f)
                .unwrap_or_else(|e| panic!("interval {}: {e}", row.interval));
            hist::merge(&mut sum, &h).unwrap();
        }
        sum
    }};
}

/// Every count and percentile equal; the mean and deviation (floating-point sums over the
/// buckets) to within rounding.
fn same_percentiles(mut dense: Percentiles, report: &Percentiles) {
    for (a, b) in [
        (dense.mean_us, report.mean_us),
        (dense.stdev_us, report.stdev_us),
    ] {
        assert!((a - b).abs() <= 1e-9 * a.abs().max(1.0), "{a} vs {b}");
    }
    (dense.mean_us, dense.stdev_us) = (report.mean_us, report.stdev_us);
    assert_eq!(&dense, report);
}

/// Latencies from microseconds to a quarter of a second in one run (the 10,000-connection run
/// that lost its first intervals to the decoder had that spread): one agent, so each timeline
/// row is exactly what its recorder sent for that interval, two phases, every step a different
/// delay at the real HTTP target. The quiet phase's intervals travel uncompressed, the busy
/// phase's are too wide for that and travel deflated: both wire forms are exercised. Nothing may be lost or refused on the
/// way: started = completed, every interval of every phase is in the timeline, and the run's
/// percentiles equal, to the bit, those of the per-interval histograms added up by the dense
/// library — so every interval's histogram arrived and merged exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wide_latency_spreads_arrive_whole_and_exact() {
    let target = crate::Target::start(0).await;
    let cluster = LocalCluster::start(1, None).await.unwrap();
    let delays_ms = [0u64, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 250];
    let steps: String = delays_ms
        .iter()
        .map(|d| {
            format!("  - {{ name: d{d}, http: {{ method: GET, path: \"/delay?ms={d}\" }} }}\n")
        })
        .collect();
    let text = format!(
        "name: wide\ntarget: {}\nphases:\n  - {{ name: low, duration: 2s, arrival_rate: 40 }}\n  - {{ name: high, duration: 2s, arrival_rate: 250 }}\nsession:\n{steps}",
        target.url
    );
    let r = crate::run(&cluster.url(), &cluster.token, &text, 1).await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    let n_steps = delays_ms.len() as u64;
    let t = &r.totals;
    assert_eq!(t.planned, (80 + 500) * n_steps);
    assert_eq!(
        (t.started, t.completed, t.failed),
        (t.planned, t.planned, 0),
        "{:?}",
        t.errors
    );
    assert_eq!(target.requests(), t.completed);
    for p in &r.phases {
        assert_eq!(
            (p.started, p.completed),
            (p.planned, p.planned),
            "phase {}",
            p.name
        );
    }

    // Every interval, in order, none twice, and load in every interval of every phase.
    let rows = &r.timeline;
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(
            row.interval, i as u64,
            "the timeline skips or repeats an interval"
        );
    }
    for p in &r.phases {
        let (from, to) = (
            p.start_s.floor() as u64,
            (p.start_s + p.duration_s).ceil() as u64,
        );
        for k in from..to {
            let row = rows
                .get(k as usize)
                .unwrap_or_else(|| panic!("phase {}: no interval {k}", p.name));
            assert!(row.completed > 0, "phase {}: interval {k} is empty", p.name);
        }
    }
    let completed: u64 = rows.iter().map(|row| row.completed).sum();
    assert_eq!(completed, t.completed);

    // Exact: the sum of the interval histograms is the run's histogram, bucket for bucket.
    let response = timeline_sum!(rows, response_hist);
    let service = timeline_sum!(rows, service_hist);
    assert_eq!(response.len(), t.completed);
    same_percentiles(Percentiles::of(&response), &r.latency.response_time);
    same_percentiles(Percentiles::of(&service), &r.latency.service_time);
    // It is wide: from under a millisecond to the slowest step's delay, over many buckets.
    let buckets = response.iter_recorded().count();
    assert!(buckets > 400, "only {buckets} distinct buckets");
    assert!(
        response.min() < 1_000 && response.max() >= 250_000,
        "{:?}",
        r.latency.response_time
    );
    // Which form each interval took on the wire: V2's cookie ends in 3 uncompressed, in 4
    // deflated.
    let deflated: Vec<bool> = rows
        .iter()
        .filter(|row| !row.response_hist.is_empty())
        .map(|row| {
            let h = hist::from_text(&row.response_hist).unwrap();
            hist::encode_wire(&h).unwrap()[3] & 0x0f == 4
        })
        .collect();
    // Which forms occur depends on how the machine spread the latencies (both forms are
    // pinned by the codec's unit tests), so this is reported, not asserted.
    eprintln!("{buckets} distinct buckets; intervals deflated on the wire: {deflated:?}");
    // Each step's latencies sit at or above its delay, and the steps add up to the run.
    let mut step_count = 0;
    for (s, d) in r.steps.iter().zip(delays_ms) {
        let l = &s.latency.response_time;
        assert_eq!(
            (s.completed, l.count),
            (t.completed / n_steps, t.completed / n_steps),
            "{}",
            s.name
        );
        // At or above the delay, within the histogram's 3 significant digits.
        assert!(l.min_us >= d * 999, "{}: min {} µs", s.name, l.min_us);
        step_count += l.count;
    }
    assert_eq!(step_count, t.completed);
    cluster.stop().await;
}
