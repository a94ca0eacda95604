//! The standard Prometheus process metrics (`process_cpu_seconds_total` and
//! `process_resident_memory_bytes`) of this process,
//! read from `/proc/self/stat`, so that a run with `observe: [{ prometheus: URL }]` can put the
//! target's CPU beside its throughput. Elsewhere than Linux there is nothing to read and
//! nothing is exported.

/// Clock ticks per second of `/proc/*/stat` times: `USER_HZ`, 100 on every Linux architecture
/// the kernel's ABI exposes it for.
const USER_HZ: f64 = 100.0;

/// Bytes of a memory page, the unit of `rss` in `/proc/self/stat` (4 KiB on x86-64 and on
/// arm64 with the common kernel configuration).
const PAGE_BYTES: f64 = 4096.0;

/// The process metrics in the text exposition format, or an empty string when `/proc` cannot
/// be read.
pub(crate) fn process_metrics_text() -> String {
    match std::fs::read_to_string("/proc/self/stat") {
        Ok(stat) => render(&stat).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// Renders the metrics from the text of a `/proc/<pid>/stat` file: `None` when it does not
/// have the fields.
fn render(stat: &str) -> Option<String> {
    // The command name (field 2) is in parentheses and may hold spaces: count fields after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: field 3 (state) is fields[0], so field N is fields[N - 3].
    let ticks = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    let cpu = (ticks(14)? + ticks(15)?) / USER_HZ;
    let rss = ticks(24)? * PAGE_BYTES;
    Some(format!(
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n\
         # TYPE process_cpu_seconds_total counter\n\
         process_cpu_seconds_total {cpu}\n\
         # HELP process_resident_memory_bytes Resident memory size in bytes.\n\
         # TYPE process_resident_memory_bytes gauge\n\
         process_resident_memory_bytes {rss}\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_cpu_seconds_and_resident_bytes() {
        let stat =
            "4242 (my target (x)) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 3 0 99 1000 512 rest";
        let text = render(stat).unwrap();
        assert!(text.contains("process_cpu_seconds_total 3\n"), "{text}");
        assert!(
            text.contains("process_resident_memory_bytes 2097152\n"),
            "{text}"
        );
        assert!(render("garbage").is_none());
    }

    /// This very process: its CPU counter grows as it burns CPU.
    #[test]
    fn this_process_is_read() {
        let cpu = || {
            process_metrics_text()
                .lines()
                .find_map(|l| l.strip_prefix("process_cpu_seconds_total "))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap()
        };
        let before = cpu();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while cpu() < before + 0.02 && start.elapsed() < std::time::Duration::from_secs(10) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        assert!(cpu() >= before + 0.02, "{x}");
    }
}
