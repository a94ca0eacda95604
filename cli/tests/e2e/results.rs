//! Results people act on: live Prometheus `/metrics`, shell completions, the HTML report.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use prometheus_parse::{Scrape, Value};
use stampede_cli::local::LocalCluster;
use stampede_core::report::RunOutcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::{run, Proc, Target, BIN};

/// `GET path` over HTTP/1.1 on loopback; returns (status line, body).
async fn http_get(addr: &str, path: &str) -> (String, String) {
    let fetch = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        String::from_utf8(buf).unwrap()
    };
    let text = tokio::time::timeout(Duration::from_secs(10), fetch)
        .await
        .expect("metrics answered in time");
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    if path == "/metrics" {
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4"),
            "{head}"
        );
    }
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

fn parse(body: &str) -> Scrape {
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("valid Prometheus text")
}

/// The value of `metric` whose labels include all of `want`.
fn value(s: &Scrape, metric: &str, want: &[(&str, &str)]) -> Option<Value> {
    s.samples
        .iter()
        .find(|x| x.metric == metric && want.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| x.value.clone())
}

fn num(v: Option<Value>) -> f64 {
    match v {
        Some(Value::Counter(f) | Value::Gauge(f) | Value::Untyped(f)) => f,
        other => panic!("not a number: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_and_match_the_final_report() {
    let target = Target::start(1).await;
    let cluster = LocalCluster::start(2, None).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let maddr = listener.local_addr().unwrap().to_string();
    let stop = CancellationToken::new();
    let metrics = {
        let (c, s) = (cluster.controller.clone(), stop.clone());
        tokio::spawn(async move {
            c.serve_metrics(listener, async move { s.cancelled().await })
                .await
        })
    };
    // Every session does one good request, then one the target answers 400 (a status error).
    let text = format!(
        "name: metrics\ntarget: {}\nphases:\n  - {{ duration: 2s, arrival_rate: 60 }}\nsession:\n  - http: {{ method: GET, path: /data }}\n  - http: {{ method: GET, path: \"/work?ms=999999999\" }}\n",
        target.url
    );
    let r = run(&cluster.url(), &cluster.token, &text, 2).await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert!(
        r.totals.completed > 0 && r.totals.failed > 0,
        "{:?}",
        r.totals
    );

    let (status, body) = http_get(&maddr, "/metrics").await;
    assert!(status.contains("200"), "{status}");
    eprintln!("{body}");
    let s = parse(&body);
    let run_id = r.run_id.as_str();
    let l = [("run_id", run_id)];
    assert_eq!(num(value(&s, "stampede_agents_connected", &[])), 2.0);
    assert_eq!(num(value(&s, "stampede_agents_busy", &[])), 0.0);
    assert_eq!(num(value(&s, "stampede_runs", &[("state", "done")])), 1.0);
    assert_eq!(
        num(value(
            &s,
            "stampede_run_state",
            &[("run_id", run_id), ("state", "done")]
        )),
        1.0
    );
    assert_eq!(
        num(value(&s, "stampede_run_requests_completed_total", &l)),
        r.totals.completed as f64
    );
    assert_eq!(
        num(value(&s, "stampede_run_requests_failed_total", &l)),
        r.totals.failed as f64
    );
    assert!(!r.totals.errors.is_empty());
    for (kind, n) in &r.totals.errors {
        assert_eq!(
            num(value(
                &s,
                "stampede_run_errors_total",
                &[("run_id", run_id), ("kind", kind)]
            )),
            *n as f64,
            "{kind}"
        );
    }
    assert_eq!(num(value(&s, "stampede_run_active_agents", &l)), 0.0);
    assert_eq!(num(value(&s, "stampede_run_open_connections", &l)), 0.0);
    // A real histogram: cumulative buckets, +Inf equal to _count, _count equal to the report.
    let Some(Value::Histogram(buckets)) = value(&s, "stampede_run_response_time_seconds", &l)
    else {
        panic!("no response-time histogram");
    };
    assert!(buckets.len() > 10);
    assert!(buckets.windows(2).all(|w| w[0].count <= w[1].count));
    let inf = buckets.last().unwrap();
    assert!(inf.less_than.is_infinite(), "{inf:?}");
    let count = num(value(&s, "stampede_run_response_time_seconds_count", &l));
    assert_eq!(inf.count, count);
    assert_eq!(count, r.latency.response_time.count as f64);
    let sum = num(value(&s, "stampede_run_response_time_seconds_sum", &l));
    let mean_s = r.latency.response_time.mean_us / 1e6;
    assert!(
        (sum / count - mean_s).abs() <= mean_s * 0.01 + 1e-6,
        "mean {} s vs report {mean_s} s",
        sum / count
    );

    let (status, _) = http_get(&maddr, "/healthz").await;
    assert!(status.contains("200"), "{status}");
    stop.cancel();
    metrics.await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_binary_serves_metrics_on_metrics_listen() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args([
            "controller",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn controller");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let _proc = Proc(child);
    let mut lines = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        lines.push(line);
    }
    let maddr = lines[1]
        .trim()
        .strip_prefix("stampede controller metrics on ")
        .unwrap_or_else(|| panic!("{lines:?}"))
        .to_string();
    let (_, body) = http_get(&maddr, "/metrics").await;
    let s = parse(&body);
    assert_eq!(num(value(&s, "stampede_agents_connected", &[])), 0.0);
    assert_eq!(
        num(value(&s, "stampede_runs", &[("state", "running")])),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .expect("run stampede completions");
        assert!(out.status.success(), "{shell}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("stampede"), "{shell}");
        for sub in [
            "run",
            "demo",
            "status",
            "report",
            "agents",
            "abort",
            "controller",
            "completions",
        ] {
            assert!(text.contains(sub), "{shell} completion lacks {sub}");
        }
        if shell == "bash" {
            assert!(text.contains("complete -F _stampede"), "{text}");
            assert!(text.contains("--metrics-listen"));
        }
    }
    let bad = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// Headless Chromium, if installed (Debian package `chromium`).
fn chromium() -> Option<std::path::PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| {
            std::env::var_os("PATH")
                .map(|p| {
                    std::env::split_paths(&p)
                        .map(|d| d.join(name))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .find(|p| p.is_file())
}

/// Runs headless Chromium on `url` with `args`; returns stdout. Bounded; killed on timeout.
async fn chromium_run(bin: &std::path::Path, args: &[String], url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let child = tokio::process::Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--window-size=1100,3200",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn chromium");
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("chromium finished in time")
        .unwrap();
    assert!(out.status.success(), "chromium: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn html_report_renders_its_charts_in_headless_chromium() {
    let target = Target::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("s.yaml");
    std::fs::write(
        &scenario,
        format!(
            "name: html\ntarget: {}\nphases:\n  - {{ name: warm, duration: 1s, arrival_rate: 40 }}\n  - {{ name: ramp, duration: 2s, arrival_rate: 40, ramp_to: 120 }}\nsession:\n  - name: data\n    http: {{ method: GET, path: /data }}\nthresholds:\n  - p99 < 5s\n  - error_rate < 0.1%\n",
            target.url
        ),
    )
    .unwrap();
    let html = dir.path().join("report.html");
    let out = tokio::process::Command::new(BIN)
        .arg("run")
        .arg(&scenario)
        .args(["--local", "--agents", "2", "--quiet", "--html"])
        .arg(&html)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(90), out)
        .await
        .expect("run finished in time")
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    // Self-contained: no scripts, no external fonts, styles or images.
    assert!(!page.contains("<script"));
    assert!(!page.contains("<link"));
    assert!(!page.contains("@font-face") && !page.contains("url("));
    // No request failed: the errors chart collapses to a line, three charts are left.
    assert!(page.contains("No errors."));
    assert_eq!(page.matches("<svg").count(), 3, "three charts");
    for needle in [
        "Percentile spectrum",
        "warm",
        "ramp",
        "local-1",
        "local-2",
        "p99 &lt; 5s",
        "PASS",
    ] {
        assert!(page.contains(needle), "report lacks {needle}");
    }

    let Some(bin) = chromium() else {
        eprintln!("SKIPPED: chromium not installed (apt-get install -y chromium)");
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is required in CI"
        );
        return;
    };
    // A probe copy of the page: after layout, count the SVG charts Chromium actually drew
    // (non-empty boxes with plotted lines) and write the count into the DOM.
    let probe = dir.path().join("probe.html");
    std::fs::write(
        &probe,
        page.replace(
            "</body>",
            "<script>const ok=[...document.querySelectorAll('svg')].filter(s=>{const b=s.getBoundingClientRect();return b.width>300&&b.height>100&&[...s.querySelectorAll('polyline')].some(p=>p.getBBox().width>0)}).length;document.body.setAttribute('data-charts-rendered',String(ok));</script></body>",
        ),
    )
    .unwrap();
    let dom = chromium_run(
        &bin,
        &["--dump-dom".into()],
        &format!("file://{}", probe.display()),
    )
    .await;
    assert!(
        dom.contains("data-charts-rendered=\"3\""),
        "charts not rendered: {}",
        dom.chars().take(400).collect::<String>()
    );
    let png = dir.path().join("report.png");
    chromium_run(
        &bin,
        &[format!("--screenshot={}", png.display())],
        &format!("file://{}", html.display()),
    )
    .await;
    let bytes = std::fs::read(&png).unwrap();
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 20_000,
        "{} bytes",
        bytes.len()
    );
    if let Some(keep) = std::env::var_os("STAMPEDE_KEEP_SCREENSHOT") {
        std::fs::copy(&png, keep).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_live_while_the_run_goes_on() {
    let target = Target::start(1).await;
    let cluster = LocalCluster::start(2, None).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let maddr = listener.local_addr().unwrap().to_string();
    let stop = CancellationToken::new();
    let metrics = {
        let (c, s) = (cluster.controller.clone(), stop.clone());
        tokio::spawn(async move {
            c.serve_metrics(listener, async move { s.cancelled().await })
                .await
        })
    };
    let mut c = stampede_cli::client::connect(&cluster.url(), Some(&cluster.token))
        .await
        .unwrap();
    let text = crate::scenario(&target.url, "  - { duration: 4s, arrival_rate: 50 }\n", "");
    let run_id = stampede_cli::client::submit(&mut c, &text, Some(2), None)
        .await
        .unwrap();
    let mut stream = c
        .watch_run(stampede_proto::v1::WatchRunRequest {
            run_id: run_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    // A snapshot with data means the driver has merged (and fed /metrics) that progress.
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let ev = stream.message().await.unwrap().expect("run still going");
            if let Some(stampede_proto::v1::run_event::Event::Snapshot(s)) = ev.event {
                if s.completed > 0 {
                    return s.completed;
                }
            }
        }
    })
    .await
    .expect("a live snapshot with data");
    let (_, body) = http_get(&maddr, "/metrics").await;
    let s = parse(&body);
    let l = [("run_id", run_id.as_str())];
    assert_eq!(
        num(value(
            &s,
            "stampede_run_state",
            &[("run_id", run_id.as_str()), ("state", "running")]
        )),
        1.0,
        "{body}"
    );
    assert_eq!(
        num(value(&s, "stampede_runs", &[("state", "running")])),
        1.0
    );
    assert_eq!(num(value(&s, "stampede_agents_busy", &[])), 2.0);
    assert_eq!(num(value(&s, "stampede_run_active_agents", &l)), 2.0);
    assert!(num(value(&s, "stampede_run_requests_completed_total", &l)) >= seen as f64);
    assert!(num(value(&s, "stampede_run_throughput_rps", &l)) > 0.0);
    assert!(value(&s, "stampede_run_open_connections", &l).is_some());
    // Let the run finish, then the live gauges fall back to zero.
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(30), stream.message())
        .await
        .expect("run ends in time")
        .unwrap()
    {
        if let Some(stampede_proto::v1::run_event::Event::ReportJson(_)) = ev.event {
            break;
        }
    }
    let (_, body) = http_get(&maddr, "/metrics").await;
    let s = parse(&body);
    assert_eq!(num(value(&s, "stampede_run_active_agents", &l)), 0.0);
    assert_eq!(num(value(&s, "stampede_run_throughput_rps", &l)), 0.0);
    assert_eq!(
        num(value(&s, "stampede_run_requests_completed_total", &l)),
        200.0
    );
    stop.cancel();
    metrics.await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_writes_the_html_report_next_to_the_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("demo-report.json");
    let out = tokio::process::Command::new(BIN)
        .args(["demo", "--duration", "3s", "--agents", "1", "--report"])
        .arg(&json)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(90), out)
        .await
        .expect("demo finished in time")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let html = dir.path().join("demo-report.html");
    assert!(stderr.contains(&html.display().to_string()), "{stderr}");
    let page = std::fs::read_to_string(&html).unwrap();
    // The demo's target answers every request: no errors chart.
    assert_eq!(page.matches("<svg").count(), 3);
    assert!(json.is_file());
}

/// `run --local --metrics-listen`: the embedded controller serves the same Prometheus
/// metrics as `stampede controller` while the run goes on, its agent among them, and the run
/// ends by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_run_serves_metrics_on_metrics_listen() {
    let target = Target::start(0).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.yaml");
    std::fs::write(
        &path,
        format!(
            "name: m\ntarget: {}\nphases: [ {{ duration: 2s, arrival_rate: 20 }} ]\n\
             session: [ {{ http: {{ method: GET, path: / }} }} ]\n",
            target.url
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args([
            "run",
            "--local",
            "--quiet",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg(&path)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn stampede run");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut proc = Proc(child);
    let mut seen = Vec::new();
    let addr = loop {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "{seen:?}");
        if let Some(a) = line.trim().strip_prefix("stampede run: metrics on ") {
            break a.to_string();
        }
        seen.push(line);
    };
    let (status, body) = http_get(&addr, "/metrics").await;
    assert!(status.contains(" 200 "), "{status}");
    let s = parse(&body);
    assert_eq!(num(value(&s, "stampede_agents_connected", &[])), 1.0);
    let out = tokio::task::spawn_blocking(move || proc.0.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(out.code(), Some(0));
    // The listener went with the run.
    assert!(TcpStream::connect(&addr).await.is_err());
}
