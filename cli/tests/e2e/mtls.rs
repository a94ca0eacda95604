//! Mutual TLS end to end: the project's HTTPS target requires client certificates signed by a
//! CA made in the test. A run without the scenario's client identity, or with one the CA did
//! not sign, fails every handshake (`tls` errors); a run with it succeeds; the CLI reads the
//! certificate and key files and refuses a key that is not the certificate's.

use std::process::Command;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use stampede_cli::local::LocalCluster;
use stampede_core::report::Report;
use stampede_target_servers::http::{HttpConfig, HttpServer};
use stampede_target_servers::tls::TlsServer;
use tokio::net::TcpListener;

use crate::{cli_run_local, run, serve_until_dropped, Stop, BIN};

/// A client CA (PEM) and a client certificate it signed, with its key (PEM).
struct Identity {
    ca: String,
    cert: String,
    key: String,
}

fn client_identity() -> Identity {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let mut leaf = CertificateParams::new(vec!["load.client.test".to_string()]).unwrap();
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &ca).unwrap();
    Identity {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// An HTTPS target requiring client certificates signed by `client_ca`; returns the server,
/// its URL and its own (self-signed) certificate.
async fn mtls_target(client_ca: &str) -> (HttpServer, String, String, Stop) {
    let (tls, cert_pem) = TlsServer::self_signed_requiring(
        &["localhost".into(), "127.0.0.1".into()],
        Some(client_ca.as_bytes()),
    )
    .unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://localhost:{}", l.local_addr().unwrap().port());
    let server = HttpServer::new(HttpConfig {
        tls: Some(tls),
        ..HttpConfig::default()
    })
    .unwrap();
    let stop = serve_until_dropped(|shutdown| server.clone().serve(l, shutdown));
    (server, url, cert_pem, stop)
}

/// 20 sessions/s for 1 s, each sending `GET /data` 3 times over its connection.
fn scenario(target: &str, tls: &str) -> String {
    format!(
        "name: e2e-mtls\ntarget: {target}\nphases:\n  - {{ duration: 1s, arrival_rate: 20 }}\nsession:\n  - http: {{ path: /data }}\n    repeat: 3\ntls: {{ {tls} }}\n"
    )
}

fn json(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

async fn run_local(text: &str) -> Report {
    let cluster = LocalCluster::start(1, None).await.unwrap();
    let r = run(&cluster.url(), &cluster.token, text, 1).await;
    cluster.stop().await;
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_and_its_absence_is_a_tls_error() {
    let id = client_identity();
    let (server, url, server_pem, _stop) = mtls_target(&id.ca).await;
    let trust = format!("ca_pem: {}", json(&server_pem));
    let tls_only = |r: &Report, what: &str| {
        assert_eq!(r.totals.completed, 0, "{what}: {:?}", r.totals);
        assert_eq!(
            r.totals.errors.iter().collect::<Vec<_>>(),
            [(&"tls_refused".to_string(), &20)],
            "{what}: each session fails at its handshake, refused by the server"
        );
    };
    tls_only(&run_local(&scenario(&url, &trust)).await, "no certificate");
    // A certificate the target's CA did not sign.
    let stranger = rcgen::generate_simple_self_signed(vec!["load.client.test".into()]).unwrap();
    let unsigned = format!(
        "{trust}, client_cert_pem: {}, client_key_pem: {}",
        json(&stranger.cert.pem()),
        json(&stranger.signing_key.serialize_pem())
    );
    tls_only(&run_local(&scenario(&url, &unsigned)).await, "unsigned");
    let st = server.stats();
    assert_eq!(st.requests_total, 0, "no request passed the handshake");

    let signed = format!(
        "{trust}, client_cert_pem: {}, client_key_pem: {}",
        json(&id.cert),
        json(&id.key)
    );
    // Over h2 (by ALPN) the refusal comes after a TLS 1.3 handshake, on the connection's
    // first read: still `tls`.
    let h2 = |tls: &str| format!("http_version: \"2\"\n{}", scenario(&url, tls));
    tls_only(&run_local(&h2(&trust)).await, "no certificate over h2");
    assert_eq!(
        server.stats().requests_total,
        0,
        "no request passed the handshake"
    );

    let r = run_local(&scenario(&url, &signed)).await;
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 60);
    assert_eq!(server.stats().requests_total, 60);
    // Over h2 (by ALPN) too.
    let r = run_local(&format!("http_version: \"2\"\n{}", scenario(&url, &signed))).await;
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 60);
    assert_eq!(server.stats().requests_http2, 60);
}

/// Through the CLI: `tls.client_cert_file` and `tls.client_key_file` are read next to the
/// scenario; `validate` refuses a key that is not the certificate's, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_the_client_files_and_validate_checks_the_pair() {
    let id = client_identity();
    let (server, url, server_pem, _stop) = mtls_target(&id.ca).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("server-ca.pem"), &server_pem).unwrap();
    std::fs::write(dir.path().join("client.pem"), &id.cert).unwrap();
    std::fs::write(dir.path().join("client.key"), &id.key).unwrap();
    std::fs::write(dir.path().join("other.key"), client_identity().key).unwrap();
    let files = |key: &str| {
        format!("ca_file: server-ca.pem, client_cert_file: client.pem, client_key_file: {key}")
    };
    let r = cli_run_local(dir.path(), "mtls", &scenario(&url, &files("client.key")));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.report.totals.errors.is_empty(), "{:?}", r.report.totals);
    assert_eq!(r.report.totals.completed, 60);
    assert_eq!(server.stats().requests_total, 60);

    let path = dir.path().join("wrong.yaml");
    std::fs::write(&path, scenario(&url, &files("other.key"))).unwrap();
    let out = Command::new(BIN)
        .arg("validate")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(
            "tls.client_key_file: `other.key` is not the private key of the client certificate"
        ),
        "{stderr}"
    );
    let lone = dir.path().join("lone.yaml");
    std::fs::write(&lone, scenario(&url, "client_cert_file: client.pem")).unwrap();
    let out = Command::new(BIN)
        .arg("validate")
        .arg(&lone)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tls.client_key_file: is required with tls.client_cert_file"),
        "{stderr}"
    );
}

/// The same identity reaches the WebSocket and gRPC connectors: `wss://` and `grpcs://` to a
/// target that requires it fail without it and pass their handshakes with it (the WebSocket
/// echoes; the HTTPS target, no gRPC server, answers each call 404 over h2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wss_and_grpcs_present_the_client_certificate() {
    let id = client_identity();
    let (server, url, server_pem, _stop) = mtls_target(&id.ca).await;
    let trust = format!("ca_pem: {}", json(&server_pem));
    let signed = format!(
        "{trust}, client_cert_pem: {}, client_key_pem: {}",
        json(&id.cert),
        json(&id.key)
    );
    let wss = |tls: &str| {
        format!(
            "name: e2e-mtls-wss\ntarget: {}\nphases:\n  - {{ duration: 1s, arrival_rate: 10 }}\n\
             session:\n  - ws: {{ connect: {{ path: /ws }} }}\n  - ws: {{ send: {{ text: hi }}, receive: 1 }}\n\
             tls: {{ {tls} }}\n",
            url.replace("https://", "wss://")
        )
    };
    let r = run_local(&wss(&trust)).await;
    assert_eq!(
        r.totals.errors.iter().collect::<Vec<_>>(),
        [(&"tls_refused".to_string(), &10)],
        "no certificate: each upgrade fails at its handshake"
    );
    let r = run_local(&wss(&signed)).await;
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 20);

    let proto = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../target-servers/proto/stampede/target/v1/target.proto"
    );
    let grpcs = |tls: &str| {
        format!(
            "name: e2e-mtls-grpcs\ntarget: {}\ngrpc: {{ proto_files: [{proto}] }}\nmax_error_rate: none\n\
             phases:\n  - {{ duration: 1s, arrival_rate: 10 }}\n\
             session:\n  - grpc: {{ method: stampede.target.v1.Target/Echo, message: {{ text: hi }} }}\n\
             tls: {{ {tls} }}\n",
            url.replace("https://", "grpcs://")
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let before = server.stats().requests_http2;
    let run_cli = |name: &'static str, text: String| {
        let dir = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || cli_run_local(&dir, name, &text))
    };
    let r = run_cli("grpcs-none", grpcs(&trust)).await.unwrap();
    // With TLS 1.3 the refusal comes after the handshake, read by the h2 connection's driver.
    // An HTTP request over h2 counts it `tls` (above); a gRPC call still meets some of these
    // connections as reset.
    let t = &r.report.totals;
    assert_eq!((t.completed, t.failed), (0, 10), "{}", r.stderr);
    assert!(
        t.errors
            .keys()
            .all(|k| ["tls_refused", "reset"].contains(&k.as_str())),
        "{:?}",
        t.errors
    );
    assert_eq!(
        server.stats().requests_http2,
        before,
        "no call passed the handshake"
    );
    let r = run_cli("grpcs-signed", grpcs(&signed)).await.unwrap();
    assert_eq!(
        r.report.totals.errors.iter().collect::<Vec<_>>(),
        [(&"status_404".to_string(), &10)],
        "{}",
        r.stderr
    );
    assert_eq!(server.stats().requests_http2 - before, 10);
}
