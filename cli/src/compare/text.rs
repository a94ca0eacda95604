//! `stampede compare` as text, within 80 columns.

use std::fmt::Write as _;

use stampede_core::compare::{
    Comparison, LimitCheck, Metric, Noise, Row, RunInfo, Scope, Section, Verdict,
};

use stampede_core::report::RunOutcome;

use crate::render::us;

/// Widest line of the output (an 80-column terminal, less one for the cursor).
pub(crate) const WIDTH: usize = 79;

/// A figure in its unit: `1.21ms`, `812.0/s`, `0.125%`; `-` without data.
pub(crate) fn value(m: Metric, v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if m.is_latency() => us(v.round() as u64),
        Some(v) if m == Metric::Throughput => format!("{v:.1}/s"),
        Some(v) => format!("{:.3}%", v * 100.0),
    }
}

fn signed(m: Metric, x: f64) -> String {
    if m.absolute_change() {
        format!("{:+.2}pp", x * 100.0)
    } else {
        format!("{:+.1}%", x * 100.0)
    }
}

/// The change: `+3.2%` (relative), `+0.10pp` (error rate), `from 0`, or `-`.
pub(crate) fn change(r: &Row) -> String {
    match (r.change, r.base, r.new) {
        (Some(c), _, _) => signed(r.metric, c),
        (None, Some(_), Some(_)) => "from 0".into(),
        _ => "-".into(),
    }
}

/// The confidence interval of the change: `-1.2% .. +7.9%`, or `-`.
pub(crate) fn interval(r: &Row) -> String {
    r.ci.map_or("-".into(), |[lo, hi]| {
        format!("{} .. {}", signed(r.metric, lo), signed(r.metric, hi))
    })
}

/// How a section's confidence intervals were estimated.
pub(crate) fn noise_text(n: Noise, resamples: u32, confidence: f64) -> String {
    let level = format!("{:.0}% CI", confidence * 100.0);
    match n {
        Noise::Intervals { blocks } => {
            format!("{level} from {resamples} seeded resamples of {blocks} interval blocks per run")
        }
        Noise::Samples => {
            format!("{level} from {resamples} seeded resamples of the samples (too few intervals)")
        }
        Noise::ScaledFromRun => {
            format!("{level}: the whole run's, widened for this step's fewer samples")
        }
        Noise::None => "no interval histograms: no confidence interval".into(),
    }
}

/// `text` wrapped to [`WIDTH`], continuation lines indented by `indent` spaces.
fn wrap(out: &mut String, first: &str, text: &str, indent: usize) {
    let mut line = first.to_string();
    for word in text.split_whitespace() {
        if line.chars().count() + 1 + word.chars().count() > WIDTH
            && line.trim().chars().count() > 0
            && line.chars().count() > indent
        {
            let _ = writeln!(out, "{}", line.trim_end());
            line = " ".repeat(indent);
        }
        if !line.is_empty() && !line.ends_with(' ') {
            line.push(' ');
        }
        line.push_str(word);
    }
    let _ = writeln!(out, "{}", line.trim_end());
}

fn run_line(out: &mut String, which: &str, r: &RunInfo) {
    let outcome = match r.outcome {
        RunOutcome::Succeeded => "succeeded",
        RunOutcome::Failed => "FAILED",
        RunOutcome::Aborted => "ABORTED",
        RunOutcome::Incomplete => "INCOMPLETE",
    };
    let text = format!(
        "{}, scenario {}, {outcome}, {:.1}s, {} agent{}, {} requests",
        r.run_id,
        r.scenario,
        r.duration_s,
        r.agents,
        if r.agents == 1 { "" } else { "s" },
        r.completed,
    );
    wrap(out, &format!("{which:<5}"), &text, 6);
    if !r.target.is_empty() {
        wrap(out, "      target", &r.target, 6);
    }
}

fn section(out: &mut String, c: &Comparison, s: &Section) {
    let title = match s.scope {
        Scope::Run => "Whole run (response time from the intended send)".to_string(),
        Scope::Phase => format!("Phase {}", s.name),
        Scope::Step => format!("Step {}", s.name),
    };
    let _ = writeln!(out);
    wrap(out, "", &title, 2);
    wrap(
        out,
        " ",
        &noise_text(s.noise, c.options.resamples, c.options.confidence),
        2,
    );
    let _ = writeln!(
        out,
        "  {:<10} {:>10} {:>10} {:>9}  {:<19} verdict",
        "", "base", "new", "change", "CI of the change"
    );
    for r in &s.rows {
        let _ = writeln!(
            out,
            "  {:<10} {:>10} {:>10} {:>9}  {:<19} {}",
            r.metric.label(),
            value(r.metric, r.base),
            value(r.metric, r.new),
            change(r),
            interval(r),
            r.verdict
        );
    }
}

/// The comparison as text.
pub(crate) fn render(c: &Comparison, limits: &[LimitCheck]) -> String {
    let mut o = String::new();
    run_line(&mut o, "base", &c.base);
    run_line(&mut o, "new", &c.new);
    for w in &c.warnings {
        wrap(&mut o, "warning:", w, 9);
    }
    for s in &c.sections {
        section(&mut o, c, s);
    }
    if let Some(run) = c.run() {
        let named = |v: Verdict| {
            run.rows
                .iter()
                .filter(|r| r.verdict == v)
                .map(|r| r.metric.label())
                .collect::<Vec<_>>()
        };
        let mut parts = Vec::new();
        for (v, what) in [
            (Verdict::Regression, "regression"),
            (Verdict::Improvement, "improvement"),
        ] {
            let n = named(v);
            if !n.is_empty() {
                parts.push(format!("{what} in {}", n.join(", ")));
            }
        }
        let within = named(Verdict::WithinNoise).len();
        if within > 0 {
            parts.push(format!("{within} within noise"));
        }
        let _ = writeln!(o);
        wrap(&mut o, "Summary:", &format!("{}.", parts.join("; ")), 9);
    }
    if !limits.is_empty() {
        let _ = writeln!(
            o,
            "Limits (whole run; only a significant regression breaches one)"
        );
        for l in limits {
            let change = l.change.map_or("-".into(), |x| signed(l.limit.metric, x));
            let _ = writeln!(
                o,
                "  {:<5} {:<20} {:>9}  {}",
                if l.breached { "FAIL" } else { "pass" },
                l.limit.to_string(),
                change,
                l.verdict
            );
        }
        if limits.iter().any(|l| l.breached) {
            let _ = writeln!(o, "A regression is beyond its limit: exit 1.");
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_core::compare::{Options, RunInfo};

    fn info(id: &str) -> RunInfo {
        RunInfo {
            run_id: id.into(),
            scenario: "Checkout".into(),
            target: "http://127.0.0.1:8080/API".into(),
            outcome: RunOutcome::Succeeded,
            started_at_unix_ms: 0,
            duration_s: 10.0,
            agents: 2,
            intervals: 10,
            completed: 1000,
        }
    }

    #[test]
    fn fits_80_columns_and_names_verdicts() {
        let row = |metric, base, new, change, ci, verdict| Row {
            metric,
            base: Some(base),
            new: Some(new),
            change: Some(change),
            ci: Some(ci),
            verdict,
        };
        let c = Comparison {
            base: info("r-1"),
            new: info("r-2"),
            warnings: vec!["target differs: http://a-very-long-host-name.example:8080/some/long/path (base) vs http://another-very-long-host-name.example:8080/another/path (new)".into()],
            options: Options::default(),
            sections: vec![Section {
                scope: Scope::Run,
                name: String::new(),
                noise: Noise::Intervals { blocks: 10 },
                rows: vec![
                    row(Metric::P99, 1_000_000.0, 2_000_000.0, 1.0, [0.9, 1.1], Verdict::Regression),
                    row(Metric::Throughput, 1234.5, 1234.0, -0.0004, [-0.01, 0.01], Verdict::WithinNoise),
                    row(Metric::ErrorRate, 0.0, 0.001, 0.001, [0.0005, 0.0015], Verdict::Regression),
                ],
            }],
        };
        let checks = stampede_core::compare::check_limits(&c, &["p99=10%".parse().unwrap()]);
        let text = render(&c, &checks);
        for line in text.lines() {
            assert!(line.chars().count() <= WIDTH, "{line:?}");
        }
        for needle in [
            "p99",
            "1.00s",
            "2.00s",
            "+100.0%",
            "+90.0% .. +110.0%",
            "regression",
            "within noise",
            "+0.10pp",
            "FAIL  p99=10%",
            "exit 1",
            "Checkout",
            "/API",
        ] {
            assert!(text.contains(needle), "{needle}:\n{text}");
        }
    }
}
