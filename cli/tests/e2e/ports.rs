//! The port budget (`docs/design.md`) and `stampede agent --source-ips`.

use std::process::{Command, Stdio};
use std::time::Duration;

use stampede_cli::client;
use stampede_cli::local::LocalCluster;
use stampede_core::report::RunOutcome;
use stampede_proto::v1;

use crate::{run, Proc, Target, BIN};

fn load_scenario(target: &str, load: &str) -> String {
    format!("name: ports\ntarget: {target}\nload: {load}\nsession:\n  - http: {{ path: /data }}\n")
}

/// Ports in this machine's ephemeral range, as the agent reports it.
fn ephemeral_ports() -> u64 {
    let r = stampede_agent::ephemeral_ports();
    u64::from(r.high - r.low + 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_needing_more_ports_than_the_agent_has_is_refused_before_any_load() {
    let target = Target::start(0).await;
    let cluster = LocalCluster::start(1, None).await.unwrap();
    let text = load_scenario(
        &target.url,
        "{ model: closed, connections: 100000, duration: 2s }",
    );
    let r = run(&cluster.url(), &cluster.token, &text, 1).await;
    assert_eq!(r.outcome, RunOutcome::Failed);
    let message = r.message.clone().unwrap_or_default();
    let addr = target.url.trim_start_matches("http://");
    let ports = ephemeral_ports();
    let needed = 100_000u64.div_ceil(ports).max(2);
    assert_eq!(
        message,
        format!(
            "port budget: needs 100,000 concurrent connections to {addr} from source address 127.0.0.1 (agent local-1) but it has {p} ephemeral ports × 1 source address = {p} per destination; this run needs at least {needed} agents with their own source address (or more source addresses per agent: stampede agent --source-ips)",
            p = stampede_core::ports::Thousands(ports)
        )
    );
    // Refused before anything was sent: the target never saw a connection.
    assert_eq!(target.server.stats().connections_total, 0);
    assert_eq!(r.totals.started, 0);
    // The agent is free again: a run that fits goes through.
    let ok = load_scenario(
        &target.url,
        "{ model: closed, connections: 4, duration: 1s }",
    );
    let r = run(&cluster.url(), &cluster.token, &ok, 1).await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert!(target.server.stats().connections_total >= 4);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_source_ips_connects_from_each_of_them() {
    let target = Target::start(0).await;
    let cluster = LocalCluster::start(0, None).await.unwrap();
    let _agent = Proc(
        Command::new(BIN)
            .args(["agent", "--controller", &cluster.url(), "--id", "multi-src"])
            .args(["--agent-token", &cluster.agent_token])
            .args(["--source-ips", "127.0.0.2,127.0.0.3"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn agent"),
    );
    tokio::time::timeout(
        Duration::from_secs(20),
        cluster.controller.wait_for_agents(1),
    )
    .await
    .expect("the agent attached");
    // It registered two source addresses and its port range.
    let mut c = client::connect(&cluster.url(), Some(&cluster.token))
        .await
        .unwrap();
    let agents = c
        .list_agents(v1::ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner()
        .agents;
    assert_eq!(agents.len(), 1);
    assert_eq!(agents[0].source_addresses, 2);
    assert_eq!(
        agents[0]
            .ephemeral_ports
            .map(|r| u64::from(r.high - r.low + 1)),
        Some(ephemeral_ports())
    );

    let text = load_scenario(
        &target.url,
        "{ model: closed, connections: 6, duration: 1s }",
    );
    let r = run(&cluster.url(), &cluster.token, &text, 1).await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert!(
        r.totals.completed > 0 && r.totals.failed == 0,
        "{:?}",
        r.totals
    );
    let stats = target.server.stats();
    assert_eq!(stats.connections_total, 6);
    // The target saw connections from both source addresses (and from nothing else).
    assert_eq!(stats.distinct_source_ips, 2);
    cluster.stop().await;
}
