//! `stampede compare BASE NEW`: two JSON reports side by side, figure by figure, each change
//! with its confidence interval and a verdict (statistics in `stampede_core::compare`), as text,
//! JSON or a self-contained HTML page; exit 1 when a significant regression is beyond a
//! `--max-regression` limit.

mod html;
mod text;

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::Serialize;
use stampede_core::compare::{self, Comparison, Limit, LimitCheck, Options};

use crate::report_file;

/// How the comparison is printed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table for a terminal.
    Text,
    /// The comparison as JSON, for scripts.
    Json,
}

/// Compares two JSON reports.
#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// The baseline: a JSON report, as `stampede run --report FILE` writes it.
    pub base: PathBuf,
    /// The run judged against the baseline (a JSON report too).
    pub new: PathBuf,
    /// Exit 1 when a significant regression of the whole run goes beyond this limit:
    /// METRIC=LIMIT with METRIC one of p50, p90, p99, p999, max, mean, throughput (a drop),
    /// error_rate (in percentage points), e.g. p99=10% or error_rate=0.5pp. Repeat it or
    /// separate limits with commas.
    #[arg(long = "max-regression", value_name = "METRIC=LIMIT", value_delimiter = ',', value_parser = parse_limit)]
    pub max_regression: Vec<Limit>,
    /// Output on stdout.
    #[arg(long, visible_alias = "output", value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// The same as --format json.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML page (tables, both latency distributions overlaid).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write JUnit XML: a testcase per --max-regression limit, with the change measured
    /// and a failure element where the limit was breached.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Bootstrap resamples per run and scope (more: steadier intervals, slower).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub resamples: u32,
    /// Seed of the resampling: the same seed gives the same intervals.
    #[arg(long, default_value_t = 17)]
    pub seed: u64,
    /// Smallest relative change called a regression or an improvement, even when significant:
    /// one run's intervals cannot show the drift between two runs, which is often a few percent.
    #[arg(long, default_value = "5%", value_parser = parse_percent)]
    pub min_effect: f64,
}

fn parse_limit(s: &str) -> Result<Limit, String> {
    s.parse().map_err(|e: compare::CompareError| e.to_string())
}

fn parse_percent(s: &str) -> Result<f64, String> {
    let x: f64 = s
        .trim()
        .strip_suffix('%')
        .ok_or("a percentage, e.g. 1%")?
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a percentage, e.g. 1%"))?;
    if !(0.0..=1000.0).contains(&x) {
        return Err(format!("`{s}` is outside 0% to 1000%"));
    }
    Ok(x / 100.0)
}

/// The JSON output: the comparison, the limits judged, and the exit code.
#[derive(Serialize)]
struct JsonOut<'a> {
    #[serde(flatten)]
    comparison: &'a Comparison,
    limits: &'a [LimitCheck],
    exit_code: i32,
}

/// Runs `stampede compare`: 0 when no limit is breached, 1 when one is; an unreadable or
/// invalid report is an error (exit 2).
pub fn command(a: CompareArgs) -> Result<i32> {
    let base = report_file::load(&a.base)?;
    let new = report_file::load(&a.new)?;
    let opts = Options {
        resamples: a.resamples,
        seed: a.seed,
        min_effect: a.min_effect,
        ..Options::default()
    };
    let c = compare::compare(&base, &new, &opts).context("comparing the reports")?;
    let checks = compare::check_limits(&c, &a.max_regression);
    let code = if checks.iter().any(|l| l.breached) {
        crate::exit::THRESHOLD
    } else {
        crate::exit::OK
    };
    if let Some(path) = &a.html {
        let page = html::page(&c, &checks, &base, &new)
            .map_err(|e| anyhow::anyhow!("rendering the HTML comparison: {e}"))?;
        std::fs::write(path, page).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &a.junit {
        let name = format!("stampede compare {} {}", base.run_id, new.run_id);
        let xml = crate::ci::junit(&name, 0.0, &crate::ci::compare_cases(&checks))
            .context("writing the JUnit XML")?;
        std::fs::write(path, xml).with_context(|| format!("writing {}", path.display()))?;
    }
    if a.json || a.format == Format::Json {
        let out = JsonOut {
            comparison: &c,
            limits: &checks,
            exit_code: code,
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", text::render(&c, &checks));
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_options_parse() {
        assert_eq!(parse_percent("1%"), Ok(0.01));
        assert!(parse_percent("1").is_err() && parse_percent("-1%").is_err());
        assert!(parse_limit("p98=1%")
            .unwrap_err()
            .contains("unknown metric"));
    }
}
