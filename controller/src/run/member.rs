//! An agent's part in one run, as the driver tracks it.

use std::collections::BTreeSet;

use stampede_proto::v1;
use tokio::sync::mpsc;

/// An agent taking part in the run.
pub(super) struct Member {
    pub(super) agent_id: String,
    pub(super) conn_id: u64,
    pub(super) tx: mpsc::Sender<Result<v1::ControllerMessage, tonic::Status>>,
    /// When its stream last brought a Progress (renewals depend on it).
    pub(super) heard: std::sync::Arc<crate::renew::Heard>,
    pub(super) offset_ns: i64,
    pub(super) rtt_ns: i64,
    pub(super) ready: bool,
    pub(super) done: bool,
    pub(super) lost: bool,
    /// Why it was lost (for the report's message).
    pub(super) lost_why: String,
    pub(super) received: Received,
    /// Its stream closed mid-run: until this instant it may reconnect and resume (its load
    /// goes on meanwhile, up to its lease); after it, it is lost.
    pub(super) away_until: Option<tokio::time::Instant>,
}

impl Member {
    /// Whether the run still waits for this agent (neither done nor lost).
    pub(super) fn pending(&self) -> bool {
        !self.done && !self.lost
    }
}

/// The intervals received from one agent, for de-duplicating replays. Intervals arrive in
/// order, so this is "everything below `next`" plus the few that came early: a long run
/// costs a word per agent, not a set entry per interval.
#[derive(Debug, Default)]
pub(super) struct Received {
    pub(super) next: u64,
    pub(super) ahead: BTreeSet<u64>,
}

impl Received {
    /// Records `interval`; false if it was already there.
    pub(super) fn insert(&mut self, interval: u64) -> bool {
        // The common case, the next interval in order: no set node allocated and freed.
        if interval == self.next && self.ahead.is_empty() && interval < u64::MAX - 1 {
            self.next += 1;
            return true;
        }
        if interval < self.next || !self.ahead.insert(interval) {
            return false;
        }
        while self.ahead.remove(&self.next) {
            self.next = self.next.saturating_add(1);
            if self.next == u64::MAX {
                break;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In order, out of order and replayed intervals: each counts once, and `next` is the
    /// first interval not yet received.
    #[test]
    fn received_counts_each_interval_once() {
        let mut r = Received::default();
        assert!(r.insert(0) && r.insert(1));
        assert!(!r.insert(1) && !r.insert(0), "a replay is a duplicate");
        assert!(r.insert(3) && r.insert(5));
        assert_eq!(r.next, 2);
        assert!(!r.insert(3));
        assert!(r.insert(2));
        assert_eq!(r.next, 4);
        assert!(r.insert(4));
        assert_eq!((r.next, r.ahead.len()), (6, 0));
        assert!(r.insert(6));
        assert_eq!(r.next, 7);
    }
}
