//! The text report's view of the target: a row per endpoint (and the one that is slow), and
//! the target's own CPU beside the throughput (req/s per target core).

use std::fmt::Write as _;

use stampede_core::report::Report;

use crate::render::us;

/// Appends the endpoints table, the slow-endpoint line and the target's resources, when the
/// report has them.
pub fn target_text(o: &mut String, r: &Report) {
    if !r.endpoints.is_empty() {
        let _ = writeln!(o, "Endpoints");
        let _ = writeln!(
            o,
            "  {:<28} {:>10} {:>8} {:>9} {:>9} {:>6}",
            "address", "completed", "failed", "p50", "p99", "conns"
        );
        for e in &r.endpoints {
            let _ = writeln!(
                o,
                "  {:<28} {:>10} {:>8} {:>9} {:>9} {:>6}",
                e.address,
                e.completed,
                e.failed,
                us(e.p50_us),
                us(e.p99_us),
                e.connections
            );
            // A pod's name is too long for the column: it gets a line of its own.
            if let Some(pod) = &e.pod {
                let _ = writeln!(o, "    pod {pod}");
            }
        }
        if let Some((slow, median)) = stampede_core::endpoints::slow_endpoint(&r.endpoints) {
            let _ = writeln!(
                o,
                "  slow endpoint {}{}: p99 {} against {}",
                slow.address,
                slow.pod
                    .as_ref()
                    .map_or(String::new(), |p| format!(" ({p})")),
                us(slow.p99_us),
                us(median)
            );
        }
    }
    if let Some(t) = &r.target_resources {
        let cores = t.cpu_cores.total;
        let per_core = if cores > 0.0 {
            format!(
                "{:.0} req/s per target core",
                r.totals.throughput_rps / cores
            )
        } else {
            "no target CPU measured".to_string()
        };
        let memory = t
            .max_resident_bytes
            .map(|b| format!("  memory max {:.1} MiB", b as f64 / (1 << 20) as f64))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "Target    cpu {cores:.3} cores, {per_core}{memory}{}",
            if t.failed_scrapes > 0 {
                format!("  ({} scrapes failed)", t.failed_scrapes)
            } else {
                String::new()
            }
        );
        pods_text(o, t);
    }
}

/// The pods behind a cluster target: one row each (80 columns), the ready replicas when they
/// changed, and why the figures are missing when they are.
fn pods_text(o: &mut String, t: &stampede_core::observe::TargetResources) {
    if let Some(why) = &t.pods_unavailable {
        let _ = writeln!(o, "  pods: {why}");
    }
    if t.pods.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "  {:<40} {:>7} {:>9} {:>10} {:>8}",
        "pod", "cpu", "throttled", "memory", "restarts"
    );
    for p in &t.pods {
        let name: String = if p.pod.chars().count() > 40 {
            let tail: String = p.pod.chars().rev().take(39).collect();
            format!("~{}", tail.chars().rev().collect::<String>())
        } else {
            p.pod.clone()
        };
        let _ = writeln!(
            o,
            "  {:<40} {:>7.3} {:>9} {:>10} {:>8}",
            name,
            p.cpu_cores,
            p.throttled
                .map_or("-".to_string(), |x| format!("{:.1} %", x * 100.0)),
            p.max_working_set_bytes.map_or("-".to_string(), |b| format!(
                "{:.1} MiB",
                b as f64 / (1 << 20) as f64
            )),
            p.restarts
        );
    }
    if t.ready_replicas.len() > 1 {
        let changes: Vec<String> = t
            .ready_replicas
            .iter()
            .map(|r| format!("{}/{} at {:.0}s", r.ready, r.pods, r.at_s.max(0.0)))
            .collect();
        let _ = writeln!(o, "  ready replicas: {}", changes.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_core::endpoints::EndpointReport;

    #[test]
    fn the_table_names_the_slow_endpoint_only() {
        let row = |a: &str, p99_us| EndpointReport {
            address: a.into(),
            completed: 1_000,
            p99_us,
            connections: 10,
            ..Default::default()
        };
        let r = Report {
            endpoints: vec![
                row("127.0.0.1:8080", 2_000),
                row("127.0.0.2:8080", 41_000),
                row("127.0.0.3:8080", 2_100),
            ],
            ..Default::default()
        };
        let mut o = String::new();
        target_text(&mut o, &r);
        assert!(
            o.contains("slow endpoint 127.0.0.2:8080: p99 41.00ms against 2.00ms"),
            "{o}"
        );
        assert_eq!(o.matches("slow").count(), 1, "{o}");
    }

    /// The pod table fits 80 columns, a long name keeps its distinctive end, a pod without a
    /// CPU limit shows no throttling, and a missing source is said.
    #[test]
    fn the_pod_table_fits_80_columns() {
        use stampede_core::observe::TargetResources;
        use stampede_core::pods::PodResources;
        let r = Report {
            target_resources: Some(TargetResources {
                pods: vec![
                    PodResources {
                        pod: "checkout-frontend-canary-stampede-target-http-7d9f8c6b5-x2x9q".into(),
                        cpu_cores: 0.412,
                        throttled: Some(0.42),
                        max_working_set_bytes: Some(25 << 20),
                        restarts: 1,
                        ..Default::default()
                    },
                    PodResources {
                        pod: "web-1".into(),
                        cpu_cores: 0.1,
                        ..Default::default()
                    },
                ],
                pods_unavailable: Some("the kubelet's metrics cannot be read: HTTP 403".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut o = String::new();
        target_text(&mut o, &r);
        assert!(o.lines().all(|l| l.chars().count() <= 80), "{o}");
        assert!(
            o.contains("  ~ry-stampede-target-http-7d9f8c6b5-x2x9q "),
            "{o}"
        );
        assert!(o.contains("42.0 %") && o.contains("25.0 MiB"), "{o}");
        let web = o.lines().find(|l| l.contains("web-1")).unwrap();
        assert!(web.contains(" - "), "{web}");
        assert!(
            o.contains("pods: the kubelet's metrics cannot be read"),
            "{o}"
        );
    }
}
