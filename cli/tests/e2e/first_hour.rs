//! The first hour's traps, through the real binary: a run in which nothing succeeded never
//! passes, output paths are checked before any load, one-line runs, status codes named.

use std::process::Command;

use crate::{cli_run_local, Target, BIN};

/// A port nothing listens on: bound, then closed.
fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_where_every_request_was_refused_is_failed() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "name: dead\ntarget: http://127.0.0.1:{}\nphases:\n  - {{ duration: 1s, arrival_rate: 20 }}\nsession:\n  - http: {{ path: / }}\n",
        dead_port()
    );
    let run = tokio::task::spawn_blocking(move || cli_run_local(dir.path(), "dead", &text))
        .await
        .unwrap();
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    let r = &run.report;
    assert_eq!(r.outcome, stampede_core::report::RunOutcome::Failed);
    let m = r.message.as_deref().unwrap_or_default();
    assert!(m.starts_with("no request succeeded: all 20 failed"), "{m}");
    assert!(run.stdout.contains("FAILED"), "{}", run.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_output_is_refused_before_any_load() {
    let target = Target::start(0).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}/data", target.url);
    let missing = dir.path().join("nosuchdir/r.json");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(BIN)
            .args(["run", "--local", "--quiet", "--url", &url, "--rate", "20"])
            .args(["--duration", "1s", "--report"])
            .arg(&missing)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("does not exist") && err.contains("--report"),
        "{err}"
    );
    assert_eq!(
        target.requests(),
        0,
        "load was sent before the path was checked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_line_run_counts_status_codes() {
    let target = Target::start(0).await;
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let ok_url = format!("{}/data", target.url);
    let r2 = report.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(BIN)
            .args(["run", "--local", "--quiet", "--url", &ok_url, "-R", "40"])
            .args(["-d", "1s", "--report"])
            .arg(&r2)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: stampede_core::report::Report =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r.totals.completed, 40);
    assert_eq!(r.totals.status_codes.get(&200), Some(&40));
    assert!(r.totals.mean_response_bytes > 0.0);
    assert_eq!(target.requests(), 40);

    // Every answer has a status the step does not expect: failed, the code named.
    let text = format!(
        "name: wrong\ntarget: {}\nload: {{ model: closed, connections: 2, duration: 500ms }}\nsession:\n  - http: {{ path: /data, expect_status: [201] }}\n",
        target.url
    );
    let run = tokio::task::spawn_blocking(move || crate::cli_run_local(dir.path(), "wrong", &text))
        .await
        .unwrap();
    assert_eq!(run.code, Some(2));
    let t = &run.report.totals;
    assert!(t.failed > 0);
    assert_eq!(t.errors.get("status_200"), Some(&t.failed));
    assert_eq!(t.status_codes.get(&200), Some(&t.failed));
    assert!(run.stdout.contains("status_200"), "{}", run.stdout);
}

#[test]
fn validate_reads_standard_input() {
    use std::io::Write as _;
    let mut child = Command::new(BIN)
        .args(["validate", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"name: s\ntarget: http://127.0.0.1:1\nphases:\n  - { duration: 1h, arrival_rate: 5 }\nsession:\n  - http: { path: / }\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("18000 sessions"));
}

/// `validate` needs no `${env:...}` variable set and names them as required at run; `run`
/// refuses, before any load, a scenario whose variable is missing, naming the field.
#[test]
fn validate_names_the_environment_a_run_needs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("env.yaml");
    std::fs::write(
        &path,
        "name: s\ntarget: http://127.0.0.1:1\nphases:\n  - { duration: 1s, arrival_rate: 1 }\nsession:\n  - http: { path: '/?k=${env:STAMPEDE_E2E_UNSET_KEY}', headers: { x-home: '${env:HOME}' } }\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("validate")
        .arg(&path)
        .env_remove("STAMPEDE_E2E_UNSET_KEY")
        .env("HOME", "/nowhere")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("required at run: HOME (set), STAMPEDE_E2E_UNSET_KEY (not set here)"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("/nowhere"),
        "a value is never printed: {stdout}"
    );
    let out = Command::new(BIN)
        .args(["run", "--local", "--quiet"])
        .arg(&path)
        .env_remove("STAMPEDE_E2E_UNSET_KEY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "session[0].http.path: ${env:STAMPEDE_E2E_UNSET_KEY} is not set in the environment"
        ),
        "{stderr}"
    );
}
