//! Human-readable output: the live progress line and the final report.

use std::fmt::Write as _;

use stampede_core::report::{Percentiles, Report};
use stampede_proto::v1;

/// `812µs`, `5.21ms`, `1.20s`.
pub fn us(v: u64) -> String {
    if v < 1_000 {
        format!("{v}µs")
    } else if v < 1_000_000 {
        format!("{:.2}ms", v as f64 / 1e3)
    } else {
        format!("{:.2}s", v as f64 / 1e6)
    }
}

/// The live line: at most [`LIVE_WIDTH`] columns (a wider line breaks on every redraw in an
/// 80-column terminal). It shows time, the phase, the achieved rate against the planned one,
/// completed and failed requests with the commonest error, and p99; then, while they fit,
/// an agent past 90 % of its CPU and the target's cores now (when it is watched), so a rate
/// that falls short says live whether the generator or the target is working hard.
pub fn progress_line(s: &v1::LiveSnapshot, scenario: &stampede_core::Scenario) -> String {
    let (phase, planned) = planned_at(scenario, s.elapsed_s);
    let rate = match planned {
        Some(p) => format!("{}/{}/s", short(s.rps), short(p)),
        None => format!("{}/s", short(s.rps)),
    };
    let errors = match s.errors.iter().max_by_key(|(_, v)| **v) {
        Some((k, _)) if s.failed > 0 => format!(" err {} {k}", short(s.failed as f64)),
        _ => String::new(),
    };
    let line = format!(
        "{:>4.0}/{:.0}s {phase} {rate} ok {}{errors} p99 {}",
        s.elapsed_s,
        s.planned_duration_s,
        short(s.completed as f64),
        us(s.p99_us),
    );
    let mut line: String = line.chars().take(LIVE_WIDTH).collect();
    let target = s.target_cpu_cores.map(|c| format!(" target cpu {c:.2}"));
    let busy_agent = s
        .busiest_agent_cpu_pct
        .filter(|pct| *pct >= stampede_core::report::CPU_LIMIT_SHARE * 100.0)
        .map(|pct| format!(" agent cpu {pct:.0}%"));
    // The generator near its limit says more about a short rate than the target's cores.
    for extra in [busy_agent, target].into_iter().flatten() {
        if line.chars().count() + extra.chars().count() <= LIVE_WIDTH {
            line.push_str(&extra);
        }
    }
    line
}

/// Widest live line, in columns.
pub const LIVE_WIDTH: usize = 79;

/// The phase running `elapsed_s` after T0 and its planned request rate then (none for a
/// closed load, which has no schedule).
fn planned_at(s: &stampede_core::Scenario, elapsed_s: f64) -> (String, Option<f64>) {
    let views = s.workload_views();
    if let [w] = views.as_slice() {
        return workload_at(w, elapsed_s);
    }
    // Several workloads: the ones running now, their planned rates added up.
    let running: Vec<_> = views
        .iter()
        .filter(|w| {
            let t = elapsed_s - w.start.as_secs_f64();
            t >= 0.0 && t < w.duration().as_secs_f64()
        })
        .map(|w| workload_at(w, elapsed_s - w.start.as_secs_f64()))
        .collect();
    let name = match running.as_slice() {
        [(name, _)] => name.clone(),
        _ => format!("{} workloads", running.len()),
    };
    let rate = running
        .iter()
        .map(|(_, r)| *r)
        .try_fold(0.0, |a, r| r.map(|r| a + r));
    (name, rate)
}

/// One workload's phase at `elapsed_s` after its start, and its planned request rate then.
fn workload_at(w: &stampede_core::workload::View<'_>, elapsed_s: f64) -> (String, Option<f64>) {
    let weight: f64 = w.types.iter().map(|t| f64::from(t.weight)).sum();
    let rps = w
        .types
        .iter()
        .map(|t| f64::from(t.weight) * t.requests() as f64)
        .sum::<f64>()
        / weight.max(1.0);
    if let Some(l) = w.load {
        return (
            format!("{:?}", l.model).to_lowercase(),
            l.rate.map(|r| r * rps),
        );
    }
    let mut start = 0.0;
    for (i, p) in w.phases.iter().enumerate() {
        let d = p.duration.as_secs_f64();
        if elapsed_s < start + d || i + 1 == w.phases.len() {
            let f = ((elapsed_s - start) / d.max(1e-9)).clamp(0.0, 1.0);
            let rate = p.arrival_rate + (p.end_rate() - p.arrival_rate) * f;
            let name: String = p.display_name(i).chars().take(12).collect();
            return (name, Some(rate * rps));
        }
        start += d;
    }
    (String::new(), None)
}

/// The width of the final text report: 80 columns (a terminal's default) unless `--wide`.
pub const REPORT_WIDTH: usize = 80;

/// `s` cut to `n` characters, the last one an ellipsis when it was longer: a long phase or
/// agent name must not push a table row past the report's width.
fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Wraps every line longer than `width` at spaces, continuation lines indented by four more
/// than the line's own indent: prose (messages, warnings, long threshold expressions) then
/// fits the width the tables were laid out for.
fn fit(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.chars().count() <= width {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let more = " ".repeat((indent + 4).min(width / 2));
        let mut cur = line[..indent].to_string();
        let mut fresh = true;
        for word in line.split_whitespace() {
            let (cw, ww) = (cur.chars().count(), word.chars().count());
            if !fresh && cw + 1 + ww > width {
                out.push_str(&cur);
                out.push('\n');
                cur = more.clone();
                fresh = true;
            }
            if !fresh {
                cur.push(' ');
            }
            // A word longer than a whole line is cut where the line ends.
            let mut rest: String = word.to_string();
            while cur.chars().count() + rest.chars().count() > width {
                let room = width.saturating_sub(cur.chars().count()).max(1);
                let head: String = rest.chars().take(room).collect();
                rest = rest.chars().skip(room).collect();
                cur.push_str(&head);
                out.push_str(&cur);
                out.push('\n');
                cur = more.clone();
            }
            cur.push_str(&rest);
            fresh = false;
        }
        out.push_str(&cur);
        out.push('\n');
    }
    out
}

/// The header of the phase table (and of the workload table, whose rows are phase rows).
fn phase_header(o: &mut String, wide: bool) {
    if !wide {
        let _ = writeln!(
            o,
            "  {:<14} {:>6} {:>8} {:>8} {:>6} {:>8} {:>8} {:>8}",
            "name", "start", "planned", "complete", "failed", "rps", "p50", "p99"
        );
        return;
    }
    let _ = writeln!(
        o,
        "  {:<16} {:>7} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9}",
        "name", "start", "planned", "completed", "failed", "rps", "p50", "p99"
    );
}

/// One row of the phase table.
fn phase_line(o: &mut String, p: &stampede_core::report::PhaseReport, wide: bool) {
    if !wide {
        let _ = writeln!(
            o,
            "  {:<14} {:>5.1}s {:>8} {:>8} {:>6} {:>8.1} {:>8} {:>8}",
            clip(&p.name, 14),
            p.start_s,
            short(p.planned as f64),
            short(p.completed as f64),
            short(p.failed as f64),
            p.throughput_rps,
            us(p.latency.response_time.p50_us),
            us(p.latency.response_time.p99_us)
        );
        return;
    }
    let _ = writeln!(
        o,
        "  {:<16} {:>6.1}s {:>9} {:>9} {:>7} {:>9.1} {:>9} {:>9}{}",
        p.name,
        p.start_s,
        p.planned,
        p.completed,
        p.failed,
        p.throughput_rps,
        us(p.latency.response_time.p50_us),
        us(p.latency.response_time.p99_us),
        // Left out of the headline figures above it.
        if p.warmup { "  warm-up" } else { "" }
    );
}

/// 1234 → "1234", 12345 → "12.3k", 1234567 → "1.23M".
fn short(v: f64) -> String {
    if v < 10_000.0 {
        format!("{v:.0}")
    } else if v < 1e6 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{:.2}M", v / 1e6)
    }
}

fn bytes(n: f64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let (mut v, mut u) = (n, 0);
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The latency table's header: 80 columns leave out min and p99.99 (the JSON has them).
fn lat_header(out: &mut String, wide: bool) {
    if !wide {
        let _ = writeln!(
            out,
            "  {:<13} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "", "count", "mean", "p50", "p90", "p99", "p99.9", "max"
        );
        return;
    }
    let _ = writeln!(
        out,
        "  {:<14} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "", "count", "min", "mean", "p50", "p90", "p99", "p99.9", "p99.99", "max"
    );
}

fn lat_row(out: &mut String, name: &str, p: &Percentiles, wide: bool) {
    if !wide {
        let _ = writeln!(
            out,
            "  {name:<13} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            short(p.count as f64),
            us(p.mean_us as u64),
            us(p.p50_us),
            us(p.p90_us),
            us(p.p99_us),
            us(p.p999_us),
            us(p.max_us)
        );
        return;
    }
    let _ = writeln!(
        out,
        "  {name:<14} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        p.count,
        us(p.min_us),
        us(p.mean_us as u64),
        us(p.p50_us),
        us(p.p90_us),
        us(p.p99_us),
        us(p.p999_us),
        us(p.p9999_us),
        us(p.max_us)
    );
}

/// The final report as text, [`REPORT_WIDTH`] columns wide.
pub fn report_text(r: &Report) -> String {
    report_text_width(r, false)
}

/// The final report as text: within [`REPORT_WIDTH`] columns, or with every column and no
/// wrapping when `wide`.
pub fn report_text_width(r: &Report, wide: bool) -> String {
    let text = report_lines(r, wide);
    if wide {
        text
    } else {
        fit(&text, REPORT_WIDTH)
    }
}

fn report_lines(r: &Report, wide: bool) -> String {
    let mut o = String::new();
    // The outcome the exit code reflects: a failed threshold is never `succeeded`.
    let outcome = crate::ci::outcome_word(r);
    let _ = writeln!(o, "Run {}  ({})  {outcome}", r.run_id, r.scenario);
    if let Some(m) = &r.message {
        let _ = writeln!(o, "  {m}");
    }
    let t = &r.totals;
    let model = r.load_description();
    let _ = writeln!(
        o,
        "  duration {:.1}s (planned {:.1}s), {model}, seed {}, {} agent(s)",
        r.duration_s,
        r.planned_duration_s,
        r.seed,
        r.agents.len()
    );
    let _ = writeln!(
        o,
        "Requests  planned {}  completed {} ({:.2}%)  failed {}  throughput {:.1}/s",
        t.planned,
        t.completed,
        t.achieved_ratio * 100.0,
        t.failed,
        t.throughput_rps
    );
    let _ = writeln!(
        o,
        "Sessions  planned {}  started {}  completed {}  failed {}  dropped {}",
        t.sessions.planned,
        t.sessions.started,
        t.sessions.completed,
        t.sessions.failed,
        t.sessions.dropped
    );
    if t.sessions.started_late > 0 {
        let _ = writeln!(
            o,
            "          {} of them started more than {} s late (not delivered as planned)",
            t.sessions.started_late,
            stampede_core::report::UNDELIVERED_LAG_US / 1_000_000
        );
    }
    if t.interrupted > 0 || t.sessions.interrupted > 0 {
        let _ = writeln!(
            o,
            "Stopped   {} requests ({} sessions) were still in flight after the graceful stop: interrupted",
            t.interrupted, t.sessions.interrupted
        );
    }
    let c = &r.connections;
    if c.opened > 0 || c.peak_open > 0 {
        let _ = writeln!(
            o,
            "Conns     opened {}  peak open {}{}",
            c.opened,
            c.peak_open,
            if wide {
                " (most held at once, agents' per-interval peaks summed)"
            } else {
                " (most held at once)"
            }
        );
    }
    crate::render_target::target_text(&mut o, r);
    crate::render_load::load_text(&mut o, r);
    if !t.status_codes.is_empty() {
        let list: Vec<String> = t
            .status_codes
            .iter()
            .map(|(k, v)| format!("{k} ×{v}"))
            .collect();
        let _ = writeln!(o, "Status    {}", list.join(", "));
    }
    if !t.grpc_statuses.is_empty() {
        let list: Vec<String> = t
            .grpc_statuses
            .iter()
            .map(|(k, v)| format!("{k} ×{v}"))
            .collect();
        let _ = writeln!(o, "gRPC      {}", list.join(", "));
    }
    if t.mean_response_bytes > 0.0 || t.mean_request_bytes > 0.0 {
        let _ = writeln!(
            o,
            "Sizes     mean request {}  mean response {}  (received {} in all)",
            bytes(t.mean_request_bytes),
            bytes(t.mean_response_bytes),
            bytes(t.bytes_received as f64)
        );
    }
    if let Some(c) = &t.compressed {
        let _ = writeln!(
            o,
            "Bodies    compressed: {} on the wire, {} decoded",
            bytes(c.wire_bytes as f64),
            bytes(c.decoded_bytes as f64)
        );
    }
    if t.errors.is_empty() {
        let _ = writeln!(o, "Errors    none");
    } else {
        let list: Vec<String> = t.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            o,
            "Errors    {} (rate {:.3}%)",
            list.join(", "),
            t.error_rate * 100.0
        );
    }
    crate::render_samples::samples_text(&mut o, r, REPORT_WIDTH, wide);
    let _ = writeln!(o, "Latency");
    lat_header(&mut o, wide);
    lat_row(&mut o, "response time", &r.latency.response_time, wide);
    lat_row(&mut o, "service time", &r.latency.service_time, wide);
    let _ = writeln!(
        o,
        "  (response time from the intended send; service time from the actual send)"
    );
    let g = &r.generator;
    let _ = writeln!(
        o,
        "Generator start lag p50 {}  p99 {}  max {}  late {}  dropped {}{}",
        us(g.lag.p50_us),
        us(g.lag.p99_us),
        us(g.lag.max_us),
        g.late_arrivals,
        g.dropped_arrivals,
        if g.behind_schedule {
            "  BEHIND SCHEDULE"
        } else {
            ""
        }
    );
    for w in &g.warnings {
        let _ = writeln!(o, "  warning: {w}");
    }
    if !r.phases.is_empty() {
        let _ = writeln!(o, "Phases");
        phase_header(&mut o, wide);
        for p in &r.phases {
            phase_line(&mut o, p, wide);
        }
    }
    // Workloads, and the session types of mixes, planned against achieved.
    if r.workloads.len() > 1 || r.workloads.iter().any(|w| w.session_types.len() > 1) {
        let _ = writeln!(o, "Workloads");
        phase_header(&mut o, wide);
        let targets = r.workloads.iter().any(|w| w.target != r.target);
        for w in &r.workloads {
            phase_line(&mut o, &w.figures, wide);
            if targets && !w.target.is_empty() {
                let _ = writeln!(o, "    target {}", w.target);
            }
            if w.session_types.len() > 1 {
                for t in &w.session_types {
                    if !wide {
                        let _ = writeln!(
                            o,
                            "    {:<12} planned {:>7} started {:>7} {:>5.1}% of {:>5.1}% p99 {:>8}",
                            clip(&t.name, 12),
                            short(t.planned as f64),
                            short(t.started as f64),
                            t.achieved_share * 100.0,
                            t.share * 100.0,
                            us(t.latency.response_time.p99_us)
                        );
                        continue;
                    }
                    let _ = writeln!(
                        o,
                        "    {:<14} sessions planned {:>8} started {:>8} ({:>5.1}% of {:>5.1}% asked)  p99 {:>9}",
                        t.name,
                        t.planned,
                        t.started,
                        t.achieved_share * 100.0,
                        t.share * 100.0,
                        us(t.latency.response_time.p99_us)
                    );
                }
            }
        }
    }
    // Several targets: each one's workloads together, what `target(NAME)` thresholds judge.
    if !r.targets.is_empty() {
        let _ = writeln!(o, "Targets");
        phase_header(&mut o, wide);
        for t in &r.targets {
            phase_line(&mut o, &t.figures, wide);
        }
    }
    if r.steps.len() > 1 || r.steps.iter().any(|s| s.stream.is_some()) {
        let _ = writeln!(o, "Steps");
        for s in &r.steps {
            // A streamed step's arrivals, under its own line (80 columns either way).
            let stream = s.stream.as_ref().map(|st| {
                format!(
                    "    events {:>6} first p50 {:>8} p99 {:>8} gap p50 {:>8} p99 {:>8}",
                    short(st.events as f64),
                    us(st.ttfb.p50_us),
                    us(st.ttfb.p99_us),
                    us(st.gap.p50_us),
                    us(st.gap.p99_us)
                )
            });
            if !wide {
                let _ = writeln!(
                    o,
                    "  {:<16} completed {:>8} failed {:>6} p50 {:>8} p99 {:>8}",
                    clip(&s.name, 16),
                    short(s.completed as f64),
                    short(s.failed as f64),
                    us(s.latency.response_time.p50_us),
                    us(s.latency.response_time.p99_us)
                );
                if let Some(line) = &stream {
                    let _ = writeln!(o, "{line}");
                }
                continue;
            }
            let _ = writeln!(
                o,
                "  {:<16} completed {:>9}  failed {:>6}  p50 {:>9}  p99 {:>9}  {:>7}/s",
                s.name,
                s.completed,
                s.failed,
                us(s.latency.response_time.p50_us),
                us(s.latency.response_time.p99_us),
                short(s.throughput_rps)
            );
            if let Some(line) = &stream {
                let _ = writeln!(o, "{line}");
            }
        }
    }
    if !r.thresholds.is_empty() {
        let _ = writeln!(o, "Thresholds");
        for t in &r.thresholds {
            let verdict = if t.passed { "pass" } else { "FAIL" };
            let _ = writeln!(
                o,
                "  {verdict:<5} {:<36} measured {}",
                t.expr, t.measured_text
            );
        }
    }
    if !r.agents.is_empty() {
        let _ = writeln!(o, "Agents");
        let idw = if wide { 20 } else { 16 };
        let _ = writeln!(
            o,
            "  {:<idw$} {:>9} {:>9} {:>7} {:>10} {:>9} {:>9}",
            "id", "planned", "completed", "failed", "clock off", "lag p99", "status"
        );
        for a in &r.agents {
            let status = if a.lost {
                format!("LOST {:.1}%", a.lost_share * 100.0)
            } else {
                "ok".to_string()
            };
            let _ = writeln!(
                o,
                "  {:<idw$} {:>9} {:>9} {:>7} {:>8}µs {:>9} {:>9}",
                if wide { a.id.clone() } else { clip(&a.id, idw) },
                a.planned,
                a.completed,
                a.failed,
                a.clock_offset_us,
                us(a.lag_p99_us),
                status
            );
        }
        if r.lost_share > 0.0 {
            let _ = writeln!(
                o,
                "  {:.2}% of the planned load was not delivered by lost agents",
                r.lost_share * 100.0
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_durations() {
        assert_eq!(us(812), "812µs");
        assert_eq!(us(5_210), "5.21ms");
        assert_eq!(us(1_200_000), "1.20s");
    }

    #[test]
    fn renders_an_empty_report() {
        let text = report_text(&Report::default());
        assert!(text.contains("Errors    none"));
    }

    #[test]
    fn the_live_line_fits_80_columns_and_names_phase_plan_and_errors() {
        let s = stampede_core::Scenario::from_yaml(
            "name: n\ntarget: http://h:1\nphases:\n  - { name: warm-up-and-a-long-name, duration: 10s, arrival_rate: 100, ramp_to: 200 }\nsession:\n  - http: { path: / }\n",
        )
        .unwrap();
        let snap = v1::LiveSnapshot {
            elapsed_s: 5.0,
            planned_duration_s: 10.0,
            rps: 149.7,
            completed: 123_456_789,
            failed: 98_765_432,
            p99_us: 1_234_567,
            errors: [("connect_refused".to_string(), 98_765_432)].into(),
            ..Default::default()
        };
        let line = progress_line(&snap, &s);
        assert!(line.chars().count() <= LIVE_WIDTH, "{line}");
        assert!(line.contains("warm-up-and-"), "{line}");
        assert!(line.contains("150/150/s"), "{line}");
        assert!(line.contains("err 98.77M connect_refused"), "{line}");
        // No room for the target's cores on so full a line: left out, never cut.
        let watched = v1::LiveSnapshot {
            target_cpu_cores: Some(1.618),
            busiest_agent: "a-2".into(),
            busiest_agent_cpu_pct: Some(97.4),
            ..snap.clone()
        };
        assert_eq!(progress_line(&watched, &s), line);
        let quiet = v1::LiveSnapshot {
            failed: 0,
            errors: Default::default(),
            ..watched.clone()
        };
        let line = progress_line(&quiet, &s);
        assert!(line.chars().count() <= LIVE_WIDTH, "{line}");
        assert!(line.ends_with(" p99 1.23s agent cpu 97%"), "{line}");
        let small = v1::LiveSnapshot {
            completed: 1_234,
            ..quiet.clone()
        };
        let line = progress_line(&small, &s);
        assert!(line.chars().count() <= LIVE_WIDTH, "{line}");
        assert!(line.ends_with(" agent cpu 97% target cpu 1.62"), "{line}");
        let idle_agent = v1::LiveSnapshot {
            busiest_agent_cpu_pct: Some(40.0),
            ..quiet
        };
        assert!(progress_line(&idle_agent, &s).ends_with(" p99 1.23s target cpu 1.62"));
    }

    /// Every line of a full report (two phases with long names, a workload mix, steps,
    /// errors, failed thresholds, warnings, lost agents, big figures) fits 80 columns, and
    /// `--wide` keeps the columns 80 columns leave out.
    #[test]
    fn a_full_report_fits_80_columns() {
        use stampede_core::report::{
            AgentReport, PhaseReport, SessionTypeReport, StepReport, TargetReport, WorkloadReport,
        };
        use stampede_core::threshold::ThresholdResult;
        let lat = |base: u64| {
            let p = Percentiles {
                count: 123_456_789,
                min_us: base,
                mean_us: (base * 3) as f64,
                p50_us: base * 2,
                p90_us: base * 40,
                p99_us: 999_990,
                p999_us: 9_999_990,
                p9999_us: 59_999_990,
                max_us: 99_999_990,
                ..Default::default()
            };
            stampede_core::report::Latency {
                response_time: p.clone(),
                service_time: p,
            }
        };
        let phase = |i: u32, name: &str| PhaseReport {
            index: i,
            name: name.into(),
            start_s: 3599.9,
            duration_s: 3600.0,
            planned: 123_456_789,
            started: 123_456_789,
            completed: 98_765_432,
            failed: 24_691_357,
            throughput_rps: 99_999.9,
            latency: lat(900),
            ..Default::default()
        };
        let mut r = Report {
            run_id: "run-0123456789ab".into(),
            scenario: "checkout flow with a very long scenario name that goes on and on".into(),
            message: Some("a threshold failed: error_rate < 1% measured 20.00% at 12.0 s, and the run went on until its end as asked".into()),
            duration_s: 7200.0,
            planned_duration_s: 7200.0,
            seed: u64::MAX,
            arrival: "poisson".into(),
            phases: vec![phase(0, "warm-up-with-a-long-name"), phase(1, "steady")],
            ..Default::default()
        };
        r.totals.planned = 246_913_578;
        r.totals.completed = 197_530_864;
        r.totals.failed = 49_382_714;
        r.totals.errors = [
            ("status_500".to_string(), 49_000_000),
            ("connect_refused".to_string(), 382_714),
            ("extract.token".to_string(), 1),
        ]
        .into();
        r.totals.status_codes = [(200, 197_530_864), (401, 12), (500, 49_000_000)].into();
        r.totals.mean_request_bytes = 1234.0;
        r.totals.mean_response_bytes = 4_567_890.0;
        r.totals.bytes_received = u64::MAX / 4;
        r.connections.opened = 123_456_789;
        r.connections.peak_open = 10_000;
        r.latency = lat(812);
        r.generator.behind_schedule = true;
        r.generator.warnings = vec![
            "the generator fell behind its schedule: 1234 sessions started more than 10 ms late; the report must not be read as if it had not".into(),
        ];
        let t = |name: &str| SessionTypeReport {
            name: name.into(),
            planned: 123_456_789,
            started: 123_456_789,
            achieved_share: 0.755,
            share: 0.75,
            latency: lat(5000),
            ..Default::default()
        };
        r.workloads = vec![WorkloadReport {
            figures: phase(0, "web-shop-front"),
            session_types: vec![t("browse-the-catalogue"), t("buy")],
            ..Default::default()
        }];
        r.targets = vec![TargetReport {
            figures: phase(0, "auth.shop.example.internal:8443"),
            ..Default::default()
        }];
        r.steps = ["web/browse/step-1-with-a-name", "login"]
            .iter()
            .map(|n| StepReport {
                name: n.to_string(),
                completed: 123_456_789,
                failed: 1_234_567,
                latency: lat(700),
                ..Default::default()
            })
            .collect();
        r.thresholds = [
            "p99 < 5s",
            "error_rate < 1%",
            "phase(warm-up-with-a-long-name).p99 < 5s",
            "step(web/browse/step-1-with-a-name).service.p99 < 5s",
        ]
        .iter()
        .map(|e| ThresholdResult {
            expr: e.to_string(),
            measured: 0.2,
            limit: 0.01,
            passed: false,
            measured_text: "20.00%".into(),
            window: None,
        })
        .collect();
        r.agents = vec![AgentReport {
            id: "stampede-agent-7d9f8c6b5-abcde".into(),
            planned: 123_456_789,
            completed: 98_765_432,
            failed: 24_691_357,
            lost: true,
            lost_share: 0.123,
            clock_offset_us: -1_234_567,
            lag_p99_us: 999_990,
            ..Default::default()
        }];
        r.lost_share = 0.123;
        let text = report_text(&r);
        for line in text.lines() {
            assert!(
                line.chars().count() <= REPORT_WIDTH,
                "{} columns: {line}\n{text}",
                line.chars().count()
            );
        }
        // Nothing is lost to the width: the sections, the errors and every threshold remain.
        for want in [
            "Phases",
            "warm-up-with-…",
            "Steps",
            "Targets",
            "auth.shop.exa…",
            "Thresholds",
            "status_500",
            "p99.9",
            "LOST",
            "step(web/browse/step-1-with-a-name).service.p99",
        ] {
            assert!(text.contains(want), "{want} missing:\n{text}");
        }
        let wide = report_text_width(&r, true);
        assert!(wide.contains("p99.99") && wide.contains("warm-up-with-a-long-name"));
        assert!(wide.lines().any(|l| l.chars().count() > REPORT_WIDTH));
    }

    #[test]
    fn fitting_wraps_prose_at_spaces_and_keeps_short_lines() {
        let text = format!("short\n  {}\n{}\n", "word ".repeat(30), "x".repeat(200));
        let out = fit(&text, 40);
        assert!(out.lines().all(|l| l.chars().count() <= 40), "{out}");
        assert!(out.starts_with("short\n  word word"), "{out}");
        let words = |s: &str| s.split_whitespace().collect::<String>();
        assert_eq!(words(&out), words(&text));
    }
}
