//! Load models: the closed model (wrk `-c`) and the constant-rate model (wrk2 `-R`), sharded
//! across agents and merged like arrival phases.

use std::time::Duration;

use stampede_cli::local::LocalCluster;
use stampede_core::report::{Report, RunOutcome};

use crate::{run, Target};

fn load_scenario(target: &str, load: &str) -> String {
    format!("name: e2e-load\ntarget: {target}\nload: {load}\nsession:\n  - http: {{ method: GET, path: /data }}\n")
}

fn per_agent_completed(r: &Report) -> u64 {
    r.agents.iter().map(|a| a.completed).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_model_holds_exactly_its_connections() {
    let target = Target::start(1).await;
    let cluster = LocalCluster::start(2, None).await.unwrap();
    let text = load_scenario(
        &target.url,
        "{ model: closed, connections: 10, duration: 3s }",
    );
    let (url, token) = (cluster.url(), cluster.token.clone());
    let mut runner = tokio::spawn(async move { run(&url, &token, &text, 2).await });

    // All 10 connections come up...
    let srv = target.server.clone();
    tokio::time::timeout(
        Duration::from_secs(20),
        srv.wait_until(|s| s.connections_open >= 10),
    )
    .await
    .expect("10 connections open");
    // ...and while the run goes on, never more than 10 are open.
    let mut tick = tokio::time::interval(Duration::from_millis(25));
    let (mut samples, mut max_open) = (0u64, 0u64);
    let r = loop {
        tokio::select! {
            r = &mut runner => break r.unwrap(),
            _ = tick.tick() => {
                let open = target.server.stats().connections_open;
                max_open = max_open.max(open);
                samples += 1;
            }
        }
    };
    let stats = target.server.stats();
    eprintln!(
        "closed: {samples} samples, max open {max_open}, connections_total {}, completed {} ({:.0} req/s), agents {:?}",
        stats.connections_total,
        r.totals.completed,
        r.totals.throughput_rps,
        r.agents.iter().map(|a| a.completed).collect::<Vec<_>>()
    );
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(max_open, 10);
    // No connection was ever replaced: exactly 10 were ever opened.
    assert_eq!(stats.connections_total, 10);
    assert!(r.totals.completed > 0);
    assert_eq!(r.totals.completed, per_agent_completed(&r));
    assert_eq!(r.totals.completed, target.requests());
    // No schedule: planned is what was started, so the ratio is completed over started.
    assert_eq!(r.totals.planned, r.totals.started);
    assert!((r.totals.achieved_ratio - 1.0).abs() < 1e-9);
    assert_eq!(r.phases.len(), 1);
    assert_eq!(r.phases[0].name, "closed");
    assert_eq!(r.phases[0].completed, r.totals.completed);
    let load = r.load.as_ref().expect("load summary");
    assert_eq!((load.model.as_str(), load.connections), ("closed", 10));
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constant_rate_delivers_its_schedule() {
    let target = Target::start(0).await;
    let cluster = LocalCluster::start(2, None).await.unwrap();
    let text = load_scenario(
        &target.url,
        "{ model: constant, rate: 2000, connections: 20, duration: 5s }",
    );
    let r = run(&cluster.url(), &cluster.token, &text, 2).await;
    let load = r.load.as_ref().expect("load summary");
    eprintln!(
        "constant: planned {}, completed {}, failed {}, achieved {:.1} req/s vs {:?}, dropped {}, late {}, lag p99 {} µs, response p50/p99/max {}/{}/{} µs, service p99 {} µs, agents {:?}",
        r.totals.planned,
        r.totals.completed,
        r.totals.failed,
        load.achieved_rps,
        load.target_rps,
        r.generator.dropped_arrivals,
        r.generator.late_arrivals,
        r.generator.lag.p99_us,
        r.latency.response_time.p50_us,
        r.latency.response_time.p99_us,
        r.latency.response_time.max_us,
        r.latency.service_time.p99_us,
        r.agents.iter().map(|a| (a.planned, a.completed)).collect::<Vec<_>>()
    );
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert_eq!(r.totals.planned, 10_000);
    // Every slot is on the books whatever the speed: answered, failed or dropped (a machine
    // too busy to start a slot in time drops it and says so). Most are answered even on a
    // loaded machine; the target answers at once.
    let t = &r.totals;
    assert_eq!(
        t.completed + t.failed + r.generator.dropped_arrivals,
        10_000,
        "{t:?}"
    );
    assert!(t.completed >= 9_000, "completed {} of 10,000", t.completed);
    assert_eq!(r.totals.completed, per_agent_completed(&r));
    // The slots are sharded exactly: 5,000 each.
    assert!(
        r.agents.iter().all(|a| a.planned == 5_000),
        "{:?}",
        r.agents
    );
    assert_eq!(load.target_rps, Some(2000.0));
    // Arrival times in the default 1 ms ticks: 2,000/s over 2 agents is one arrival per
    // agent per tick, each sent when due.
    assert_eq!(r.arrival_resolution_us, Some(1_000));
    assert!(
        load.achieved_rps <= 2040.0 && load.achieved_rps >= 1800.0,
        "{}",
        load.achieved_rps
    );
    assert_eq!(r.phases.len(), 1);
    assert_eq!(r.phases[0].name, "constant");
    assert_eq!(r.phases[0].planned, 10_000);
    // The pool never opens more than its connections.
    assert!(target.server.stats().connections_total <= 20);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constant_rate_waits_for_a_busy_pool_and_counts_the_wait() {
    // 100 slots in 1 s over 2 agents with 1 connection each; a 30 ms answer caps each
    // connection at 33 req/s against its 50 slots/s, so slots queue. None may be skipped, and
    // the queueing shows in the response time (from the slot) but not in the service time
    // (from the send). The last slot waits about 0.5 s: well under the 1 s past which a late
    // start counts as undelivered, so the run still succeeds.
    let target = Target::start(30).await;
    let cluster = LocalCluster::start(2, None).await.unwrap();
    let text = load_scenario(
        &target.url,
        "{ model: constant, rate: 100, connections: 2, duration: 1s }",
    );
    let r = run(&cluster.url(), &cluster.token, &text, 2).await;
    let (resp, serv) = (&r.latency.response_time, &r.latency.service_time);
    eprintln!(
        "busy pool: completed {}, dropped {}, response p50 {} µs, service p50 {} µs, connections {}",
        r.totals.completed,
        r.generator.dropped_arrivals,
        resp.p50_us,
        serv.p50_us,
        target.server.stats().connections_total
    );
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert_eq!(r.totals.planned, 100);
    assert_eq!(r.totals.completed, 100);
    assert_eq!(r.generator.dropped_arrivals, 0);
    assert_eq!(target.server.stats().connections_total, 2);
    // Medians: the median slot waits about 0.25 s for its send, nine times its 30 ms of
    // service. Tails would compare the machine's pauses instead (with both cores busy a
    // service p99 of 178 ms has been seen).
    assert!(
        resp.p50_us > 3 * serv.p50_us,
        "response p50 {} µs vs service p50 {} µs",
        resp.p50_us,
        serv.p50_us
    );
    cluster.stop().await;
}

/// The report's `connections` gauge: a closed load of 200 keep-alive connections reports 200
/// opened and 200 held at once, in total and in the intervals where the load was steady.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_load_reports_its_peak_open_connections() {
    let target = Target::start(0).await;
    let cluster = LocalCluster::start(2, None).await.unwrap();
    // A think time keeps the request rate (and the CPU) low; connections stay open through it.
    let text = format!(
        "name: e2e-peak\ntarget: {}\nload: {{ model: closed, connections: 200, duration: 3s }}\nsession:\n  - http: {{ method: GET, path: / }}\n  - think_time: 100ms\n",
        target.url
    );
    let r = run(&cluster.url(), &cluster.token, &text, 2).await;
    let stats = target.server.stats();
    eprintln!(
        "peak: connections {:?}, per interval {:?}, per agent {:?}, target saw {} connections",
        r.connections,
        r.timeline.iter().map(|t| t.peak_open).collect::<Vec<_>>(),
        r.agents.iter().map(|a| a.peak_open).collect::<Vec<_>>(),
        stats.connections_total
    );
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(stats.connections_total, 200);
    assert_eq!(r.connections.opened, 200);
    assert_eq!(r.connections.peak_open, 200);
    assert_eq!(
        r.agents.iter().map(|a| a.peak_open).collect::<Vec<_>>(),
        [100, 100]
    );
    // Every interval but the last (which may see connections close) held all 200.
    let rows: Vec<u64> = r.timeline.iter().map(|t| t.peak_open).collect();
    assert!(rows.len() >= 2, "{rows:?}");
    assert!(rows.iter().all(|p| *p <= 200), "{rows:?}");
    assert!(
        rows[1..rows.len() - 1].iter().all(|p| *p == 200),
        "{rows:?}"
    );
    assert_eq!(
        r.timeline.iter().map(|t| t.connections_opened).sum::<u64>(),
        200
    );
    let text = stampede_cli::render::report_text(&r);
    assert!(text.contains("opened 200  peak open 200"), "{text}");
    cluster.stop().await;
}

/// `streams_per_connection`: over HTTP/2, each connection of a closed load carries that many
/// sessions at once. 2 connections × 8 streams against a 50 ms answer run about 16 requests
/// per 50 ms, on 2 connections opened in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_share_an_http2_connection() {
    let target = Target::start(0).await;
    let cluster = LocalCluster::start(1, None).await.unwrap();
    let text = format!(
        "name: e2e-streams\ntarget: {}\nhttp_version: \"2\"\nload: {{ model: closed, connections: 2, streams_per_connection: 8, duration: 2s }}\nsession:\n  - http: {{ method: GET, path: '/delay?ms=50' }}\n",
        target.url
    );
    let r = run(&cluster.url(), &cluster.token, &text, 1).await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert_eq!(r.connections.opened, 2, "{:?}", r.connections);
    assert_eq!(r.connections.peak_open, 2, "{:?}", r.connections);
    // One stream alone would run at most 2 s / 50 ms = 40 sessions; 16 streams, 640.
    assert!(
        r.totals.completed > 16 * 25,
        "completed {} over 16 streams",
        r.totals.completed
    );
    assert_eq!(r.totals.failed, 0);
    assert_eq!(target.requests(), r.totals.completed);
}
