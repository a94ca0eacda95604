//! Results in the formats CI tools read: JUnit XML (`--junit`: one testcase per threshold, or
//! per `compare --max-regression` limit, with the measured value, and a failure element where
//! one failed) and a short Markdown summary for a CI job page (`--summary-md`). The XML is
//! written with `quick-xml`, which escapes every text and attribute.

use std::fmt::Write as _;
use std::io::Cursor;

use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use quick_xml::Writer;
use stampede_core::compare::LimitCheck;
use stampede_core::report::Report;

use crate::render::us as fmt_us;

/// Writing to the in-memory buffer failed (it cannot, but the writer's API is fallible).
pub type JunitError = std::io::Error;

/// The run's outcome in one word, as the exit code reflects it: a succeeded run with a failed
/// threshold is `FAILED (thresholds)`, never `succeeded`.
pub fn outcome_word(r: &Report) -> &'static str {
    use stampede_core::report::RunOutcome;
    match r.outcome {
        RunOutcome::Succeeded if r.thresholds_passed() => "succeeded",
        RunOutcome::Succeeded => "FAILED (thresholds)",
        RunOutcome::Failed => "FAILED",
        RunOutcome::Aborted => "ABORTED",
        RunOutcome::Incomplete => "INCOMPLETE",
    }
}

/// One JUnit testcase: a name, the measured value, and why it failed when it did.
pub struct Case {
    /// The threshold as the scenario wrote it.
    pub name: String,
    /// The value the run measured, with its unit.
    pub measured: String,
    /// `None` for a threshold that held; otherwise the JUnit failure message.
    pub failure: Option<String>,
}

/// The testcases of a run: one per threshold (the default error verdict included, since it
/// is one of them), and one for the run itself when it did not succeed, so a broken run is
/// never green in CI.
pub fn run_cases(r: &Report) -> Vec<Case> {
    let mut cases: Vec<Case> = r
        .thresholds
        .iter()
        .map(|t| Case {
            name: t.expr.clone(),
            measured: t.measured_text.clone(),
            failure: (!t.passed).then(|| format!("measured {}", t.measured_text)),
        })
        .collect();
    let word = outcome_word(r);
    let failed_run = !matches!(r.outcome, stampede_core::report::RunOutcome::Succeeded);
    if failed_run || cases.is_empty() {
        cases.push(Case {
            name: "run completed".into(),
            measured: word.to_string(),
            failure: failed_run.then(|| {
                let why = r.message.as_deref().unwrap_or("");
                format!("{word} {why}").trim_end().to_string()
            }),
        });
    }
    cases
}

/// The testcases of a comparison: one per `--max-regression` limit.
pub fn compare_cases(checks: &[LimitCheck]) -> Vec<Case> {
    checks
        .iter()
        .map(|c| {
            let change = c
                .change
                .map_or("no data".to_string(), |x| format!("{:+.1}%", x * 100.0));
            let measured = format!("{change} ({})", c.verdict);
            Case {
                name: format!("max regression {}", c.limit),
                failure: c
                    .breached
                    .then(|| format!("{measured} is beyond {}", c.limit)),
                measured,
            }
        })
        .collect()
}

/// The JUnit XML of one suite of cases.
pub fn junit(suite: &str, time_s: f64, cases: &[Case]) -> Result<String, JunitError> {
    let mut w = Writer::new_with_indent(Cursor::new(Vec::new()), b' ', 2);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    let failures = cases.iter().filter(|c| c.failure.is_some()).count();
    let (tests, failures, time) = (
        cases.len().to_string(),
        failures.to_string(),
        format!("{time_s:.3}"),
    );
    let counts = [
        ("name", suite),
        ("tests", &tests),
        ("failures", &failures),
        ("errors", "0"),
        ("time", &time),
    ];
    w.write_event(Event::Start(
        BytesStart::new("testsuites").with_attributes(counts),
    ))?;
    w.write_event(Event::Start(
        BytesStart::new("testsuite").with_attributes(counts),
    ))?;
    for c in cases {
        let case = BytesStart::new("testcase").with_attributes([
            ("name", c.name.as_str()),
            ("classname", suite),
            ("time", "0"),
        ]);
        w.write_event(Event::Start(case))?;
        w.write_event(Event::Start(BytesStart::new("properties")))?;
        w.write_event(Event::Empty(BytesStart::new("property").with_attributes([
            ("name", "measured"),
            ("value", c.measured.as_str()),
        ])))?;
        w.write_event(Event::End(BytesEnd::new("properties")))?;
        if let Some(why) = &c.failure {
            let f = BytesStart::new("failure").with_attributes([("message", why.as_str())]);
            w.write_event(Event::Start(f))?;
            w.write_event(Event::Text(BytesText::new(why)))?;
            w.write_event(Event::End(BytesEnd::new("failure")))?;
        }
        w.write_event(Event::Start(BytesStart::new("system-out")))?;
        w.write_event(Event::Text(BytesText::new(&format!(
            "measured {}",
            c.measured
        ))))?;
        w.write_event(Event::End(BytesEnd::new("system-out")))?;
        w.write_event(Event::End(BytesEnd::new("testcase")))?;
    }
    w.write_event(Event::End(BytesEnd::new("testsuite")))?;
    w.write_event(Event::End(BytesEnd::new("testsuites")))?;
    let mut out = String::from_utf8_lossy(&w.into_inner().into_inner()).into_owned();
    out.push('\n');
    Ok(out)
}

/// The JUnit XML of a run's report.
pub fn run_junit(r: &Report) -> Result<String, JunitError> {
    junit(
        &format!("stampede {}", r.scenario),
        r.duration_s,
        &run_cases(r),
    )
}

/// Escapes what Markdown table cells would read as syntax.
fn cell(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace('\n', " ")
}

/// A short Markdown summary of a run for a CI job page: the outcome, one table of the
/// headline figures, and the thresholds with their verdicts.
pub fn summary_md(r: &Report) -> String {
    let mut o = String::new();
    let t = &r.totals;
    let _ = writeln!(
        o,
        "### Stampede: {} {}\n",
        cell(&r.scenario),
        outcome_word(r)
    );
    if let Some(m) = &r.message {
        let _ = writeln!(o, "{}\n", cell(m));
    }
    let _ = writeln!(
        o,
        "| requests | failed | error rate | throughput | p50 | p99 | duration |"
    );
    let _ = writeln!(o, "|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        o,
        "| {} | {} | {:.2}% | {:.1}/s | {} | {} | {:.1}s |",
        t.completed + t.failed,
        t.failed,
        t.error_rate * 100.0,
        t.throughput_rps,
        fmt_us(r.latency.response_time.p50_us),
        fmt_us(r.latency.response_time.p99_us),
        r.duration_s
    );
    if !r.thresholds.is_empty() {
        let _ = writeln!(o, "\n| threshold | measured | verdict |");
        let _ = writeln!(o, "|---|---:|---|");
        for th in &r.thresholds {
            let verdict = if th.passed { "pass" } else { "**FAIL**" };
            let _ = writeln!(
                o,
                "| `{}` | {} | {verdict} |",
                cell(&th.expr),
                cell(&th.measured_text)
            );
        }
    }
    if !t.errors.is_empty() {
        let kinds: Vec<String> = t.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(o, "\nErrors: {}", cell(&kinds.join(", ")));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_core::threshold::ThresholdResult;

    fn report() -> Report {
        let mut r = Report {
            run_id: "r1".into(),
            scenario: "a <b> & \"c\"".into(),
            duration_s: 2.0,
            ..Report::default()
        };
        r.thresholds = vec![
            ThresholdResult {
                expr: "p99 < 5s".into(),
                measured: 1200.0,
                limit: 5e6,
                passed: true,
                measured_text: "1.20ms".into(),
                window: None,
            },
            ThresholdResult {
                expr: "error_rate < 1%".into(),
                measured: 0.33,
                limit: 0.01,
                passed: false,
                measured_text: "33.00%".into(),
                window: None,
            },
        ];
        r
    }

    #[test]
    fn a_testcase_per_threshold_with_a_failure_where_one_failed() {
        let xml = run_junit(&report()).unwrap();
        assert!(xml.starts_with("<?xml"), "{xml}");
        // Escaped names, one testcase each, one failure.
        assert!(xml.contains("a &lt;b&gt; &amp; &quot;c&quot;"), "{xml}");
        assert_eq!(xml.matches("<testcase ").count(), 2, "{xml}");
        assert_eq!(xml.matches("<failure ").count(), 1, "{xml}");
        assert!(xml.contains(r#"name="error_rate &lt; 1%""#), "{xml}");
        assert!(xml.contains(r#"tests="2" failures="1""#), "{xml}");
        assert!(xml.contains("measured 33.00%"), "{xml}");
        // Parsed back by a real XML reader: balanced and well formed.
        let mut reader = quick_xml::Reader::from_str(&xml);
        let mut depth = 0i32;
        loop {
            match reader.read_event().unwrap() {
                Event::Start(_) => depth += 1,
                Event::End(_) => depth -= 1,
                Event::Eof => break,
                _ => {}
            }
        }
        assert_eq!(depth, 0);
    }

    #[test]
    fn a_run_that_did_not_succeed_is_a_failed_testcase() {
        let mut r = report();
        r.thresholds.clear();
        r.outcome = stampede_core::report::RunOutcome::Failed;
        r.message = Some("no request succeeded".into());
        let cases = run_cases(&r);
        assert_eq!(cases.len(), 1);
        assert!(cases[0]
            .failure
            .as_deref()
            .unwrap()
            .contains("no request succeeded"));
    }

    #[test]
    fn the_markdown_summary_is_a_table_with_the_thresholds() {
        let mut r = report();
        r.totals.completed = 20;
        r.totals.failed = 10;
        let md = summary_md(&r);
        assert!(md.contains("| 30 | 10 |"), "{md}");
        assert!(
            md.contains("| `error_rate < 1%` | 33.00% | **FAIL** |"),
            "{md}"
        );
        assert!(md.lines().all(|l| !l.contains('\r')));
    }
}
