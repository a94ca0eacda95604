//! The text report's view of how the load was made: each stage of a connection ramp with its
//! connect times, and each agent's ports toward the destinations it dialed.

use std::fmt::Write as _;

use stampede_core::report::Report;

use crate::render::us;

/// Appends the ramp's stages and the agents' ports, when the report has them.
pub fn load_text(o: &mut String, r: &Report) {
    if let Some(l) = r.load.as_ref().filter(|l| !l.stages.is_empty()) {
        let _ = writeln!(o, "Stages (connect time of the connects begun in each)");
        let _ = writeln!(
            o,
            "  {:>5} {:>8} {:>11} {:>9} {:>9} {:>9} {:>9}",
            "stage", "conns", "at", "connects", "p50", "p99", "max"
        );
        for s in &l.stages {
            let c = &s.connect;
            let _ = writeln!(
                o,
                "  {:>5} {:>8} {:>11} {:>9} {:>9} {:>9} {:>9}",
                s.index + 1,
                s.connections,
                format!("{:.1}-{:.1}s", s.start_s, s.start_s + s.duration_s),
                c.count,
                us(c.p50_us),
                us(c.p99_us),
                us(c.max_us)
            );
        }
    }
    let ports: Vec<_> = r
        .agents
        .iter()
        .flat_map(|a| a.destinations.iter().map(move |d| (a, d)))
        .collect();
    if !ports.is_empty() {
        let _ = writeln!(
            o,
            "Ports (each agent's local ports toward each destination, each figure at its own peak)"
        );
        for (a, d) in ports {
            let share = if a.usable_ports > 0 {
                format!(" ({:.1}% of {})", d.ports_pct, a.usable_ports)
            } else {
                String::new()
            };
            let _ = writeln!(
                o,
                "  {} -> {}: {} held{share}, {} in TIME_WAIT, {} connects without a port",
                a.id, d.address, d.ports_max, d.time_wait_max, d.addr_not_available
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_core::report::{
        AgentReport, DestinationReport, LoadSummary, Percentiles, StageReport,
    };

    #[test]
    fn stages_and_ports_read_as_lines() {
        let r = Report {
            load: Some(LoadSummary {
                model: "closed".into(),
                connections: 200,
                stages: vec![StageReport {
                    index: 0,
                    connections: 200,
                    start_s: 0.0,
                    duration_s: 4.0,
                    connect: Percentiles {
                        count: 200,
                        p50_us: 80,
                        p99_us: 1_500,
                        max_us: 2_000,
                        ..Percentiles::default()
                    },
                }],
                ..LoadSummary::default()
            }),
            agents: vec![AgentReport {
                id: "a-1".into(),
                usable_ports: 28_232,
                destinations: vec![DestinationReport {
                    address: "127.0.0.1:8080".into(),
                    ports_max: 120,
                    ports_pct: 0.4,
                    in_use_max: 100,
                    time_wait_max: 20,
                    addr_not_available: 0,
                }],
                ..AgentReport::default()
            }],
            ..Report::default()
        };
        let mut o = String::new();
        load_text(&mut o, &r);
        assert!(
            o.contains("      1      200    0.0-4.0s       200      80µs    1.50ms    2.00ms"),
            "{o}"
        );
        assert!(
            o.contains("  a-1 -> 127.0.0.1:8080: 120 held (0.4% of 28232), 20 in TIME_WAIT, 0 connects without a port"),
            "{o}"
        );
        let mut none = String::new();
        load_text(&mut none, &Report::default());
        assert!(none.is_empty());
    }
}
