//! The report's failure samples as text (one line per step × error kind, within the report's
//! width) and as an HTML section (every sample, whole).

use std::fmt::Write as _;

use stampede_core::report::Report;
use stampede_core::samples::FailureSample;

use crate::html::esc;

/// Appends a `Failures` section: for each step × error kind, its first sample on one line
/// (`login status_401 row users#11 {"error":"bad password for u11"}`), cut to `width` columns
/// unless `wide`.
pub fn samples_text(o: &mut String, r: &Report, width: usize, wide: bool) {
    if r.failure_samples.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "Failures  (first sample of each step and error; all in the JSON)"
    );
    let mut last: Option<(&str, &str)> = None;
    for s in &r.failure_samples {
        if last == Some((&s.step, &s.kind)) {
            continue;
        }
        last = Some((&s.step, &s.kind));
        let line = format!("  {}", one_line(s));
        if wide {
            let _ = writeln!(o, "{line}");
        } else {
            let _ = writeln!(o, "{}", cut(&line, width));
        }
    }
}

/// A sample in one line: step, kind, the row, then the answer (or what was sent when the
/// answer had no body).
fn one_line(s: &FailureSample) -> String {
    let mut parts = vec![s.step.clone(), s.kind.clone()];
    // A check's kind does not say the status it refused.
    if let Some(code) = s.status.filter(|c| s.kind != format!("status_{c}")) {
        parts.push(code.to_string());
    }
    let rows = s.row_refs();
    if !rows.is_empty() {
        parts.push(format!("row {rows}"));
    }
    if !s.body.is_empty() {
        parts.push(s.body.clone());
    } else if !s.grpc_message.is_empty() {
        parts.push(s.grpc_message.clone());
    } else if !s.request.is_empty() {
        parts.push(s.request.clone());
    }
    parts.join(" ")
}

/// `s` cut to `width` characters, the last one an ellipsis when it was longer.
fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The HTML report's `Failure samples` section: a table of every sample (empty when the run
/// had none).
pub fn samples_html(r: &Report) -> String {
    if r.failure_samples.is_empty() {
        return String::new();
    }
    let mut o = String::from(
        "\n<h2>Failure samples</h2><div class=\"scroll\"><table><tr><th>step</th><th>error</th>\
         <th>at s</th><th>agent</th><th>data row</th><th>request</th><th>headers</th>\
         <th>body sent</th><th>status</th><th>answer (start)</th></tr>",
    );
    for s in &r.failure_samples {
        let rows: Vec<String> = s
            .rows
            .iter()
            .map(|row| {
                let values: Vec<String> =
                    row.values.iter().map(|(k, v)| format!("{k}={v}")).collect();
                if values.is_empty() {
                    format!("{}#{}", row.source, row.row)
                } else {
                    format!("{}#{} ({})", row.source, row.row, values.join(", "))
                }
            })
            .collect();
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{:.3}</td><td>{}</td><td>{}</td><td><code>{}</code></td>\
             <td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td><code>{}</code></td></tr>",
            esc(&s.step),
            esc(&s.kind),
            s.offset_s,
            esc(&s.agent),
            esc(&rows.join("; ")),
            esc(&s.request),
            esc(&s.headers).replace("\\r\\n", "<br>"),
            esc(&s.sent_body),
            s.status.map(|c| c.to_string()).unwrap_or_default(),
            esc(&answer(s)),
        );
    }
    o.push_str("</table></div>");
    o
}

/// A sample's answer: the start of its body, or a gRPC call's `grpc-message`.
fn answer(s: &FailureSample) -> String {
    match (s.body.is_empty(), s.grpc_message.is_empty()) {
        (_, true) => s.body.clone(),
        (true, false) => format!("grpc-message: {}", s.grpc_message),
        (false, false) => format!("grpc-message: {} {}", s.grpc_message, s.body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_core::samples::SampleRowReport;

    fn report() -> Report {
        let sample = |step: &str, kind: &str, row: u64, body: &str| FailureSample {
            step: step.into(),
            kind: kind.into(),
            agent: "agent-0".into(),
            offset_s: 1.25,
            rows: vec![SampleRowReport {
                source: "users".into(),
                row,
                values: [("name".to_string(), format!("u{row}"))].into(),
            }],
            request: format!("GET /login?user=u{row}"),
            headers: "Host: h\\r\\nX-Key: ***".into(),
            status: Some(401),
            body: body.into(),
            ..FailureSample::default()
        };
        Report {
            failure_samples: vec![
                sample(
                    "login",
                    "status_401",
                    11,
                    r#"{"error":"bad password for u11"}"#,
                ),
                sample(
                    "login",
                    "status_401",
                    14,
                    r#"{"error":"bad password for u14"}"#,
                ),
                sample("login", "status_500", 3, &"x".repeat(500)),
            ],
            ..Report::default()
        }
    }

    #[test]
    fn one_line_per_step_and_kind_within_the_width() {
        let mut o = String::new();
        samples_text(&mut o, &report(), 80, false);
        let lines: Vec<&str> = o.lines().collect();
        assert_eq!(lines.len(), 3, "{o}");
        assert_eq!(
            lines[1],
            r#"  login status_401 row users#11 {"error":"bad password for u11"}"#
        );
        assert!(lines.iter().all(|l| l.chars().count() <= 80), "{o}");
        let mut wide = String::new();
        samples_text(&mut wide, &report(), 80, true);
        assert!(wide.lines().any(|l| l.chars().count() > 500));
    }

    #[test]
    fn the_html_section_shows_every_sample_escaped() {
        let html = samples_html(&report());
        assert!(html.contains("<h2>Failure samples</h2>"));
        assert!(html.contains("bad password for u14"));
        assert!(html.contains("users#11 (name=u11)"));
        assert!(html.contains("{&quot;error&quot;"), "{html}");
        assert!(html.contains("Host: h<br>X-Key: ***"), "{html}");
        assert!(samples_html(&Report::default()).is_empty());
    }
}
