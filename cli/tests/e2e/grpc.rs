//! gRPC end to end: the real `stampede` binary resolves the schema (from `.proto` files, and
//! from the target's reflection service), a local controller and agent send the pre-encoded
//! calls to the real gRPC target, and the report agrees call for call with what the target
//! served, non-OK statuses counted under their kind.

use stampede_target_servers::grpc::{GrpcConfig, GrpcServer};
use tokio::net::TcpListener;

use crate::{cli_run_local, serve_until_dropped, CliRun, Stop, BIN};

/// The gRPC target's own `.proto` file, the schema of the e2e gRPC scenarios.
pub(crate) const PROTO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../target-servers/proto/stampede/target/v1/target.proto"
);

/// The real gRPC target on a port of its own: the server (for its counters), its
/// `grpc://` URL, and the guard that stops it.
pub(crate) async fn grpc_target() -> (GrpcServer, String, Stop) {
    grpc_target_with(GrpcConfig::default()).await
}

/// The real gRPC target that keeps its first 1,000 Echo requests, for tests that check what
/// each call carried.
pub(crate) async fn grpc_target_keeping_echoes() -> (GrpcServer, String, Stop) {
    grpc_target_with(GrpcConfig {
        keep_echoes: 1000,
        ..GrpcConfig::default()
    })
    .await
}

async fn grpc_target_with(config: GrpcConfig) -> (GrpcServer, String, Stop) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("grpc://{}", l.local_addr().unwrap());
    let server = GrpcServer::new(config).unwrap();
    let stop = serve_until_dropped(|shutdown| server.clone().serve(l, shutdown));
    (server, url, stop)
}

/// 40 sessions in 1 s, each running `session` (YAML list items, indented by 2).
fn scenario(target: &str, schema: &str, session: &str) -> String {
    format!(
        "name: e2e-grpc\ntarget: {target}\ngrpc: {schema}\nmax_error_rate: none\n\
         phases:\n  - {{ duration: 1s, arrival_rate: 40 }}\nsession:\n{session}"
    )
}

const ECHO_WORK: &str = "  - grpc:
      method: stampede.target.v1.Target/Echo
      message: { text: hi, id: 9007199254740993, tags: [a], inner: { flag: true } }
      metadata: { x-tenant: blue }
  - grpc: { method: stampede.target.v1.Target/Work, message: { cpuUs: 100 } }
";

/// Runs the binary on `text` off the runtime (the target is served on it meanwhile).
pub(crate) async fn run(dir: &std::path::Path, name: &'static str, text: String) -> CliRun {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || cli_run_local(&dir, name, &text))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_from_proto_files_and_reflection_are_what_the_target_served() {
    let (server, url, _stop) = grpc_target().await;
    let dir = tempfile::tempdir().unwrap();

    let files = scenario(&url, &format!("{{ proto_files: [{PROTO}] }}"), ECHO_WORK);
    let r = run(dir.path(), "files", files).await;
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.report.totals.errors.is_empty(),
        "{:?}",
        r.report.totals.errors
    );
    assert_eq!(r.report.totals.completed, 80);
    assert_eq!(server.calls("Echo", "ok"), 40);
    assert_eq!(server.calls("Work", "ok"), 40);

    // Reflection: the same calls, then one answered INVALID_ARGUMENT, which ends its session.
    let failing = format!(
        "{ECHO_WORK}  - grpc: {{ method: stampede.target.v1.Target/Echo, message: {{ fail_with: 3 }} }}\n  - grpc: {{ method: stampede.target.v1.Target/Echo }}\n"
    );
    let r = run(
        dir.path(),
        "reflection",
        scenario(&url, "{ reflection: true }", &failing),
    )
    .await;
    let t = &r.report.totals;
    assert_eq!((t.completed, t.failed), (80, 40), "{}", r.stderr);
    assert_eq!(
        t.errors.iter().collect::<Vec<_>>(),
        [(&"grpc_invalid_argument".to_string(), &40)]
    );
    assert_eq!(r.report.totals.sessions.failed, 40);
    // Counted by grpc-status, never as the HTTP 200 every call was answered with.
    assert_eq!(
        t.grpc_statuses.iter().collect::<Vec<_>>(),
        [
            (&"INVALID_ARGUMENT".to_string(), &40),
            (&"OK".to_string(), &80)
        ]
    );
    assert!(t.status_codes.is_empty(), "{:?}", t.status_codes);
    assert!(
        r.stdout.contains("gRPC      INVALID_ARGUMENT ×40, OK ×80"),
        "{}",
        r.stdout
    );
    let sample = &r.report.failure_samples[0];
    assert_eq!(
        (sample.kind.as_str(), sample.status, sample.request.as_str()),
        (
            "grpc_invalid_argument",
            None,
            "/stampede.target.v1.Target/Echo"
        )
    );
    // The call's grpc-message, as the target wrote it.
    assert_eq!(sample.grpc_message, "failed as asked (fail_with = 3)");
    assert_eq!(server.calls("Echo", "ok"), 80);
    assert_eq!(server.calls("Work", "ok"), 80);
    assert_eq!(server.calls("Echo", "invalid_argument"), 40);
}

#[tokio::test]
async fn a_bad_message_field_is_named_before_any_load() {
    let dir = tempfile::tempdir().unwrap();
    let text = scenario(
        "grpc://127.0.0.1:9",
        &format!("{{ proto_files: [{PROTO}] }}"),
        "  - grpc: { method: stampede.target.v1.Target/Echo, message: { text: hi, inner: { score: high } } }\n",
    );
    refused_before_any_load(dir.path(), &text, "session[0].grpc.message.inner.score: ");
}

/// `validate` and `run --local` both refuse the scenario `text` (exit 2) with `why` on stderr.
pub(crate) fn refused_before_any_load(dir: &std::path::Path, text: &str, why: &str) {
    let path = dir.join("bad.yaml");
    std::fs::write(&path, text).unwrap();
    for args in [&["validate"][..], &["run", "--local", "--quiet"]] {
        let out = std::process::Command::new(BIN)
            .args(args)
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
    }
}

/// `grpcs://` is gRPC over TLS with h2 by ALPN: against the HTTPS target (which is no gRPC
/// server) every call arrives as an HTTP/2 request over a verified TLS connection, and its 404
/// counts as `status_404`, not as a `tls` or `protocol` error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcs_speaks_h2_over_verified_tls() {
    let (server, https, pem, _stop) = crate::tls::https_target().await;
    let url = https.replace("https://", "grpcs://");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}tls: {{ ca_pem: {} }}\n",
        scenario(
            &url,
            &format!("{{ proto_files: [{PROTO}] }}"),
            "  - grpc: { method: stampede.target.v1.Target/Echo, message: { text: hi } }\n"
        ),
        serde_json::to_string(&pem).unwrap()
    );
    let r = run(dir.path(), "grpcs", text).await;
    let st = server.stats();
    assert_eq!(
        r.report.totals.errors.iter().collect::<Vec<_>>(),
        [(&"status_404".to_string(), &40)],
        "{}",
        r.stderr
    );
    assert_eq!((st.requests_total, st.requests_http2), (40, 40));
}

/// Templates in gRPC messages and metadata: a data file's rows, a generated value and a
/// number drawn per session go into each call, rendered by the agent from the CLI's encoding
/// program. The target's own record of the requests it decoded proves every field: each
/// row's name beside its id, in the text and the metadata, a distinct UUID per call, the
/// status asked for by the row. A row whose id is not a number fails its call with its own
/// error kind, before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templated_messages_carry_each_sessions_values() {
    let (server, url, _stop) = grpc_target_keeping_echoes().await;
    let dir = tempfile::tempdir().unwrap();
    let names = [
        "ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal", "ivy", "jay",
    ];
    let mut csv = String::from("id,name,code\n");
    for (i, name) in names.iter().enumerate() {
        // Row 9 asks for NOT_FOUND; row 10's id is no number.
        let id = if i == 9 {
            "x10".to_string()
        } else {
            (i + 1).to_string()
        };
        let code = if i == 8 { 5 } else { 0 };
        csv.push_str(&format!("{id},{name},{code}\n"));
    }
    std::fs::write(dir.path().join("users.csv"), csv).unwrap();
    let session = "  - grpc:
      method: stampede.target.v1.Target/Echo
      message:
        text: 'hi ${users.name} ${uuid()}'
        id: '${users.id}'
        fail_with: '${users.code}'
        tags: [fixed]
        inner: { flag: true, score: '${int(1,100)}' }
      metadata: { x-user: '${users.name}', x-tenant: blue }
";
    let text = scenario(&url, &format!("{{ proto_files: [{PROTO}] }}"), session).replace(
        "phases:",
        "data:\n  users: { file: users.csv, order: sequence, on_exhausted: wrap }\nphases:",
    );
    let r = run(dir.path(), "templated", text).await;
    let t = &r.report.totals;
    let errors: Vec<_> = t.errors.iter().collect();
    assert_eq!(
        errors,
        [
            (&"grpc_field_value".to_string(), &4),
            (&"grpc_not_found".to_string(), &4)
        ],
        "{}",
        r.stderr
    );
    assert_eq!(t.completed, 32, "{}", r.stderr);
    assert_eq!(server.calls("Echo", "ok"), 32);
    assert_eq!(server.calls("Echo", "not_found"), 4);

    let echoes = server.echoes();
    assert_eq!(echoes.len(), 36);
    let mut per_id = std::collections::BTreeMap::new();
    let mut uuids = std::collections::BTreeSet::new();
    for e in &echoes {
        let q = &e.request;
        let name = names[usize::try_from(q.id - 1).unwrap()];
        *per_id.entry(q.id).or_insert(0) += 1;
        let uuid = q
            .text
            .strip_prefix(&format!("hi {name} "))
            .unwrap_or_else(|| panic!("id {} with text {:?}", q.id, q.text));
        assert_eq!(uuid.len(), 36, "{uuid}");
        uuids.insert(uuid.to_string());
        assert_eq!(e.metadata["x-user"], name);
        assert_eq!(e.metadata["x-tenant"], "blue");
        assert_eq!(q.fail_with, if q.id == 9 { 5 } else { 0 });
        assert_eq!(q.tags, ["fixed"]);
        let inner = q.inner.as_ref().unwrap();
        assert!(inner.flag);
        assert!((1.0..=100.0).contains(&inner.score) && inner.score.fract() == 0.0);
    }
    assert_eq!(uuids.len(), 36, "one UUID per call");
    assert_eq!(per_id, (1..=9).map(|id| (id, 4)).collect());
}

/// `stampede capacity` over a gRPC target: the schema is resolved from `proto_files` once,
/// before the first step, and every step's calls reach the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_search_resolves_the_grpc_schema() {
    let (server, url, _stop) = grpc_target().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cap.yaml");
    // No phases: the search supplies the load.
    std::fs::write(
        &path,
        format!(
            "name: e2e-grpc-cap\ntarget: {url}\ngrpc: {{ proto_files: [{PROTO}] }}\nsession:\n{ECHO_WORK}"
        ),
    )
    .unwrap();
    let out = tokio::process::Command::new(BIN)
        .arg("capacity")
        .arg(&path)
        .args(["--local", "--agents", "1", "--slo", "p99 < 2s"])
        .args(["--start", "20", "--step", "20", "--max", "40"])
        .args(["--step-duration", "1s", "--output", "json", "--quiet"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["sustainable_rate"], 40.0, "{v}");
    // Each session calls Echo then Work: 20, then 40 sessions a second, for 1 s each.
    assert_eq!(server.calls("Echo", "ok"), 60, "{v}");
    assert_eq!(server.calls("Work", "ok"), 60, "{v}");
}

/// A scenario submitted with its gRPC calls not encoded (what a LoadTest with `proto_files`
/// would send) is refused at submission, naming the call, instead of failing in the agents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_call_that_is_not_encoded_is_refused_naming_it() {
    let cluster = stampede_cli::local::LocalCluster::start(1, None)
        .await
        .unwrap();
    let text = scenario(
        "grpc://127.0.0.1:9",
        &format!("{{ proto_files: [{PROTO}] }}"),
        ECHO_WORK,
    );
    let mut c = stampede_cli::client::connect(&cluster.url(), Some(&cluster.token))
        .await
        .unwrap();
    let e = stampede_cli::client::submit(&mut c, &text, Some(1), None)
        .await
        .unwrap_err()
        .to_string();
    cluster.stop().await;
    assert!(
        e.contains(
            "session[0].grpc: the call is not encoded: the CLI encodes gRPC messages against the \
             schema (`stampede run`, `stampede capacity`), and a LoadTest's reconciler against \
             the .proto files of its grpc.config_map"
        ),
        "{e}"
    );
}
