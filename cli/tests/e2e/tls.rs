//! `https://` targets end to end: HTTP/1.1 and h2 (by ALPN) over rustls against the project's
//! HTTP target serving a self-signed certificate, and what happens when the certificate is not
//! trusted, names another host, or verification is turned off.

use stampede_cli::local::LocalCluster;
use stampede_core::report::{Report, RunOutcome};
use stampede_target_servers::http::{HttpConfig, HttpServer};
use stampede_target_servers::tls::TlsServer;
use tokio::net::TcpListener;

use crate::{cli_run_local, run, serve_until_dropped, Stop};

/// An HTTPS target with a fresh self-signed certificate for localhost and 127.0.0.1; returns
/// the server, its `https://localhost:PORT` URL and the certificate (PEM).
pub async fn https_target() -> (HttpServer, String, String, Stop) {
    let (tls, cert_pem) =
        TlsServer::self_signed(&["localhost".into(), "127.0.0.1".into()]).unwrap();
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
fn scenario(target: &str, extra: &str) -> String {
    format!(
        "name: e2e-tls\ntarget: {target}\nphases:\n  - {{ duration: 1s, arrival_rate: 20 }}\nsession:\n  - http: {{ path: /data }}\n    repeat: 3\n{extra}"
    )
}

fn trusting(pem: &str) -> String {
    format!(
        "tls: {{ ca_pem: {} }}\n",
        serde_json::to_string(pem).unwrap()
    )
}

async fn run_local(text: &str, agents: u32) -> Report {
    let cluster = LocalCluster::start(agents, None).await.unwrap();
    let r = run(&cluster.url(), &cluster.token, text, agents).await;
    cluster.stop().await;
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_http1_and_h2_by_alpn_count_match() {
    let (server, url, pem, _stop) = https_target().await;
    let r = run_local(&scenario(&url, &trusting(&pem)), 2).await;
    let st = server.stats();
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 60);
    assert_eq!((st.requests_total, st.requests_http2), (60, 0));
    assert_eq!(st.connections_total, 20, "one TLS connection per session");
    assert_eq!(st.errors_total, 0);

    let h2 = format!("http_version: \"2\"\n{}", trusting(&pem));
    let r = run_local(&scenario(&url, &h2), 2).await;
    let st = server.stats();
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 60);
    assert_eq!((st.requests_total, st.requests_http2), (120, 60));
    assert_eq!(st.connections_total, 40);
    assert!(r.generator.warnings.iter().all(|w| !w.contains("TLS")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_misnamed_or_plaintext_servers_are_tls_errors() {
    let (server, url, pem, _stop) = https_target().await;
    let tls_only = |r: &Report, kind: &str| {
        assert_eq!(r.totals.completed, 0, "{:?}", r.totals);
        assert_eq!(
            r.totals.errors.iter().collect::<Vec<_>>(),
            [(&kind.to_string(), &20)],
            "each session fails at its handshake, the reason named"
        );
    };
    // The system's authorities do not know a self-signed certificate. (On a machine with no
    // authorities at all, the agent refuses the run up front, asking for tls.ca_file.)
    if std::path::Path::new("/etc/ssl/certs/ca-certificates.crt").exists() {
        tls_only(
            &run_local(&scenario(&url, ""), 1).await,
            "tls_unknown_issuer",
        );
    }
    // Trusted, but it names localhost and 127.0.0.1, not this name.
    let misnamed = format!(
        "tls: {{ ca_pem: {}, server_name: api.example.test }}\n",
        serde_json::to_string(&pem).unwrap()
    );
    tls_only(
        &run_local(&scenario(&url, &misnamed), 1).await,
        "tls_name_mismatch",
    );
    assert!(server.stats().requests_total == 0);
    // A cleartext HTTP server answers the ClientHello with garbage.
    let plain = crate::Target::start(0).await;
    let url = plain.url.replace("http://", "https://");
    tls_only(&run_local(&scenario(&url, &trusting(&pem)), 1).await, "tls");
}

/// Through the CLI: `tls.ca_file` is read next to the scenario, and `insecure_skip_verify`
/// works but is announced on stderr and in the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_ca_file_and_warns_loudly_when_verification_is_off() {
    let (server, url, pem, _stop) = https_target().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("certs")).unwrap();
    std::fs::write(dir.path().join("certs/ca.pem"), &pem).unwrap();
    let cases = [
        ("ca", "tls: { ca_file: certs/ca.pem }\n", false),
        ("insecure", "tls: { insecure_skip_verify: true }\n", true),
    ];
    for (name, tls, insecure) in cases {
        let crate::CliRun {
            code,
            stderr,
            report: r,
            ..
        } = cli_run_local(dir.path(), name, &scenario(&url, tls));
        assert_eq!(code, Some(0), "{stderr}");
        assert!(r.totals.errors.is_empty(), "{name}: {:?}", r.totals.errors);
        assert_eq!(r.totals.completed, 60, "{name}");
        assert_eq!(
            stderr.contains("TLS certificate verification is OFF"),
            insecure,
            "{name}: {stderr}"
        );
        assert_eq!(
            r.generator.warnings.first().map(String::as_str)
                == Some(stampede_core::report::INSECURE_TLS_WARNING),
            insecure,
            "{name}: {:?}",
            r.generator.warnings
        );
    }
    assert_eq!(server.stats().requests_total, 120);
}

/// A connection per request resumes the run's earlier TLS sessions, as real clients do, and
/// `tls.resumption: false` makes every one a full handshake; the target tells them apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_connections_resume_sessions_unless_told_not_to() {
    let (server, url, pem, _stop) = https_target().await;
    let text = |resumption: &str| {
        format!(
            "name: e2e-resume\ntarget: {url}\nphases:\n  - {{ duration: 1s, arrival_rate: 20 }}\nsession:\n  - http: {{ path: /data }}\n    repeat: 3\n    new_connection: true\ntls: {{ ca_pem: {}{resumption} }}\n",
            serde_json::to_string(&pem).unwrap()
        )
    };
    let r = run_local(&text(""), 1).await;
    let resumed = server.stats();
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 60);
    assert_eq!(resumed.connections_total, 60, "a connection per request");
    // The first connections go out before any session to resume is known; the rest resume.
    assert!(resumed.tls_resumed >= 50, "{resumed:?}");

    let r = run_local(&text(", resumption: false"), 1).await;
    let full = server.stats();
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 60);
    assert_eq!(full.connections_total, 120);
    assert_eq!(
        full.tls_resumed, resumed.tls_resumed,
        "no handshake resumed"
    );
}
