//! Local JSON report files (as `stampede run --report FILE` writes them): loading them for
//! `stampede compare`, and `stampede report FILE.json`, which renders one without a controller.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use stampede_core::report::Report;

/// The files `stampede report` can write besides its text or JSON output.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Outputs {
    /// Write the self-contained HTML report (SVG charts, tables, threshold verdicts) to this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write the per-interval timeline as CSV to this file.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write the HdrHistogram interval log (.hlog) to this file.
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<PathBuf>,
    /// Write JUnit XML (a testcase per threshold) to this file.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Write a short Markdown summary for a CI job page to this file.
    #[arg(long, value_name = "FILE")]
    pub summary_md: Option<PathBuf>,
}

impl Outputs {
    /// Writes every file asked for; the first failure names its path.
    pub fn write(&self, r: &Report) -> Result<()> {
        use crate::export::Artifact;
        for (kind, path) in [
            (Artifact::Html, &self.html),
            (Artifact::Csv, &self.csv),
            (Artifact::HdrLog, &self.hdr_log),
            (Artifact::Junit, &self.junit),
            (Artifact::SummaryMd, &self.summary_md),
        ] {
            if let Some(path) = path {
                let text = kind.render(r)?;
                std::fs::write(path, text)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        Ok(())
    }
}

/// Whether `stampede report ARG` means a local file rather than a run id: an existing file,
/// or a name ending in `.json` (which then must exist).
pub fn is_local(arg: &str) -> bool {
    arg.ends_with(".json") || Path::new(arg).is_file()
}

/// Reads a JSON report, with an error that says what was expected.
pub fn load(path: &Path) -> Result<Report> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a Stampede report (the JSON that `stampede run --report FILE` writes)",
            path.display()
        )
    })
}

/// `stampede report FILE.json`: the report as text (or JSON) on stdout, and the files asked
/// for. Exits 0 once rendered, whatever the run's outcome (the report says it).
pub fn render(path: &Path, outputs: &Outputs, json: bool) -> Result<i32> {
    let r = load(path)?;
    outputs.write(&r)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", crate::render::report_text(&r));
    }
    Ok(crate::exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_or_a_json_name_is_local_and_a_run_id_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("r");
        std::fs::write(&f, "{}").unwrap();
        assert!(is_local(f.to_str().unwrap()));
        assert!(is_local("missing.json"));
        assert!(!is_local("r-20261124-0001"));
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let missing = load(&dir.path().join("no.json")).unwrap_err();
        assert!(
            format!("{missing:#}").contains("cannot read"),
            "{missing:#}"
        );
        let f = dir.path().join("x.json");
        std::fs::write(&f, "{\"a\": 1}").unwrap();
        let e = format!("{:#}", load(&f).unwrap_err());
        assert!(
            e.contains("is not a Stampede report") && e.contains("run_id"),
            "{e}"
        );
    }

    #[test]
    fn writes_the_html_csv_and_hdr_log_of_a_loaded_report() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        let r = Report {
            run_id: "r1".into(),
            ..Report::default()
        };
        std::fs::write(&path, serde_json::to_string(&r).unwrap()).unwrap();
        let outputs = Outputs {
            html: Some(dir.path().join("r.html")),
            csv: Some(dir.path().join("r.csv")),
            hdr_log: Some(dir.path().join("r.hlog")),
            ..Outputs::default()
        };
        outputs.write(&load(&path).unwrap()).unwrap();
        let page = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
        assert!(page.contains("<svg") && page.contains("r1"));
        let csv = std::fs::read_to_string(dir.path().join("r.csv")).unwrap();
        assert!(csv.starts_with("interval,t_s,"));
        let hlog = std::fs::read_to_string(dir.path().join("r.hlog")).unwrap();
        assert!(hlog.starts_with("#[Histogram log format version 1.3]"));
    }
}
