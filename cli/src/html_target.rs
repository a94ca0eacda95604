//! The HTML report's view of the target: the endpoints table with the slow one named, each
//! endpoint's p99 over time, and the target's CPU (observed processes and pods), throttling
//! and memory beside the throughput, so a knee is shown with its cause.

use std::fmt::Write as _;

use stampede_core::observe::TargetResources;
use stampede_core::pods::PodResources;
use stampede_core::report::Report;

use crate::html::{esc, line_chart, Line, PALETTE};

/// The span and the phase marks the report's other charts use, so the target's charts line
/// up with them.
pub(crate) struct Axis<'a> {
    /// Seconds after T0 the charts span.
    pub(crate) x_range: (f64, f64),
    /// The phases' starts, drawn as dashed lines.
    pub(crate) marks: &'a [(f64, String)],
}

/// The endpoints section and the target section, when the report has them; empty otherwise.
pub(crate) fn target_html(r: &Report, axis: &Axis) -> Result<String, String> {
    let mut o = String::new();
    endpoints_html(&mut o, r, axis)?;
    if let Some(t) = &r.target_resources {
        resources_html(&mut o, r, t, axis)?;
    }
    Ok(o)
}

fn ms(us: u64) -> String {
    format!("{:.3}", us as f64 / 1000.0)
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1 << 20) as f64)
}

fn endpoints_html(o: &mut String, r: &Report, axis: &Axis) -> Result<(), String> {
    if r.endpoints.is_empty() {
        return Ok(());
    }
    o.push_str("\n<h2>Endpoints</h2>");
    if let Some((slow, median)) = stampede_core::endpoints::slow_endpoint(&r.endpoints) {
        let _ = write!(
            o,
            "<p class=\"fail\" id=\"slow-endpoint\">slow endpoint <code>{}</code>{}: p99 {} ms against {} ms</p>",
            esc(&slow.address),
            slow.pod
                .as_deref()
                .map_or(String::new(), |p| format!(" ({})", esc(p))),
            ms(slow.p99_us),
            ms(median)
        );
    }
    o.push_str(
        "<div class=\"scroll\"><table id=\"endpoints\"><tr><th>address</th><th>pod</th><th>completed</th>\
<th>failed</th><th>p50 ms</th><th>p99 ms</th><th>connections</th></tr>",
    );
    for e in &r.endpoints {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&e.address),
            esc(e.pod.as_deref().unwrap_or("-")),
            e.completed,
            e.failed,
            ms(e.p50_us),
            ms(e.p99_us),
            e.connections
        );
    }
    o.push_str("</table></div>");
    // One hot endpoint over time: a line per endpoint (the first eight: a chart of more is
    // unreadable, and the table above has them all).
    let tl = &r.timeline;
    let interval_s = interval_of(r);
    let lines: Vec<Line> = r
        .endpoints
        .iter()
        .take(PALETTE.len())
        .enumerate()
        .map(|(i, e)| Line {
            name: e.pod.clone().unwrap_or_else(|| e.address.clone()),
            color: PALETTE[i],
            points: tl
                .iter()
                .filter_map(|t| {
                    let row = t.endpoints.iter().find(|x| x.address == e.address)?;
                    (row.completed > 0)
                        .then(|| (t.t_s + interval_s / 2.0, row.p99_us as f64 / 1000.0))
                })
                .collect(),
        })
        .filter(|l| !l.points.is_empty())
        .collect();
    if !lines.is_empty() {
        let svg = line_chart(
            "p99 response time per endpoint and interval",
            "seconds since T0",
            "ms",
            axis.x_range,
            &lines,
            axis.marks,
            None,
        )?;
        let _ = write!(o, "<div class=\"chart\">{svg}</div>");
    }
    Ok(())
}

/// The interval between two timeline rows (1 s without two rows).
fn interval_of(r: &Report) -> f64 {
    match r.timeline.as_slice() {
        [a, b, ..] => (b.t_s - a.t_s).max(1e-3),
        _ => 1.0,
    }
}

fn resources_html(
    o: &mut String,
    r: &Report,
    t: &TargetResources,
    axis: &Axis,
) -> Result<(), String> {
    o.push_str("\n<h2>Target resources</h2>");
    let cores = t.cpu_cores.total;
    let per_core = if cores > 0.0 {
        format!(
            "<b id=\"per-core\">{:.0} req/s per target core</b>",
            r.totals.throughput_rps / cores
        )
    } else {
        "no target CPU measured".to_string()
    };
    let _ = write!(
        o,
        "<p>CPU {cores:.3} cores over the run, {per_core}{}{}{}.</p>",
        t.max_resident_bytes
            .map_or(String::new(), |b| format!(", memory max {} MiB", mib(b))),
        if t.sources.is_empty() {
            String::new()
        } else {
            format!(
                "; observed: {}",
                t.sources
                    .iter()
                    .map(|s| format!("<code>{}</code>", esc(s)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        if t.failed_scrapes > 0 {
            format!(" ({} scrapes failed)", t.failed_scrapes)
        } else {
            String::new()
        },
    );
    if let Some(why) = &t.pods_unavailable {
        let _ = write!(o, "<p>Pods: {}</p>", esc(why));
    }
    cpu_chart(o, r, t, axis)?;
    throttle_chart(o, t, axis)?;
    pods_table(o, t);
    Ok(())
}

/// The target's CPU per interval, its total and each pod's, beside the requests per second
/// per core in the same interval: where the per-core rate holds while the CPU climbs to a
/// limit, the target's CPU is the limit.
fn cpu_chart(o: &mut String, r: &Report, t: &TargetResources, axis: &Axis) -> Result<(), String> {
    let mut lines = Vec::new();
    if !t.cpu_cores.intervals.is_empty() {
        lines.push(Line {
            name: "all observed".into(),
            color: PALETTE[0],
            points: t
                .cpu_cores
                .intervals
                .iter()
                .map(|i| (i.start_s + i.interval_s / 2.0, i.cpu_cores))
                .collect(),
        });
    }
    for (i, p) in t.pods.iter().take(PALETTE.len() - 1).enumerate() {
        lines.push(Line {
            name: p.pod.clone(),
            color: PALETTE[i + 1],
            points: pod_points(p, |s| Some(s.cpu_cores)),
        });
    }
    lines.retain(|l| !l.points.is_empty());
    if lines.is_empty() {
        return Ok(());
    }
    let svg = line_chart(
        "Target CPU per interval",
        "seconds since T0",
        "cores",
        axis.x_range,
        &lines,
        axis.marks,
        None,
    )?;
    let _ = write!(o, "<div class=\"chart\" id=\"target-cpu\">{svg}</div>");
    // Requests per second per core, interval by interval: the figure capacity is sized by.
    let tl = &r.timeline;
    let per_core: Vec<(f64, f64)> = t
        .cpu_cores
        .intervals
        .iter()
        .filter(|i| i.cpu_cores > 0.0 && i.interval_s > 0.0)
        .filter_map(|i| {
            let (a, b) = (i.start_s, i.start_s + i.interval_s);
            let done: u64 = tl
                .iter()
                .filter(|row| row.t_s >= a && row.t_s < b)
                .map(|row| row.completed)
                .sum();
            (done > 0).then(|| {
                (
                    a + i.interval_s / 2.0,
                    done as f64 / i.interval_s / i.cpu_cores,
                )
            })
        })
        .collect();
    if per_core.len() > 1 {
        let svg = line_chart(
            "Completed requests per second per target core",
            "seconds since T0",
            "req/s per core",
            axis.x_range,
            &[Line {
                name: "req/s per core".into(),
                color: PALETTE[2],
                points: per_core,
            }],
            axis.marks,
            None,
        )?;
        let _ = write!(o, "<div class=\"chart\">{svg}</div>");
    }
    Ok(())
}

fn pod_points(
    p: &PodResources,
    f: impl Fn(&stampede_core::pods::PodInterval) -> Option<f64>,
) -> Vec<(f64, f64)> {
    p.intervals
        .iter()
        .filter_map(|s| Some((s.start_s + s.interval_s / 2.0, f(s)?)))
        .collect()
}

/// Each pod's share of CFS periods throttled, when any pod has a CPU limit.
fn throttle_chart(o: &mut String, t: &TargetResources, axis: &Axis) -> Result<(), String> {
    let lines: Vec<Line> = t
        .pods
        .iter()
        .take(PALETTE.len())
        .enumerate()
        .map(|(i, p)| Line {
            name: p.pod.clone(),
            color: PALETTE[i],
            points: pod_points(p, |s| s.throttled.map(|x| x * 100.0)),
        })
        .filter(|l| !l.points.is_empty())
        .collect();
    if lines.is_empty() {
        return Ok(());
    }
    let svg = line_chart(
        "CPU throttling per pod (share of CFS periods throttled)",
        "seconds since T0",
        "%",
        axis.x_range,
        &lines,
        axis.marks,
        None,
    )?;
    let _ = write!(o, "<div class=\"chart\" id=\"throttling\">{svg}</div>");
    Ok(())
}

fn pods_table(o: &mut String, t: &TargetResources) {
    if t.pods.is_empty() {
        return;
    }
    o.push_str(
        "<div class=\"scroll\"><table id=\"pods\"><tr><th>pod</th><th>cpu cores</th><th>throttled</th>\
<th>memory max MiB</th><th>restarts</th></tr>",
    );
    for p in &t.pods {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.pod),
            p.cpu_cores,
            p.throttled
                .map_or("-".to_string(), |x| format!("{:.1} %", x * 100.0)),
            p.max_working_set_bytes.map_or("-".to_string(), mib),
            p.restarts
        );
    }
    o.push_str("</table></div>");
    if t.ready_replicas.len() > 1 {
        let changes: Vec<String> = t
            .ready_replicas
            .iter()
            .map(|r| format!("{}/{} at {:.0} s", r.ready, r.pods, r.at_s.max(0.0)))
            .collect();
        let _ = write!(o, "<p>Ready replicas: {}.</p>", changes.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_core::endpoints::EndpointReport;
    use stampede_core::observe::{CpuCores, CpuInterval};
    use stampede_core::pods::{PodInterval, ReadyReplicas};
    use stampede_core::report::TimelineRow;

    fn endpoint(address: &str, pod: &str, completed: u64, p99_us: u64) -> EndpointReport {
        EndpointReport {
            address: address.into(),
            pod: Some(pod.into()),
            completed,
            failed: 1,
            p50_us: p99_us / 2,
            p99_us,
            connections: 10,
        }
    }

    fn report() -> Report {
        let eps = vec![
            endpoint("198.18.0.10:8080", "web-a", 1_000, 2_000),
            endpoint("198.18.0.11:8080", "web-b", 1_000, 2_100),
            endpoint("198.18.0.12:8080", "web-<slow>", 1_000, 41_000),
        ];
        let timeline = (0..4)
            .map(|i| TimelineRow {
                interval: i,
                t_s: i as f64,
                completed: 750,
                endpoints: eps.clone(),
                ..TimelineRow::default()
            })
            .collect();
        let pod = |name: &str, throttled| PodResources {
            pod: name.into(),
            cpu_cores: 0.5,
            throttled,
            max_working_set_bytes: Some(48 << 20),
            restarts: 0,
            intervals: (0..4)
                .map(|i| PodInterval {
                    start_s: i as f64,
                    interval_s: 1.0,
                    cpu_cores: 0.5,
                    throttled,
                    ready: true,
                    ..PodInterval::default()
                })
                .collect(),
        };
        let mut r = Report {
            endpoints: eps,
            timeline,
            target_resources: Some(TargetResources {
                cpu_cores: CpuCores {
                    total: 1.5,
                    intervals: (0..4)
                        .map(|i| CpuInterval {
                            start_s: i as f64,
                            interval_s: 1.0,
                            cpu_cores: 1.5,
                        })
                        .collect(),
                },
                pods: vec![
                    pod("web-a", Some(0.25)),
                    pod("web-b", None),
                    pod("web-<slow>", None),
                ],
                ready_replicas: vec![
                    ReadyReplicas {
                        at_s: 0.0,
                        ready: 3,
                        pods: 3,
                    },
                    ReadyReplicas {
                        at_s: 2.0,
                        ready: 2,
                        pods: 3,
                    },
                ],
                ..TargetResources::default()
            }),
            ..Report::default()
        };
        r.totals.throughput_rps = 750.0;
        r
    }

    const AXIS: Axis = Axis {
        x_range: (0.0, 4.0),
        marks: &[],
    };

    /// The section names the slow pod, charts the CPU with each pod's line and the
    /// throttling of the pod that has a limit, and escapes every name.
    #[test]
    fn the_target_section_names_the_slow_pod_and_charts_cpu_and_throttling() {
        let page = target_html(&report(), &AXIS).unwrap();
        assert!(
            page.contains("slow endpoint <code>198.18.0.12:8080</code> (web-&lt;slow&gt;): p99 41.000 ms against 2.000 ms"),
            "{page}"
        );
        assert!(!page.contains("web-<slow>"), "names are escaped");
        assert!(page.contains("<td>198.18.0.11:8080</td><td>web-b</td><td>1000</td><td>1</td>"));
        assert!(page.contains("500 req/s per target core"), "750 / 1.5");
        assert!(page.contains("id=\"target-cpu\"") && page.contains("id=\"throttling\""));
        assert!(page.contains("<td>web-a</td><td>0.500</td><td>25.0 %</td><td>48.0</td><td>0</td>"));
        assert!(page.contains("Ready replicas: 3/3 at 0 s, 2/3 at 2 s."));
        // Legends: endpoints p99, CPU (all + 3 pods), per-core rate, throttling (one pod).
        assert_eq!(page.matches("<div class=\"legend\">").count(), 4);
        assert_eq!(page.matches("<svg").count(), 4);
    }

    /// Without endpoints or observed resources the report has no target section at all; a
    /// target without a CPU limit has no throttling chart.
    #[test]
    fn nothing_measured_is_nothing_shown() {
        assert_eq!(target_html(&Report::default(), &AXIS).unwrap(), "");
        let mut r = report();
        r.endpoints.clear();
        for p in &mut r.target_resources.as_mut().unwrap().pods {
            p.throttled = None;
            p.intervals.iter_mut().for_each(|s| s.throttled = None);
        }
        let page = target_html(&r, &AXIS).unwrap();
        assert!(!page.contains("Endpoints") && !page.contains("id=\"throttling\""));
        assert!(page.contains("id=\"target-cpu\""));
    }
}
