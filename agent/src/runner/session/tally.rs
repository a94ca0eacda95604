//! A session's counts: its start and end, and its request in flight, counted once whether it
//! ends, fails or is dropped when the run stops.

use stampede_core::stats::IntervalStats;
use tokio::time::Instant;

use super::us;
use crate::runner::Recorder;

/// What a session counts at its start (planned, where the closed model plans it as it starts
/// it; started, with its lag; its type's start) and at its end (completed or failed), folded
/// into the recorder locks its first and last requests take anyway: a session of one request
/// takes the lock twice, not five times. A session dropped before its end (the run stopped and
/// its graceful stop is over, or it stopped in a think time) is counted interrupted when its
/// tally drops, with the request it had in flight: so that, at every stop, started =
/// completed + failed + interrupted, for sessions and for requests.
pub(super) struct Tally<'r> {
    pub(super) rec: &'r Recorder,
    pub(super) phase: u32,
    pub(super) plan: bool,
    /// When the session should have started: its start lag counts from here.
    pub(super) intended: Instant,
    /// The start is counted.
    pub(super) opened: bool,
    /// The mix's type index, when the run counts sessions per type ([`NONE`] when not).
    pub(super) kind: u32,
    pub(super) ended: bool,
    /// The request step (its ordinal) of the request sent and not yet answered ([`NONE`]).
    pub(super) in_request: u32,
}

/// No session type, no request in flight: a [`Tally`] is part of every connection task's
/// future, so it holds plain `u32`s rather than `Option`s twice their size.
pub(super) const NONE: u32 = u32::MAX;

impl Tally<'_> {
    fn kind(&self) -> Option<u32> {
        (self.kind != NONE).then_some(self.kind)
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        let request = std::mem::replace(&mut self.in_request, NONE);
        let request = (request != NONE).then_some(request as usize);
        let session = self.opened && !self.ended;
        if request.is_none() && !session {
            return;
        }
        let kind = self.kind();
        self.rec.with(self.phase, |s| {
            if let Some(step) = request {
                s.record_interrupted(step);
            }
            if session {
                s.counters_mut().sessions_interrupted += 1;
                if let Some(k) = kind {
                    s.counters_mut()
                        .session_types
                        .entry(k)
                        .or_default()
                        .interrupted += 1;
                }
            }
        });
    }
}

impl Tally<'_> {
    /// Counts a session that cannot start: planned (where the closed model plans it) and
    /// dropped.
    pub(super) fn drop_unstarted(&self) {
        self.rec.with(self.phase, |s| {
            if self.plan {
                s.counters_mut().sessions_planned += 1;
            }
            s.counters_mut().dropped_arrivals += 1;
        });
    }

    /// Counts the start, once, as at `now`.
    pub(super) fn open(&mut self, s: &mut IntervalStats, now: Instant) {
        if std::mem::replace(&mut self.opened, true) {
            return;
        }
        if self.plan {
            s.counters_mut().sessions_planned += 1;
        }
        // Started when due (a kept connection's next session): no lag, and no subtraction.
        let lag = if now == self.intended {
            0
        } else {
            us(now.saturating_duration_since(self.intended))
        };
        s.record_start(lag);
        if let Some(k) = self.kind() {
            s.counters_mut().session_types.entry(k).or_default().started += 1;
        }
    }

    /// Counts the end (and the start, as at `now`, if it was not yet), once.
    pub(super) fn close(&mut self, s: &mut IntervalStats, ok: bool, now: Instant) {
        self.open(s, now);
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let t = self
            .kind()
            .map(|k| s.counters_mut().session_types.entry(k).or_default());
        if ok {
            if let Some(t) = t {
                t.completed += 1;
            }
            s.counters_mut().sessions_completed += 1;
        } else {
            if let Some(t) = t {
                t.failed += 1;
            }
            s.counters_mut().sessions_failed += 1;
        }
    }
}
