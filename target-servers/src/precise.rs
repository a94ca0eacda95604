//! Precise async sleeps for `/delay` and the configured delay of `/data`.
//!
//! tokio's timer wheel has millisecond granularity, and its reactor sleeps in whole
//! milliseconds, so `sleep(5 ms)` takes 5 to 7 ms. A target whose delay is the thing being
//! measured must do better: a Linux timerfd registered with tokio's reactor wakes within tens
//! of microseconds. If a timerfd cannot be had (out of file descriptors), the tokio timer is
//! used instead.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;

struct Timer(TimerFd);

impl AsRawFd for Timer {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Sleeps for `d` with sub-millisecond precision.
pub(crate) async fn sleep(d: Duration) {
    if d.is_zero() {
        return;
    }
    if timerfd_sleep(d).await.is_err() {
        tokio::time::sleep(d).await;
    }
}

async fn timerfd_sleep(d: Duration) -> std::io::Result<()> {
    let fd = TimerFd::new(
        ClockId::CLOCK_MONOTONIC,
        TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
    )?;
    fd.set(
        Expiration::OneShot(TimeSpec::from_duration(d)),
        TimerSetTimeFlags::empty(),
    )?;
    // `AsyncFd::new` is deprecated because a caller could close the fd while it is registered;
    // `Timer` owns its timerfd exclusively and closes it only on drop, after deregistration.
    // The replacement, `AsyncFd::register`, is `unsafe`, which this workspace denies.
    #[allow(deprecated)]
    let afd = AsyncFd::new(Timer(fd))?;
    loop {
        let mut guard = afd.readable().await?;
        // Reading the expiration count clears readiness; EAGAIN means not yet expired.
        match guard.try_io(|t| t.get_ref().0.wait().map_err(std::io::Error::from)) {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sleeps_at_least_the_duration() {
        let t = std::time::Instant::now();
        sleep(Duration::from_millis(3)).await;
        assert!(t.elapsed() >= Duration::from_millis(3));
        sleep(Duration::ZERO).await;
    }
}
