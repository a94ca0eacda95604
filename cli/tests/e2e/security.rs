//! The control plane over TLS, with agent and user credentials kept apart.

use std::time::Duration;

use stampede_agent::AgentConfig;
use stampede_cli::client;
use stampede_controller::{Controller, ControllerConfig, ServerTls};
use stampede_core::report::RunOutcome;
use tokio_util::sync::CancellationToken;

use crate::{scenario, Target, QUIET};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_control_plane_keeps_agents_and_users_apart() {
    let _quiet = QUIET.read().await;
    let target = Target::start(0).await;
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let cert_pem = certified.cert.pem();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ControllerConfig::new(dir.path());
    cfg.token = Some("user-secret".into());
    cfg.agent_token = Some("agent-secret".into());
    cfg.tls = Some(ServerTls {
        cert_pem: cert_pem.clone().into_bytes(),
        key_pem: certified.signing_key.serialize_pem().into_bytes(),
        client_ca_pem: None,
    });
    let controller = Controller::new(cfg).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let c = controller.clone();
    let served = tokio::spawn(async move { c.serve(listener, s.cancelled_owned()).await });
    let url = format!("https://127.0.0.1:{port}");
    client::set_tls(client::TlsMaterial {
        ca_pem: Some(cert_pem.clone().into_bytes()),
        identity: None,
    });

    // An agent presenting the user token is refused with permission_denied, and gives up.
    let mut rogue = AgentConfig::new(url.clone(), "rogue");
    rogue.token = Some("user-secret".into());
    rogue.ca_pem = Some(cert_pem.clone().into_bytes());
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        stampede_agent::run(rogue, std::future::pending()),
    )
    .await
    .expect("a refused agent stops retrying")
    .unwrap_err();
    assert!(
        err.to_string().contains("user credential cannot register"),
        "{err}"
    );

    // The real agent, over TLS with the agent token.
    let mut good = AgentConfig::new(url.clone(), "good");
    good.token = Some("agent-secret".into());
    good.ca_pem = Some(cert_pem.clone().into_bytes());
    let agent_stop = CancellationToken::new();
    let a = agent_stop.clone();
    let agent = tokio::spawn(stampede_agent::run(good, a.cancelled_owned()));
    tokio::time::timeout(Duration::from_secs(10), controller.wait_for_agents(1))
        .await
        .unwrap();

    // A user runs a test over TLS.
    let text = scenario(&target.url, "  - { duration: 1s, arrival_rate: 20 }\n", "");
    let r = crate::run(&url, "user-secret", &text, 1).await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert_eq!(r.totals.completed, 20);

    // The agent credential cannot read runs; a plaintext client gets nothing.
    let mut as_agent = client::connect(&url, Some("agent-secret")).await.unwrap();
    let e = as_agent
        .list_runs(stampede_proto::v1::ListRunsRequest {})
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    let plain = format!("http://127.0.0.1:{port}");
    let refused = match client::connect(&plain, Some("user-secret")).await {
        Err(_) => true,
        Ok(mut c) => c
            .list_runs(stampede_proto::v1::ListRunsRequest {})
            .await
            .is_err(),
    };
    assert!(
        refused,
        "a plaintext client was served by the TLS controller"
    );

    agent_stop.cancel();
    let _ = agent.await;
    stop.cancel();
    let _ = served.await;
}
