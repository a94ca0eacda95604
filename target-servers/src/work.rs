//! CPU work: a real computation that runs until the calling thread has used a given CPU time
//! (or, with [`Clock::Wall`], until a given wall time has passed while it computes).

use std::time::{Duration, Instant};

use cpu_time::ThreadTime;

/// Work is done in slices of this much CPU time, yielding to the runtime between slices so one
/// heavy request does not starve the other connections on the same worker thread.
const SLICE: Duration = Duration::from_millis(1);

/// What a request's `ms` of work is measured in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum Clock {
    /// CPU time of the worker thread: a request costs `ms` of CPU, so on a CPU shared with other
    /// processes it takes longer and the server's capacity drops with its share of the CPU.
    #[default]
    Cpu,
    /// Wall time, computing all along: the worker thread is held for `ms` whatever else the
    /// machine runs, so a server with one worker thread serves exactly 1000/`ms` requests a
    /// second (a fixed service time, for calibrating a load test on a shared machine).
    Wall,
}

impl Clock {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "cpu" => Some(Self::Cpu),
            "wall" => Some(Self::Wall),
            _ => None,
        }
    }
}

/// Burns at least `total` of CPU time (or wall time, see [`Clock`]) on the runtime's worker
/// threads and returns a checksum of the computation (so it cannot be optimised away).
pub(crate) async fn burn(total: Duration, seed: u64, clock: Clock) -> u64 {
    let mut acc = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut remaining = total;
    while !remaining.is_zero() {
        let used = burn_slice(remaining.min(SLICE), &mut acc, clock);
        remaining = remaining.saturating_sub(used);
        if !remaining.is_zero() {
            tokio::task::yield_now().await;
        }
    }
    acc
}

/// Mixes `acc` until this thread has used `target` of CPU time (or until `target` of wall time
/// has passed); returns the time used.
///
/// Falls back to wall-clock time where per-thread CPU clocks are unavailable.
fn burn_slice(target: Duration, acc: &mut u64, clock: Clock) -> Duration {
    enum Since {
        Cpu(ThreadTime),
        Wall(Instant),
    }
    let clock = match clock {
        Clock::Cpu => match ThreadTime::try_now() {
            Ok(t) => Since::Cpu(t),
            Err(_) => Since::Wall(Instant::now()),
        },
        Clock::Wall => Since::Wall(Instant::now()),
    };
    loop {
        for _ in 0..512 {
            *acc = splitmix64(*acc);
        }
        let used = match &clock {
            Since::Cpu(t) => t.try_elapsed().unwrap_or(target),
            Since::Wall(t) => t.elapsed(),
        };
        if used >= target {
            return used;
        }
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn zero_work_returns_immediately() {
        let a = burn(Duration::ZERO, 1, Clock::Cpu).await;
        let b = burn(Duration::ZERO, 1, Clock::Wall).await;
        assert_eq!(a, b);
    }

    #[tokio::test]
    async fn burns_at_least_the_asked_cpu_time() {
        let start = ThreadTime::try_now().unwrap();
        burn(Duration::from_millis(3), 7, Clock::Cpu).await;
        assert!(start.try_elapsed().unwrap() >= Duration::from_millis(3));
    }

    #[tokio::test]
    async fn wall_clock_work_takes_the_asked_wall_time() {
        let start = Instant::now();
        burn(Duration::from_millis(3), 7, Clock::Wall).await;
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(3), "{took:?}");
    }
}
