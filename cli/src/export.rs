//! Report exports: the HdrHistogram interval log (`.hlog`) and a CSV timeline.

use std::fmt::Write as _;

use stampede_core::report::Report;

/// A file a report can be written as: `run --report/--hdr-log/--csv/--html` and `report
/// FILE --html/--csv/--hdr-log` render through this one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Artifact {
    /// The report as JSON, as `stampede report FILE` reads it back.
    Json,
    /// The interval histograms in HdrHistogram's log format, for other HDR tools.
    HdrLog,
    /// The timeline, a row per interval, for a spreadsheet.
    Csv,
    /// One self-contained HTML page with charts.
    Html,
    /// JUnit XML: a testcase per threshold (`--junit`).
    Junit,
    /// A short Markdown summary for a CI job page (`--summary-md`).
    SummaryMd,
}

impl Artifact {
    /// The file's content.
    pub fn render(self, r: &Report) -> anyhow::Result<String> {
        Ok(match self {
            Self::Json => serde_json::to_string_pretty(r)? + "\n",
            Self::HdrLog => hdr_log(r),
            Self::Csv => csv(r),
            Self::Html => crate::html::html(r)
                .map_err(|e| anyhow::anyhow!("rendering the HTML report: {e}"))?,
            Self::Junit => crate::ci::run_junit(r)
                .map_err(|e| anyhow::anyhow!("writing the JUnit XML: {e}"))?,
            Self::SummaryMd => crate::ci::summary_md(r),
        })
    }

    /// The flag that asks for it.
    pub fn flag(self) -> &'static str {
        match self {
            Self::Json => "--report",
            Self::HdrLog => "--hdr-log",
            Self::Csv => "--csv",
            Self::Html => "--html",
            Self::Junit => "--junit",
            Self::SummaryMd => "--summary-md",
        }
    }
}

/// The standard HdrHistogram interval log (format 1.3): one line per interval and tag
/// (`response_time`, `service_time`), each with the interval's compressed V2 histogram in
/// base64. Values are microseconds; `Interval_Max` is in seconds, as the log tools expect.
pub fn hdr_log(r: &Report) -> String {
    let mut o = String::new();
    let start_s = r.started_at_unix_ms as f64 / 1e3;
    let _ = writeln!(o, "#[Histogram log format version 1.3]");
    let _ = writeln!(o, "#[StartTime: {start_s:.3} (seconds since epoch)]");
    let _ = writeln!(o, "#[BaseTime: {start_s:.3} (seconds since epoch)]");
    let _ = writeln!(
        o,
        "#[Stampede run {} ({}); values in microseconds]",
        r.run_id, r.scenario
    );
    let _ = writeln!(
        o,
        "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
    );
    let len = if r.timeline.len() > 1 {
        r.timeline[1].t_s - r.timeline[0].t_s
    } else {
        1.0
    };
    for row in &r.timeline {
        for (tag, hist, max_us) in [
            ("response_time", &row.response_hist, row.response_max_us),
            ("service_time", &row.service_hist, 0),
        ] {
            if hist.is_empty() {
                continue;
            }
            let max_s = if tag == "response_time" {
                max_us as f64 / 1e6
            } else {
                service_max_s(hist)
            };
            let _ = writeln!(o, "Tag={tag},{:.3},{len:.3},{max_s:.6},{hist}", row.t_s);
        }
    }
    o
}

/// The max of an encoded histogram, in seconds (0 when it cannot be decoded).
fn service_max_s(b64: &str) -> f64 {
    stampede_core::hist::from_text(b64).map_or(0.0, |h| h.max() as f64 / 1e6)
}

/// One CSV row per interval: rate, errors and percentiles.
pub fn csv(r: &Report) -> String {
    let mut o = String::from("interval,t_s,sessions_planned,completed,failed,rps,response_p50_us,response_p90_us,response_p99_us,response_max_us,service_p99_us,errors\n");
    for t in &r.timeline {
        let errors: Vec<String> = t.errors.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            o,
            "{},{:.3},{},{},{},{:.3},{},{},{},{},{},{}",
            t.interval,
            t.t_s,
            t.sessions_planned,
            t.completed,
            t.failed,
            t.rps,
            t.response_p50_us,
            t.response_p90_us,
            t.response_p99_us,
            t.response_max_us,
            t.service_p99_us,
            errors.join(";")
        );
    }
    o
}
