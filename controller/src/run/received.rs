//! Which of an agent's intervals the run has, for de-duplicating replays and for knowing
//! when an interval sent in parts is whole.

use std::collections::{BTreeMap, BTreeSet};

use stampede_proto::v1;

/// What a Progress adds to what the run has of its agent's intervals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Delivery {
    /// Already received (a replay), or a part its interval cannot have: merged already or
    /// never.
    Seen,
    /// A part of an interval whose other parts are still to come: merged, the interval not
    /// yet delivered.
    Share,
    /// The interval is now whole: merged, and the agent has reported it.
    Whole,
}

impl Delivery {
    /// Whether the Progress is new and is to be merged.
    pub(super) fn is_new(self) -> bool {
        self != Delivery::Seen
    }
}

/// The intervals received from one agent. Intervals arrive in order, so this is "everything
/// below `next`" plus the few that came early or in part: a long run costs a word per agent,
/// not a set entry per interval.
#[derive(Debug, Default)]
pub(super) struct Received {
    /// The first interval not yet received whole.
    pub(super) next: u64,
    /// Intervals from `next` on that have arrived, whole or in part.
    ahead: BTreeMap<u64, Parts>,
}

/// The parts of one interval received so far.
#[derive(Debug)]
struct Parts {
    of: u32,
    got: BTreeSet<u32>,
}

impl Parts {
    fn whole(&self) -> bool {
        self.got.len() == self.of as usize
    }
}

impl Received {
    /// Records the Progress `p` (its interval and part).
    pub(super) fn insert(&mut self, p: &v1::Progress) -> Delivery {
        self.insert_part(p.interval, p.part, p.parts)
    }

    /// Records part `part` of `parts` of `interval` (0 or 1 `parts`: the whole interval).
    pub(super) fn insert_part(&mut self, interval: u64, part: u32, parts: u32) -> Delivery {
        let Some(of) = stampede_proto::parts::part_count(part, parts) else {
            return Delivery::Seen;
        };
        if interval < self.next || interval == u64::MAX {
            return Delivery::Seen;
        }
        // The common case, the next interval whole and in order: no map node allocated.
        if of == 1 && interval == self.next && self.ahead.is_empty() {
            self.next += 1;
            return Delivery::Whole;
        }
        let entry = self.ahead.entry(interval).or_insert_with(|| Parts {
            of,
            got: BTreeSet::new(),
        });
        if entry.of != of || !entry.got.insert(part) {
            return Delivery::Seen;
        }
        let whole = entry.whole();
        while self.ahead.get(&self.next).is_some_and(Parts::whole) {
            self.ahead.remove(&self.next);
            self.next += 1;
        }
        if whole {
            Delivery::Whole
        } else {
            Delivery::Share
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Delivery, Received};

    fn whole(r: &mut Received, interval: u64) -> Delivery {
        r.insert_part(interval, 0, 0)
    }

    /// In order, out of order and replayed intervals: each counts once, and `next` is the
    /// first interval not yet received.
    #[test]
    fn each_interval_counts_once() {
        let mut r = Received::default();
        assert_eq!(whole(&mut r, 0), Delivery::Whole);
        assert_eq!(whole(&mut r, 1), Delivery::Whole);
        assert_eq!(whole(&mut r, 1), Delivery::Seen, "a replay is a duplicate");
        assert_eq!(whole(&mut r, 0), Delivery::Seen);
        assert!(whole(&mut r, 3).is_new() && whole(&mut r, 5).is_new());
        assert_eq!(r.next, 2);
        assert_eq!(whole(&mut r, 3), Delivery::Seen);
        assert!(whole(&mut r, 2).is_new());
        assert_eq!(r.next, 4);
        assert!(whole(&mut r, 4).is_new());
        assert_eq!((r.next, r.ahead.len()), (6, 0));
        assert_eq!(
            r.insert_part(6, 0, 1),
            Delivery::Whole,
            "one part of one is whole"
        );
        assert_eq!(r.next, 7);
        assert_eq!(whole(&mut r, u64::MAX), Delivery::Seen);
    }

    /// An interval in parts is delivered by the part that completes it, in any order; a
    /// replayed part, a part past the count or a count that changes is refused.
    #[test]
    fn an_interval_in_parts_is_whole_once_every_part_is_in() {
        let mut r = Received::default();
        assert_eq!(r.insert_part(0, 0, 3), Delivery::Share);
        assert_eq!(r.insert_part(0, 0, 3), Delivery::Seen);
        assert_eq!(r.insert_part(0, 3, 3), Delivery::Seen, "numbered from 0");
        assert_eq!(
            r.insert_part(0, 1, 2),
            Delivery::Seen,
            "the count is the first one's"
        );
        assert_eq!(
            r.insert_part(1, 0, u32::MAX),
            Delivery::Seen,
            "past MAX_PARTS"
        );
        assert_eq!(r.insert_part(0, 2, 3), Delivery::Share);
        assert_eq!(r.next, 0, "not delivered while a part is missing");
        assert_eq!(whole(&mut r, 1), Delivery::Whole);
        assert_eq!(r.next, 0);
        assert_eq!(r.insert_part(0, 1, 3), Delivery::Whole);
        assert_eq!((r.next, r.ahead.len()), (2, 0));
        assert_eq!(
            r.insert_part(0, 1, 3),
            Delivery::Seen,
            "a replay after delivery"
        );
        assert_eq!(r.insert_part(2, 1, 2), Delivery::Share);
        assert_eq!(r.insert_part(2, 0, 2), Delivery::Whole);
        assert_eq!(r.next, 3);
    }
}
