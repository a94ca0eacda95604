//! The arrival loop of the open and constant-rate models: walks the shard's seeded schedule and
//! dispatches each owned arrival (a session to spawn, or a slot for the constant-rate pool) at
//! its intended time.
//!
//! It is a task on the load runtime, paced by a `timerfd` registered in the runtime's reactor
//! ([`Pacer`]): the kernel's high-resolution timer lands within microseconds of the intended
//! time (tokio's own timer has millisecond steps), and its expiry wakes the runtime's worker
//! directly, which then starts the session on the same thread. A thread of its own, sleeping
//! until each arrival, cost a context switch more per request and a cross-thread wake-up of
//! the worker (profiled in `docs/performance.md`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use stampede_core::schedule::Arrival;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::time::Instant;

use crate::runner::stop::Stop;
use crate::runner::{Recorder, RunSpec};
use crate::ticked::Ticks;

/// Arrivals dispatched in a row without yielding to the runtime (a late loop catching up
/// must not starve the sessions it starts).
const BURST: u32 = 64;

/// The longest wait for an arrival that does not also wait on the stop: how late, at most, an
/// arrival loop sees a stop.
const STOP_LAG: Duration = Duration::from_millis(10);

/// Waits until an instant with the precision of the kernel's high-resolution timers: a
/// `timerfd` polled by the runtime's reactor. Where no timerfd can be made (it always can on
/// Linux), it falls back to tokio's timer.
///
/// With a tick (the scenario's `arrival_resolution`), every instant asked for is on the tick's
/// grid, and the timer is armed to repeat every tick: while arrivals come tick after tick,
/// each wait is only a read of the expiry count, without reprogramming the timer (which on a
/// virtual machine is an exit to the hypervisor, about 6 µs of CPU a time).
pub(crate) struct Pacer {
    timer: Option<AsyncFd<Timer>>,
    tick: Duration,
    /// While the timer repeats: the instant of its next expiry not yet read.
    next: Option<Instant>,
}

/// Registers the timer with the runtime's reactor. The one `unsafe` of the agent: tokio
/// takes a descriptor by number and asks its owner to keep it open and the same.
#[allow(unsafe_code)]
fn register(t: TimerFd) -> io::Result<AsyncFd<Timer>> {
    // SAFETY: `Timer` owns the timerfd's descriptor (an `OwnedFd` inside `TimerFd`) for as
    // long as it lives, never replaces it, and always returns that one: it stays open and
    // refers to the same timer for the whole life of the `AsyncFd` that owns the `Timer`.
    unsafe { AsyncFd::register_with_interest(Timer(t), Interest::READABLE) }
        .map_err(io::Error::from)
}

/// A timerfd as tokio's reactor takes it (by raw descriptor).
struct Timer(TimerFd);

impl AsRawFd for Timer {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

#[cfg(test)]
thread_local! {
    /// Set by tests whose tokio clock is paused: this thread's pacers use tokio's timer, which
    /// that clock drives, instead of the kernel's.
    pub(crate) static TOKIO_PACED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Pacer {
    /// A pacer for instants on a grid of `tick` (zero: any instant, each timed on its own).
    pub(crate) fn new(tick: Duration) -> Self {
        #[cfg(test)]
        if TOKIO_PACED.with(std::cell::Cell::get) {
            return Self {
                timer: None,
                tick,
                next: None,
            };
        }
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(io::Error::from)
        .and_then(register);
        if let Err(e) = &timer {
            tracing::warn!(error = %e, "no timerfd: arrivals are paced by tokio's millisecond timer");
        }
        Self {
            timer: timer.ok(),
            tick,
            next: None,
        }
    }

    /// Returns at `at` (at once if it has passed).
    pub(crate) async fn until(&mut self, at: Instant) {
        let Some(wait) = at
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        else {
            return;
        };
        let Some(fd) = &self.timer else {
            return tokio::time::sleep_until(at).await;
        };
        if let Err(e) = Self::wait(fd, self.tick, &mut self.next, at, wait).await {
            tracing::warn!(error = %e, "timerfd failed: falling back to tokio's timer");
            self.timer = None;
            tokio::time::sleep_until(at).await;
        }
    }

    /// Waits for the expiry at `at`, `wait` from now. The repeating timer serves it only if
    /// `at` is its very next expiry: for a later one it would wake for every empty tick
    /// between, each dearer than arming the timer again.
    async fn wait(
        fd: &AsyncFd<Timer>,
        tick: Duration,
        next: &mut Option<Instant>,
        at: Instant,
        wait: Duration,
    ) -> io::Result<()> {
        if *next != Some(at) {
            let first = TimeSpec::from_duration(wait);
            let expiration = if tick.is_zero() {
                Expiration::OneShot(first)
            } else {
                Expiration::IntervalDelayed(first, TimeSpec::from_duration(tick))
            };
            // Re-arming discards any expiry not yet read.
            fd.get_ref()
                .0
                .set(expiration, TimerSetTimeFlags::empty())
                .map_err(io::Error::from)?;
            *next = (!tick.is_zero()).then_some(at);
        }
        loop {
            let mut ready = fd.readable().await?;
            let mut count = [0u8; 8];
            // Reading the expiry count clears the readiness; EAGAIN means not yet.
            match ready.try_io(|t| {
                nix::unistd::read(t.get_ref().0.as_fd(), &mut count).map_err(io::Error::from)
            }) {
                Ok(read) => {
                    read?;
                    // The timer stays unreadable until its next expiry: forget the readiness
                    // now, or the next wait would begin with a read that can only fail.
                    ready.clear_ready();
                    if let Some(n) = next.as_mut() {
                        let fired = u32::try_from(u64::from_ne_bytes(count)).unwrap_or(u32::MAX);
                        *n += tick * fired;
                    }
                    return Ok(());
                }
                Err(_would_block) => continue,
            }
        }
    }
}

/// Waits for `at` with `pacer`, waking the connections waiting at `ticks` (if any) first and
/// at each tick on the way while any waits.
async fn wait(pacer: &mut Pacer, ticks: Option<&Ticks>, at: Instant) {
    let Some(ticks) = ticks else {
        return pacer.until(at).await;
    };
    loop {
        ticks.wake_ready();
        let tick = ticks.after(Instant::now());
        if tick >= at {
            return pacer.until(at).await;
        }
        // More than a tick to wait: let the connections just woken or just sent to run
        // first, and tick only if one of them then waits for an answer.
        tokio::task::yield_now().await;
        if !ticks.waiting() {
            return pacer.until(at).await;
        }
        pacer.until(tick).await;
    }
}

/// After the schedule's end: ticks until no connection waits for an answer.
async fn drain(pacer: &mut Pacer, ticks: &Ticks) {
    loop {
        ticks.wake_ready();
        tokio::task::yield_now().await;
        if !ticks.waiting() {
            return;
        }
        pacer.until(ticks.after(Instant::now())).await;
    }
}

/// Dispatches this shard's arrivals (or constant-rate slots) of `spec`'s workload at their
/// intended times (`t0` plus each arrival's offset) through `dispatch`, with the session type
/// the mix gives it. Returns when the schedule is exhausted or `stop` fires; then what the
/// shard will never start is counted as dropped.
///
/// With `ticks` (a constant-rate pool that reads at ticks, [`crate::ticked`]) it also wakes
/// the pool's connections waiting for answers, at each tick while any waits: after the tick's
/// slots (so a slot goes to an idle connection, not to one whose answer is read now), and
/// after the schedule's end until the last answer is read.
pub(crate) async fn run(
    spec: &Arc<RunSpec>,
    rec: &Arc<Recorder>,
    (t0, ticks): (Instant, Option<&Ticks>),
    stop: &Stop,
    mut dispatch: impl FnMut(Arrival, Instant, u32),
) {
    // Own arrivals dispatched so far, per phase of this workload, and in all (the position
    // in the mix).
    let mut handled = vec![0u64; spec.phases];
    let mut own = 0u64;
    let mut stopped = false;
    let Some(filter) = &spec.filter else {
        return;
    };
    let mut pacer = Pacer::new(spec.schedule.resolution());
    let mut burst = 0u32;
    for a in spec.schedule.iter() {
        if !filter.owns(a.index) {
            continue;
        }
        let intended = t0 + Duration::from_nanos(a.at_ns);
        let now = Instant::now();
        if now < intended {
            burst = 0;
            // A wait shorter than STOP_LAG does not wait on the stop too (that wait takes the
            // token's lock, at every arrival of a fast schedule): the flag read after it
            // sees the stop at most STOP_LAG late.
            if intended - now < STOP_LAG {
                wait(&mut pacer, ticks, intended).await;
            } else {
                tokio::select! {
                    _ = wait(&mut pacer, ticks, intended) => {}
                    () = stop.fired() => {}
                }
            }
        } else {
            burst += 1;
            if burst >= BURST {
                burst = 0;
                tokio::task::yield_now().await;
            }
        }
        if stop.is_stopped() {
            stopped = true;
            break;
        }
        if let Some(h) = handled.get_mut(a.phase as usize) {
            *h += 1;
        }
        // The schedule numbers phases within this workload, the recorder across the run: shift
        // by the workload's first phase.
        let a = Arrival {
            phase: a.phase + spec.phase_base,
            ..a
        };
        rec.with(a.phase, |s| s.counters_mut().sessions_planned += 1);
        let kind = spec.mix.pick(spec.mix_offset.wrapping_add(own));
        own += 1;
        dispatch(a, intended, kind);
    }
    if let (Some(ticks), false) = (ticks, stopped) {
        tokio::select! {
            _ = drain(&mut pacer, ticks) => {}
            () = stop.fired() => {}
        }
    }
    if stopped {
        // What this shard will now never start: the plan minus what was dispatched, by
        // subtraction (a long run stopped early must not walk the rest of its schedule).
        for (phase, (planned, done)) in spec.planned.iter().zip(&handled).enumerate() {
            let left = planned.saturating_sub(*done);
            if left > 0 {
                rec.drop_arrivals(spec.phase_base + phase as u32, left);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pacer returns at the instant asked, neither early nor a timer step late, and at
    /// once for an instant that has passed.
    #[tokio::test]
    async fn paces_to_the_microsecond_scale() {
        let mut p = Pacer::new(Duration::ZERO);
        assert!(p.timer.is_some(), "timerfd is available on Linux");
        let mut late = Vec::new();
        for _ in 0..50 {
            let at = Instant::now() + Duration::from_micros(300);
            p.until(at).await;
            let now = Instant::now();
            assert!(now >= at, "returned early");
            late.push(now - at);
        }
        // tokio's timer would round every one up to its next millisecond step; a loaded CI
        // machine may delay some wake-ups, not most.
        let close = late
            .iter()
            .filter(|d| **d < Duration::from_micros(500))
            .count();
        assert!(close >= 10, "{late:?}");
        // A time already past is ready on the first poll: no timer is armed for it.
        let past = Instant::now() - Duration::from_millis(5);
        assert!(futures::FutureExt::now_or_never(p.until(past)).is_some());
    }

    /// On a tick's grid the repeating timer returns at each tick asked for, never early,
    /// tick after tick, across a gap (armed again) and after a late caller skipped ticks.
    #[tokio::test]
    async fn a_repeating_timer_paces_tick_after_tick() {
        let tick = Duration::from_millis(1);
        let mut p = Pacer::new(tick);
        let base = Instant::now() + Duration::from_millis(2);
        let ticks = (0..20).chain(35..40).chain([38, 45, 46]);
        let mut close = 0;
        for k in ticks {
            let at = base + tick * k;
            p.until(at).await;
            let now = Instant::now();
            assert!(now >= at, "tick {k} returned early");
            if now - at < Duration::from_micros(500) {
                close += 1;
            }
        }
        assert!(p.next.is_some(), "the timer repeats");
        assert!(close >= 5, "{close} of 28 wake-ups near their tick");
        // A time already past is ready on the first poll: no timer is armed for it.
        let past = Instant::now() - Duration::from_millis(5);
        assert!(futures::FutureExt::now_or_never(p.until(past)).is_some());
    }
}
