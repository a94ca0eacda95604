//! `stampede compare --html`: one self-contained page in the HTML report's style, with both
//! runs' latency distributions overlaid (SVG, no scripts).

use std::fmt::Write as _;

use stampede_core::compare::{Comparison, LimitCheck, RunInfo, Scope, Verdict};
use stampede_core::report::Report;

use super::text::{change, interval, noise_text, value};
use crate::html::{esc, line_chart, page_head, spectrum, Line, PALETTE};

fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Regression => "regression",
        Verdict::Improvement => "improvement",
        Verdict::WithinNoise | Verdict::NoData => "noise",
    }
}

fn run_row(o: &mut String, which: &str, r: &RunInfo) {
    let _ = write!(
        o,
        "<tr><td>{which}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{:?}</td><td>{:.1} s</td><td>{}</td><td>{}</td></tr>",
        esc(&r.run_id),
        esc(&r.scenario),
        esc(if r.target.is_empty() { "-" } else { &r.target }),
        r.outcome,
        r.duration_s,
        r.agents,
        r.completed
    );
}

/// p99 per interval, in ms, at the middle of each interval.
fn p99_over_time(r: &Report) -> Vec<(f64, f64)> {
    let len = match r.timeline.as_slice() {
        [a, b, ..] if b.t_s > a.t_s => b.t_s - a.t_s,
        _ => 1.0,
    };
    r.timeline
        .iter()
        .filter(|t| t.completed > 0)
        .map(|t| (t.t_s + len / 2.0, t.response_p99_us as f64 / 1000.0))
        .collect()
}

/// The comparison as one HTML page.
pub(crate) fn page(
    c: &Comparison,
    limits: &[LimitCheck],
    base: &Report,
    new: &Report,
) -> Result<String, String> {
    let line = |name: &str, i: usize, points: Vec<(f64, f64)>| Line {
        name: name.into(),
        color: PALETTE[i],
        points,
    };
    let distributions = line_chart(
        "Response time by percentile: base and new (whole run, merged)",
        "percentile (log scale towards 99.999%)",
        "ms",
        (0.0, 5.0),
        &[
            line("base", 0, spectrum(base)),
            line("new", 1, spectrum(new)),
        ],
        &[],
        Some(&crate::html::percentile_label),
    )?;
    let x_max = [base, new]
        .iter()
        .map(|r| r.duration_s.max(r.planned_duration_s))
        .fold(1.0, f64::max);
    let over_time = line_chart(
        "p99 response time per interval: base and new",
        "seconds since T0",
        "ms",
        (0.0, x_max),
        &[
            line("base p99", 0, p99_over_time(base)),
            line("new p99", 1, p99_over_time(new)),
        ],
        &[],
        None,
    )?;

    let mut o = page_head("Stampede comparison");
    let title = if c.base.scenario == c.new.scenario {
        esc(&c.base.scenario)
    } else {
        format!("{} vs {}", esc(&c.base.scenario), esc(&c.new.scenario))
    };
    let _ = write!(o, "<h1>Stampede comparison: {title}</h1>\n<div class=\"scroll\"><table><tr><th></th><th>run</th><th>scenario</th><th>target</th><th>outcome</th><th>duration</th><th>agents</th><th>completed</th></tr>");
    run_row(&mut o, "base", &c.base);
    run_row(&mut o, "new", &c.new);
    o.push_str("</table></div>\n");
    if !c.warnings.is_empty() {
        o.push_str("<h2>Not like for like</h2><ul class=\"warn\">");
        for w in &c.warnings {
            let _ = write!(o, "<li>{}</li>", esc(w));
        }
        o.push_str("</ul>\n");
    }
    if !limits.is_empty() {
        o.push_str("<h2>Limits</h2><div class=\"scroll\"><table><tr><th>limit</th><th>change</th><th>verdict</th><th>result</th></tr>");
        for l in limits {
            let _ = write!(
                o,
                "<tr><td><code>{}</code></td><td>{}</td><td class=\"{}\">{}</td><td class=\"{}\">{}</td></tr>",
                esc(&l.limit.to_string()),
                l.change.map_or("-".into(), |x| if l.limit.metric.absolute_change() {
                    format!("{:+.2}pp", x * 100.0)
                } else {
                    format!("{:+.1}%", x * 100.0)
                }),
                verdict_class(l.verdict),
                l.verdict,
                if l.breached { "fail" } else { "pass" },
                if l.breached { "FAIL" } else { "PASS" },
            );
        }
        o.push_str("</table></div>\n");
    }
    for s in &c.sections {
        let title = match s.scope {
            Scope::Run => "Whole run (response time from the intended send)".to_string(),
            Scope::Phase => format!("Phase {}", s.name),
            Scope::Step => format!("Step {}", s.name),
        };
        let _ = write!(
            o,
            "<h2>{}</h2><p class=\"noise\">{}</p><div class=\"scroll\"><table><tr><th>figure</th><th>base</th><th>new</th><th>change</th><th>verdict</th><th>CI of the change</th></tr>",
            esc(&title),
            esc(&noise_text(s.noise, c.options.resamples, c.options.confidence))
        );
        for r in &s.rows {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td class=\"ci\">{}</td></tr>",
                esc(r.metric.label()),
                esc(&value(r.metric, r.base)),
                esc(&value(r.metric, r.new)),
                esc(&change(r)),
                verdict_class(r.verdict),
                r.verdict,
                esc(&interval(r)),
            );
        }
        o.push_str("</table></div>\n");
        if s.scope == Scope::Run {
            for (title, svg) in [
                ("Latency distributions", &distributions),
                ("p99 over time", &over_time),
            ] {
                let _ = writeln!(o, "<h2>{title}</h2><div class=\"chart\">{svg}</div>");
            }
        }
    }
    let _ = write!(
        o,
        "<p style=\"color:#777;font-size:0.8em\">Generated by stampede compare. Figures are exact over each run's merged HDR histograms; a change is a regression or an improvement only when its confidence interval excludes zero and it is at least {:.1}%.</p>\n</body></html>\n",
        c.options.min_effect * 100.0
    );
    Ok(o)
}
