//! Failure samples: a target that refuses known data rows with a known body, and the report
//! (JSON, text and HTML) naming those rows with the answers; a run failing thousands of times
//! keeps the bounded few, and `samples: false` keeps none.

use std::process::Command;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::{read_head, serve_each, Stop, BIN};

/// The users the target refuses.
const BAD: [&str; 5] = ["u11", "u14", "u19", "u23", "u27"];

/// A real HTTP/1.1 keep-alive target: `GET /login?user=NAME` answers 401
/// `{"error":"bad password for NAME"}` for the [`BAD`] users and 200 for the others;
/// `/big/...` answers 500 with a 4 KiB body that is not all text; anything else 200.
async fn target() -> (String, Stop) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (url, serve_each(listener, serve))
}

async fn serve(mut s: TcpStream) {
    let mut buf = Vec::new();
    loop {
        let Some(end) = read_head(&mut s, &mut buf).await else {
            return;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end);
        let path = head.split(' ').nth(1).unwrap_or_default().to_string();
        let (status, body) = match path.split_once("/login?user=") {
            Some((_, user)) if BAD.contains(&user) => (
                "401 Unauthorized",
                format!(r#"{{"error":"bad password for {user}"}}"#).into_bytes(),
            ),
            _ if path.starts_with("/big/") => {
                let mut b = vec![b'x'; 4096];
                b[3] = 0xff;
                ("500 Internal Server Error", b)
            }
            _ => ("200 OK", b"{\"ok\":true}".to_vec()),
        };
        let mut out = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        if s.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// Runs `stampede run --local` on `scenario` (written into `dir`) with JSON and HTML
/// reports; the report, the HTML and what it printed.
fn run(
    dir: &std::path::Path,
    scenario: &str,
) -> (stampede_core::report::Report, String, String, String) {
    let path = dir.join("s.yaml");
    std::fs::write(&path, scenario).unwrap();
    let (json, html) = (dir.join("r.json"), dir.join("r.html"));
    let out = Command::new(BIN)
        .args(["run", "--local", "--quiet", "--agents", "1", "--report"])
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    let html = std::fs::read_to_string(&html).unwrap();
    (serde_json::from_str(&text).unwrap(), text, html, stdout)
}

/// The acceptance case: 30 users in file order, one session each; the five bad ones are
/// refused. The report's samples are the first three refusals by time, each naming its row
/// (the source, the row's number, the user) beside the request as sent, the status and the
/// answer; the text report has the first on one line, the HTML every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_name_the_refused_rows_and_their_answers() {
    let (url, _stop) = target().await;
    let dir = tempfile::tempdir().unwrap();
    let users: String = std::iter::once("name".to_string())
        .chain((0..30).map(|i| format!("u{i:02}")))
        .map(|l| l + "\n")
        .collect();
    std::fs::write(dir.path().join("users.csv"), users).unwrap();
    let scenario = format!(
        "name: samples\ntarget: {url}\nagents: 1\n\
         data:\n  users: {{ file: users.csv, order: sequence, on_exhausted: fail }}\n\
         phases: [ {{ duration: 1s, arrival_rate: 30 }} ]\n\
         session:\n  - name: login\n    http: {{ method: GET, path: '/login?user=${{users.name}}' }}\n    \
         check: {{ status: [200] }}\n"
    );
    let (r, _, html, stdout) = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || run(&dir, &scenario)
    })
    .await
    .unwrap();
    assert_eq!(r.totals.errors.values().sum::<u64>(), 5, "{stdout}");
    let samples = &r.failure_samples;
    assert_eq!(samples.len(), 3, "{samples:#?}");
    for (s, user) in samples.iter().zip(["u11", "u14", "u19"]) {
        let row: u64 = user[1..].parse().unwrap();
        assert_eq!(s.step, "login");
        assert_eq!(s.kind, "check.status");
        assert_eq!(s.status, Some(401));
        assert_eq!(s.request, format!("GET /login?user={user}"));
        assert_eq!(s.body, format!(r#"{{"error":"bad password for {user}"}}"#));
        assert_eq!(s.rows.len(), 1);
        assert_eq!((s.rows[0].source.as_str(), s.rows[0].row), ("users", row));
        assert_eq!(s.rows[0].values["name"], user);
        assert!(s.offset_s > 0.0 && s.offset_s < 2.0, "{}", s.offset_s);
        assert!(html.contains(&format!("bad password for {user}")), "{user}");
    }
    assert!(
        stdout
            .contains(r#"  login check.status 401 row users#11 {"error":"bad password for u11"}"#),
        "{stdout}"
    );
}

/// Thousands of failures of two kinds keep three samples of each, every body cut to 512
/// bytes with its binary byte escaped, and the report stays small; `samples: false` keeps
/// none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_stay_bounded_and_can_be_turned_off() {
    let (url, _stop) = target().await;
    let dir = tempfile::tempdir().unwrap();
    let scenario = |extra: &str| {
        format!(
            "name: many\ntarget: {url}\nagents: 1\n{extra}\
             phases: [ {{ duration: 1s, arrival_rate: 1500 }} ]\n\
             session:\n  - name: big\n    http: {{ method: GET, path: '/big/${{session.index}}' }}\n  \
             - name: login\n    http: {{ method: GET, path: '/login?user=u11' }}\n"
        )
    };
    let (r, text, html, stdout) = tokio::task::spawn_blocking({
        let (dir, s) = (dir.path().to_path_buf(), scenario(""));
        move || run(&dir, &s)
    })
    .await
    .unwrap();
    assert!(r.totals.failed >= 1_000, "{stdout}");
    let big: Vec<_> = r
        .failure_samples
        .iter()
        .filter(|s| s.step == "big")
        .collect();
    assert_eq!(big.len(), 3, "{:#?}", r.failure_samples);
    for s in &big {
        assert_eq!((s.kind.as_str(), s.status), ("status_500", Some(500)));
        // The first 512 bytes of the 4 KiB, the byte that is not text escaped, the cut marked.
        assert_eq!(s.body, format!(r"xxx\xff{}…", "x".repeat(508)));
        assert!(s.request.starts_with("GET /big/"), "{}", s.request);
        assert!(s.rows.is_empty());
    }
    // The session ends at its first failure: the login step never runs.
    assert_eq!(r.failure_samples.len(), 3);
    let samples = serde_json::to_string(&r.failure_samples).unwrap();
    assert!(samples.len() < 4_096, "{} bytes of samples", samples.len());
    assert!(html.contains("<h2>Failure samples</h2>"));
    assert!(stdout.lines().all(|l| l.chars().count() <= 80), "{stdout}");
    assert!(text.contains("failure_samples"));

    let (off, text, html, _) = tokio::task::spawn_blocking({
        let (dir, s) = (dir.path().to_path_buf(), scenario("samples: false\n"));
        move || run(&dir, &s)
    })
    .await
    .unwrap();
    assert!(off.totals.failed >= 1_000);
    assert!(off.failure_samples.is_empty());
    assert!(!text.contains("failure_samples") && !html.contains("Failure samples"));
}
