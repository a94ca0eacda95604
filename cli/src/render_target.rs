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
            completed: 100,
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
}
