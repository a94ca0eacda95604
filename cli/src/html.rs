//! The self-contained HTML report: inline SVG charts drawn with `plotters` (SVG backend, no
//! fonts embedded, no scripts), and tables per phase, step and agent, and threshold verdicts.

use std::fmt::Write as _;

use plotters::prelude::*;
use stampede_core::report::Report;

const W: u32 = 960;
const H: u32 = 320;

/// One named line of a chart.
pub(crate) struct Line {
    pub(crate) name: String,
    pub(crate) color: RGBColor,
    pub(crate) points: Vec<(f64, f64)>,
}

pub(crate) const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Largest x a chart spans: a year in seconds (a report's times come from a file, which may
/// say anything; past this the axis would only show a hostile value).
const MAX_X: f64 = 366.0 * 86_400.0;
/// Largest y a chart spans (ms or requests/s: far beyond any real figure).
const MAX_Y: f64 = 1e15;

/// `v` made finite and clamped to `[-max, max]` (NaN is 0): the chart library's axes and
/// ticks are computed from these, and an infinite or astronomically wide range never ends.
fn bounded(v: f64, max: f64) -> f64 {
    if v.is_nan() {
        0.0
    } else {
        v.clamp(-max, max)
    }
}

/// A line chart over `x_range`, with dashed vertical markers at `marks`. Every coordinate is
/// made finite and bounded first ([`MAX_X`], [`MAX_Y`]).
pub(crate) fn line_chart(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    x_range: (f64, f64),
    lines: &[Line],
    marks: &[(f64, String)],
    x_fmt: Option<&dyn Fn(&f64) -> String>,
) -> Result<String, String> {
    let x_range = (bounded(x_range.0, MAX_X), bounded(x_range.1, MAX_X));
    let lines: Vec<Line> = lines
        .iter()
        .map(|l| Line {
            name: l.name.clone(),
            color: l.color,
            points: l
                .points
                .iter()
                .map(|&(x, y)| (bounded(x, MAX_X), bounded(y, MAX_Y)))
                .collect(),
        })
        .collect();
    let lines = &lines[..];
    let marks: Vec<(f64, String)> = marks
        .iter()
        .map(|(x, label)| (bounded(*x, MAX_X), label.clone()))
        .collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let y_max = lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .fold(0.0f64, f64::max);
        let y_max = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
        let (x0, x1) = if x_range.1 > x_range.0 {
            x_range
        } else {
            (x_range.0, x_range.0 + 1.0)
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, 0.0..y_max)
            .map_err(err)?;
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(x_desc).y_desc(y_desc).light_line_style(WHITE);
        if let Some(f) = x_fmt {
            mesh.x_label_formatter(f).x_labels(6);
        }
        mesh.draw().map_err(err)?;
        for (x, label) in &marks {
            let style = BLACK.mix(0.45).stroke_width(1);
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(*x, 0.0), (*x, y_max)],
                    6,
                    4,
                    style,
                ))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    label.clone(),
                    (*x, y_max),
                    ("sans-serif", 12).into_font().color(&BLACK.mix(0.7)),
                )))
                .map_err(err)?;
        }
        for l in lines {
            // "planned" is drawn wide and light so an identical achieved line stays readable.
            let width = if l.name == "planned" { 6 } else { 2 };
            chart
                .draw_series(LineSeries::new(
                    l.points.clone(),
                    l.color.stroke_width(width),
                ))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    // The legend is HTML under the chart: outside the plot area, it hides no line, and it
    // stays legible when the chart is scaled down to a phone's width.
    let mut legend = String::from("<div class=\"legend\">");
    for l in lines {
        let RGBColor(r, g, b) = l.color;
        let _ = write!(
            legend,
            "<span><i style=\"background:rgb({r},{g},{b})\"></i>{}</span>",
            esc(&l.name)
        );
    }
    legend.push_str("</div>");
    Ok(format!("{svg}{legend}"))
}

/// The page's `<head>` and opening `<body>`: one style for the report and the comparison.
pub(crate) fn page_head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title>\n<style>{STYLE}</style></head><body>\n",
        esc(title)
    )
}

/// Wide tables scroll sideways inside their own box instead of widening the page; on a phone,
/// cells wrap and charts keep a legible width (they scroll sideways).
const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px auto;padding:0 12px;max-width:1000px;color:#222}\
h1{font-size:1.5em;overflow-wrap:anywhere} h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}\
p,li{overflow-wrap:anywhere}\
.scroll{overflow-x:auto;max-width:100%} .tables{display:flex;flex-wrap:wrap;gap:0 24px}\
table{border-collapse:collapse;margin:8px 0;font-size:0.9em} td,th{border:1px solid #ddd;padding:3px 8px;text-align:right;white-space:nowrap}\
th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}\
.pass,.improvement{color:#1a7f37;font-weight:bold} .fail,.regression{color:#cf222e;font-weight:bold} .noise{color:#57606a}\
.warn{color:#9a6700}\
.chart svg{max-width:100%;height:auto;display:block}\
.legend{display:flex;flex-wrap:wrap;gap:4px 18px;font-size:0.85em;margin:2px 0 8px 70px}\
.legend i{display:inline-block;width:18px;height:3px;margin:0 6px 3px 0;vertical-align:middle}\
@media (max-width:600px){body{margin:8px auto;padding:0 8px} h1{font-size:1.25em} table{font-size:0.8em}\
 td,th{white-space:normal;padding:2px 4px} td.ci{white-space:nowrap} .legend{margin-left:0}\
 .chart{overflow-x:auto} .chart svg{max-width:none;width:640px}}";

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn ms(us: u64) -> String {
    format!("{:.3}", us as f64 / 1000.0)
}

/// The percentile spectrum of the whole run, merged from the per-interval histograms:
/// (x = -log10(1 - q), value in ms).
pub(crate) fn spectrum(r: &Report) -> Vec<(f64, f64)> {
    let mut all = stampede_core::hist::new_histogram();
    for row in &r.timeline {
        if let Ok(h) = stampede_core::hist::from_text(&row.response_hist) {
            let _ = stampede_core::hist::merge(&mut all, &h);
        }
    }
    if all.is_empty() {
        return Vec::new();
    }
    let mut pts = Vec::new();
    let mut x = 0.0;
    while x <= 5.0 + 1e-9 {
        let q = 1.0 - 10f64.powf(-x);
        let v = all.value_at_quantile(q.min(1.0));
        pts.push((x, v as f64 / 1000.0));
        x += 0.05;
    }
    pts
}

/// Renders the report as one self-contained HTML page.
pub fn html(r: &Report) -> Result<String, String> {
    let tl = &r.timeline;
    let interval_s = if tl.len() > 1 {
        (tl[1].t_s - tl[0].t_s).max(1e-3)
    } else {
        1.0
    };
    let x_max = tl
        .last()
        .map_or(r.duration_s, |t| t.t_s + interval_s)
        .max(r.planned_duration_s);
    let marks: Vec<(f64, String)> = r
        .phases
        .iter()
        .map(|p| {
            let name = if p.name.is_empty() {
                format!("phase {}", p.index + 1)
            } else {
                p.name.clone()
            };
            (p.start_s, name)
        })
        .collect();
    let mid = |t: f64| t + interval_s / 2.0;
    let lat = |name: &str, i: usize, f: &dyn Fn(&stampede_core::report::TimelineRow) -> u64| Line {
        name: name.into(),
        color: PALETTE[i],
        points: tl
            .iter()
            .filter(|t| t.completed > 0)
            .map(|t| (mid(t.t_s), f(t) as f64 / 1000.0))
            .collect(),
    };
    let latency = line_chart(
        "Response time per interval (from the intended send time)",
        "seconds since T0",
        "ms",
        (0.0, x_max),
        &[
            lat("p50", 0, &|t| t.response_p50_us),
            lat("p90", 1, &|t| t.response_p90_us),
            lat("p99", 3, &|t| t.response_p99_us),
            lat("max", 7, &|t| t.response_max_us),
        ],
        &marks,
        None,
    )?;
    let req_per_session = if r.totals.sessions.planned > 0 {
        r.totals.planned as f64 / r.totals.sessions.planned as f64
    } else {
        1.0
    };
    let throughput = line_chart(
        "Throughput: planned vs achieved",
        "seconds since T0",
        "requests/s",
        (0.0, x_max),
        &[
            Line {
                name: "planned".into(),
                color: RGBColor(190, 190, 190),
                points: tl
                    .iter()
                    .map(|t| {
                        (
                            mid(t.t_s),
                            t.sessions_planned as f64 * req_per_session / interval_s,
                        )
                    })
                    .collect(),
            },
            Line {
                name: "achieved (completed)".into(),
                color: PALETTE[2],
                points: tl
                    .iter()
                    .map(|t| (mid(t.t_s), t.completed as f64 / interval_s))
                    .collect(),
            },
            Line {
                name: "failed".into(),
                color: PALETTE[3],
                points: tl
                    .iter()
                    .map(|t| (mid(t.t_s), t.failed as f64 / interval_s))
                    .collect(),
            },
        ],
        &marks,
        None,
    )?;
    let kinds: std::collections::BTreeSet<&String> =
        tl.iter().flat_map(|t| t.errors.keys()).collect();
    let error_lines: Vec<Line> = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| Line {
            name: (*k).clone(),
            color: PALETTE[(i + 3) % PALETTE.len()],
            points: tl
                .iter()
                .map(|t| {
                    (
                        mid(t.t_s),
                        t.errors.get(*k).copied().unwrap_or(0) as f64 / interval_s,
                    )
                })
                .collect(),
        })
        .collect();
    let errors = line_chart(
        if error_lines.is_empty() {
            "Errors over time by kind: none"
        } else {
            "Errors over time by kind"
        },
        "seconds since T0",
        "errors/s",
        (0.0, x_max),
        &error_lines,
        &marks,
        None,
    )?;
    let spectrum = line_chart(
        "Percentile spectrum of the response time (whole run, merged)",
        "percentile (log scale towards 99.999%)",
        "ms",
        (0.0, 5.0),
        &[Line {
            name: "response time".into(),
            color: PALETTE[0],
            points: spectrum(r),
        }],
        &[],
        Some(&percentile_label),
    )?;

    let mut o = String::with_capacity(256 * 1024);
    o.push_str(&page_head(&format!("Stampede report {}", r.run_id)));
    let _ = write!(
        o,
        "<h1>Stampede report: {scenario}</h1>\n<p>Run <code>{id}</code>, outcome <b>{outcome:?}</b>{msg}. Duration {dur:.1} s (planned {pdur:.1} s), {model}, seed {seed}{target}.</p>\n",
        id = esc(&r.run_id),
        scenario = esc(&r.scenario),
        outcome = r.outcome,
        msg = r.message.as_deref().map(|m| format!(": {}", esc(m))).unwrap_or_default(),
        dur = r.duration_s,
        pdur = r.planned_duration_s,
        model = esc(&r.load_description()),
        seed = r.seed,
        target = if r.target.is_empty() { String::new() } else { format!(", target <code>{}</code>", esc(&r.target)) },
    );
    let t = &r.totals;
    let lt = &r.latency.response_time;
    let _ = write!(
        o,
        "<h2>Summary</h2><div class=\"tables\"><div class=\"scroll\"><table><tr><th>planned</th><th>completed</th><th>failed</th><th>error rate</th><th>throughput</th><th>achieved</th></tr>\
<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.3}%</td><td>{:.1}/s</td><td>{:.1}%</td></tr></table></div>\
<div class=\"scroll\"><table><tr><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>p99.99 ms</th><th>max ms</th></tr>\
<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr></table></div></div>",
        t.planned, t.completed, t.failed, t.error_rate * 100.0, t.throughput_rps, t.achieved_ratio * 100.0,
        ms(lt.p50_us), ms(lt.p90_us), ms(lt.p99_us), ms(lt.p999_us), ms(lt.p9999_us), ms(lt.max_us),
    );
    o.push_str(&answers_html(r));
    o.push_str("<h2>Thresholds</h2>");
    if r.thresholds.is_empty() {
        o.push_str("<p>No thresholds were set.</p>");
    } else {
        o.push_str(
            "<div class=\"scroll\"><table id=\"thresholds\"><tr><th>threshold</th><th>measured</th><th>verdict</th></tr>",
        );
        for th in &r.thresholds {
            let _ = write!(
                o,
                "<tr><td><code>{}</code></td><td>{}</td><td class=\"{}\">{}</td></tr>",
                esc(&th.expr),
                esc(&th.measured_text),
                if th.passed { "pass" } else { "fail" },
                if th.passed { "PASS" } else { "FAIL" }
            );
        }
        o.push_str("</table></div>");
    }
    for (title, svg) in [
        ("Latency over time", latency),
        ("Throughput", throughput),
        ("Errors", errors),
        ("Percentile spectrum", spectrum),
    ] {
        // A chart with nothing on it is a line of text, not an empty frame.
        if title == "Errors" && error_lines.is_empty() {
            o.push_str("\n<h2>Errors</h2><p>No errors.</p>");
            continue;
        }
        let _ = write!(o, "\n<h2>{title}</h2><div class=\"chart\">{svg}</div>");
    }
    o.push_str(&crate::html_target::target_html(
        r,
        &crate::html_target::Axis {
            x_range: (0.0, x_max),
            marks: &marks,
        },
    )?);
    phases_table(&mut o, "Phases", "phase", r.phases.iter());
    if r.workloads.len() > 1 || r.workloads.iter().any(|w| w.session_types.len() > 1) {
        o.push_str("\n<h2>Workloads</h2><div class=\"scroll\"><table><tr><th>workload / session type</th><th>start s</th><th>sessions planned</th><th>started</th><th>share asked</th><th>share run</th><th>requests completed</th><th>failed</th><th>p50 ms</th><th>p99 ms</th></tr>");
        for w in &r.workloads {
            let (f, l) = (&w.figures, &w.figures.latency.response_time);
            let _ = write!(
                o,
                "<tr><td>{} ({})</td><td>{:.1}</td><td>{}</td><td>{}</td><td></td><td></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&f.name), esc(&w.model), f.start_s, w.sessions.planned, w.sessions.started,
                f.completed, f.failed, ms(l.p50_us), ms(l.p99_us)
            );
            for t in w.session_types.iter().filter(|_| w.session_types.len() > 1) {
                let l = &t.latency.response_time;
                let _ = write!(
                    o,
                    "<tr><td>&nbsp;&nbsp;{}</td><td></td><td>{}</td><td>{}</td><td>{:.1}%</td><td>{:.1}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&t.name), t.planned, t.started, t.share * 100.0, t.achieved_share * 100.0,
                    t.requests_completed, t.requests_failed, ms(l.p50_us), ms(l.p99_us)
                );
            }
        }
        o.push_str("</table></div>");
    }
    // Several targets: each one's workloads together, what `target(NAME)` thresholds judge.
    if !r.targets.is_empty() {
        phases_table(
            &mut o,
            "Targets",
            "target",
            r.targets.iter().map(|t| &t.figures),
        );
    }
    o.push_str("\n<h2>Steps</h2><div class=\"scroll\"><table><tr><th>step</th><th>completed</th><th>failed</th><th>errors</th><th>p50 ms</th><th>p99 ms</th><th>max ms</th></tr>");
    for s in &r.steps {
        let l = &s.latency.response_time;
        let errs: Vec<String> = s.errors.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.name), s.completed, s.failed, esc(&errs.join(", ")), ms(l.p50_us), ms(l.p99_us), ms(l.max_us)
        );
    }
    o.push_str("</table></div>");
    o.push_str(&crate::render_samples::samples_html(r));
    o.push_str("\n<h2>Agents</h2><div class=\"scroll\"><table><tr><th>agent</th><th>shard</th><th>planned</th><th>started</th><th>completed</th><th>failed</th><th>lost</th><th>clock offset µs</th><th>lag p99 µs</th><th>lag max µs</th><th>late arrivals</th></tr>");
    for a in &r.agents {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&a.id), a.shard, a.planned, a.started, a.completed, a.failed,
            if a.lost { format!("yes ({:.1}%)", a.lost_share * 100.0) } else { "no".into() },
            a.clock_offset_us, a.lag_p99_us, a.lag_max_us, a.late_arrivals
        );
    }
    o.push_str("</table></div>\n<p style=\"color:#777;font-size:0.8em\">Generated by stampede. Percentiles are exact over the merged HDR histograms (3 significant digits).</p>\n</body></html>\n");
    Ok(o)
}

/// The answers' figures the text report prints: status codes, gRPC statuses, sizes,
/// connections and the service time beside the response time.
/// A table of phase rows under `title`, the first column headed `first`: the phases, and
/// the targets of a run that loads several (each one's workloads together, as one row).
fn phases_table<'a>(
    o: &mut String,
    title: &str,
    first: &str,
    rows: impl Iterator<Item = &'a stampede_core::report::PhaseReport>,
) {
    let _ = write!(
        o,
        "\n<h2>{title}</h2><div class=\"scroll\"><table id=\"{}\"><tr><th>{first}</th><th>start s</th><th>duration s</th><th>planned</th><th>completed</th><th>failed</th><th>throughput</th><th>p50 ms</th><th>p99 ms</th><th>max ms</th></tr>",
        title.to_ascii_lowercase()
    );
    for p in rows {
        let l = &p.latency.response_time;
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}/s</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(if p.name.is_empty() { "-" } else { &p.name }), p.start_s, p.duration_s, p.planned, p.completed, p.failed, p.throughput_rps,
            ms(l.p50_us), ms(l.p99_us), ms(l.max_us)
        );
    }
    o.push_str("</table></div>");
}

fn answers_html(r: &Report) -> String {
    let t = &r.totals;
    let mut o = String::from("\n<h2>Answers</h2><div class=\"tables\">");
    let counts = |o: &mut String, title: &str, rows: Vec<(String, u64)>| {
        if rows.is_empty() {
            return;
        }
        let _ = write!(
            o,
            "<div class=\"scroll\"><table><tr><th>{title}</th><th>count</th></tr>"
        );
        for (k, n) in rows {
            let _ = write!(o, "<tr><td>{}</td><td>{n}</td></tr>", esc(&k));
        }
        o.push_str("</table></div>");
    };
    counts(
        &mut o,
        "HTTP status",
        t.status_codes
            .iter()
            .map(|(k, n)| (k.to_string(), *n))
            .collect(),
    );
    counts(
        &mut o,
        "gRPC status",
        t.grpc_statuses
            .iter()
            .map(|(k, n)| (k.clone(), *n))
            .collect(),
    );
    let c = &r.connections;
    let _ = write!(
        o,
        "<div class=\"scroll\"><table><tr><th>mean request B</th><th>mean response B</th><th>sent B</th><th>received B</th>\
         <th>connections opened</th><th>peak open</th></tr><tr><td>{:.0}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr></table></div>",
        t.mean_request_bytes, t.mean_response_bytes, t.bytes_sent, t.bytes_received, c.opened, c.peak_open,
    );
    let st = &r.latency.service_time;
    let _ = write!(
        o,
        "<div class=\"scroll\"><table><tr><th>service time</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th></tr>\
         <tr><td>from the actual send</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr></table></div></div>",
        ms(st.p50_us), ms(st.p90_us), ms(st.p99_us), ms(st.p999_us), ms(st.max_us),
    );
    o
}

/// The x axis of the percentile spectrum is -log10(1 - q): label it with q as a percentage.
pub(crate) fn percentile_label(x: &f64) -> String {
    let q = 100.0 * (1.0 - 10f64.powf(-*x));
    if q < 99.0 {
        format!("{q:.0}%")
    } else {
        format!("{}%", (q * 1000.0).round() / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_core::report::LoadSummary;

    /// The figures the text report prints are in the HTML and the JSON too.
    #[test]
    fn the_html_has_every_figure_of_the_text() {
        let mut r = Report::default();
        r.totals.status_codes = [(200, 9_876), (503, 17)].into();
        r.totals.grpc_statuses = [("UNAVAILABLE".to_string(), 23)].into();
        r.totals.bytes_received = 654_321;
        r.connections.opened = 4_321;
        r.connections.peak_open = 77;
        r.latency.service_time.p99_us = 12_345;
        let text = crate::render::report_text_width(&r, true);
        let html = html(&r).unwrap();
        let json = serde_json::to_string(&r).unwrap();
        for (in_text, in_html) in [
            ("200 ×9876", "<td>200</td><td>9876</td>"),
            ("503 ×17", "<td>503</td><td>17</td>"),
            ("UNAVAILABLE ×23", "<td>UNAVAILABLE</td><td>23</td>"),
            ("opened 4321", "<td>4321</td>"),
            ("peak open 77", "<td>77</td>"),
        ] {
            assert!(text.contains(in_text), "text lacks {in_text}:\n{text}");
            assert!(html.contains(in_html), "HTML lacks {in_html}");
        }
        assert!(html.contains("<td>654321</td>") && json.contains("654321"));
        assert!(json.contains("9876") && json.contains("4321") && json.contains("12345"));
        assert!(
            text.contains("service time") && html.contains("<td>12.345</td>"),
            "{html}"
        );
        assert!(
            html.contains("<p>No errors.</p>"),
            "an empty chart collapses"
        );
    }

    #[test]
    fn the_header_names_the_load_model_and_legends_are_outside_the_charts() {
        let mut r = Report {
            arrival: "uniform".into(),
            load: Some(LoadSummary {
                model: "constant".into(),
                connections: 10,
                rate: Some(200.0),
                ..LoadSummary::default()
            }),
            ..Report::default()
        };
        r.arrival_resolution_us = Some(1000);
        let page = html(&r).unwrap();
        assert!(page.contains("constant model at 200/s over 10 connections, arrivals in 1ms ticks"));
        assert!(!page.contains("arrival uniform"));
        // Legends are HTML under the charts, not boxes drawn over the plot; the errors chart
        // of a run without errors is a line of text.
        assert_eq!(page.matches("<div class=\"legend\">").count(), 3);
        r.arrival_resolution_us = None;
        r.load = Some(LoadSummary {
            model: "closed".into(),
            connections: 10,
            ..LoadSummary::default()
        });
        assert!(html(&r).unwrap().contains("closed model, 10 connections"));
        r.load = None;
        r.arrival = "poisson".into();
        assert!(html(&r).unwrap().contains("poisson arrivals"));
    }

    /// A report file may hold any time: charts are drawn over a bounded, finite range (an
    /// interval of 1e308 s made the chart library's ticks loop for good).
    #[test]
    fn hostile_times_are_bounded_before_any_chart() {
        use stampede_core::report::{PhaseReport, TimelineRow};
        for (last, duration) in [(1e308, 1e308), (f64::INFINITY, f64::NAN), (-1e308, 1.0)] {
            let row = |t_s| TimelineRow {
                t_s,
                completed: 5,
                response_p50_us: 1000,
                response_max_us: 9000,
                sessions_planned: 5,
                ..TimelineRow::default()
            };
            let r = Report {
                duration_s: duration,
                planned_duration_s: duration,
                timeline: vec![row(0.0), row(last)],
                phases: vec![PhaseReport {
                    start_s: last,
                    ..PhaseReport::default()
                }],
                ..Report::default()
            };
            let page = html(&r).unwrap();
            assert!(page.contains("<svg"), "{last}");
        }
    }

    /// A run that loads several targets shows each one's row, named by its `host:port`; a
    /// run of one target has no such table.
    #[test]
    fn several_targets_have_a_table_of_their_own() {
        let mut r = Report::default();
        assert!(!html(&r).unwrap().contains("id=\"targets\""));
        for (name, completed) in [("auth:8443", 60), ("api:8080", 40)] {
            r.targets.push(stampede_core::report::TargetReport {
                figures: stampede_core::report::PhaseReport {
                    name: name.into(),
                    completed,
                    ..Default::default()
                },
                url: format!("http://{name}"),
                workloads: vec![],
            });
        }
        let page = html(&r).unwrap();
        let table = &page[page.find("id=\"targets\"").expect("a targets table")..];
        assert!(table.contains("<td>auth:8443</td>") && table.contains("<td>api:8080</td>"));
        assert!(table.contains("<td>60</td>") && table.contains("<td>40</td>"));
    }
}
