//! The generator watches itself: per interval, the agent's CPU time over wall time as a share
//! of the cores it may use, its resident memory and its open files. A generator at its limit
//! looks like a target at its knee (latency up, throughput flat); these figures let the report
//! tell them apart. [`ports`]: the ephemeral ports in use toward each destination.

pub mod ports;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};
use stampede_proto::v1;

/// The cores this process may use when set ([`set_cpu_limit`]), as `f64` bits; 0: not set.
static CPU_LIMIT: AtomicU64 = AtomicU64::new(0);

/// Sets the cores this process may use (`--cpu-limit`): the share is then measured against
/// them. For a quota the process cannot see, or a budget it is given: a generator past its
/// budget is the run's limit, whatever the machine has spare. Ignores a value that is not a
/// positive number of cores (the caller checks it).
pub fn set_cpu_limit(cores: f64) {
    if cores.is_finite() && cores > 0.0 {
        CPU_LIMIT.store(cores.to_bits(), Ordering::Relaxed);
    }
}

/// The cores this process may use: the limit set, else its cgroup's CPU quota when that is
/// below the CPUs it may run on (a fractional quota, 0.5 of a core, would read as 1), else
/// those CPUs.
fn cores() -> f64 {
    let set = f64::from_bits(CPU_LIMIT.load(Ordering::Relaxed));
    if set > 0.0 {
        return set;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    match cgroup_quota() {
        Some(q) if q < cpus => q,
        _ => cpus,
    }
}

/// The CPU quota of this process's cgroup (v2), in cores: `cpu.max` of the cgroup named in
/// `/proc/self/cgroup`, or of the root a container sees.
fn cgroup_quota() -> Option<f64> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
        });
    let paths = own
        .iter()
        .map(|p| format!("/sys/fs/cgroup{p}/cpu.max"))
        .chain(std::iter::once("/sys/fs/cgroup/cpu.max".to_string()));
    paths
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .find_map(|t| parse_cpu_max(&t))
}

/// `cpu.max`: `QUOTA PERIOD` in microseconds, or `max PERIOD` (no quota: `None`).
fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut it = text.split_whitespace();
    let quota: f64 = it.next()?.parse().ok()?;
    let period: f64 = it.next()?.parse().ok()?;
    (quota > 0.0 && period > 0.0 && quota.is_finite() && period.is_finite()).then(|| quota / period)
}

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
    /// A watch whose first sample covers the time since it was made.
    pub fn new() -> Self {
        Self {
            cores: cores(),
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
            usable_ports: usable_ports(),
            destinations: ports::DIALED.sample(),
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

/// Local ports one source address has toward one destination (the ephemeral range), times the
/// source addresses connections bind from (`--source-ips`; the kernel's choice counts as one);
/// 0 when the range cannot be read.
fn usable_ports() -> u64 {
    let r = crate::ephemeral_ports();
    let range = if r.low > 0 && r.high >= r.low {
        u64::from(r.high - r.low) + 1
    } else {
        0
    };
    range * (crate::net::source_addresses().len().max(1) as u64)
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

    #[test]
    fn a_cgroup_quota_reads_in_cores() {
        assert_eq!(parse_cpu_max("50000 100000\n"), Some(0.5));
        assert_eq!(parse_cpu_max("250000 100000"), Some(2.5));
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("0 100000"), None);
        assert_eq!(parse_cpu_max(""), None);
        assert_eq!(parse_cpu_max("50000 0"), None);
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
