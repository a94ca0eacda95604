//! `stampede compare` on two real reports, and `stampede report FILE.json` rendering one.

use std::process::Command;

use crate::{cli_run_local, Target, BIN};

fn stampede(args: &[&str], dir: &std::path::Path) -> (Option<i32>, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The whole-run row of `metric` in `compare`'s text output.
fn row<'a>(text: &'a str, metric: &str) -> &'a str {
    text.lines()
        .find(|l| l.trim_start().starts_with(&format!("{metric} ")))
        .unwrap_or_else(|| panic!("no {metric} row:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_two_real_runs_and_render_a_local_report() {
    let target = Target::start(0).await;
    let dir = tempfile::tempdir().unwrap();
    let scenario = |ms: u32| {
        format!(
            "name: cmp\ntarget: {}\nphases:\n  - {{ duration: 3s, arrival_rate: 40 }}\nsession:\n  - http: {{ method: GET, path: \"/delay?ms={ms}\" }}\n",
            target.url
        )
    };
    let base = cli_run_local(dir.path(), "base", &scenario(1));
    // 150 ms more per request, so that the verdicts below rest on medians far apart: a loaded
    // machine's pauses reach a few tail samples of a 120-request run (a base p99 of 56 ms has
    // been seen), never its median.
    let slow = cli_run_local(dir.path(), "slow", &scenario(150));
    for r in [&base, &slow] {
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        assert_eq!(r.report.totals.completed, 120, "{:?}", r.report.totals);
        assert_eq!(r.report.target, target.url);
    }

    // A run against itself: every figure within noise, exit 0 even under a tight limit.
    let (code, text, err) = stampede(
        &[
            "compare",
            "base.json",
            "base.json",
            "--max-regression",
            "p99=1%",
        ],
        dir.path(),
    );
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(!text.contains("regression in"), "{text}");
    for m in ["p50", "p90", "p99", "p99.9", "max", "mean", "throughput"] {
        assert!(row(&text, m).ends_with("within noise"), "{text}");
    }
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");

    // A significant median regression beyond 10 %, exit 1.
    let (code, text, err) = stampede(
        &[
            "compare",
            "base.json",
            "slow.json",
            "--max-regression",
            "p50=10%",
            "--html",
            "cmp.html",
        ],
        dir.path(),
    );
    assert_eq!(code, Some(1), "{text}{err}");
    assert!(row(&text, "p50").ends_with("regression"), "{text}");
    assert!(text.contains("FAIL  p50=10%"), "{text}");
    let page = std::fs::read_to_string(dir.path().join("cmp.html")).unwrap();
    assert!(
        page.contains("<svg") && page.contains("regression"),
        "no chart"
    );
    assert!(!page.contains("<script"));

    // The same as JSON; a generous limit passes.
    let (code, json, err) = stampede(
        &[
            "compare",
            "base.json",
            "slow.json",
            "--json",
            "--max-regression",
            "p50=100000%",
        ],
        dir.path(),
    );
    assert_eq!(code, Some(0), "{json}{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["limits"][0]["breached"], false);
    let p50 = &v["sections"][0]["rows"][0];
    assert_eq!(p50["metric"], "p50");
    assert_eq!(p50["verdict"], "regression");
    assert_eq!(
        p50["base"].as_f64().unwrap(),
        base.report.latency.response_time.p50_us as f64
    );
    assert!(p50["ci"][0].as_f64().unwrap() > 0.0, "{p50}");

    // Bad input: exit 2 with what is wrong.
    std::fs::write(dir.path().join("other.json"), "{\"hello\": 1}").unwrap();
    let (code, _, err) = stampede(&["compare", "base.json", "other.json"], dir.path());
    assert_eq!(code, Some(2));
    assert!(err.contains("other.json is not a Stampede report"), "{err}");
    let (code, _, err) = stampede(&["compare", "base.json", "missing.json"], dir.path());
    assert_eq!(code, Some(2));
    assert!(err.contains("cannot read missing.json"), "{err}");
    let (code, _, err) = stampede(
        &[
            "compare",
            "base.json",
            "slow.json",
            "--max-regression",
            "p98=1%",
        ],
        dir.path(),
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("unknown metric"), "{err}");

    // A local report file renders without a controller: text, HTML, CSV and .hlog.
    let (code, text, err) = stampede(
        &[
            "report",
            "slow.json",
            "--html",
            "slow.html",
            "--csv",
            "slow.csv",
            "--hdr-log",
            "slow.hlog",
        ],
        dir.path(),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        text.contains(&slow.report.run_id) && text.contains("Latency"),
        "{text}"
    );
    let page = std::fs::read_to_string(dir.path().join("slow.html")).unwrap();
    assert!(page.contains("<svg") && page.contains(&slow.report.run_id));
    assert!(
        page.contains("uniform arrivals in 1ms ticks"),
        "the load model and its arrival resolution are named"
    );
    let csv = std::fs::read_to_string(dir.path().join("slow.csv")).unwrap();
    assert!(csv.lines().count() > 3, "{csv}");
    let hlog = std::fs::read_to_string(dir.path().join("slow.hlog")).unwrap();
    assert!(hlog.contains("Tag=response_time"), "{hlog}");
    let (code, _, err) = stampede(&["report", "nothing-here.json"], dir.path());
    assert_eq!(code, Some(2));
    assert!(err.contains("cannot read nothing-here.json"), "{err}");
}
