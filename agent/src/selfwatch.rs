//! The generator watches itself: per interval, the agent's CPU time over wall time as a share
//! of the cores it may use, its resident memory and its open files. A generator at its limit
//! looks like a target at its knee (latency up, throughput flat); these figures let the report
//! tell them apart.

use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};
use stampede_proto::v1;

/// Samples the agent's own process between report intervals.
#[derive(Debug)]
pub struct SelfWatch {
    /// The cores this process may use (its cgroup quota or affinity, else the machine's).
    cores: f64,
    last: Option<(Instant, Duration)>,
}

impl Default for SelfWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl SelfWatch {
    pub fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        Self {
            cores,
            last: process_cpu().map(|c| (Instant::now(), c)),
        }
    }

    /// The figures since the last sample (the first: since [`SelfWatch::new`]); `None` when
    /// the process's CPU time cannot be read.
    pub fn sample(&mut self) -> Option<v1::AgentResources> {
        let now = Instant::now();
        let cpu = process_cpu()?;
        let share = match self.last.replace((now, cpu)) {
            Some((then, before)) => cpu_share(
                cpu.saturating_sub(before),
                now.saturating_duration_since(then),
                self.cores,
            ),
            None => 0.0,
        };
        Some(v1::AgentResources {
            cpu_share: share,
            rss_bytes: rss_bytes().unwrap_or(0),
            open_files: open_files().unwrap_or(0),
            cores: self.cores,
        })
    }
}

/// CPU time over wall time, as a share of `cores` (0 when no time passed).
pub fn cpu_share(cpu: Duration, wall: Duration, cores: f64) -> f64 {
    let wall = wall.as_secs_f64() * cores.max(1e-3);
    if wall <= 0.0 {
        return 0.0;
    }
    cpu.as_secs_f64() / wall
}

/// User and system CPU time of the whole process (every thread).
fn process_cpu() -> Option<Duration> {
    let u = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let t = |v: nix::sys::time::TimeVal| {
        Duration::new(v.tv_sec().max(0) as u64, 0)
            + Duration::from_micros(v.tv_usec().max(0) as u64)
    };
    Some(t(u.user_time()) + t(u.system_time()))
}

/// Resident memory, from `/proc/self/status` (`VmRSS: N kB`).
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Open file descriptors, from `/proc/self/fd`.
fn open_files() -> Option<u64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_is_of_the_cores_the_agent_may_use() {
        let s = Duration::from_secs;
        assert_eq!(cpu_share(s(1), s(1), 1.0), 1.0);
        assert_eq!(cpu_share(s(1), s(2), 2.0), 0.25);
        assert_eq!(cpu_share(Duration::from_millis(300), s(1), 0.5), 0.6);
        assert_eq!(cpu_share(s(1), Duration::ZERO, 4.0), 0.0);
    }

    /// Real figures of this process: work done between two samples shows as CPU time, and
    /// the test binary has memory and open files.
    #[test]
    fn a_sample_reads_this_process() {
        let mut w = SelfWatch::new();
        let mut x = 0u64;
        let busy = Instant::now();
        while busy.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let r = w.sample().expect("getrusage works here");
        assert!(r.cpu_share > 0.0, "{r:?}");
        assert!(r.rss_bytes > 1 << 20, "{r:?}");
        assert!(r.open_files >= 3, "{r:?}");
        assert!(r.cores >= 1.0, "{r:?}");
    }
}
