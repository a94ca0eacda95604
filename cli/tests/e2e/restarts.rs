//! A controller SIGKILLed mid-run and started again on the same address and data directory
//! finishes the run with the report a controller that never restarted would give: how the run
//! was ending (an abort, a live threshold breach), the setup values it hands its agents, and
//! the target's scrapes (`observe:`) all come back from the checkpoint.

use std::time::Duration;

use stampede_cli::client;
use stampede_core::report::RunOutcome;
use stampede_proto::v1;

use crate::faults::{fresh_listen, report_after_restart, submit_running_on};
use crate::netcut::CutProxy;
use crate::sessions::{setup_scenario, LoginServer};
use crate::{spawn_agent, spawn_controller_on, spawn_controller_with, Proc, Target};

const TOKEN: &str = "restart-token";

/// Kills the controller (SIGKILL: no chance to write anything more), waits a second, and
/// starts another on the same address and data directory.
fn kill_and_restart(controller: &mut Proc, listen: &str, data: &std::path::Path) -> (Proc, String) {
    controller.0.kill().unwrap();
    controller.0.wait().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    spawn_controller_on(listen, TOKEN, data)
}

/// Waits (bounded) until the run's status line says `what`.
async fn until_status(url: &str, run_id: &str, what: &str) {
    let mut c = client::connect(url, Some(TOKEN)).await.unwrap();
    let seen = async {
        loop {
            let runs = c
                .list_runs(v1::ListRunsRequest {})
                .await
                .unwrap()
                .into_inner();
            if runs
                .runs
                .iter()
                .any(|r| r.run_id == run_id && r.message.contains(what))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), seen)
        .await
        .unwrap_or_else(|_| panic!("the run never said `{what}`"));
}

/// A user's abort, then the controller killed while the agent finishes its requests in
/// flight: the restarted controller ends the run `aborted` with the user's reason (not
/// `succeeded`, not `incomplete`), with every request the target served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_before_a_controller_restart_still_ends_the_run_aborted() {
    // Requests take 2 s: the agent's graceful stop outlasts the kill.
    let target = Target::start(2000).await;
    let data = tempfile::tempdir().unwrap();
    let listen = fresh_listen();
    let (mut controller, url) = spawn_controller_on(&listen, TOKEN, data.path());
    let _agent = spawn_agent(&url, TOKEN, "abort-agent");
    let scenario = crate::scenario(
        &target.url,
        "  - { duration: 30s, arrival_rate: 20 }\n",
        "graceful_stop: 10s\n",
    );
    let run_id = submit_running_on(&url, TOKEN, &scenario, 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut c = client::connect(&url, Some(TOKEN)).await.unwrap();
    c.abort_run(v1::AbortRunRequest {
        run_id: run_id.clone(),
        reason: "stopped before the restart".into(),
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_controller, url) = kill_and_restart(&mut controller, &listen, data.path());

    let r = report_after_restart(&url, TOKEN, &run_id).await;
    assert_eq!(r.outcome, RunOutcome::Aborted, "{:?}", r.message);
    let message = r.message.clone().unwrap_or_default();
    assert!(message.contains("stopped before the restart"), "{message}");
    assert!(r.duration_s < 20.0, "not the whole 30 s: {}", r.duration_s);
    let t = &r.totals;
    assert_eq!(
        t.started,
        t.completed + t.failed + t.interrupted,
        "the books"
    );
    crate::assert_counts_what_was_served(&r, target.requests(), 2);
}

/// A live threshold breach (`abort_on_fail`) stops the run, and the controller is killed
/// while the agent finishes its requests in flight: the restarted controller ends the run
/// `aborted`, naming the threshold, with the `threshold_abort` seen before the restart, as it
/// would have without the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threshold_abort_before_a_controller_restart_is_kept() {
    let target = Target::start(1500).await;
    let data = tempfile::tempdir().unwrap();
    let listen = fresh_listen();
    let (mut controller, url) = spawn_controller_on(&listen, TOKEN, data.path());
    let _agent = spawn_agent(&url, TOKEN, "breach-agent");
    let scenario = crate::scenario(
        &target.url,
        "  - { duration: 30s, arrival_rate: 100 }\n",
        "thresholds: [\"p50 < 100ms\"]\nabort_on_fail: true\ngraceful_stop: 10s\n",
    );
    let run_id = submit_running_on(&url, TOKEN, &scenario, 1).await;
    until_status(&url, &run_id, "breached").await;
    // The requests in flight take 1.5 s more; the breach is checkpointed at once.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_controller, url) = kill_and_restart(&mut controller, &listen, data.path());

    let r = report_after_restart(&url, TOKEN, &run_id).await;
    assert_eq!(r.outcome, RunOutcome::Aborted, "{:?}", r.message);
    let message = r.message.clone().unwrap_or_default();
    assert!(
        message.contains("p50 < 100ms") && message.contains("abort_on_fail"),
        "{message}"
    );
    let breach = r.threshold_abort.clone().expect("the threshold_abort");
    assert_eq!(breach.expr, "p50 < 100ms");
    assert!(breach.measured > 0.1, "{breach:?}");
    // The breach seen before the restart (at about 3 s), not one judged again on the merged
    // data after it.
    assert!(breach.at_s < 4.5, "{breach:?}");
    let t = &r.totals;
    assert_eq!(
        t.started,
        t.completed + t.failed + t.interrupted,
        "the books"
    );
}

/// The agent that ran the setup is killed (the loss tolerated) and another takes its refresh
/// over; then the controller is killed and restarted. The restarted controller still takes
/// the refreshes from the agent that took over and passes them on: the third agent's
/// sessions go on receiving fresh tokens after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_values_and_their_refresher_survive_a_controller_restart() {
    let server = LoginServer::start().await;
    let data = tempfile::tempdir().unwrap();
    let listen = fresh_listen();
    let (mut controller, url) = spawn_controller_on(&listen, TOKEN, data.path());
    // Sorted by id, s-1 is the first member: the one that runs the setup.
    let mut agents: Vec<Proc> = ["s-1", "s-2", "s-3"]
        .iter()
        .map(|id| spawn_agent(&url, TOKEN, id))
        .collect();
    let text = setup_scenario(
        &server.url,
        "16s",
        "setup_refresh: 1s\non_agent_loss: { tolerate: 50 }\n",
    )
    .replace("${env:E2E_SESSION_KEY}", "k-e2e");
    let logins = |server: &LoginServer| {
        server
            .seen()
            .iter()
            .filter(|s| s.path == "/api/login")
            .count()
    };
    let until_logins = |n: usize| {
        let server = &server;
        async move {
            tokio::time::timeout(Duration::from_secs(20), async {
                while logins(server) < n {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("the setup is refreshed");
        }
    };
    let run_id = submit_running_on(&url, TOKEN, &text, 3).await;
    until_logins(2).await;
    drop(agents.remove(0)); // SIGKILL: s-2 takes the refresh over
    let before = logins(&server);
    until_logins(before + 2).await;
    // One more interval: the checkpoint holds who refreshes now.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (_controller, url) = kill_and_restart(&mut controller, &listen, data.path());

    // Once the agents are back, a token issued from here on must reach the third agent.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let issued = logins(&server);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let newest_of_third = server
        .seen()
        .iter()
        .filter(|s| s.path == "/api/me" && s.headers["x-agent"] == "2")
        .filter_map(|s| {
            s.headers["authorization"]
                .strip_prefix("Bearer t-")?
                .parse::<usize>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    assert!(
        newest_of_third > issued,
        "the third agent's newest token is t-{newest_of_third}; {issued} were issued 3 s after the restart"
    );
    let r = report_after_restart(&url, TOKEN, &run_id).await;
    drop(agents);
    assert_eq!(r.outcome, RunOutcome::Incomplete, "{:?}", r.message);
    let message = r.message.clone().unwrap_or_default();
    assert!(message.contains("s-1"), "{message}");
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
}

/// The target's resources (`observe:`) scraped before the restart stay in the report: its
/// CPU intervals start at T0, not at the restart, and run to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observed_scrapes_survive_a_controller_restart() {
    let target = Target::start(0).await;
    let data = tempfile::tempdir().unwrap();
    let listen = fresh_listen();
    let (mut controller, url) = spawn_controller_on(&listen, TOKEN, data.path());
    let _agent = spawn_agent(&url, TOKEN, "observe-agent");
    let scenario = crate::scenario(
        &target.url,
        "  - { duration: 8s, arrival_rate: 50 }\n",
        &format!(
            "observe: [ {{ prometheus: \"{}/metrics\" }} ]\n",
            target.url
        ),
    );
    let run_id = submit_running_on(&url, TOKEN, &scenario, 1).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (_controller, url) = kill_and_restart(&mut controller, &listen, data.path());

    let r = report_after_restart(&url, TOKEN, &run_id).await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert_eq!(r.totals.completed, 400, "the whole schedule, once");
    let observed = r.target_resources.expect("target_resources");
    let cpu = &observed.cpu_cores.intervals;
    let first = cpu.first().expect("CPU intervals");
    let last = cpu.last().unwrap();
    assert!(
        first.start_s < 1.5,
        "the scrapes before the restart are kept: the first interval starts at {} s",
        first.start_s
    );
    assert!(
        last.start_s + last.interval_s >= 7.0,
        "and the scraping went on after it: {cpu:?}"
    );
    assert!(
        cpu.len() >= 5,
        "one interval a second but for the outage: {cpu:?}"
    );
}

/// A refresh of the setup values lost on its way, with the controller that was to receive it:
/// the agent that refreshes the setup wrote it into its stream, then the controller was killed
/// before reading it. The agent sends its newest values again when it reconnects, so the
/// restarted controller passes them on at once: the other agent's sessions use them before the
/// next refresh, not the older values the checkpoint held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_values_lost_in_flight_at_a_restart_are_sent_again() {
    let server = LoginServer::start().await;
    let data = tempfile::tempdir().unwrap();
    let listen = fresh_listen();
    // A lease longer than the blackhole below: the load goes on through it.
    let args = ["--lease", "10s"];
    let (mut controller, url) = spawn_controller_with(&listen, TOKEN, data.path(), &args);
    // s-1 runs the setup (the first by id), through a proxy that can hold what it sends.
    let proxy = CutProxy::start(listen.clone()).await;
    let _refresher = spawn_agent(&proxy.url, TOKEN, "s-1");
    let _other = spawn_agent(&url, TOKEN, "s-2");
    let text = setup_scenario(&server.url, "20s", "setup_refresh: 5s\n")
        .replace("${env:E2E_SESSION_KEY}", "k-e2e");
    let logins = || {
        server
            .seen()
            .iter()
            .filter(|s| s.path == "/api/login")
            .count()
    };
    let until_logins = |n: usize| async move {
        tokio::time::timeout(Duration::from_secs(20), async {
            while logins() < n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the setup is refreshed");
    };
    let run_id = submit_running_on(&url, TOKEN, &text, 2).await;
    // The first refresh (t-2) reaches the controller and s-2; then s-1's link holds what it
    // sends, and the second refresh (t-3) goes into it.
    until_logins(2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.set_blackhole(true);
    until_logins(3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Killed: s-1's link closes and what it held (t-3) is gone.
    controller.0.kill().unwrap();
    controller.0.wait().unwrap();
    proxy.set_blackhole(false);
    std::thread::sleep(Duration::from_secs(1));
    let (_controller, url) = spawn_controller_with(&listen, TOKEN, data.path(), &args);

    // Until the next refresh (t-4), s-2's sessions must come to use t-3.
    until_logins(4).await;
    let seen = server.seen();
    let fourth = seen
        .iter()
        .enumerate()
        .filter(|(_, s)| s.path == "/api/login")
        .nth(3)
        .map(|(i, _)| i)
        .unwrap();
    let used = |token: &str| {
        seen[..fourth].iter().any(|s| {
            s.path == "/api/me"
                && s.headers["x-agent"] == "1"
                && s.headers["authorization"] == format!("Bearer {token}")
        })
    };
    assert!(used("t-2"), "s-2 had the first refresh before the restart");
    assert!(
        used("t-3"),
        "s-2 never used t-3, refreshed just before the restart, before the next refresh"
    );
    let r = report_after_restart(&url, TOKEN, &run_id).await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
}
