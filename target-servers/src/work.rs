//! CPU work: a real computation that runs until the calling thread has used a given CPU time.

use std::time::{Duration, Instant};

use cpu_time::ThreadTime;

/// Work is done in slices of this much CPU time, yielding to the runtime between slices so one
/// heavy request does not starve the other connections on the same worker thread.
const SLICE: Duration = Duration::from_millis(1);

/// Burns at least `total` of CPU time on the runtime's worker threads and returns a checksum of
/// the computation (so it cannot be optimised away).
pub(crate) async fn burn(total: Duration, seed: u64) -> u64 {
    let mut acc = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut remaining = total;
    while !remaining.is_zero() {
        let used = burn_slice(remaining.min(SLICE), &mut acc);
        remaining = remaining.saturating_sub(used);
        if !remaining.is_zero() {
            tokio::task::yield_now().await;
        }
    }
    acc
}

/// Mixes `acc` until this thread has used `target` of CPU time; returns the CPU time used.
///
/// Falls back to wall-clock time where per-thread CPU clocks are unavailable.
fn burn_slice(target: Duration, acc: &mut u64) -> Duration {
    enum Clock {
        Cpu(ThreadTime),
        Wall(Instant),
    }
    let clock = match ThreadTime::try_now() {
        Ok(t) => Clock::Cpu(t),
        Err(_) => Clock::Wall(Instant::now()),
    };
    loop {
        for _ in 0..512 {
            *acc = splitmix64(*acc);
        }
        let used = match &clock {
            Clock::Cpu(t) => t.try_elapsed().unwrap_or(target),
            Clock::Wall(t) => t.elapsed(),
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
        let a = burn(Duration::ZERO, 1).await;
        let b = burn(Duration::ZERO, 1).await;
        assert_eq!(a, b);
    }

    #[tokio::test]
    async fn burns_at_least_the_asked_cpu_time() {
        let start = ThreadTime::try_now().unwrap();
        burn(Duration::from_millis(3), 7).await;
        assert!(start.try_elapsed().unwrap() >= Duration::from_millis(3));
    }
}
