//! Stops with real processes: `stampede run` sent SIGTERM, and an agent SIGTERM'd mid-run
//! under `on_agent_loss: fail`. Every request the target served is on the books.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use stampede_core::report::{Report, RunOutcome};

use stampede_cli::client;

use crate::{cluster_with_agents, report_of, scenario, Target, BIN};

/// Sends `signal` (`TERM`, `INT`) to the child.
fn send(child: &Child, signal: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{signal} {}", child.id());
}

/// Waits (at most `limit`) for the child to exit; kills it and fails the test past that.
async fn exit_within(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let waited = async {
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    match tokio::time::timeout(limit, waited).await {
        Ok(s) => s,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running {limit:?} after the signal");
        }
    }
}

/// Waits until the target has served at least `n` requests (at most 30 s).
async fn served_at_least(target: &Target, n: u64) {
    let served = async {
        while target.requests() < n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), served)
        .await
        .expect("the load reached the target");
}

/// Every scope's books balance: started = completed + failed + interrupted, for requests
/// (totals, phases, agents) and sessions, and what the target served is accounted for.
pub fn assert_books_balance(r: &Report, served: u64) {
    let t = &r.totals;
    assert_eq!(
        t.started,
        t.completed + t.failed + t.interrupted,
        "totals: started {} completed {} failed {} interrupted {}",
        t.started,
        t.completed,
        t.failed,
        t.interrupted
    );
    let s = &t.sessions;
    assert_eq!(
        s.started,
        s.completed + s.failed + s.interrupted,
        "sessions: {s:?}"
    );
    for p in &r.phases {
        assert_eq!(p.started, p.completed + p.failed + p.interrupted, "{p:?}");
    }
    for a in &r.agents {
        assert_eq!(a.started, a.completed + a.failed + a.interrupted, "{a:?}");
    }
    let steps: u64 = r
        .steps
        .iter()
        .map(|s| s.completed + s.failed + s.interrupted)
        .sum();
    assert_eq!(steps, t.started, "the steps account for every request");
    assert!(
        t.completed + t.failed + t.interrupted >= served,
        "the target served {served}, the report accounts for {}",
        t.completed + t.failed + t.interrupted
    );
}

/// SIGTERM (what `timeout`, a CI job's cancellation and `kubectl delete` send) aborts a
/// local run as Ctrl-C does: the report file is written and says `aborted`, and `run` exits
/// 2. With `graceful_stop: 0s` the requests in flight (the target takes 300 ms, at 100/s
/// about 30 of them) are not waited for: they are on the books as interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_aborts_a_local_run_and_writes_its_report() {
    let target = Target::start(300).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("term.yaml");
    let text = scenario(
        &target.url,
        "  - { duration: 30s, arrival_rate: 100 }\n",
        "graceful_stop: 0s\n",
    );
    std::fs::write(&path, text).unwrap();
    let report = dir.path().join("term.json");
    let mut child = Command::new(BIN)
        .args(["run", "--local", "--quiet", "--agents", "1", "--report"])
        .arg(&report)
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    served_at_least(&target, 50).await;
    send(&child, "TERM");
    let status = exit_within(&mut child, Duration::from_secs(20)).await;
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{status:?}: {err}");
    assert!(err.contains("SIGTERM"), "{err}");
    let r: Report = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r.outcome, RunOutcome::Aborted, "{:?}", r.message);
    assert!(
        r.message.as_deref().unwrap_or_default().contains("SIGTERM"),
        "{:?}",
        r.message
    );
    assert!(r.totals.completed >= 50, "{:?}", r.totals);
    assert!(r.totals.interrupted > 0, "{:?}", r.totals);
    assert_books_balance(&r, target.requests());
}

/// Two agents against a slow target (40 ms), one SIGTERM'd mid-run under
/// `on_agent_loss: fail`: the run fails and names it, the other agent is stopped, and both
/// give their requests in flight the graceful stop (the request timeout, at most 5 s), so
/// every one of them is answered and counted: nothing is interrupted, and the report counts
/// exactly what the target served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_stopped_under_fail_leaves_every_request_on_the_books() {
    let target = Target::start(40).await;
    let (cluster, agents) = cluster_with_agents(&["keep", "term"]).await;
    let text = format!(
        "name: lost\ntarget: {}\nagents: 2\non_agent_loss: fail\n\
         load: {{ model: constant, rate: 200, connections: 10, duration: 20s }}\n\
         session:\n  - http: {{ path: /slow }}\n",
        target.url
    );
    let (url, token) = (cluster.url(), cluster.token.clone());
    let watch = tokio::spawn(async move {
        let mut c = client::connect(&url, Some(&token)).await?;
        let wait = Some(Duration::from_secs(20));
        client::run_and_watch(&mut c, &text, Some(2), wait, |_| {}).await
    });
    served_at_least(&target, 200).await;
    send(&agents[1].0, "TERM");
    let r = report_of(watch).await;
    assert_eq!(r.outcome, RunOutcome::Failed, "{:?}", r.message);
    assert!(
        r.message.as_deref().unwrap_or_default().contains("term"),
        "{:?}",
        r.message
    );
    assert!(
        r.duration_s < 15.0,
        "the other agent was stopped: {}",
        r.duration_s
    );
    let served = target.requests();
    assert_books_balance(&r, served);
    assert_eq!(r.totals.interrupted, 0, "{:?}", r.totals);
    assert_eq!(
        r.totals.completed + r.totals.failed,
        served,
        "{:?}",
        r.totals
    );
}
