//! The control plane over TLS, with agent and user credentials kept apart.

use std::time::Duration;

use stampede_agent::AgentConfig;
use stampede_cli::client;
use stampede_controller::{Controller, ControllerConfig, ServerTls};
use stampede_core::report::RunOutcome;
use tokio_util::sync::CancellationToken;

use crate::{scenario, Target};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_control_plane_keeps_agents_and_users_apart() {
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
        ..Default::default()
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

/// The chart's TLS layout, without a cluster: a controller process serving TLS with a
/// certificate for its Service name only. A CLI that dials it by address is refused unless it
/// checks the certificate against that name (`--tls-server-name`, what the kube port-forward
/// sets from the pod's annotation); the plaintext `--health-listen` port answers the gRPC
/// health check the kubelet's probes make, and serves nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_controller_is_checked_by_service_name_and_probed_in_plaintext() {
    use std::io::BufRead;
    let name = "st-stampede-controller.ns.svc";
    let certified = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let mut child = std::process::Command::new(crate::BIN)
        .args([
            "controller",
            "--listen",
            "127.0.0.1:0",
            "--health-listen",
            "127.0.0.1:0",
        ])
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("STAMPEDE_TOKEN", "user-secret")
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut addr = |prefix: &str| {
        let line = lines.next().unwrap().unwrap();
        assert!(line.starts_with(prefix), "{line}");
        line.rsplit(' ').next().unwrap().to_string()
    };
    let grpc = addr("stampede controller listening on");
    let health = addr("stampede controller health on");
    let _controller = crate::Proc(child);

    let agents = |server_name: Option<&str>| {
        let mut cmd = std::process::Command::new(crate::BIN);
        cmd.args(["agents", "--output", "json", "--controller"])
            .arg(format!("https://{grpc}"))
            .arg("--ca-cert")
            .arg(&cert)
            .env("STAMPEDE_TOKEN", "user-secret");
        if let Some(n) = server_name {
            cmd.args(["--tls-server-name", n]);
        }
        cmd.output().unwrap()
    };
    let by_name = agents(Some(name));
    assert!(
        by_name.status.success(),
        "{}",
        String::from_utf8_lossy(&by_name.stderr)
    );
    let by_address = agents(None);
    assert!(
        !by_address.status.success(),
        "the certificate does not name 127.0.0.1"
    );

    // The kubelet's probe: plaintext gRPC health, for the control service the chart names.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{health}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let status = h
        .check(tonic_health::pb::HealthCheckRequest {
            service: "stampede.v1.ControlService".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    // Nothing else is served there, with or without a credential.
    let mut c = stampede_proto::v1::control_service_client::ControlServiceClient::new(channel);
    let err = c
        .list_runs(stampede_proto::v1::ListRunsRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unimplemented);
}
