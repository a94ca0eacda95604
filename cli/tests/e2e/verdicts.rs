//! Honest verdicts: undelivered load is not a success, a late collapse fails its window (live,
//! with `abort_on_fail`), threshold scopes are checked before any load, and the report carries
//! each agent's CPU per interval.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stampede_core::report::RunOutcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{cli_run_local, run, spawn_controller, Proc, Target, BIN};

/// A keep-alive HTTP/1.1 target that answers 200 until `healthy_for` after the first request
/// it sees, then 500; counts the 500s. It stops with the test's runtime.
async fn collapsing_target(healthy_for: Duration) -> (String, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let failed = Arc::new(AtomicU64::new(0));
    let first: Arc<std::sync::OnceLock<Instant>> = Arc::default();
    let counter = failed.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (first, counter) = (first.clone(), counter.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut held = Vec::new();
                loop {
                    let Ok(n) = s.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    held.extend_from_slice(&buf[..n]);
                    while let Some(end) = held.windows(4).position(|w| w == b"\r\n\r\n") {
                        held.drain(..end + 4);
                        let since = first.get_or_init(Instant::now).elapsed();
                        let answer: &[u8] = if since < healthy_for {
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                        } else {
                            counter.fetch_add(1, Ordering::Relaxed);
                            b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 2\r\n\r\nno"
                        };
                        if s.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (url, failed)
}

/// 100/s for 8 s against a target that fails everything from its 4th second: the cumulative
/// error rate would pass 70 %, but `window(2s).error_rate < 5%` breaches as soon as the first
/// failing interval closes, stops the run early (exit 1) and names the window. The report
/// carries the agent's CPU per interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_collapse_fails_its_window_live() {
    let (url, failed) = collapsing_target(Duration::from_secs(3)).await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "name: window\ntarget: {url}\nphases: [ {{ name: steady, duration: 8s, arrival_rate: 100 }} ]\nsession: [ {{ http: {{ path: / }} }} ]\nthresholds: [ \"window(2s).error_rate < 5%\", \"error_rate < 70%\" ]\nabort_on_fail: true\n"
    );
    let crate::CliRun {
        code,
        stdout,
        report: r,
        ..
    } = cli_run_local(dir.path(), "window", &text);
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(r.outcome, RunOutcome::Aborted, "{stdout}");
    let abort = r.threshold_abort.as_ref().expect("the window breached");
    assert_eq!(abort.expr, "window(2s).error_rate < 5%");
    assert!(abort.measured_text.contains("in the window"), "{abort:?}");
    // Failing from about 3 s: seen once an interval after it closes, not at the end.
    assert!(r.duration_s < 7.0, "ran {} s", r.duration_s);
    assert!(failed.load(Ordering::Relaxed) > 0);
    let window = &r.thresholds[0];
    assert!(!window.passed, "{window:?}");
    let span = window.window.expect("the failing window is named");
    assert_eq!(span.to_s - span.from_s, 2.0);
    assert!(span.to_s >= 4.0, "{span:?}");
    let cumulative = &r.thresholds[1];
    assert!(cumulative.passed, "{cumulative:?}");
    // The generator watched itself: its CPU in each interval it reported.
    assert_eq!(r.agents.len(), 1);
    assert!(r.agents[0].cores >= 1.0, "{:?}", r.agents[0]);
    let rows = r.timeline.iter().filter(|t| !t.agent_cpu_pct.is_empty());
    assert!(rows.count() >= 2, "{:?}", r.timeline);
}

/// An agent started with `--capacity 20` under 40 sessions/s of two 1 s requests (80 at once
/// wanted): most sessions never start, and the run is `incomplete`, not `succeeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_agent_that_cannot_deliver_is_incomplete() {
    let target = Target::start(1000).await;
    let dir = tempfile::tempdir().unwrap();
    let token = "verdicts-token".to_string();
    let (_controller, url) = spawn_controller(&token, dir.path());
    let _agent = Proc(
        Command::new(BIN)
            .args(["agent", "--controller", &url, "--id", "cap20"])
            .args(["--agent-token", &token, "--capacity", "20"])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let text = format!(
        "name: capped\ntarget: {}\nphases: [ {{ name: steady, duration: 4s, arrival_rate: 40 }} ]\nsession:\n  - http: {{ path: /data }}\n  - http: {{ path: /data }}\n",
        target.url
    );
    let r = run(&url, &token, &text, 1).await;
    let s = &r.totals.sessions;
    assert_eq!(r.outcome, RunOutcome::Incomplete, "{s:?} {:?}", r.message);
    assert_eq!(s.planned, 160);
    assert!(s.started <= 60 && s.dropped >= 100, "{s:?}");
    let why = r.message.unwrap_or_default();
    assert!(
        why.contains("planned sessions") && why.contains("never started"),
        "{why}"
    );
}

/// A constant pool too small for its rate (`-R 100 -c 2` against a 50 ms target: 40/s at
/// most) starts every session, but its backlog more than a second late: the target saw the
/// load later and slower than planned, so the run is `incomplete`, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_too_small_for_its_rate_is_incomplete() {
    let target = Target::start(50).await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "name: small-pool\ntarget: {}\nload: {{ model: constant, rate: 100, connections: 2, duration: 3s }}\nsession: [ {{ http: {{ path: /data }} }} ]\n",
        target.url
    );
    let crate::CliRun {
        code,
        stdout,
        report: r,
        ..
    } = cli_run_local(dir.path(), "small-pool", &text);
    let s = &r.totals.sessions;
    assert_eq!(code, Some(2), "{stdout}");
    assert_eq!(r.outcome, RunOutcome::Incomplete, "{s:?} {:?}", r.message);
    assert_eq!((s.planned, s.started, s.dropped), (300, 300, 0), "{s:?}");
    // At most 40/s, so session k starts about 15k ms late: all from about the 67th on are
    // more than a second late.
    assert!((200..=300).contains(&s.started_late), "{s:?}");
    let why = r.message.unwrap_or_default();
    assert!(why.contains("started more than 1 s late"), "{why}");
    assert!(
        stdout.contains("of them started more than 1 s late"),
        "{stdout}"
    );
}

/// `validate` refuses a threshold whose scope names no phase, listing the phases there are.
#[test]
fn validate_refuses_a_phase_that_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.yaml");
    std::fs::write(
        &path,
        "name: typo\ntarget: http://127.0.0.1:9\nphases:\n  - { name: warm, duration: 2s, arrival_rate: 5 }\n  - { name: steady, duration: 4s, arrival_rate: 10 }\nsession: [ { http: { path: / } } ]\nthresholds: [ \"phase(stedy).p99 < 1s\" ]\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("validate")
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("phase(stedy): no such phase; phases are warm, steady"),
        "{text}"
    );
}
