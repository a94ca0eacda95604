//! `stampede run --debug N`: the run's first N requests and answers are printed as they
//! happen, through the controller's stream (the same path as a remote controller's), with
//! every `${env:...}` value masked in each form a template filter writes it, the answer cut
//! at 1 KiB, and N in all whatever the number of agents; gRPC calls show the method, the
//! grpc-status and the grpc-message.

use std::process::Command;

use tokio::net::{TcpListener, TcpStream};

use crate::grpc::{grpc_target, PROTO};
use crate::{answer_json, read_request, serve_each, BIN};

/// The `${env:...}` secret, with the characters the `json` filter escapes.
const KEY: &str = r#"k3y"Sw0rd\fish/42"#;

/// A real HTTP/1.1 keep-alive target: `/login?user=u00` answers 200 with a 2 KB body,
/// `u01` answers 401 echoing the `x-api-key` it got, the rest 200 naming the user.
async fn target() -> (String, crate::Stop) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (url, serve_each(listener, serve))
}

async fn serve(mut s: TcpStream) {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut s, &mut buf).await {
        let header = |name: &str| req.header(name);
        let path = req.path();
        let user = path
            .split_once("user=")
            .map_or("", |(_, u)| u.split('&').next().unwrap_or(""));
        let (status, body) = match user {
            "u00" => (
                "200 OK",
                format!(r#"{{"hello":"u00","pad":"{}"}}"#, "x".repeat(2000)),
            ),
            "u01" => (
                "401 Unauthorized",
                format!(r#"{{"error":"bad key {}"}}"#, header("x-api-key")),
            ),
            u => ("200 OK", format!(r#"{{"hello":"{u}"}}"#)),
        };
        if !answer_json(&mut s, status, &body).await {
            return;
        }
    }
}

/// `stampede run --local --quiet --debug N --agents A` on `scenario` in `dir`, with
/// `STAMPEDE_TEST_KEY` set: the JSON report's text and standard error.
fn run(dir: &std::path::Path, scenario: &str, debug: u32, agents: u32) -> (String, String) {
    let path = dir.join("s.yaml");
    std::fs::write(&path, scenario).unwrap();
    let json = dir.join("r.json");
    let out = Command::new(BIN)
        .args(["run", "--local", "--quiet", "--debug"])
        .arg(debug.to_string())
        .arg("--agents")
        .arg(agents.to_string())
        .arg("--report")
        .arg(&json)
        .arg(&path)
        .env("STAMPEDE_TEST_KEY", KEY)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let report = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    (report, stderr)
}

/// Every form the templates send [`KEY`] in: plain, `|url`, `|json`, `|hex`.
fn key_forms() -> Vec<String> {
    let hex: String = KEY.bytes().map(|b| format!("{b:02x}")).collect();
    vec![
        KEY.to_string(),
        "k3y%22Sw0rd%5Cfish%2F42".to_string(),
        r#"k3y\"Sw0rd\\fish/42"#.to_string(),
        hex,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_prints_the_first_requests_and_answers_with_secrets_masked() {
    let (url, _stop) = target().await;
    let dir = tempfile::tempdir().unwrap();
    let users: String = std::iter::once("name".to_string())
        .chain((0..12).map(|i| format!("u{i:02}")))
        .map(|l| l + "\n")
        .collect();
    std::fs::write(dir.path().join("users.csv"), users).unwrap();
    let scenario = |rate: u32| {
        format!(
            "name: debug\ntarget: {url}\nmax_error_rate: none\n\
             data:\n  users: {{ file: users.csv, order: sequence }}\n\
             phases: [ {{ duration: 1s, arrival_rate: {rate} }} ]\n\
             session:\n  - name: login\n    http:\n      method: POST\n      \
             path: '/login?user=${{users.name}}&key=${{env:STAMPEDE_TEST_KEY|url}}'\n      \
             headers: {{ x-api-key: '${{env:STAMPEDE_TEST_KEY}}', x-hex: '${{env:STAMPEDE_TEST_KEY|hex}}' }}\n      \
             body: '{{\"user\":\"${{users.name}}\",\"key\":\"${{env:STAMPEDE_TEST_KEY|json}}\"}}'\n"
        )
    };
    let (report, err) = tokio::task::spawn_blocking({
        let (dir, s) = (dir.path().to_path_buf(), scenario(6));
        move || run(&dir, &s, 4, 1)
    })
    .await
    .unwrap();
    assert_eq!(err.matches("-- debug ").count(), 4, "{err}");
    for n in 1..=4 {
        assert!(err.contains(&format!("-- debug {n}/4  agent ")), "{err}");
    }
    for want in [
        "step login",
        "row users#0",
        "> POST /login?user=u00&key=***\n",
        "> x-api-key: ***\n",
        "> x-hex: ***\n",
        "> {\"user\":\"u00\",\"key\":\"***\"}\n",
        "< 200\n",
        "< 401  error status_401\n< {\"error\":\"bad key ***\"}\n",
        "> POST /login?user=u03&key=***\n",
    ] {
        assert!(err.contains(want), "{want:?} not in\n{err}");
    }
    assert!(!err.contains("user=u04"), "a fifth request printed\n{err}");
    // The 2 KB answer is cut at 1 KiB, the cut marked.
    let big = err
        .lines()
        .find(|l| l.starts_with("< {\"hello\":\"u00\""))
        .expect("the first answer's body");
    assert_eq!(big.chars().count(), 2 + 1024 + 1, "{big}");
    assert!(big.ends_with('…'));
    // The failure sample of the 401 hides the filtered forms too.
    let r: stampede_core::report::Report = serde_json::from_str(&report).unwrap();
    let s = &r.failure_samples[0];
    assert!(s.headers.contains("x-hex: ***"), "{}", s.headers);
    assert_eq!(s.sent_body, r#"{"user":"u01","key":"***"}"#);
    for form in key_forms() {
        assert!(!err.contains(&form), "the debug print shows {form}");
        assert!(!report.contains(&form), "the report shows {form}");
    }

    // Two agents each keep the first N of their own: the CLI gets N in all.
    let (_, err) = tokio::task::spawn_blocking({
        let (dir, s) = (dir.path().to_path_buf(), scenario(12));
        move || run(&dir, &s, 3, 2)
    })
    .await
    .unwrap();
    assert_eq!(err.matches("-- debug ").count(), 3, "{err}");
    assert!(err.contains("-- debug 3/3  agent "), "{err}");
}

/// A gRPC call the target fails: the debug print names the method, the grpc-status and the
/// grpc-message, and the report's failure sample carries the grpc-message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_shows_a_grpc_calls_status_and_message() {
    let (_server, url, _stop) = grpc_target().await;
    let dir = tempfile::tempdir().unwrap();
    let scenario = format!(
        "name: debug-grpc\ntarget: {url}\ngrpc: {{ proto_files: [{PROTO}] }}\nmax_error_rate: none\n\
         phases: [ {{ duration: 1s, arrival_rate: 10 }} ]\nsession:\n  \
         - grpc: {{ method: stampede.target.v1.Target/Echo, message: {{ text: hi }} }}\n  \
         - grpc: {{ method: stampede.target.v1.Target/Echo, message: {{ fail_with: 16 }} }}\n"
    );
    let (report, err) = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || run(&dir, &scenario, 2, 1)
    })
    .await
    .unwrap();
    assert_eq!(err.matches("-- debug ").count(), 2, "{err}");
    assert!(err.contains("> /stampede.target.v1.Target/Echo\n"), "{err}");
    assert!(err.contains("< grpc-status ok\n"), "{err}");
    assert!(
        err.contains(
            "< grpc-status unauthenticated  grpc-message failed as asked (fail_with = 16)\n"
        ),
        "{err}"
    );
    let r: stampede_core::report::Report = serde_json::from_str(&report).unwrap();
    let s = &r.failure_samples[0];
    assert_eq!(s.kind, "grpc_unauthenticated");
    assert_eq!(s.grpc_message, "failed as asked (fail_with = 16)");
    assert_eq!(s.request, "/stampede.target.v1.Target/Echo");
}
