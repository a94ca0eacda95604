//! WebSocket end to end: `ws:` sessions against the HTTP target's `/ws` echo, every round
//! trip counted and checked, and the server's own count agreeing with the report's.

use stampede_cli::local::LocalCluster;

use crate::{run, Target};

/// 20 sessions each upgrade (with a templated header), send 10 templated messages and check
/// each echo, ping, and close: 200 round trips in the report, 200 messages at the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_round_trips_agree_with_the_server() {
    let target = Target::start(0).await;
    let url = target.url.replace("http://", "ws://");
    let cluster = LocalCluster::start(1, None).await.unwrap();
    let text = format!(
        "name: ws-echo\ntarget: {url}\nphases: [ {{ duration: 1s, arrival_rate: 20 }} ]\n\
         session:\n\
         \x20 - name: connect\n\
         \x20   ws: {{ connect: {{ path: /ws, headers: {{ x-session: 's-${{session.index}}' }} }} }}\n\
         \x20 - name: echo\n\
         \x20   ws: {{ send: {{ text: 'msg-${{session.index}}' }}, receive: 1 }}\n\
         \x20   check: {{ body_contains: 'msg-' }}\n\
         \x20   repeat: 10\n\
         \x20 - name: ping\n\
         \x20   ws: {{ ping: true }}\n\
         \x20 - name: close\n\
         \x20   ws: {{ close: {{ code: 1000 }} }}\n"
    );
    let r = run(&cluster.url(), &cluster.token, &text, 1).await;
    cluster.stop().await;
    let step = |name: &str| r.steps.iter().find(|s| s.name == name).unwrap();
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!((step("connect").completed, step("connect").failed), (20, 0));
    assert_eq!((step("echo").completed, step("echo").failed), (200, 0));
    assert_eq!(step("ping").completed, 20);
    assert_eq!(step("close").completed, 20);
    assert_eq!(r.totals.sessions.completed, 20);
    // The server echoed exactly what the report counts, and holds nothing open.
    let stats = target.server.stats();
    assert_eq!((stats.ws.received, stats.ws.sent), (200, 200));
    assert!(r.connections.peak_open >= 1, "{:?}", r.connections);
    // A round trip is timed from its due time: never below the service time.
    let echo = &step("echo").latency;
    assert!(echo.response_time.p50_us >= echo.service_time.p50_us);
    // Messages per second: the step's round trips over the run's duration.
    let per_s = step("echo").throughput_rps;
    assert!(
        (per_s * r.duration_s - 200.0).abs() < 1.0,
        "{per_s}/s over {} s",
        r.duration_s
    );
}

/// A check that fails on the echo fails the step with the check's kind, and the session
/// stops there: the server sees one message per session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_names_itself() {
    let target = Target::start(0).await;
    let url = target.url.replace("http://", "ws://");
    let cluster = LocalCluster::start(1, None).await.unwrap();
    let text = format!(
        "name: ws-check\ntarget: {url}\nphases: [ {{ duration: 1s, arrival_rate: 5 }} ]\n\
         max_error_rate: none\n\
         session:\n\
         \x20 - ws: {{ connect: {{ path: /ws }} }}\n\
         \x20 - name: echo\n\
         \x20   ws: {{ send: {{ text: hello }}, receive: 1 }}\n\
         \x20   check: {{ body_contains: goodbye }}\n\
         \x20   repeat: 3\n"
    );
    let r = run(&cluster.url(), &cluster.token, &text, 1).await;
    cluster.stop().await;
    let echo = r.steps.iter().find(|s| s.name == "echo").unwrap();
    assert_eq!((echo.completed, echo.failed), (0, 5), "{echo:?}");
    assert_eq!(echo.errors.get("check.body_contains"), Some(&5));
    assert_eq!(target.server.stats().ws.received, 5);
}

/// A ramp of held WebSockets: each connection's connect and upgrade is timed in the stage it
/// began in, as an HTTP connection's connect is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ramps_websockets_are_timed_per_stage() {
    let target = Target::start(0).await;
    let url = target.url.replace("http://", "ws://");
    let cluster = LocalCluster::start(1, None).await.unwrap();
    // The think time outlasts the run: each connection upgrades once.
    let text = format!(
        "name: ws-ramp\ntarget: {url}\n\
         load: {{ model: closed, stages: [ {{ connections: 10, duration: 1s }}, {{ connections: 10, duration: 1s }} ] }}\n\
         session:\n\
         \x20 - name: connect\n\
         \x20   ws: {{ connect: {{ path: /ws }} }}\n\
         \x20 - name: echo\n\
         \x20   ws: {{ send: {{ text: hello }}, receive: 1 }}\n\
         \x20 - think_time: 10s\n"
    );
    let r = run(&cluster.url(), &cluster.token, &text, 1).await;
    cluster.stop().await;
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    let load = r.load.as_ref().expect("a load block");
    let connects: Vec<u64> = load.stages.iter().map(|s| s.connect.count).collect();
    assert_eq!(connects, [10, 0], "connect times per stage");
    assert!(load.stages[0].connect.max_us > 0, "{:?}", load.stages[0]);
    assert_eq!(target.server.stats().ws.received, 10);
}
