//! A run's state and the moves between them, in one place.
//!
//! The wire (`RunSummary.state`, `RunEvent.State`) and the metrics keep the lowercase names;
//! inside the controller a run's state is this enum, so a typo cannot create a state and a
//! finished run cannot be revived by a late message.

use stampede_core::report::RunOutcome;

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunState {
    /// Submitted; waiting for enough idle agents.
    Pending,
    /// Agents picked; shards and data are on their way.
    Assigning,
    /// Every agent acknowledged its shard; the start is being scheduled.
    Ready,
    /// Load is running (T0 announced).
    Running,
    /// The schedule ended or a stop was asked; waiting for the agents' last figures.
    Finishing,
    /// Ended, succeeded.
    Done,
    /// Ended, failed (thresholds, errors, an agent lost under `fail`, an internal error).
    Failed,
    /// Ended by a user's abort or a controller shutdown.
    Aborted,
    /// Ended with part of the load missing (an agent lost within the tolerated share).
    Incomplete,
}

impl RunState {
    /// Every state, in the order of a run's life.
    pub const ALL: [RunState; 9] = [
        RunState::Pending,
        RunState::Assigning,
        RunState::Ready,
        RunState::Running,
        RunState::Finishing,
        RunState::Done,
        RunState::Failed,
        RunState::Aborted,
        RunState::Incomplete,
    ];

    /// The name on the wire and in the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::Assigning => "assigning",
            RunState::Ready => "ready",
            RunState::Running => "running",
            RunState::Finishing => "finishing",
            RunState::Done => "done",
            RunState::Failed => "failed",
            RunState::Aborted => "aborted",
            RunState::Incomplete => "incomplete",
        }
    }

    /// Whether the run has ended: its report, if any, is then available.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunState::Done | RunState::Failed | RunState::Aborted | RunState::Incomplete
        )
    }

    /// Whether load may be running (a LoadTest is then `Running`).
    pub fn is_loading(self) -> bool {
        matches!(self, RunState::Running | RunState::Finishing)
    }

    /// The state a report's verdict ends a run in.
    pub fn of_outcome(outcome: RunOutcome) -> Self {
        match outcome {
            RunOutcome::Succeeded => RunState::Done,
            RunOutcome::Failed => RunState::Failed,
            RunOutcome::Aborted => RunState::Aborted,
            RunOutcome::Incomplete => RunState::Incomplete,
        }
    }

    /// Whether a run in this state may move to `next`. A run moves forward through its life
    /// (staying put only to update its message) and may end from any state that has not
    /// ended; an ended run never moves again.
    pub fn may_become(self, next: RunState) -> bool {
        use RunState::*;
        match (self, next) {
            (s, _) if s.is_terminal() => false,
            (_, n) if n.is_terminal() => true,
            (Pending, Pending | Assigning) => true,
            (Assigning, Ready) => true,
            (Ready, Running) => true,
            (Running, Running | Finishing) => true,
            (Finishing, Finishing) => true,
            _ => false,
        }
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run's state with the line that explains it (shown by `stampede status` and the CLI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub state: RunState,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_moves_forward_and_an_ended_run_never_moves() {
        use RunState::*;
        let life = [Pending, Assigning, Ready, Running, Finishing, Done];
        for w in life.windows(2) {
            assert!(w[0].may_become(w[1]), "{} -> {}", w[0], w[1]);
            assert!(
                !w[1].may_become(w[0]) || w[1] == w[0],
                "{} -> {}",
                w[1],
                w[0]
            );
        }
        for s in RunState::ALL {
            for n in RunState::ALL {
                if s.is_terminal() {
                    assert!(!s.may_become(n), "{s} -> {n}");
                } else if n.is_terminal() {
                    assert!(s.may_become(n), "{s} -> {n}");
                }
            }
        }
        assert!(!Running.may_become(Pending));
        assert!(!Pending.may_become(Running));
        assert!(!Ready.may_become(Assigning));
    }

    #[test]
    fn names_are_distinct_and_outcomes_end_runs() {
        let names: std::collections::BTreeSet<_> =
            RunState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(names.len(), RunState::ALL.len());
        for o in [
            RunOutcome::Succeeded,
            RunOutcome::Failed,
            RunOutcome::Aborted,
            RunOutcome::Incomplete,
        ] {
            assert!(RunState::of_outcome(o).is_terminal());
        }
    }
}
