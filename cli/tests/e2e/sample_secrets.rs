//! Failure samples show what was sent (request line, headers and body, of static steps too)
//! with every `${env:...}` and setup value written `***`, name the data row of a session
//! whose connect failed, and none of the secrets reaches the JSON, text or HTML report.

use std::process::Command;

use tokio::net::{TcpListener, TcpStream};

use crate::{answer_json, read_request, serve_each, Stop, BIN};

/// The `${env:...}` secret: in a query, a header and a body.
const KEY: &str = "k3y-Sw0rdfish/42";
/// What the target's `/token` hands the setup step, read as `${setup.token}`.
const TOKEN: &str = "setup-t0ken-9931";

/// A real HTTP/1.1 keep-alive target that reads bodies by their length: `/token` answers
/// `{"token":TOKEN}`; `/login?user=u03...` answers 401 with a body that echoes the request's
/// `x-api-key` (a server that leaks what it got); `/static` answers 500; the rest 200.
async fn target() -> (String, Stop) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (url, serve_each(listener, serve))
}

async fn serve(mut s: TcpStream) {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut s, &mut buf).await {
        let header = |name: &str| req.header(name);
        let path = req.path().to_string();
        let (status, body) = if path == "/token" {
            ("200 OK", format!(r#"{{"token":"{TOKEN}"}}"#))
        } else if path.starts_with("/login?user=u03") {
            let key = header("x-api-key");
            (
                "401 Unauthorized",
                format!(r#"{{"error":"bad key {key}"}}"#),
            )
        } else if path.starts_with("/static") {
            (
                "500 Internal Server Error",
                r#"{"error":"down"}"#.to_string(),
            )
        } else {
            ("200 OK", r#"{"ok":true}"#.to_string())
        };
        if !answer_json(&mut s, status, &body).await {
            return;
        }
    }
}

/// Runs `stampede run --local` on `scenario` in `dir` with `STAMPEDE_TEST_KEY` set to
/// [`KEY`]; the report, its JSON, its HTML and the text printed.
fn run(
    dir: &std::path::Path,
    scenario: &str,
) -> (stampede_core::report::Report, String, String, String) {
    let path = dir.join("s.yaml");
    std::fs::write(&path, scenario).unwrap();
    let (json, html) = (dir.join("r.json"), dir.join("r.html"));
    let out = Command::new(BIN)
        .args([
            "run", "--local", "--quiet", "--agents", "1", "--wide", "--report",
        ])
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .arg(&path)
        .env("STAMPEDE_TEST_KEY", KEY)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    let html = std::fs::read_to_string(&html).unwrap();
    (serde_json::from_str(&text).unwrap(), text, html, stdout)
}

fn users(dir: &std::path::Path) {
    let users: String = std::iter::once("name".to_string())
        .chain((0..6).map(|i| format!("u{i:02}")))
        .map(|l| l + "\n")
        .collect();
    std::fs::write(dir.join("users.csv"), users).unwrap();
}

/// A secret from the environment in a query, a header and a body, and a setup value in a
/// header: the samples show the requests as sent with `***` in their place, a static step's
/// body too, and none of the reports holds either secret anywhere, not even where the
/// target echoed it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_show_what_was_sent_with_secrets_masked() {
    let (url, _stop) = target().await;
    let dir = tempfile::tempdir().unwrap();
    users(dir.path());
    let scenario = format!(
        "name: secrets\ntarget: {url}\nagents: 1\n\
         setup:\n  - http: {{ method: GET, path: /token }}\n    extract: {{ token: {{ json: /token }} }}\n\
         data:\n  users: {{ file: users.csv, order: sequence, on_exhausted: fail }}\n\
         phases: [ {{ duration: 1s, arrival_rate: 6 }} ]\n\
         session:\n  - name: login\n    http: {{ method: POST, path: '/login?user=${{users.name}}&key=${{env:STAMPEDE_TEST_KEY}}', \
         headers: {{ x-api-key: '${{env:STAMPEDE_TEST_KEY}}', x-token: '${{setup.token}}' }}, \
         body: 'user=${{users.name}}&key=${{env:STAMPEDE_TEST_KEY}}' }}\n    check: {{ status: [200] }}\n  \
         - name: static\n    http: {{ method: POST, path: '/static?key=${{env:STAMPEDE_TEST_KEY}}', \
         headers: {{ x-api-key: '${{env:STAMPEDE_TEST_KEY}}' }}, body: 'plain=1&key=${{env:STAMPEDE_TEST_KEY}}' }}\n"
    );
    let (r, json, html, stdout) = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || run(&dir, &scenario)
    })
    .await
    .unwrap();
    let login: Vec<_> = r
        .failure_samples
        .iter()
        .filter(|s| s.step == "login")
        .collect();
    let stat: Vec<_> = r
        .failure_samples
        .iter()
        .filter(|s| s.step == "static")
        .collect();
    assert_eq!(login.len(), 1, "{:#?}\n{stdout}", r.failure_samples);
    assert_eq!(stat.len(), 3, "{:#?}", r.failure_samples);
    let l = login[0];
    assert_eq!(l.request, "POST /login?user=u03&key=***");
    assert!(l.headers.contains("x-api-key: ***"), "{}", l.headers);
    assert!(l.headers.contains("x-token: ***"), "{}", l.headers);
    assert_eq!(l.sent_body, "user=u03&key=***");
    assert_eq!(l.body, r#"{"error":"bad key ***"}"#);
    assert_eq!((l.rows[0].source.as_str(), l.rows[0].row), ("users", 3));
    for s in &stat {
        assert_eq!(s.request, "POST /static?key=***");
        assert!(s.headers.contains("x-api-key: ***"), "{}", s.headers);
        assert_eq!(s.sent_body, "plain=1&key=***");
        assert_eq!(s.status, Some(500));
    }
    assert!(
        html.contains("plain=1&amp;key=***"),
        "the HTML shows the body sent"
    );
    // The key is sent percent-encoded in the query; neither form, nor the token, shows.
    let encoded = KEY.replace('/', "%2F");
    for (what, report) in [("JSON", &json), ("HTML", &html), ("text", &stdout)] {
        for secret in [KEY, encoded.as_str(), TOKEN] {
            assert!(!report.contains(secret), "the {what} report shows {secret}");
        }
    }
}

/// A session whose connect is refused: its sample names the data row it had bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connect_names_its_row() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    users(dir.path());
    let scenario = format!(
        "name: refused\ntarget: http://{closed}\nagents: 1\n\
         data:\n  users: {{ file: users.csv, order: sequence }}\n\
         phases: [ {{ duration: 1s, arrival_rate: 3 }} ]\n\
         session:\n  - name: login\n    http: {{ method: GET, path: '/login?user=${{users.name}}' }}\n"
    );
    let (r, _, html, stdout) = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || run(&dir, &scenario)
    })
    .await
    .unwrap();
    assert_eq!(
        r.failure_samples.len(),
        3,
        "{:#?}\n{stdout}",
        r.failure_samples
    );
    for (s, row) in r.failure_samples.iter().zip(0..) {
        assert_eq!(s.kind, "connect_refused");
        assert_eq!((s.rows[0].source.as_str(), s.rows[0].row), ("users", row));
        assert_eq!(s.rows[0].values["name"], format!("u{row:02}"));
        assert!(
            html.contains(&format!("users#{row} (name=u{row:02})")),
            "{html}"
        );
    }
    assert!(
        stdout.contains("login connect_refused row users#0"),
        "{stdout}"
    );
}
